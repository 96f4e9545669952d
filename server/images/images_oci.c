/* SPDX-License-Identifier: Apache-2.0 */
/* An OCI image layout (image-spec 1.1 "image-layout"): oci-layout,
 * index.json, blobs/sha256/<hex>. The index (and any index it names, to
 * a bounded depth) picks one manifest: by --ref (the
 * org.opencontainers.image.ref.name annotation of index.json's entries,
 * which is where skopeo, umoci and docker put the tag), else the one for
 * linux and the host's architecture, else the only one; anything else is
 * refused naming what the index offers. Every blob -- nested index,
 * manifest, config, layers -- is checked against its descriptor (size
 * and sha256) before this returns; the layers stay open. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "images_source.h"
#include "strict_json.h"
#include "util.h"

#define MAX_INDEX_DEPTH 4
#define REF_NAME	"org.opencontainers.image.ref.name"
#define CONTAINERD_NAME "io.containerd.image.name"

/* Layer media types. The non-distributable ("foreign") ones are accepted
 * when their blob is in the layout: the digest check makes them as safe
 * as any other, the restriction is only about pushing them, and their
 * `urls` are never fetched (a missing blob is refused like any other). */
static const struct {
	const char *media_type;
	enum img_compression c;
} layer_types[] = {
    {"application/vnd.oci.image.layer.v1.tar", IMG_TAR},
    {"application/vnd.oci.image.layer.v1.tar+gzip", IMG_TAR_GZIP},
    {"application/vnd.oci.image.layer.v1.tar+zstd", IMG_TAR_ZSTD},
    {"application/vnd.oci.image.layer.nondistributable.v1.tar", IMG_TAR},
    {"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", IMG_TAR_GZIP},
    {"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", IMG_TAR_ZSTD},
    {IMG_MT_DOCKER_LAYER, IMG_TAR_GZIP},
    {"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", IMG_TAR_GZIP},
};

static bool is_index(const char *mt)
{
	return !strcmp(mt, IMG_MT_OCI_INDEX) || !strcmp(mt, IMG_MT_DOCKER_LIST);
}

static bool is_manifest(const char *mt)
{
	return !strcmp(mt, IMG_MT_OCI_MANIFEST) || !strcmp(mt, IMG_MT_DOCKER_MANIFEST);
}

/* The descriptor an index picked, copied out of the index's JSON. */
struct picked {
	struct img_desc d;
	char media_type[128];
	char where[256];
};

/* An annotation value, or NULL; annotations must be strings. */
static int annotation(json_t *desc, const char *where, const char *key, const char **out,
		      struct sbx_err *err)
{
	json_t *ann = json_object_get(desc, "annotations");
	char w[300];

	*out = NULL;
	if (!ann)
		return 0;
	if (!json_is_object(ann))
		return sbx_fail(err, "%s.annotations: must be an object", where);
	if (!json_object_get(ann, key))
		return 0;
	img_where(w, sizeof(w), "%s.annotations.%s", where, key);
	return sbx_json_string(json_object_get(ann, key), w, out, NULL, err);
}

/* platform {os, architecture, variant?}: 1 it is linux/<host arch>, 0 it
 * names another, 2 there is none. */
static int platform_fits(json_t *desc, const char *where, char shown[64], struct sbx_err *err)
{
	json_t *p = json_object_get(desc, "platform");
	const char *os, *arch, *variant = NULL;
	char w[300];

	shown[0] = '\0';
	if (!p)
		return 2;
	if (!json_is_object(p))
		return sbx_fail(err, "%s.platform: must be an object", where);
	img_where(w, sizeof(w), "%s.platform.os", where);
	if (sbx_json_string(json_object_get(p, "os"), w, &os, NULL, err) < 0)
		return -1;
	img_where(w, sizeof(w), "%s.platform.architecture", where);
	if (sbx_json_string(json_object_get(p, "architecture"), w, &arch, NULL, err) < 0)
		return -1;
	if (json_object_get(p, "variant")) {
		img_where(w, sizeof(w), "%s.platform.variant", where);
		if (sbx_json_string(json_object_get(p, "variant"), w, &variant, NULL, err) < 0)
			return -1;
	}
	snprintf(shown, 64, "%.20s/%.20s%s%.10s", os, arch, variant ? "/" : "",
		 variant ? variant : "");
	/* The variant does not pick: one arm64 image per index is the rule. */
	return !strcmp(os, "linux") && !strcmp(arch, img_host_arch());
}

