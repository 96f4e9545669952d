/* SPDX-License-Identifier: Apache-2.0 */
#include "mount.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include "util.h"

int sbx_mount_detached(const char *fstype, const char *const *opts, uint64_t attrs,
		       struct sbx_err *err)
{
	_cleanup_close_ int fs = fsopen(fstype, FSOPEN_CLOEXEC);
	if (fs < 0)
		return sbx_fail_errno(err, "fsopen %s", fstype);
	for (const char *const *o = opts; o && o[0]; o += 2) {
		int rc = o[1] ? fsconfig(fs, FSCONFIG_SET_STRING, o[0], o[1], 0)
			      : fsconfig(fs, FSCONFIG_SET_FLAG, o[0], NULL, 0);
		if (rc < 0)
			return sbx_fail_errno(err, "%s option %s", fstype, o[0]);
	}
	if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return sbx_fail_errno(err, "create %s", fstype);
	int mnt = fsmount(fs, FSMOUNT_CLOEXEC, (unsigned)attrs);
	if (mnt < 0)
		return sbx_fail_errno(err, "fsmount %s", fstype);
	return mnt;
}
