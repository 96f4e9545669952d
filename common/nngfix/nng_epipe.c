/* SPDX-License-Identifier: Apache-2.0 */
/* nng issue #1518 ("Disconnect during negotiation breaks listener"), fixed
 * upstream in nng 1.6.0 by commit 9248ed74; Debian 12 ships 1.5.2.
 *
 * The bug. A peer connects and closes before the SP handshake is done.
 * nng's 8-byte SP header write (sendmsg(fd, ..., MSG_NOSIGNAL) in
 * posix_ipcconn.c / posix_tcpconn.c, straight from the accept callback)
 * fails with EPIPE, which nni_plat_errno() maps to NNG_ECLOSED. The
 * transport's negotiation callback hands that to the listener's pending
 * accept, and listener_accept_cb() (core/listener.c) reads NNG_ECLOSED as
 * "my listener was closed": it never accepts again, and every later caller
 * times out. ipc:// hits it on almost any connect+close; tcp:// and
 * tls+tcp:// when the peer sends FIN then RST (the RST lands in CLOSE_WAIT
 * and Linux reports EPIPE); TLS passes the EPIPE of a handshake write up the
 * same way (tls_tcp_error). A dialer has the twin: dialer_connect_cb() stops
 * redialing on NNG_ECLOSED, which a server that accepts and closes at once
 * (sbxd refusing a connection over its caps) produces on a unix socket.
 *
 * The fix. This file defines sendmsg() in the program. libnng.so.1 imports
 * sendmsg through its PLT and the program comes first in the global lookup
 * scope, so libnng's calls land here. When the real sendmsg fails with
 * EPIPE, the caller is libnng and the fd is a stream socket, errno becomes
 * ECONNRESET: nng maps it to NNG_ECONNRESET, which listener_accept_cb()
 * treats as "remote condition, no cool down" and re-arms accept at once
 * (also in 1.6 up to the 1.12 tag and 2.0's alpha; ECONNABORTED would not do,
 * 2.0 stops on it). Every other caller and outcome is untouched.
 *
 * Why remapping EPIPE is complete: every other source of NNG_ECLOSED on the
 * accept path is a local close (ipc_ep_close, ep->closed, the transports'
 * close finishing queued aios, nni_aio_close, a closed pollfd, EBADF);
 * EPIPE from sendmsg is the only one a peer controls (reads turn EOF and
 * HUP into NNG_ECONNSHUT; mbedTLS's CONN_EOF mapping is unreachable).
 *
 * On nng >= 1.6 the transports turn NNG_ECLOSED into NNG_ECONNSHUT
 * themselves, so this file is built only for an older nng (CMakeLists.txt
 * checks nng's version); if a later nng stops calling sendmsg, nothing here
 * is reached. nni_plat_errno itself cannot be replaced: libnng exports no
 * nni_* symbol. */
#include "nng_epipe.h"

#include <dlfcn.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nngfix.h"

typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);

static sendmsg_fn real_sendmsg;

__attribute__((constructor)) static void nng_epipe_init(void)
{
	real_sendmsg = (sendmsg_fn)sbx_nng_next_symbol("sendmsg");
}

__attribute__((visibility("default"), noinline)) ssize_t sendmsg(int fd, const struct msghdr *msg,
								 int flags)
{
	ssize_t n =
	    real_sendmsg ? real_sendmsg(fd, msg, flags) : syscall(SYS_sendmsg, fd, msg, flags);

	if (n < 0 && errno == EPIPE && sbx_nng_is_caller(__builtin_return_address(0))) {
		int type = 0;
		socklen_t len = sizeof(type);

		/* The peer went away: a remote condition. */
		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM)
			errno = ECONNRESET;
		else
			errno = EPIPE;
	}
	return n;
}

/* libnng binds its versioned reference sendmsg@GLIBC_2.2.5 by searching the
 * global scope from the program on; an unversioned definition there
 * satisfies it, so the unversioned global lookup below finds what libnng
 * binds to (dlvsym would not: it wants an exact version and skips ours). */
int sbx_nng_epipe_check(struct sbx_err *err)
{
	if (!sbx_nng_loaded())
		return sbx_fail(err, "nng bug #1518 fix: libnng.so is not loaded dynamically");
	if (dlsym(RTLD_DEFAULT, "sendmsg") != (void *)sendmsg)
		return sbx_fail(err, "nng bug #1518 fix: libnng's sendmsg does not bind to the "
				     "program's (not exported?)");
	if (!real_sendmsg || real_sendmsg == sendmsg)
		return sbx_fail(err, "nng bug #1518 fix: the real sendmsg was not found");
	return 0;
}