static void offer_append(char *offers, size_t size, const struct img_desc *d, const char *ref,
			 const char *plat)
{
	char shown[IMG_SHOW_MAX], one[IMG_SHOW_MAX + 96];
	size_t used = strlen(offers);

	if (ref)
		img_show(shown, ref);
	snprintf(one, sizeof(one), "%s%s%s%.19s%s%s%s", used ? ", " : "", ref ? "ref " : "",
		 ref ? shown : "", ref ? "" : d->digest, plat[0] ? " (" : "", plat,
		 plat[0] ? ")" : "");
	if (used + strlen(one) + 4 < size)
		memcpy(offers + used, one, strlen(one) + 1);
	else if (used >= 3 && used + 4 < size && strcmp(offers + used - 3, "...") != 0)
		memcpy(offers + used, "...", 4);
}

static int pick(json_t *index, const char *where, const char *ref, struct picked *out,
		struct sbx_err *err)
{
	json_t *manifests = json_object_get(index, "manifests"), *e;
	size_t i, n_ref = 0, n_fit = 0, n_none = 0, i_ref = 0, i_fit = 0, i_none = 0;
	char w[300], offers[1024] = "", plat[64], shown[IMG_SHOW_MAX];
	json_int_t version;

	img_where(w, sizeof(w), "%s.schemaVersion", where);
	if (sbx_json_int(json_object_get(index, "schemaVersion"), w, 2, 2, &version, err) < 0)
		return -1;
	if (json_object_get(index, "mediaType")) {
		const char *mt;

		img_where(w, sizeof(w), "%s.mediaType", where);
		if (sbx_json_string(json_object_get(index, "mediaType"), w, &mt, NULL, err) < 0)
			return -1;
		if (!is_index(mt)) {
			img_show(shown, mt);
			return sbx_fail(err, "%s: media type %s is not an image index", w, shown);
		}
	}
	if (!json_is_array(manifests))
		return sbx_fail(err, "%s.manifests: must be an array", where);
	if (json_array_size(manifests) == 0)
		return sbx_fail(err, "%s: lists no manifests", where);
	json_array_foreach(manifests, i, e)
	{
		struct img_desc d;
		const char *name, *cname;
		int fit;

		img_where(w, sizeof(w), "%s.manifests[%zu]", where, i);
		if (img_desc_parse(e, w, &d, err) < 0 ||
		    annotation(e, w, REF_NAME, &name, err) < 0 ||
		    annotation(e, w, CONTAINERD_NAME, &cname, err) < 0)
			return -1;
		fit = platform_fits(e, w, plat, err);
		if (fit < 0)
			return -1;
		offer_append(offers, sizeof(offers), &d, name, plat);
		if (ref && !(name && !strcmp(name, ref)) &&
		    !(cname && img_docker_name_matches(cname, ref)))
			continue;
		n_ref++, i_ref = i;
		if (fit == 1)
			n_fit++, i_fit = i;
		else if (fit == 2)
			n_none++, i_none = i;
	}
	if (ref && n_ref == 0) {
		img_show(shown, ref);
		return sbx_fail(err, "%s: no manifest has ref %s (it offers: %s)", where, shown,
				offers);
	}
	if (n_ref == 1)
		i = i_ref;
	else if (n_fit == 1)
		i = i_fit;
	else if (n_fit > 1)
		return sbx_fail(err,
				"%s: %zu manifests for linux/%s, name one with --ref (it "
				"offers: %s)",
				where, n_fit, img_host_arch(), offers);
	else if (n_none == 1)
		i = i_none;
	else if (n_none > 1)
		return sbx_fail(err,
				"%s: %zu manifests and no platform picks one, name one with "
				"--ref (it offers: %s)",
				where, n_none, offers);
	else
		return sbx_fail(err, "%s: no manifest for linux/%s (it offers: %s)", where,
				img_host_arch(), offers);
	img_where(out->where, sizeof(out->where), "%s.manifests[%zu]", where, i);
	if (img_desc_parse(json_array_get(manifests, i), out->where, &out->d, err) < 0)
		return -1;
	if (strlen(out->d.media_type) >= sizeof(out->media_type) ||
	    (!is_index(out->d.media_type) && !is_manifest(out->d.media_type))) {
		img_show(shown, out->d.media_type);
		return sbx_fail(err, "%s: media type %s is not an image manifest or index",
				out->where, shown);
	}
	snprintf(out->media_type, sizeof(out->media_type), "%s", out->d.media_type);
	out->d.media_type = out->media_type;
	out->d.obj = NULL;
	return 0;
}

