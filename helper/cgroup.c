/* SPDX-License-Identifier: Apache-2.0 */
#include "cgroup.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "fds.h"
#include "path.h"
#include "util.h"

#define CPU_PERIOD_US 100000

static const char *const v1_ctrl_name[SBX_CG_NCTRL] = {"memory", "pids", "cpu"};

const char *sbx_cg_v1_name(int ctrl)
{
	return v1_ctrl_name[ctrl];
}

const char *sbx_cg_mode_name(enum sbx_cg_mode mode)
{
	switch (mode) {
	case SBX_CG_V2:
		return "v2";
	case SBX_CG_V1:
		return "v1";
	default:
		return "none";
	}
}

void sbx_cgroup_init(struct sbx_cgroup *cg)
{
	cg->mode = SBX_CG_NONE;
	for (int i = 0; i < SBX_CG_NCTRL; i++)
		cg->fd[i] = -1;
	cg->path[0] = '\0';
}

void sbx_cgroup_close(struct sbx_cgroup *cg)
{
	for (int i = 0; i < SBX_CG_NCTRL; i++) {
		if (cg->fd[i] >= 0)
			close(cg->fd[i]);
		cg->fd[i] = -1;
	}
}

static int nctrl(const struct sbx_cgroup *cg)
{
	return cg->mode == SBX_CG_V1 ? SBX_CG_NCTRL : 1;
}

static bool is_fs(const char *path, unsigned long magic)
{
	struct statfs st;
	return statfs(path, &st) == 0 && (unsigned long)st.f_type == magic;
}

enum sbx_cg_mode sbx_cgroup_detect(void)
{
	if (is_fs(SBX_CG_MOUNT, CGROUP2_SUPER_MAGIC))
		return SBX_CG_V2;
	for (int i = 0; i < SBX_CG_NCTRL; i++) {
		char p[64];
		snprintf(p, sizeof(p), SBX_CG_MOUNT "/%s", v1_ctrl_name[i]);
		if (!is_fs(p, CGROUP_SUPER_MAGIC))
			return SBX_CG_NONE;
	}
	return SBX_CG_V1;
}

