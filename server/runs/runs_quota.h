/* SPDX-License-Identifier: Apache-2.0 */
/* What callers' uploads and kept output take of state_dir (runs_quota.c). */
#ifndef SBX_RUNS_QUOTA_H
#define SBX_RUNS_QUOTA_H

#include <stdbool.h>
#include <stdint.h>

#include "rpc_status.h"
#include "run.h"

struct sbx_quotas;

/* Charges bytes that r is about to write under state_dir (what: "inputs",
 * "output") to r's identity and the host: 0, or -1 with RESOURCE_EXHAUSTED
 * naming the quota (quotas.identity_mb, quotas.host_mb) or the free-space
 * reserve (quotas.reserve_mb, quotas.reserve_inodes for the inodes it is
 * about to create) it would break. r must be registered. */
/* runs->mu held: whether bytes more for identity fit its disk quota and
 * the host's (q), as quota_charge would judge now. */
bool quota_fits_locked(struct sbx_runs *runs, const char *identity, uint64_t bytes,
		       const struct sbx_quotas *q);
int quota_charge(struct sbx_run *r, uint64_t bytes, uint64_t inodes, const char *what,
		 struct sbx_rpc_status *st);
/* Gives back bytes charged but not written. */
void quota_uncharge(struct sbx_run *r, uint64_t bytes);
/* Everything r was charged: its directory is gone (or going). */
void quota_release_run(struct sbx_run *r);
/* Only the free-space reserves, for bytes already charged (a PutInput
 * chunk): the disk may have filled since. */
int quota_reserve_check(struct sbx_runs *runs, uint64_t bytes, uint64_t inodes, const char *what,
			struct sbx_rpc_status *st);
/* A write failed because the disk (or the file size limit, or a quota of
 * the file system) is full: RESOURCE_EXHAUSTED, not sbxd's fault. */
bool quota_disk_full(int errnum);

#endif
