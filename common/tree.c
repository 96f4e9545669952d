#include "tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

#define BENEATH_RESOLVE                                                                            \
	(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)

int sbx_open_beneath(int dirfd, const char *path, int flags, mode_t mode, struct sbx_err *err)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
		.mode = (flags & O_CREAT) ? mode : 0,
		.resolve = BENEATH_RESOLVE,
	};
	int fd;
	do
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	while (fd < 0 && errno == EAGAIN);
	if (fd < 0)
		return sbx_fail_errno(err, "open %s", path);
	return fd;
}

