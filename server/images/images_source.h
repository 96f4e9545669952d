/* SPDX-License-Identifier: Apache-2.0 */
/* What the three source readers share (images_source.c): blobs opened
 * beneath a layout and verified against their descriptor, JSON read
 * within the blob bound, descriptors and image configs parsed strictly.
 * images_oci.c reads OCI layouts (and oci-archives, and docker-archives
 * that hold one); images_docker.c reads docker-archive's manifest.json. */
#ifndef SBX_IMAGES_SOURCE_H
#define SBX_IMAGES_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/stat.h>

#include <jansson.h>

#include "images_internal.h"

#define IMG_MT_OCI_INDEX       "application/vnd.oci.image.index.v1+json"
#define IMG_MT_OCI_MANIFEST    "application/vnd.oci.image.manifest.v1+json"
#define IMG_MT_OCI_CONFIG      "application/vnd.oci.image.config.v1+json"
#define IMG_MT_DOCKER_LIST     "application/vnd.docker.distribution.manifest.list.v2+json"
#define IMG_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define IMG_MT_DOCKER_CONFIG   "application/vnd.docker.container.image.v1+json"
#define IMG_MT_DOCKER_LAYER    "application/vnd.docker.image.rootfs.diff.tar.gzip"

/* Escaped for an error message (a layout is someone else's text). */
#define IMG_SHOW_MAX 200
void img_show(char dst[IMG_SHOW_MAX], const char *s);

/* A JSON path for an error ("index.json.manifests[2].platform.os"):
 * snprintf that may cut a very long path short, on purpose. */
void img_where(char *dst, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* "sha256:<hex>" of a buffer. */
void img_sha256_buf(const void *buf, size_t len, char digest[IMG_DIGEST_LEN + 1]);
/* "12.3 MiB" */
void img_human_size(uint64_t n, char buf[32]);
/* The OCI name of the host's architecture (uname: x86_64 -> amd64). */
const char *img_host_arch(void);

/* Whether --ref names a docker image name (a docker-archive's RepoTags
 * entry, containerd's io.containerd.image.name annotation): as written
 * ("docker.io/library/busybox:1") or in docker's short forms ("busybox:1",
 * "me/app:1"). */
bool img_docker_name_matches(const char *name, const char *ref);

/* A descriptor {mediaType, digest, size, ...}; strings borrowed from the
 * JSON. Only sha256 digests are accepted: the store names trees by them. */
struct img_desc {
	const char *media_type;
	char digest[IMG_DIGEST_LEN + 1];
	uint64_t size;
	json_t *obj;
};
int img_desc_parse(json_t *v, const char *where, struct img_desc *d, struct sbx_err *err);

/* blobs/sha256/<hex> beneath layout_fd, which must be a regular file (no
 * link anywhere on the way) of exactly d->size bytes hashing to
 * d->digest; returns it open read-only at offset 0. `what` names the blob
 * in errors ("layer 2/3 of manifest sha256:..."). */
int img_blob_open(int layout_fd, const struct img_desc *d, const char *what, struct sbx_err *err);
/* The same for a JSON blob (at most lim->max_blob_bytes), parsed; it must
 * be an object. */
json_t *img_blob_json(int layout_fd, const struct img_desc *d, const char *what,
		      const struct img_limits *lim, struct sbx_err *err);

/* path beneath dirfd, opened read-only with no link on the way and
 * refused unless a regular file; errors start with `what` ("" for none). */
int img_open_regular(int dirfd, const char *path, const char *what, struct stat *st,
		     struct sbx_err *err);
/* A file beneath dirfd (regular, no links) read whole, at most max bytes;
 * *buf is NUL-terminated and the caller's. */
int img_read_file(int dirfd, const char *path, uint64_t max, char **buf, size_t *len,
		  struct sbx_err *err);
/* An open file read whole, at most max bytes (`what` names it in errors);
 * *buf is NUL-terminated and the caller's. */
int img_read_fd(int fd, const char *what, uint64_t max, char **buf, size_t *len,
		struct sbx_err *err);
/* Parses a JSON document that must be an object (or, array_ok, an array). */
json_t *img_json_parse(const char *buf, size_t len, const char *what, bool array_ok,
		       struct sbx_err *err);

/* An image config (OCI or docker, one schema): checks os is linux and the
 * architecture is the host's, and adds "os", "architecture", "created",
 * "config" {Env, WorkingDir, User, Entrypoint, Cmd} to meta. */
int img_config_meta(json_t *config, const char *what, json_t *meta, struct sbx_err *err);

/* What all the n_layers layers of one image may hold, compressed or not,
 * in total: the content the limits allow, 4 KiB of headers an entry,
 * 1 MiB, and 16 KiB of tar padding a layer. The readers charge each layer's blob (and a
 * docker layer's uncompressed tar) against it before and while they hash
 * it, so a descriptor naming a sparse terabyte, or one bomb repeated as
 * each of IMG_MAX_LAYERS layers, costs no more than the limits. */
uint64_t img_layers_budget(const struct img_limits *lim, size_t n_layers);

/* Adds one layer to src (and to meta "layers"): fd is taken. */
int img_source_add_layer(struct img_source *src, int fd, const char *digest, uint64_t size,
			 enum img_compression c, const char *meta_digest, uint64_t meta_size,
			 const char *media_type, struct sbx_err *err);

/* An OCI layout beneath layout_fd, read with `kind` for meta. */
int img_oci_read(int layout_fd, const char *kind, const char *ref, const struct img_limits *lim,
		 const struct img_progress *pr, struct img_source *out, struct sbx_err *err);
/* A docker-archive's manifest.json and what it names beneath dir_fd
 * (images_docker.c). */
int img_docker_read(int dir_fd, const char *ref, const struct img_limits *lim,
		    const struct img_progress *pr, struct img_source *out, struct sbx_err *err);

#endif
