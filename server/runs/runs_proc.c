/* SPDX-License-Identifier: Apache-2.0 */
/* Starting and ending sbx-helper processes.
 *
 * Started by sbx_spawn_prog (common/spawn_prog.c: posix_spawn, safe from
 * sbxd's threads). Each helper gets exactly: /dev/null as stdin,
 * the given fds as stdout/stderr, the fds it is given at 3 and up (its
 * control socket first), and nothing else (closefrom), an empty signal mask with default
 * dispositions, its own process group (so a hung helper and its sandbox's pid 1 die with one kill),
 * and an environment reduced to what it needs. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runs_proc.h"

#include "clock.h"
#include "spawn_prog.h"
#include "util.h"

#define CAPTURE_MAX    (64 * 1024)
#define KILLED_EXIT_MS 5000 /* for a SIGKILLed helper to be reaped */

int proc_spawn(const char *const *argv, char *const *env, const int *fds, size_t nfds, int outfd,
	       int errfd, pid_t *pid, struct sbx_err *err)
{
	struct sbx_spawn_prog p = {.argv = argv,
				   .env = env,
				   .out_fd = outfd,
				   .err_fd = errfd,
				   .fds = fds,
				   .nfds = nfds,
				   .own_group = true};

	return sbx_spawn_prog(&p, pid, err);
}

int proc_reap(pid_t pid, int pidfd, int timeout_ms, int *status)
{
	int64_t deadline = sbx_mono_ms() + timeout_ms;
	int st = 0;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		int64_t left;

		if (r == pid || (r < 0 && errno == ECHILD)) {
			/* ECHILD: SIGCHLD set to SIG_IGN somewhere; it is gone. */
			if (status)
				*status = r == pid ? st : 0;
			return 1;
		}
		if (r < 0 && errno == EINTR)
			continue;
		left = deadline - sbx_mono_ms();
		if (left <= 0)
			return 0;
		if (pidfd >= 0) {
			struct pollfd pfd = {.fd = pidfd, .events = POLLIN};

			if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
				usleep(10000); /* ENOMEM: back off, never spin */
		} else {
			usleep(left < 10 ? (useconds_t)left * 1000 : 10000);
		}
	}
}

void proc_kill_group(pid_t pid)
{
	/* The group id is the helper's pid, which cannot be reused before we
	 * reap it: the callers never signal after reaping, and sbxd sets
	 * SIGCHLD to its default at start (server/main.c), so the kernel never
	 * reaps one for us. */
	if (pid > 0 && kill(-pid, SIGKILL) < 0) {
		/* ESRCH: the whole group is gone already. */
	}
}

static void capture(int *fd, char *buf, size_t *len)
{
	char tmp[4096];
	ssize_t n = read(*fd, tmp, sizeof(tmp));

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		close(*fd);
		*fd = -1;
		return;
	}
	if (*len + (size_t)n > CAPTURE_MAX)
		n = (ssize_t)(CAPTURE_MAX - *len);
	memcpy(buf + *len, tmp, (size_t)n);
	*len += (size_t)n;
	buf[*len] = '\0';
}

int proc_run_helper(const char *helper, char *const *env, const char *const *args, int timeout_ms,
		    char **out, int *status, struct sbx_err *err)
{
	const char *argv[16];
	size_t n = 0;
	_cleanup_close_pair_ int p[2] = SBX_PAIR_INIT;
	_cleanup_kill_reap_ pid_t pid = -1;
	_cleanup_close_ int pidfd = -1;
	_cleanup_free_ char *buf = malloc(CAPTURE_MAX + 1);
	size_t len = 0;
	int64_t deadline = sbx_mono_ms() + timeout_ms, left;

	*out = NULL;
	if (!buf)
		return sbx_fail_errno(err, "sbx-helper output");
	buf[0] = '\0';
	argv[n++] = helper;
	for (size_t i = 0; args[i] && n < SBX_ARRAY_SIZE(argv) - 1; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	if (pipe2(p, O_CLOEXEC) < 0)
		return sbx_fail_errno(err, "pipe");
	/* stdout and stderr together: either may say what went wrong. */
	if (proc_spawn(argv, env, NULL, 0, p[1], p[1], &pid, err) < 0) {
		pid = -1;
		return -1;
	}
	close(sbx_steal_fd(p[1]));
	/* Without a pidfd (-1) proc_reap polls. */
	pidfd = pidfd_open(pid, 0);
	while (p[0] >= 0) {
		struct pollfd pfd = {.fd = p[0], .events = POLLIN};

		left = deadline - sbx_mono_ms();
		if (left <= 0)
			break;
		if (poll(&pfd, 1, (int)left) > 0)
			capture(&p[0], buf, &len);
	}
	left = deadline - sbx_mono_ms();
	if (!proc_reap(pid, pidfd, left > 0 ? (int)left : 0, status)) {
		proc_kill_group(pid);
		if (proc_reap(pid, pidfd, KILLED_EXIT_MS, NULL))
			pid = -1;
		return sbx_fail(err, "%s %s did not finish within %d s", helper, args[0],
				timeout_ms / 1000);
	}
	pid = -1; /* reaped */
	*out = sbx_steal_ptr(buf);
	return 0;
}
