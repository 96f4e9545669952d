/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_spawn_prog (common/spawn_prog.c), which starts sbxd's helpers and
 * the helper's setuid id mappers: the child gets stdin from /dev/null, its
 * stdout and stderr where it is told (else /dev/null), the fds given at 3,
 * 4, ... in order, no other descriptor of ours (close-on-exec or not), exactly the
 * environment given, an empty signal mask and default dispositions, and a
 * process group of its own only when asked; fds given as 0 to 4 land where
 * they should; a program that cannot be started is an error naming it. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "spawn_prog.h"

static char *const no_env[] = {NULL};

/* Reads fd to its end into out (NUL-terminated). */
static void slurp(int fd, char *out, size_t size)
{
	size_t len = 0;
	ssize_t n;

	while (len < size - 1 &&
	       ((n = read(fd, out + len, size - 1 - len)) > 0 || (n < 0 && errno == EINTR)))
		if (n > 0)
			len += (size_t)n;
	out[len] = '\0';
}

/* Starts p with its stdout (and stderr, unless p sets one) in a pipe and
 * returns what it wrote; *status its wait status. -1 when it could not be
 * started (err says why). */
static int run(struct sbx_spawn_prog p, char *out, size_t size, int *status, struct sbx_err *err)
{
	int pipefd[2];
	pid_t pid;

	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -1;
	p.out_fd = pipefd[1];
	if (p.err_fd == -2)
		p.err_fd = pipefd[1];
	int rc = sbx_spawn_prog(&p, &pid, err);
	close(pipefd[1]);
	if (rc < 0) {
		close(pipefd[0]);
		return -1;
	}
	slurp(pipefd[0], out, size);
	close(pipefd[0]);
	while (waitpid(pid, status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return 0;
}

static struct sbx_spawn_prog sh(const char *script)
{
	static const char *argv[4];

	argv[0] = "/bin/sh";
	argv[1] = "-c";
	argv[2] = script;
	argv[3] = NULL;
	return (struct sbx_spawn_prog){.argv = argv, .env = no_env, .err_fd = -2};
}

/* dash redirects single-digit fds only: 3 to 9 are what can be checked. */
#define OPEN_FDS                                                                                   \
	"for n in 3 4 5 6 7 8 9; do if { true <&$n; } 2>/dev/null; then echo -n \"$n \"; fi; "     \
	"done; echo ."

int main(void)
{
	struct sbx_err err;
	char out[8192];
	int status = -1;

	/* 7 to 9 open here without close-on-exec: none reaches the child. */
	for (int fd = 7; fd <= 9; fd++) {
		int null = open("/dev/null", O_RDONLY);
		check(null >= 0 && dup2(null, fd) == fd, "fd %d open without close-on-exec", fd);
		if (null != fd)
			close(null);
	}
	check(run(sh(OPEN_FDS), out, sizeof(out), &status, &err) == 0, "sh started: %s", err.msg);
	check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "it exited 0 (status %d)", status);
	check(strcmp(out, ".\n") == 0, "no fd from 3 to 9 reached it: %s", out);

	/* The fds given land at 3, 4, ... in order, nothing else; one alone
	 * at 3; more than SBX_SPAWN_MAX_FDS, or a -1 among them, refused. */
	struct sbx_spawn_prog p = sh(OPEN_FDS);
	int four[] = {8, 9, 2, 7};
	p.fds = four;
	p.nfds = 2;
	check(run(p, out, sizeof(out), &status, &err) == 0 && strcmp(out, "3 4 .\n") == 0,
	      "two fds at 3 and 4, nothing else: %s", out);
	p.nfds = 1;
	check(run(p, out, sizeof(out), &status, &err) == 0 && strcmp(out, "3 .\n") == 0,
	      "one fd alone at 3: %s", out);
	p.nfds = 4;
	check(run(p, out, sizeof(out), &status, &err) == 0 && strcmp(out, "3 4 5 6 .\n") == 0,
	      "four fds at 3 to 6: %s", out);
	p.nfds = 5;
	check(run(p, out, sizeof(out), &status, &err) == -1 && strstr(err.msg, "at most 4"),
	      "five fds refused: %s", err.msg);
	int gap[] = {8, -1};
	p.fds = gap;
	p.nfds = 2;
	check(run(p, out, sizeof(out), &status, &err) == -1 && strstr(err.msg, "dup"),
	      "a -1 among the fds refused: %s", err.msg);

	/* stdin at its end, stderr where it is told or /dev/null, no
	 * environment of ours (dash sets PWD itself when it has none). */
	setenv("SBX_SPAWN_SECRET", "x", 1);
	const char *io = "if read line; then echo read; else echo eof; fi; echo err >&2; "
			 "echo \"[$SBX_SPAWN_SECRET]\"; env | grep -vc '^PWD='";
	check(run(sh(io), out, sizeof(out), &status, &err) == 0 &&
		  strcmp(out, "eof\nerr\n[]\n0\n") == 0,
	      "stdin at its end, stderr captured, an empty environment: %s", out);
	p = sh(io);
	p.err_fd = -1;
	check(run(p, out, sizeof(out), &status, &err) == 0 && strcmp(out, "eof\n[]\n0\n") == 0,
	      "err_fd -1: stderr is /dev/null: %s", out);
	static char *const one_env[] = {"ONLY=this", NULL};
	p = sh("env | grep -v '^PWD='");
	p.env = one_env;
	check(run(p, out, sizeof(out), &status, &err) == 0 && strcmp(out, "ONLY=this\n") == 0,
	      "exactly the environment given: %s", out);

	/* A blocked and an ignored signal here: neither in the child. */
	sigset_t term, old;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, &old);
	signal(SIGPIPE, SIG_IGN);
	const char *cat_status[] = {"/bin/grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status", NULL};
	p = (struct sbx_spawn_prog){.argv = cat_status, .env = no_env, .err_fd = -2};
	unsigned long long blk = ~0ULL, ign = ~0ULL;
	check(run(p, out, sizeof(out), &status, &err) == 0 &&
		  sscanf(out, "SigBlk:\t%llx\nSigIgn:\t%llx", &blk, &ign) == 2 &&
		  (blk & 0x7fffffffULL) == 0 && (ign & 0x7fffffffULL) == 0,
	      "an empty signal mask and no ignored signal of 1 to 31: %s", out);
	/* Signal n is bit n - 1. Above 31: glibc's posix_spawn leaves its own two (32 and 33, which
	 * no program of the C library can use) ignored in the child. */
	sigprocmask(SIG_SETMASK, &old, NULL);
	signal(SIGPIPE, SIG_DFL);

	/* Its own process group only when asked. */
	const char *pgrp[] = {"/bin/sh", "-c", "ps -o pgid= -p $$ | tr -d ' '", NULL};
	p = (struct sbx_spawn_prog){.argv = pgrp, .env = no_env, .err_fd = -2};
	check(run(p, out, sizeof(out), &status, &err) == 0 && atoi(out) == (int)getpgrp(),
	      "in our process group by default (%s, ours %d)", out, (int)getpgrp());
	p.own_group = true;
	check(run(p, out, sizeof(out), &status, &err) == 0 && atoi(out) != (int)getpgrp() &&
		  atoi(out) > 0,
	      "in a group of its own when asked (%s, ours %d)", out, (int)getpgrp());

	/* Fds given as 0 to 4 land where they should: the pipe at our 0 and
	 * an fd3 at our 1 (stdin and stdout here moved away first). */
	int saved_in = dup(0), saved_out = dup(1), pipefd[2];
	check(saved_in >= 0 && saved_out >= 0 && pipe(pipefd) == 0 && dup2(pipefd[1], 0) == 0 &&
		  dup2(saved_in, 1) == 1,
	      "our stdin is the pipe's write end, our stdout a copy of stdin");
	close(pipefd[1]);
	p = sh("read line && echo \"stdin: $line\"; echo fd3 >&3 && echo \"fd3 ok\"");
	p.out_fd = 0;
	p.err_fd = 0;
	int zero[] = {0};
	p.fds = zero;
	p.nfds = 1;
	pid_t pid;
	check(sbx_spawn_prog(&p, &pid, &err) == 0, "started: %s", err.msg);
	dup2(saved_in, 0);
	dup2(saved_out, 1);
	close(saved_in);
	close(saved_out);
	slurp(pipefd[0], out, sizeof(out));
	close(pipefd[0]);
	waitpid(pid, &status, 0);
	check(strcmp(out, "fd3\nfd3 ok\n") == 0,
	      "out_fd and fd3 given as our 0 reach 1 and 3, "
	      "stdin is still /dev/null: %s",
	      out);

	/* Not found, not executable: the error names the program. */
	const char *missing[] = {"/nonexistent/newuidmap", NULL};
	p = (struct sbx_spawn_prog){.argv = missing, .env = no_env, .err_fd = -2};
	memset(&err, 0, sizeof(err));
	check(run(p, out, sizeof(out), &status, &err) == -1 && err.errnum == ENOENT &&
		  strstr(err.msg, "/nonexistent/newuidmap"),
	      "a missing program is an error naming it: %s", err.msg);
	const char *not_exec[] = {"/etc/passwd", NULL};
	p.argv = not_exec;
	memset(&err, 0, sizeof(err));
	check(run(p, out, sizeof(out), &status, &err) == -1 && err.errnum == EACCES &&
		  strstr(err.msg, "/etc/passwd"),
	      "a file that is not executable is an error naming it: %s", err.msg);
	return check_done();
}