static int layer_compression(const char *mt, enum img_compression *c)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(layer_types); i++)
		if (!strcmp(mt, layer_types[i].media_type)) {
			*c = layer_types[i].c;
			return 0;
		}
	return -1;
}

static int read_layers(int layout_fd, json_t *manifest, const char *mwhat, const char *cdigest,
		       uint64_t csize, const struct img_limits *lim, const struct img_progress *pr,
		       struct img_source *out, struct sbx_err *err)
{
	json_t *layers = json_object_get(manifest, "layers"), *e;
	char w[300], what[400], shown[IMG_SHOW_MAX], hs[32];
	uint64_t left;
	size_t i, n;

	if (!json_is_array(layers))
		return sbx_fail(err, "%s.layers: must be an array", mwhat);
	n = json_array_size(layers);
	if (n > IMG_MAX_LAYERS)
		return sbx_fail(err, "%s: %zu layers, more than %d", mwhat, n, IMG_MAX_LAYERS);
	left = img_layers_budget(lim, n);
	img_human_size(csize, hs);
	img_say(pr, "verified blob 1/%zu %.19s… %s (config)", n + 1, cdigest, hs);
	json_array_foreach(layers, i, e)
	{
		enum img_compression c;
		struct img_desc d;
		int fd;

		img_where(w, sizeof(w), "%s.layers[%zu]", mwhat, i);
		if (img_desc_parse(e, w, &d, err) < 0)
			return -1;
		if (layer_compression(d.media_type, &c) < 0) {
			img_show(shown, d.media_type);
			return sbx_fail(err, "%s: unknown layer media type %s", w, shown);
		}
		img_where(what, sizeof(what), "layer %zu/%zu of %s", i + 1, n, mwhat);
		/* Before a byte is hashed: a descriptor may name a sparse
		 * terabyte, and the same blob may be every layer. */
		if (d.size > left)
			return sbx_fail(err,
					"%s: %" PRIu64 " bytes, past the %" PRIu64
					" the limits leave for the image's layers "
					"(--max-bytes, --max-entries)",
					what, d.size, left);
		left -= d.size;
		img_human_size(d.size, hs);
		img_say(pr, "verifying blob %zu/%zu %.19s… %s", i + 2, n + 1, d.digest, hs);
		fd = img_blob_open(layout_fd, &d, what, err);
		if (fd < 0)
			return -1;
		if (img_source_add_layer(out, fd, d.digest, d.size, c, d.digest, d.size,
					 d.media_type, err) < 0)
			return -1;
	}
	return 0;
}

