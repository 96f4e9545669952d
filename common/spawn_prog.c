/* SPDX-License-Identifier: Apache-2.0 */
/* posix_spawn, not fork: glibc's starts the child with CLONE_VM |
 * CLONE_VFORK, so the parent's page tables are not copied, nothing of it is
 * touched copy-on-write while the child runs up to its execve, and nothing
 * but the file actions runs between clone and exec, which also makes it
 * safe from sbxd's many threads. Forking the two id mappers from the helper
 * cost about 1.5 ms of a 35 ms one-shot on a 2-vCPU VM
 * (docs/dev/benchmarks.md). */
#include "spawn_prog.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include "util.h"

/* Copies at 10 and up cannot collide with the 0..6 they are moved to. */
static int high_dup(int fd)
{
	return fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 10);
}

static void close_highs(int high[SBX_SPAWN_MAX_FDS])
{
	for (int i = 0; i < SBX_SPAWN_MAX_FDS; i++)
		if (high[i] >= 0)
			close(high[i]);
}

/* stdout or stderr: the fd (copied high), else /dev/null. */
static int add_out(posix_spawn_file_actions_t *fa, int high, int to)
{
	return high >= 0 ? posix_spawn_file_actions_adddup2(fa, high, to)
			 : posix_spawn_file_actions_addopen(fa, to, "/dev/null", O_WRONLY, 0);
}

int sbx_spawn_prog(const struct sbx_spawn_prog *p, pid_t *pid, struct sbx_err *err)
{
	const char *prog = p->argv[0];
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	int high[SBX_SPAWN_MAX_FDS];
	_cleanup_close_ int hout = high_dup(p->out_fd);
	_cleanup_close_ int herr = high_dup(p->err_fd);
	int rc = 0;

	for (size_t i = 0; i < SBX_SPAWN_MAX_FDS; i++)
		high[i] = -1;
	if (p->nfds > SBX_SPAWN_MAX_FDS)
		return sbx_fail(err, "start %s: %zu fds, at most %d", prog, p->nfds,
				SBX_SPAWN_MAX_FDS);
	for (size_t i = 0; i < p->nfds && !rc; i++)
		if (p->fds[i] < 0 || (high[i] = high_dup(p->fds[i])) < 0)
			rc = -1;
	if (rc < 0 || (p->out_fd >= 0 && hout < 0) || (p->err_fd >= 0 && herr < 0)) {
		sbx_fail_errno(err, "start %s: dup", prog);
		close_highs(high);
		return -1;
	}
	sigemptyset(&none);
	sigfillset(&all);
	if ((rc = posix_spawn_file_actions_init(&fa)) != 0) {
		close_highs(high);
		return sbx_fail_errnum(err, rc, "start %s", prog);
	}
	if ((rc = posix_spawnattr_init(&attr)) != 0) {
		posix_spawn_file_actions_destroy(&fa);
		close_highs(high);
		return sbx_fail_errnum(err, rc, "start %s", prog);
	}
	rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	if (!rc)
		rc = add_out(&fa, hout, 1);
	if (!rc)
		rc = add_out(&fa, herr, 2);
	for (size_t i = 0; i < p->nfds && !rc; i++)
		rc = posix_spawn_file_actions_adddup2(&fa, high[i], 3 + (int)i);
	if (!rc)
		rc = posix_spawn_file_actions_addclosefrom_np(&fa, 3 + (int)p->nfds);
	if (!rc)
		rc =
		    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
							(p->own_group ? POSIX_SPAWN_SETPGROUP : 0));
	if (!rc && p->own_group)
		rc = posix_spawnattr_setpgroup(&attr, 0);
	if (!rc)
		rc = posix_spawnattr_setsigmask(&attr, &none);
	if (!rc)
		rc = posix_spawnattr_setsigdefault(&attr, &all);
	if (!rc)
		rc = posix_spawn(pid, prog, &fa, &attr, (char *const *)p->argv, p->env);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	close_highs(high);
	if (rc)
		return sbx_fail_errnum(err, rc, "start %s", prog);
	return 0;
}
