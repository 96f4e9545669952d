/* SPDX-License-Identifier: Apache-2.0 */
/* The image overlay (helper/overlay.c), built the way every kernel builds
 * it (the `lowerdir` string of /proc/thread-self/fd links, the only way on
 * Linux 6.1), in a user and mount namespace of this test's own: the layer
 * is the tree held, not what its path names after a swap; each overlay is
 * a superblock of its own; it is read-only; nothing is left attached. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "overlay.h"
#include "util.h"

static int write_file(const char *path, const char *text)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	size_t n = strlen(text);
	return fd >= 0 && write(fd, text, n) == (ssize_t)n ? 0 : -1;
}

/* Root of a new user namespace (this uid and gid as 0) with a private
 * mount namespace and a tmpfs of its own at /tmp. */
static int enter_namespaces(void)
{
	char map[64];
	unsigned uid = (unsigned)getuid(), gid = (unsigned)getgid();
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
		return -1;
	snprintf(map, sizeof(map), "0 %u 1\n", uid);
	if (write_file("/proc/self/setgroups", "deny") < 0 ||
	    write_file("/proc/self/uid_map", map) < 0)
		return -1;
	snprintf(map, sizeof(map), "0 %u 1\n", gid);
	if (write_file("/proc/self/gid_map", map) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return -1;
	return mount("tmpfs", "/tmp", "tmpfs", 0, "mode=0755,size=1m");
}

static void read_marker(int dir, char *buf, size_t size)
{
	buf[0] = '\0';
	_cleanup_close_ int fd = openat(dir, "marker", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, size - 1);
	buf[n > 0 ? n : 0] = '\0';
}

static int count_mounts(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
	int n = 0;
	for (int c; f && (c = fgetc(f)) != EOF;)
		n += c == '\n';
	return n;
}

static int count_entries(const char *path)
{
	_cleanup_closedir_ DIR *d = opendir(path);
	int n = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	return d ? n : -1;
}

/* The super options of the mount at `point`, as mountinfo shows them. */
static void super_options(const char *point, char *buf, size_t size)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096], mp[1024];
	buf[0] = '\0';
	while (f && fgets(line, sizeof(line), f)) {
		char *sep = strstr(line, " - ");
		if (sscanf(line, "%*s %*s %*s %*s %1023s", mp) == 1 && !strcmp(mp, point) && sep) {
			char *opts = strrchr(sep, ' ');
			snprintf(buf, size, "%s", opts ? opts + 1 : "");
		}
	}
}

