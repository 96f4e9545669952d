/* SPDX-License-Identifier: Apache-2.0 */
/* Admission by capacity (runs_capacity.c): the CPUs and memory runs
 * commit, against what the host has (config capacity, or measured). */
#ifndef SBX_RUNS_CAPACITY_H
#define SBX_RUNS_CAPACITY_H

#include <stdint.h>

#include "config.h"
#include "policy.h"
#include "rpc_status.h"

struct sbx_runs;
struct runs_host;

/* What one run commits, or many together. */
struct run_cost {
	uint64_t cpu_millis; /* limits.cpu_millis */
	uint64_t memory_mb;  /* its memory cgroup's bound: memory_mb + out_mb + 2 x tmp_mb */
};

/* What the host has and what runs may commit of it. A capacity of 0 is
 * unknown: nothing is admitted or refused by it. */
struct capacity_view {
	struct run_cost capacity;
	struct run_cost allowed; /* capacity x overcommit, memory less the reserve */
	uint64_t reserve_mb;	 /* the reserve in force (SBX_MEMORY_RESERVE_AUTO resolved) */
};

/* A policy's cost (0 for a run without a policy: unit tests). */
struct run_cost capacity_cost(const SbxPolicy *p);
/* capacity x percent / 100, less reserve, never below 0; 0 (unknown)
 * stays 0, and UINT64_MAX on overflow. */
uint64_t capacity_allowed(uint64_t capacity, uint32_t percent, uint64_t reserve);
/* The view from the config's numbers where they are set, else the host's
 * measured ones. */
struct capacity_view capacity_view_of(const struct sbx_config_capacity *cfg,
				      const struct runs_host *host);
/* INVALID_ARGUMENT when cost exceeds what the host can ever give (naming
 * the policy's limit, the number and the config keys); 0 otherwise. */
int capacity_check_ever(const struct capacity_view *v, const struct sbx_config_capacity *cfg,
			struct run_cost cost, struct sbx_rpc_status *st);
/* RESOURCE_EXHAUSTED when cost does not fit beside committed (naming what
 * is committed, so a client can place the run elsewhere); 0 otherwise. */
int capacity_check_now(const struct capacity_view *v, struct run_cost committed,
		       struct run_cost cost, struct sbx_rpc_status *st);
/* Registry lock held: what the registered runs commit. CPU while the
 * sandbox lives (STARTING, CREATED, ACTIVE: a stopped run has no
 * process); memory until the run is unregistered (torn down): a stopped
 * run's /out is a tmpfs still charged to its memory cgroup. */
struct run_cost capacity_committed(struct sbx_runs *runs);
/* The CPUs (affinity, and sbxd's cgroup's cpu.max) and the memory
 * (MemTotal, and sbxd's cgroup's memory.max) sbxd may use, into host. */
void capacity_measure(struct runs_host *host);

#endif
