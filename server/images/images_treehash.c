/* SPDX-License-Identifier: Apache-2.0 */
/* The canonical rootfs hash: the digest of an image imported from a rootfs
 * directory or tar (docs/design/rootfs-hash.md, "The canonical rootfs hash", is written from this
 * comment; keep the two the same).
 *
 *   Entries: every directory, regular file and symbolic link below the
 *   root, not the root itself. An entry's path is its name relative to
 *   the root: components joined by single "/", no leading "./" or "/", no
 *   trailing "/" ("etc", "etc/passwd", "usr/bin/python3").
 *
 *   Order: ascending by the bytes of the path, compared as unsigned bytes
 *   (C strcmp / memcmp); a path sorts before every longer path it is a
 *   prefix of. So "a" < "a-b" < "a/c" ('-' is 0x2d, '/' 0x2f).
 *
 *   One record per entry, with T its type and PPPP its permission bits
 *   (st_mode & 07777) as exactly 4 octal digits:
 *     directory      "d PPPP <path>\0"
 *     regular file   "f PPPP <path>\0<size>\0<sha256>\0"
 *                    size: the length in bytes, decimal, no leading zeros
 *                    ("0" when empty); sha256: of the content, 64
 *                    lowercase hex digits
 *     symbolic link  "l PPPP <path>\0<target>\0"
 *                    target: the bytes readlink returns; PPPP is the
 *                    link's own (0777 on Linux)
 *   ("\0" is one NUL byte; there is one space after T and after PPPP.)
 *
 *   Digest: "sha256:" + the lowercase hex sha256 of all the records,
 *   concatenated in that order.
 *
 * Not in it: times, owners, extended attributes, the root's own mode, how
 * many names a file has (a hard link is a regular file under each name).
 * A device, FIFO or socket anywhere fails the hash (unpacking never makes
 * one). The walk never follows a link: every open is sbx_open_beneath
 * (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | ...), entries are
 * read with fstatat(AT_SYMLINK_NOFOLLOW), and a file or directory that
 * changes type or inode between the two fails it. Directories and files
 * that the image made unreadable to their owner (0000, 0311) are ours:
 * they are given the read bit for as long as the hash reads them and get
 * their mode back after. */
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
#include "inode_set.h"
#include "sha256.h"
#include "tree.h"
#include "util.h"

/* A child of a directory appears as its record ("name") and, for a
 * directory, as the block of everything below it ("name/"): sorting both
 * kinds of key within each directory gives the global byte order of the
 * full paths without holding the whole tree (every path below "name/"
 * starts with that key, and no sibling's key falls between them). */
struct item_stat { /* what the hash needs of an lstat: a big directory holds many */
	mode_t st_mode;
	dev_t st_dev;
	ino_t st_ino;
	off_t st_size;
	nlink_t st_nlink;
};
struct item {
	char *key; /* the name, plus "/" for a block */
	bool block;
	struct item_stat st;
};

struct hash_walk {
	EVP_MD_CTX *md;
	struct sbx_err *err;
	/* The content digest of every file with more than one name, by
	 * inode: a hard link's record is its file's, and hashing the file
	 * again under each name let a tar of one 4 GiB (sparse) file and a
	 * million links to it cost 4 PiB of reading. */
	struct sbx_inode_set linked;
	char (*linked_hex)[65];
	size_t n_linked, cap_linked;
};

static int item_cmp(const void *a, const void *b)
{
	return strcmp(((const struct item *)a)->key, ((const struct item *)b)->key);
}

static int feed(struct hash_walk *w, const void *p, size_t len)
{
	if (!EVP_DigestUpdate(w->md, p, len))
		return sbx_fail(w->err, "sha256 failed");
	return 0;
}

static int feed_str(struct hash_walk *w, const char *s)
{
	return feed(w, s, strlen(s) + 1); /* with its NUL */
}

static int record_head(struct hash_walk *w, char type, mode_t mode, const char *path)
{
	char head[8];

	snprintf(head, sizeof(head), "%c %04o ", type, (unsigned)(mode & 07777));
	if (feed(w, head, 7) < 0)
		return -1;
	return feed_str(w, path);
}

