/* SPDX-License-Identifier: Apache-2.0 */
/* New file system instances through the mount API (fsopen, fsconfig,
 * fsmount): the one way the helper makes a mount of its own. */
#ifndef SBX_HELPER_MOUNT_H
#define SBX_HELPER_MOUNT_H

#include <stdint.h>

#include "err.h"

/* Mount-point flags for everything the helper makes: set-id bits and device
 * nodes never mean anything inside. */
#define SBX_ATTR_SAFE (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)

/* A new `fstype` instance, configured but attached nowhere: returns the fd
 * of its detached mount. `opts` is a NULL-terminated key, value list (a
 * NULL value sets a flag); `attrs` are MOUNT_ATTR_* flags. */
int sbx_mount_detached(const char *fstype, const char *const *opts, uint64_t attrs,
		       struct sbx_err *err);

#endif
