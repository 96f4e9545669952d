/* SPDX-License-Identifier: Apache-2.0 */
/* Unpacking layers and rootfs directories (server/images/images_unpack*.c)
 * and the canonical tree hash (images_treehash.c). The archives are made
 * here with libarchive's writer (or byte by byte where the writer will not
 * spell the hostile thing), unpacked into a target directory beside a
 * sentinel directory; every hostile case checks it was refused or
 * neutralized, that the error names the entry, that the sentinel is
 * untouched and that no name the attack tried to make exists anywhere
 * under the temporary directory.
 *
 * `test_images_unpack unpack` and `test_images_unpack treehash` are the
 * two ctest entries. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "check.h"
#include "images_internal.h"
#include "sha256.h"
#include "tree.h"
#include "util.h"

/* Set-up steps that cannot fail on a working system: exit 2 if one does. */
#define MUST(x)                                                                                    \
	do {                                                                                       \
		if ((x) < 0) {                                                                     \
			perror(#x);                                                                \
			exit(2);                                                                   \
		}                                                                                  \
	} while (0)

static char top[64];
static int top_fd = -1;
static int case_no;

/* ---- archives ---- */

struct tar {
	struct archive *a;
	char path[PATH_MAX];
};

enum { PLAIN, GZIP, ZSTD };

static void tar_open(struct tar *t, int filter)
{
	static int n;

	snprintf(t->path, sizeof(t->path), "%s/layer-%d.tar", top, ++n);
	t->a = archive_write_new();
	archive_write_set_format_pax(t->a);
	/* names as the bytes given, whatever the locale */
	archive_write_set_options(t->a, "hdrcharset=BINARY");
	if (filter == GZIP)
		archive_write_add_filter_gzip(t->a);
	else if (filter == ZSTD)
		archive_write_add_filter_zstd(t->a);
	if (archive_write_open_filename(t->a, t->path) != ARCHIVE_OK) {
		fprintf(stderr, "open %s: %s\n", t->path, archive_error_string(t->a));
		exit(2);
	}
}

static struct archive_entry *entry(const char *name, mode_t type, mode_t perm)
{
	struct archive_entry *e = archive_entry_new();

	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, perm);
	archive_entry_set_mtime(e, 1700000000, 0);
	return e;
}

static void put(struct tar *t, struct archive_entry *e, const void *data, size_t len)
{
	if (archive_write_header(t->a, e) != ARCHIVE_OK) {
		fprintf(stderr, "header %s: %s\n", archive_entry_pathname(e),
			archive_error_string(t->a));
		exit(2);
	}
	if (len && archive_write_data(t->a, data, len) != (la_ssize_t)len)
		exit(2);
	archive_entry_free(e);
}

static void t_file(struct tar *t, const char *name, mode_t perm, const char *content)
{
	struct archive_entry *e = entry(name, AE_IFREG, perm);

	archive_entry_set_size(e, (la_int64_t)strlen(content));
	put(t, e, content, strlen(content));
}

static void t_dir(struct tar *t, const char *name, mode_t perm)
{
	put(t, entry(name, AE_IFDIR, perm), NULL, 0);
}

static void t_symlink(struct tar *t, const char *name, const char *target)
{
	struct archive_entry *e = entry(name, AE_IFLNK, 0777);

	archive_entry_set_symlink(e, target);
	put(t, e, NULL, 0);
}

static void t_hardlink(struct tar *t, const char *name, const char *target)
{
	struct archive_entry *e = entry(name, AE_IFREG, 0644);

	archive_entry_set_hardlink(e, target);
	put(t, e, NULL, 0);
}

static void t_special(struct tar *t, const char *name, mode_t type)
{
	struct archive_entry *e = entry(name, type, 0666);

	archive_entry_set_rdevmajor(e, 1);
	archive_entry_set_rdevminor(e, 3);
	put(t, e, NULL, 0);
}

static const char *tar_close(struct tar *t)
{
	if (archive_write_close(t->a) != ARCHIVE_OK)
		exit(2);
	archive_write_free(t->a);
	return t->path;
}

/* A ustar header written by hand, for what libarchive's writer refuses to
 * spell (a size it would then pad out with zeros). */
static void raw_header(unsigned char h[512], const char *name, char type, uint64_t size)
{
	unsigned sum = 0;

	memset(h, 0, 512);
	snprintf((char *)h, 100, "%s", name);
	memcpy(h + 100, "0000644", 7);
	memcpy(h + 108, "0001750", 7);
	memcpy(h + 116, "0001750", 7);
	/* base-256 (GNU) for sizes past 8 GiB */
	h[124] = 0x80;
	for (int i = 0; i < 8; i++)
		h[135 - i] = (unsigned char)(size >> (8 * i));
	memcpy(h + 136, "14000000000", 11);
	h[156] = (unsigned char)type;
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
}

/* ---- the tree ---- */

struct stage {
	char dir[PATH_MAX];
	int target_fd;
	int sentinel_fd;
	struct img_limits lim;
	struct img_unpack u;
	struct sbx_err err;
	int rc;
};

static void stage_new(struct stage *s)
{
	char path[PATH_MAX + 64];

	snprintf(s->dir, sizeof(s->dir), "%s/case-%d", top, ++case_no);
	if (mkdir(s->dir, 0700) < 0)
		exit(2);
	snprintf(path, sizeof(path), "%s/target", s->dir);
	if (mkdir(path, 0700) < 0 || (s->target_fd = open(path, O_RDONLY | O_DIRECTORY)) < 0)
		exit(2);
	snprintf(path, sizeof(path), "%s/sentinel", s->dir);
	if (mkdir(path, 0700) < 0 || (s->sentinel_fd = open(path, O_RDONLY | O_DIRECTORY)) < 0)
		exit(2);
	int fd = openat(s->sentinel_fd, "keep", O_WRONLY | O_CREAT | O_EXCL, 0644);
	if (fd < 0 || write(fd, "sentinel\n", 9) != 9)
		exit(2);
	close(fd);
	s->lim = (struct img_limits){.max_entries = 100000,
				     .max_bytes = 64ull << 20,
				     .max_file_bytes = 16ull << 20,
				     .max_blob_bytes = 4ull << 20};
	s->rc = 0;
	sbx_err_clear(&s->err);
	if (img_unpack_begin(&s->u, s->target_fd, &s->lim, NULL, &s->err) < 0)
		exit(2);
}

static int layer(struct stage *s, const char *path, bool whiteouts)
{
	_cleanup_close_ int fd = open(path, O_RDONLY);

	if (fd < 0)
		exit(2);
	if (s->rc == 0)
		s->rc = img_unpack_tar(&s->u, fd, whiteouts, NULL, 0, &s->err);
	return s->rc;
}

static int finish(struct stage *s)
{
	if (s->rc == 0)
		s->rc = img_unpack_finish(&s->u, &s->err);
	else
		img_unpack_abort(&s->u);
	return s->rc;
}

