/* SPDX-License-Identifier: Apache-2.0 */
/* The interposing half of sbxd's connection guard (sbxd only: a client
 * linking this would have its own accept and close rerouted).
 *
 * nng 1.5.2 gives no hook between the kernel's accept and its own SP
 * negotiation, but libnng takes every connection with a plain accept()
 * through its PLT (posix_ipclisten.c, posix_tcplisten.c), reads with
 * readv() and closes with close() through it too. The program defines
 * those functions (libnng.so.1 imports them and the program comes first in
 * the global lookup scope), acts only when the caller is libnng, and hands
 * the connection to the hooks server/rpc/conn_guard.c sets, which count
 * connections and follow the SP framing (conn_guard.c says what each
 * bound is). listen() too: nng 1.5.2 asks for a backlog of 128, which a
 * storm fills while the listener is busy or paused, and then a caller's
 * connect fails (EAGAIN on ipc; a dropped SYN, a 1 s retransmit, on tcp);
 * this asks for LISTEN_BACKLOG (the kernel caps it at somaxconn).
 *
 * On an nng that stops calling these functions the hooks simply see
 * nothing; sbxd checks at start-up that they bind here (sbx_nngfix_check).
 * libnng never forks, so a hook's lock is never taken in a child. */
#include "nngfix.h"

#include <dlfcn.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LISTEN_BACKLOG 4096

typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef ssize_t (*readv_fn)(int, const struct iovec *, int);
typedef int (*close_fn)(int);
typedef int (*listen_fn)(int, int);

static accept_fn real_accept;
static readv_fn real_readv;
static close_fn real_close;
static listen_fn real_listen;

static const struct sbx_nngfix_hooks *hooks;

__attribute__((constructor)) static void nng_interpose_init(void)
{
	real_accept = (accept_fn)sbx_nng_next_symbol("accept");
	real_readv = (readv_fn)sbx_nng_next_symbol("readv");
	real_close = (close_fn)sbx_nng_next_symbol("close");
	real_listen = (listen_fn)sbx_nng_next_symbol("listen");
}

void sbx_nngfix_set_hooks(const struct sbx_nngfix_hooks *h)
{
	__atomic_store_n(&hooks, h, __ATOMIC_RELEASE);
}

static const struct sbx_nngfix_hooks *current_hooks(void)
{
	return __atomic_load_n(&hooks, __ATOMIC_ACQUIRE);
}

__attribute__((visibility("default"), noinline)) int accept(int fd, struct sockaddr *addr,
							    socklen_t *alen)
{
	int nfd =
	    real_accept ? real_accept(fd, addr, alen) : (int)syscall(SYS_accept, fd, addr, alen);
	const struct sbx_nngfix_hooks *h;

	if (nfd < 0 || !sbx_nng_is_caller(__builtin_return_address(0)))
		return nfd;
	h = current_hooks();
	if (!h || h->accepted(nfd))
		return nfd;
	/* Not libnng's call: the close below passes straight through. */
	close(nfd);
	errno = ECONNABORTED; /* libnng drops it and accepts the next */
	return -1;
}

__attribute__((visibility("default"), noinline)) ssize_t readv(int fd, const struct iovec *iov,
							       int iovcnt)
{
	ssize_t n = real_readv ? real_readv(fd, iov, iovcnt) : syscall(SYS_readv, fd, iov, iovcnt);
	int saved = errno;
	const struct sbx_nngfix_hooks *h;

	if (n < 0 || !sbx_nng_is_caller(__builtin_return_address(0)))
		return n;
	h = current_hooks();
	if (h && h->read(fd, iov, iovcnt, n)) {
		errno = ECONNRESET;
		return -1;
	}
	errno = saved;
	return n;
}

__attribute__((visibility("default"), noinline)) int close(int fd)
{
	const struct sbx_nngfix_hooks *h;

	if (fd >= 0 && sbx_nng_is_caller(__builtin_return_address(0)) && (h = current_hooks()))
		h->closing(fd);
	return real_close ? real_close(fd) : (int)syscall(SYS_close, fd);
}

__attribute__((visibility("default"), noinline)) int listen(int fd, int backlog)
{
	if (sbx_nng_is_caller(__builtin_return_address(0)) && backlog < LISTEN_BACKLOG)
		backlog = LISTEN_BACKLOG;
	return real_listen ? real_listen(fd, backlog) : (int)syscall(SYS_listen, fd, backlog);
}

int sbx_nngfix_check(struct sbx_err *err)
{
	if (!sbx_nng_loaded())
		return sbx_fail(err, "nng workarounds: libnng.so is not loaded dynamically");
	if (!real_accept || !real_readv || !real_close || !real_listen)
		return sbx_fail(err, "nng workarounds: the real accept, readv, close or listen "
				     "is missing");
	if (dlsym(RTLD_DEFAULT, "accept") != (void *)accept ||
	    dlsym(RTLD_DEFAULT, "readv") != (void *)readv ||
	    dlsym(RTLD_DEFAULT, "close") != (void *)close ||
	    dlsym(RTLD_DEFAULT, "listen") != (void *)listen)
		return sbx_fail(err, "nng workarounds: libnng's accept, readv, close and listen "
				     "do not bind to the program's (not exported?)");
	return 0;
}
