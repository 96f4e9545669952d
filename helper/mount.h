/* SPDX-License-Identifier: Apache-2.0 */
/* New file system instances through the mount API (fsopen, fsconfig,
 * fsmount): the one way the helper makes a mount of its own. */
#ifndef SBX_HELPER_MOUNT_H
#define SBX_HELPER_MOUNT_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"
#include "util.h"

/* Mount-point flags for everything the helper makes: set-id bits and device
 * nodes never mean anything inside. */
#define SBX_ATTR_SAFE (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)

/* A new `fstype` instance, configured but attached nowhere: returns the fd
 * of its detached mount. `opts` is a NULL-terminated key, value list (a
 * NULL value sets a flag); `attrs` are MOUNT_ATTR_* flags. */
int sbx_mount_detached(const char *fstype, const char *const *opts, uint64_t attrs,
		       struct sbx_err *err);

/* A detached mount attached for a while at dir/name, a directory made for
 * it: before Linux 6.15 the kernel takes only mounts of the caller's mount
 * namespace as overlayfs layers and as open_tree's sources, never a detached
 * one. sbx_attach_end detaches it again and removes the directory; `mnt`
 * stays an fd of the mount (of whatever clones were made of it). */
struct sbx_attached {
	int dir, mnt;
	const char *name;
	bool made_dir, attached;
};
#define SBX_ATTACHED_INIT                                                                          \
	{                                                                                          \
		.dir = -1, .mnt = -1                                                               \
	}

/* Takes `mnt` over (closed by sbx_attach_end's cleanup form, even on
 * failure). */
int sbx_attach_for_now(int mnt, int dir, const char *name, struct sbx_attached *a,
		       struct sbx_err *err);
int sbx_attach_end(struct sbx_attached *a, struct sbx_err *err);
/* The cleanup form: ends it (after another failure, which is the one
 * reported) and closes `mnt`. */
void sbx_attach_endp(struct sbx_attached *a);
#define _cleanup_attached_ _cleanup_(sbx_attach_endp)

/* /proc/thread-self/fd/N: the magic link the kernel resolves to the open
 * file's own mount and dentry (nd_jump_link), never to a name. */
#define SBX_FD_LINK_MAX sizeof("/proc/thread-self/fd/-2147483648")
void sbx_fd_link(char *buf, int fd);

#endif