static bool exists(int dir, const char *path)
{
	struct stat st;

	return fstatat(dir, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static mode_t mode_of(int dir, const char *path)
{
	struct stat st;

	return fstatat(dir, path, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st.st_mode : 0;
}

static bool content_is(int dir, const char *path, const char *want)
{
	char buf[4096];
	_cleanup_close_ int fd = openat(dir, path, O_RDONLY | O_NOFOLLOW);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (n < 0)
		return false;
	buf[n] = '\0';
	return !strcmp(buf, want);
}

static bool link_is(int dir, const char *path, const char *want)
{
	char buf[PATH_MAX];
	ssize_t n = readlinkat(dir, path, buf, sizeof(buf) - 1);

	if (n < 0)
		return false;
	buf[n] = '\0';
	return !strcmp(buf, want);
}

/* The sentinel holds "keep" (still "sentinel\n", mode 0644) and nothing
 * else. */
static bool sentinel_intact(struct stage *s)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int n = 0, fd = openat(s->sentinel_fd, ".", O_RDONLY | O_DIRECTORY);

	if (fd < 0 || !(d = fdopendir(fd)))
		return false;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	return n == 1 && content_is(s->sentinel_fd, "keep", "sentinel\n") &&
	       (mode_of(s->sentinel_fd, "keep") & 07777) == 0644;
}

/* Whether a name containing `marker` exists anywhere below dir. */
static bool marker_below(int dir, const char *marker, int depth)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int fd = openat(dir, ".", O_RDONLY | O_DIRECTORY);

	if (depth > 80 || fd < 0 || !(d = fdopendir(fd)))
		return false;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (strstr(de->d_name, marker))
			return true;
		if (de->d_type == DT_DIR) {
			_cleanup_close_ int sub =
			    openat(dir, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
			if (sub >= 0 && marker_below(sub, marker, depth + 1))
				return true;
		}
	}
	return false;
}

static bool nowhere(const char *marker)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "/tmp/%s", marker);
	return !marker_below(top_fd, marker, 0) && access(path, F_OK) < 0;
}

/* A refusal: the error names the entry (escaped as the code shows it),
 * says why, the sentinel is whole and the marker nowhere. */
static void refused(struct stage *s, const char *what, const char *entry_shown, const char *why,
		    const char *marker)
{
	char want[512];

	/* entry_shown "prefix*": a long name, cut in the message */
	if (entry_shown[strlen(entry_shown) - 1] == '*')
		snprintf(want, sizeof(want), "entry \"%.*s", (int)strlen(entry_shown) - 1,
			 entry_shown);
	else
		snprintf(want, sizeof(want), "entry \"%s\"", entry_shown);
	check(s->rc < 0, "%s: refused", what);
	check(strstr(s->err.msg, want) != NULL, "%s: the error names the entry: %s", what,
	      s->err.msg);
	if (why)
		check(strstr(s->err.msg, why) != NULL, "%s: the error says \"%s\"", what, why);
	check(sentinel_intact(s), "%s: the sentinel is untouched", what);
	if (marker)
		check(nowhere(marker), "%s: no %s anywhere", what, marker);
}

/* ---- ordinary layers ---- */