int sbx_cgroup_create(const struct sbx_cgroup *parent, const char *name, bool controllers,
		      struct sbx_cgroup *child, struct sbx_err *err)
{
	sbx_cgroup_init(child);
	child->mode = parent->mode;
	for (int i = 0; i < nctrl(parent); i++) {
		/* 0700: a run's cgroups show its host pids and memory use; a
		 * directory no other user may enter hides its files whatever
		 * their modes. */
		if (mkdirat(parent->fd[i], name, 0700) < 0 && errno != EEXIST) {
			sbx_fail_errno(err, "cgroup mkdir %s/%s", parent->path, name);
			goto fail;
		}
		child->fd[i] = openat(parent->fd[i], name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (child->fd[i] < 0) {
			sbx_fail_errno(err, "cgroup open %s/%s", parent->path, name);
			goto fail;
		}
	}
	snprintf(child->path, sizeof(child->path), "%.3900s/%.150s", parent->path, name);
	if (controllers && child->mode == SBX_CG_V2 &&
	    sbx_write_at(child->fd[0], "cgroup.subtree_control", "+memory +pids +cpu", err) < 0) {
		sbx_err_prefix(err, "cgroup %s: enabling memory, pids and cpu", child->path);
		goto fail;
	}
	return 0;
fail:
	sbx_cgroup_close(child);
	for (int i = 0; i < nctrl(parent); i++)
		unlinkat(parent->fd[i], name, AT_REMOVEDIR);
	return -1;
}

/* Without swap accounting a memory limit only bounds RAM; that matters
 * only where there is swap to spill into. */
static bool host_has_swap(void)
{
	char buf[8192];
	_cleanup_close_ int fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (n <= 0)
		return true; /* cannot tell: assume the worse */
	buf[n] = '\0';
	const char *p = strstr(buf, "SwapTotal:");
	return !p || strtoull(p + strlen("SwapTotal:"), NULL, 10) > 0;
}

int sbx_cgroup_set_limits(const struct sbx_cgroup *cg, const Sbx__V1__Limits *l,
			  struct sbx_err *err)
{
	char mem[32], pids[32], cpu[64];
	snprintf(mem, sizeof(mem), "%llu", (unsigned long long)l->memory_mb << 20);
	snprintf(pids, sizeof(pids), "%u", l->pids);
	int rc = 0;
	if (cg->mode == SBX_CG_V2) {
		snprintf(cpu, sizeof(cpu), "%llu %u",
			 (unsigned long long)l->cpu_millis * CPU_PERIOD_US / 1000, CPU_PERIOD_US);
		rc |= sbx_write_at(cg->fd[0], "memory.max", mem, err);
		/* No swap: a memory limit that can spill to swap is no limit. */
		if (faccessat(cg->fd[0], "memory.swap.max", F_OK, 0) == 0)
			rc |= sbx_write_at(cg->fd[0], "memory.swap.max", "0", err);
		else if (host_has_swap())
			return sbx_fail(err,
					"cgroup %s: the host has swap but no swap accounting "
					"(memory.swap.max): the memory limit cannot be enforced",
					cg->path);
		/* One OOM kill takes the exec's whole tree, so "oom" is unambiguous. */
		rc |= sbx_write_at(cg->fd[0], "memory.oom.group", "1", err);
		rc |= sbx_write_at(cg->fd[0], "pids.max", pids, err);
		rc |= sbx_write_at(cg->fd[0], "cpu.max", cpu, err);
	} else {
		snprintf(cpu, sizeof(cpu), "%llu",
			 (unsigned long long)l->cpu_millis * CPU_PERIOD_US / 1000);
		rc |= sbx_write_at(cg->fd[SBX_CG_MEMORY], "memory.limit_in_bytes", mem, err);
		if (faccessat(cg->fd[SBX_CG_MEMORY], "memory.memsw.limit_in_bytes", F_OK, 0) == 0)
			rc |= sbx_write_at(cg->fd[SBX_CG_MEMORY], "memory.memsw.limit_in_bytes",
					   mem, err);
		else if (host_has_swap())
			return sbx_fail(err,
					"cgroup %s: the host has swap but no swap accounting "
					"(memory.memsw.*, swapaccount=1): the memory limit "
					"cannot be enforced",
					cg->path);
		/* v1 charges TCP buffers to a memory cgroup only once this is
		 * set (and UDP never): without it, loopback queues of the exec's
		 * own network namespace hold host memory its limit never sees.
		 * Once set, v1 charges TCP and UDP alike to it (measured): a
		 * separate counter, so sockets add at most memory_mb more. */
		if (faccessat(cg->fd[SBX_CG_MEMORY], SBX_CG_V1_TCP_LIMIT, F_OK, 0) < 0)
			return sbx_fail(err,
					"cgroup %s: no " SBX_CG_V1_TCP_LIMIT
					": cgroup v1 would not "
					"charge socket buffers, so the memory limit cannot be "
					"enforced",
					cg->path);
		rc |= sbx_write_at(cg->fd[SBX_CG_MEMORY], SBX_CG_V1_TCP_LIMIT, mem, err);
		rc |= sbx_write_at(cg->fd[SBX_CG_PIDS], "pids.max", pids, err);
		rc |= sbx_write_at(cg->fd[SBX_CG_CPU], "cpu.cfs_period_us", "100000", err);
		rc |= sbx_write_at(cg->fd[SBX_CG_CPU], "cpu.cfs_quota_us", cpu, err);
	}
	if (rc)
		return sbx_err_prefix(err, "cgroup %s: setting limits", cg->path);
	return 0;
}

int sbx_cgroup_set_run_limits(const struct sbx_cgroup *cg, uint64_t bytes, uint64_t socket_bytes,
			      struct sbx_err *err)
{
	char val[32];
	snprintf(val, sizeof(val), "%llu", (unsigned long long)bytes);
	if (cg->mode == SBX_CG_V2) {
		/* What ended execs left in tmpfs is charged here, not to a leaf:
		 * without this it could be swapped out past the run's bound.
		 * (Socket buffers need nothing: v2 charges them to memory.max.) */
		if (sbx_write_at(cg->fd[0], "memory.max", val, err) < 0)
			return -1;
		if (faccessat(cg->fd[0], "memory.swap.max", F_OK, 0) == 0)
			return sbx_write_at(cg->fd[0], "memory.swap.max", "0", err);
		return 0;
	}
	if (cg->mode != SBX_CG_V1)
		return 0;
	if (sbx_write_at(cg->fd[SBX_CG_MEMORY], "memory.limit_in_bytes", val, err) < 0)
		return -1;
	/* v1 charges an exec's socket buffers to its leaf's tcp counter and
	 * on up through the run's (hierarchically), but a counter without a
	 * limit bounds nothing: without this, N concurrent execs held N x
	 * memory_mb of host kernel memory between them. */
	snprintf(val, sizeof(val), "%llu", (unsigned long long)socket_bytes);
	return sbx_write_at(cg->fd[SBX_CG_MEMORY], SBX_CG_V1_TCP_LIMIT, val, err);
}

int sbx_cgroup_set_run_share(const struct sbx_cgroup *cg, const Sbx__V1__Limits *l,
			     struct sbx_err *err)
{
	char pids[32], quota[32], cpu[64];
	int rc = 0;
	snprintf(pids, sizeof(pids), "%u", l->pids);
	snprintf(quota, sizeof(quota), "%llu",
		 (unsigned long long)l->cpu_millis * CPU_PERIOD_US / 1000);
	if (cg->mode == SBX_CG_V2) {
		snprintf(cpu, sizeof(cpu), "%s %u", quota, CPU_PERIOD_US);
		rc |= sbx_write_at(cg->fd[0], "pids.max", pids, err);
		rc |= sbx_write_at(cg->fd[0], "cpu.max", cpu, err);
	} else if (cg->mode == SBX_CG_V1) {
		rc |= sbx_write_at(cg->fd[SBX_CG_PIDS], "pids.max", pids, err);
		rc |= sbx_write_at(cg->fd[SBX_CG_CPU], "cpu.cfs_period_us", "100000", err);
		rc |= sbx_write_at(cg->fd[SBX_CG_CPU], "cpu.cfs_quota_us", quota, err);
	}
	return rc ? sbx_err_prefix(err, "cgroup %s: setting the run's pids and cpu", cg->path) : 0;
}

/* The caller's threads, from /proc/self/status; -1 if unreadable. */
static long own_threads(void)
{
	char buf[4096];
	if (sbx_read_at(AT_FDCWD, "/proc/self/status", buf, sizeof(buf)) < 0)
		return -1;
	const char *t = strstr(buf, "\nThreads:");
	return t ? strtol(t + strlen("\nThreads:"), NULL, 10) : -1;
}

/* v1 moves a thread through `tasks` and a whole process through
 * cgroup.procs. A process's move takes cgroup_threadgroup_rwsem for
 * writing, which waits for an RCU grace period (8-12 ms measured on
 * HZ=250) while holding the cgroup mutex, so every other run's mkdir and
 * rmdir wait with it. Only "0" written to `tasks`, the calling thread
 * itself, takes no such lock (the kernel's single-thread migration change,
 * upstream 9a3284fad42f; a kernel without it takes the lock either way):
 * its own pid written there takes it again. For a process of one thread,
 * that thread is the whole process: its memory is charged through its mm's
 * owner, which is that thread, and whatever it forks is born where it is.
 * Counted after the move, so that a thread made before it, which the
 * kernel would leave where it was, fails the join instead of running
 * outside the leaf; one made after it is born in the leaf. v2 moves
 * processes only (exec init is born in its leaf there unless clone3 was
 * refused). */
int sbx_cgroup_join_single_threaded(const struct sbx_cgroup *cg, struct sbx_err *err)
{
	const char *file = cg->mode == SBX_CG_V1 ? "tasks" : "cgroup.procs";
	for (int i = 0; i < nctrl(cg); i++)
		if (sbx_write_at(cg->fd[i], file, "0", err) < 0)
			return sbx_err_prefix(err, "cgroup %s: joining", cg->path);
	long threads = cg->mode == SBX_CG_V1 ? own_threads() : 1;
	if (threads != 1)
		return sbx_fail(err,
				"cgroup %s: joining: this process has %ld threads (-1: unknown), "
				"and v1's `tasks` moved only the calling one",
				cg->path, threads);
	return 0;
}

static uint64_t keyed_value(const char *text, const char *key)
{
	size_t klen = strlen(key);
	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, key, klen) == 0 && p[klen] == ' ')
			return strtoull(p + klen + 1, NULL, 10);
	return 0;
}

