/* SPDX-License-Identifier: Apache-2.0 */
/* The helper protocol's receive (common/ctlmsg.h): the input goes out as one
 * SOCK_SEQPACKET packet, as sbx-helper or sbxd would send it, and
 * sbx_ctl_recv takes it in.
 *
 * Input: byte 0 says how many fds ride along (low 3 bits, 0..7, more than
 * SBX_CTL_MAX_FDS allows) and how many the receiver accepts (next 3 bits);
 * the rest is the packet. Properties: at most maxfds fds come back, each
 * open; a packet that is refused leaves no fd behind; nothing leaks. */
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctlmsg.h"
#include "fuzz.h"
#include "util.h"

#define SEND_FDS_MAX 7

static int sock[2] = {-1, -1};

/* The lowest free descriptor: a leaked one would take its place. */
static int lowest_free_fd(void)
{
	int fd = dup(0);

	FUZZ_ASSERT(fd >= 0, "dup");
	close(fd);
	return fd;
}

static bool send_packet(const uint8_t *data, size_t len, size_t nfds)
{
	struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
	union {
		char buf[CMSG_SPACE(sizeof(int) * SEND_FDS_MAX)];
		struct cmsghdr align;
	} control;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	int fds[SEND_FDS_MAX];
	ssize_t n;

	for (size_t i = 0; i < nfds; i++) {
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		FUZZ_ASSERT(fds[i] >= 0, "open /dev/null");
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
	n = sendmsg(sock[0], &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	/* In flight, the packet holds its own references. */
	sbx_close_fds(fds, nfds);
	return n >= 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (sock[0] < 0)
		FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sock) == 0,
			    "socketpair");
	if (size == 0)
		return 0;
	size_t nfds = data[0] & 7, maxfds = (data[0] >> 3) & 7;
	if (maxfds > SBX_CTL_MAX_FDS)
		maxfds = SBX_CTL_MAX_FDS;
	int before = lowest_free_fd();

	/* An empty packet is end of stream, which is the receiver's business
	 * too; one too large for the socket buffer never arrives. */
	if (!send_packet(data + 1, size - 1, nfds))
		return 0;

	Sbx__V1__HelperMessage *msg = NULL;
	int fds[SBX_CTL_MAX_FDS];
	size_t got = 99;
	struct sbx_err err = {0};
	int rc = sbx_ctl_recv(sock[1], &msg, fds, &got, maxfds, &err);

	FUZZ_ASSERT(rc >= -1 && rc <= 1, "rc %d", rc);
	if (rc == 1) {
		FUZZ_ASSERT(msg, "1 without a message");
		FUZZ_ASSERT(got <= maxfds && got == nfds, "%zu fds back, %zu sent, %zu allowed",
			    got, nfds, maxfds);
		for (size_t i = 0; i < got; i++)
			FUZZ_ASSERT(fcntl(fds[i], F_GETFD) == FD_CLOEXEC, "fd %d not close-on-exec",
				    fds[i]);
		sbx_close_fds(fds, got);
		sbx__v1__helper_message__free_unpacked(msg, NULL);
	} else {
		FUZZ_ASSERT(!msg && got == 0, "%d with a message or fds", rc);
		FUZZ_ASSERT(rc == 0 || err.msg[0], "failed without a message");
		FUZZ_ASSERT(rc == -1 || size == 1, "end of stream from a %zu-byte packet",
			    size - 1);
	}
	FUZZ_ASSERT(lowest_free_fd() == before, "an fd leaked (%d is taken)", before);
	return 0;
}
