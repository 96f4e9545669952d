/* SPDX-License-Identifier: Apache-2.0 */
/* The OCI layout reader (server/images/images_oci.c) against layouts
 * made here, good and broken: each broken one must be refused with an
 * error that says what is wrong, and the good ones must give the
 * manifest's sha256 as the digest with every layer open at offset 0. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "check.h"
#include "images_source.h"
#include "util.h"

static char root[64];
static int n_layout;

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void write_file(const char *dir, const char *name, const void *buf, size_t len)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
		perror(path);
		exit(2);
	}
}

/* A blob under dir/blobs/sha256/, named by its digest. */
static void blob(const char *dir, const char *text, size_t len, char digest[IMG_DIGEST_LEN + 1])
{
	char name[128];

	img_sha256_buf(text, len, digest);
	snprintf(name, sizeof(name), "blobs/sha256/%s", digest + 7);
	write_file(dir, name, text, len);
}

static void new_layout(char dir[256])
{
	char p[300];

	snprintf(dir, 256, "%s/l%d", root, n_layout++);
	snprintf(p, sizeof(p), "%s/blobs/sha256", dir);
	if (mkdir(dir, 0755) < 0) {
		perror(dir);
		exit(2);
	}
	snprintf(p, sizeof(p), "%s/blobs", dir);
	if (mkdir(p, 0755) < 0) {
		perror(p);
		exit(2);
	}
	snprintf(p, sizeof(p), "%s/blobs/sha256", dir);
	if (mkdir(p, 0755) < 0) {
		perror(p);
		exit(2);
	}
	write_file(dir, "oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}", 30);
}

struct made {
	char digest[IMG_DIGEST_LEN + 1];
	size_t size;
	char layer[2][IMG_DIGEST_LEN + 1];
	char config[IMG_DIGEST_LEN + 1];
};

/* A config, two layers and a manifest for `arch`; env_json is the
 * config's Env (raw JSON, to make wrong types). */
static void image_typed(const char *dir, const char *arch, const char *env_json,
			const char *layer_mt, const char *manifest_mt, const char *config_mt,
			struct made *m)
{
	char config[1024], manifest[2048];
	const char *l0 = "layer zero bytes", *l1 = "layer one, a little longer";
	int n;

	blob(dir, l0, strlen(l0), m->layer[0]);
	blob(dir, l1, strlen(l1), m->layer[1]);
	n = snprintf(
	    config, sizeof(config),
	    "{\"architecture\":\"%s\",\"os\":\"linux\",\"created\":\"2026-01-02T03:04:05Z\","
	    "\"config\":{\"Env\":%s,\"WorkingDir\":\"/w\",\"User\":\"1000\","
	    "\"Cmd\":[\"/bin/sh\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}",
	    arch, env_json);
	blob(dir, config, (size_t)n, m->config);
	n = snprintf(manifest, sizeof(manifest),
		     "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":\"%s\","
		     "\"digest\":\"%s\",\"size\":%d},\"layers\":["
		     "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu},"
		     "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu}]}",
		     manifest_mt, config_mt, m->config, (int)strlen(config), layer_mt, m->layer[0],
		     strlen(l0), layer_mt, m->layer[1], strlen(l1));
	blob(dir, manifest, (size_t)n, m->digest);
	m->size = (size_t)n;
}

static void image(const char *dir, const char *arch, const char *env_json, const char *layer_mt,
		  struct made *m)
{
	image_typed(dir, arch, env_json, layer_mt, IMG_MT_OCI_MANIFEST, IMG_MT_OCI_CONFIG, m);
}

#define GZ "application/vnd.oci.image.layer.v1.tar+gzip"

