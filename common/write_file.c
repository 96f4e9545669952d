/* SPDX-License-Identifier: Apache-2.0 */
#include "write_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int sbx_write_at(int dirfd, const char *file, const char *text, struct sbx_err *err)
{
	int fd = openat(dirfd, file, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return sbx_fail_errno(err, "open %s", file);
	size_t len = strlen(text);
	ssize_t n = write(fd, text, len);
	int saved = errno;
	close(fd);
	if (n != (ssize_t)len)
		return sbx_fail_errnum(err, saved, "write %s to %s", text, file);
	return 0;
}

int sbx_write_proc(pid_t pid, const char *file, const char *text, struct sbx_err *err)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	return sbx_write_at(AT_FDCWD, path, text, err);
}
