/* SPDX-License-Identifier: Apache-2.0 */
/* The import pipeline, between the files of server/images/:
 *   images_store.c    the store's layout, locks, refs.json, staging,
 *                     commit by rename, list/inspect/rm, resolve (images.h)
 *                     (with images_commit.c, images_refs.c, images_resolve.c;
 *                     what they share: images_store_private.h)
 *   images_source.c   OCI layout / OCI archive / docker archive: the index,
 *                     the platform, the manifest, the config, every blob's
 *                     digest and size verified before anything is unpacked
 *                     (with images_oci.c, images_docker.c, images_archive.c;
 *                     what they share: images_source.h)
 *   images_unpack.c   applying one layer (tar, gzip, zstd: libarchive) or a
 *                     rootfs directory onto a staged tree: whiteouts, opaque
 *                     directories, and every hostile-archive refusal
 *   images_treehash.c the canonical hash of a rootfs tree
 *   images_import.c   the driver: stage, source, unpack, hash, commit
 * Every open below a staged tree goes through common/tree.h's openat2
 * helpers (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | ...). */
#ifndef SBX_IMAGES_INTERNAL_H
#define SBX_IMAGES_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "err.h"
#include "images.h"

/* Progress for the operator (stderr of `sbxd image import`); NULL: quiet.
 * A line each, never more often than the caller's own rate limit. */
