/* SPDX-License-Identifier: Apache-2.0 */
/* The import driver: a stage in the store's tmp/, the source read (an OCI
 * or docker image, verified before anything is unpacked; or a rootfs
 * directory or tar), its layers unpacked into the stage, the digest (the
 * manifest's, or the canonical tree hash), then the commit. An image whose
 * digest is known before unpacking and already in the store is only
 * tagged. Whatever fails, the stage goes (and a stage left by a killed
 * import is removed by the next one). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image_ref.h"
#include "images_internal.h"
#include "tree.h"
#include "util.h"

#define MIB(b) ((double)(b) / (1024.0 * 1024.0))

static const char *const kind_names[] = {
    [IMG_FROM_OCI_LAYOUT] = "oci-layout",	  [IMG_FROM_OCI_ARCHIVE] = "oci-archive",
    [IMG_FROM_DOCKER_ARCHIVE] = "docker-archive", [IMG_FROM_ROOTFS_DIR] = "rootfs",
    [IMG_FROM_ROOTFS_TAR] = "rootfs-tar",
};

/* What image.json keeps of the unpacking, beside the source's meta. */
static int add_stats(json_t *meta, const struct img_unpack_stats *st, struct sbx_err *err)
{
	json_t *u = json_pack(
	    "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "entries",
	    (json_int_t)st->entries, "files", (json_int_t)st->files, "dirs", (json_int_t)st->dirs,
	    "symlinks", (json_int_t)st->symlinks, "hardlinks", (json_int_t)st->hardlinks, "bytes",
	    (json_int_t)st->bytes, "whiteouts", (json_int_t)st->whiteouts, "opaque",
	    (json_int_t)st->opaque, "special_skipped", (json_int_t)st->special, "setid_cleared",
	    (json_int_t)st->setid_cleared);
	uint64_t entries = st->files + st->dirs + st->symlinks + st->hardlinks;

	if (!u || json_object_set_new(meta, "unpack", u) < 0 ||
	    json_object_set_new(meta, "size_bytes", json_integer((json_int_t)st->bytes)) < 0 ||
	    json_object_set_new(meta, "entries", json_integer((json_int_t)entries)) < 0)
		return sbx_fail_errnum(err, ENOMEM, "image.json");
	return 0;
}

static void say_stats(const struct img_progress *pr, const char *what,
		      const struct img_unpack_stats *st)
{
	img_say(pr,
		"%s: %llu entries (%llu files, %llu dirs, %llu symlinks, %llu hard links), "
		"%.1f MiB; %llu special files skipped, %llu setuid/setgid bits cleared",
		what, (unsigned long long)st->entries, (unsigned long long)st->files,
		(unsigned long long)st->dirs, (unsigned long long)st->symlinks,
		(unsigned long long)st->hardlinks, MIB(st->bytes), (unsigned long long)st->special,
		(unsigned long long)st->setid_cleared);
}

/* An OCI layout, OCI archive or docker archive: the source verifies every
 * blob first; then the layers in order, each hashed again as it is read. */
static int from_image(struct img_store *s, struct img_stage *stage, int src_fd,
		      const struct img_import_req *req, const struct img_progress *pr,
		      struct img_import_result *res, struct sbx_err *err)
{
	struct img_source src;
	struct img_unpack u;
	json_auto_t *meta = NULL;
	int rc;

	memset(&src, 0, sizeof(src));
	if (req->kind == IMG_FROM_OCI_LAYOUT)
		rc = img_source_oci_layout(src_fd, req->ref, &req->limits, pr, &src, err);
	else if (req->kind == IMG_FROM_OCI_ARCHIVE)
		rc = img_source_oci_archive(src_fd, stage->scratch_fd, req->ref, &req->limits, pr,
					    &src, err);
	else
		rc = img_source_docker_archive(src_fd, stage->scratch_fd, req->ref, &req->limits,
					       pr, &src, err);
	if (rc < 0) {
		img_source_free(&src);
		return -1;
	}
	snprintf(res->pinned, sizeof(res->pinned), "%s@%s", req->name_tag, src.digest);
	if (img_store_has(s, src.digest)) {
		img_say(pr, "reusing %s (already in the store)", src.digest);
		img_stage_abort(s, stage);
		res->reused = true;
		rc = img_store_tag(s, req->name_tag, src.digest, err);
		img_source_free(&src);
		return rc;
	}
	if (img_unpack_begin(&u, stage->rootfs_fd, &req->limits, pr, err) < 0) {
		img_source_free(&src);
		return -1;
	}
	for (size_t i = 0; i < src.n_layers; i++) {
		const struct img_layer *l = &src.layers[i];

		img_say(pr, "unpacking layer %zu/%zu %.19s… %.1f MiB", i + 1, src.n_layers,
			l->digest, MIB(l->size));
		if (img_unpack_tar(&u, l->fd, true, l->digest, l->size, err) < 0) {
			sbx_err_prefix(err, "layer %zu/%zu %s", i + 1, src.n_layers, l->digest);
			img_unpack_abort(&u);
			img_source_free(&src);
			return -1;
		}
	}
	res->stats = u.stats;
	rc = img_unpack_finish(&u, err);
	meta = rc == 0 ? json_deep_copy(src.meta ? src.meta : json_object()) : NULL;
	if (rc == 0 && !meta)
		rc = sbx_fail_errnum(err, ENOMEM, "image.json");
	if (rc == 0)
		rc = add_stats(meta, &res->stats, err);
	if (rc == 0) {
		say_stats(pr, "unpacked", &res->stats);
		rc = img_stage_commit(s, stage, src.digest, req->name_tag, meta, &res->reused, err);
	}
	img_source_free(&src);
	return rc;
}

