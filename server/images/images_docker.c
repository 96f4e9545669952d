/* SPDX-License-Identifier: Apache-2.0 */
/* A docker-archive's own format (`docker save` before docker 25,
 * `podman save`, `skopeo copy ... docker-archive:`), once unpacked:
 * manifest.json [{Config, RepoTags, Layers}], the config named by its
 * sha256 ("<hex>.json"), layer tars whose uncompressed sha256 is the
 * config's rootfs.diff_ids entry. Such an archive holds no manifest; the
 * image's digest is that of the manifest skopeo generates for it (see
 * read_manifest_json), so that a pin matches `skopeo inspect`. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "images_cleanup.h"
#include "images_source.h"
#include "sha256.h"
#include "strict_json.h"
#include "tree.h"
#include "util.h"

static void sha_hex(EVP_MD_CTX *ctx, char digest[IMG_DIGEST_LEN + 1])
{
	unsigned char md[32];
	char hex[65];

	EVP_DigestFinal_ex(ctx, md, NULL);
	sbx_sha256_hex(md, hex);
	snprintf(digest, IMG_DIGEST_LEN + 1, "sha256:%s", hex);
}

struct raw_read {
	int fd;
	EVP_MD_CTX *sha;
	uint64_t bytes;
	char buf[64 * 1024];
};

static la_ssize_t raw_read_cb(struct archive *a, void *arg, const void **out)
{
	struct raw_read *r = arg;
	ssize_t n;

	do
		n = read(r->fd, r->buf, sizeof(r->buf));
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		archive_set_error(a, errno, "read");
		return -1;
	}
	EVP_DigestUpdate(r->sha, r->buf, (size_t)n);
	r->bytes += (uint64_t)n;
	*out = r->buf;
	return n;
}

/* One pass over a layer file: the sha256 of its bytes (what unpacking
 * checks again) and of its uncompressed tar (its diff_id) with that
 * tar's size, through libarchive's filters (none, gzip, zstd: what
 * images_unpack.c reads) and its "raw" format. */
static const char *archive_why(struct archive *a)
{
	const char *why = archive_error_string(a);

	return why ? why : "not a tar, or empty";
}

static int layer_hashes(int fd, const char *what, uint64_t max_tar,
			char file_digest[IMG_DIGEST_LEN + 1], uint64_t *file_size,
			char diff_id[IMG_DIGEST_LEN + 1], uint64_t *tar_size,
			enum img_compression *c, struct sbx_err *err)
{
	/* A gzip bomb is refused here, not after hashing terabytes: the tar
	 * can hold no more than what the image's layers have left of
	 * img_layers_budget (the content unpacking allows plus headers: a
	 * 512-byte header, padding and pax records, 4 KiB an entry, is
	 * generous). */
	_cleanup_archive_ struct archive *a = archive_read_new();
	_cleanup_md_ EVP_MD_CTX *tar_sha = EVP_MD_CTX_new();
	_cleanup_md_ EVP_MD_CTX *file_sha = EVP_MD_CTX_new();
	_cleanup_free_ struct raw_read *r = calloc(1, sizeof(*r));
	_cleanup_free_ char *buf = malloc(64 * 1024);
	struct archive_entry *e;
	la_ssize_t n;

