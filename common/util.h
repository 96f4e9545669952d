/* SPDX-License-Identifier: Apache-2.0 */
/* Scope-bound cleanup, so every early return releases what it took. */
#ifndef SBX_UTIL_H
#define SBX_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))

/* A macro's value as a string literal. */
#define SBX_STR_(x) #x
#define SBX_STR(x)  SBX_STR_(x)

static inline void sbx_freep(void *p)
{
	free(*(void **)p);
}
static inline void sbx_closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}
static inline void sbx_fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

static inline void sbx_closedirp(DIR **d)
{
	if (*d) {
		int saved = errno;
		closedir(*d);
		errno = saved;
	}
}
/* A pipe or socketpair: both ends, each -1 once handed out. */
static inline void sbx_close_pairp(int (*fds)[2])
{
	sbx_closep(&(*fds)[0]);
	sbx_closep(&(*fds)[1]);
}
/* A child that must not outlive the scope: killed and reaped (as crun's
 * cleanup_pid). Set it to -1 (sbx_steal_pid) once it was waited for or
 * handed on. */
static inline void sbx_kill_reapp(pid_t *pid)
{
	if (*pid > 0) {
		int saved = errno;
		kill(*pid, SIGKILL);
		while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
			;
		errno = saved;
	}
}

#define _cleanup_free_	     _cleanup_(sbx_freep)
#define _cleanup_close_	     _cleanup_(sbx_closep)
#define _cleanup_fclose_     _cleanup_(sbx_fclosep)
#define _cleanup_closedir_   _cleanup_(sbx_closedirp)
#define _cleanup_close_pair_ _cleanup_(sbx_close_pairp)
#define _cleanup_kill_reap_  _cleanup_(sbx_kill_reapp)
#define SBX_PAIR_INIT                                                                              \
	{                                                                                          \
		-1, -1                                                                             \
	}

/* Hands ownership out of a cleanup-scoped variable. */
#define sbx_steal_fd(fd)                                                                           \
	({                                                                                         \
		int _fd = (fd);                                                                    \
		(fd) = -1;                                                                         \
		_fd;                                                                               \
	})
#define sbx_steal_pid(pid) sbx_steal_fd(pid)
#define sbx_steal_ptr(p)                                                                           \
	({                                                                                         \
		__typeof__(p) _p = (p);                                                            \
		(p) = NULL;                                                                        \
		_p;                                                                                \
	})

#define SBX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