static void test_layers_in_order(void)
{
	struct stage s;
	struct tar t1, t2;

	stage_new(&s);
	tar_open(&t1, GZIP);
	t_dir(&t1, "./", 0755);
	t_dir(&t1, "/", 0755); /* the root, as umoci's insert names it */
	t_dir(&t1, "./etc/", 0755);
	t_file(&t1, "./etc/os-release", 0644, "one\n");
	t_file(&t1, "./etc/old", 0644, "old\n");
	t_dir(&t1, "./var/cache/x", 0755); /* its parents are implied */
	t_file(&t1, "./var/cache/x/y", 0600, "y\n");
	t_symlink(&t1, "./bin", "usr/bin");
	t_file(&t1, "usr/bin/sh", 04755, "#!sh\n");
	t_hardlink(&t1, "usr/bin/ash", "usr/bin/sh");
	tar_close(&t1);
	tar_open(&t2, ZSTD);
	t_file(&t2, "etc/os-release", 0644, "two\n");
	t_file(&t2, "etc/.wh.old", 0644, "");
	t_file(&t2, "etc/new", 0640, "new\n");
	t_file(&t2, ".wh.var", 0644, "");
	tar_close(&t2);
	layer(&s, t1.path, true);
	layer(&s, t2.path, true);
	finish(&s);
	check(s.rc == 0, "two layers (gzip, zstd) unpack: %s", s.rc ? s.err.msg : "");
	check(content_is(s.target_fd, "etc/os-release", "two\n"), "the upper layer wins");
	check(!exists(s.target_fd, "etc/old"), "a whiteout removes a lower file");
	check(content_is(s.target_fd, "etc/new", "new\n") &&
		  (mode_of(s.target_fd, "etc/new") & 07777) == 0640,
	      "with its mode");
	check(!exists(s.target_fd, "var"), "a whiteout removes a lower directory tree");
	check(link_is(s.target_fd, "bin", "usr/bin"), "a symlink stays a link");
	check((mode_of(s.target_fd, "usr/bin/sh") & 07777) == 0755 && s.u.stats.setid_cleared == 1,
	      "setuid is cleared and counted (%llu)", (unsigned long long)s.u.stats.setid_cleared);
	struct stat a, b;
	check(fstatat(s.target_fd, "usr/bin/sh", &a, 0) == 0 &&
		  fstatat(s.target_fd, "usr/bin/ash", &b, 0) == 0 && a.st_ino == b.st_ino,
	      "a hard link within the tree is a hard link");
	check((mode_of(s.target_fd, "usr") & 07777) == 0755, "an implied directory is 0755");
	check(s.u.stats.whiteouts == 2 && s.u.stats.hardlinks == 1 && s.u.stats.symlinks == 1,
	      "whiteouts, hard links and symlinks are counted");
	struct stat st;
	check(fstatat(s.target_fd, "etc/new", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		  st.st_mtim.tv_sec == 1700000000,
	      "a file keeps its time");
	check(sentinel_intact(&s), "the sentinel is untouched");
}

static void test_opaque(void)
{
	struct stage s;
	struct tar t1, t2;

	stage_new(&s);
	tar_open(&t1, PLAIN);
	t_file(&t1, "o/old", 0644, "old\n");
	t_file(&t1, "o/sub/old2", 0644, "old2\n");
	t_file(&t1, "o/keep/lower", 0644, "lower\n");
	t_file(&t1, "other", 0644, "other\n");
	tar_close(&t1);
	tar_open(&t2, PLAIN);
	t_file(&t2, "o/early", 0644, "early\n");
	t_file(&t2, "o/keep/mine", 0644, "mine\n");
	t_file(&t2, "o/.wh..wh..opq", 0644, "");
	t_file(&t2, "o/late", 0644, "late\n");
	tar_close(&t2);
	layer(&s, t1.path, true);
	layer(&s, t2.path, true);
	finish(&s);
	check(s.rc == 0, "an opaque directory: %s", s.rc ? s.err.msg : "");
	check(!exists(s.target_fd, "o/old") && !exists(s.target_fd, "o/sub"),
	      "the lower layer's entries are gone");
	check(content_is(s.target_fd, "o/early", "early\n") &&
		  content_is(s.target_fd, "o/late", "late\n"),
	      "this layer's entries before and after the marker stay");
	check(content_is(s.target_fd, "o/keep/mine", "mine\n") &&
		  !exists(s.target_fd, "o/keep/lower"),
	      "a directory this layer wrote into loses its lower entries, keeps its own");
	check(!exists(s.target_fd, "o/.wh..wh..opq") && content_is(s.target_fd, "other", "other\n"),
	      "the marker is not written, other directories are untouched");
	check(s.u.stats.opaque == 1, "opaque counted");
}

static void test_dir_modes(void)
{
	struct stage s;
	struct tar t;

	stage_new(&s);
	tar_open(&t, PLAIN);
	t_dir(&t, "ro", 0555);
	t_file(&t, "ro/f", 0444, "f\n");
	t_dir(&t, "ro/sub", 0500);
	t_file(&t, "ro/sub/g", 0644, "g\n");
	t_dir(&t, "sgid", 02775);
	t_dir(&t, "tmp", 01777);
	tar_close(&t);
	layer(&s, t.path, false);
	finish(&s);
	check(s.rc == 0, "a read-only directory is filled: %s", s.rc ? s.err.msg : "");
	check((mode_of(s.target_fd, "ro") & 07777) == 0555 &&
		  (mode_of(s.target_fd, "ro/sub") & 07777) == 0500,
	      "directory modes are applied at finish");
	check(content_is(s.target_fd, "ro/f", "f\n") && content_is(s.target_fd, "ro/sub/g", "g\n"),
	      "with their files in them");
	check((mode_of(s.target_fd, "sgid") & 07777) == 0775 && s.u.stats.setid_cleared == 1,
	      "setgid of a directory is cleared");
	check((mode_of(s.target_fd, "tmp") & 07777) == 01777, "the sticky bit stays");
	struct stat st;
	check(fstatat(s.target_fd, "ro", &st, 0) == 0 && st.st_mtim.tv_sec == 1700000000,
	      "a directory keeps its time though entries were made in it");
	struct sbx_err err;
	check(sbx_remove_tree_at(s.target_fd, "ro", &err) == 0 && !exists(s.target_fd, "ro"),
	      "and the tree can be removed: %s", err.msg);
}

static void test_digest(void)
{
	struct stage s;
	struct tar t;
	char hex[65], digest[80];
	uint64_t size = 0;

	tar_open(&t, GZIP);
	t_file(&t, "a", 0644, "a\n");
	tar_close(&t);
	{
		_cleanup_close_ int fd = open(t.path, O_RDONLY);
		struct sbx_err err;

		if (fd < 0 || sbx_sha256_fd(fd, hex, &size, &err) < 0)
			exit(2);
	}
	snprintf(digest, sizeof(digest), "sha256:%s", hex);

	stage_new(&s);
	{
		_cleanup_close_ int fd = open(t.path, O_RDONLY);
		s.rc = img_unpack_tar(&s.u, fd, true, digest, size, &s.err);
	}
	finish(&s);
	check(s.rc == 0, "the right digest and size pass: %s", s.rc ? s.err.msg : "");

	stage_new(&s);
	digest[10] = digest[10] == '0' ? '1' : '0';
	{
		_cleanup_close_ int fd = open(t.path, O_RDONLY);
		s.rc = img_unpack_tar(&s.u, fd, true, digest, size, &s.err);
	}
	finish(&s);
	check(s.rc < 0 && strstr(s.err.msg, "hash to sha256:"),
	      "a blob that does not hash to its digest is refused: %s", s.err.msg);

	stage_new(&s);
	{
		_cleanup_close_ int fd = open(t.path, O_RDONLY);
		s.rc = img_unpack_tar(&s.u, fd, true, NULL, size - 1, &s.err);
	}
	finish(&s);
	check(s.rc < 0 && strstr(s.err.msg, "more than"),
	      "a blob longer than its size is refused: %s", s.err.msg);
	stage_new(&s);
	{
		_cleanup_close_ int fd = open(t.path, O_RDONLY);
		s.rc = img_unpack_tar(&s.u, fd, true, NULL, size + 1, &s.err);
	}
	finish(&s);
	check(s.rc < 0 && strstr(s.err.msg, "its descriptor says"),
	      "a blob shorter than its size is refused: %s", s.err.msg);
}

/* ---- hostile input ---- */

/* One layer of entries made by `fill`, unpacked (whiteouts on) into a
 * new stage; the stage is finished or aborted. */
static void one_layer(struct stage *s, void (*fill)(struct tar *t, void *arg), void *arg,
		      bool whiteouts)
{
	struct tar t;

	stage_new(s);
	tar_open(&t, PLAIN);
	fill(&t, arg);
	tar_close(&t);
	layer(s, t.path, whiteouts);
	finish(s);
}

static void f_dotdot(struct tar *t, void *arg)
{
	(void)arg;
	t_file(t, "ok", 0644, "fine\n");
	t_file(t, "../ESCAPED-dotdot", 0644, "pwned\n");
}

static void f_dotdot_mid(struct tar *t, void *arg)
{
	(void)arg;
	t_file(t, "a/../../sentinel/ESCAPED-mid", 0644, "pwned\n");
}

static void f_absolute(struct tar *t, void *arg)
{
	char name[PATH_MAX];

	snprintf(name, sizeof(name), "%s/ESCAPED-abs", (const char *)arg);
	t_file(t, name, 0644, "pwned\n");
}

static void f_symlink_then_write(struct tar *t, void *arg)
{
	(void)arg;
	t_symlink(t, "ln", "../sentinel");
	t_file(t, "ln/ESCAPED-through", 0644, "pwned\n");
}

static void f_symlink_abs_then_dir(struct tar *t, void *arg)
{
	t_symlink(t, "ln", (const char *)arg);
	t_dir(t, "ln/ESCAPED-dir", 0755);
}

static void f_symlink_then_file_same_name(struct tar *t, void *arg)
{
	char target[PATH_MAX];

	snprintf(target, sizeof(target), "%s/keep", (const char *)arg);
	t_symlink(t, "f", target);
	t_file(t, "f", 0644, "pwned\n");
	t_symlink(t, "g", "../sentinel/keep");
	t_dir(t, "g", 0755);
	t_file(t, "g/inside", 0644, "inside\n");
}

static void f_hardlink_outside(struct tar *t, void *arg)
{
	(void)arg;
	t_hardlink(t, "h", "../sentinel/keep");
}

static void f_hardlink_abs(struct tar *t, void *arg)
{
	(void)arg;
	t_hardlink(t, "h", "/etc/passwd");
}

static void f_hardlink_symlink(struct tar *t, void *arg)
{
	t_symlink(t, "s", (const char *)arg);
	t_hardlink(t, "h", "s");
}

static void f_hardlink_via_symlink(struct tar *t, void *arg)
{
	t_symlink(t, "s", (const char *)arg);
	t_hardlink(t, "h", "s/keep");
}

static void f_hardlink_dir(struct tar *t, void *arg)
{
	(void)arg;
	t_dir(t, "d", 0755);
	t_hardlink(t, "h", "d");
}

static void f_hardlink_missing(struct tar *t, void *arg)
{
	(void)arg;
	t_hardlink(t, "h", "nothing-here");
}

static void f_hardlink_self(struct tar *t, void *arg)
{
	(void)arg;
	t_file(t, "h", 0644, "h\n");
	t_hardlink(t, "./h", "h");
}

static void f_hardlink_then_rewrite(struct tar *t, void *arg)
{
	(void)arg;
	t_file(t, "f", 0644, "original\n");
	t_hardlink(t, "h", "f");
	t_file(t, "h", 0644, "rewritten\n");
}

static void f_specials(struct tar *t, void *arg)
{
	(void)arg;
	t_special(t, "dev/null", AE_IFCHR);
	t_special(t, "dev/sda", AE_IFBLK);
	t_special(t, "fifo", AE_IFIFO);
	t_file(t, "plain", 06755, "x\n");
}

static void f_type_changes(struct tar *t, void *arg)
{
	(void)arg;
	t_dir(t, "x", 0755);
	t_file(t, "x/child", 0644, "child\n");
	t_file(t, "x", 0644, "file\n");
	t_symlink(t, "x", "../sentinel/keep");
	t_file(t, "y", 0644, "file\n");
	t_dir(t, "y", 0700);
	t_file(t, "y/z", 0644, "z\n");
}

static void f_deep(struct tar *t, void *arg)
{
	char name[PATH_MAX] = "";

	(void)arg;
	for (int i = 0; i < SBX_TREE_MAX_DEPTH; i++)
		strcat(name, "d/");
	strcat(name, "ESCAPED-deep");
	t_file(t, name, 0644, "deep\n");
}

static void f_long_component(struct tar *t, void *arg)
{
	char name[300];

	(void)arg;
	memset(name, 'n', 256);
	strcpy(name + 256, "ESCAPED-long");
	t_file(t, name, 0644, "long\n");
}

static void f_long_path(struct tar *t, void *arg)
{
	char name[PATH_MAX + 512] = "";

	(void)arg;
	while (strlen(name) < PATH_MAX) {
		memset(name + strlen(name), 'd', 200);
		strcpy(name + strlen(name), "/");
	}
	strcat(name, "ESCAPED-path");
	t_file(t, name, 0644, "long\n");
}

static void f_whiteout_dotdot(struct tar *t, void *arg)
{
	t_file(t, (const char *)arg, 0644, "");
}

static void f_whiteout_plain(struct tar *t, void *arg)
{
	(void)arg;
	t_file(t, "etc/.wh.passwd", 0644, "");
}

static void f_below_whiteout(struct tar *t, void *arg)
{
	(void)arg;
	t_file(t, ".wh.etc/passwd", 0644, "");
}

static void f_weird_names(struct tar *t, void *arg)
{
	(void)arg;
	t_file(t, "new\nline", 0644, "1\n");
	t_file(t, "\xe2\x80\xaetxt.exe", 0644, "2\n");
	t_file(t, "caf\xc3\xa9", 0644, "3\n");
	t_file(t, "raw\xff\xfe", 0644, "4\n");
	t_file(t, "./a//b/./c", 0644, "5\n");
}

static void f_pax_dotdot(struct tar *t, void *arg)
{
	char name[400];

	(void)arg;
	/* Over 100 bytes: the name travels in a pax header, with a
	 * harmless-looking cut in the ustar field. */
	snprintf(name, sizeof(name), "%0150d/../../../sentinel/ESCAPED-pax", 0);
	t_file(t, name, 0644, "pwned\n");
}

static void f_many(struct tar *t, void *arg)
{
	int n = *(int *)arg;
	char name[64];

	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "many/%d/f", i % 100);
		t_file(t, name, 0644, "");
	}
}

