/* SPDX-License-Identifier: Apache-2.0 */
/* The root-only check and dlopen of dl_root.h: sbx_dl_root_only,
 * sbx_dl_open_checked and the two in one, sbx_dl_open_root_only. */
#include "dl_root.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The library and every directory above it, links resolved (into real),
 * are root's and writable by no one else: a path another user could write
 * (a libdir of a Homebrew or /opt prefix the build found) would give them
 * code in every one-shot (review). Root-owned, they cannot change between
 * this and the dlopen of real. */
bool sbx_dl_root_only(const char *path, char real[PATH_MAX], char *why, size_t size)
{
	struct stat st;

	if (!realpath(path, real)) {
		snprintf(why, size, "%.200s: %s", path, strerror(errno));
		return false;
	}
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", real);
	for (;;) {
		if (lstat(dir, &st) < 0) {
			snprintf(why, size, "%.200s: %s", dir, strerror(errno));
			return false;
		}
		if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
			snprintf(why, size,
				 "%.150s is owned by uid %u with mode %04o: not loaded, since only "
				 "root may be able to change it",
				 dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
			return false;
		}
		char *slash = strrchr(dir, '/');
		if (!slash || (slash == dir && dir[1] == '\0'))
			return true;
		slash[slash == dir ? 1 : 0] = '\0'; /* up one: "/a/b" to "/a", "/a" to "/" */
	}
}

void *sbx_dl_open_checked(const char *real, char *why, size_t size)
{
	void *lib = dlopen(real, RTLD_NOW | RTLD_LOCAL);

	if (!lib)
		snprintf(why, size, "%s", dlerror());
	return lib;
}

void *sbx_dl_open_root_only(const char *path, char *why, size_t size)
{
	char real[PATH_MAX];

	/* The path checked, not the one given: a link on the way, in a
	 * directory another user can write, could be turned elsewhere between
	 * the check and the open (review 32). */
	if (!sbx_dl_root_only(path, real, why, size))
		return NULL;
	return sbx_dl_open_checked(real, why, size);
}
