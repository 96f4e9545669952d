/* SPDX-License-Identifier: Apache-2.0 */
/* The two readers of an unpack (images_internal.h): a tar stream through
 * libarchive (its reader only, never archive_write_disk) and a rootfs
 * directory walked without following links. Each describes its entries as
 * struct unpack_entry and hands them to the one writer,
 * images_unpack_entry.c, which holds every rule about what may be written
 * where. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "images_internal.h"
#include "images_unpack_entry.h"
#include "sha256.h"
#include "tree.h"
#include "util.h"

int img_unpack_begin(struct img_unpack *u, int root_fd, const struct img_limits *lim,
		     const struct img_progress *pr, struct sbx_err *err)
{
	*u = (struct img_unpack){.root_fd = root_fd, .lim = lim, .pr = pr};
	return unpack_state_new(u, err);
}

int img_unpack_finish(struct img_unpack *u, struct sbx_err *err)
{
	int rc = unpack_apply_dir_modes(u, err);

	unpack_state_free(u);
	return rc;
}

void img_unpack_abort(struct img_unpack *u)
{
	unpack_state_free(u);
}

/* ---- tar ---- */

/* What libarchive reads comes through here: hashed and counted, so the
 * blob is verified in the same pass that unpacks it (its fd may have been
 * changed since the source checked it). */
struct blob_reader {
	int fd;
	EVP_MD_CTX *md;
	uint64_t count;
	uint64_t limit; /* the descriptor's size; 0: none */
	unsigned char buf[128 * 1024];
};

static int blob_take(struct blob_reader *br, ssize_t *got)
{
	ssize_t n;

	do
		n = read(br->fd, br->buf, sizeof(br->buf));
	while (n < 0 && errno == EINTR);
	*got = n;
	if (n < 0)
		return -1;
	if (br->limit && (uint64_t)n > br->limit - br->count) {
		errno = EFBIG;
		return -1;
	}
	if (n > 0 && !EVP_DigestUpdate(br->md, br->buf, (size_t)n)) {
		errno = ENOMEM;
		return -1;
	}
	br->count += (uint64_t)n;
	return 0;
}

static la_ssize_t blob_read(struct archive *a, void *arg, const void **out)
{
	struct blob_reader *br = arg;
	ssize_t n;

	if (blob_take(br, &n) < 0) {
		if (errno == EFBIG)
			archive_set_error(a, EFBIG,
					  "the blob holds more than the %llu bytes "
					  "its descriptor says",
					  (unsigned long long)br->limit);
		else
			archive_set_error(a, errno, "read: %s", strerror(errno));
		return -1;
	}
	*out = br->buf;
	return n;
}

static void archive_freep(struct archive **a)
{
	if (*a)
		archive_read_free(*a);
}

static void md_freep(EVP_MD_CTX **md)
{
	EVP_MD_CTX_free(*md);
}

static int tar_content(void *arg, struct unpack_out *out, struct sbx_err *err)
{
	struct archive *a = arg;

	for (;;) {
		const void *buf;
		size_t len;
		la_int64_t off;
		int r = archive_read_data_block(a, &buf, &len, &off);

		if (r == ARCHIVE_EOF)
			return 0;
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
			return sbx_fail(err, "read: %s", archive_error_string(a));
		if (off < 0)
			return sbx_fail(err, "read: a negative offset");
		if (unpack_write(out, (uint64_t)off, buf, len, err) < 0)
			return -1;
	}
}

/* libarchive converts names to the locale's charset and gives NULL where
 * it cannot; its UTF-8 form is the other way to the same bytes. */
static const char *entry_text(const char *mbs, const char *utf8)
{
	return mbs ? mbs : utf8;
}

static int entry_from_tar(struct archive *a, struct archive_entry *ae, uint64_t n,
			  struct unpack_entry *e, char fallback[32], struct sbx_err *err)
{
	const char *hardlink =
	    entry_text(archive_entry_hardlink(ae), archive_entry_hardlink_utf8(ae));
	la_int64_t size = archive_entry_size_is_set(ae) ? archive_entry_size(ae) : 0;