	if (!a || !tar_sha || !file_sha || !r || !buf ||
	    !EVP_DigestInit_ex(tar_sha, EVP_sha256(), NULL) ||
	    !EVP_DigestInit_ex(file_sha, EVP_sha256(), NULL))
		return sbx_fail(err, "%s: out of memory", what);
	r->fd = fd;
	r->sha = file_sha;
	if (archive_read_support_filter_gzip(a) != ARCHIVE_OK ||
	    archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
	    archive_read_support_format_raw(a) != ARCHIVE_OK ||
	    archive_read_open(a, r, NULL, raw_read_cb, NULL) != ARCHIVE_OK ||
	    archive_read_next_header(a, &e) != ARCHIVE_OK)
		return sbx_fail(err, "%s: %s", what, archive_why(a));
	*tar_size = 0;
	while ((n = archive_read_data(a, buf, 64 * 1024)) > 0) {
		EVP_DigestUpdate(tar_sha, buf, (size_t)n);
		*tar_size += (uint64_t)n;
		if (*tar_size > max_tar)
			return sbx_fail(err,
					"%s: uncompressed, more than the %" PRIu64
					" bytes the limits leave for the image's layers "
					"(images.max_bytes and max_entries)",
					what, max_tar);
	}
	if (n < 0)
		return sbx_fail(err, "%s: %s", what, archive_why(a));
	switch (archive_filter_code(a, 0)) {
	case ARCHIVE_FILTER_GZIP:
		*c = IMG_TAR_GZIP;
		break;
	case ARCHIVE_FILTER_ZSTD:
		*c = IMG_TAR_ZSTD;
		break;
	default:
		*c = IMG_TAR;
	}
	/* The raw format may stop before the end of a compressed stream's
	 * trailing bytes: the file digest covers every byte. */
	for (;;) {
		const void *p;
		if (raw_read_cb(a, r, &p) <= 0)
			break;
	}
	sha_hex(tar_sha, diff_id);
	sha_hex(file_sha, file_digest);
	*file_size = r->bytes;
	return 0;
}

/* "<64 hex>.json" (docker, skopeo, podman) or "blobs/sha256/<64 hex>"
 * (docker 25): the config's file name is its digest. */
static int config_name_digest(const char *path, char digest[IMG_DIGEST_LEN + 1])
{
	const char *base = strrchr(path, '/');
	size_t n;

	base = base ? base + 1 : path;
	n = strlen(base);
	if (n == 69 && !strcmp(base + 64, ".json"))
		n = 64;
	if (n != 64)
		return -1;
	for (size_t i = 0; i < 64; i++)
		if (!((base[i] >= '0' && base[i] <= '9') || (base[i] >= 'a' && base[i] <= 'f')))
			return -1;
	snprintf(digest, IMG_DIGEST_LEN + 1, "sha256:%.64s", base);
	return 0;
}

struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void sbuf_freep(struct sbuf *b)
{
	free(b->p);
}

