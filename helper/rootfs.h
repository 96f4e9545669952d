/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox's file system: a read-only tmpfs root holding the image,
 * /data, /out, /tmp, /dev and /proc, and nothing else of the host. */
#ifndef SBX_ROOTFS_H
#define SBX_ROOTFS_H

#include <stdbool.h>
#include <sys/types.h>

#include "err.h"
#include "host_ids.h"
#include "policy.h"

/* SBX_SANDBOX_UID and _GID: host_ids.h (sbxd maps slots to them too). */

/* A run's share of the counters charged to sbxd's uid at the initial user
 * namespace whatever the sandbox's host uid (supervisor.c says why): its
 * user namespace's /proc/sys/user limits. */
#define SBX_RUN_INOTIFY_INSTANCES 16
#define SBX_RUN_INOTIFY_WATCHES	  8192
#define SBX_RUN_UCOUNTS                                                                            \
	{"max_inotify_instances", SBX_STR(SBX_RUN_INOTIFY_INSTANCES)},                             \
	    {"max_inotify_watches", SBX_STR(SBX_RUN_INOTIFY_WATCHES)},                             \
	    {"max_fanotify_groups", "0"},                                                          \
	{                                                                                          \
		"max_fanotify_marks", "0"                                                          \
	}

/* Under the sandbox's /proc: files bound over by a read-only /dev/null,
 * directories covered by an empty read-only tmpfs (absent ones skipped).
 * What stays readable and why: docs/design/sandbox.md. `locks` lists every
 * open file description lock on the host (OFD locks carry no pid, so the
 * pid namespace filter that hides other processes' locks keeps them): the
 * device and inode of files sbxd, other runs and other users hold locked. */
#define SBX_PROC_MASKED_FILES                                                                      \
	"kcore", "keys", "key-users", "timer_list", "sched_debug", "latency_stats", "kallsyms",    \
	    "kmsg", "sysrq-trigger", "cmdline", "config.gz", "diskstats", "partitions", "swaps",   \
	    "modules", "vmallocinfo", "sys/kernel/random/boot_id", "locks"
#define SBX_PROC_MASKED_DIRS "acpi", "scsi", "asound", "driver", "fs", "bus"

/* Terminals of one devpts instance (its `max=`), as a string for
 * fsconfig. Every devpts but the host's initial one draws on one pool,
 * kernel.pty.max - kernel.pty.reserve (4096 - 1024 by default), shared with
 * containers and other users' sandboxes; without a max one exec held 768 of
 * it and nothing stopped it taking all. 16 is plenty for a script (a shell,
 * `script`, pexpect children). It bounds an instance, not a run: an ended
 * exec's instance lives on while another exec holds its masters (passed
 * over a unix socket), so a run's share is bounded only by its descriptors
 * (docs/operator/known-limits.md). */
#define SBX_PTYS_PER_DEVPTS "16"

/* serve's store image: the tree sbxd resolved and holds (--image-root), and
 * the identity (--image-root-id DEV:INO) sbxd found for it beneath its
 * hold. The helper opens the path again; whoever can rename a directory on
 * it could have put another tree there since, so the directory opened must
 * be this one (st_dev and st_ino), or nothing is mounted. */
struct sbx_image_root {
	const char *path; /* NULL: none */
	dev_t dev;
	ino_t ino;
};

/* Run in a fresh mount namespace before anything was mounted in it: opens
 * every source (image, --data, host files the image needs), builds the tree
 * on a new tmpfs, pivots into it and detaches the host. On return cwd is /
 * and the root is read-only. data_dir may be NULL (an empty /data).
 * image_root->path: a store image's tree (serve --image-root), which is
 * the image then, whatever the policy's image string says (its pin); NULL:
 * the policy's "host" or rootfs directory.
 * *sysctl_dir gets an O_PATH fd of /proc/sys beneath the read-only bind
 * that covers it, for exec init's per-namespace sysctls (netns.h). */
int sbx_rootfs_build(const SbxPolicy *policy, const char *data_dir, bool data_no_symlinks,
		     const struct sbx_image_root *image_root, int *sysctl_dir, struct sbx_err *err);

/* In an exec's own mount namespace, while it holds its capabilities there:
 * covers the sandbox's /dev/pts with a devpts instance of the exec's own. */
int sbx_rootfs_private_pts(struct sbx_err *err);

#endif
