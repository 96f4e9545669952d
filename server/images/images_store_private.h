/* SPDX-License-Identifier: Apache-2.0 */
/* What the store's own files share (images_store.c: layout, locks, tmp/
 * entries, rm; images_commit.c: stages, commit, tags; images_refs.c:
 * refs.json and the store's other JSON files; images_resolve.c: resolve,
 * hold, pins, list, inspect). Nothing outside them sees struct img_store's
 * fields. */
#ifndef SBX_IMAGES_STORE_PRIVATE_H
#define SBX_IMAGES_STORE_PRIVATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include <jansson.h>

#include "err.h"
#include "images.h"

/* refs.json as parsed from one version of the file, kept while the file
 * is that version: sbxd's Health and CreateRun would otherwise parse it
 * whole on every call (0.4 s of CPU for 100,000 tags, and the memory of
 * each parse on each RPC worker at once). refs.json is only ever replaced
 * by rename, so another version is another inode; size and times are
 * compared too, against an inode number reused after two replacements. */
struct img_refs_cache {
	bool loaded;  /* the fields below are refs.json's as of (dev, ino, ...) */
	bool present; /* refs.json exists (else: no tags yet, refs empty) */
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtim, ctim;
	json_t *refs;	   /* {"name:tag": "sha256:<hex>"}, checked; never changed */
	json_t *named;	   /* {"sha256:<hex>": true} for every digest a tag names */
	const char **keys; /* refs' keys, sorted (refs owns the strings) */
	size_t n;
};

struct img_store {
	char *dir;
	int dir_fd;  /* <dir> */
	int lock_fd; /* <dir>/lock, kept open (img_store_lock opens its own) */
	int sha_fd;  /* <dir>/sha256 */
	int tmp_fd;  /* <dir>/tmp */
	/* sbxd's RPC workers share one store: refs_mu guards refs, which is
	 * read and refreshed only under the store lock (shared or exclusive)
	 * and this mutex, in that order. */
	pthread_mutex_t refs_mu;
	struct img_refs_cache refs;
};

/* The largest image.json the store reads back: its own file, bounded so
 * that a damaged one cannot take sbxd's memory. */
#define IMG_STORE_JSON_MAX (16u << 20)
/* The largest refs.json: ~45,000 tags of 20-byte names. sbxd keeps it
 * parsed (a few times its size in memory); an import or tag that would
 * pass it is refused, naming the bound. */
#define IMG_REFS_JSON_MAX (4u << 20)

/* The store lock: LOCK_SH to read refs and open a tree (resolve, list,
 * inspect), LOCK_EX to change refs or move a tree. Never held long: trees
 * are unpacked and removed outside it. */
int img_store_lock(struct img_store *s, int op, struct sbx_err *err); /* the lock's fd */
/* The shared lock for sbxd's readers, waited for at most IMG_READ_WAIT_MS:
 * the lock's fd, or IMG_BUSY. */
int img_store_lock_read(struct img_store *s, struct sbx_err *err);
void img_store_unlock(int lock_fd);

/* Under the store lock (either) and with s->refs_mu held: s->refs made
 * refs.json's current version, parsed again only when the file changed (a
 * missing file is an empty store). On failure s->refs is empty and not
 * loaded. */
int img_refs_load(struct img_store *s, struct sbx_err *err);
void img_refs_cache_free(struct img_refs_cache *c);
/* Under the store lock: a copy of refs.json's object, every key and value
 * checked, for the caller to change. Writing replaces the file by rename,
 * fsync'd, under the exclusive store lock; refused (nothing written) when
 * the file would pass IMG_REFS_JSON_MAX. */
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
 * flock, or IMG_REFUSED when a run holds it. */
int img_take_tree(struct img_store *s, const char *hex, struct sbx_err *err);
/* Under the exclusive store lock, with img_take_tree's fd held: sha256/<hex>
 * renamed into a new tmp/ entry, for img_doomed_remove. */
int img_doom_tree(struct img_store *s, const char *hex, struct img_doomed *d, struct sbx_err *err);
/* With s->refs_mu held and s->refs loaded: the trees of sha256/ that no tag
 * names, as "sha256:<hex>", sorted; *out (n of IMG_DIGEST_LEN + 1 bytes
 * each) is the caller's. */
int img_unnamed_trees(struct img_store *s, char **out, size_t *n, struct sbx_err *err);
/* Under the exclusive store lock: every tree no tag names and no run holds
 * (its LOCK_EX|LOCK_NB succeeds) renamed into tmp/ for img_doomed_remove,
 * at most max (the rest go with the next command). Such a tree is garbage:
 * resolve takes only a tree a tag names, so no run can hold it again. A
 * refs.json that cannot be read removes nothing. */
void img_sweep_unnamed(struct img_store *s, struct img_doomed *d, size_t max, size_t *n);

/* The hex of a valid "sha256:<hex>", or NULL. */
const char *img_digest_hex(const char *digest);
/* sha256/<hex> is a directory of the store. */
bool img_tree_present(struct img_store *s, const char *hex);

#endif
