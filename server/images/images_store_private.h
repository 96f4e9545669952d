/* SPDX-License-Identifier: Apache-2.0 */
/* What the store's own files share (images_store.c: layout, locks, tmp/
 * entries, rm; images_commit.c: stages, commit, tags; images_refs.c:
 * refs.json and the store's other JSON files; images_resolve.c: resolve,
 * hold, pins, list, inspect). Nothing outside them sees struct img_store's
 * fields. */
#ifndef SBX_IMAGES_STORE_PRIVATE_H
#define SBX_IMAGES_STORE_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "err.h"
#include "images.h"

struct img_store {
	char *dir;
	int dir_fd;  /* <dir> */
	int lock_fd; /* <dir>/lock, kept open (img_store_lock opens its own) */
	int sha_fd;  /* <dir>/sha256 */
	int tmp_fd;  /* <dir>/tmp */
};

/* The largest refs.json or image.json the store reads back: its own files,
 * bounded so that a damaged one cannot take sbxd's memory. */
#define IMG_STORE_JSON_MAX (16u << 20)

/* The store lock: LOCK_SH to read refs and open a tree (resolve, list,
 * inspect), LOCK_EX to change refs or move a tree. Never held long: trees
 * are unpacked and removed outside it. */
int img_store_lock(struct img_store *s, int op, struct sbx_err *err); /* the lock's fd */
/* The shared lock for sbxd's readers, waited for at most IMG_READ_WAIT_MS:
 * the lock's fd, or IMG_BUSY. */
int img_store_lock_read(struct img_store *s, struct sbx_err *err);
void img_store_unlock(int lock_fd);

/* refs.json as a JSON object {"name:tag": "sha256:<hex>"}, every key and
 * value checked (a missing file is an empty store). Writing replaces the
 * file by rename, fsync'd, under the exclusive store lock. */
int img_refs_read(struct img_store *s, json_t **refs, struct sbx_err *err);
int img_refs_write(struct img_store *s, json_t *refs, struct sbx_err *err);
/* Whether any key of refs other than `except` (NULL: none) names digest. */
bool img_refs_name(json_t *refs, const char *digest, const char *except);

/* A JSON object file of the store, at most IMG_STORE_JSON_MAX bytes, never
 * through a link. */
int img_json_read_at(int dirfd, const char *name, json_t **out, struct sbx_err *err);
/* Written to name.new, fsync'd, renamed over name, the directory fsync'd. */
int img_json_write_at(int dirfd, const char *name, json_t *v, struct sbx_err *err);

/* ---- tmp/ entries (images_store.c) ---- */

/* A directory of tmp/ this process holds (its flock), to be removed once
 * the store lock is released: removing a tree takes as long as the tree
 * is big, and nobody else touches a tmp/ entry whose flock is held. */
struct img_doomed {
	int lock_fd;
	char name[64];
};
#define IMG_DOOMED_MAX 16
void img_doomed_remove(struct img_store *s, struct img_doomed *d, size_t n);
/* Under the exclusive store lock (so that no cleaner can see it before its
 * flock is taken): a new tmp/<random>/, flock'ed. */
int img_tmp_dir_new(struct img_store *s, char name[64], int *lock_fd, struct sbx_err *err);
/* Under the exclusive store lock: every tmp/ entry whose holder is gone (an
 * import or rm that died), taken over (its flock), at most IMG_DOOMED_MAX. */
int img_collect_stale(struct img_store *s, struct img_doomed *d, size_t *n, struct sbx_err *err);
/* Under the exclusive store lock: sha256/<hex> open with an exclusive
 * flock, or IMG_REFUSED (the message names ref) when a run holds it. */
int img_take_tree(struct img_store *s, const char *hex, const char *ref, struct sbx_err *err);
/* Under the exclusive store lock, with img_take_tree's fd held: sha256/<hex>
 * renamed into a new tmp/ entry, for img_doomed_remove. */
int img_doom_tree(struct img_store *s, const char *hex, struct img_doomed *d, struct sbx_err *err);

/* The hex of a valid "sha256:<hex>", or NULL. */
const char *img_digest_hex(const char *digest);
/* sha256/<hex> is a directory of the store. */
bool img_tree_present(struct img_store *s, const char *hex);

#endif