static void f_sparse_huge(struct tar *t, void *arg)
{
	struct archive_entry *e = entry("sparse", AE_IFREG, 0644);
	static char block[4096];

	(void)arg;
	archive_entry_set_size(e, 1ll << 40);
	archive_entry_sparse_add_entry(e, 0, 4096);
	archive_entry_sparse_add_entry(e, (1ll << 40) - 4096, 4096);
	if (archive_write_header(t->a, e) != ARCHIVE_OK)
		exit(2);
	archive_write_data(t->a, block, sizeof(block));
	archive_write_data(t->a, block, sizeof(block));
	archive_entry_free(e);
}

static void f_sparse_ok(struct tar *t, void *arg)
{
	struct archive_entry *e = entry("sparse", AE_IFREG, 0644);

	(void)arg;
	archive_entry_set_size(e, 1 << 20);
	static char data[4096 + 5];

	archive_entry_sparse_add_entry(e, 4096, 5);
	if (archive_write_header(t->a, e) != ARCHIVE_OK)
		exit(2);
	/* the writer takes the logical bytes and keeps those of the map */
	memcpy(data + 4096, "hello", 5);
	archive_write_data(t->a, data, sizeof(data));
	archive_entry_free(e);
}

static void f_big_file(struct tar *t, void *arg)
{
	size_t n = *(size_t *)arg;
	char *buf = calloc(1, n);
	struct archive_entry *e = entry("big", AE_IFREG, 0644);

	archive_entry_set_size(e, (la_int64_t)n);
	put(t, e, buf, n);
	free(buf);
}

/* A file (or FIFO) whose header declares 1 TiB, and no data: refused on
 * the header, before libarchive would read (or skip) any of it. */
static const char *raw_huge(char type)
{
	static char path[PATH_MAX];
	unsigned char h[1536] = {0};
	static int n;

	snprintf(path, sizeof(path), "%s/raw-%d.tar", top, ++n);
	raw_header(h, "huge", type, 1ull << 40);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, h, sizeof(h)) != (ssize_t)sizeof(h))
		exit(2);
	close(fd);
	return path;
}

