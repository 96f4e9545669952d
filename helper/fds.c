/* SPDX-License-Identifier: Apache-2.0 */
#include "fds.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

int sbx_close_fds_except(int *keep, size_t n, struct sbx_err *err)
{
	qsort(keep, n, sizeof(int), cmp_int);
	unsigned lo = 3;
	for (size_t i = 0; i < n; i++) {
		if (keep[i] < (int)lo)
			continue;
		if ((unsigned)keep[i] > lo && close_range(lo, (unsigned)keep[i] - 1, 0) < 0)
			return sbx_fail_errno(err, "closing inherited fds");
		lo = (unsigned)keep[i] + 1;
	}
	if (close_range(lo, ~0U, 0) < 0)
		return sbx_fail_errno(err, "closing inherited fds");
	return 0;
}

int sbx_read_at(int dirfd, const char *file, char *buf, size_t size)
{
	int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size - 1);
	int saved = errno;
	close(fd);
	if (n < 0) {
		errno = saved;
		return -1;
	}
	buf[n] = '\0';
	return 0;
}

void sbx_report_exit(int fd, const void *report, size_t size)
{
	ssize_t n = write(fd, report, size);
	_exit(n == (ssize_t)size ? 0 : 1);
}

bool sbx_report_collect(int fd, pid_t child, void *report, size_t size, int *status)
{
	ssize_t n;
	do
		n = read(fd, report, size);
	while (n < 0 && errno == EINTR);
	int st = 0;
	while (waitpid(child, &st, 0) < 0 && errno == EINTR)
		;
	if (status)
		*status = st;
	return n == (ssize_t)size;
}

pid_t sbx_fork_single(void)
{
	return (pid_t)syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
}
