/* SPDX-License-Identifier: Apache-2.0 */
#include "overlay.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "mount.h"
#include "util.h"

/* Where the empty layer is attached while the overlay is made. */
#define EMPTY_DIR ".sbx-overlay-empty"

/* The kernel resolves the link itself; this makes sure /proc is a procfs
 * and that the link leads to the fd's directory, so a /proc that is not
 * one (or another file mounted over it) fails here rather than giving the
 * overlay another tree. Nothing can change it afterwards: the mount
 * namespace is pid 1's own. */
static int check_fd_link(int fd, const char *link, const char *what, struct sbx_err *err)
{
	struct statfs sfs;
	struct stat a, b;
	if (statfs("/proc/thread-self/fd", &sfs) < 0)
		return sbx_fail_errno(err, "%s: /proc/thread-self/fd", what);
	if (sfs.f_type != PROC_SUPER_MAGIC)
		return sbx_fail(err, "%s: /proc is not a procfs", what);
	if (stat(link, &a) < 0 || fstat(fd, &b) < 0)
		return sbx_fail_errno(err, "%s: %s", what, link);
	if (a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		return sbx_fail(err, "%s: %s is not the directory held", what, link);
	return 0;
}

/* One construction on every kernel: overlayfs's `lowerdir` string, naming
 * the held fds through /proc/thread-self/fd magic links.
 *
 * Why not `lowerdir+` with an fd (Linux 6.8): Debian 12's 6.1 has none
 * (overlayfs before 6.5 takes only the legacy mount data, and fsconfig
 * refuses an fd there), and a probe with a fallback would leave the path
 * 6.1 takes untested on any newer kernel that CI runs. The string path is
 * as strong: the kernel follows each magic link to the open file's own
 * mount and dentry, so the layer is the tree opened from --image-root and
 * checked against --image-root-id, whatever its path holds now; the check
 * above refuses a /proc that is not one. /proc is already needed here:
 * the sandbox's own procfs may only be mounted while a full one is visible.
 *
 * Why the empty layer is attached: overlayfs clones each layer's mount
 * privately (clone_private_mount), which before Linux 6.15 takes only a
 * mount of the caller's mount namespace, never a detached one. It stays
 * attached, inside the new root not yet pivoted into, only while the
 * overlay is created; the overlay itself only while its entries are bound.
 *
 * overlayfs refuses a single lower layer without an upper one ("at least 2
 * lowerdir are needed"), hence the empty tmpfs of one inode below the tree.
 *
 * Options: no upperdir (nothing can be written; the mount is read-only
 * too). redirect_dir=nofollow and metacopy=off: an image's redirect or
 * metacopy xattr must never send a lookup elsewhere. No userxattr: the
 * image's user.overlay.* xattrs stay plain data; the trusted.overlay.*
 * ones overlayfs would read need CAP_SYS_ADMIN in the host's namespace,
 * which this mounter lacks, so they read as absent (the import writes no
 * xattrs at all). xino=off: inode numbers stay the image's own, nothing
 * folded into high bits; index and nfs_export off (both need an upper).
 * Every one of them exists since Linux 4.19. */
int sbx_image_overlay(int img, int scratch, struct sbx_attached *view, struct sbx_err *err)
{
	static const char *const empty_opts[] = {"mode",      "0555", "size", "4k",
						 "nr_inodes", "1",    NULL};
	const uint64_t ro = MOUNT_ATTR_RDONLY | SBX_ATTR_SAFE;
	_cleanup_attached_ struct sbx_attached empty = SBX_ATTACHED_INIT;
	int empty_mnt = sbx_mount_detached("tmpfs", empty_opts, ro | MOUNT_ATTR_NOEXEC, err);
	if (empty_mnt < 0 || sbx_attach_for_now(empty_mnt, scratch, EMPTY_DIR, &empty, err) < 0)
		return sbx_err_prefix(err, "the image overlay's empty layer");

	char img_link[SBX_FD_LINK_MAX], empty_link[SBX_FD_LINK_MAX], lower[2 * SBX_FD_LINK_MAX];
	sbx_fd_link(img_link, img);
	sbx_fd_link(empty_link, empty.mnt);
	if (check_fd_link(img, img_link, "the image overlay's tree", err) < 0 ||
	    check_fd_link(empty.mnt, empty_link, "the image overlay's empty layer", err) < 0)
		return -1;
	snprintf(lower, sizeof(lower), "%s:%s", img_link, empty_link);
	const char *const ovl_opts[] = {
	    "lowerdir", lower,	 "redirect_dir", "nofollow",   "metacopy", "off", "xino",
	    "off",	"index", "off",		 "nfs_export", "off",	   NULL};
	_cleanup_close_ int ovl = sbx_mount_detached("overlay", ovl_opts, ro, err);
	if (ovl < 0) {
		/* What a kernel that truly cannot says: no overlayfs at all, or
		 * one that user namespaces may not mount (before Linux 5.11). */
		if (err->errnum == ENODEV)
			return sbx_err_prefix(err, "the image overlay (kernel without overlayfs, "
						   "CONFIG_OVERLAY_FS)");
		if (err->errnum == EPERM)
			return sbx_err_prefix(err, "the image overlay (overlayfs mounts in a user "
						   "namespace need Linux 5.11)");
		return sbx_err_prefix(err, "the image overlay");
	}
	if (sbx_attach_end(&empty, err) < 0)
		return sbx_err_prefix(err, "the image overlay's empty layer");
	/* Attached too, for its binds: Debian 12's 6.1 clones nothing of a
	 * detached mount (open_tree refused every bind with EINVAL; 6.18
	 * does clone). */
	if (sbx_attach_for_now(sbx_steal_fd(ovl), scratch, SBX_IMAGE_OVERLAY_DIR, view, err) < 0)
		return sbx_err_prefix(err, "the image overlay");
	return 0;
}
