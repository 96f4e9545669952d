/* SPDX-License-Identifier: Apache-2.0 */
/* Admission by capacity. A run commits its policy's limits.cpu_millis and
 * its memory cgroup's bound (memory_mb + out_mb + 2 x tmp_mb, what the
 * helper gives the run as a whole: run_files.h); the host has what config
 * capacity says, or what sbxd may use (measured at start); runs may commit
 * capacity x overcommit together, memory less a reserve for the host and
 * sbxd. CreateRun refuses a policy that could never fit (INVALID_ARGUMENT)
 * and one that does not fit beside the runs committed now
 * (RESOURCE_EXHAUSTED), the latter under the registry lock with the
 * runs_max count (run_register), so concurrent CreateRuns never commit
 * past what is allowed.
 *
 * CPU is compressible (cpu.max throttles a run, it never fails one), so
 * its overcommit defaults to 400 %; memory is not (past it the host's OOM
 * killer picks any process, sbxd included): 100 %, less 1 GiB (or an
 * eighth of a smaller host's memory). */
#include "runs_capacity.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc_cgroup.h"
#include "run.h"
#include "run_files.h"
#include "runs_manager.h"

struct run_cost capacity_cost(const SbxPolicy *p)
{
	const Sbx__V1__Limits *l = p ? p->limits : NULL;

	if (!l)
		return (struct run_cost){0, 0};
	return (struct run_cost){l->cpu_millis,
				 sbx_run_memory_mb(l->memory_mb, l->out_mb, l->tmp_mb)};
}

uint64_t capacity_allowed(uint64_t capacity, uint32_t percent, uint64_t reserve)
{
	uint64_t a;

	if (!capacity)
		return 0;
	if (capacity > UINT64_MAX / (percent ? percent : 1))
		return UINT64_MAX;
	a = capacity * percent / 100;
	return a > reserve ? a - reserve : 0;
}

struct capacity_view capacity_view_of(const struct sbx_config_capacity *cfg,
				      const struct runs_host *host)
{
	struct capacity_view v;

	v.capacity.cpu_millis = cfg->cpu_millis ? cfg->cpu_millis : host->cpu_millis;
	v.capacity.memory_mb = cfg->memory_mb ? cfg->memory_mb : host->memory_mb;
	v.allowed.cpu_millis =
	    capacity_allowed(v.capacity.cpu_millis, cfg->cpu_overcommit_percent, 0);
	v.reserve_mb = cfg->memory_reserve_mb;
	if (v.reserve_mb == SBX_MEMORY_RESERVE_AUTO)
		v.reserve_mb = v.capacity.memory_mb / 8 < SBX_MEMORY_RESERVE_MB
				   ? v.capacity.memory_mb / 8
				   : SBX_MEMORY_RESERVE_MB;
	v.allowed.memory_mb =
	    capacity_allowed(v.capacity.memory_mb, cfg->memory_overcommit_percent, v.reserve_mb);
	/* A reserve that takes everything leaves runs nothing: 1 MiB, so
	 * that every run is refused saying so, rather than none checked. */
	if (v.capacity.memory_mb && !v.allowed.memory_mb)
		v.allowed.memory_mb = 1;
	return v;
}

int capacity_check_ever(const struct capacity_view *v, const struct sbx_config_capacity *cfg,
			struct run_cost cost, struct sbx_rpc_status *st)
{
	if (v->capacity.cpu_millis && cost.cpu_millis > v->allowed.cpu_millis)
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__INVALID_ARGUMENT,
		    "limits.cpu_millis %llu exceeds this host's allowed CPU %llu "
		    "millis (%llu CPU millis x capacity.cpu_overcommit_percent %u)",
		    (unsigned long long)cost.cpu_millis, (unsigned long long)v->allowed.cpu_millis,
		    (unsigned long long)v->capacity.cpu_millis, cfg->cpu_overcommit_percent);
	if (v->capacity.memory_mb && cost.memory_mb > v->allowed.memory_mb)
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__INVALID_ARGUMENT,
		    "limits.memory_mb: the run's memory bound %llu MiB (memory_mb + "
		    "out_mb + 2 x tmp_mb) exceeds this host's allowed memory %llu "
		    "MiB (%llu MiB x capacity.memory_overcommit_percent %u, less "
		    "capacity.memory_reserve_mb %llu)",
		    (unsigned long long)cost.memory_mb, (unsigned long long)v->allowed.memory_mb,
		    (unsigned long long)v->capacity.memory_mb, cfg->memory_overcommit_percent,
		    (unsigned long long)v->reserve_mb);
	return 0;
}

int capacity_check_now(const struct capacity_view *v, struct run_cost committed,
		       struct run_cost cost, struct sbx_rpc_status *st)
{
	const struct {
		const char *what, *unit;
		uint64_t cap, allowed, committed, cost;
	} r[] = {
	    {"CPU", "millis", v->capacity.cpu_millis, v->allowed.cpu_millis, committed.cpu_millis,
	     cost.cpu_millis},
	    {"memory", "MiB", v->capacity.memory_mb, v->allowed.memory_mb, committed.memory_mb,
	     cost.memory_mb},
	};

	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		if (!r[i].cap)
			continue;
		if (r[i].committed > r[i].allowed || r[i].allowed - r[i].committed < r[i].cost)
			return sbx_rpc_fail(
			    st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
			    "this host's runs have committed %llu of its allowed %llu %s %s: the "
			    "run's %llu %s do not fit now (free %llu; config capacity); place it "
			    "elsewhere or retry after a teardown",
			    (unsigned long long)r[i].committed, (unsigned long long)r[i].allowed,
			    r[i].unit, r[i].what, (unsigned long long)r[i].cost, r[i].unit,
			    (unsigned long long)(r[i].committed > r[i].allowed
						     ? 0
						     : r[i].allowed - r[i].committed));
	}
	return 0;
}

