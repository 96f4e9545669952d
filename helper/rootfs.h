/* The sandbox's file system: a read-only tmpfs root holding the image,
 * /data, /out, /tmp, /dev and /proc, and nothing else of the host. */
#ifndef SBX_ROOTFS_H
#define SBX_ROOTFS_H

#include <stdbool.h>

#include "err.h"
#include "policy.h"

#define SBX_SANDBOX_UID 1000
#define SBX_SANDBOX_GID 1000

/* Run in a fresh mount namespace before anything was mounted in it: opens
 * every source (image, --data, host files the image needs), builds the tree
 * on a new tmpfs, pivots into it and detaches the host. On return cwd is /
 * and the root is read-only. data_dir may be NULL (an empty /data). */
int sbx_rootfs_build(const SbxPolicy *policy, const char *data_dir, bool data_no_symlinks,
		     struct sbx_err *err);

#endif
