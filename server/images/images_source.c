/* SPDX-License-Identifier: Apache-2.0 */
/* The parts of the OCI and docker readers that both need: blobs opened
 * beneath the layout (never through a link) and verified against the
 * descriptor that names them before anything else looks at them, JSON
 * read within the blob bound, image configs read strictly. */
#include "images_source.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "sha256.h"
#include "strict_json.h"
#include "text.h"
#include "tree.h"
#include "util.h"

void img_show(char dst[IMG_SHOW_MAX], const char *s)
{
	/* Cut first, then escaped: a long hostile name stays short. */
	enum { CUT = 48 };
	char cut[CUT + 1], tmp[SBX_ESCAPE_SIZE(CUT)];
	size_t n = strnlen(s, CUT);

	memcpy(cut, s, n);
	cut[n] = '\0';
	sbx_escape(tmp, sizeof(tmp), cut);
	img_where(dst, IMG_SHOW_MAX, "%s%s", tmp, s[n] ? "..." : "");
}

void img_where(char *dst, size_t size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(dst, size, fmt, ap);
	va_end(ap);
}

void img_sha256_buf(const void *buf, size_t len, char digest[IMG_DIGEST_LEN + 1])
{
	unsigned char md[32];
	char hex[65];

	EVP_Digest(buf, len, md, NULL, EVP_sha256(), NULL);
	sbx_sha256_hex(md, hex);
	snprintf(digest, IMG_DIGEST_LEN + 1, "sha256:%s", hex);
}

void img_human_size(uint64_t n, char buf[32])
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)n;
	size_t u = 0;

	while (v >= 1024 && u + 1 < SBX_ARRAY_SIZE(units)) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, 32, "%" PRIu64 " B", n);
	else
		snprintf(buf, 32, "%.1f %s", v, units[u]);
}

const char *img_host_arch(void)
{
	/* uname's machine names against GOARCH's, which OCI uses. */
	static const struct {
		const char *uname, *oci;
	} map[] = {
	    {"x86_64", "amd64"},
	    {"aarch64", "arm64"},
	    {"armv7l", "arm"},
	    {"armv6l", "arm"},
	    {"i686", "386"},
	    {"i386", "386"},
	    {"ppc64le", "ppc64le"},
	    {"s390x", "s390x"},
	    {"riscv64", "riscv64"},
	    {"mips64", "mips64"},
	    {"loongarch64", "loong64"},
	};
	static char machine[65];
	struct utsname u;

	if (uname(&u) < 0)
		return "unknown";
	for (size_t i = 0; i < SBX_ARRAY_SIZE(map); i++)
		if (!strcmp(u.machine, map[i].uname))
			return map[i].oci;
	snprintf(machine, sizeof(machine), "%s", u.machine);
	return machine;
}