static void test_hostile(void)
{
	struct stage s;
	char sentinel_abs[PATH_MAX + 64];

	one_layer(&s, f_dotdot, NULL, true);
	refused(&s, "../name", "../ESCAPED-dotdot", "\"..\"", "ESCAPED-dotdot");

	one_layer(&s, f_dotdot_mid, NULL, true);
	refused(&s, "a/../../name", "a/../../sentinel/ESCAPED-mid", "\"..\"", "ESCAPED-mid");
	check(!exists(s.target_fd, "a"), "nothing of the refused entry was made");

	stage_new(&s);
	img_unpack_abort(&s.u);
	snprintf(sentinel_abs, sizeof(sentinel_abs), "%s/case-%d/sentinel", top, case_no + 1);
	one_layer(&s, f_absolute, sentinel_abs, true);
	{
		char shown[PATH_MAX + 128];

		snprintf(shown, sizeof(shown), "%s/ESCAPED-abs", sentinel_abs);
		refused(&s, "an absolute name", shown, "absolute", "ESCAPED-abs");
	}

	one_layer(&s, f_symlink_then_write, NULL, true);
	refused(&s, "a symlink, then a file below it", "ln/ESCAPED-through", "below a symlink",
		"ESCAPED-through");

	snprintf(sentinel_abs, sizeof(sentinel_abs), "%s/case-%d/sentinel", top, case_no + 1);
	one_layer(&s, f_symlink_abs_then_dir, sentinel_abs, true);
	refused(&s, "a symlink to an absolute directory, then a directory below it",
		"ln/ESCAPED-dir/", "below a symlink", "ESCAPED-dir");

	/* the same across layers: a symlink in one, an entry below it in the next */
	{
		struct tar t1, t2;

		stage_new(&s);
		snprintf(sentinel_abs, sizeof(sentinel_abs), "%s/sentinel", s.dir);
		tar_open(&t1, GZIP);
		t_symlink(&t1, "up", sentinel_abs);
		t_symlink(&t1, "rel", "../sentinel");
		tar_close(&t1);
		tar_open(&t2, ZSTD);
		t_file(&t2, "up/ESCAPED-layer", 0644, "pwned\n");
		tar_close(&t2);
		layer(&s, t1.path, true);
		layer(&s, t2.path, true);
		finish(&s);
		refused(&s, "a symlink in a lower layer, a file below it in an upper one",
			"up/ESCAPED-layer", "below a symlink", "ESCAPED-layer");

		const char *whiteouts[] = {"up/.wh.keep", "rel/.wh..wh..opq", "up/.wh..wh..opq"};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(whiteouts); i++) {
			stage_new(&s);
			tar_open(&t2, PLAIN);
			t_file(&t2, whiteouts[i], 0644, "");
			tar_close(&t2);
			layer(&s, t1.path, true);
			layer(&s, t2.path, true);
			finish(&s);
			refused(&s, whiteouts[i], whiteouts[i], "below a symlink", NULL);
		}
	}

	snprintf(sentinel_abs, sizeof(sentinel_abs), "%s/case-%d/sentinel", top, case_no + 1);
	one_layer(&s, f_symlink_then_file_same_name, sentinel_abs, true);
	check(s.rc == 0, "a symlink replaced by a file: %s", s.rc ? s.err.msg : "");
	check(content_is(s.target_fd, "f", "pwned\n") && !S_ISLNK(mode_of(s.target_fd, "f")),
	      "the file replaced the link");
	check(S_ISDIR(mode_of(s.target_fd, "g")) && content_is(s.target_fd, "g/inside", "inside\n"),
	      "a directory replaced the other link");
	check(sentinel_intact(&s), "nothing was written through either link");

	one_layer(&s, f_hardlink_outside, NULL, true);
	refused(&s, "a hard link to ../", "h", "\"..\"", NULL);
	one_layer(&s, f_hardlink_abs, NULL, true);
	refused(&s, "a hard link to an absolute name", "h", "absolute", NULL);
	snprintf(sentinel_abs, sizeof(sentinel_abs), "%s/case-%d/sentinel/keep", top, case_no + 1);
	one_layer(&s, f_hardlink_symlink, sentinel_abs, true);
	refused(&s, "a hard link to a symlink", "h", "a symlink", NULL);
	snprintf(sentinel_abs, sizeof(sentinel_abs), "%s/case-%d/sentinel", top, case_no + 1);
	one_layer(&s, f_hardlink_via_symlink, sentinel_abs, true);
	refused(&s, "a hard link through a symlink", "h", "below a symlink", NULL);
	one_layer(&s, f_hardlink_dir, NULL, true);
	refused(&s, "a hard link to a directory", "h", "a directory", NULL);
	one_layer(&s, f_hardlink_missing, NULL, true);
	refused(&s, "a hard link to nothing", "h", "not there", NULL);
	one_layer(&s, f_hardlink_self, NULL, true);
	refused(&s, "a hard link to itself", "./h", "itself", NULL);

	one_layer(&s, f_hardlink_then_rewrite, NULL, true);
	check(s.rc == 0 && content_is(s.target_fd, "f", "original\n") &&
		  content_is(s.target_fd, "h", "rewritten\n"),
	      "a file over a hard link replaces the link, never writes through it: %s",
	      s.rc ? s.err.msg : "");

	one_layer(&s, f_specials, NULL, true);
	check(s.rc == 0 && s.u.stats.special == 3 && !exists(s.target_fd, "fifo") &&
		  !exists(s.target_fd, "dev/null") && !exists(s.target_fd, "dev/sda"),
	      "devices and FIFOs are skipped and counted (%llu)",
	      (unsigned long long)s.u.stats.special);
	check((mode_of(s.target_fd, "plain") & 07777) == 0755 && s.u.stats.setid_cleared == 1,
	      "setuid and setgid together are cleared, counted once");

	one_layer(&s, f_type_changes, NULL, true);
	check(s.rc == 0 && link_is(s.target_fd, "x", "../sentinel/keep") &&
		  !exists(s.target_fd, "x/child"),
	      "a directory, then a file, then a symlink: the last stays, alone: %s",
	      s.rc ? s.err.msg : "");
	check(S_ISDIR(mode_of(s.target_fd, "y")) && content_is(s.target_fd, "y/z", "z\n") &&
		  (mode_of(s.target_fd, "y") & 07777) == 0700,
	      "a file, then a directory: the directory");
	check(sentinel_intact(&s), "the sentinel is untouched");

	one_layer(&s, f_deep, NULL, true);
	refused(&s, "a path deeper than the bound", "d/d/d/d/d/d/d/d/d/d/d/d/d/d/d*", "deeper",
		"ESCAPED-deep");
	one_layer(&s, f_long_component, NULL, true);
	refused(&s, "a component over 255 bytes", "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn*",
		"over 255 bytes", "ESCAPED-long");
	one_layer(&s, f_long_path, NULL, true);
	refused(&s, "a path over PATH_MAX", "dddddddddddddddddddddddddddddddddddddddddddd*",
		"a path over", "ESCAPED-path");

	const char *wh[] = {".wh..", ".wh...", "a/.wh..", "a/.wh...", ".wh."};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(wh); i++) {
		one_layer(&s, f_whiteout_dotdot, (void *)wh[i], true);
		refused(&s, wh[i], wh[i], "whiteout of", NULL);
	}
	one_layer(&s, f_whiteout_plain, NULL, false);
	refused(&s, "a whiteout in a plain archive", "etc/.wh.passwd", "outside an image layer",
		NULL);
	one_layer(&s, f_below_whiteout, NULL, true);
	refused(&s, "an entry below a whiteout", ".wh.etc/passwd", "below a whiteout", NULL);

	one_layer(&s, f_weird_names, NULL, true);
	check(s.rc == 0, "names are bytes: %s", s.rc ? s.err.msg : "");
	check(content_is(s.target_fd, "new\nline", "1\n") &&
		  content_is(s.target_fd, "\xe2\x80\xaetxt.exe", "2\n") &&
		  content_is(s.target_fd, "caf\xc3\xa9", "3\n") &&
		  content_is(s.target_fd, "raw\xff\xfe", "4\n") &&
		  content_is(s.target_fd, "a/b/c", "5\n"),
	      "newlines, bidi overrides, UTF-8 and raw bytes are kept as they are; ./a//b/./c/ "
	      "is a/b/c");
	check(s.u.stats.files == 5, "five files");

	/* What docker and Go write: UTF-8 pax paths without a hdrcharset,
	 * read here in the C locale (where libarchive cannot convert them
	 * to the locale's charset and offers the UTF-8 form) */
	{
		struct tar t;

		if (!setlocale(LC_ALL, "C.UTF-8"))
			exit(2);
		t.a = archive_write_new();
		snprintf(t.path, sizeof(t.path), "%s/utf8.tar", top);
		archive_write_set_format_pax(t.a);
		if (archive_write_open_filename(t.a, t.path) != ARCHIVE_OK)
			exit(2);
		t_file(&t, "caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac", 0644, "utf8\n");
		tar_close(&t);
		setlocale(LC_ALL, "C");
		stage_new(&s);
		layer(&s, t.path, true);
		finish(&s);
		check(s.rc == 0 &&
			  content_is(s.target_fd, "caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac", "utf8\n"),
		      "a UTF-8 pax path read in the C locale keeps its bytes: %s",
		      s.rc ? s.err.msg : "");
	}

	one_layer(&s, f_pax_dotdot, NULL, true);
	refused(&s, "a pax path with ..", "000000000000000000000000000000*", "\"..\"",
		"ESCAPED-pax");

	/* limits */
	int n = 2001;
	one_layer(&s, f_many, &n, true);
	check(s.rc == 0 && s.u.stats.files == 2001, "2001 entries within the limits unpack: %s",
	      s.rc ? s.err.msg : "");
	{
		stage_new(&s);
		s.lim.max_entries = 2000;
		struct tar t;
		tar_open(&t, GZIP);
		f_many(&t, &n);
		tar_close(&t);
		layer(&s, t.path, true);
		finish(&s);
		check(s.rc < 0 && strstr(s.err.msg, "--max-entries"),
		      "past max_entries is refused: %s", s.err.msg);
	}
	size_t big = 2u << 20;
	{
		stage_new(&s);
		s.lim.max_file_bytes = 1u << 20;
		struct tar t;
		tar_open(&t, GZIP);
		f_big_file(&t, &big);
		tar_close(&t);
		layer(&s, t.path, true);
		finish(&s);
		check(s.rc < 0 && strstr(s.err.msg, "--max-file-bytes") &&
			  strstr(s.err.msg, "entry \"big\""),
		      "a file past max_file_bytes is refused (a gzip bomb of zeros): %s",
		      s.err.msg);
		check(!exists(s.target_fd, "big"), "before anything of it is written");
	}
	{
		stage_new(&s);
		s.lim.max_bytes = 3u << 20;
		struct tar t1, t2;
		tar_open(&t1, ZSTD);
		f_big_file(&t1, &big);
		tar_close(&t1);
		tar_open(&t2, PLAIN);
		f_big_file(&t2, &big);
		tar_close(&t2);
		layer(&s, t1.path, true);
		layer(&s, t2.path, true);
		finish(&s);
		check(s.rc < 0 && strstr(s.err.msg, "--max-bytes"),
		      "past max_bytes over two layers is refused: %s", s.err.msg);
	}
	one_layer(&s, f_sparse_huge, NULL, true);
	check(s.rc < 0 && strstr(s.err.msg, "--max-file-bytes") &&
		  strstr(s.err.msg, "entry \"sparse\""),
	      "a sparse file declaring 1 TiB is refused: %s", s.err.msg);
	one_layer(&s, f_sparse_ok, NULL, true);
	{
		struct stat st;
		char buf[8] = "";
		_cleanup_close_ int fd = openat(s.target_fd, "sparse", O_RDONLY);

		check(s.rc == 0 && fstat(fd, &st) == 0 && st.st_size == 1 << 20 &&
			  pread(fd, buf, 5, 4096) == 5 && !memcmp(buf, "hello", 5),
		      "a sparse file within the limits has its size and data: %s",
		      s.rc ? s.err.msg : "");
	}
	/* headers libarchive only warns about: refused, not guessed at */
	for (int kind = 0; kind < 2; kind++) {
		unsigned char h[512], data[1024];
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s/special-%d.tar", top, kind);
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0)
			exit(2);
		for (int i = 0; i < 40; i++) {
			memset(data, 0, sizeof(data));
			if (kind == 0)
				memset(data, 'l', 200); /* GNU long names, 40 in a row */
			else
				memcpy(data, "9999 broken=\n", 13); /* a pax length that lies */
			raw_header(h, "././@LongLink", kind == 0 ? 'L' : 'x', kind == 0 ? 201 : 13);
			if (write(fd, h, 512) != 512 || write(fd, data, 512) != 512)
				exit(2);
		}
		raw_header(h, "ESCAPED-special", '0', 0);
		memset(data, 0, sizeof(data));
		if (write(fd, h, 512) != 512 || write(fd, data, 1024) != 1024)
			exit(2);
		close(fd);
		stage_new(&s);
		layer(&s, path, true);
		finish(&s);
		check(s.rc < 0 && nowhere("ESCAPED-special") && !exists(s.target_fd, "lllll"),
		      "%s: refused, nothing written: %s",
		      kind == 0 ? "40 GNU long-name headers in a row" : "malformed pax headers",
		      s.err.msg);
	}

	stage_new(&s);
	layer(&s, raw_huge('0'), true);
	finish(&s);
	check(s.rc < 0 && strstr(s.err.msg, "entry \"huge\"") &&
		  strstr(s.err.msg, "--max-file-bytes"),
	      "a header declaring 1 TiB is refused on the header: %s", s.err.msg);
	/* libarchive reads no data for a FIFO or a device, whatever the
	 * header's size says: skipped, and the archive goes on */
	const char types[] = {'6', '3'};
	for (size_t i = 0; i < sizeof(types); i++) {
		stage_new(&s);
		layer(&s, raw_huge(types[i]), true);
		finish(&s);
		check(s.rc == 0 && s.u.stats.special == 1 && !exists(s.target_fd, "huge"),
		      "a header of type %c declaring 1 TiB is skipped: %s", types[i],
		      s.rc ? s.err.msg : "");
	}
	{
		stage_new(&s);
		int fd = openat(s.target_fd, "..", O_RDONLY | O_DIRECTORY);
		_cleanup_close_ int junk = openat(fd, "junk", O_RDWR | O_CREAT | O_TRUNC, 0600);
		close(fd);
		if (junk < 0 || write(junk, "this is not a tar archive at all\n", 33) != 33)
			exit(2);
		lseek(junk, 0, SEEK_SET);
		s.rc = img_unpack_tar(&s.u, junk, true, NULL, 0, &s.err);
		finish(&s);
		check(s.rc < 0, "garbage is refused: %s", s.err.msg);
	}
}

