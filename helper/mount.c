/* SPDX-License-Identifier: Apache-2.0 */
#include "mount.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

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

void sbx_fd_link(char *buf, int fd)
{
	snprintf(buf, SBX_FD_LINK_MAX, "/proc/thread-self/fd/%d", fd);
}

int sbx_attach_for_now(int mnt, int dir, const char *name, struct sbx_attached *a,
		       struct sbx_err *err)
{
	*a = (struct sbx_attached){.dir = dir, .mnt = mnt, .name = name};
	if (mkdirat(dir, name, 0500) < 0)
		return sbx_fail_errno(err, "mkdir %s", name);
	a->made_dir = true;
	if (move_mount(mnt, "", dir, name, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return sbx_fail_errno(err, "attach at %s", name);
	a->attached = true;
	return 0;
}

int sbx_attach_end(struct sbx_attached *a, struct sbx_err *err)
{
	if (a->attached) {
		/* By the mount's own fd: the link leads to this mount's root,
		 * whatever was mounted at the directory since. Clones made of
		 * it (overlayfs's private ones, open_tree's) stay. */
		char link[SBX_FD_LINK_MAX];
		sbx_fd_link(link, a->mnt);
		if (umount2(link, MNT_DETACH) < 0)
			return sbx_fail_errno(err, "detach %s", a->name);
		a->attached = false;
	}
	if (a->made_dir) {
		if (unlinkat(a->dir, a->name, AT_REMOVEDIR) < 0)
			return sbx_fail_errno(err, "remove %s", a->name);
		a->made_dir = false;
	}
	return 0;
}

void sbx_attach_endp(struct sbx_attached *a)
{
	struct sbx_err ignored;
	/* Unchecked: this follows another failure, which is what is
	 * reported, and the sandbox is not built. */
	(void)sbx_attach_end(a, &ignored);
	if (a->mnt >= 0)
		close(a->mnt);
	a->mnt = -1;
}