static int read_manifest(int layout_fd, const struct picked *p, const struct img_limits *lim,
			 const struct img_progress *pr, struct img_source *out, struct sbx_err *err)
{
	char mwhat[128], w[300], cwhat[256], shown[IMG_SHOW_MAX];
	const char *mt;
	struct img_desc cd;
	json_int_t version;

	img_where(mwhat, sizeof(mwhat), "manifest %s", p->d.digest);
	json_auto_t *m = img_blob_json(layout_fd, &p->d, mwhat, lim, err);
	if (!m)
		return -1;
	img_where(w, sizeof(w), "%s.schemaVersion", mwhat);
	if (sbx_json_int(json_object_get(m, "schemaVersion"), w, 2, 2, &version, err) < 0)
		return -1;
	/* OCI makes the manifest's own mediaType optional, docker requires it;
	 * when there it must be what the index said it is. */
	img_where(w, sizeof(w), "%s.mediaType", mwhat);
	if (json_object_get(m, "mediaType")) {
		if (sbx_json_string(json_object_get(m, "mediaType"), w, &mt, NULL, err) < 0)
			return -1;
		if (strcmp(mt, p->d.media_type) != 0) {
			img_show(shown, mt);
			return sbx_fail(err, "%s: %s, but %s says %s", w, shown, p->where,
					p->d.media_type);
		}
	} else if (strcmp(p->d.media_type, IMG_MT_DOCKER_MANIFEST) == 0) {
		return sbx_fail(err, "%s: missing (a docker manifest must name its type)", w);
	}
	img_where(w, sizeof(w), "%s.config", mwhat);
	if (img_desc_parse(json_object_get(m, "config"), w, &cd, err) < 0)
		return -1;
	if (strcmp(cd.media_type, IMG_MT_OCI_CONFIG) != 0 &&
	    strcmp(cd.media_type, IMG_MT_DOCKER_CONFIG) != 0) {
		img_show(shown, cd.media_type);
		return sbx_fail(err,
				"%s.mediaType: %s is not an image config (not a container "
				"image)",
				w, shown);
	}
	img_where(cwhat, sizeof(cwhat), "config %s", cd.digest);
	json_auto_t *config = img_blob_json(layout_fd, &cd, cwhat, lim, err);
	if (!config)
		return -1;
	if (img_config_meta(config, cwhat, out->meta, err) < 0)
		return -1;
	if (json_object_set_new(out->meta, "manifest_digest", json_string(p->d.digest)) < 0 ||
	    json_object_set_new(out->meta, "config_digest", json_string(cd.digest)) < 0 ||
	    json_object_set_new(out->meta, "layers", json_array()) < 0)
		return sbx_fail(err, "%s: out of memory", mwhat);
	if (read_layers(layout_fd, m, mwhat, cd.digest, cd.size, lim, pr, out, err) < 0)
		return -1;
	snprintf(out->digest, sizeof(out->digest), "%s", p->d.digest);
	return 0;
}

int img_oci_read(int layout_fd, const char *kind, const char *ref, const struct img_limits *lim,
		 const struct img_progress *pr, struct img_source *out, struct sbx_err *err)
{
	_cleanup_free_ char *buf = NULL;
	json_auto_t *layout = NULL, *index = NULL;
	const char *version;
	char where[300] = "index.json", shown[IMG_SHOW_MAX];
	struct picked p;
	size_t len;

	memset(out, 0, sizeof(*out));
	if (img_read_file(layout_fd, "oci-layout", lim->max_blob_bytes, &buf, &len, err) < 0)
		return sbx_err_prefix(err, "not an OCI layout");
	layout = img_json_parse(buf, len, "oci-layout", false, err);
	if (!layout || sbx_json_string(json_object_get(layout, "imageLayoutVersion"),
				       "oci-layout.imageLayoutVersion", &version, NULL, err) < 0)
		return -1;
	if (strcmp(version, "1.0.0") != 0) {
		img_show(shown, version);
		return sbx_fail(
		    err, "oci-layout.imageLayoutVersion: %s is not supported (1.0.0 is)", shown);
	}
	free(sbx_steal_ptr(buf));
	if (img_read_file(layout_fd, "index.json", lim->max_blob_bytes, &buf, &len, err) < 0)
		return -1;
	index = img_json_parse(buf, len, "index.json", false, err);
	if (!index)
		return -1;
	out->meta = json_pack("{s:s}", "kind", kind);
	if (!out->meta)
		return sbx_fail(err, "out of memory");
	for (int depth = 0;; depth++) {
		if (pick(index, where, depth == 0 ? ref : NULL, &p, err) < 0)
			goto fail;
		if (is_manifest(p.d.media_type))
			break;
		if (depth + 1 >= MAX_INDEX_DEPTH) {
			sbx_fail(err, "%s: indexes nested deeper than %d", p.where,
				 MAX_INDEX_DEPTH);
			goto fail;
		}
		img_where(where, sizeof(where), "index %s", p.d.digest);
		json_t *next = img_blob_json(layout_fd, &p.d, where, lim, err);
		if (!next)
			goto fail;
		json_decref(index);
		index = next;
	}
	if (read_manifest(layout_fd, &p, lim, pr, out, err) < 0)
		goto fail;
	return 0;
fail:
	img_source_free(out);
	return -1;
}

int img_source_oci_layout(int layout_dirfd, const char *ref, const struct img_limits *lim,
			  const struct img_progress *pr, struct img_source *out,
			  struct sbx_err *err)
{
	return img_oci_read(layout_dirfd, "oci-layout", ref, lim, pr, out, err);
}
