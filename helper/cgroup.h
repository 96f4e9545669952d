/* SPDX-License-Identifier: Apache-2.0 */
/* Per-run and per-exec cgroups under a subtree delegated to the caller.
 *
 * cgroup v2: one directory per cgroup. cgroup v1 (or a hybrid host): the
 * same relative path under each of the memory, pids and cpu hierarchies.
 * Everything is done through directory fds opened once, so the sandbox's
 * pid 1 keeps working after pivot_root without the cgroup filesystem being
 * visible inside. */
#ifndef SBX_CGROUP_H
#define SBX_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "sbx/v1/policy.pb-c.h"

enum sbx_cg_mode {
	SBX_CG_NONE = 0,
	SBX_CG_V1,
	SBX_CG_V2,
};

enum { SBX_CG_MEMORY, SBX_CG_PIDS, SBX_CG_CPU, SBX_CG_NCTRL };

#define SBX_CG_MOUNT "/sys/fs/cgroup"

/* v1's hierarchy name of a controller: "memory", "pids", "cpu". */
const char *sbx_cg_v1_name(int ctrl);

/* cgroup v1's limit on TCP socket buffers: memory_mb per exec, and
 * memory_mb for all of a run's execs together. */
#define SBX_CG_V1_TCP_LIMIT "memory.kmem.tcp.limit_in_bytes"

struct sbx_cgroup {
	enum sbx_cg_mode mode;
	int fd[SBX_CG_NCTRL]; /* v2 uses fd[0] only; -1 when unused */
	char path[4096];      /* for messages: the (first) absolute directory */
};

const char *sbx_cg_mode_name(enum sbx_cg_mode mode);

/* What this host has, without opening anything: v2, v1 (memory, pids and
 * cpu hierarchies all mounted) or none. */
enum sbx_cg_mode sbx_cgroup_detect(void);

/* How sbx_cgroup_open_root may get a root. */
enum {
	/* On cgroup v2, when no root is named and the caller's own cgroup is
	 * not delegated to it: start a transient systemd scope with
	 * Delegate=yes on the user's manager and move this process into it. */
	SBX_CG_ROOT_MAY_START_SCOPE = 1 << 0,
	/* The caller will start sandboxes from this process: on cgroup v2 a
	 * root named with `rel` that does not hold it is joined (this process
	 * moves to its SBX_CG_SELF_LEAF) or refused, since the sandbox's
	 * processes could not move from here into leaves under it. */
	SBX_CG_ROOT_FOR_SANDBOX = 1 << 1,
};

/* Opens the delegated root: `rel` relative to the cgroup mount(s); NULL means
 * /etc/sbx/cgroup-root when it names a subtree this user can write, else the
 * caller's own cgroup when it is delegated (cgroup_root.c says how that is
 * told), else (with SBX_CG_ROOT_MAY_START_SCOPE) a new systemd scope. Fails
 * (naming the directory and the fix) when none is this user's; with
 * err->errnum EPERM when only a scope could have given one (v2, none
 * named, the own cgroup not delegated, no SBX_CG_ROOT_MAY_START_SCOPE).
 *
 * On v2 the root is also made ready for run cgroups: the processes in it
 * (this one, and sbxd when sbxd's unit's cgroup is the root) move to its
 * leaf SBX_CG_SELF_LEAF, and memory, pids and cpu are enabled for its
 * children (v2 lets a cgroup either hold processes or hand controllers
 * down, not both). */
int sbx_cgroup_open_root(const char *rel, unsigned flags, struct sbx_cgroup *root,
			 struct sbx_err *err);

/* The leaf of a v2 root that holds the processes that were in the root. */
#define SBX_CG_SELF_LEAF "sbx-self"

/* This process's v2 cgroup ("/a/b"), from /proc/self/cgroup's "0::" line. */
int sbx_cgroup_own_v2(char *out, size_t size);

/* Creates child `name` of `parent` (every controller) and opens it. With
 * `controllers`, also enables memory, pids and cpu for its own children (v2). */
int sbx_cgroup_create(const struct sbx_cgroup *parent, const char *name, bool controllers,
		      struct sbx_cgroup *child, struct sbx_err *err);
/* memory (swap off), pids and CPU quota from the policy. */
int sbx_cgroup_set_limits(const struct sbx_cgroup *cg, const Sbx__V1__Limits *limits,
			  struct sbx_err *err);
/* The run's cgroup: its memory limit (what its execs hold together, and
 * what ended execs left in tmpfs), and on v1 its socket buffer limit. */
int sbx_cgroup_set_run_limits(const struct sbx_cgroup *cg, uint64_t bytes, uint64_t socket_bytes,
			      struct sbx_err *err);
/* pids and the CPU quota of the policy on the run's cgroup: every exec of
 * the run shares them (each exec's leaf has them too). */
int sbx_cgroup_set_run_share(const struct sbx_cgroup *cg, const Sbx__V1__Limits *limits,
			     struct sbx_err *err);
/* Moves the calling process, which must have one thread only (exec init
 * before it forks: see cgroup.c for why), into cg; on v1 fails, after the
 * move, when /proc/self/status does not say one thread. */
int sbx_cgroup_join_single_threaded(const struct sbx_cgroup *cg, struct sbx_err *err);
/* What a cgroup's memory did; each 0 when unknown. */
struct sbx_cg_usage {
	uint64_t peak_bytes;
	uint64_t oom_kills; /* processes of it the OOM killer killed */
	bool reached_limit; /* its own limit (not an ancestor's) refused memory */
	uint64_t cpu_usec;  /* v2's cpu.stat usage_usec: every process it held */
};
void sbx_cgroup_usage(const struct sbx_cgroup *cg, struct sbx_cg_usage *usage);
/* SIGKILLs every process in cg until it is empty (cgroup.kill on v2). */
void sbx_cgroup_kill(const struct sbx_cgroup *cg);
/* Removes child `name` of parent, retrying while the kernel finishes
 * tearing down its last tasks. */
int sbx_cgroup_remove(const struct sbx_cgroup *parent, const char *name, struct sbx_err *err);
/* One hierarchy's child `name` of the directory parent_fd: kill what is
 * left in it, then remove it (`where` names the parent in messages). */
int sbx_cgroup_rmdir(int parent_fd, const char *name, const char *where, struct sbx_err *err);
void sbx_cgroup_close(struct sbx_cgroup *cg);
void sbx_cgroup_init(struct sbx_cgroup *cg);

/* Which controller files exist in the root, for `check`. */
bool sbx_cgroup_has_file(const struct sbx_cgroup *cg, int ctrl, const char *file);

#endif