/* A rootfs directory or tar: copied (unpacked) by the same rules, then
 * named by its canonical hash, so the same tree is the same image however
 * it was packed. */
static int from_rootfs(struct img_store *s, struct img_stage *stage, int src_fd,
		       const struct img_import_req *req, const struct img_progress *pr,
		       struct img_import_result *res, struct sbx_err *err)
{
	char digest[IMG_DIGEST_LEN + 1];
	struct img_unpack u;
	json_auto_t *meta = NULL;
	struct stat st;

	if (img_unpack_begin(&u, stage->rootfs_fd, &req->limits, pr, err) < 0)
		return -1;
	if (req->kind == IMG_FROM_ROOTFS_DIR) {
		img_say(pr, "copying the rootfs directory %s", req->path);
		if (img_unpack_dir(&u, src_fd, err) < 0) {
			img_unpack_abort(&u);
			return -1;
		}
	} else {
		img_say(pr, "unpacking %s (%.1f MiB)", req->path,
			fstat(src_fd, &st) == 0 && S_ISREG(st.st_mode) ? MIB(st.st_size) : 0.0);
		if (img_unpack_tar(&u, src_fd, false, NULL, 0, err) < 0) {
			img_unpack_abort(&u);
			return -1;
		}
	}
	res->stats = u.stats;
	if (img_unpack_finish(&u, err) < 0)
		return -1;
	say_stats(pr, "unpacked", &res->stats);
	img_say(pr, "hashing the tree (%.1f MiB)", MIB(res->stats.bytes));
	if (img_tree_hash(stage->rootfs_fd, digest, err) < 0)
		return sbx_err_prefix(err, "tree hash");
	snprintf(res->pinned, sizeof(res->pinned), "%s@%s", req->name_tag, digest);
	meta = json_pack("{s:s, s:s}", "kind", kind_names[req->kind], "source", req->path);
	if (!meta)
		return sbx_fail_errnum(err, ENOMEM, "image.json");
	if (add_stats(meta, &res->stats, err) < 0)
		return -1;
	if (img_stage_commit(s, stage, digest, req->name_tag, meta, &res->reused, err) < 0)
		return -1;
	if (res->reused)
		img_say(pr, "reusing %s (already in the store)", digest);
	return 0;
}

int img_import(struct img_store *s, const struct img_import_req *req, const struct img_progress *pr,
	       struct img_import_result *res, struct sbx_err *err)
{
	struct img_stage stage = IMG_STAGE_INIT;
	struct sbx_image_ref r;
	_cleanup_close_ int src_fd = -1;
	bool dir = req->kind == IMG_FROM_OCI_LAYOUT || req->kind == IMG_FROM_ROOTFS_DIR;
	struct stat st;
	int rc;

	memset(res, 0, sizeof(*res));
	if (sbx_image_ref_parse(req->name_tag, false, &r, err) < 0)
		return -1;
	if (r.digest[0])
		return sbx_fail(err, "%s: import names NAME:TAG; the digest is what import prints",
				req->name_tag);
	if ((unsigned)req->kind >= SBX_ARRAY_SIZE(kind_names))
		return sbx_fail(err, "unknown source kind %d", (int)req->kind);
	/* The source is often someone else's (a layout or rootfs handed
	 * over): no link anywhere on its path, or whoever can write a
	 * directory on it could point the import at the importer's own
	 * files (sbxd's TLS key) and have them become an image any run may
	 * name. O_NONBLOCK: a FIFO planted as the archive cannot hang the
	 * import; it is refused below. */
	src_fd = sbx_open_no_symlinks(
	    req->path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY | O_NOCTTY | O_NONBLOCK, err);
	if (src_fd < 0 && err->errnum == ELOOP)
		return sbx_fail(err,
				"%s: a symlink on the way is refused (a directory someone else "
				"can write could swap one in); name the path it resolves to",
				req->path);
	if (src_fd < 0)
		return -1;
	if (fstat(src_fd, &st) < 0)
		return sbx_fail_errno(err, "%s", req->path);
	if (!dir && !S_ISREG(st.st_mode))
		return sbx_fail(err, "%s: not a regular file", req->path);
	if (img_stage_begin(s, &stage, err) < 0)
		return -1;
	img_say(pr, "importing %s from %s %s (staging in %s/tmp/%s)", req->name_tag,
		kind_names[req->kind], req->path, img_store_dir(s), stage.name);
	if (req->kind == IMG_FROM_ROOTFS_DIR || req->kind == IMG_FROM_ROOTFS_TAR)
		rc = from_rootfs(s, &stage, src_fd, req, pr, res, err);
	else
		rc = from_image(s, &stage, src_fd, req, pr, res, err);
	img_stage_abort(s, &stage); /* a commit removed it already: then nothing */
	if (rc == 0 && !res->reused)
		img_say(pr, "stored %s", res->pinned);
	return rc;
}