	*e = (struct unpack_entry){
	    .name = entry_text(archive_entry_pathname(ae), archive_entry_pathname_utf8(ae)),
	    .mode = archive_entry_perm(ae) & 07777,
	    .mtime = {.tv_nsec = UTIME_OMIT},
	    .content = tar_content,
	    .arg = a,
	};
	if (!e->name) {
		snprintf(fallback, 32, "#%llu", (unsigned long long)n);
		e->name = fallback;
		return sbx_fail(err, "entry %s: a name libarchive cannot read", fallback);
	}
	if (size < 0) {
		char shown[UNPACK_SHOWN_MAX];

		unpack_shown(shown, e->name);
		return sbx_fail(err, "entry \"%s\": a negative size", shown);
	}
	e->size = (uint64_t)size;
	if (archive_entry_mtime_is_set(ae)) {
		e->mtime.tv_sec = archive_entry_mtime(ae);
		e->mtime.tv_nsec = archive_entry_mtime_nsec(ae);
		if (e->mtime.tv_nsec < 0 || e->mtime.tv_nsec >= 1000000000)
			e->mtime.tv_nsec = 0;
	}
	if (hardlink) {
		e->kind = UE_HARDLINK;
		e->link = hardlink;
		return 0;
	}
	switch (archive_entry_filetype(ae)) {
	case AE_IFREG:
		e->kind = UE_FILE;
		break;
	case AE_IFDIR:
		e->kind = UE_DIR;
		break;
	case AE_IFLNK:
		e->kind = UE_SYMLINK;
		e->link = entry_text(archive_entry_symlink(ae), archive_entry_symlink_utf8(ae));
		break;
	default: /* devices, FIFOs, sockets, and what libarchive cannot name */
		e->kind = UE_SPECIAL;
		break;
	}
	return 0;
}