static void index_json(const char *dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void index_json(const char *dir, const char *fmt, ...)
{
	char buf[8192];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	write_file(dir, "index.json", buf, (size_t)n);
}

static const struct img_limits *limits(void)
{
	/* The documented defaults (images.h); only max_blob_bytes matters. */
	static const struct img_limits lim = {
	    .max_entries = 1000000,
	    .max_bytes = 16ull << 30,
	    .max_file_bytes = 4ull << 30,
	    .max_blob_bytes = 4u << 20,
	};
	return &lim;
}

/* A source reader of an unpacked directory: the OCI layout one or the
 * docker-archive one (the same signature). */
typedef int (*reader_fn)(int dir_fd, const char *ref, const struct img_limits *lim,
			 const struct img_progress *pr, struct img_source *out,
			 struct sbx_err *err);

/* Reads dir; on success *src holds it. */
static int open_with(reader_fn rd, const char *dir, const char *ref, struct img_source *src,
		     struct sbx_err *err)
{
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	memset(src, 0, sizeof(*src));
	if (fd < 0)
		return sbx_fail_errno(err, "open %s", dir);
	return rd(fd, ref, limits(), NULL, src, err);
}

static int open_layout(const char *dir, const char *ref, struct img_source *src,
		       struct sbx_err *err)
{
	return open_with(img_source_oci_layout, dir, ref, src, err);
}

static int open_docker(const char *dir, const char *ref, struct img_source *src,
		       struct sbx_err *err)
{
	return open_with(img_docker_read, dir, ref, src, err);
}

/* Expects a refusal whose message holds `needle`. */
static void refused_by(reader_fn rd, const char *dir, const char *ref, const char *needle,
		       const char *what)
{
	struct img_source src;
	struct sbx_err err = {0};
	int rc = open_with(rd, dir, ref, &src, &err);

	check(rc < 0 && strstr(err.msg, needle), "%s: refused naming \"%s\" (got: %s)", what,
	      needle, rc < 0 ? err.msg : "accepted");
	if (rc == 0)
		img_source_free(&src);
}

static void refused(const char *dir, const char *ref, const char *needle, const char *what)
{
	refused_by(img_source_oci_layout, dir, ref, needle, what);
}

static void docker_refused(const char *dir, const char *ref, const char *needle, const char *what)
{
	refused_by(img_docker_read, dir, ref, needle, what);
}

static void index1(const char *dir, const struct made *m, const char *annotations)
{
	index_json(dir,
		   "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\","
		   "\"size\":%zu%s}]}",
		   IMG_MT_OCI_MANIFEST, m->digest, m->size, annotations);
}

static void test_good(void)
{
	char dir[256];
	struct made m;
	struct img_source src;
	struct sbx_err err = {0};

	new_layout(dir);
	image(dir, img_host_arch(), "[\"A=1\",\"B=2\"]", GZ, &m);
	index1(dir, &m, ",\"annotations\":{\"org.opencontainers.image.ref.name\":\"v1\"}");
	if (!check(open_layout(dir, NULL, &src, &err) == 0, "a good layout opens (%s)", err.msg))
		return;
	check(!strcmp(src.digest, m.digest), "its digest is the manifest's sha256");
	check(src.n_layers == 2, "two layers");
	check(!strcmp(src.layers[0].digest, m.layer[0]) &&
		  !strcmp(src.layers[1].digest, m.layer[1]),
	      "layers in the manifest's order");
	check(src.layers[0].compression == IMG_TAR_GZIP, "tar+gzip said so");
	check(lseek(src.layers[1].fd, 0, SEEK_CUR) == 0, "layer fds at offset 0");
	check(!strcmp(json_string_value(json_object_get(src.meta, "kind")), "oci-layout"), "kind");
	check(!strcmp(json_string_value(json_object_get(src.meta, "config_digest")), m.config),
	      "config_digest");
	check(!strcmp(json_string_value(json_object_get(src.meta, "manifest_digest")), m.digest),
	      "manifest_digest");
	check(
	    !strcmp(json_string_value(json_object_get(src.meta, "architecture")), img_host_arch()),
	    "architecture");
	check(!strcmp(json_string_value(json_object_get(src.meta, "created")),
		      "2026-01-02T03:04:05Z"),
	      "created");
	json_t *c = json_object_get(src.meta, "config");
	check(json_array_size(json_object_get(c, "Env")) == 2 &&
		  !strcmp(json_string_value(json_object_get(c, "User")), "1000") &&
		  json_is_null(json_object_get(c, "Entrypoint")),
	      "config Env/User/Entrypoint as the image says them");
	check(json_array_size(json_object_get(src.meta, "layers")) == 2, "meta layers");
	img_source_free(&src);

	if (check(open_layout(dir, "v1", &src, &err) == 0, "--ref v1 picks it (%s)", err.msg))
		img_source_free(&src);
	refused(dir, "v2", "no manifest has ref v2", "--ref of a ref the index lacks");
}

/* Docker's media types in a layout (what skopeo copy docker://... oci:
 * keeps), a docker manifest list naming it, and a non-distributable
 * layer, which is accepted when its blob is there. */
static void test_other_types(void)
{
	char dir[256], list[1024], ldigest[IMG_DIGEST_LEN + 1];
	struct made m;
	struct img_source src;
	struct sbx_err err = {0};
	int n;

	new_layout(dir);
	image_typed(dir, img_host_arch(), "null", IMG_MT_DOCKER_LAYER, IMG_MT_DOCKER_MANIFEST,
		    IMG_MT_DOCKER_CONFIG, &m);
	n = snprintf(list, sizeof(list),
		     "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"manifests\":[{\"mediaType\":"
		     "\"%s\",\"digest\":\"%s\",\"size\":%zu,\"platform\":{\"os\":\"linux\","
		     "\"architecture\":\"%s\"}}]}",
		     IMG_MT_DOCKER_LIST, IMG_MT_DOCKER_MANIFEST, m.digest, m.size, img_host_arch());
	blob(dir, list, (size_t)n, ldigest);
	index_json(dir,
		   "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\","
		   "\"size\":%d}]}",
		   IMG_MT_DOCKER_LIST, ldigest, n);
	if (check(open_layout(dir, NULL, &src, &err) == 0,
		  "a docker manifest list and v2s2 manifest open (%s)", err.msg)) {
		check(!strcmp(src.digest, m.digest) && src.n_layers == 2,
		      "the docker manifest is the image");
		check(json_is_null(json_object_get(json_object_get(src.meta, "config"), "Env")),
		      "Env null stays null");
		img_source_free(&src);
	}
	new_layout(dir);
	image(dir, img_host_arch(), "[]",
	      "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", &m);
	index1(dir, &m, "");
	if (check(open_layout(dir, NULL, &src, &err) == 0,
		  "a non-distributable layer whose blob is there is accepted (%s)", err.msg)) {
		check(src.layers[0].compression == IMG_TAR_ZSTD, "its compression is zstd");
		img_source_free(&src);
	}
}

static void test_broken_blobs(void)
{
	char dir[256], path[1024];
	struct made m;

	/* Corrupted: same size, other bytes. */
	new_layout(dir);
	image(dir, img_host_arch(), "[]", GZ, &m);
	index1(dir, &m, "");
	snprintf(path, sizeof(path), "blobs/sha256/%s", m.layer[1] + 7);
	write_file(dir, path, "LAYER ONE, A LITTLE LONGER", 26);
	refused(dir, NULL, "hashes to", "a corrupted layer");

	/* Corrupted config. */
	new_layout(dir);
	image(dir, img_host_arch(), "[]", GZ, &m);
	index1(dir, &m, "");
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", dir, m.config + 7);
	FILE *f = fopen(path, "r+");
	if (f) {
		fputc('[', f);
		fclose(f);
	}
	refused(dir, NULL, "config", "a corrupted config");

	/* Size mismatch: the blob grew. */
	new_layout(dir);
	image(dir, img_host_arch(), "[]", GZ, &m);
	index1(dir, &m, "");
	snprintf(path, sizeof(path), "blobs/sha256/%s", m.layer[0] + 7);
	write_file(dir, path, "layer zero bytes!", 17);
	refused(dir, NULL, "holds 17 bytes, its descriptor says 16", "a layer of the wrong size");

	/* The index's size for the manifest is wrong. */
	new_layout(dir);
	image(dir, img_host_arch(), "[]", GZ, &m);
	m.size--;
	index1(dir, &m, "");
	refused(dir, NULL, "its descriptor says", "a manifest size mismatch in the index");

	/* The index names the manifest with a wrong digest (a blob that is
	 * there under that name, with other content). */
	new_layout(dir);
	image(dir, img_host_arch(), "[]", GZ, &m);
	struct made other;
	image(dir, "riscv64", "[\"X=1\"]", GZ, &other);
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", dir, m.digest + 7);
	char path2[1024];
	snprintf(path2, sizeof(path2), "%s/blobs/sha256/%s", dir, other.digest + 7);
	if (rename(path2, path) < 0)
		perror("rename");
	index1(dir, &m, "");
	refused(dir, NULL, "hashes to", "a wrong manifest digest in the index");

	/* Missing blob. */
	new_layout(dir);
	image(dir, img_host_arch(), "[]", GZ, &m);
	index1(dir, &m, "");
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", dir, m.layer[1] + 7);
	unlink(path);
	refused(dir, NULL, "is missing", "a missing layer");

	/* A blob that is a symlink (to a good copy of itself). */
	new_layout(dir);
	image(dir, img_host_arch(), "[]", GZ, &m);
	index1(dir, &m, "");
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", dir, m.layer[0] + 7);
	snprintf(path2, sizeof(path2), "%s/good-copy", dir);
	if (rename(path, path2) < 0 || symlink(path2, path) < 0)
		perror("symlink");
	refused(dir, NULL, "symlink", "a layer that is a symlink");

	/* blobs/ itself a symlink to a good layout's blobs. */
	char good[256], blobs[300];
	new_layout(good);
	image(good, img_host_arch(), "[]", GZ, &m);
	new_layout(dir);
	snprintf(blobs, sizeof(blobs), "%s/blobs/sha256", dir);
	rmdir(blobs);
	snprintf(blobs, sizeof(blobs), "%s/blobs", dir);
	rmdir(blobs);
	snprintf(path, sizeof(path), "%s/blobs", good);
	if (symlink(path, blobs) < 0)
		perror("symlink");
	index1(dir, &m, "");
	refused(dir, NULL, "symlink", "blobs/ a symlink");

	/* A FIFO where a layer should be: refused, never blocks. */
	new_layout(dir);
	image(dir, img_host_arch(), "[]", GZ, &m);
	index1(dir, &m, "");
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", dir, m.layer[0] + 7);
	unlink(path);
	if (mkfifo(path, 0600) < 0)
		perror("mkfifo");
	refused(dir, NULL, "not a regular file", "a FIFO as a layer");

	/* A manifest past images.max_blob_bytes. */
	new_layout(dir);
	image(dir, img_host_arch(), "[]", GZ, &m);
	index_json(dir,
		   "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\","
		   "\"size\":%d}]}",
		   IMG_MT_OCI_MANIFEST, m.digest, 1 << 30);
	refused(dir, NULL, "max_blob_bytes", "a manifest of 1 GiB");
}

static void test_index_choice(void)
{
	char dir[256];
	struct made amd, arm, ppc;
	struct img_source src;
	struct sbx_err err = {0};
	const char *other = strcmp(img_host_arch(), "arm64") ? "arm64" : "amd64";

	/* Multi-platform: the host's architecture is picked. */
	new_layout(dir);
	image(dir, other, "[]", GZ, &arm);
	image(dir, img_host_arch(), "[]", GZ, &amd);
	image(dir, "ppc64le", "[]", GZ, &ppc);
	char list[4096];
	snprintf(list, sizeof(list),
		 "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"manifests\":["
		 "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu,\"platform\":{\"os\":"
		 "\"linux\",\"architecture\":\"%s\",\"variant\":\"v8\"}},"
		 "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu,\"platform\":{\"os\":"
		 "\"linux\",\"architecture\":\"%s\"}},"
		 "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu,\"platform\":{\"os\":"
		 "\"linux\",\"architecture\":\"ppc64le\"}}]}",
		 IMG_MT_OCI_INDEX, IMG_MT_OCI_MANIFEST, arm.digest, arm.size, other,
		 IMG_MT_OCI_MANIFEST, amd.digest, amd.size, img_host_arch(), IMG_MT_OCI_MANIFEST,
		 ppc.digest, ppc.size);
	write_file(dir, "index.json", list, strlen(list));
	if (check(open_layout(dir, NULL, &src, &err) == 0, "a multi-platform index opens (%s)",
		  err.msg)) {
		check(!strcmp(src.digest, amd.digest), "it picks linux/%s", img_host_arch());
		img_source_free(&src);
	}

	/* The same list as a nested index, named by index.json with a ref. */
	char ldigest[IMG_DIGEST_LEN + 1];
	blob(dir, list, strlen(list), ldigest);
	index_json(dir,
		   "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\","
		   "\"size\":%zu,\"annotations\":{\"org.opencontainers.image.ref.name\":\"t\"}}]}",
		   IMG_MT_OCI_INDEX, ldigest, strlen(list));
	if (check(open_layout(dir, "t", &src, &err) == 0, "a nested index opens (%s)", err.msg)) {
		check(!strcmp(src.digest, amd.digest), "the nested index picks linux/%s",
		      img_host_arch());
		img_source_free(&src);
	}
	/* Nested deeper than the bound: an index naming itself is impossible
	 * (its digest would have to be its own), so a chain of five. */
	char prev[IMG_DIGEST_LEN + 1], cur[IMG_DIGEST_LEN + 1], body[512];
	size_t prev_size = strlen(list);
	snprintf(prev, sizeof(prev), "%s", ldigest);
	for (int i = 0; i < 5; i++) {
		int n = snprintf(body, sizeof(body),
				 "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\","
				 "\"digest\":\"%s\",\"size\":%zu}]}",
				 IMG_MT_OCI_INDEX, prev, prev_size);
		blob(dir, body, (size_t)n, cur);
		snprintf(prev, sizeof(prev), "%s", cur);
		prev_size = (size_t)n;
	}
	write_file(dir, "index.json", body, strlen(body));
	refused(dir, NULL, "nested deeper", "indexes nested too deep");

	/* No manifest for this host. */
	snprintf(list, sizeof(list),
		 "{\"schemaVersion\":2,\"manifests\":["
		 "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu,\"platform\":{\"os\":"
		 "\"linux\",\"architecture\":\"%s\"}},"
		 "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu,\"platform\":{\"os\":"
		 "\"linux\",\"architecture\":\"ppc64le\"}}]}",
		 IMG_MT_OCI_MANIFEST, arm.digest, arm.size, other, IMG_MT_OCI_MANIFEST, ppc.digest,
		 ppc.size);
	write_file(dir, "index.json", list, strlen(list));
	refused(dir, NULL, "linux/ppc64le", "no manifest for the host (offers listed)");

	/* A single manifest for another architecture: its config says so. */
	index1(dir, &arm, "");
	refused(dir, NULL, "this host is", "a lone image for another architecture");

	/* Two refs, no platform: --ref decides. */
	snprintf(list, sizeof(list),
		 "{\"schemaVersion\":2,\"manifests\":["
		 "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu,\"annotations\":{"
		 "\"org.opencontainers.image.ref.name\":\"a\"}},"
		 "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu,\"annotations\":{"
		 "\"org.opencontainers.image.ref.name\":\"b\"}}]}",
		 IMG_MT_OCI_MANIFEST, amd.digest, amd.size, IMG_MT_OCI_MANIFEST, ppc.digest,
		 ppc.size);
	write_file(dir, "index.json", list, strlen(list));
	refused(dir, NULL, "--ref (it offers: ref a, ref b)", "two refs and no --ref");
	if (check(open_layout(dir, "a", &src, &err) == 0, "--ref a opens (%s)", err.msg)) {
		check(!strcmp(src.digest, amd.digest), "--ref a picks a's manifest");
		img_source_free(&src);
	}
	refused(dir, "b", "architecture ppc64le", "--ref b picks b (whose config is ppc64le)");
	refused(dir, "c", "no manifest has ref c", "--ref c: not in the index");
}

static void test_wrong_types(void)
{
	char dir[256];
	struct made m;

	new_layout(dir);
	image(dir, img_host_arch(), "[\"A=1\",7]", GZ, &m);
	index1(dir, &m, "");
	refused(dir, NULL, "config.Env[1]: must be a string", "Env with a number");

	new_layout(dir);
	image(dir, img_host_arch(), "\"A=1\"", GZ, &m);
	index1(dir, &m, "");
	refused(dir, NULL, "config.Env: must be an array", "Env a string");

	new_layout(dir);
	image(dir, img_host_arch(), "[]", GZ, &m);
	index_json(dir,
		   "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\","
		   "\"size\":\"%zu\"}]}",
		   IMG_MT_OCI_MANIFEST, m.digest, m.size);
	refused(dir, NULL, "index.json.manifests[0].size: must be an integer", "size a string");

	index_json(dir, "{\"schemaVersion\":\"2\",\"manifests\":[]}");
	refused(dir, NULL, "index.json.schemaVersion: must be an integer",
		"schemaVersion a string");

	index_json(dir, "{\"schemaVersion\":2,\"manifests\":{}}");
	refused(dir, NULL, "index.json.manifests: must be an array", "manifests an object");

	index_json(dir, "[1]");
	refused(dir, NULL, "index.json: must be a JSON object", "index.json an array");

	index_json(dir,
		   "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":"
		   "\"md5:abc\",\"size\":1}]}",
		   IMG_MT_OCI_MANIFEST);
	refused(dir, NULL, "only sha256", "an md5 digest");

	index_json(dir,
		   "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\","
		   "\"size\":%zu,\"annotations\":{\"org.opencontainers.image.ref.name\":3}}]}",
		   IMG_MT_OCI_MANIFEST, m.digest, m.size);
	refused(dir, NULL, "ref.name: must be a string", "a ref annotation that is a number");

	index_json(dir,
		   "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\","
		   "\"size\":%zu,\"platform\":\"linux/amd64\"}]}",
		   IMG_MT_OCI_MANIFEST, m.digest, m.size);
	refused(dir, NULL, "platform: must be an object", "a platform string");

	/* Unknown media types: of the manifest, of a layer. */
	index_json(dir,
		   "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"text/plain\",\"digest\":"
		   "\"%s\",\"size\":%zu}]}",
		   m.digest, m.size);
	refused(dir, NULL, "media type text/plain is not an image manifest",
		"an unknown manifest media type");
	new_layout(dir);
	image(dir, img_host_arch(), "[]", "application/vnd.oci.image.layer.v1.tar+bzip2", &m);
	index1(dir, &m, "");
	refused(dir, NULL, "unknown layer media type", "an unknown layer media type");

	/* The manifest's own mediaType disagrees with the index. */
	new_layout(dir);
	image(dir, img_host_arch(), "[]", GZ, &m);
	index_json(dir,
		   "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\","
		   "\"size\":%zu}]}",
		   IMG_MT_DOCKER_MANIFEST, m.digest, m.size);
	refused(dir, NULL, "but index.json.manifests[0] says", "manifest type disagrees");

	/* Not a layout at all. */
	new_layout(dir);
	char p[300];
	snprintf(p, sizeof(p), "%s/oci-layout", dir);
	unlink(p);
	refused(dir, NULL, "not an OCI layout", "no oci-layout file");
	write_file(dir, "oci-layout", "{\"imageLayoutVersion\":\"9\"}", 26);
	refused(dir, NULL, "not supported", "an unknown layout version");
}

/* ---- docker-archive (unpacked) ---- */

/* gzip of buf, through libarchive's raw writer. */
static size_t gzip_of(const char *buf, size_t len, char *out, size_t cap)
{
	struct archive *a = archive_write_new();
	struct archive_entry *e = archive_entry_new();
	size_t used = 0;

	archive_write_add_filter_gzip(a);
	archive_write_set_format_raw(a);
	archive_write_open_memory(a, out, cap, &used);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_size(e, (la_int64_t)len);
	archive_write_header(a, e);
	archive_write_data(a, buf, len);
	archive_write_close(a);
	archive_write_free(a);
	archive_entry_free(e);
	return used;
}

struct docker_made {
	char config[IMG_DIGEST_LEN + 1];
	char expect[IMG_DIGEST_LEN + 1]; /* the generated manifest's digest */
};

/* An unpacked docker-archive: layers L0, L1 (gzip'ed in the archive) and
 * L0 again (a symlink to the first, as docker save writes a repeat). */
static void docker_dir(const char *dir, const char *tags, const char *bad_diff,
		       struct docker_made *dm)
{
	const char *l0 = "plain tar bytes of layer zero", *l1 = "layer one, gzip'ed in the archive";
	char d0[IMG_DIGEST_LEN + 1], d1[IMG_DIGEST_LEN + 1], gz[4096], config[2048], manifest[4096],
	    name[128], path[1024], target[128];
	size_t gzlen = gzip_of(l1, strlen(l1), gz, sizeof(gz));
	int n;

	if (mkdir(dir, 0755) < 0) {
		perror(dir);
		exit(2);
	}
	img_sha256_buf(l0, strlen(l0), d0);
	img_sha256_buf(l1, strlen(l1), d1);
	snprintf(name, sizeof(name), "%.64s", d0 + 7);
	mkdir(strcat(strcpy(path, dir), "/l0"), 0755);
	write_file(dir, "l0/layer.tar", l0, strlen(l0));
	mkdir(strcat(strcpy(path, dir), "/l1"), 0755);
	write_file(dir, "l1/layer.tar", gz, gzlen);
	mkdir(strcat(strcpy(path, dir), "/l2"), 0755);
	snprintf(path, sizeof(path), "%s/l2/layer.tar", dir);
	snprintf(target, sizeof(target), "../l0/layer.tar");
	if (symlink(target, path) < 0)
		perror("symlink");
	n = snprintf(config, sizeof(config),
		     "{\"architecture\":\"%s\",\"os\":\"linux\",\"config\":{\"Cmd\":null,"
		     "\"Env\":[\"PATH=/bin\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":"
		     "[\"%s\",\"%s\",\"%s\"]}}",
		     img_host_arch(), d0, bad_diff ? bad_diff : d1, d0);
	img_sha256_buf(config, (size_t)n, dm->config);
	snprintf(name, sizeof(name), "%.64s.json", dm->config + 7);
	write_file(dir, name, config, (size_t)n);
	n = snprintf(manifest, sizeof(manifest),
		     "[{\"Config\":\"%s\",\"RepoTags\":%s,\"Layers\":[\"l0/layer.tar\","
		     "\"l1/layer.tar\",\"l2/layer.tar\"]}]",
		     name, tags);
	write_file(dir, "manifest.json", manifest, (size_t)n);
	/* What skopeo generates (the rule in images_docker.c; the
	 * integration test checks it against skopeo itself). */
	n = snprintf(manifest, sizeof(manifest),
		     "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":\"%s\","
		     "\"size\":%d,\"digest\":\"%s\"},\"layers\":["
		     "{\"mediaType\":\"%s\",\"size\":%zu,\"digest\":\"%s\"},"
		     "{\"mediaType\":\"%s\",\"size\":%zu,\"digest\":\"%s\"},"
		     "{\"mediaType\":\"%s\",\"size\":%zu,\"digest\":\"%s\"}]}",
		     IMG_MT_DOCKER_MANIFEST, IMG_MT_DOCKER_CONFIG, (int)strlen(config), dm->config,
		     IMG_MT_DOCKER_LAYER, strlen(l0), d0, IMG_MT_DOCKER_LAYER, strlen(l1), d1,
		     IMG_MT_DOCKER_LAYER, strlen(l0), d0);
	img_sha256_buf(manifest, (size_t)n, dm->expect);
}

static void test_docker(void)
{
	char dir[256], path[1024];
	struct docker_made dm;
	struct img_source src;
	struct sbx_err err = {0};

	snprintf(dir, sizeof(dir), "%s/d0", root);
	docker_dir(dir, "[\"docker.io/library/foo:1\"]", NULL, &dm);
	if (check(open_docker(dir, NULL, &src, &err) == 0, "a docker archive opens (%s)",
		  err.msg)) {
		check(!strcmp(src.digest, dm.expect), "its digest is the generated manifest's");
		check(src.n_layers == 3, "three layers, the repeat included");
		check(src.layers[1].compression == IMG_TAR_GZIP &&
			  src.layers[0].compression == IMG_TAR,
		      "compression found by content");
		check(strcmp(src.layers[1].digest,
			     json_string_value(json_object_get(
				 json_array_get(json_object_get(src.meta, "layers"), 1),
				 "digest"))) != 0,
		      "a gzip'ed layer: fd digest is the file's, meta's is the diff_id");
		check(lseek(src.layers[2].fd, 0, SEEK_CUR) == 0 &&
			  lseek(src.layers[0].fd, 0, SEEK_CUR) == 0,
		      "layer fds at offset 0 (the repeat has its own)");
		check(
		    !strcmp(json_string_value(json_object_get(src.meta, "kind")), "docker-archive"),
		    "kind docker-archive");
		img_source_free(&src);
	}
	if (check(open_docker(dir, "foo:1", &src, &err) == 0, "--ref foo:1 (short form) (%s)",
		  err.msg))
		img_source_free(&src);
	docker_refused(dir, "foo:2", "is no RepoTags entry", "--ref of a tag not there");

	/* The layer's tar is not what the config's diff_id says. */
	snprintf(dir, sizeof(dir), "%s/d1", root);
	docker_dir(dir, "[]",
		   "sha256:0000000000000000000000000000000000000000000000000000000000000000", &dm);
	docker_refused(dir, NULL, "diff_id is sha256:0000", "a layer that is not its diff_id");

	/* A config that is not what its name says. */
	snprintf(dir, sizeof(dir), "%s/d2", root);
	docker_dir(dir, "null", NULL, &dm);
	snprintf(path, sizeof(path), "%s/%.64s.json", dir, dm.config + 7);
	FILE *f = fopen(path, "r+");
	if (f) {
		fputc(' ', f);
		fclose(f);
	}
	docker_refused(dir, NULL, "not the digest its name says", "a corrupted config");

	/* A layer (not a repeat) that is a symlink. */
	snprintf(dir, sizeof(dir), "%s/d3", root);
	docker_dir(dir, "[]", NULL, &dm);
	snprintf(path, sizeof(path), "%s/l1/layer.tar", dir);
	char moved[1100];
	snprintf(moved, sizeof(moved), "%s/moved.tar", dir);
	if (rename(path, moved) < 0 || symlink("../moved.tar", path) < 0)
		perror("symlink");
	docker_refused(dir, NULL, "layer 2/3", "a layer that is a symlink");

	/* Two images: --ref picks; without it, refused naming the tags. */
	snprintf(dir, sizeof(dir), "%s/d4", root);
	docker_dir(dir, "[]", NULL, &dm);
	snprintf(path, sizeof(path), "%.64s.json", dm.config + 7);
	char two[2048];
	int n = snprintf(two, sizeof(two),
			 "[{\"Config\":\"%s\",\"RepoTags\":[\"a:1\"],\"Layers\":[\"l0/layer.tar\","
			 "\"l1/layer.tar\",\"l2/layer.tar\"]},"
			 "{\"Config\":\"%s\",\"RepoTags\":[\"b:1\",\"b:2\"],\"Layers\":[]}]",
			 path, path);
	write_file(dir, "manifest.json", two, (size_t)n);
	docker_refused(dir, NULL, "2 images, name one with --ref (it offers: a:1, b:1, b:2)",
		       "two images and no --ref");
	if (check(open_docker(dir, "a:1", &src, &err) == 0, "--ref a:1 picks the first (%s)",
		  err.msg))
		img_source_free(&src);
	docker_refused(dir, "b:2", "0 layers, but",
		       "--ref b:2 picks the second (whose Layers "
		       "disagree with its config)");

	/* Wrong types. */
	write_file(dir, "manifest.json", "{}", 2);
	docker_refused(dir, NULL, "manifest.json: must be an array", "manifest.json an object");
	write_file(dir, "manifest.json", "[{\"Config\":7}]", 14);
	docker_refused(dir, NULL, "manifest.json[0].Config: must be a string", "Config a number");
	n = snprintf(two, sizeof(two), "[{\"Config\":\"%s\",\"RepoTags\":\"a:1\"}]", path);
	write_file(dir, "manifest.json", two, (size_t)n);
	docker_refused(dir, NULL, "RepoTags: must be an array", "RepoTags a string");
	write_file(dir, "manifest.json", "[{\"Config\":\"config.json\"}]", 26);
	docker_refused(dir, NULL, "names no sha256", "a config not named by its digest");

	/* A gzip bomb: refused while hashing, once past what unpacking could
	 * ever write (max_bytes + headers for max_entries + 1 MiB). */
	snprintf(dir, sizeof(dir), "%s/d5", root);
	docker_dir(dir, "[]", NULL, &dm);
	{
		enum { ZEROS = 3 << 20 };
		char *zeros = calloc(1, ZEROS), gz[64 * 1024];
		size_t gzlen = zeros ? gzip_of(zeros, ZEROS, gz, sizeof(gz)) : 0;
		struct img_limits tiny = {
		    .max_entries = 1, .max_bytes = 1, .max_file_bytes = 1, .max_blob_bytes = 4096};
		_cleanup_close_ int dfd;

		free(zeros);
		write_file(dir, "l1/layer.tar", gz, gzlen);
		dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		memset(&src, 0, sizeof(src));
		int rc = img_docker_read(dfd, NULL, &tiny, NULL, &src, &err);
		check(rc < 0 && strstr(err.msg, "uncompressed, more than"),
		      "a gzip bomb is refused while hashing (got: %s)",
		      rc < 0 ? err.msg : "accepted");
		if (rc == 0)
			img_source_free(&src);
	}
}

int main(void)
{
	snprintf(root, sizeof(root), "/tmp/sbx-test-source-XXXXXX");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 2;
	}
	test_good();
	test_other_types();
	test_broken_blobs();
	test_index_choice();
	test_wrong_types();
	test_docker();
	nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return check_done();
}
