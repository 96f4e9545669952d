/* SPDX-License-Identifier: Apache-2.0 */
/* Disk quotas on state_dir: the bytes a run writes there for its caller
 * (uploaded inputs, declared in full at CreateRun; the execs' kept output,
 * charged chunk by chunk as the monitor spills it) count against the
 * caller's identity and the host, and no write may eat into the free-space
 * reserve, so one identity can neither fill the disk for another nor leave
 * sbxd itself (policy files, the audit log) without room.
 *
 * The counts live on the runs (disk_charged) under the registry lock; an
 * identity's use is the sum over its runs, bounded by runs_max. A run's
 * charge goes when its directory goes (teardown, a failed CreateRun). */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/statvfs.h>

#include "metrics.h"
#include "runs_manager.h"
#include "runs_quota.h"

#define MIB (1024ull * 1024)

struct disk_free {
	uint64_t bytes, inodes;
};

/* Free bytes and inodes on state_dir; UINT64_MAX when statvfs cannot say
 * (the write itself then meets ENOSPC, answered as RESOURCE_EXHAUSTED), and
 * inodes UINT64_MAX on a file system without a fixed number (btrfs says 0
 * of 0). */
static struct disk_free disk_free(const struct sbx_runs *runs)
{
	struct statvfs sv;

	if (!runs->cfg.state_dir || statvfs(runs->cfg.state_dir, &sv) < 0)
		return (struct disk_free){UINT64_MAX, UINT64_MAX};
	return (struct disk_free){(uint64_t)sv.f_bavail * sv.f_frsize,
				  sv.f_files ? (uint64_t)sv.f_favail : UINT64_MAX};
}

static int below_reserve(struct sbx_rpc_status *st, const char *what, uint64_t asked,
			 const char *unit, const char *kind, uint64_t reserve,
			 const char *reserve_unit, const char *key, uint64_t avail)
{
	return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
			    "%s: %llu %s would leave state_dir less than its %s reserve of %llu %s "
			    "(config quotas.%s; %llu %s free)",
			    what, (unsigned long long)asked, unit, kind,
			    (unsigned long long)reserve, reserve_unit, key,
			    (unsigned long long)avail, unit);
}

int quota_reserve_check(struct sbx_runs *runs, uint64_t bytes, uint64_t inodes, const char *what,
			struct sbx_rpc_status *st)
{
	const struct runs_live live = runs_live(runs);
	const struct sbx_quotas *q = &live.quotas;
	uint64_t reserve = q->reserve_mb * MIB;
	struct disk_free avail = disk_free(runs);

	if (avail.bytes < reserve || avail.bytes - reserve < bytes)
		return below_reserve(st, what, bytes, "bytes", "free-space", q->reserve_mb, "MiB",
				     "reserve_mb", avail.bytes);
	/* Directories and empty files take inodes, not blocks: a file system
	 * can run out of them with most of its bytes free. Only writes that
	 * create files are held to this reserve; 0 turns it off. */
	if (inodes && q->reserve_inodes &&
	    (avail.inodes < q->reserve_inodes || avail.inodes - q->reserve_inodes < inodes))
		return below_reserve(st, what, inodes, "inodes", "inode", q->reserve_inodes,
				     "inodes", "reserve_inodes", avail.inodes);
	return 0;
}

/* registry lock held: r's identity's bytes. */
static uint64_t identity_use(const struct sbx_runs *runs, const char *identity)
{
	uint64_t sum = 0;

	for (const struct sbx_run *o = runs->head; o; o = o->next)
		if (!strcmp(o->identity, identity))
			sum += o->disk_charged;
	return sum;
}

/* Whether bytes more fit under a limit of max_mb (0: none) with used in use. */
static bool under_limit(uint64_t used, uint64_t max_mb, uint64_t bytes)
{
	return !max_mb || (used <= max_mb * MIB && max_mb * MIB - used >= bytes);
}

bool quota_fits_locked(struct sbx_runs *runs, const char *identity, uint64_t bytes,
		       const struct sbx_quotas *q)
{
	uint64_t use = q->identity_mb ? identity_use(runs, identity) : 0;

	return under_limit(use, q->identity_mb, bytes) &&
	       under_limit(runs->disk_charged, q->host_mb, bytes);
}

int quota_charge(struct sbx_run *r, uint64_t bytes, uint64_t inodes, const char *what,
		 struct sbx_rpc_status *st)
{
	struct sbx_runs *runs = r->runs;
	const struct runs_live live = runs_live(runs);
	const struct sbx_quotas *q = &live.quotas;
	int rc = 0;

	if (quota_reserve_check(runs, bytes, inodes, what, st) < 0)
		return -1;
	pthread_mutex_lock(&runs->mu);
	if (q->identity_mb) {
		uint64_t use = identity_use(runs, r->identity);

		if (!under_limit(use, q->identity_mb, bytes))
			rc = sbx_rpc_fail(
			    st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
			    "%s: %llu bytes would take %s over its disk quota of %llu "
			    "MiB (config quotas.identity_mb; %llu bytes in use)",
			    what, (unsigned long long)bytes, r->identity,
			    (unsigned long long)q->identity_mb, (unsigned long long)use);
	}
	if (!rc && !under_limit(runs->disk_charged, q->host_mb, bytes))
		rc = sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
				  "%s: %llu bytes would take this host over its disk quota of "
				  "%llu MiB (config quotas.host_mb; %llu bytes in use)",
				  what, (unsigned long long)bytes, (unsigned long long)q->host_mb,
				  (unsigned long long)runs->disk_charged);
	if (!rc) {
		r->disk_charged += bytes;
		runs->disk_charged += bytes;
		sbx_metrics_set(SBX_M_DISK_CHARGED, 0, (int64_t)runs->disk_charged);
	}
	pthread_mutex_unlock(&runs->mu);
	return rc;
}

void quota_uncharge(struct sbx_run *r, uint64_t bytes)
{
	struct sbx_runs *runs = r->runs;

	pthread_mutex_lock(&runs->mu);
	if (bytes > r->disk_charged)
		bytes = r->disk_charged;
	r->disk_charged -= bytes;
	runs->disk_charged -= bytes;
	sbx_metrics_set(SBX_M_DISK_CHARGED, 0, (int64_t)runs->disk_charged);
	pthread_mutex_unlock(&runs->mu);
}

void quota_release_run(struct sbx_run *r)
{
	quota_uncharge(r, UINT64_MAX);
}

bool quota_disk_full(int errnum)
{
	return errnum == ENOSPC || errnum == EDQUOT || errnum == EFBIG;
}
