/* SPDX-License-Identifier: Apache-2.0 */
/* Archives: an oci-archive (a tar of an OCI layout) and a docker-archive
 * (`docker save`, `podman save`, `skopeo copy ... docker-archive:`). Both
 * are unpacked first into the staging directory's scratch/ by
 * images_unpack.c (the same hostile-archive rules as a layer, with no
 * whiteouts), then read from there. A docker-archive that holds an OCI
 * layout (docker 25 and later write index.json and oci-layout beside
 * manifest.json) is read as that layout; else manifest.json's
 * [{Config, RepoTags, Layers}] is read and verified: the config's sha256
 * against its file name, each layer's uncompressed sha256 against the
 * config's rootfs.diff_ids. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "images_source.h"

static int unpack_archive(int archive_fd, int scratch_fd, const struct img_limits *lim,
			  const struct img_progress *pr, struct sbx_err *err)
{
	struct img_unpack u;

	img_say(pr, "unpacking the archive");
	if (img_unpack_begin(&u, scratch_fd, lim, pr, err) < 0)
		return -1;
	if (img_unpack_tar(&u, archive_fd, false, NULL, 0, err) < 0) {
		img_unpack_abort(&u);
		return sbx_err_prefix(err, "the archive");
	}
	return img_unpack_finish(&u, err);
}

int img_source_oci_archive(int archive_fd, int scratch_dirfd, const char *ref,
			   const struct img_limits *lim, const struct img_progress *pr,
			   struct img_source *out, struct sbx_err *err)
{
	memset(out, 0, sizeof(*out));
	if (unpack_archive(archive_fd, scratch_dirfd, lim, pr, err) < 0)
		return -1;
	return img_oci_read(scratch_dirfd, "oci-archive", ref, lim, pr, out, err);
}

int img_source_docker_archive(int archive_fd, int scratch_dirfd, const char *ref,
			      const struct img_limits *lim, const struct img_progress *pr,
			      struct img_source *out, struct sbx_err *err)
{
	struct stat st;

	memset(out, 0, sizeof(*out));
	if (unpack_archive(archive_fd, scratch_dirfd, lim, pr, err) < 0)
		return -1;
	/* docker 25+: an OCI layout inside; its manifest digest is the one
	 * `docker pull name@` and the registry show. */
	if (fstatat(scratch_dirfd, "index.json", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    fstatat(scratch_dirfd, "oci-layout", &st, AT_SYMLINK_NOFOLLOW) == 0)
		return img_oci_read(scratch_dirfd, "docker-archive", ref, lim, pr, out, err);
	return img_docker_read(scratch_dirfd, ref, lim, pr, out, err);
}
