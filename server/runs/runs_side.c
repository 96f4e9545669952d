/* SPDX-License-Identifier: Apache-2.0 */
/* The same-host side channel's connection (runs_side.h).
 *
 * Why sbxd connects to the caller rather than the caller redeeming a
 * ticket on a socket of sbxd: the whole exchange then lives inside one
 * authenticated, rate-limited call of the run's owner on the long lane
 * (its share of workers), so there is no ticket to steal, replay or let
 * expire, no listener of sbxd for another local user to hold open, and
 * nothing outlives the call. The name is abstract: no path walk for sbxd
 * through anyone's links or mounts, and connect never blocks (a full
 * backlog is EAGAIN). The listener's uid (SO_PEERCRED of a connected
 * socket is its listener's) must be the ipc caller's: another local user
 * who binds the name first gets nothing.
 *
 * Why bytes and not descriptors: sbxd neither sends nor receives one.
 * A descriptor sbxd sent would be charged, while in flight, to sbxd's uid
 * (a caller that never receives it parks it, and past RLIMIT_NOFILE no
 * process of sbxd's uid could pass one). A descriptor sbxd received from a
 * caller could be a file of the caller's own FUSE mount, whose close()
 * waits, uninterruptibly, for the caller's FUSE_FLUSH answer, or a TCP
 * socket whose last close waits out the SO_LINGER the caller chose; and a
 * pipe shared with a caller can have its lock held by the caller's own
 * read or write faulting on a FUSE-backed buffer, so that sbxd's splice
 * into it waits as long. Sending on a unix socket takes no lock the
 * receiver can hold: with MSG_DONTWAIT it either queues or says EAGAIN,
 * and sbxd polls with deadlines, so a caller that stops reading holds its
 * own worker until its deadline and no longer. What a caller leaves unread
 * stays bounded by sbxd's send buffer for its socket.
 *
 * Why one way: the caller can send sbxd nothing, so it can attach nothing.
 * sbxd shuts its socket down for reading BEFORE it connects (after the
 * connect the caller's accepted socket could already send): a unix socket
 * whose peer has shut down for reading fails every send, SCM_RIGHTS
 * included, with EPIPE in the sender's own sendmsg, which drops what it
 * attached in the sender's thread; nothing is ever queued on sbxd's
 * socket, so nothing of the caller's is closed in sbxd's thread when sbxd
 * closes it. That does not depend on SO_PASSRIGHTS: tests/vm/side_oneway.py
 * checks it with these calls on Debian 12's 6.1 (the VM stage) and on the
 * build host. The caller's answer is therefore no message but its close
 * (export_wire.h). Where the kernel has SO_PASSRIGHTS (Linux 6.16) the
 * socket also refuses descriptors outright, a second lock that nothing
 * depends on. */
#include "runs_side.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "export_wire.h"
#include "util.h"

/* Linux 6.16: a socket with SO_PASSRIGHTS 0 refuses SCM_RIGHTS, the
 * sender's sendmsg fails EPERM (asm-generic's number; not in older libc). */
#if !defined(SO_PASSRIGHTS) &&                                                                     \
    (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || defined(__arm__) ||       \
     defined(__riscv) || defined(__loongarch__) || defined(__s390__))
#define SO_PASSRIGHTS 83
#endif

/* The send buffer asked for: a whole message of the export's (256 KiB)
 * and the next, so that the caller's reads and sbxd's overlap. */
#define SIDE_SNDBUF (1 << 20)

/* 0, or -1 where the kernel (or this build's architecture) has no
 * SO_PASSRIGHTS. */
static int refuse_rights(int sock)
{
#ifdef SO_PASSRIGHTS
	int no = 0;

	return setsockopt(sock, SOL_SOCKET, SO_PASSRIGHTS, &no, sizeof(no));
#else
	(void)sock;
	errno = ENOPROTOOPT;
	return -1;
#endif
}

int side_check_address(const char *socket_name, size_t nonce_len, struct sbx_rpc_status *st)
{
	size_t name_len = strlen(socket_name);

	if (name_len == 0 || name_len > SBX_EXPORT_NAME_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "socket_name: %zu bytes, 1 to %d allowed", name_len,
				    SBX_EXPORT_NAME_MAX);
	if (nonce_len < SBX_EXPORT_NONCE_MIN || nonce_len > SBX_EXPORT_NONCE_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "nonce: %zu bytes, %d to %d allowed", nonce_len,
				    SBX_EXPORT_NONCE_MIN, SBX_EXPORT_NONCE_MAX);
	return 0;
}

