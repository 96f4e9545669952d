/* SPDX-License-Identifier: Apache-2.0 */
/* A host uid and gid of the run's own (issue 16).
 *
 * The kernel keeps some counters per host uid whatever the namespaces:
 * epoll watches, pipe buffer pages, unix sockets in flight, inotify
 * instances, processes (RLIMIT_NPROC), queued signals. A sandbox that runs
 * as its caller's uid shares every one of them with the caller (sbxd) and
 * with every other sandbox: filling one stops them all. So the sandbox user
 * (SBX_SANDBOX_UID inside) is mapped to a uid and gid taken from the
 * subordinate ranges /etc/subuid and /etc/subgid give the caller, one
 * slot per live run, written with the distribution's newuidmap and
 * newgidmap as rootless podman does. The run's uid 0 is the caller itself:
 * pid 1 and exec init keep building the sandbox as the caller, the
 * commands run as the slot's uid.
 *
 * A slot is held by an flock on a file named after its uid in a directory
 * of the caller's own (every helper of one user, sbxd's and one-shot runs
 * alike, sees the same one): held by the helper while the run lives, and
 * released when the helper exits, when the kernel also ends the sandbox
 * (pid 1 dies with its helper, and its pid namespace with it). */
#ifndef SBX_HOST_IDS_H
#define SBX_HOST_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "subids.h"

enum sbx_host_ids_mode {
	/* A slot of the caller's subordinate ranges; refused without one. */
	SBX_HOST_IDS_SUBORDINATE,
	/* The caller's own uid and gid (weaker: every per-uid kernel counter
	 * is shared with the caller and every other run of it). */
	SBX_HOST_IDS_SHARED,
};

struct sbx_host_ids {
	enum sbx_host_ids_mode mode;
	uid_t uid; /* SUBORDINATE: the sandbox user's host uid */
	gid_t gid;
	int lock_fd; /* SUBORDINATE: the slot's flock, held while the run lives */
};

/* "subordinate" or "shared" to a mode; -1 for anything else. */
int sbx_host_ids_mode_parse(const char *s);
const char *sbx_host_ids_mode_name(enum sbx_host_ids_mode m);

/* Takes a free slot (mode SUBORDINATE) or records the caller's ids
 * (SHARED). lock_dir: NULL for the default. */
int sbx_host_ids_take(enum sbx_host_ids_mode mode, const char *lock_dir, struct sbx_host_ids *ids,
		      struct sbx_err *err);

/* Writes pid's uid and gid maps: SUBORDINATE maps 0 to the caller and
 * sandbox_id to the slot (newuidmap/newgidmap, which also allow setgroups:
 * pid 1 drops the caller's supplementary groups itself); SHARED maps
 * sandbox_id to the caller and denies setgroups. */
int sbx_host_ids_map(pid_t pid, const struct sbx_host_ids *ids, unsigned sandbox_id,
		     struct sbx_err *err);

/* The same in two steps: _start writes the maps itself (SHARED) or starts
 * newuidmap and newgidmap side by side (SUBORDINATE), so the caller can do
 * other work while they run; _finish waits for both (always call it after
 * a _start that returned 0). */
struct sbx_idmap_tool {
	pid_t child; /* 0: nothing to wait for */
	int said_fd; /* its stdout and stderr */
	char prog[64];
	char map[6][16];
};
struct sbx_idmap_job {
	struct sbx_idmap_tool tool[2]; /* newuidmap, newgidmap */
};
int sbx_host_ids_map_start(pid_t pid, const struct sbx_host_ids *ids, unsigned sandbox_id,
			   struct sbx_idmap_job *job, struct sbx_err *err);
int sbx_host_ids_map_finish(struct sbx_idmap_job *job, struct sbx_err *err);

/* Releases the slot (after the run's processes are gone). */
void sbx_host_ids_release(struct sbx_host_ids *ids);

#endif
