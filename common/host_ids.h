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
 * (pid 1 dies with its helper, and its pid namespace with it).
 *
 * sbxd takes the slot itself and hands the helper the lock with a user
 * namespace it made for the slot and mapped once (0 to sbxd's uid,
 * sandbox_id to the slot's), kept for later runs of the slot
 * (server/runs/runs_slots.c): the run's own user namespace is then made
 * inside that one, and mapped by the helper without the setuid tools
 * (helper/supervisor.c). */
#ifndef SBX_HOST_IDS_H
#define SBX_HOST_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "subids.h"

/* The sandbox user, inside every run's user namespace; sbxd's slot
 * namespaces map it too (server/runs/runs_slots.c). */
#define SBX_SANDBOX_UID 1000
#define SBX_SANDBOX_GID 1000

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
	/* SUBORDINATE, from sbxd: the slot's user namespace, mapped 0 to the
	 * caller and the sandbox id to uid and gid; -1: none (the tools map
	 * the run's own namespace from the host's). */
	int userns_fd;
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

/* "UID,GID,LOCK_FD,USERNS_FD" (serve --host-slot: the slot sbxd took) into
 * a SUBORDINATE ids; -1 unless four decimal numbers, ids above 0 and fds
 * 3 or more. Nothing is checked of the fds here: see _given_check. */
int sbx_host_ids_given_parse(const char *text, struct sbx_host_ids *ids);

/* "UID,GID" (sbx-helper slot-userns) into a SUBORDINATE ids without a lock
 * or namespace; -1 unless two decimal numbers above 0. */
int sbx_host_ids_pair_parse(const char *text, struct sbx_host_ids *ids);

/* Before a given slot is used: its lock fd is the file of ids->uid in the
 * lock directory (lock_dir NULL: the default) and the flock on it is held
 * through that fd (taking it again through it succeeds; another holder's
 * makes it fail), and userns_fd is a user namespace. -1 with err naming
 * what was wrong; nothing of the slot is used then. */
int sbx_host_ids_given_check(const char *lock_dir, const struct sbx_host_ids *ids,
			     struct sbx_err *err);

/* Whether the user namespace fd is this euid's and a child of the caller's
 * own (a slot's namespace as sbxd keeps it and the helper takes it): 0, or
 * -1 with err saying "a user namespace that is not WHO uid's" or "... not a
 * child of WHO". */
int sbx_userns_made_here(int fd, const char *who, struct sbx_err *err);

/* Whether the maps in /proc/self/{uid,gid}_map (read inside the slot's user
 * namespace: they are its maps onto the host's) are exactly 0 to the
 * caller's uid (gid) and sandbox_id to the slot's, one id each. 0 yes; -1
 * with err saying what the namespace maps instead. */
int sbx_host_ids_maps_check(const struct sbx_host_ids *ids, uid_t self_uid, gid_t self_gid,
			    unsigned sandbox_id, struct sbx_err *err);

/* Releases the slot (after the run's processes are gone) and closes the
 * slot's user namespace if it was given one. */
void sbx_host_ids_release(struct sbx_host_ids *ids);

#endif