int side_wait(int sock, short events, int64_t deadline_ms, const struct side_deadlines *dl,
	      const char *what, struct sbx_rpc_status *st)
{
	for (;;) {
		int64_t left = deadline_ms - sbx_mono_ms();
		struct pollfd p = {.fd = sock, .events = events};
		int n;

		if (left <= 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__DEADLINE_EXCEEDED,
					    "same-host: the caller's socket did not %s in time "
					    "(%u ms per record, %u ms per call)",
					    what, dl->record_ms, dl->call_ms);
		n = poll(&p, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "same-host: poll");
		if (n > 0)
			return 0;
	}
}

int side_send(int sock, const void *buf, size_t len, int64_t deadline_ms,
	      const struct side_deadlines *dl, const char *what, struct sbx_rpc_status *st)
{
	for (;;) {
		ssize_t n = send(sock, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n == (ssize_t)len)
			return 0;
		if (n >= 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
					    "same-host: %s: a message sent in part", what);
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__ABORTED,
						  "same-host: sending %s to the caller", what);
		if (side_wait(sock, POLLOUT, deadline_ms, dl, "take what sbxd sent", st) < 0)
			return -1;
	}
}

int side_connect(const struct sbx_identity *who, const char *name, const uint8_t *nonce,
		 size_t nonce_len, const struct side_deadlines *dl, struct sbx_rpc_status *st)
{
	int sndbuf = SIDE_SNDBUF;
	_cleanup_close_ int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (s < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
					  "same-host: socket");
	/* One way, before the caller can hold the other end (the header). */
	if (shutdown(s, SHUT_RD) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL,
					  "same-host: shutting sbxd's socket for reading");
	/* The second lock, where the kernel has it (6.16): nothing relies
	 * on it, so a kernel without it is no failure. */
	(void)refuse_rights(s);
	/* Best effort: the kernel caps it at wmem_max, and a smaller buffer
	 * only means more waits. */
	(void)setsockopt(s, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	if (side_connect_on(s, who, name, nonce, nonce_len, dl, st) < 0)
		return -1;
	return sbx_steal_fd(s);
}

/* ---- Receiving (ImportInputs): the same connection, sbxd reading ---- */

int side_receiving_socket(struct sbx_rpc_status *st)
{
	_cleanup_close_ int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (s < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
					  "same-host: socket");
	/* Without it, what a caller attaches to its bytes would be closed
	 * in sbxd's thread when sbxd reads them: no receiving then. */
	if (refuse_rights(s) < 0)
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__UNIMPLEMENTED,
		    "same-host upload is off: this kernel cannot make sbxd's socket "
		    "refuse a caller's descriptors (SO_PASSRIGHTS, Linux 6.16); "
		    "upload with PutInput instead");
	return sbx_steal_fd(s);
}

int side_connect_on(int s, const struct sbx_identity *who, const char *name, const uint8_t *nonce,
		    size_t nonce_len, const struct side_deadlines *dl, struct sbx_rpc_status *st)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	size_t len = strlen(name);
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	uint8_t hello[SBX_SIDE_HELLO_MAX];

	memcpy(a.sun_path + 1, name, len); /* sun_path[0] == 0: abstract */
	if (connect(s, (struct sockaddr *)&a,
		    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__FAILED_PRECONDITION,
					  SBX_SIDE_UNREACHED
					  " (abstract, SOCK_SEQPACKET, listening)");
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "same-host: SO_PEERCRED");
	if (cred.uid != who->local_uid)
		return sbx_rpc_fail(st, SBX__V1__CODE__PERMISSION_DENIED,
				    "same-host: socket_name is listened on by uid %u, not by the "
				    "calling uid %u: nothing exchanged",
				    (unsigned)cred.uid, (unsigned)who->local_uid);
	return side_send(s, hello, sbx_side_hello_pack(nonce, nonce_len, hello), dl->call_end, dl,
			 "the hello", st);
}