static void hash_or_die(int fd, char digest[IMG_DIGEST_LEN + 1])
{
	struct sbx_err err;

	if (img_tree_hash(fd, digest, &err) < 0) {
		check(false, "img_tree_hash: %s", err.msg);
		strcpy(digest, "failed");
	}
}

static void sha_hex(const void *p, size_t len, char hex[65])
{
	unsigned char md[32];
	unsigned int mdlen = 0;

	EVP_Digest(p, len, md, &mdlen, EVP_sha256(), NULL);
	sbx_sha256_hex(md, hex);
}

static int mkfile(int dir, const char *name, mode_t mode, const char *content)
{
	int fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL, 0600);

	if (fd < 0 || write(fd, content, strlen(content)) != (ssize_t)strlen(content) ||
	    fchmod(fd, mode) < 0)
		exit(2);
	return close(fd);
}

/* ---- a rootfs directory ---- */

static int src_dir(const char *name)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", top, name);
	if (mkdir(path, 0755) < 0 || (fd = open(path, O_RDONLY | O_DIRECTORY)) < 0)
		exit(2);
	return fd;
}

static void test_dir_source(void)
{
	struct stage s, st2;
	struct tar t;
	char d1[IMG_DIGEST_LEN + 1], d2[IMG_DIGEST_LEN + 1];
	int src = src_dir("rootfs-1");

	MUST(mkdirat(src, "bin", 0755));
	mkfile(src, "bin/su", 04755, "su\n");
	MUST(linkat(src, "bin/su", src, "bin/su2", 0));
	MUST(mkdirat(src, "ro", 0755));
	mkfile(src, "ro/f", 0444, "f\n");
	MUST(fchmodat(src, "ro", 0555, 0));
	MUST(symlinkat("/etc/passwd", src, "passwd-link"));
	MUST(symlinkat("../sentinel", src, "ln"));
	MUST(mkfifoat(src, "fifo", 0644));

	stage_new(&s);
	s.rc = img_unpack_dir(&s.u, src, &s.err);
	finish(&s);
	check(s.rc == 0, "a rootfs directory is copied: %s", s.rc ? s.err.msg : "");
	check(content_is(s.target_fd, "bin/su", "su\n") &&
		  (mode_of(s.target_fd, "bin/su") & 07777) == 0755 && s.u.stats.setid_cleared == 2,
	      "its files, setuid cleared (both names of a hard link: %llu)",
	      (unsigned long long)s.u.stats.setid_cleared);
	check(content_is(s.target_fd, "bin/su2", "su\n"), "a hard link is copied as a file");
	check((mode_of(s.target_fd, "ro") & 07777) == 0555 &&
		  content_is(s.target_fd, "ro/f", "f\n"),
	      "a read-only directory with its file");
	check(link_is(s.target_fd, "passwd-link", "/etc/passwd") &&
		  link_is(s.target_fd, "ln", "../sentinel"),
	      "symlinks are copied as links, never followed");
	check(!exists(s.target_fd, "fifo") && s.u.stats.special == 1, "a FIFO is skipped, counted");
	check(sentinel_intact(&s), "the sentinel is untouched");

	/* the same tree from a tar hashes the same */
	tar_open(&t, GZIP);
	t_dir(&t, "bin", 0755);
	t_file(&t, "bin/su", 04755, "su\n");
	t_hardlink(&t, "bin/su2", "bin/su");
	t_dir(&t, "ro", 0555);
	t_file(&t, "ro/f", 0444, "f\n");
	t_symlink(&t, "passwd-link", "/etc/passwd");
	t_symlink(&t, "ln", "../sentinel");
	t_special(&t, "fifo", AE_IFIFO);
	tar_close(&t);
	stage_new(&st2);
	layer(&st2, t.path, false);
	finish(&st2);
	hash_or_die(s.target_fd, d1);
	hash_or_die(st2.target_fd, d2);
	check(st2.rc == 0 && !strcmp(d1, d2),
	      "a directory and a tar of the same tree hash the same: %s %s", d1, d2);

	/* refusals: the same writer, the same rules */
	int bad = src_dir("rootfs-2");
	mkfile(bad, ".wh.x", 0644, "");
	stage_new(&s);
	s.rc = img_unpack_dir(&s.u, bad, &s.err);
	finish(&s);
	refused(&s, "a whiteout name in a rootfs directory", ".wh.x", "outside an image layer",
		NULL);

	int deep = src_dir("rootfs-3");
	char name[PATH_MAX] = "";
	for (int i = 0; i <= SBX_TREE_MAX_DEPTH; i++) {
		strcat(name, i ? "/d" : "d");
		MUST(mkdirat(deep, name, 0755));
	}
	stage_new(&s);
	s.rc = img_unpack_dir(&s.u, deep, &s.err);
	finish(&s);
	refused(&s, "a rootfs directory deeper than the bound", "d/d/d/d/d/d/d/d/d/d*", "deeper",
		NULL);
	stage_new(&s);
	s.lim.max_entries = 10;
	s.rc = img_unpack_dir(&s.u, deep, &s.err);
	finish(&s);
	check(s.rc < 0 && strstr(s.err.msg, "--max-entries"),
	      "a rootfs directory past max_entries: %s", s.err.msg);
	/* a source entry that cannot be read: the error names it */
	int locked = src_dir("rootfs-4");
	MUST(mkdirat(locked, "etc", 0755));
	mkfile(locked, "etc/shadow", 0000, "secret\n");
	stage_new(&s);
	s.rc = img_unpack_dir(&s.u, locked, &s.err);
	finish(&s);
	if (geteuid() != 0)
		refused(&s, "an unreadable source file", "etc/shadow", "open it in the source",
			NULL);
	else
		check(s.rc == 0, "(as root an unreadable source file is read: %s)",
		      s.rc ? s.err.msg : "");
	close(locked);
	close(src);
	close(bad);
	close(deep);
}

