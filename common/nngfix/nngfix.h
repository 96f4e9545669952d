/* SPDX-License-Identifier: Apache-2.0 */
/* The nng workarounds' room: libc functions the program defines so that
 * libnng's calls, through its PLT, land here first (nng gives no hook
 * between the kernel and its own handling of a connection). Each one acts
 * only when its caller is libnng and otherwise passes the call through.
 *   nng_caller.c     where libnng's code is, the real libc calls
 *   nng_interpose.c  accept, readv, close and listen: the connection
 *                    guard's hooks (server/rpc/conn_guard.c keeps the
 *                    accounting) and the listen backlog
 *   nng_epipe.c      sendmsg: nng bug #1518, built for nng < 1.6 only
 * nng_caller.c and nng_epipe.c are compiled into sbxd and libsbxclient (the
 * dialer has the twin of #1518); nng_interpose.c into sbxd only. */
#ifndef SBX_NNGFIX_H
#define SBX_NNGFIX_H

#include <stdbool.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "err.h"

/* Whether libnng.so is loaded dynamically (else nothing binds here). */
bool sbx_nng_loaded(void);

/* Whether a return address lies in libnng's code: the interposed libc
 * calls act only on libnng's own calls. */
bool sbx_nng_is_caller(const void *return_address);

/* The next definition of a libc function after the program's own (the
 * real one, or a sanitizer's interceptor in front of it); NULL if none. */
void *sbx_nng_next_symbol(const char *name);

/* What the interposers ask about libnng's connections. Each is called
 * after the real call succeeded, outside any lock of this room. */
struct sbx_nngfix_hooks {
	/* A connection libnng accepted; false: refuse it (closed here, and
	 * accept reports ECONNABORTED, which libnng drops without a word). */
	bool (*accepted)(int fd);
	/* n >= 0 bytes libnng read into iov; true: fail the read with
	 * ECONNRESET instead, so that nng drops the pipe. */
	bool (*read)(int fd, const struct iovec *iov, int iovcnt, ssize_t n);
	/* fd is about to be closed by libnng. */
	void (*closing)(int fd);
};

/* Sets the hooks (NULL: none, pass everything through). The hooks stay
 * callable from then on: a hook that is off says so itself. */
void sbx_nngfix_set_hooks(const struct sbx_nngfix_hooks *hooks);

/* 0 when libnng's accept, readv, close and listen bind to this room's
 * (libnng loaded dynamically, the program's definitions exported) and the
 * real ones were found; -1 with the reason otherwise. */
int sbx_nngfix_check(struct sbx_err *err);

#endif
