/* SPDX-License-Identifier: Apache-2.0 */
#include "out_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctlmsg.h"
#include "tree.h"
#include "util.h"

/* One request: flags, then the path with its NUL. */
struct request {
	int32_t flags;
	char path[PATH_MAX];
};

/* One answer: 0, or the errno of the open (the fd comes alongside on 0). */
struct answer {
	int32_t errnum;
};

int sbx_out_reader_init(struct sbx_out_reader *r, int sock, int out_fd, struct sbx_err *err)
{
	r->sock = sock;
	pthread_mutex_init(&r->lock, NULL);
	struct timeval tv = {.tv_sec = SBX_OUT_READER_TIMEOUT_MS / 1000};
	if (setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		return sbx_fail_errno(err, "/out reader socket");
	int32_t hello = 0;
	if (sbx_fd_sendmsg(sock, &hello, sizeof(hello), &out_fd, 1) != (ssize_t)sizeof(hello))
		return sbx_fail_errno(err, "handing /out to its reader");
	return 0;
}

int sbx_out_reader_open(struct sbx_out_reader *r, const char *rel, int flags, struct sbx_err *err)
{
	struct request q = {.flags = flags & SBX_OUT_READER_FLAGS};
	size_t len = strlen(rel);
	if (len >= sizeof(q.path))
		return sbx_fail_errnum(err, ENAMETOOLONG, "/out/%s", rel);
	memcpy(q.path, rel, len + 1);
	size_t qlen = offsetof(struct request, path) + len + 1;

	struct answer a;
	int fds[SBX_CTL_MAX_FDS];
	size_t nfds = 0;
	int mflags = 0;
	ssize_t n;
	pthread_mutex_lock(&r->lock);
	if (sbx_fd_sendmsg(r->sock, &q, qlen, NULL, 0) != (ssize_t)qlen)
		n = -1;
	else
		n = sbx_fd_recvmsg(r->sock, &a, sizeof(a), fds, &nfds, &mflags);
	int saved = errno;
	/* Answers carry no id: after one that did not come in time, the next
	 * request would read this one's answer when it comes, and be handed
	 * another file than it named. The reader ends instead, and every later
	 * open fails. (An answer that came, even with its fd dropped for want
	 * of room, MSG_CTRUNC, leaves the two in step.) */
	if (n < 0)
		shutdown(r->sock, SHUT_RDWR);
	pthread_mutex_unlock(&r->lock);
	if (n < 0)
		return sbx_fail_errnum(err, saved == EAGAIN ? ETIMEDOUT : saved, "/out reader: %s",
				       rel);
	/* The open worked, but the kernel had no free descriptor of ours to
	 * put its file in (MSG_CTRUNC, none came): a shortage of ours, to be
	 * retried, not a reader gone wrong. */
	if (n == (ssize_t)sizeof(a) && a.errnum == 0 && nfds == 0 && (mflags & MSG_CTRUNC) &&
	    !(mflags & MSG_TRUNC))
		return sbx_fail_errnum(err, EMFILE, "/out/%s: no descriptor free to receive it",
				       rel);
	if (n != (ssize_t)sizeof(a) || (mflags & (MSG_TRUNC | MSG_CTRUNC)) ||
	    nfds != (a.errnum ? 0u : 1u)) {
		sbx_close_fds(fds, nfds);
		/* A reader gone (n == 0) is a run whose sandbox side ended
		 * badly: not the file's fault. */
		return sbx_fail_errnum(err, n == 0 ? EPIPE : EPROTO, "/out reader: %s",
				       n == 0 ? "gone" : "malformed answer");
	}
	if (a.errnum)
		return sbx_fail_errnum(err, a.errnum, "%s", rel[0] ? rel : ".");
	return fds[0];
}

void sbx_out_reader_close(struct sbx_out_reader *r)
{
	if (r->sock >= 0)
		close(r->sock);
	r->sock = -1;
	pthread_mutex_destroy(&r->lock);
}

int sbx_out_reader_serve(int sock, int userns_fd, struct sbx_err *err)
{
	if (setns(userns_fd, CLONE_NEWUSER) < 0)
		return sbx_fail_errno(err, "/out reader: joining the run's user namespace");
	close(userns_fd);

	int32_t hello;
	int fds[SBX_CTL_MAX_FDS];
	size_t nfds = 0;
	int mflags = 0;
	ssize_t n = sbx_fd_recvmsg(sock, &hello, sizeof(hello), fds, &nfds, &mflags);
	if (n <= 0 || nfds != 1) {
		sbx_close_fds(fds, nfds);
		return n == 0 ? 0 : sbx_fail(err, "/out reader: no /out came");
	}
	_cleanup_close_ int top = fds[0];
	for (;;) {
		struct request q;
		n = sbx_fd_recvmsg(sock, &q, sizeof(q), fds, &nfds, &mflags);
		sbx_close_fds(fds, nfds); /* requests carry none */
		if (n == 0)
			return 0;
		if (n < 0)
			return sbx_fail_errno(err, "/out reader: receive");
		struct answer a = {0};
		int fd = -1;
		size_t plen = (size_t)n > offsetof(struct request, path)
				  ? (size_t)n - offsetof(struct request, path)
				  : 0;
		if ((mflags & MSG_TRUNC) || !plen || q.path[plen - 1] != '\0' ||
		    strlen(q.path) != plen - 1) {
			a.errnum = EINVAL;
		} else {
			struct sbx_err oerr;
			int flags =
			    (q.flags & SBX_OUT_READER_FLAGS) | O_RDONLY | O_NONBLOCK | O_NOCTTY;
			fd = sbx_open_beneath(top, q.path[0] ? q.path : ".", flags, 0, &oerr);
			if (fd < 0)
				a.errnum = oerr.errnum ? oerr.errnum : EIO;
		}
		ssize_t sent = sbx_fd_sendmsg(sock, &a, sizeof(a), &fd, fd >= 0 ? 1 : 0);
		if (fd >= 0)
			close(fd);
		if (sent != (ssize_t)sizeof(a))
			return sent < 0 && errno == EPIPE
				   ? 0
				   : sbx_fail_errno(err, "/out reader: send");
	}
}
