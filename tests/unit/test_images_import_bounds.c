/* SPDX-License-Identifier: Apache-2.0 */
/* Review findings on the import side (server/images/), each a case that
 * failed before its fix:
 *   - opaque markers and whiteouts repeated in one layer: each rescanned
 *     the directory they clear, so M markers over N entries cost M * N
 *     (a 25 KB gzip layer of 3,000 files and 3,000 markers took 12 s; one
 *     of 500,000 of each, within the default limits, days). The layer runs
 *     in a child under alarm(): the fixed unpacker takes well under a
 *     second, the quadratic one minutes.
 *   - the tree hash read a file again under each of its hard links: a
 *     rootfs tar of one 4 GiB (sparse) file and a million links to it
 *     meant 4 PiB of reading.
 *   - img_import's SOURCE followed symlinks: a source path through a
 *     directory another user owns could be swapped for a link to the
 *     importer's private files, which then became the image's content; a
 *     FIFO planted as --rootfs-tar hung the import. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "images.h"
#include "images_internal.h"
#include "tree.h"
#include "util.h"

static char top[64];

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static void add(struct archive *a, const char *name, mode_t type, const char *body)
{
	struct archive_entry *e = archive_entry_new();
	size_t len = body ? strlen(body) : 0;

	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, type == AE_IFDIR ? 0755 : 0644);
	archive_entry_set_size(e, (la_int64_t)len);
	if (archive_write_header(a, e) != ARCHIVE_OK ||
	    (len && archive_write_data(a, body, len) != (la_ssize_t)len))
		die(archive_error_string(a));
	archive_entry_free(e);
}

static struct archive *tar_new(const char *path)
{
	struct archive *a = archive_write_new();

	archive_write_set_format_pax(a);
	archive_write_add_filter_gzip(a);
	if (archive_write_open_filename(a, path) != ARCHIVE_OK)
		die(path);
	return a;
}

static void tar_end(struct archive *a)
{
	if (archive_write_close(a) != ARCHIVE_OK)
		die("archive_write_close");
	archive_write_free(a);
}

/* Unpacks the layers in a child that SIGALRM ends after `seconds`:
 * 0 when they unpacked, 1 on an unpack error, SIGALRM when too slow. */
static int unpack_bounded(const char *const *layers, int root_fd, unsigned seconds)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		die("fork");
	if (pid == 0) {
		struct img_limits lim;
		struct img_unpack u;
		struct sbx_err err;

		img_limits_default(&lim);
		alarm(seconds);
		if (img_unpack_begin(&u, root_fd, &lim, NULL, &err) < 0)
			_exit(1);
		for (const char *const *l = layers; *l; l++) {
			int fd = open(*l, O_RDONLY | O_CLOEXEC);

			if (fd < 0 || img_unpack_tar(&u, fd, true, NULL, 0, &err) < 0) {
				fprintf(stderr, "unpack %s: %s\n", *l, err.msg);
				_exit(1);
			}
			close(fd);
		}
		_exit(img_unpack_finish(&u, &err) < 0 ? 1 : 0);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid");
	return WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
}

static int new_root(const char *name)
{
	char path[PATH_MAX];
	int fd = -1;

	snprintf(path, sizeof(path), "%s/%s", top, name);
	if (mkdir(path, 0700) < 0 || (fd = open(path, O_RDONLY | O_DIRECTORY)) < 0)
		die(path);
	return fd;
}