/* ---- the tree hash ---- */

/* A tiny tree whose digest the test computes from the documented format
 * (images_treehash.c's header), not from the code. */
static int tiny_tree(const char *name)
{
	char path[PATH_MAX];
	int fd, a;

	snprintf(path, sizeof(path), "%s/%s", top, name);
	if (mkdir(path, 0700) < 0 || (fd = open(path, O_RDONLY | O_DIRECTORY)) < 0)
		exit(2);
	if (mkdirat(fd, "a", 0700) < 0 || fchmodat(fd, "a", 0755, 0) < 0 ||
	    (a = openat(fd, "a", O_RDONLY | O_DIRECTORY)) < 0)
		exit(2);
	mkfile(a, "c", 0644, "x");
	close(a);
	if (symlinkat("a/c", fd, "a-b") < 0)
		exit(2);
	mkfile(fd, "b", 0600, "");
	return fd;
}

static void test_treehash(void)
{
	char d1[IMG_DIGEST_LEN + 1], d2[IMG_DIGEST_LEN + 1], want[80];
	char hx[65], he[65], hall[65];
	int t1 = tiny_tree("hash-1"), t2;

	/* "a" < "a-b" < "a/c" < "b": '-' is 0x2d, '/' 0x2f */
	sha_hex("x", 1, hx);
	sha_hex("", 0, he);
	char rec[1024];
	size_t n = 0;
#define REC(...) (n += (size_t)snprintf(rec + n, sizeof(rec) - n, __VA_ARGS__) + 1)
	REC("d 0755 a");
	REC("l 0777 a-b");
	REC("a/c");
	REC("f 0644 a/c");
	REC("1");
	REC("%s", hx);
	REC("f 0600 b");
	REC("0");
	REC("%s", he);
#undef REC
	sha_hex(rec, n, hall);
	snprintf(want, sizeof(want), "sha256:%s", hall);
	hash_or_die(t1, d1);
	check(!strcmp(d1, want), "the tiny tree's hash is the documented one: %s (want %s)", d1,
	      want);
	hash_or_die(t1, d2);
	check(!strcmp(d1, d2), "the same tree hashes the same twice");

	/* the same content made in another order, other times */
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/hash-2", top);
	if (mkdir(path, 0700) < 0 || (t2 = open(path, O_RDONLY | O_DIRECTORY)) < 0)
		exit(2);
	mkfile(t2, "b", 0600, "");
	if (symlinkat("a/c", t2, "a-b") < 0 || mkdirat(t2, "a", 0755) < 0 ||
	    fchmodat(t2, "a", 0755, 0) < 0)
		exit(2);
	int a2 = openat(t2, "a", O_RDONLY | O_DIRECTORY);
	mkfile(a2, "c", 0644, "x");
	close(a2);
	struct timespec old[2] = {{.tv_sec = 1000}, {.tv_sec = 1000}};
	MUST(utimensat(t2, "a/c", old, AT_SYMLINK_NOFOLLOW));
	MUST(utimensat(t2, "a-b", old, AT_SYMLINK_NOFOLLOW));
	hash_or_die(t2, d2);
	check(!strcmp(d1, d2), "order of creation and times do not change it");

	MUST(fchmodat(t2, "b", 0644, 0));
	hash_or_die(t2, d2);
	check(strcmp(d1, d2) != 0, "a mode change does");
	MUST(fchmodat(t2, "b", 0600, 0));
	hash_or_die(t2, d2);
	check(!strcmp(d1, d2), "and back");

	MUST(unlinkat(t2, "a/c", 0));
	mkfile(t2, "a/c", 0644, "y");
	hash_or_die(t2, d2);
	check(strcmp(d1, d2) != 0, "a content change does");
	MUST(unlinkat(t2, "a/c", 0));
	mkfile(t2, "a/c", 0644, "x");

	MUST(unlinkat(t2, "a-b", 0));
	MUST(symlinkat("a/d", t2, "a-b"));
	hash_or_die(t2, d2);
	check(strcmp(d1, d2) != 0, "a link target change does");
	MUST(unlinkat(t2, "a-b", 0));
	MUST(symlinkat("a/c", t2, "a-b"));

	MUST(renameat(t2, "b", t2, "b2"));
	hash_or_die(t2, d2);
	check(strcmp(d1, d2) != 0, "a name change does");
	MUST(renameat(t2, "b2", t2, "b"));
	hash_or_die(t2, d2);
	check(!strcmp(d1, d2), "and back");

	/* Unreadable to their owner: hashed, their modes put back. */
	MUST(mkdirat(t2, "locked", 0700));
	mkfile(t2, "locked/secret", 0000, "s");
	MUST(fchmodat(t2, "locked", 0000, 0));
	mkfile(t2, "nothing", 0000, "n");
	struct sbx_err err;
	check(img_tree_hash(t2, d2, &err) == 0, "a 0000 directory and file are hashed: %s",
	      err.msg);
	check((mode_of(t2, "locked") & 07777) == 0 && (mode_of(t2, "nothing") & 07777) == 0,
	      "and get their modes back");
	char d3[IMG_DIGEST_LEN + 1];
	MUST(fchmodat(t2, "locked", 0700, 0));
	MUST(fchmodat(t2, "locked/secret", 0644, 0));
	hash_or_die(t2, d3);
	check(strcmp(d2, d3) != 0, "whose modes count");
	MUST(fchmodat(t2, "locked/secret", 0000, 0));
	MUST(fchmodat(t2, "locked", 0000, 0));
	hash_or_die(t2, d3);
	check(!strcmp(d2, d3), "the same modes, the same hash");

	/* owners and times in an archive: never applied, never hashed */
	struct stage s1, s2;
	struct tar x, y;
	tar_open(&x, PLAIN);
	tar_open(&y, GZIP);
	for (int i = 0; i < 2; i++) {
		struct tar *t = i ? &y : &x;
		struct archive_entry *e = entry("f", AE_IFREG, 0644);

		archive_entry_set_uid(e, i ? 0 : 1234);
		archive_entry_set_uname(e, i ? "root" : "someone");
		archive_entry_set_mtime(e, i ? 5 : 1700000000, 0);
		archive_entry_set_size(e, 2);
		put(t, e, "f\n", 2);
	}
	tar_close(&x);
	tar_close(&y);
	stage_new(&s1);
	layer(&s1, x.path, true);
	finish(&s1);
	stage_new(&s2);
	layer(&s2, y.path, true);
	finish(&s2);
	hash_or_die(s1.target_fd, d1);
	hash_or_die(s2.target_fd, d2);
	check(s1.rc == 0 && s2.rc == 0 && !strcmp(d1, d2),
	      "owners and times in an archive do not change the hash");

	/* a FIFO fails it */
	MUST(mkfifoat(t2, "fifo", 0600));
	check(img_tree_hash(t2, d2, &err) < 0 && strstr(err.msg, "fifo"),
	      "a FIFO in the tree fails the hash: %s", err.msg);
	MUST(unlinkat(t2, "fifo", 0));
	close(t1);
	close(t2);
}

int main(int argc, char **argv)
{
	struct sbx_err err;
	const char *what = argc > 1 ? argv[1] : "unpack";

	snprintf(top, sizeof(top), "/tmp/sbx-test-unpack-XXXXXX");
	if (!mkdtemp(top) || (top_fd = open(top, O_RDONLY | O_DIRECTORY)) < 0)
		return 2;
	umask(022);
	if (!strcmp(what, "treehash")) {
		test_treehash();
	} else {
		test_layers_in_order();
		test_opaque();
		test_dir_modes();
		test_digest();
		test_hostile();
		test_dir_source();
	}
	if (getenv("SBX_TEST_KEEP")) {
		printf("# kept %s\n", top);
		return check_done();
	}
	{
		char *slash = strrchr(top, '/');
		_cleanup_close_ int tmp = open("/tmp", O_RDONLY | O_DIRECTORY);

		check(tmp >= 0 && sbx_remove_tree_at(tmp, slash + 1, &err) == 0,
		      "the temporary directory is removed: %s", err.msg);
	}
	return check_done();
}
