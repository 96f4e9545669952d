/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_spawn_stdio (helper/spawn_stdio.c), which starts the setuid id mappers:
 * the child gets stdin from /dev/null, stdout and stderr on the given fd,
 * an empty environment and no other descriptor of ours, close-on-exec or
 * not; a program that cannot be started is an error naming it, not a
 * child that exits 127. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "spawn_stdio.h"

/* Runs argv with its output in a pipe; out gets what it wrote, *status its
 * wait status. -1 when it could not be started (err says why). */
static int run(char *const argv[], char *out, size_t size, int *status, struct sbx_err *err)
{
	int p[2];
	size_t len = 0;
	ssize_t n;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = sbx_spawn_stdio(argv[0], argv, p[1], err);
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return -1;
	}
	while (len < size - 1 &&
	       ((n = read(p[0], out + len, size - 1 - len)) > 0 || (n < 0 && errno == EINTR)))
		if (n > 0)
			len += (size_t)n;
	out[len] = '\0';
	close(p[0]);
	while (waitpid(pid, status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return 0;
}

int main(void)
{
	struct sbx_err err;
	char out[4096];
	int status = -1;

	/* Descriptors 3 to 9 open here, without close-on-exec (7 to 9) and
	 * with it (the others that pipe2 and open make): a child that can
	 * read any of them says so. dash redirects single-digit fds only. */
	for (int fd = 7; fd <= 9; fd++) {
		int null = open("/dev/null", O_RDONLY);
		check(null >= 0 && dup2(null, fd) == fd, "fd %d opened without close-on-exec", fd);
		if (null != fd)
			close(null);
	}
	char *const fds[] = {"/bin/sh", "-c",
			     "for n in 3 4 5 6 7 8 9; do if { true <&$n; } 2>/dev/null; then "
			     "echo open $n; fi; done; echo checked",
			     NULL};
	check(run(fds, out, sizeof(out), &status, &err) == 0, "sh started: %s", err.msg);
	check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "sh exited 0 (status %d)", status);
	check(strcmp(out, "checked\n") == 0, "no fd from 3 to 9 reached the child: %s", out);

	/* stdin is /dev/null (end of file at once), stderr goes where stdout
	 * does, and the environment is empty. */
	char *const stdio[] = {"/bin/sh", "-c",
			       "if read line; then echo read; else echo eof; fi; echo err >&2; "
			       "env | wc -l",
			       NULL};
	check(run(stdio, out, sizeof(out), &status, &err) == 0, "sh started: %s", err.msg);
	/* dash sets PWD itself when it has none: the one variable env sees. */
	check(strcmp(out, "eof\nerr\n1\n") == 0 || strcmp(out, "eof\nerr\n0\n") == 0,
	      "stdin at its end, stderr captured, no environment of ours: %s", out);
	setenv("SBX_SPAWN_SECRET", "x", 1);
	char *const env[] = {"/bin/sh", "-c", "echo \"[$SBX_SPAWN_SECRET]\"", NULL};
	check(run(env, out, sizeof(out), &status, &err) == 0 && strcmp(out, "[]\n") == 0,
	      "our environment is not passed on: %s", out);

	/* Not found, not executable: the error names the program. */
	char *const missing[] = {"/nonexistent/newuidmap", NULL};
	memset(&err, 0, sizeof(err));
	check(run(missing, out, sizeof(out), &status, &err) == -1 &&
		  strstr(err.msg, "/nonexistent/newuidmap") && err.errnum == ENOENT,
	      "a missing program is an error naming it: %s", err.msg);
	char *const not_exec[] = {"/etc/passwd", NULL};
	memset(&err, 0, sizeof(err));
	check(run(not_exec, out, sizeof(out), &status, &err) == -1 &&
		  strstr(err.msg, "/etc/passwd") && err.errnum == EACCES,
	      "a file that is not executable is an error naming it: %s", err.msg);
	return check_done();
}