int main(void)
{
	struct sbx_err err = {0};
	char text[64], opts[2048];
	text[0] = '\0';
	int rc = enter_namespaces();
	if (!check(rc == 0, "a user and mount namespace of our own (%s)",
		   rc < 0 ? strerror(errno) : "ok"))
		return check_done();
	check(mkdir("/tmp/store", 0755) == 0 && mkdir("/tmp/store/img", 0755) == 0 &&
		  write_file("/tmp/store/img/marker", "held\n") == 0 &&
		  mkdir("/tmp/root", 0755) == 0,
	      "the store's tree and the new root");
	_cleanup_close_ int img = open("/tmp/store/img", O_PATH | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int scratch = open("/tmp/root", O_PATH | O_DIRECTORY | O_CLOEXEC);
	check(img >= 0 && scratch >= 0, "the tree held and the new root opened");
	/* The swap SwappedStore makes in the store: after the hold, another
	 * tree at the same path. */
	check(rename("/tmp/store/img", "/tmp/store/old") == 0 &&
		  mkdir("/tmp/store/img", 0755) == 0 &&
		  write_file("/tmp/store/img/marker", "swapped\n") == 0,
	      "the path now names another tree");
	int mounts = count_mounts();

	_cleanup_attached_ struct sbx_attached first = SBX_ATTACHED_INIT;
	rc = sbx_image_overlay(img, scratch, &first, &err);
	if (!check(rc == 0, "an overlay of the tree held: %s", rc < 0 ? err.msg : "ok"))
		return check_done();
	read_marker(first.mnt, text, sizeof(text));
	check(!strcmp(text, "held\n"), "the overlay shows the tree held, not the swapped path: %s",
	      text);
	_cleanup_attached_ struct sbx_attached second = SBX_ATTACHED_INIT;
	_cleanup_close_ int scratch2 = -1;
	check(mkdir("/tmp/root2", 0755) == 0 &&
		  (scratch2 = open("/tmp/root2", O_PATH | O_DIRECTORY | O_CLOEXEC)) >= 0,
	      "a second new root");
	rc = sbx_image_overlay(img, scratch2, &second, &err);
	if (!check(rc == 0, "a second overlay: %s", rc < 0 ? err.msg : "ok"))
		return check_done();
	struct stat a, b, t;
	check(fstat(first.mnt, &a) == 0 && fstat(second.mnt, &b) == 0 && fstat(img, &t) == 0,
	      "stat both overlays and the tree");
	check(a.st_dev != b.st_dev, "two overlays have different st_dev (%ju, %ju)",
	      (uintmax_t)a.st_dev, (uintmax_t)b.st_dev);
	check(a.st_dev != t.st_dev && b.st_dev != t.st_dev, "neither is the tree's own device");

	int e = openat(first.mnt, "marker", O_WRONLY | O_CLOEXEC) < 0 ? errno : 0;
	check(e == EROFS, "a file cannot be opened for writing (%s)", strerror(e));
	e = openat(first.mnt, "new", O_WRONLY | O_CREAT | O_CLOEXEC, 0600) < 0 ? errno : 0;
	check(e == EROFS, "no file can be made (%s)", strerror(e));
	e = mkdirat(first.mnt, "dir", 0700) < 0 ? errno : 0;
	check(e == EROFS, "no directory can be made (%s)", strerror(e));

	super_options("/tmp/root/" SBX_IMAGE_OVERLAY_DIR, opts, sizeof(opts));
	check(strstr(opts, "ro,") == opts, "read-only superblock (%s)", opts);
	check(strstr(opts, "redirect_dir=nofollow") != NULL, "redirects not followed");
	check(!strstr(opts, "upperdir") && !strstr(opts, "workdir"), "no upper layer");
	check(!strstr(opts, "userxattr"), "no userxattr");
	check(!strstr(opts, "metacopy=on"), "no metacopy");
	check(!strstr(opts, "/tmp/store"), "the layer is named by no path of the store");

	/* What rootfs.c does with it: bind an entry (a clone of the overlay's
	 * mount, which Linux 6.1 makes only of an attached one), then end. */
	_cleanup_close_ int entry = openat(first.mnt, "marker", O_PATH | O_CLOEXEC);
	_cleanup_close_ int bind =
	    entry < 0 ? -1
		      : open_tree(entry, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	rc = bind >= 0 && write_file("/tmp/view", "") == 0 &&
		     move_mount(bind, "", AT_FDCWD, "/tmp/view", MOVE_MOUNT_F_EMPTY_PATH) == 0
		 ? 0
		 : errno;
	check(rc == 0, "an entry of the overlay bound (%s)", rc ? strerror(rc) : "ok");
	check(sbx_attach_end(&first, &err) == 0 && sbx_attach_end(&second, &err) == 0,
	      "both overlays taken out: %s", err.msg);
	check(count_entries("/tmp/root") == 0 && count_entries("/tmp/root2") == 0,
	      "nothing is left in the new roots");
	check(count_mounts() == mounts + 1, "only the bind is left attached (%d, was %d)",
	      count_mounts(), mounts);
	_cleanup_close_ int vf = open("/tmp/view", O_RDONLY | O_CLOEXEC);
	ssize_t n = vf < 0 ? -1 : read(vf, text, sizeof(text) - 1);
	text[n > 0 ? n : 0] = '\0';
	check(!strcmp(text, "held\n"), "the bind stays: %s", text);
	return check_done();
}