static bool hex64(const char *s)
{
	for (int i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return s[64] == '\0';
}

/* What --ref is matched against: a RepoTags entry as written
 * ("docker.io/library/busybox:1"), or the short forms docker prints
 * ("busybox:1", "me/app:1"). */
bool img_docker_name_matches(const char *tag, const char *ref)
{
	char full[600];
	int n;

	if (!strcmp(tag, ref))
		return true;
	n = snprintf(full, sizeof(full), "docker.io/%s%s", strchr(ref, '/') ? "" : "library/", ref);
	return n > 0 && (size_t)n < sizeof(full) && !strcmp(tag, full);
}

int img_desc_parse(json_t *v, const char *where, struct img_desc *d, struct sbx_err *err)
{
	char w[256], shown[IMG_SHOW_MAX];
	const char *digest;
	json_int_t size;

	memset(d, 0, sizeof(*d));
	if (!json_is_object(v))
		return sbx_fail(err, "%s: must be an object", where);
	d->obj = v;
	img_where(w, sizeof(w), "%s.mediaType", where);
	if (sbx_json_string(json_object_get(v, "mediaType"), w, &d->media_type, NULL, err) < 0)
		return -1;
	img_where(w, sizeof(w), "%s.digest", where);
	if (sbx_json_string(json_object_get(v, "digest"), w, &digest, NULL, err) < 0)
		return -1;
	if (strncmp(digest, "sha256:", 7) != 0 || !hex64(digest + 7)) {
		img_show(shown, digest);
		return sbx_fail(err,
				"%s: %s is not sha256:<64 lowercase hex> (only sha256 is "
				"supported)",
				w, shown);
	}
	snprintf(d->digest, sizeof(d->digest), "%s", digest);
	img_where(w, sizeof(w), "%s.size", where);
	if (sbx_json_int(json_object_get(v, "size"), w, 0, INT64_MAX, &size, err) < 0)
		return -1;
	d->size = (uint64_t)size;
	return 0;
}

/* Opened beneath the layout with no link anywhere on the way (a layout is
 * someone else's directory), non-blocking so a FIFO planted there cannot
 * hang the import, and refused unless it is a regular file. */
int img_open_regular(int dirfd, const char *path, const char *what, struct stat *st,
		     struct sbx_err *err)
{
	_cleanup_close_ int fd = sbx_open_beneath(dirfd, path, O_RDONLY | O_NONBLOCK, 0, err);

	if (fd < 0) {
		if (err->errnum == ENOENT)
			return sbx_fail(err, "%s%s%s is missing", what, what[0] ? ": " : "", path);
		if (err->errnum == ELOOP || err->errnum == EXDEV)
			return sbx_fail(err, "%s%s%s is a symlink or lies below one (refused)",
					what, what[0] ? ": " : "", path);
		return what[0] ? sbx_err_prefix(err, "%s", what) : -1;
	}
	if (fstat(fd, st) < 0)
		return sbx_fail_errno(err, "%s%sstat %s", what, what[0] ? ": " : "", path);
	if (!S_ISREG(st->st_mode))
		return sbx_fail(err, "%s%s%s is not a regular file", what, what[0] ? ": " : "",
				path);
	return sbx_steal_fd(fd);
}

static int blob_path(const struct img_desc *d, char path[128])
{
	return snprintf(path, 128, "blobs/sha256/%s", d->digest + 7);
}

/* `what` names the blob's digest already for a manifest or a config
 * ("manifest sha256:..."), not for a layer ("layer 2/3 of ..."). */
static const char *blob_name(const char *what, const struct img_desc *d, char buf[96])
{
	if (strstr(what, d->digest))
		return "";
	img_where(buf, 96, " blob %s", d->digest);
	return buf;
}

static int size_mismatch(const char *what, const struct img_desc *d, uint64_t have,
			 struct sbx_err *err)
{
	char b[96];

	return sbx_fail(err, "%s:%s holds %" PRIu64 " bytes, its descriptor says %" PRIu64, what,
			blob_name(what, d, b), have, d->size);
}

static int digest_mismatch(const char *what, const struct img_desc *d, const char *have,
			   struct sbx_err *err)
{
	char b[96];

	return sbx_fail(err, "%s:%s hashes to %s (corrupted, or not what its descriptor says)",
			what, blob_name(what, d, b), have);
}

int img_blob_open(int layout_fd, const struct img_desc *d, const char *what, struct sbx_err *err)
{
	char path[128], hex[65], have[IMG_DIGEST_LEN + 1];
	uint64_t bytes = 0;
	struct stat st;

	blob_path(d, path);
	_cleanup_close_ int fd = img_open_regular(layout_fd, path, what, &st, err);
	if (fd < 0)
		return -1;
	if ((uint64_t)st.st_size != d->size)
		return size_mismatch(what, d, (uint64_t)st.st_size, err);
	if (sbx_sha256_fd_max(fd, d->size, NULL, NULL, hex, &bytes, err) < 0) {
		if (err->errnum == EFBIG)
			return sbx_fail(err, "%s: blob %s grew while it was read", what, d->digest);
		return sbx_err_prefix(err, "%s: %s", what, path);
	}
	if (bytes != d->size)
		return size_mismatch(what, d, bytes, err);
	snprintf(have, sizeof(have), "sha256:%s", hex);
	if (strcmp(have, d->digest) != 0)
		return digest_mismatch(what, d, have, err);
	if (lseek(fd, 0, SEEK_SET) < 0)
		return sbx_fail_errno(err, "%s: rewind %s", what, path);
	return sbx_steal_fd(fd);
}

int img_read_fd(int fd, const char *what, uint64_t max, char **out, size_t *len,
		struct sbx_err *err)
{
	_cleanup_free_ char *buf = malloc(max + 1);
	size_t have = 0;

	if (!buf)
		return sbx_fail(err, "%s: out of memory", what);
	/* One byte past max tells a file that grew from one that ended. */
	while (have <= max) {
		ssize_t n = read(fd, buf + have, max + 1 - have);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_fail_errno(err, "%s: read", what);
		if (n == 0)
			break;
		have += (size_t)n;
	}
	if (have > max)
		return sbx_fail(err, "%s: larger than %" PRIu64 " bytes (images.max_blob_bytes)",
				what, max);
	buf[have] = '\0';
	*len = have;
	*out = sbx_steal_ptr(buf);
	return 0;
}

int img_read_file(int dirfd, const char *path, uint64_t max, char **buf, size_t *len,
		  struct sbx_err *err)
{
	struct stat st;
	_cleanup_close_ int fd = img_open_regular(dirfd, path, "", &st, err);

	if (fd < 0)
		return -1;
	if ((uint64_t)st.st_size > max)
		return sbx_fail(
		    err, "%s: %" PRIu64 " bytes, more than %" PRIu64 " (images.max_blob_bytes)",
		    path, (uint64_t)st.st_size, max);
	return img_read_fd(fd, path, max, buf, len, err);
}

json_t *img_json_parse(const char *buf, size_t len, const char *what, bool array_ok,
		       struct sbx_err *err)
{
	json_error_t je;
	/* JSON_ALLOW_NUL: the typed readers, not the parser, name the field. */
	json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);

	if (!j) {
		sbx_fail(err, "%s: not JSON: %s (line %d)", what, je.text, je.line);
		return NULL;
	}
	if (!json_is_object(j) && !(array_ok && json_is_array(j))) {
		json_decref(j);
		sbx_fail(err, "%s: must be a JSON %s", what, array_ok ? "array" : "object");
		return NULL;
	}
	return j;
}

