/* SPDX-License-Identifier: Apache-2.0 */
#include "rootfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mount.h"
#include "overlay.h"
#include "tree.h"
#include "util.h"

/* A store image's entries at its top and in its etc/: the root tmpfs
 * (4096 inodes) holds one inode for each, beside what sbx makes. A Debian
 * rootfs has about 20 and 200. */
#define STORE_TOP_MAX 1024
#define STORE_ETC_MAX 2048

static int pivot_root(const char *new_root, const char *put_old)
{
	return (int)syscall(SYS_pivot_root, new_root, put_old);
}

/* Clones the tree at src_fd (opened in this mount namespace) onto
 * root_fd/target with `attrs`, without ever resolving a host path again. */
static int bind_fd(int src_fd, int root_fd, const char *target, uint64_t attrs, bool recursive,
		   struct sbx_err *err)
{
	unsigned rec = recursive ? AT_RECURSIVE : 0;
	_cleanup_close_ int tree =
	    open_tree(src_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | rec);
	if (tree < 0)
		return sbx_fail_errno(err, "bind %s", target);
	struct mount_attr attr = {.attr_set = attrs, .propagation = MS_PRIVATE};
	if (mount_setattr(tree, "", AT_EMPTY_PATH | rec, &attr, sizeof(attr)) < 0)
		return sbx_fail_errno(err, "set mount flags on %s", target);
	if (move_mount(tree, "", root_fd, target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return sbx_fail_errno(err, "mount %s", target);
	return 0;
}

/* A new filesystem instance attached at root_fd/target (opts as for
 * sbx_mount_detached). */
static int mount_new(const char *fstype, const char *const *opts, int root_fd, const char *target,
		     uint64_t attrs, struct sbx_err *err)
{
	_cleanup_close_ int mnt = sbx_mount_detached(fstype, opts, attrs, err);
	if (mnt < 0)
		return sbx_err_prefix(err, "%s", target);
	if (move_mount(mnt, "", root_fd, target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return sbx_fail_errno(err, "mount %s on %s", fstype, target);
	return 0;
}

static int mkdir_at(int dirfd, const char *name, mode_t mode, struct sbx_err *err)
{
	if (mkdirat(dirfd, name, mode) < 0 && errno != EEXIST)
		return sbx_fail_errno(err, "mkdir %s", name);
	return 0;
}

static int touch_at(int dirfd, const char *name, struct sbx_err *err)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444);
	if (fd < 0)
		return sbx_fail_errno(err, "create %s", name);
	close(fd);
	return 0;
}

static int write_file_at(int dirfd, const char *name, const char *text, struct sbx_err *err)
{
	_cleanup_close_ int fd =
	    openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return sbx_fail_errno(err, "create %s", name);
	size_t len = strlen(text);
	if (write(fd, text, len) != (ssize_t)len)
		return sbx_fail_errno(err, "write %s", name);
	return 0;
}

static int open_path(const char *path, struct sbx_err *err)
{
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return sbx_fail_errno(err, "open %s", path);
	return fd;
}

/* Binds a host file or directory if the host has it; a missing one is not
 * an error (minimal hosts lack /lib32, /etc/alternatives...). */
static int bind_host_optional(const char *host_path, int root_fd, const char *target,
			      struct sbx_err *err)
{
	_cleanup_close_ int src = open(host_path, O_PATH | O_CLOEXEC);
	if (src < 0)
		return errno == ENOENT ? 0 : sbx_fail_errno(err, "open %s", host_path);
	struct stat st;
	if (fstat(src, &st) < 0)
		return sbx_fail_errno(err, "stat %s", host_path);
	if (S_ISDIR(st.st_mode) ? mkdir_at(root_fd, target, 0755, err) < 0
				: touch_at(root_fd, target, err) < 0)
		return -1;
	return bind_fd(src, root_fd, target, MOUNT_ATTR_RDONLY | SBX_ATTR_SAFE, true, err);
}

/* The sandbox's own /etc files, whatever the image: who the sandbox user
 * is, its name, and no resolver. An image's own versions (a build host's
 * users, a resolv.conf naming a real nameserver) never show. */
static const struct {
	const char *name, *text;
} sbx_etc_files[] = {
    {"passwd", "root:x:0:0:root:/root:/usr/sbin/nologin\n"
	       "sbx:x:1000:1000:sandbox:/tmp:/bin/sh\n"
	       "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
    {"group", "root:x:0:\nsbx:x:1000:\nnogroup:x:65534:\n"},
    {"hostname", "sbx\n"},
    {"hosts", "127.0.0.1\tlocalhost sbx\n::1\tlocalhost ip6-localhost\n"},
    {"nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\n"
		      "hosts: files dns\nnetworks: files\nprotocols: files\n"
		      "services: files\n"},
    /* No real resolver: with egress deny sbxd refuses every name on
     * 127.0.0.1:53 at once (egress_port.h) and says so in the exec's
     * stderr; with an allowlist the proxy resolves, and the one-shot has
     * no resolver (nothing listens on 53 there: refused at once). One try,
     * so no resolver waits for retries. */
    {"resolv.conf", "# sbx: no DNS inside the sandbox (every name is refused)\n"
		    "nameserver 127.0.0.1\n"
		    "options attempts:1 timeout:1\n"},
};

static bool is_sbx_etc_file(const char *name)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(sbx_etc_files); i++)
		if (!strcmp(name, sbx_etc_files[i].name))
			return true;
	return false;
}

/* root_fd/etc with sbx's own files in it; returns an O_PATH fd of it. */
static int make_sbx_etc(int root_fd, struct sbx_err *err)
{
	if (mkdir_at(root_fd, "etc", 0755, err) < 0)
		return -1;
	_cleanup_close_ int etc = openat(root_fd, "etc", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (etc < 0)
		return sbx_fail_errno(err, "open /etc");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(sbx_etc_files); i++)
		if (write_file_at(etc, sbx_etc_files[i].name, sbx_etc_files[i].text, err) < 0)
			return -1;
	return sbx_steal_fd(etc);
}

/* The host image: /usr and the top-level links or directories that point
 * into it, read-only, and an /etc made here rather than the host's. */
static int populate_host_image(int root_fd, struct sbx_err *err)
{
	if (mkdir_at(root_fd, "usr", 0755, err) < 0)
		return -1;
	_cleanup_close_ int usr = open_path("/usr", err);
	if (usr < 0 ||
	    bind_fd(usr, root_fd, "usr", MOUNT_ATTR_RDONLY | SBX_ATTR_SAFE, true, err) < 0)
		return -1;
	static const char *const top[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(top); i++) {
		char host[PATH_MAX], link[PATH_MAX];
		snprintf(host, sizeof(host), "/%s", top[i]);
		ssize_t n = readlink(host, link, sizeof(link) - 1);
		if (n >= 0) {
			link[n] = '\0';
			if (symlinkat(link, root_fd, top[i]) < 0)
				return sbx_fail_errno(err, "symlink /%s", top[i]);
		} else if (bind_host_optional(host, root_fd, top[i], err) < 0) {
			return -1;
		}
	}
	_cleanup_close_ int etc = make_sbx_etc(root_fd, err);
	if (etc < 0)
		return -1;
	if (mkdir_at(etc, "ssl", 0755, err) < 0)
		return -1;
	static const char *const host_etc[] = {
	    "ld.so.cache", "ld.so.conf", "ssl/certs",  "ssl/openssl.cnf", "alternatives",
	    "protocols",   "services",	 "mime.types", "localtime",
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(host_etc); i++) {
		char host[PATH_MAX];
		snprintf(host, sizeof(host), "/etc/%s", host_etc[i]);
		if (bind_host_optional(host, etc, host_etc[i], err) < 0)
			return -1;
	}
	return 0;
}

/* An image's link made again beside the sandbox's entries, with the same
 * target: resolved inside the sandbox later, never here. */
static int copy_link(int from, int to, const char *name, struct sbx_err *err)
{
	char link[PATH_MAX];
	ssize_t n = readlinkat(from, name, link, sizeof(link) - 1);
	if (n < 0 || (link[n] = '\0', symlinkat(link, to, name) < 0))
		return sbx_fail_errno(err, "link %s", name);
	return 0;
}

/* Entries of one directory of a store image, copied onto `to`: directories
 * and regular files bound read-only (each bind its own mount point here),
 * symlinks made again with their targets (resolved inside the sandbox,
 * never here), anything else skipped. `skip` names what the sandbox makes
 * itself. More than `max` entries is refused: each is an inode of the
 * root's small tmpfs and a mount. */
static int bind_entries(int from, const char *where, int to, bool (*skip)(const char *name),
			size_t max, struct sbx_err *err)
{
	_cleanup_close_ int list_fd = openat(from, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (list_fd < 0)
		return sbx_fail_errno(err, "%s", where);
	_cleanup_closedir_ DIR *d = fdopendir(list_fd);
	if (!d)
		return sbx_fail_errno(err, "%s", where);
	list_fd = -1; /* the DIR's now */
	size_t n = 0;
	for (struct dirent *de; (errno = 0, de = readdir(d));) {
		const char *name = de->d_name;
		if (!strcmp(name, ".") || !strcmp(name, "..") || skip(name))
			continue;
		if (++n > max)
			return sbx_fail(err, "%s: more than %zu entries", where, max);
		struct stat st;
		if (fstatat(from, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return sbx_fail_errno(err, "%s/%s", where, name);
		if (S_ISLNK(st.st_mode)) {
			if (copy_link(from, to, name, err) < 0)
				return sbx_err_prefix(err, "%s", where);
			continue;
		}
		if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
			continue;
		_cleanup_close_ int src = openat(from, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (src < 0)
			return sbx_fail_errno(err, "%s/%s", where, name);
		if ((S_ISDIR(st.st_mode) ? mkdir_at(to, name, 0755, err)
					 : touch_at(to, name, err)) < 0 ||
		    bind_fd(src, to, name, MOUNT_ATTR_RDONLY | SBX_ATTR_SAFE, false, err) < 0)
			return sbx_err_prefix(err, "%s/%s", where, name);
	}
	if (errno)
		return sbx_fail_errno(err, "%s: read", where);
	return 0;
}

/* What the sandbox makes itself at the top: never the image's (nor the
 * directory the image's overlay is attached at while it is bound from). */
static bool sandbox_owned(const char *name)
{
	static const char *const own[] = {"proc", "dev", "sys", "tmp",
					  "data", "out", "etc", SBX_IMAGE_OVERLAY_DIR};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(own); i++)
		if (!strcmp(name, own[i]))
			return true;
	return false;
}

/* A store image's entries from `img`, its overlay: every top-level entry
 * but what the sandbox makes itself, and an /etc of sbx's own files with
 * the image's other entries bound beside them. */
static int bind_store_image(int img, int root_fd, struct sbx_err *err)
{
	if (bind_entries(img, "image", root_fd, sandbox_owned, STORE_TOP_MAX, err) < 0)
		return -1;
	_cleanup_close_ int etc = make_sbx_etc(root_fd, err);
	if (etc < 0)
		return -1;
	/* An image without an etc directory (or with a link there) gets sbx's
	 * files alone: a link would lead out of the etc made here. */
	_cleanup_close_ int img_etc =
	    openat(img, "etc", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (img_etc < 0)
		return errno == ENOENT || errno == ENOTDIR || errno == ELOOP
			   ? 0
			   : sbx_fail_errno(err, "image/etc");
	return bind_entries(img_etc, "image/etc", etc, is_sbx_etc_file, STORE_ETC_MAX, err);
}

/* A store image (--image-root, which sbxd resolved, verified and holds),
 * bound from this run's own overlay of the tree. Binds of the store tree
 * itself would give every run of the image the same inodes, so an
 * inotify/dnotify watch in one run saw another's opens, and a flock in one
 * blocked another's; the overlay's inodes are its own superblock's alone. */
static int populate_store_image(int tree, int root_fd, struct sbx_err *err)
{
	_cleanup_attached_ struct sbx_attached view = SBX_ATTACHED_INIT;
	if (sbx_image_overlay(tree, root_fd, &view, err) < 0 ||
	    bind_store_image(view.mnt, root_fd, err) < 0)
		return -1;
	/* Of the overlay, only its binds stay in the root. */
	return sbx_attach_end(&view, err);
}

/* A rootfs directory image: the top-level entries a root file system is
 * made of, read-only. An allowlist rather than "everything": a policy that
 * names a directory which is not a rootfs (the host's /, a home directory)
 * must not carry its sockets, spools or secrets into the sandbox. */
static int populate_dir_image(int img, const char *image, int root_fd, struct sbx_err *err)
{
	static const char *const parts[] = {"bin",    "sbin", "lib", "lib32", "lib64",
					    "libx32", "usr",  "etc", "opt"};
	struct stat probe;
	if (fstatat(img, "usr", &probe, AT_SYMLINK_NOFOLLOW) < 0 &&
	    fstatat(img, "bin", &probe, AT_SYMLINK_NOFOLLOW) < 0)
		return sbx_fail(err, "image %s: not a root file system (no usr/ or bin/)", image);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(parts); i++) {
		const char *name = parts[i];
		struct stat st;
		if (fstatat(img, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			return sbx_fail_errno(err, "image %s/%s", image, name);
		}
		if (S_ISLNK(st.st_mode)) {
			if (copy_link(img, root_fd, name, err) < 0)
				return sbx_err_prefix(err, "image");
			continue;
		}
		if (!S_ISDIR(st.st_mode))
			continue;
		_cleanup_close_ int src = openat(img, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (src < 0)
			return sbx_fail_errno(err, "image %s/%s", image, name);
		if (mkdir_at(root_fd, name, 0755, err) < 0 ||
		    bind_fd(src, root_fd, name, MOUNT_ATTR_RDONLY | SBX_ATTR_SAFE, true, err) < 0)
			return -1;
	}
	return 0;
}

/* Inodes are bounded too: a tmpfs full of empty files costs kernel memory
 * without counting against `size` (nor, under the rlimit fallback, against
 * anything). 64 per MiB is a 16 KiB average file. */
static uint64_t inode_limit(uint64_t mb)
{
	return mb * 64 + 1024;
}

/* A new devpts instance on dev_fd/pts; /dev/ptmx is a link to its ptmx.
 * Bounded: past SBX_PTYS_PER_DEVPTS, opening /dev/ptmx fails ENOSPC. */
static int mount_pts(int dev_fd, struct sbx_err *err)
{
	static const char *const pts_opts[] = {
	    "newinstance", NULL,  "ptmxmode",	       "0666", "mode",
	    "0620",	   "max", SBX_PTYS_PER_DEVPTS, NULL};
	return mount_new("devpts", pts_opts, dev_fd, "pts", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
			 err);
}

int sbx_rootfs_private_pts(struct sbx_err *err)
{
	_cleanup_close_ int dev = open("/dev", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dev < 0)
		return sbx_fail_errno(err, "open /dev");
	if (mount_pts(dev, err) < 0)
		return sbx_err_prefix(err, "the exec's terminals");
	return 0;
}

static int populate_dev(int root_fd, uint64_t shm_mb, struct sbx_err *err)
{
	static const char *const dev_opts[] = {"mode", "0755", "size", "64k", NULL};
	if (mkdir_at(root_fd, "dev", 0755, err) < 0 ||
	    mount_new("tmpfs", dev_opts, root_fd, "dev", SBX_ATTR_SAFE | MOUNT_ATTR_NOEXEC, err) <
		0)
		return -1;
	_cleanup_close_ int dev = openat(root_fd, "dev", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dev < 0)
		return sbx_fail_errno(err, "open /dev");
	/* Device nodes cannot be made in a user namespace; bind the few
	 * harmless ones. Their own mounts must allow devices, nothing else. */
	static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(nodes); i++) {
		char host[64];
		snprintf(host, sizeof(host), "/dev/%s", nodes[i]);
		_cleanup_close_ int src = open_path(host, err);
		if (src < 0 || touch_at(dev, nodes[i], err) < 0 ||
		    bind_fd(src, dev, nodes[i], MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false, err) <
			0)
			return -1;
	}
	/* A private devpts: the sandbox's terminals are its own, and none of
	 * the host's is reachable (no TIOCSTI into a host shell). Each exec
	 * covers it with one of its own (sbx_rootfs_private_pts). */
	if (mkdir_at(dev, "pts", 0755, err) < 0 || mount_pts(dev, err) < 0)
		return -1;
	char shm_size[32], shm_inodes[32];
	snprintf(shm_size, sizeof(shm_size), "%llum", (unsigned long long)shm_mb);
	snprintf(shm_inodes, sizeof(shm_inodes), "%llu", (unsigned long long)inode_limit(shm_mb));
	const char *const shm_opts[] = {"mode",	     "1777",	 "size", shm_size,
					"nr_inodes", shm_inodes, NULL};
	if (mkdir_at(dev, "shm", 01777, err) < 0 ||
	    mount_new("tmpfs", shm_opts, dev, "shm", SBX_ATTR_SAFE, err) < 0)
		return -1;
	static const struct {
		const char *name, *target;
	} links[] = {{"ptmx", "pts/ptmx"},
		     {"fd", "/proc/self/fd"},
		     {"stdin", "/proc/self/fd/0"},
		     {"stdout", "/proc/self/fd/1"},
		     {"stderr", "/proc/self/fd/2"}};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(links); i++)
		if (symlinkat(links[i].target, dev, links[i].name) < 0)
			return sbx_fail_errno(err, "symlink /dev/%s", links[i].name);
	/* Everything is in place: no more files may appear in /dev. */
	struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY};
	if (mount_setattr(dev, "", AT_EMPTY_PATH, &ro, sizeof(ro)) < 0)
		return sbx_fail_errno(err, "make /dev read-only");
	return 0;
}

static int populate_writable(const SbxPolicy *p, int root_fd, struct sbx_err *err)
{
	char size[32], inodes[32], uid[16], gid[16];
	snprintf(uid, sizeof(uid), "%d", SBX_SANDBOX_UID);
	snprintf(gid, sizeof(gid), "%d", SBX_SANDBOX_GID);

	snprintf(size, sizeof(size), "%llum", (unsigned long long)p->limits->tmp_mb);
	snprintf(inodes, sizeof(inodes), "%llu",
		 (unsigned long long)inode_limit(p->limits->tmp_mb));
	const char *const tmp_opts[] = {"mode", "1777", "size", size, "nr_inodes", inodes, NULL};
	if (mkdir_at(root_fd, "tmp", 01777, err) < 0 ||
	    mount_new("tmpfs", tmp_opts, root_fd, "tmp", SBX_ATTR_SAFE, err) < 0)
		return -1;

	if (sbx_policy_mount(p, "/out")) {
		snprintf(size, sizeof(size), "%llum", (unsigned long long)p->limits->out_mb);
		snprintf(inodes, sizeof(inodes), "%llu",
			 (unsigned long long)inode_limit(p->limits->out_mb));
		const char *const out_opts[] = {"mode", "0755", "size", size, "nr_inodes", inodes,
						"uid",	uid,	"gid",	gid,  NULL};
		if (mkdir_at(root_fd, "out", 0755, err) < 0 ||
		    mount_new("tmpfs", out_opts, root_fd, "out", SBX_ATTR_SAFE, err) < 0)
			return -1;
	}
	return 0;
}

static int populate_data(const SbxPolicy *p, int data_src, int root_fd, struct sbx_err *err)
{
	if (!sbx_policy_mount(p, "/data"))
		return 0;
	if (mkdir_at(root_fd, "data", 0755, err) < 0)
		return -1;
	if (data_src < 0)
		return 0; /* an empty directory of the read-only root */
	return bind_fd(data_src, root_fd, "data", MOUNT_ATTR_RDONLY | SBX_ATTR_SAFE, true, err);
}

/* `base` is where proc goes, `null` a /dev/null to mask files with; both
 * relative to cwd before pivot_root, absolute after. */
static int mount_proc_at(const char *base, const char *null, int *sysctl_dir, struct sbx_err *err)
{
	/* hidepid=ptraceable: an exec sees its own processes only: another
	 * exec's are in another user namespace, which the capability check of
	 * ptrace access refuses (cap_ptrace_access_check), and pid 1 and exec
	 * inits (whose command lines name host paths) are privileged or not
	 * dumpable. */
	if (mount("proc", base, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=ptraceable") < 0)
		return sbx_fail_errno(err, "mount /proc");
	/* Host-wide views a sandbox has no business reading read as empty:
	 * kernel memory and symbols, keyrings, timers of every process, and
	 * what identifies the host or its disks (its boot command line and
	 * boot id, kernel config, modules, disks, partitions, swap devices,
	 * per-filesystem statistics in fs/ that name the host's disks, PCI
	 * configuration space in bus/).
	 * SBX_PROC_MASKED is the list, shared with the test that checks it. */
	static const char *const hide_files[] = {SBX_PROC_MASKED_FILES};
	char path[64];
	/* Masks first, /proc/sys read-only last: its recursive bind carries
	 * the masks beneath it (boot_id) along. */
	for (size_t i = 0; i < SBX_ARRAY_SIZE(hide_files); i++) {
		snprintf(path, sizeof(path), "%s/%s", base, hide_files[i]);
		if (mount(null, path, NULL, MS_BIND, NULL) < 0) {
			if (errno == ENOENT)
				continue;
			return sbx_fail_errno(err, "mask /proc/%s", hide_files[i]);
		}
		if (mount(NULL, path, NULL,
			  MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) < 0)
			return sbx_fail_errno(err, "mask /proc/%s read-only", hide_files[i]);
	}
	static const char *const hide_dirs[] = {SBX_PROC_MASKED_DIRS};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(hide_dirs); i++) {
		snprintf(path, sizeof(path), "%s/%s", base, hide_dirs[i]);
		if (mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  "size=0") < 0 &&
		    errno != ENOENT)
			return sbx_fail_errno(err, "mask /proc/%s", hide_dirs[i]);
	}
	/* Opened before the read-only bind covers it: a walk that starts at
	 * this fd stays on the writable proc mount, and only exec init, with
	 * capabilities over its own network namespace, writes through it. */
	snprintf(path, sizeof(path), "%s/sys", base);
	*sysctl_dir = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (*sysctl_dir < 0)
		return sbx_fail_errno(err, "open /proc/sys");
	/* pressure: host-wide, and writable for PSI triggers (kernel timers
	 * and work per trigger): read-only, like the load averages. */
	static const char *const ro_dirs[] = {"sys", "irq", "pressure"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(ro_dirs); i++) {
		snprintf(path, sizeof(path), "%s/%s", base, ro_dirs[i]);
		if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0) {
			if (errno == ENOENT)
				continue;
			return sbx_fail_errno(err, "bind /proc/%s", ro_dirs[i]);
		}
		if (mount(NULL, path, NULL,
			  MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  NULL) < 0)
			return sbx_fail_errno(err, "make /proc/%s read-only", ro_dirs[i]);
	}
	return 0;
}

/* A directory that a caller of the helper names (--data, --image-root, a
 * rootfs image), opened now, in this mount namespace, before /tmp is
 * covered (it may live there). no_symlinks: a path sbxd resolved and
 * checked, where a link swapped in since must fail, not be followed. */
static int open_source_dir(const char *path, bool no_symlinks)
{
	if (!no_symlinks)
		return open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	/* The callers word the error; errno carries the cause to them. */
	struct sbx_err why;
	int fd = sbx_open_no_symlinks(path, O_PATH | O_DIRECTORY, &why);
	if (fd < 0)
		errno = why.errnum;
	return fd;
}

/* An image tree must not be the host's own root: that would be "host"
 * without its allowlist (every top-level entry of the host). */
static int refuse_host_root(int img, int host_root, const char *what, const char *path,
			    struct sbx_err *err)
{
	struct stat a, b;
	if (fstat(img, &a) < 0 || fstat(host_root, &b) < 0)
		return sbx_fail_errno(err, "%s %s", what, path);
	if (a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		return sbx_fail(err, "%s %s: is the host's root; use \"host\"", what, path);
	return 0;
}

/* The store tree opened must be the one sbxd holds: its path runs through
 * directories that someone able to rename them could have changed between
 * sbxd's check and this open (docs/operator/images.md). */
static int check_image_identity(int img, const struct sbx_image_root *want, struct sbx_err *err)
{
	struct stat st;
	if (fstat(img, &st) < 0)
		return sbx_fail_errno(err, "--image-root %s", want->path);
	if (st.st_dev != want->dev || st.st_ino != want->ino)
		return sbx_fail(err,
				"--image-root %s: not the tree sbxd holds (found device:inode "
				"%ju:%ju, --image-root-id %ju:%ju): the store's path was changed "
				"since sbxd resolved it; nothing was mounted",
				want->path, (uintmax_t)st.st_dev, (uintmax_t)st.st_ino,
				(uintmax_t)want->dev, (uintmax_t)want->ino);
	return 0;
}

int sbx_rootfs_build(const SbxPolicy *p, const char *data_dir, bool data_no_symlinks,
		     const struct sbx_image_root *image, int *sysctl_dir, struct sbx_err *err)
{
	const char *image_root = image ? image->path : NULL;
	/* Nothing we mount may propagate back to the host. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return sbx_fail_errno(err, "make mounts private");

	/* The new root is built on a tmpfs attached at /tmp of this private
	 * namespace; every source is opened by fd before it is needed, so what
	 * /tmp used to hold does not matter. */
	static const char *const root_opts[] = {"mode",	     "0755", "size", "4m",
						"nr_inodes", "4096", NULL};
	_cleanup_close_ int host_root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (host_root < 0)
		return sbx_fail_errno(err, "open /");
	_cleanup_close_ int image_src = -1;
	if (image_root) {
		/* sbxd's store tree, held by sbxd for the run: no link in its
		 * path is followed (the store is sbxd's, a link in it is not). */
		image_src = open_source_dir(image_root, true);
		if (image_src < 0)
			return sbx_fail_errno(err, "--image-root %s", image_root);
		if (refuse_host_root(image_src, host_root, "--image-root", image_root, err) < 0 ||
		    check_image_identity(image_src, image, err) < 0)
			return -1;
	} else if (strcmp(p->image, "host") != 0) {
		image_src = open_source_dir(p->image, false);
		if (image_src < 0)
			return sbx_fail_errno(err, "image %s", p->image);
		if (refuse_host_root(image_src, host_root, "image", p->image, err) < 0)
			return -1;
	}
	_cleanup_close_ int data_src = -1;
	if (data_dir && (data_src = open_source_dir(data_dir, data_no_symlinks)) < 0)
		return sbx_fail_errno(err, "--data %s", data_dir);
	if (mount_new("tmpfs", root_opts, host_root, "tmp", SBX_ATTR_SAFE, err) < 0)
		return -1;
	_cleanup_close_ int root_fd = open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root_fd < 0)
		return sbx_fail_errno(err, "open new root");

	int rc = image_root ? populate_store_image(image_src, root_fd, err)
		 : strcmp(p->image, "host") == 0
		     ? populate_host_image(root_fd, err)
		     : populate_dir_image(image_src, p->image, root_fd, err);
	if (rc < 0)
		return sbx_err_prefix(err, "image");
	if (populate_dev(root_fd, p->limits->tmp_mb, err) < 0 ||
	    populate_writable(p, root_fd, err) < 0 ||
	    populate_data(p, data_src, root_fd, err) < 0 ||
	    mkdir_at(root_fd, "proc", 0555, err) < 0)
		return -1;

	/* procfs may only be mounted where a fully visible one already is
	 * (mount_too_revealing), so it goes in while the host's is attached. */
	if (fchdir(root_fd) < 0)
		return sbx_fail_errno(err, "chdir new root");
	if (mount_proc_at("proc", "dev/null", sysctl_dir, err) < 0)
		return -1;
	/* pivot_root(".", ".") stacks the old root on the new one; detaching
	 * it leaves no path back to the host. */
	if (pivot_root(".", ".") < 0)
		return sbx_fail_errno(err, "pivot_root");
	if (umount2(".", MNT_DETACH) < 0)
		return sbx_fail_errno(err, "detach the host root");
	if (chdir("/") < 0)
		return sbx_fail_errno(err, "chdir /");
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) <
	    0)
		return sbx_fail_errno(err, "make / read-only");
	return 0;
}
