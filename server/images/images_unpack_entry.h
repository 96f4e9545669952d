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

#endif
