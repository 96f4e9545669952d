/* SPDX-License-Identifier: Apache-2.0 */
/* The image store (<state_dir>/images unless the config names another
 * directory): pinned root file systems that runs mount read-only as their
 * root's content. What it offers:
 *   - sbxd's side: resolving a policy's reference to a verified tree and
 *     holding it (a shared flock) for the life of a run, and the list that
 *     Health reports;
 *   - sbxd-image's side (server/images/sbxd_image.c): import, list, inspect, rm
 *     (images_internal.h has the import pipeline).
 * The store is written only by its owner (sbxd's user) and only through
 * these functions; nothing in it is reachable from a sandbox but the
 * read-only bind of one image's rootfs.
 *
 * Layout (images_store.c owns it; docs/operator/images.md documents it):
 *   <dir>/lock                 flock: exclusive while refs or trees change
 *   <dir>/refs.json            {"name:tag": "sha256:<hex>", ...}, replaced
 *                              by rename, so a reader never sees half of it
 *   <dir>/sha256/<hex>/        one image, named by its digest
 *       rootfs/                the unpacked tree (what runs mount)
 *       image.json             what inspect shows (images_internal.h)
 *   <dir>/tmp/<random>/        an import under way (flock'ed by it) or one
 *                              that died: removed by the next import or rm
 */
#ifndef SBX_IMAGES_H
#define SBX_IMAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "err.h"

#define IMG_DIGEST_LEN 71 /* "sha256:" + 64 hex */

/* Bounds on what one import may write (config "images" section, flags of
 * `sbxd image import`). An archive past any of them is refused, and
 * nothing of it stays. */
struct img_limits {
	uint64_t max_entries;	 /* tar entries (all layers); default 1,000,000 */
	uint64_t max_bytes;	 /* bytes of file content written; default 16 GiB */
	uint64_t max_file_bytes; /* one file; default 4 GiB */
	uint64_t max_blob_bytes; /* one manifest, index or config JSON; default 4 MiB */
};
void img_limits_default(struct img_limits *lim);

struct img_store;

/* Opens the store at `dir`; `create` makes it (0700) when missing. Refused
 * when the directory is not owned by the effective uid or is writable by
 * group or others: the store's trees are trusted by every run. */
int img_store_open(const char *dir, bool create, struct img_store **out, struct sbx_err *err);
void img_store_close(struct img_store *s);
void img_store_closep(struct img_store **s);
#define _cleanup_img_store_ __attribute__((cleanup(img_store_closep)))
const char *img_store_dir(const struct img_store *s);

/* A run's hold on its image: the tree's path (for sbx-helper --image-root)
 * and an fd with a shared flock on the image's directory, so that `rm`
 * refuses it while the run lives. img_hold_release closes it.
 * rootfs_dev/rootfs_ino: the identity of the rootfs directory found beneath
 * that held fd (sbx-helper --image-root-id): the helper opens the tree
 * again by its path, and whoever could rename a directory on that path
 * could put another tree there; the helper refuses a tree that is not
 * this one. */
struct img_hold {
	int lock_fd;			 /* -1 when nothing is held */
	char digest[IMG_DIGEST_LEN + 1]; /* "sha256:<hex>" */
	char pinned[512];		 /* "name:tag@sha256:<hex>" */
	char *rootfs;			 /* <dir>/sha256/<hex>/rootfs */
	dev_t rootfs_dev;
	ino_t rootfs_ino;
};
#define IMG_HOLD_INIT                                                                              \
	{                                                                                          \
		.lock_fd = -1                                                                      \
	}
void img_hold_release(struct img_hold *h);

/* What a policy's image reference resolves to. IMG_REFUSED: the reference
 * is well formed but this store cannot honour it (digest not in the
 * store, name:tag pointing at another digest -- the message names both --,
 * an unpinned reference while allow_unpinned is false): the caller's
 * FAILED_PRECONDITION. IMG_BUSY: the store lock stayed taken (an `sbxd
 * image` stopped in its exclusive section) past IMG_READ_WAIT_MS: sbxd's
 * readers give up rather than hold an RPC worker (UNAVAILABLE). -1: the
 * store itself failed (INTERNAL). */
enum { IMG_REFUSED = -2, IMG_BUSY = -3 };
#define IMG_READ_WAIT_MS 2000
int img_store_resolve(struct img_store *s, const char *ref, bool allow_unpinned,
		      struct img_hold *out, struct sbx_err *err);

/* Every "name:tag@sha256:<hex>" of the store, sorted, at most `max`
 * (*total gets how many there are). Health's list. */
int img_store_pins(struct img_store *s, size_t max, char ***pins, size_t *n, size_t *total,
		   struct sbx_err *err);
void img_pins_free(char **pins, size_t n);

#endif
