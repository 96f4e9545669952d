/* Scope-bound cleanup, so every early return releases what it took. */
#ifndef SBX_UTIL_H
#define SBX_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))

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

#define _cleanup_free_ _cleanup_(sbx_freep)
#define _cleanup_close_ _cleanup_(sbx_closep)
#define _cleanup_fclose_ _cleanup_(sbx_fclosep)

/* Hands ownership out of a cleanup-scoped variable. */
#define sbx_steal_fd(fd)                                                                           \
	({                                                                                         \
		int _fd = (fd);                                                                    \
		(fd) = -1;                                                                         \
		_fd;                                                                               \
	})
#define sbx_steal_ptr(p)                                                                           \
	({                                                                                         \
		__typeof__(p) _p = (p);                                                            \
		(p) = NULL;                                                                        \
		_p;                                                                                \
	})

#define SBX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