static uint64_t number_at(int dirfd, const char *file)
{
	char buf[64];
	return sbx_read_at(dirfd, file, buf, sizeof(buf)) == 0 ? strtoull(buf, NULL, 10) : 0;
}

/* How far below its limit a v1 cgroup's peak may stay when the limit
 * refused a charge: the charge that failed (up to a 2 MiB huge page) never
 * made it into the peak. */
#define V1_NEAR_LIMIT (2ULL << 20)

void sbx_cgroup_usage(const struct sbx_cgroup *cg, struct sbx_cg_usage *u)
{
	char buf[4096];
	*u = (struct sbx_cg_usage){0};
	if (cg->mode == SBX_CG_V2) {
		u->peak_bytes = number_at(cg->fd[0], "memory.peak");
		if (sbx_read_at(cg->fd[0], "cpu.stat", buf, sizeof(buf)) == 0)
			u->cpu_usec = keyed_value(buf, "usage_usec");
		if (sbx_read_at(cg->fd[0], "memory.events", buf, sizeof(buf)) == 0) {
			u->oom_kills = keyed_value(buf, "oom_kill");
			/* Counted in the cgroup whose memory.max was hit, not
			 * in the one the OOM killer then picked from. */
			u->reached_limit = keyed_value(buf, "max") > 0;
		}
	} else if (cg->mode == SBX_CG_V1) {
		int fd = cg->fd[SBX_CG_MEMORY];
		u->peak_bytes = number_at(fd, "memory.max_usage_in_bytes");
		/* cpuacct mounted with cpu (systemd's hybrid layout: cpu,cpuacct)
		 * keeps the leaf's total as v2's cpu.stat does, in ns; where it is
		 * a hierarchy of its own there is none here (0: the report's). */
		u->cpu_usec = number_at(cg->fd[SBX_CG_CPU], "cpuacct.usage") / 1000;
		if (sbx_read_at(fd, "memory.oom_control", buf, sizeof(buf)) == 0)
			u->oom_kills = keyed_value(buf, "oom_kill");
		/* v1 counts no failed charge of memory+swap (memory.memsw.failcnt
		 * stays 0 on 6.x, and that limit, equal to memory's, is the one
		 * hit first): the peaks say whether this cgroup got to its own. */
		uint64_t limit = number_at(fd, "memory.limit_in_bytes");
		uint64_t memsw = number_at(fd, "memory.memsw.max_usage_in_bytes");
		uint64_t peak = memsw > u->peak_bytes ? memsw : u->peak_bytes;
		u->reached_limit = limit > 0 && peak + V1_NEAR_LIMIT >= limit;
	}
}