struct img_progress {
	void (*line)(void *arg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
	void *arg;
};
void img_say(const struct img_progress *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- sources (images_source.c) ---- */

#define IMG_MAX_LAYERS 128

enum img_compression { IMG_TAR, IMG_TAR_GZIP, IMG_TAR_ZSTD };

struct img_layer {
	int fd;				 /* the blob, open read-only, at offset 0 */
	char digest[IMG_DIGEST_LEN + 1]; /* what the manifest says the blob is */
	uint64_t size;			 /* its size, likewise */
	enum img_compression compression;
};

/* An OCI or docker image, verified: the manifest's digest is the image's
 * digest (what `skopeo inspect` and `docker pull name@` show), and every
 * layer fd holds bytes whose sha256 and size matched their descriptor when
 * the source was opened. Unpacking hashes them again as it reads and fails
 * when they changed since. */
struct img_source {
	char digest[IMG_DIGEST_LEN + 1];
	/* What image.json keeps besides the store's own fields: "kind"
	 * ("oci-layout", "oci-archive", "docker-archive"), "manifest_digest",
	 * "config_digest", "os", "architecture", "created" (if given),
	 * "config": {"Env", "WorkingDir", "User", "Entrypoint", "Cmd"} as the
	 * image says them (shown by inspect, never applied to a run),
	 * "layers": [{"digest", "size", "media_type"}]. */
	json_t *meta;
	size_t n_layers;
	struct img_layer layers[IMG_MAX_LAYERS];
};
void img_source_free(struct img_source *src);

/* `ref` picks a manifest of an index by its org.opencontainers.image.ref.name
 * annotation; NULL: the only one (for this platform). An index of several
 * platforms picks linux and the host's architecture (amd64 on x86_64). */
int img_source_oci_layout(int layout_dirfd, const char *ref, const struct img_limits *lim,
			  const struct img_progress *pr, struct img_source *out,
			  struct sbx_err *err);
/* Archives are unpacked first into scratch_dirfd (inside the staging
 * directory, through images_unpack.c with no whiteouts), then read as a
 * layout from there. */
int img_source_oci_archive(int archive_fd, int scratch_dirfd, const char *ref,
			   const struct img_limits *lim, const struct img_progress *pr,
			   struct img_source *out, struct sbx_err *err);
int img_source_docker_archive(int archive_fd, int scratch_dirfd, const char *ref,
			      const struct img_limits *lim, const struct img_progress *pr,
			      struct img_source *out, struct sbx_err *err);

/* ---- unpacking (images_unpack.c) ---- */

struct img_unpack_stats {
	uint64_t entries; /* every tar entry read, all layers */
	uint64_t files, dirs, symlinks, hardlinks;
	uint64_t bytes;		/* file content written */
	uint64_t whiteouts;	/* .wh.<name> applied */
	uint64_t opaque;	/* .wh..wh..opq applied */
	uint64_t special;	/* device nodes, FIFOs, sockets: skipped */
	uint64_t setid_cleared; /* setuid/setgid bits removed */
};

struct img_unpack {
	int root_fd; /* the staged tree, O_DIRECTORY */
	const struct img_limits *lim;
	const struct img_progress *pr;
	struct img_unpack_stats stats;
	void *priv; /* images_unpack.c's own state (deferred directory modes) */
};

/* Starts / ends unpacking into root_fd. img_unpack_finish applies the
 * directory modes the entries asked for (deferred, so a read-only
 * directory can still be filled) and frees the state; img_unpack_abort
 * only frees it. */
int img_unpack_begin(struct img_unpack *u, int root_fd, const struct img_limits *lim,
		     const struct img_progress *pr, struct sbx_err *err);
int img_unpack_finish(struct img_unpack *u, struct sbx_err *err);
void img_unpack_abort(struct img_unpack *u);

/* Applies one tar stream read from fd (plain, gzip or zstd, detected).
 * whiteouts: OCI/docker layer semantics (.wh.<name> removes <name> of the
 * layers below, .wh..wh..opq empties its directory of them); false: a
 * plain archive, where such names are refused. expect_digest/expect_size
 * (NULL/0: none): the bytes read must hash to it. Refuses -- and the
 * caller then discards the whole staging directory -- absolute names and
 * names with "..", entries below a symlink, hard links that leave the tree
 * or name a symlink or a directory, names that are not valid, entries past
 * the limits; skips (and counts) devices, FIFOs and sockets; clears
 * setuid/setgid; a duplicate entry replaces the earlier one, never writes
 * through it. The error names the entry. */
int img_unpack_tar(struct img_unpack *u, int fd, bool whiteouts, const char *expect_digest,
		   uint64_t expect_size, struct sbx_err *err);
/* Copies a rootfs directory (src_dirfd) with the same rules and bounds:
 * links are copied as links and never followed. */
int img_unpack_dir(struct img_unpack *u, int src_dirfd, struct sbx_err *err);

/* ---- the canonical tree hash (images_treehash.c) ---- */

/* sha256 over a canonical listing of the tree at root_fd (docs/design/rootfs-hash.md, "The
 * canonical rootfs hash"): every entry in byte order of its path, with
 * its type, permission bits, link target or content digest; not times,
 * owners or the order entries were written in. digest: "sha256:<hex>". */
int img_tree_hash(int root_fd, char digest[IMG_DIGEST_LEN + 1], struct sbx_err *err);

/* ---- the store's import side (images_store.c) ---- */

/* A staging directory <dir>/tmp/<random>/ holding rootfs/ and scratch/,
 * flock'ed for as long as the import runs. */
struct img_stage {
	int dir_fd, rootfs_fd, scratch_fd, lock_fd;
	char name[64];
};
#define IMG_STAGE_INIT                                                                             \
	{                                                                                          \
		.dir_fd = -1, .rootfs_fd = -1, .scratch_fd = -1, .lock_fd = -1                     \
	}
/* Removes stale stages (no holder) first. */
int img_stage_begin(struct img_store *s, struct img_stage *st, struct sbx_err *err);
/* Under the store lock: moves the stage's rootfs to sha256/<hex>/ with
 * image.json (meta plus the store's fields: "digest", "imported_unix_ms",
 * "size_bytes", "entries", the unpack stats), unless that digest is there
 * already (*reused = true, the stage is discarded), then points name:tag
 * at it. Removes the stage either way. */
int img_stage_commit(struct img_store *s, struct img_stage *st, const char *digest,
		     const char *name_tag, json_t *meta, bool *reused, struct sbx_err *err);
void img_stage_abort(struct img_store *s, struct img_stage *st);
/* Whether sha256/<hex> is in the store already (an import that knows its
 * digest before unpacking skips it), and pointing a tag at it. */
bool img_store_has(struct img_store *s, const char *digest);
int img_store_tag(struct img_store *s, const char *name_tag, const char *digest,
		  struct sbx_err *err);

/* `list`: [{"ref": "name:tag@sha256:..", "digest", "size_bytes",
 * "imported_unix_ms", "kind"}], `inspect`: image.json plus "refs"; `rm`
 * removes name:tag (or every tag of a digest given as sha256:<hex>) and the
 * tree once no tag names it. IMG_REFUSED when a live run holds it (nothing
 * changed). `rm --untag` (img_store_untag) removes the tags all the same:
 * no new run can take the tree, and *kept gets its digest ("" when it went
 * too or another tag keeps it); the first import or rm after the last run
 * holding it has ended removes it. Both sweep such trees (images_store.c). */
int img_store_list(struct img_store *s, json_t **out, struct sbx_err *err);
int img_store_inspect(struct img_store *s, const char *ref, json_t **out, struct sbx_err *err);
int img_store_rm(struct img_store *s, const char *ref, struct sbx_err *err);
int img_store_untag(struct img_store *s, const char *ref, char kept[IMG_DIGEST_LEN + 1],
		    struct sbx_err *err);

/* ---- the driver (images_import.c) ---- */

enum img_source_kind {
	IMG_FROM_OCI_LAYOUT,
	IMG_FROM_OCI_ARCHIVE,
	IMG_FROM_DOCKER_ARCHIVE,
	IMG_FROM_ROOTFS_DIR,
	IMG_FROM_ROOTFS_TAR,
};
struct img_import_req {
	const char *name_tag; /* NAME:TAG */
	enum img_source_kind kind;
	const char *path;
	const char *ref; /* --ref: which manifest of an index; NULL: the only one */
	struct img_limits limits;
};
struct img_import_result {
	char pinned[512]; /* name:tag@sha256:<hex>, what stdout prints */
	bool reused;
	struct img_unpack_stats stats;
};
int img_import(struct img_store *s, const struct img_import_req *req, const struct img_progress *pr,
	       struct img_import_result *res, struct sbx_err *err);

#endif