static bool exists(int dir, const char *path)
{
	struct stat st;

	return fstatat(dir, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

enum { FILES = 20000, MARKERS = 20000 };

/* A lower layer with d/lower and gone/, then one with FILES files in d
 * (and in kept/) and MARKERS copies of each kind of marker. */
static void test_repeated_markers(void)
{
	char lower[PATH_MAX], upper[PATH_MAX], name[64];
	struct archive *a;

	snprintf(lower, sizeof(lower), "%s/lower.tar.gz", top);
	snprintf(upper, sizeof(upper), "%s/upper.tar.gz", top);
	a = tar_new(lower);
	add(a, "d", AE_IFDIR, NULL);
	add(a, "d/lower", AE_IFREG, "from below\n");
	add(a, "kept", AE_IFDIR, NULL);
	add(a, "kept/lower", AE_IFREG, "from below\n");
	tar_end(a);
	a = tar_new(upper);
	add(a, "d", AE_IFDIR, NULL);
	add(a, "kept", AE_IFDIR, NULL);
	for (int i = 0; i < FILES / 2; i++) {
		snprintf(name, sizeof(name), "d/f%d", i);
		add(a, name, AE_IFREG, NULL);
		snprintf(name, sizeof(name), "kept/f%d", i);
		add(a, name, AE_IFREG, NULL);
	}
	for (int i = 0; i < MARKERS / 2; i++) {
		add(a, "d/.wh..wh..opq", AE_IFREG, NULL);
		add(a, ".wh.kept", AE_IFREG, NULL);
	}
	tar_end(a);

	int root = new_root("markers");
	const char *const layers[] = {lower, upper, NULL};
	int rc = unpack_bounded(layers, root, 30);

	check(rc == 0,
	      "%d files and %d repeated opaque/whiteout markers in one layer unpack in "
	      "linear time (child: %s %d)",
	      FILES, MARKERS, rc == SIGALRM ? "killed by SIGALRM after 30 s, rc" : "rc", rc);
	check(!exists(root, "d/lower") && !exists(root, "kept/lower"),
	      "the markers still remove what the lower layer left");
	check(exists(root, "d/f0") && exists(root, "kept/f0") && exists(root, "d/f9999") &&
		  exists(root, "kept/f9999"),
	      "and keep what their own layer wrote");
	close(root);
}

/* ---- the tree hash of hard links ---- */

static void add_link(struct archive *a, const char *name, const char *target)
{
	struct archive_entry *e = archive_entry_new();

	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_hardlink(e, target);
	if (archive_write_header(a, e) != ARCHIVE_OK)
		die(archive_error_string(a));
	archive_entry_free(e);
}

/* Unpacks one plain layer and hashes the tree in a child under alarm():
 * 0 and the digest through a pipe, else what ended it. */
static int hash_bounded(const char *tar, int root_fd, unsigned seconds,
			char digest[IMG_DIGEST_LEN + 1])
{
	int p[2], status;
	pid_t pid = -1;

	if (pipe(p) < 0 || (pid = fork()) < 0)
		die("pipe/fork");
	if (pid == 0) {
		struct img_limits lim;
		struct img_unpack u;
		struct sbx_err err;
		char d[IMG_DIGEST_LEN + 1];
		int fd = open(tar, O_RDONLY | O_CLOEXEC);

		img_limits_default(&lim);
		alarm(seconds);
		if (fd < 0 || img_unpack_begin(&u, root_fd, &lim, NULL, &err) < 0 ||
		    img_unpack_tar(&u, fd, false, NULL, 0, &err) < 0 ||
		    img_unpack_finish(&u, &err) < 0 || img_tree_hash(root_fd, d, &err) < 0) {
			fprintf(stderr, "%s: %s\n", tar, err.msg);
			_exit(1);
		}
		_exit(write(p[1], d, sizeof(d)) == (ssize_t)sizeof(d) ? 0 : 1);
	}
	close(p[1]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid");
	if (read(p[0], digest, IMG_DIGEST_LEN + 1) != IMG_DIGEST_LEN + 1)
		digest[0] = '\0';
	close(p[0]);
	return WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
}

enum { BIG = 64 << 20, LINKS = 3000 };

static void test_hardlink_hash(void)
{
	char path[PATH_MAX], name[64], d1[IMG_DIGEST_LEN + 1], d2[IMG_DIGEST_LEN + 1];
	char *zeros = calloc(1, BIG);
	struct archive *a;

	if (!zeros)
		die("calloc");
	/* One 64 MiB file and LINKS names for it: hashed once, not 3000
	 * times (192 GiB of reading before). */
	snprintf(path, sizeof(path), "%s/links.tar.gz", top);
	a = tar_new(path);
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, "big");
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, BIG);
	if (archive_write_header(a, e) != ARCHIVE_OK ||
	    archive_write_data(a, zeros, BIG) != (la_ssize_t)BIG)
		die("big");
	archive_entry_free(e);
	free(zeros);
	for (int i = 0; i < LINKS; i++) {
		snprintf(name, sizeof(name), "l%d", i);
		add_link(a, name, "big");
	}
	tar_end(a);
	int root = new_root("links");
	int rc = hash_bounded(path, root, 30, d1);
	check(rc == 0, "a file with %d hard links is hashed once (child: %s %d)", LINKS,
	      rc == SIGALRM ? "killed by SIGALRM after 30 s, rc" : "rc", rc);
	close(root);

	/* The canonical hash is unchanged: a hard link is a regular file
	 * under each of its names. */
	snprintf(path, sizeof(path), "%s/linked.tar.gz", top);
	a = tar_new(path);
	add(a, "a", AE_IFREG, "same\n");
	add_link(a, "b", "a");
	add_link(a, "c", "a");
	tar_end(a);
	root = new_root("linked");
	rc = hash_bounded(path, root, 30, d1);
	close(root);
	snprintf(path, sizeof(path), "%s/copies.tar.gz", top);
	a = tar_new(path);
	add(a, "a", AE_IFREG, "same\n");
	add(a, "b", AE_IFREG, "same\n");
	add(a, "c", AE_IFREG, "same\n");
	tar_end(a);
	root = new_root("copies");
	check(rc == 0 && hash_bounded(path, root, 30, d2) == 0 && !strcmp(d1, d2),
	      "three names of one file hash as three copies (%s, %s)", d1, d2);
	close(root);
}

/* ---- the source path ---- */

static int import_from(struct img_store *s, enum img_source_kind kind, const char *path,
		       struct img_import_result *res, struct sbx_err *err)
{
	struct img_import_req req = {.name_tag = "review:1", .kind = kind, .path = path};

	img_limits_default(&req.limits);
	return img_import(s, &req, NULL, res, err);
}

static void test_source_links(void)
{
	char priv[PATH_MAX], share[PATH_MAX], link[PATH_MAX], real[PATH_MAX], path[PATH_MAX + 64];
	char store_dir[PATH_MAX], fifo[PATH_MAX];
	_cleanup_img_store_ struct img_store *s = NULL;
	struct img_import_result res;
	struct sbx_err err;
	int fd;

	/* The importer's private directory, and a directory of "someone
	 * else" holding the source the operator names, swapped for a link. */
	snprintf(priv, sizeof(priv), "%s/private", top);
	snprintf(share, sizeof(share), "%s/shared", top);
	snprintf(real, sizeof(real), "%s/shared/rootfs.real", top);
	snprintf(link, sizeof(link), "%s/shared/rootfs", top);
	snprintf(store_dir, sizeof(store_dir), "%s/store", top);
	if (mkdir(priv, 0700) < 0 || mkdir(share, 0755) < 0 || mkdir(real, 0755) < 0)
		die("mkdir");
	snprintf(path, sizeof(path), "%s/server.key", priv);
	if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600)) < 0 ||
	    write(fd, "PRIVATE KEY\n", 12) != 12)
		die(path);
	close(fd);
	if (symlink(priv, link) < 0)
		die("symlink");
	if (img_store_open(store_dir, true, &s, &err) < 0)
		die(err.msg);

	int rc = import_from(s, IMG_FROM_ROOTFS_DIR, link, &res, &err);
	check(rc < 0, "--rootfs through a symlink is refused (rc %d%s%s)", rc, rc ? ": " : "",
	      rc ? err.msg : "");
	check(rc < 0 && strstr(err.msg, "symlink") != NULL, "and the error says why: %s",
	      rc < 0 ? err.msg : "");

	/* A tar of the importer's, reached through a link in the shared
	 * directory. */
	snprintf(path, sizeof(path), "%s/private.tar", priv);
	struct archive *a = tar_new(path);
	add(a, "server.key", AE_IFREG, "PRIVATE KEY\n");
	tar_end(a);
	snprintf(path, sizeof(path), "%s/shared/sub", top);
	if (symlink(priv, path) < 0)
		die("symlink");
	snprintf(path, sizeof(path), "%s/shared/sub/private.tar", top);
	rc = import_from(s, IMG_FROM_ROOTFS_TAR, path, &res, &err);
	check(rc < 0 && strstr(err.msg, "symlink") != NULL,
	      "--rootfs-tar below a symlinked directory is refused (%s)",
	      rc < 0 ? err.msg : "imported");

	/* A FIFO where the tar should be: refused at once, not waited on. */
	snprintf(fifo, sizeof(fifo), "%s/shared/image.tar", top);
	if (mkfifo(fifo, 0644) < 0)
		die("mkfifo");
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		alarm(10);
		_exit(import_from(s, IMG_FROM_ROOTFS_TAR, fifo, &res, &err) < 0 ? 0 : 1);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid");
	check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "a FIFO as --rootfs-tar is refused, not waited on (%s)",
	      WIFSIGNALED(status) ? "hung until SIGALRM" : "exited");

	/* The real directory (no link on the way) still imports. */
	rc = import_from(s, IMG_FROM_ROOTFS_DIR, real, &res, &err);
	check(rc == 0, "a source path without links imports (%s)", rc ? err.msg : "ok");
}

int main(void)
{
	snprintf(top, sizeof(top), "/tmp/sbx-test-review-XXXXXX");
	if (!mkdtemp(top))
		die("mkdtemp");
	test_repeated_markers();
	test_hardlink_hash();
	test_source_links();

	struct sbx_err err;
	char *slash = strrchr(top, '/');
	_cleanup_close_ int parent = open("/tmp", O_RDONLY | O_DIRECTORY);

	if (parent < 0 || sbx_remove_tree_at(parent, slash + 1, &err) < 0)
		fprintf(stderr, "cleanup %s: %s\n", top, parent < 0 ? "open /tmp" : err.msg);
	return check_done();
}
