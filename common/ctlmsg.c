/* SPDX-License-Identifier: Apache-2.0 */
#include "ctlmsg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

void sbx_close_fds(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

ssize_t sbx_fd_sendmsg(int sock, const void *buf, size_t len, const int *fds, size_t nfds)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	union {
		char buf[CMSG_SPACE(sizeof(int) * SBX_CTL_MAX_FDS)];
		struct cmsghdr align;
	} control;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds > SBX_CTL_MAX_FDS) {
		errno = EINVAL;
		return -1;
	}
	if (nfds) {
		memset(&control, 0, sizeof(control));
		mh.msg_control = control.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	ssize_t n;
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n;
}

ssize_t sbx_fd_recvmsg(int sock, void *buf, size_t len, int fds[SBX_CTL_MAX_FDS], size_t *nfds,
		       int *flags)
{
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	union {
		char buf[CMSG_SPACE(sizeof(int) * SBX_CTL_MAX_FDS)];
		struct cmsghdr align;
	} control;
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = control.buf,
			    .msg_controllen = sizeof(control.buf)};
	ssize_t n;
	*nfds = 0;
	*flags = 0;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k && *nfds < SBX_CTL_MAX_FDS; i++)
			memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	*flags = mh.msg_flags;
	return n;
}

/* The fds each message carries, by msg_case; a case not listed (none set,
 * or one this build does not know) carries none. helper.proto's comments
 * say what each fd is. */
static const struct {
	uint8_t min, max;
} fd_table[] = {
    [SBX__V1__HELPER_MESSAGE__MSG_EXEC] = {3, 3},    /* stdin, stdout, stderr */
    [SBX__V1__HELPER_MESSAGE__MSG_READY] = {0, 1},   /* /out, when the run has one */
    [SBX__V1__HELPER_MESSAGE__MSG_STARTED] = {0, 2}, /* the egress listener: below */
};

void sbx_ctl_fds_expected(const Sbx__V1__HelperMessage *msg, size_t *min, size_t *max)
{
	size_t c = (size_t)msg->msg_case;

	*min = *max = 0;
	if (c < SBX_ARRAY_SIZE(fd_table)) {
		*min = fd_table[c].min;
		*max = fd_table[c].max;
	}
	/* ExecStarted says which of its fds are there, in this order: the
	 * listener (or deny resolver), the deny connect watch. */
	if (msg->msg_case == SBX__V1__HELPER_MESSAGE__MSG_STARTED && msg->started)
		*min = *max = (size_t)msg->started->egress_listener + msg->started->deny_watch;
}

static int check_fds(const Sbx__V1__HelperMessage *msg, size_t nfds, struct sbx_err *err)
{
	size_t min, max;

	sbx_ctl_fds_expected(msg, &min, &max);
	if (nfds >= min && nfds <= max)
		return 0;
	return sbx_fail(err, "control message %d with %zu fds (it carries %zu to %zu)",
			(int)msg->msg_case, nfds, min, max);
}

int sbx_ctl_send(int sock, const Sbx__V1__HelperMessage *msg, const int *fds, size_t nfds,
		 struct sbx_err *err)
{
	size_t len = sbx__v1__helper_message__get_packed_size(msg);
	if (len > SBX_CTL_MAX_BYTES)
		return sbx_fail(err, "control message of %zu bytes exceeds %d", len,
				SBX_CTL_MAX_BYTES);
	if (nfds > SBX_CTL_MAX_FDS)
		return sbx_fail(err, "control message with %zu fds exceeds %d", nfds,
				SBX_CTL_MAX_FDS);
	if (check_fds(msg, nfds, err) < 0)
		return -1;
	_cleanup_free_ uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return sbx_fail_errno(err, "control message");
	sbx__v1__helper_message__pack(msg, buf);

	/* An empty packet would read as end of stream on the other side. */
	uint8_t empty = 0;
	if (sbx_fd_sendmsg(sock, len ? buf : &empty, len ? len : 1, fds, nfds) < 0)
		return sbx_fail_errno(err, "control socket send");
	return 0;
}

int sbx_ctl_recv(int sock, Sbx__V1__HelperMessage **msg, int *fds, size_t *nfds, size_t maxfds,
		 struct sbx_err *err)
{
	*msg = NULL;
	*nfds = 0;
	_cleanup_free_ uint8_t *buf = malloc(SBX_CTL_MAX_BYTES + 1);
	if (!buf)
		return sbx_fail_errno(err, "control message");
	int got[SBX_CTL_MAX_FDS];
	size_t ngot;
	int flags;
	ssize_t n = sbx_fd_recvmsg(sock, buf, SBX_CTL_MAX_BYTES + 1, got, &ngot, &flags);
	if (n < 0)
		return sbx_fail_errno(err, "control socket receive");

	/* 0 bytes is the end of the stream, or an empty packet, which the
	 * protocol never sends: fds that came with one are closed either way. */
	if (n == 0) {
		sbx_close_fds(got, ngot);
		return ngot ? sbx_fail(err, "empty control message with fds") : 0;
	}
	if ((flags & (MSG_TRUNC | MSG_CTRUNC)) || ngot > maxfds) {
		sbx_close_fds(got, ngot);
		return sbx_fail(err, "control message truncated or with too many fds");
	}
	*msg = sbx__v1__helper_message__unpack(NULL, (size_t)n, buf);
	if (!*msg) {
		sbx_close_fds(got, ngot);
		return sbx_fail(err, "control message of %zd bytes does not parse", n);
	}
	if (check_fds(*msg, ngot, err) < 0) {
		sbx_close_fds(got, ngot);
		sbx__v1__helper_message__free_unpacked(*msg, NULL);
		*msg = NULL;
		return -1;
	}
	memcpy(fds, got, ngot * sizeof(int));
	*nfds = ngot;
	return 1;
}
