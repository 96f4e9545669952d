/* SPDX-License-Identifier: Apache-2.0 */
/* The one writer below a staged tree (images_unpack_entry.c), shared by
 * the two readers of images_unpack.c: a tar layer and a rootfs directory
 * describe each entry the same way and hand it here, so every rule (names,
 * parents without links, replacing rather than writing through, hard-link
 * targets, whiteouts, bounds, modes) is written once. */
#ifndef SBX_IMAGES_UNPACK_ENTRY_H
#define SBX_IMAGES_UNPACK_ENTRY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "err.h"
#include "images_internal.h"
#include "inode_set.h"

enum unpack_kind { UE_FILE, UE_DIR, UE_SYMLINK, UE_HARDLINK, UE_SPECIAL };

/* A regular file being written: unpack_write checks every chunk against
 * the size the entry declared (which the limits were checked against);
 * its errors say why, and the writer names the entry. */
struct unpack_out {
	int fd;
	uint64_t size; /* declared */
	uint64_t end;  /* the furthest byte written */
};

struct unpack_entry {
	const char *name; /* as the source spells it (what errors show) */
	enum unpack_kind kind;
	mode_t mode;	       /* permission bits (07777) */
	uint64_t size;	       /* UE_FILE: its content's size as declared */
	const char *link;      /* UE_SYMLINK: the target; UE_HARDLINK: the entry linked to */
	struct timespec mtime; /* tv_nsec UTIME_OMIT: none */
	/* UE_FILE: writes the content through unpack_write; the writer
	 * fails the entry when fewer bytes than declared came. */
	int (*content)(void *arg, struct unpack_out *out, struct sbx_err *err);
	void *arg;
};

/* Applies one entry below u->root_fd (counting it in u->stats.entries).
 * whiteouts: OCI layer semantics for ".wh." names (else refused). */
int unpack_apply(struct img_unpack *u, const struct unpack_entry *e, bool whiteouts,
		 struct sbx_err *err);
/* A new layer: forgets which paths the last one wrote (opaque
 * directories keep only the current layer's entries). */
void unpack_layer_begin(struct img_unpack *u);
int unpack_write(struct unpack_out *out, uint64_t offset, const void *buf, size_t len,
		 struct sbx_err *err);
/* Refuses an entry that declares more data than the limits allow, before
 * any of it is read (a special file's or a hard link's data is skipped by
 * libarchive, which still has to decompress it). */
int unpack_check_declared(struct img_unpack *u, const char *name, uint64_t size,
			  struct sbx_err *err);
/* The entry's name escaped for a message (control bytes, bidi overrides
 * and non-UTF-8 shown as \xNN), cut to fit. */
#define UNPACK_SHOWN_MAX 256
void unpack_shown(char dst[UNPACK_SHOWN_MAX], const char *name);

int unpack_state_new(struct img_unpack *u, struct sbx_err *err);
void unpack_state_free(struct img_unpack *u);
/* Applies the deferred directory modes and times (img_unpack_finish). */
int unpack_apply_dir_modes(struct img_unpack *u, struct sbx_err *err);

/* ---- between the writer's files (images_unpack_entry.c, _state.c,
 * _whiteout.c) ---- */

#define WH_PREFIX ".wh."
#define WH_META	  ".wh..wh."
#define WH_OPAQUE ".wh..wh..opq"

struct dir_mode {
	mode_t mode;
	struct timespec mtime;
};

struct unpack_state { /* u->priv */
	/* Deferred directory modes, by inode: a directory removed and made
	 * again gets its own record (an inode number reused by a later
	 * directory is overwritten by that directory's record). */
	struct sbx_inode_set dir_index;
	struct dir_mode *modes;
	size_t n_modes, cap_modes;
	/* The paths this layer wrote (and their parents), as 128 bits of
	 * the sha256 of the path: an opaque directory or a whiteout keeps
	 * them and removes what the layers below left. The set takes the
	 * two halves as its (dev, ino) pair. */
	struct sbx_inode_set layer;
	/* The paths a whiteout or an opaque marker of this layer cleared of
	 * the lower layers (same keys): what is left below them is this
	 * layer's, so the same marker again has nothing to remove, and is not
	 * let rescan the directory (M markers over N entries: M * N). */
	struct sbx_inode_set cleared;
	uint64_t implicit; /* parent directories made without an entry */
	uint64_t declared; /* data bytes every entry declared, all layers */
	uint64_t next_say;
};

/* Every refusal names the entry the same way: 'entry "<name>": why'. */
int unpack_refuse(struct sbx_err *err, int errnum, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Names the entry in an error a callee already set. */
int unpack_entry_failed(struct sbx_err *err, const char *name);

/* Whether this layer wrote `path` (its first len bytes); adding a path
 * adds its parents. */
bool unpack_layer_has(struct unpack_state *s, const char *path, size_t len);
int unpack_layer_add(struct img_unpack *u, const char *path, struct sbx_err *err);
/* Whether a whiteout or opaque marker of this layer cleared `path`
 * already; marking it says it has. */
bool unpack_cleared(struct unpack_state *s, const char *path);
int unpack_mark_cleared(struct img_unpack *u, const char *path, struct sbx_err *err);
/* The mode and time the directory open at fd gets at finish. */
int unpack_record_dir(struct img_unpack *u, int fd, const char *name, mode_t mode,
		      const struct timespec *mtime, struct sbx_err *err);

/* Opens the directory holding `path` (normalized, not "") beneath the
 * root into *out; *last gets the final component. create: missing parents
 * are made (0700 now, 0755 at finish unless an entry says otherwise), one
 * component at a time, each opened beneath the one before. Without create,
 * a missing parent is 1 (nothing there). A parent that is a symlink or not
 * a directory is refused, naming the entry and the component. */
int unpack_open_parent(struct img_unpack *u, const char *name, const char *path, bool create,
		       int *out, const char **last, struct sbx_err *err);
/* Whatever is at `last` in dir goes (a directory with all in it, unless
 * keep_dir, which keeps a directory and says so in *is_dir). */
int unpack_remove_existing(int dir, const char *last, const char *name, bool keep_dir, bool *is_dir,
			   struct sbx_err *err);
/* ".wh.<x>" and ".wh..wh..opq" (path: the entry's normalized name, base:
 * its last component). */
int unpack_whiteout(struct img_unpack *u, const struct unpack_entry *e, const char *path,
		    const char *base, struct sbx_err *err);
int unpack_opaque(struct img_unpack *u, const struct unpack_entry *e, const char *path,
		  const char *base, struct sbx_err *err);

#endif