int img_unpack_tar(struct img_unpack *u, int fd, bool whiteouts, const char *expect_digest,
		   uint64_t expect_size, struct sbx_err *err)
{
	_cleanup_(archive_freep) struct archive *a = archive_read_new();
	_cleanup_(md_freep) EVP_MD_CTX *md = NULL;
	_cleanup_free_ struct blob_reader *br = malloc(sizeof(*br));
	struct archive_entry *ae;
	uint64_t n = 0, data = 0;
	int r;

	OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, NULL);
	md = EVP_MD_CTX_new();
	if (!a || !md || !br || !EVP_DigestInit_ex(md, EVP_sha256(), NULL))
		return sbx_fail_errnum(err, ENOMEM, "unpack");
	*br = (struct blob_reader){.fd = fd, .md = md, .limit = expect_size};
	/* Tar in its three spellings and nothing else (no cpio, zip, iso,
	 * whose readers are more code facing hostile input), plain, gzip or
	 * zstd, detected from the bytes. */
	if (archive_read_support_filter_none(a) != ARCHIVE_OK ||
	    archive_read_support_filter_gzip(a) != ARCHIVE_OK ||
	    archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
	    archive_read_support_format_tar(a) != ARCHIVE_OK ||
	    archive_read_support_format_gnutar(a) != ARCHIVE_OK)
		return sbx_fail(err, "libarchive: %s", archive_error_string(a));
	if (archive_read_open(a, br, NULL, blob_read, NULL) != ARCHIVE_OK)
		return sbx_fail(err, "not a tar archive: %s", archive_error_string(a));
	unpack_layer_begin(u);
	while ((r = archive_read_next_header(a, &ae)) != ARCHIVE_EOF) {
		struct unpack_entry e;
		char fallback[32];
		/* Headers and names take at most this much of the stream
		 * besides the data the entries before declared: past it, the
		 * stream is something else (a bomb of pax headers). */
		const uint64_t meta_max = (n + 16) * (64u * 1024) + (1u << 20);

		/* ARCHIVE_RETRY too: libarchive's "damaged archive, skip
		 * to the next header" is a refusal here. So is a warning
		 * ("Ignoring malformed pax extended attribute", "Too many
		 * special headers"): libarchive would go on with a guess that
		 * another unpacker need not share, and the image would not be
		 * the same tree everywhere. Only a name it cannot convert to
		 * the locale's charset goes on, read in its UTF-8 form. */
		if (r != ARCHIVE_OK && !(r == ARCHIVE_WARN && archive_error_string(a) &&
					 strstr(archive_error_string(a), "can't be converted")))
			return sbx_fail(err, "after %llu entries: %s", (unsigned long long)n,
					archive_error_string(a) ? archive_error_string(a)
								: "an unreadable header");
		n++;
		if (entry_from_tar(a, ae, n, &e, fallback, err) < 0)
			return -1;
		if ((uint64_t)archive_filter_bytes(a, 0) > meta_max + data)
			return sbx_fail(err, "entry %llu: the archive's headers are past any bound",
					(unsigned long long)n);
		/* bounded by the limits (unpack_apply refuses what declares more) */
		data += (e.size + 511) & ~(uint64_t)511;
		if (unpack_apply(u, &e, whiteouts, err) < 0)
			return -1;
	}
	if (!expect_digest && !expect_size)
		return 0;
	/* The end-of-archive blocks and padding libarchive left unread are
	 * part of the blob too. */
	for (;;) {
		ssize_t got;

		if (blob_take(br, &got) < 0)
			return errno == EFBIG ? sbx_fail(err,
							 "the blob holds more than the %llu bytes "
							 "its descriptor says",
							 (unsigned long long)expect_size)
					      : sbx_fail_errno(err, "read");
		if (got == 0)
			break;
	}
	if (expect_size && br->count != expect_size)
		return sbx_fail(err, "the blob holds %llu bytes, its descriptor says %llu",
				(unsigned long long)br->count, (unsigned long long)expect_size);
	if (expect_digest) {
		unsigned char mdbuf[EVP_MAX_MD_SIZE];
		unsigned int mdlen = 0;
		char hex[65];

		if (!EVP_DigestFinal_ex(md, mdbuf, &mdlen) || mdlen != 32)
			return sbx_fail(err, "sha256 failed");
		sbx_sha256_hex(mdbuf, hex);
		if (strncmp(expect_digest, "sha256:", 7) != 0 || strcmp(expect_digest + 7, hex))
			return sbx_fail(err,
					"the blob's bytes hash to sha256:%s, not %s (it changed "
					"since it was verified)",
					hex, expect_digest);
	}
	return 0;
}

/* ---- a rootfs directory ---- */

struct dir_content {
	int fd;
	uint64_t size;
};

static int dir_content(void *arg, struct unpack_out *out, struct sbx_err *err)
{
	struct dir_content *c = arg;
	_cleanup_free_ char *buf = malloc(128 * 1024);
	uint64_t off = 0;

	if (!buf)
		return sbx_fail_errnum(err, ENOMEM, "copy");
	for (;;) {
		ssize_t n = read(c->fd, buf, 128 * 1024);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_fail_errno(err, "read");
		if (n == 0)
			break;
		if ((uint64_t)n > c->size - off)
			return sbx_fail(err, "it grew while it was copied");
		if (unpack_write(out, off, buf, (size_t)n, err) < 0)
			return -1;
		off += (uint64_t)n;
	}
	if (off != c->size)
		return sbx_fail(err, "it shrank while it was copied");
	return 0;
}

static int copy_dir(struct img_unpack *u, int src, const char *prefix, int depth,
		    struct sbx_err *err);

static int copy_one(struct img_unpack *u, int src, const char *name, const char *rel, int depth,
		    struct sbx_err *err)
{
	struct unpack_entry e = {.name = rel, .mtime = {.tv_nsec = UTIME_OMIT}};
	char target[PATH_MAX];
	struct stat st;

