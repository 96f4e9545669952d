/* SPDX-License-Identifier: Apache-2.0 */
/* The caller's side of the same-host side channel (side.h). */
#include "side.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_internal.h"
#include "clock.h"
#include "text.h"
#include "util.h"

/* 1: the call ended (wake), 0: fd is ready, -1: past the deadline. */
static int wait_ready(struct side_listener *sl, int fd)
{
	for (;;) {
		int64_t left = sl->deadline_ms - sbx_mono_ms();
		struct pollfd p[2] = {{.fd = fd, .events = POLLIN},
				      {.fd = sl->wake[0], .events = POLLIN}};
		int k;

		if (left <= 0)
			return -1;
		k = poll(p, 2, (int)left);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		if (p[1].revents)
			return 1;
		if (k > 0)
			return 0;
	}
}

int side_listen(struct side_listener *sl, const sbx_client *c, const char *what,
		int64_t deadline_ms, char name[SBX_EXPORT_NAME_MAX + 1], struct sbx_rpc_status *st)
{
	const char *ep = sbx_client_endpoint(c);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	char hex[33];
	uint8_t id[16];
	struct stat sb;
	size_t len;

	sl->what = what;
	sl->deadline_ms = deadline_ms;
	if (strncmp(ep, "ipc://", 6) != 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "%s: works only with an ipc:// endpoint on sbxd's host "
				    "(this one is %.200s)",
				    what, ep);
	/* The peer whose messages count: the owner of sbxd's socket. */
	if (stat(ep + 6, &sb) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__UNAVAILABLE, "%s: %.200s", what,
					  ep + 6);
	sl->sbxd_uid = sb.st_uid;
	if (getrandom(sl->nonce, sizeof(sl->nonce), 0) != (ssize_t)sizeof(sl->nonce) ||
	    getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id))
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s: getrandom", what);
	sbx_hex(id, sizeof(id), hex);
	len = (size_t)snprintf(name, SBX_EXPORT_NAME_MAX + 1, "sbx-%s-%s", what, hex);
	memcpy(a.sun_path + 1, name, len);
	sl->listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (sl->listener < 0 ||
	    bind(sl->listener, (struct sockaddr *)&a,
		 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)) < 0 ||
	    listen(sl->listener, 4) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s: listening socket",
					  what);
	if (pipe2(sl->wake, O_CLOEXEC) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s: pipe", what);
	return 0;
}

ssize_t side_recv(struct side_listener *sl, int s, void *buf, size_t len, struct sbx_rpc_status *st)
{
	for (;;) {
		int w = wait_ready(sl, s);
		ssize_t k;

		if (w != 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
					    "%s: sbxd's next message did not arrive", sl->what);
		k = recv(s, buf, len, MSG_DONTWAIT | MSG_TRUNC);
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (k < 0)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__ABORTED, "%s: receiving",
						  sl->what);
		if ((size_t)k > len)
			return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
					    "%s: a message of sbxd's longer than %zu bytes",
					    sl->what, len);
		return k;
	}
}

int side_accept(struct side_listener *sl, struct sbx_rpc_status *st)
{
	uint8_t hello[SBX_SIDE_HELLO_MAX + 1];
	ssize_t k;

	for (;;) {
		int w = wait_ready(sl, sl->listener);
		struct ucred cred;
		socklen_t cl = sizeof(cred);

		if (w != 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
					    "%s: sbxd did not connect to our socket", sl->what);
		_cleanup_close_ int s = accept4(sl->listener, NULL, NULL, SOCK_CLOEXEC);
		if (s < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)
				continue;
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s: accept",
						  sl->what);
		}
		/* Anyone local may connect to an abstract name; only sbxd's
		 * uid is heard, and only with this call's nonce. */
		if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 ||
		    cred.uid != sl->sbxd_uid)
			continue;
		k = side_recv(sl, s, hello, sizeof(hello), st);
		if (k < 0)
			return -1;
		if (!sbx_side_hello_check(hello, (size_t)k, sl->nonce, sizeof(sl->nonce)))
			continue;
		/* One connection per call: no one else is heard from now on. */
		sbx_closep(&sl->listener);
		sl->listener = -1;
		return sbx_steal_fd(s);
	}
}

void side_wake(struct side_listener *sl)
{
	if (write(sl->wake[1], "x", 1) != 1)
		abort(); /* a pipe with nothing in it takes one byte */
}

void side_listener_clear(struct side_listener *sl)
{
	sbx_closep(&sl->listener);
	sbx_closep(&sl->wake[0]);
	sbx_closep(&sl->wake[1]);
}

int side_send_msg(struct side_listener *sl, int s, const void *buf, size_t len,
		  struct sbx_rpc_status *st)
{
	for (;;) {
		ssize_t k = send(s, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		int64_t left = sl->deadline_ms - sbx_mono_ms();
		struct pollfd p[2] = {{.fd = s, .events = POLLOUT},
				      {.fd = sl->wake[0], .events = POLLIN}};

		if (k == (ssize_t)len)
			return 0;
		if (k >= 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
					    "%s: a message sent in part", sl->what);
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__ABORTED, "%s: sending",
						  sl->what);
		if (left <= 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
					    "%s: sbxd did not take the bytes in time", sl->what);
		if (poll(p, 2, (int)left) < 0 && errno != EINTR)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s: poll",
						  sl->what);
		if (p[1].revents)
			return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
					    "%s: the call ended before sbxd took every byte",
					    sl->what);
	}
}

int side_unreached_only_if(struct sbx_rpc_status *st, bool unreached)
{
	if (!unreached && !strncmp(st->err.msg, SBX_SIDE_UNREACHED, strlen(SBX_SIDE_UNREACHED)))
		sbx_rpc_prefix(st, "same-host");
	return -1;
}
