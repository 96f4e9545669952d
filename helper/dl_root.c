/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_dl_open_root_only (dl_root.h). */
#include "dl_root.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The library and every directory above it are root's and writable by no
 * one else: a path another user could write (a libdir of a Homebrew or
 * /opt prefix the build found) would give them code in every one-shot
 * (review). Root-owned, they cannot change between this and the dlopen. */
static bool root_only(const char *path, char *why, size_t size)
{
	char real[PATH_MAX];
	struct stat st;

	if (!realpath(path, real)) {
		snprintf(why, size, "%.200s: %s", path, strerror(errno));
		return false;
	}
	for (;;) {
		if (lstat(real, &st) < 0) {
			snprintf(why, size, "%.200s: %s", real, strerror(errno));
			return false;
		}
		if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
			snprintf(why, size,
				 "%.150s is owned by uid %u with mode %04o: not loaded, since only "
				 "root may be able to change it",
				 real, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
			return false;
		}
		char *slash = strrchr(real, '/');
		if (!slash || (slash == real && real[1] == '\0'))
			return true;
		slash[slash == real ? 1 : 0] = '\0'; /* up one: "/a/b" to "/a", "/a" to "/" */
	}
}

void *sbx_dl_open_root_only(const char *path, char *why, size_t size)
{
	if (!root_only(path, why, size))
		return NULL;
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		snprintf(why, size, "%s", dlerror());
	return lib;
}
