/* SPDX-License-Identifier: Apache-2.0 */
/* Unpacking a layer (server/images/images_unpack*.c): the input is a tar
 * stream (plain, gzip or zstd) unpacked into a target directory beside a
 * sentinel directory, with small limits.
 *
 * Input: byte 0 says whether whiteouts apply (bit 0) and whether the same
 * stream is applied a second time as the next layer (bit 1: whatever the
 * first pass planted -- links, directories, files -- is in the way of the
 * second); the rest is the stream. Properties: the sentinel and the
 * target's parent are as they were (nothing written outside the target);
 * an unpack that succeeded gives a tree the canonical hash can read; the
 * target can always be removed; no descriptor leaks. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "images_internal.h"
#include "tree.h"
#include "util.h"

static char top[64];
static int top_fd = -1;

static void remove_top(void)
{
	struct sbx_err err;
	_cleanup_close_ int tmp = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (tmp >= 0 && top[0])
		sbx_remove_tree_at(tmp, top + strlen("/tmp/"), &err);
}

static void set_up(void)
{
	snprintf(top, sizeof(top), "/tmp/sbx-test-fuzz-unpack-XXXXXX");
	FUZZ_ASSERT(mkdtemp(top), "mkdtemp: %s", strerror(errno));
	top_fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	FUZZ_ASSERT(top_fd >= 0 && mkdirat(top_fd, "sentinel", 0700) == 0, "set up");
	int fd = openat(top_fd, "sentinel/keep", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	FUZZ_ASSERT(fd >= 0 && write(fd, "keep\n", 5) == 5, "set up");
	close(fd);
	atexit(remove_top);
}

static int lowest_free_fd(void)
{
	int fd = dup(0);

	FUZZ_ASSERT(fd >= 0, "dup");
	close(fd);
	return fd;
}

/* The entries of dir (at most 4 counted): names joined by '/'. */
static int names(int dir, char *out, size_t size)
{
	_cleanup_closedir_ DIR *d = sbx_dir_list(dir);
	struct dirent *de;
	int n = 0;

	FUZZ_ASSERT(d, "list");
	out[0] = '\0';
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && n++ < 4)
			snprintf(out + strlen(out), size - strlen(out), "%s/", de->d_name);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct img_limits lim = {.max_entries = 200,
				 .max_bytes = 1u << 20,
				 .max_file_bytes = 256u << 10,
				 .max_blob_bytes = 1u << 16};
	struct img_unpack u;
	struct sbx_err err;
	char seen[256], digest[IMG_DIGEST_LEN + 1];
	int rc = 0;

	if (size < 1)
		return 0;
	if (top_fd < 0)
		set_up();
	int free_before = lowest_free_fd();
	FUZZ_ASSERT(mkdirat(top_fd, "target", 0700) == 0, "mkdir target: %s", strerror(errno));
	_cleanup_close_ int target = openat(top_fd, "target", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	FUZZ_ASSERT(target >= 0, "open target");
	_cleanup_close_ int blob = memfd_create("layer", MFD_CLOEXEC);
	FUZZ_ASSERT(blob >= 0 && write(blob, data + 1, size - 1) == (ssize_t)(size - 1), "memfd");

	FUZZ_ASSERT(img_unpack_begin(&u, target, &lim, NULL, &err) == 0, "begin: %s", err.msg);
	for (int pass = 0; rc == 0 && pass < ((data[0] & 2) ? 2 : 1); pass++) {
		FUZZ_ASSERT(lseek(blob, 0, SEEK_SET) == 0, "lseek");
		rc = img_unpack_tar(&u, blob, data[0] & 1, NULL, 0, &err);
	}
	if (rc == 0)
		rc = img_unpack_finish(&u, &err);
	else
		img_unpack_abort(&u);
	if (rc == 0)
		FUZZ_ASSERT(img_tree_hash(target, digest, &err) == 0, "tree hash: %s", err.msg);

	/* nothing beside the target, nothing new in the sentinel */
	FUZZ_ASSERT(names(top_fd, seen, sizeof(seen)) == 2, "the parent holds %s", seen);
	_cleanup_close_ int sentinel =
	    openat(top_fd, "sentinel", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	FUZZ_ASSERT(sentinel >= 0 && names(sentinel, seen, sizeof(seen)) == 1 &&
			!strcmp(seen, "keep/"),
		    "the sentinel holds %s", seen);
	struct stat st;
	FUZZ_ASSERT(fstatat(sentinel, "keep", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			S_ISREG(st.st_mode) && st.st_size == 5 && st.st_nlink == 1,
		    "the sentinel's file changed");
	close(target);
	target = -1;
	FUZZ_ASSERT(sbx_remove_tree_at(top_fd, "target", &err) == 0, "remove: %s", err.msg);
	close(sentinel);
	sentinel = -1;
	close(blob);
	blob = -1;
	FUZZ_ASSERT(lowest_free_fd() == free_before, "a descriptor leaked");
	return 0;
}