	if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return unpack_refuse(err, errno, rel, "stat it in the source: %s", strerror(errno));
	e.mode = st.st_mode & 07777;
	e.mtime = st.st_mtim;
	if (S_ISDIR(st.st_mode)) {
		e.kind = UE_DIR;
		if (unpack_apply(u, &e, false, err) < 0)
			return -1;
		_cleanup_close_ int sub =
		    sbx_open_beneath(src, name, O_RDONLY | O_DIRECTORY, 0, err);
		if (sub < 0)
			return unpack_refuse(err, err->errnum, rel, "open it in the source: %s",
					     strerror(err->errnum));
		return copy_dir(u, sub, rel, depth + 1, err);
	}
	if (S_ISREG(st.st_mode)) {
		/* O_NONBLOCK: a file swapped for a FIFO since the fstatat
		 * cannot hang the open; the fstat below sees it. */
		_cleanup_close_ int fd = sbx_open_beneath(src, name, O_RDONLY | O_NONBLOCK, 0, err);
		struct stat now;

		if (fd < 0)
			return unpack_refuse(err, err->errnum, rel, "open it in the source: %s",
					     strerror(err->errnum));
		if (fstat(fd, &now) < 0)
			return unpack_refuse(err, errno, rel, "stat it in the source: %s",
					     strerror(errno));
		if (!S_ISREG(now.st_mode) || now.st_ino != st.st_ino)
			return unpack_refuse(err, ESTALE, rel, "it changed while it was copied");
		struct dir_content c = {.fd = fd, .size = (uint64_t)now.st_size};
		e.kind = UE_FILE;
		e.size = c.size;
		e.mode = now.st_mode & 07777;
		e.content = dir_content;
		e.arg = &c;
		return unpack_apply(u, &e, false, err);
	}
	if (S_ISLNK(st.st_mode)) {
		ssize_t n = readlinkat(src, name, target, sizeof(target));

		if (n < 0)
			return unpack_refuse(err, errno, rel, "readlink in the source: %s",
					     strerror(errno));
		if ((size_t)n >= sizeof(target))
			return unpack_refuse(err, ENAMETOOLONG, rel,
					     "a symlink target over %d bytes", PATH_MAX - 1);
		target[n] = '\0';
		e.kind = UE_SYMLINK;
		e.link = target;
		return unpack_apply(u, &e, false, err);
	}
	e.kind = UE_SPECIAL;
	return unpack_apply(u, &e, false, err);
}

static int copy_dir(struct img_unpack *u, int src, const char *prefix, int depth,
		    struct sbx_err *err)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;

	/* The writer refuses names deeper than this already (the entry that
	 * would go past it): this only keeps the recursion bounded. */
	if (depth > SBX_TREE_MAX_DEPTH + 1)
		return sbx_fail(err, "%s: deeper than %d directories", prefix, SBX_TREE_MAX_DEPTH);
	if (!(d = sbx_dir_list(src)))
		return sbx_fail_errno(err, "%s", prefix[0] ? prefix : "the source directory");
	while ((errno = 0, de = readdir(d))) {
		char rel[PATH_MAX];
		int len;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		len =
		    snprintf(rel, sizeof(rel), "%s%s%s", prefix, prefix[0] ? "/" : "", de->d_name);
		if (len < 0 || (size_t)len >= sizeof(rel))
			return sbx_fail(err, "%s/%s: a path over %d bytes", prefix, de->d_name,
					PATH_MAX - 1);
		if (copy_one(u, src, de->d_name, rel, depth, err) < 0)
			return -1;
	}
	if (errno)
		return sbx_fail_errno(err, "%s", prefix[0] ? prefix : "the source directory");
	return 0;
}

int img_unpack_dir(struct img_unpack *u, int src_dirfd, struct sbx_err *err)
{
	unpack_layer_begin(u);
	return copy_dir(u, src_dirfd, "", 0, err);
}