json_t *img_blob_json(int layout_fd, const struct img_desc *d, const char *what,
		      const struct img_limits *lim, struct sbx_err *err)
{
	char path[128], have[IMG_DIGEST_LEN + 1];
	_cleanup_free_ char *buf = NULL;
	struct stat st;
	size_t len;

	/* Refused before reading a byte: a descriptor that says 2 GiB. */
	if (d->size > lim->max_blob_bytes) {
		sbx_fail(err,
			 "%s: blob %s is %" PRIu64 " bytes, more than %" PRIu64
			 " (images.max_blob_bytes)",
			 what, d->digest, d->size, lim->max_blob_bytes);
		return NULL;
	}
	blob_path(d, path);
	_cleanup_close_ int fd = img_open_regular(layout_fd, path, what, &st, err);
	if (fd < 0)
		return NULL;
	if ((uint64_t)st.st_size != d->size) {
		size_mismatch(what, d, (uint64_t)st.st_size, err);
		return NULL;
	}
	if (img_read_fd(fd, what, d->size, &buf, &len, err) < 0)
		return NULL;
	if (len != d->size) {
		size_mismatch(what, d, len, err);
		return NULL;
	}
	img_sha256_buf(buf, len, have);
	if (strcmp(have, d->digest) != 0) {
		digest_mismatch(what, d, have, err);
		return NULL;
	}
	return img_json_parse(buf, len, what, false, err);
}

/* An array of strings or null (Env, Entrypoint, Cmd), copied as given. */
static int string_array(json_t *v, const char *where, struct sbx_err *err)
{
	char w[256];
	size_t i;
	json_t *e;
	const char *s;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v))
		return sbx_fail(err, "%s: must be an array of strings", where);
	json_array_foreach(v, i, e)
	{
		img_where(w, sizeof(w), "%s[%zu]", where, i);
		if (sbx_json_string(e, w, &s, NULL, err) < 0)
			return -1;
	}
	return 0;
}

static int opt_string(json_t *obj, const char *key, const char *where, const char **s,
		      struct sbx_err *err)
{
	json_t *v = json_object_get(obj, key);
	char w[256];

	*s = NULL;
	if (!v || json_is_null(v))
		return 0;
	img_where(w, sizeof(w), "%s.%s", where, key);
	return sbx_json_string(v, w, s, NULL, err);
}