static int hash_file(struct hash_walk *w, int dir, const char *name, const char *path,
		     const struct item_stat *st)
{
	char hex[65], size[24];
	uint64_t bytes = 0;
	struct stat now;
	mode_t was;
	long seen = st->st_nlink > 1 ? sbx_inode_get(&w->linked, st->st_dev, st->st_ino) : -1;

	if (seen >= 0) {
		/* the same inode (the tree is the stage's: nobody changes it) */
		snprintf(size, sizeof(size), "%llu", (unsigned long long)st->st_size);
		if (record_head(w, 'f', st->st_mode, path) < 0 || feed_str(w, size) < 0)
			return -1;
		return feed_str(w, w->linked_hex[seen]);
	}
	_cleanup_close_ int fd =
	    sbx_open_beneath_owned(dir, name, O_RDONLY | O_NONBLOCK, 0400, &was, w->err);
	if (fd < 0)
		return sbx_err_prefix(w->err, "tree hash");
	if (was != (mode_t)-1 && fchmod(fd, was) < 0)
		return sbx_fail_errno(w->err, "tree hash: chmod %s", path);
	if (fstat(fd, &now) < 0)
		return sbx_fail_errno(w->err, "tree hash: stat %s", path);
	if (!S_ISREG(now.st_mode) || now.st_ino != st->st_ino || now.st_dev != st->st_dev)
		return sbx_fail(w->err, "tree hash: %s changed while hashed", path);
	if (sbx_sha256_fd_max(fd, (uint64_t)st->st_size, NULL, NULL, hex, &bytes, w->err) < 0)
		return sbx_err_prefix(w->err, "tree hash: %s", path);
	if (bytes != (uint64_t)st->st_size)
		return sbx_fail(w->err, "tree hash: %s changed while hashed", path);
	if (now.st_nlink > 1) {
		if (w->n_linked == w->cap_linked) {
			size_t cap = w->cap_linked ? 2 * w->cap_linked : 64;
			char(*m)[65] = realloc(w->linked_hex, cap * sizeof(*m));

			if (!m)
				return sbx_fail_errnum(w->err, ENOMEM, "tree hash");
			w->linked_hex = m;
			w->cap_linked = cap;
		}
		memcpy(w->linked_hex[w->n_linked], hex, sizeof(hex));
		if (!sbx_inode_put(&w->linked, st->st_dev, st->st_ino, (long)w->n_linked++))
			return sbx_fail_errnum(w->err, ENOMEM, "tree hash");
	}
	snprintf(size, sizeof(size), "%llu", (unsigned long long)bytes);
	if (record_head(w, 'f', st->st_mode, path) < 0 || feed_str(w, size) < 0)
		return -1;
	return feed_str(w, hex);
}

static int hash_symlink(struct hash_walk *w, int dir, const char *name, const char *path,
			const struct item_stat *st)
{
	char target[PATH_MAX];
	ssize_t n = readlinkat(dir, name, target, sizeof(target));

	if (n < 0)
		return sbx_fail_errno(w->err, "tree hash: readlink %s", path);
	if ((size_t)n >= sizeof(target))
		return sbx_fail(w->err, "tree hash: %s: a target over %d bytes", path,
				PATH_MAX - 1);
	target[n] = '\0';
	if (record_head(w, 'l', st->st_mode, path) < 0)
		return -1;
	return feed_str(w, target);
}

static void items_free(struct item *items, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(items[i].key);
	free(items);
}