/* v1 has no atomic kill: sweep cgroup.procs until it is empty. The pids
 * limit bounds how many a fork loop can make between sweeps. */
static void kill_members(int dirfd)
{
	for (int round = 0; round < 1000; round++) {
		char buf[65536];
		if (sbx_read_at(dirfd, "cgroup.procs", buf, sizeof(buf)) < 0 || !buf[0])
			return;
		for (char *save, *t = strtok_r(buf, "\n", &save); t;
		     t = strtok_r(NULL, "\n", &save))
			kill((pid_t)atoi(t), SIGKILL);
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

void sbx_cgroup_kill(const struct sbx_cgroup *cg)
{
	if (cg->mode == SBX_CG_NONE)
		return;
	struct sbx_err ignored;
	if (cg->mode == SBX_CG_V2 && sbx_write_at(cg->fd[0], "cgroup.kill", "1", &ignored) == 0)
		return;
	kill_members(cg->mode == SBX_CG_V1 ? cg->fd[SBX_CG_PIDS] : cg->fd[0]);
}

int sbx_cgroup_rmdir(int parent_fd, const char *name, const char *where, struct sbx_err *err)
{
	/* Whatever is still inside (a killed helper's leftovers) goes first; an
	 * exiting task can then keep the cgroup busy for a moment after it was
	 * reaped: two seconds is far beyond what the kernel needs. */
	int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : sbx_fail_errno(err, "cgroup %s/%s", where, name);
	kill_members(fd);
	close(fd);
	for (int tries = 0;; tries++) {
		if (unlinkat(parent_fd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY || tries >= 2000)
			return sbx_fail_errno(err, "cgroup rmdir %s/%s", where, name);
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

int sbx_cgroup_remove(const struct sbx_cgroup *parent, const char *name, struct sbx_err *err)
{
	int rc = 0;
	for (int i = 0; i < nctrl(parent); i++)
		if (parent->fd[i] >= 0 &&
		    sbx_cgroup_rmdir(parent->fd[i], name, parent->path, err) < 0)
			rc = -1;
	return rc;
}

bool sbx_cgroup_has_file(const struct sbx_cgroup *cg, int ctrl, const char *file)
{
	int fd = cg->mode == SBX_CG_V1 ? cg->fd[ctrl] : cg->fd[0];
	return fd >= 0 && faccessat(fd, file, F_OK, 0) == 0;
}