struct run_cost capacity_committed(struct sbx_runs *runs)
{
	/* The warm pool's members commit what a run of their policy does. */
	struct run_cost sum = {runs->pool_cpu_millis, runs->pool_memory_mb};

	for (struct sbx_run *r = runs->head; r; r = r->next) {
		struct run_cost c = capacity_cost(r->policy);
		bool live;

		run_lock(r);
		live = r->state == RUN_STARTING || run_sandbox_live(r);
		run_unlock(r);
		if (live)
			sum.cpu_millis += c.cpu_millis;
		sum.memory_mb += c.memory_mb;
	}
	return sum;
}

/* ---- measuring ---- */

static bool read_small(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, size - 1, f);
	fclose(f);
	buf[n] = '\0';
	return n > 0;
}

/* The lowest limit on the way from path up to the hierarchy's root:
 * limit() reads one directory's, UINT64_MAX for none. */
static uint64_t lowest_up(const char *mount, const char *path, uint64_t (*limit)(const char *dir),
			  char *where, size_t where_size)
{
	char p[4096], dir[4200];
	uint64_t low = UINT64_MAX;

	snprintf(p, sizeof(p), "%s", path);
	for (;;) {
		uint64_t v;
		char *slash;

		snprintf(dir, sizeof(dir), "%s%s", mount, p);
		v = limit(dir);
		if (v < low) {
			low = v;
			snprintf(where, where_size, "%s", dir);
		}
		slash = strrchr(p, '/');
		if (!slash || slash == p) {
			if (p[0] && strcmp(p, "/")) {
				snprintf(p, sizeof(p), "/");
				continue;
			}
			break;
		}
		*slash = '\0';
	}
	return low;
}

/* The first numbers of dir/name (a cgroup file): how many were read. */
static int numbers_at(const char *dir, const char *name, long long *a, long long *b)
{
	char path[4300], buf[64];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (!read_small(path, buf, sizeof(buf)))
		return 0;
	return sscanf(buf, "%lld %lld", a, b);
}

static uint64_t v2_cpu(const char *dir)
{
	long long quota, period;

	/* "max 100000" reads no number: no limit (nor without a controller). */
	if (numbers_at(dir, "cpu.max", &quota, &period) != 2 || quota <= 0 || period <= 0)
		return UINT64_MAX;
	return (uint64_t)quota * 1000 / (uint64_t)period;
}

static uint64_t v1_cpu(const char *dir)
{
	long long quota, period, unused;

	if (numbers_at(dir, "cpu.cfs_quota_us", &quota, &unused) < 1 || quota <= 0 ||
	    numbers_at(dir, "cpu.cfs_period_us", &period, &unused) < 1 || period <= 0)
		return UINT64_MAX;
	return (uint64_t)quota * 1000 / (uint64_t)period;
}

/* memory.max (v2) or memory.limit_in_bytes (v1), in MiB; "max", or v1's
 * huge "no limit", is never the lowest. */
static uint64_t memory_in(const char *dir, const char *name)
{
	long long bytes, unused;

	if (numbers_at(dir, name, &bytes, &unused) < 1 || bytes <= 0)
		return UINT64_MAX;
	return (uint64_t)bytes >> 20;
}

static uint64_t v2_memory(const char *dir)
{
	return memory_in(dir, "memory.max");
}

static uint64_t v1_memory(const char *dir)
{
	return memory_in(dir, "memory.limit_in_bytes");
}

static uint64_t mem_total_mb(void)
{
	char buf[8192];
	const char *p;

	if (!read_small("/proc/meminfo", buf, sizeof(buf)) || !(p = strstr(buf, "MemTotal:")))
		return 0;
	return strtoull(p + strlen("MemTotal:"), NULL, 10) >> 10;
}

void capacity_measure(struct runs_host *host)
{
	char text[8192], path[4096], cpu_where[4300] = "", mem_where[4300] = "";
	uint64_t cpu = UINT64_MAX, mem = UINT64_MAX;
	cpu_set_t set;
	int ncpu = 0;
	const char *cpu_from = "affinity", *mem_from = "MemTotal";

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		ncpu = CPU_COUNT(&set);
	host->cpu_millis = ncpu > 0 ? (uint64_t)ncpu * 1000 : 0;
	host->memory_mb = mem_total_mb();
	if (read_small("/proc/self/cgroup", text, sizeof(text))) {
		if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0) {
			if (sbx_proc_cgroup_find(text, NULL, path, sizeof(path)) == 0) {
				cpu = lowest_up("/sys/fs/cgroup", path, v2_cpu, cpu_where,
						sizeof(cpu_where));
				mem = lowest_up("/sys/fs/cgroup", path, v2_memory, mem_where,
						sizeof(mem_where));
			}
		} else {
			if (sbx_proc_cgroup_find(text, "cpu", path, sizeof(path)) == 0)
				cpu = lowest_up("/sys/fs/cgroup/cpu", path, v1_cpu, cpu_where,
						sizeof(cpu_where));
			if (sbx_proc_cgroup_find(text, "memory", path, sizeof(path)) == 0)
				mem = lowest_up("/sys/fs/cgroup/memory", path, v1_memory, mem_where,
						sizeof(mem_where));
		}
	}
	if (cpu && cpu < host->cpu_millis) {
		host->cpu_millis = cpu;
		cpu_from = cpu_where;
	}
	if (mem && mem < host->memory_mb) {
		host->memory_mb = mem;
		mem_from = mem_where;
	}
	snprintf(host->capacity_source, sizeof(host->capacity_source), "cpu: %.70s; memory: %.70s",
		 cpu_from, mem_from);
}