/* The children of dir, two items for each directory. */
static int list_items(struct hash_walk *w, int dir, const char *prefix, struct item **out,
		      size_t *count)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct item *items = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;

	*out = NULL;
	*count = 0;
	if (!(d = sbx_dir_list(dir)))
		return sbx_fail_errno(w->err, "tree hash: open %s", prefix[0] ? prefix : ".");
	while ((errno = 0, de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dir, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			items_free(items, n);
			return sbx_fail_errno(w->err, "tree hash: stat %s/%s", prefix, de->d_name);
		}
		for (int twice = 0; twice < (S_ISDIR(st.st_mode) ? 2 : 1); twice++) {
			if (n == cap) {
				size_t c = cap ? 2 * cap : 32;
				struct item *m = realloc(items, c * sizeof(*m));

				if (!m) {
					items_free(items, n);
					return sbx_fail_errnum(w->err, ENOMEM, "tree hash");
				}
				items = m;
				cap = c;
			}
			items[n] = (struct item){
			    .block = twice == 1,
			    .st = {st.st_mode, st.st_dev, st.st_ino, st.st_size, st.st_nlink},
			};
			if (asprintf(&items[n].key, "%s%s", de->d_name, twice ? "/" : "") < 0) {
				items_free(items, n);
				return sbx_fail_errnum(w->err, ENOMEM, "tree hash");
			}
			n++;
		}
	}
	if (errno) {
		items_free(items, n);
		return sbx_fail_errno(w->err, "tree hash: read %s", prefix[0] ? prefix : ".");
	}
	if (n)
		qsort(items, n, sizeof(*items), item_cmp);
	*out = items;
	*count = n;
	return 0;
}

static int hash_dir(struct hash_walk *w, int dir, const char *prefix, int depth)
{
	struct item *items;
	size_t n;
	int rc = 0;

	if (depth > SBX_TREE_MAX_DEPTH + 1)
		return sbx_fail(w->err, "tree hash: %s: deeper than %d directories", prefix,
				SBX_TREE_MAX_DEPTH);
	if (list_items(w, dir, prefix, &items, &n) < 0)
		return -1;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct item *it = &items[i];
		char path[PATH_MAX];
		char *name = it->key;
		int len;

		if (it->block)
			name[strlen(name) - 1] = '\0';
		len = snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "/" : "", name);
		if (len < 0 || (size_t)len >= sizeof(path)) {
			rc = sbx_fail(w->err, "tree hash: %s/%s: a path over %d bytes", prefix,
				      name, PATH_MAX - 1);
			break;
		}
		if (it->block) {
			mode_t was;
			int sub = sbx_open_beneath_owned(dir, name, O_RDONLY | O_DIRECTORY, 0500,
							 &was, w->err);
			struct stat now;

			if (sub < 0) {
				rc = sbx_err_prefix(w->err, "tree hash");
				break;
			}
			if (fstat(sub, &now) < 0 || now.st_ino != it->st.st_ino ||
			    now.st_dev != it->st.st_dev)
				rc = sbx_fail(w->err, "tree hash: %s changed while hashed", path);
			else
				rc = hash_dir(w, sub, path, depth + 1);
			if (was != (mode_t)-1 && fchmod(sub, was) < 0 && rc == 0)
				rc = sbx_fail_errno(w->err, "tree hash: chmod %s", path);
			close(sub);
		} else if (S_ISDIR(it->st.st_mode)) {
			rc = record_head(w, 'd', it->st.st_mode, path);
		} else if (S_ISREG(it->st.st_mode)) {
			rc = hash_file(w, dir, name, path, &it->st);
		} else if (S_ISLNK(it->st.st_mode)) {
			rc = hash_symlink(w, dir, name, path, &it->st);
		} else {
			rc = sbx_fail(w->err, "tree hash: %s: a device, FIFO or socket", path);
		}
	}
	items_free(items, n);
	return rc;
}

int img_tree_hash(int root_fd, char digest[IMG_DIGEST_LEN + 1], struct sbx_err *err)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char hex[65];
	struct hash_walk w = {.err = err};
	int rc;

	OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, NULL);
	w.md = EVP_MD_CTX_new();
	if (!w.md || !EVP_DigestInit_ex(w.md, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(w.md);
		return sbx_fail_errnum(err, ENOMEM, "tree hash");
	}
	rc = hash_dir(&w, root_fd, "", 0);
	if (rc == 0 && (!EVP_DigestFinal_ex(w.md, md, &mdlen) || mdlen != 32))
		rc = sbx_fail(err, "tree hash: sha256 failed");
	EVP_MD_CTX_free(w.md);
	sbx_inode_set_free(&w.linked);
	free(w.linked_hex);
	if (rc < 0)
		return -1;
	sbx_sha256_hex(md, hex);
	snprintf(digest, IMG_DIGEST_LEN + 1, "sha256:%s", hex);
	return 0;
}