int img_config_meta(json_t *config, const char *what, json_t *meta, struct sbx_err *err)
{
	static const char *const arrays[] = {"Env", "Entrypoint", "Cmd"};
	static const char *const strings[] = {"WorkingDir", "User"};
	const char *os, *arch, *created, *s;
	char w[256], shown[IMG_SHOW_MAX];
	json_t *c, *out;

	img_where(w, sizeof(w), "%s.os", what);
	if (sbx_json_string(json_object_get(config, "os"), w, &os, NULL, err) < 0)
		return -1;
	img_where(w, sizeof(w), "%s.architecture", what);
	if (sbx_json_string(json_object_get(config, "architecture"), w, &arch, NULL, err) < 0)
		return -1;
	/* An image for another system or processor cannot run here: said
	 * now, not as an exec format error in the first run. */
	if (strcmp(os, "linux") != 0) {
		img_show(shown, os);
		return sbx_fail(err, "%s: the image is for os %s, not linux", what, shown);
	}
	if (strcmp(arch, img_host_arch()) != 0) {
		img_show(shown, arch);
		return sbx_fail(err, "%s: the image is for architecture %s, this host is %s", what,
				shown, img_host_arch());
	}
	if (opt_string(config, "created", what, &created, err) < 0)
		return -1;
	c = json_object_get(config, "config");
	img_where(w, sizeof(w), "%s.config", what);
	if (c && !json_is_null(c) && !json_is_object(c))
		return sbx_fail(err, "%s: must be an object", w);
	out = json_object();
	if (!out || json_object_set_new(meta, "config", out) < 0)
		return sbx_fail(err, "%s: out of memory", what);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(arrays); i++) {
		json_t *v = json_is_object(c) ? json_object_get(c, arrays[i]) : NULL;
		char wa[300];

		img_where(wa, sizeof(wa), "%s.%s", w, arrays[i]);
		if (string_array(v, wa, err) < 0)
			return -1;
		if (json_object_set_new(out, arrays[i], v ? json_deep_copy(v) : json_null()) < 0)
			return sbx_fail(err, "%s: out of memory", what);
	}
	for (size_t i = 0; i < SBX_ARRAY_SIZE(strings); i++) {
		if (json_is_object(c) && opt_string(c, strings[i], w, &s, err) < 0)
			return -1;
		if (!json_is_object(c))
			s = NULL;
		if (json_object_set_new(out, strings[i], s ? json_string(s) : json_null()) < 0)
			return sbx_fail(err, "%s: out of memory", what);
	}
	if (json_object_set_new(meta, "os", json_string(os)) < 0 ||
	    json_object_set_new(meta, "architecture", json_string(arch)) < 0 ||
	    (created && json_object_set_new(meta, "created", json_string(created)) < 0))
		return sbx_fail(err, "%s: out of memory", what);
	return 0;
}

uint64_t img_layers_budget(const struct img_limits *lim, size_t n_layers)
{
	uint64_t headers =
	    lim->max_entries > UINT64_MAX / 4096 ? UINT64_MAX : lim->max_entries * 4096;
	uint64_t fixed = (uint64_t)n_layers * (16 * 1024) + (1u << 20); /* n <= IMG_MAX_LAYERS */
	uint64_t sum = lim->max_bytes + headers;

	if (sum < headers) /* saturating: flags may be as large as they like */
		return UINT64_MAX;
	return sum + fixed < sum ? UINT64_MAX : sum + fixed;
}

int img_source_add_layer(struct img_source *src, int fd, const char *digest, uint64_t size,
			 enum img_compression c, const char *meta_digest, uint64_t meta_size,
			 const char *media_type, struct sbx_err *err)
{
	_cleanup_close_ int owned = fd;
	json_t *layers = json_object_get(src->meta, "layers"), *l;
	struct img_layer *dst;

	if (src->n_layers >= IMG_MAX_LAYERS)
		return sbx_fail(err, "more than %d layers", IMG_MAX_LAYERS);
	if (!layers) {
		layers = json_array();
		if (!layers || json_object_set_new(src->meta, "layers", layers) < 0)
			return sbx_fail(err, "layers: out of memory");
	}
	l = json_pack("{s:s, s:I, s:s}", "digest", meta_digest, "size", (json_int_t)meta_size,
		      "media_type", media_type);
	if (!l || json_array_append_new(layers, l) < 0)
		return sbx_fail(err, "layers: out of memory");
	dst = &src->layers[src->n_layers++];
	dst->fd = sbx_steal_fd(owned);
	snprintf(dst->digest, sizeof(dst->digest), "%s", digest);
	dst->size = size;
	dst->compression = c;
	return 0;
}

void img_source_free(struct img_source *src)
{
	for (size_t i = 0; i < src->n_layers; i++)
		sbx_closep(&src->layers[i].fd);
	src->n_layers = 0;
	json_decref(src->meta);
	src->meta = NULL;
}