static void sbuf_add(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sbuf_add(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (b->len + (size_t)n + 1 > b->cap) {
		size_t cap = (b->len + (size_t)n + 1) * 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* Picks the manifest.json entry: the one holding --ref in RepoTags, else
 * the only one. */
static int pick_entry(json_t *list, const char *ref, json_t **out, struct sbx_err *err)
{
	char offers[1024] = "", shown[IMG_SHOW_MAX], w[128];
	size_t i, j, found = 0;
	json_t *e, *t;

	if (json_array_size(list) == 0)
		return sbx_fail(err, "manifest.json: lists no images");
	json_array_foreach(list, i, e)
	{
		json_t *tags;

		img_where(w, sizeof(w), "manifest.json[%zu]", i);
		if (!json_is_object(e))
			return sbx_fail(err, "%s: must be an object", w);
		tags = json_object_get(e, "RepoTags");
		if (tags && !json_is_null(tags) && !json_is_array(tags))
			return sbx_fail(err, "%s.RepoTags: must be an array of strings", w);
		json_array_foreach(tags, j, t)
		{
			const char *tag;
			char wt[160];

			img_where(wt, sizeof(wt), "%s.RepoTags[%zu]", w, j);
			if (sbx_json_string(t, wt, &tag, NULL, err) < 0)
				return -1;
			img_show(shown, tag);
			if (strlen(offers) + strlen(shown) + 8 < sizeof(offers))
				snprintf(offers + strlen(offers), sizeof(offers) - strlen(offers),
					 "%s%s", offers[0] ? ", " : "", shown);
			if (ref && img_docker_name_matches(tag, ref) && (!found || *out != e)) {
				found++;
				*out = e;
			}
		}
	}
	if (ref && found == 1)
		return 0;
	if (ref) {
		img_show(shown, ref);
		return sbx_fail(err, "manifest.json: %s %s (it offers: %s)", shown,
				found ? "names several images" : "is no RepoTags entry",
				offers[0] ? offers : "no tags");
	}
	if (json_array_size(list) > 1)
		return sbx_fail(err,
				"manifest.json: %zu images, name one with --ref (it offers: %s)",
				json_array_size(list), offers[0] ? offers : "no tags");
	*out = json_array_get(list, 0);
	return 0;
}

static int read_manifest_json(int dir_fd, const char *ref, const struct img_limits *lim,
			      const struct img_progress *pr, struct img_source *out,
			      struct sbx_err *err)
{
	_cleanup_free_ char *buf = NULL, *cbuf = NULL;
	json_auto_t *list = NULL, *config = NULL;
	const char *cpath, *lpath;
	char cdigest[IMG_DIGEST_LEN + 1], have[IMG_DIGEST_LEN + 1], shown[IMG_SHOW_MAX];
	char w[300], cwhat[300], hs[32];
	json_t *entry = NULL, *layers, *rootfs, *diff_ids;
	_cleanup_(sbuf_freep) struct sbuf m = {0};
	size_t len, clen, i, n;
	uint64_t left;

	if (img_read_file(dir_fd, "manifest.json", lim->max_blob_bytes, &buf, &len, err) < 0)
		return sbx_err_prefix(err, "not a docker archive");
	list = img_json_parse(buf, len, "manifest.json", true, err);
	if (!list)
		return -1;
	if (!json_is_array(list))
		return sbx_fail(err, "manifest.json: must be an array");
	if (pick_entry(list, ref, &entry, err) < 0)
		return -1;
	for (i = 0; json_array_get(list, i) != entry; i++)
		;
	img_where(w, sizeof(w), "manifest.json[%zu].Config", i);
	if (sbx_json_string(json_object_get(entry, "Config"), w, &cpath, NULL, err) < 0)
		return -1;
	if (config_name_digest(cpath, cdigest) < 0) {
		img_show(shown, cpath);
		return sbx_fail(err, "%s: %s names no sha256 (<hex>.json)", w, shown);
	}
	img_where(cwhat, sizeof(cwhat), "config %s", cdigest);
	if (img_read_file(dir_fd, cpath, lim->max_blob_bytes, &cbuf, &clen, err) < 0)
		return sbx_err_prefix(err, "%s", cwhat);
	img_sha256_buf(cbuf, clen, have);
	if (strcmp(have, cdigest) != 0)
		return sbx_fail(err, "%s: hashes to %s, not the digest its name says (corrupted)",
				cwhat, have);
	config = img_json_parse(cbuf, clen, cwhat, false, err);
	if (!config)
		return -1;
	out->meta = json_pack("{s:s, s:s, s:[]}", "kind", "docker-archive", "config_digest",
			      cdigest, "layers");
	if (!out->meta)
		return sbx_fail(err, "out of memory");
	if (img_config_meta(config, cwhat, out->meta, err) < 0)
		return -1;
	rootfs = json_object_get(config, "rootfs");
	if (!json_is_object(rootfs))
		return sbx_fail(err, "%s.rootfs: must be an object", cwhat);
	diff_ids = json_object_get(rootfs, "diff_ids");
	if (!json_is_array(diff_ids))
		return sbx_fail(err, "%s.rootfs.diff_ids: must be an array", cwhat);
	img_where(w, sizeof(w), "manifest.json[%zu].Layers", i);
	layers = json_object_get(entry, "Layers");
	if (!json_is_array(layers))
		return sbx_fail(err, "%s: must be an array", w);
	n = json_array_size(layers);
	if (n != json_array_size(diff_ids))
		return sbx_fail(err, "%s: %zu layers, but %s.rootfs.diff_ids has %zu", w, n, cwhat,
				json_array_size(diff_ids));
	if (n > IMG_MAX_LAYERS)
		return sbx_fail(err, "%s: %zu layers, more than %d", w, n, IMG_MAX_LAYERS);
	left = img_layers_budget(lim, n);

	/* The manifest skopeo (containers/image docker/internal/tarfile,
	 * Source.GetManifest) generates for a docker-archive, byte for byte:
	 * Go's json.Marshal of a schema 2 manifest -- compact, keys in this
	 * order -- whose config is {docker config type, the config file's
	 * size, its sha256} and whose layers are, in the config's diff_ids
	 * order, {"application/vnd.docker.image.rootfs.diff.tar.gzip" (even
	 * for a plain tar), the *uncompressed* size, the diff_id}. Its sha256
	 * is the Digest `skopeo inspect docker-archive:FILE` prints. */
	sbuf_add(&m,
		 "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":\"%s\","
		 "\"size\":%zu,\"digest\":\"%s\"},\"layers\":[",
		 IMG_MT_DOCKER_MANIFEST, IMG_MT_DOCKER_CONFIG, clen, cdigest);
	img_human_size(clen, hs);
	img_say(pr, "verified blob 1/%zu %.19s… %s (config)", n + 1, cdigest, hs);
	for (i = 0; i < n; i++) {
		char lw[400], file_digest[IMG_DIGEST_LEN + 1], diff_id[IMG_DIGEST_LEN + 1];
		const char *want;
		uint64_t file_size = 0, tar_size = 0;
		enum img_compression c = IMG_TAR;
		struct stat st;
		size_t first;

		img_where(lw, sizeof(lw), "%s.rootfs.diff_ids[%zu]", cwhat, i);
		if (sbx_json_string(json_array_get(diff_ids, i), lw, &want, NULL, err) < 0)
			return -1;
		if (strncmp(want, "sha256:", 7) != 0 || strlen(want) != IMG_DIGEST_LEN) {
			img_show(shown, want);
			return sbx_fail(err, "%s: %s is not sha256:<hex>", lw, shown);
		}
		/* A layer that repeats an earlier one is read from the earlier
		 * one's file: docker save writes the repeat as a symlink. */
		for (first = 0; first < i; first++)
			if (json_equal(json_array_get(diff_ids, first),
				       json_array_get(diff_ids, i)))
				break;
		img_where(lw, sizeof(lw), "manifest.json Layers[%zu]", first);
		if (sbx_json_string(json_array_get(layers, first), lw, &lpath, NULL, err) < 0)
			return -1;
		img_show(shown, lpath);
		img_where(lw, sizeof(lw), "layer %zu/%zu (%s)", i + 1, n, shown);
		_cleanup_close_ int fd = img_open_regular(dir_fd, lpath, lw, &st, err);
		if (fd < 0)
			return -1;
		/* Every layer is charged, a repeat too (it is read, and
		 * unpacked, again). */
		if ((uint64_t)st.st_size > left)
			return sbx_fail(err,
					"%s: %" PRIu64 " bytes, past the %" PRIu64
					" the limits leave for the image's layers "
					"(images.max_bytes and max_entries)",
					lw, (uint64_t)st.st_size, left);
		img_human_size((uint64_t)st.st_size, hs);
		img_say(pr, "verifying blob %zu/%zu %.19s… %s", i + 2, n + 1, want, hs);
		if (layer_hashes(fd, lw, left, file_digest, &file_size, diff_id, &tar_size, &c,
				 err) < 0)
			return -1;
		left -= tar_size > file_size ? tar_size : file_size;
		if (strcmp(diff_id, want) != 0)
			return sbx_fail(err,
					"%s: its tar hashes to %s, the config's diff_id is %s "
					"(corrupted)",
					lw, diff_id, want);
		if (file_size != (uint64_t)st.st_size)
			return sbx_fail(err, "%s: changed while it was read", lw);
		if (lseek(fd, 0, SEEK_SET) < 0)
			return sbx_fail_errno(err, "%s: rewind", lw);
		sbuf_add(&m, "%s{\"mediaType\":\"%s\",\"size\":%" PRIu64 ",\"digest\":\"%s\"}",
			 i ? "," : "", IMG_MT_DOCKER_LAYER, tar_size, diff_id);
		if (img_source_add_layer(out, sbx_steal_fd(fd), file_digest, file_size, c, diff_id,
					 tar_size, IMG_MT_DOCKER_LAYER, err) < 0)
			return -1;
	}
	sbuf_add(&m, "]}");
	if (m.oom)
		return sbx_fail(err, "manifest: out of memory");
	img_sha256_buf(m.p, m.len, out->digest);
	if (json_object_set_new(out->meta, "manifest_digest", json_string(out->digest)) < 0)
		return sbx_fail(err, "out of memory");
	return 0;
}

int img_docker_read(int dir_fd, const char *ref, const struct img_limits *lim,
		    const struct img_progress *pr, struct img_source *out, struct sbx_err *err)
{
	memset(out, 0, sizeof(*out));
	if (read_manifest_json(dir_fd, ref, lim, pr, out, err) < 0) {
		img_source_free(out);
		return -1;
	}
	return 0;
}
