/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the connection guard's accounting (server/rpc/conn_guard.c)
 * without interposing: real unix connections, accepted by the test itself,
 * reported to the guard as common/nngfix's interposers report libnng's.
 * The caps per peer hold and give back on close, a refused SP header, an
 * end of file before the header and an announced length over the pending
 * budget each reset the read before nng would act on it, the budget comes
 * back when the connection closes, and the sweeper shuts down a connection
 * that brought no whole request in time. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "check.h"
#include "clock.h"
#include "conn_guard.h"

static struct sockaddr_un addr = {.sun_family = AF_UNIX};
static int lfd = -1;

/* A connection to the listener, accepted: the server's end (the client's
 * in *client), reported to the guard; *admitted: what the guard said. */
static int connect_one(int *client, bool *admitted)
{
	int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), s;

	if (c < 0 || connect(c, (struct sockaddr *)&addr, sizeof(addr)) < 0)
		return -1;
	s = accept(lfd, NULL, NULL);
	*client = c;
	*admitted = s >= 0 && conn_guard_accepted(s);
	return s;
}

static void hang_up(int s, int c)
{
	conn_guard_closing(s);
	close(s);
	close(c);
}

/* What libnng's readv brought: n bytes of buf. */
static bool reads(int fd, const void *buf, size_t n)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = n};

	return conn_guard_read(fd, &iov, 1, (ssize_t)n);
}

static const uint8_t sp_header[8] = {0, 'S', 'P', 0, 0x10, 0x30, 0, 0};

/* An ipc message's header: its type byte and 64-bit big-endian length. */
static void ipc_head(uint8_t h[9], uint64_t len)
{
	h[0] = 1;
	for (int i = 8; i >= 1; i--, len >>= 8)
		h[i] = (uint8_t)len;
}

int main(void)
{
	struct sbx_config_connections lim = {
	    .per_listener = 8,
	    .per_peer = 2,
	    .new_per_peer_per_second = 1000,
	    .message_seconds = 30,
	    .first_request_seconds = 10,
	    .pending_bytes_per_peer_mb = 1,
	    .pending_bytes_mb = 2,
	    .per_listener_given = true,
	};
	char dir[] = "/tmp/sbx-conn-guard.XXXXXX";
	int s1, s2, s3, c1, c2, c3;
	bool ok1, ok2, ok3;
	uint8_t head[9], byte;
	struct sbx_err err = {0};

	if (!mkdtemp(dir))
		return perror("mkdtemp"), 1;
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/sock", dir);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(lfd, 8) < 0)
		return perror("listen"), 1;
	check(conn_guard_arm(&lim, 1, 0, &err) == 0, "armed: %s", err.msg);
	conn_guard_listener(0, SBX_SCHEME_IPC, addr.sun_path, 0);

	/* per_peer: the third connection of one uid is refused. */
	s1 = connect_one(&c1, &ok1);
	s2 = connect_one(&c2, &ok2);
	s3 = connect_one(&c3, &ok3);
	check(ok1 && ok2, "two connections of one peer admitted");
	check(!ok3, "the third refused (per_peer 2)");
	close(s3);
	close(c3);

	/* A good SP header passes; then an announced length within the
	 * budget is charged, and one over what is left resets the read. */
	check(!reads(s1, sp_header, sizeof(sp_header)), "a good SP header passes");
	ipc_head(head, 600 << 10);
	check(!reads(s1, head, sizeof(head)), "600 KiB announced: within 1 MiB per peer");
	check(!reads(s2, sp_header, sizeof(sp_header)), "a good SP header on the second");
	check(reads(s2, head, sizeof(head)), "600 KiB more from the same peer: reset (over 1 MiB)");
	hang_up(s2, c2);

	/* Closing gives the connection and its charge back. */
	hang_up(s1, c1);
	s1 = connect_one(&c1, &ok1);
	s2 = connect_one(&c2, &ok2);
	check(ok1 && ok2, "closed connections are given back to the peer's cap");
	check(!reads(s1, sp_header, sizeof(sp_header)) && !reads(s1, head, sizeof(head)),
	      "the closed connection's charge was given back");

	/* A header nng would refuse, and an end of file before the header:
	 * both reset (no 100 ms pause of the listener). */
	check(reads(s2, "GET / HTTP/1.1\r\n", 8), "an SP header nng refuses: reset");
	hang_up(s2, c2);
	s2 = connect_one(&c2, &ok2);
	check(ok2 && conn_guard_read(s2, NULL, 0, 0), "end of file before the SP header: reset");
	hang_up(s2, c2);

	/* The sweeper: no whole request first_request_seconds after accept
	 * (and a message arriving for message_seconds) shuts the connection
	 * down, which its peer sees as end of file. */
	s2 = connect_one(&c2, &ok2);
	conn_guard_sweep(sbx_mono_ms() + 31 * 1000);
	check(ok2 && recv(c2, &byte, 1, MSG_DONTWAIT) == 0,
	      "the sweeper shut down a connection with no request");
	check(recv(c1, &byte, 1, MSG_DONTWAIT) == 0, "and the one whose 600 KiB message stalled");
	hang_up(s2, c2);
	hang_up(s1, c1);

	conn_guard_stop();
	close(lfd);
	unlink(addr.sun_path);
	rmdir(dir);
	return check_done();
}
