/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the helper protocol's checks (common/ctlmsg.c,
 * common/helper_client.c) over a real SOCK_SEQPACKET pair: a Ready of this
 * protocol version is taken with its /out fd, one of another version (0:
 * a helper older than the field) is refused with a reason naming both; a
 * message with another fd count than the table gives is refused by the
 * sender, and by the receiver (its fds closed, none leaked). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "ctlmsg.h"
#include "helper_client.h"

static int lowest_free_fd(void)
{
	int fd = dup(0);

	close(fd);
	return fd;
}

static int send_ready(int sock, uint32_t version, int out_fd)
{
	Sbx__V1__Ready ready = SBX__V1__READY__INIT;
	Sbx__V1__HelperMessage m = SBX__V1__HELPER_MESSAGE__INIT;
	struct sbx_err err;

	ready.cgroup = "none";
	ready.protocol_version = version;
	m.msg_case = SBX__V1__HELPER_MESSAGE__MSG_READY;
	m.ready = &ready;
	return sbx_ctl_send(sock, &m, &out_fd, 1, &err);
}

int main(void)
{
	Sbx__V1__ExecStarted started = SBX__V1__EXEC_STARTED__INIT;
	Sbx__V1__HelperExecRequest exec = SBX__V1__HELPER_EXEC_REQUEST__INIT;
	Sbx__V1__HelperMessage m = SBX__V1__HELPER_MESSAGE__INIT;
	Sbx__V1__HelperMessage *got = NULL;
	struct sbx_ctl_event ev;
	struct sbx_err err = {0};
	int sv[2], fds[SBX_CTL_MAX_FDS], two[2] = {0, 0};
	size_t nfds, len;
	uint8_t buf[256];
	int before;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return 1;
	before = lowest_free_fd();

	check(send_ready(sv[0], SBX_CTL_PROTOCOL_VERSION, 0) == 0, "a Ready of this version sent");
	check(sbx_ctl_recv_event(sv[1], &ev, &err) == 1 && ev.kind == SBX_CTL_READY &&
		  ev.out_fd >= 0,
	      "taken, with its /out fd");
	sbx_ctl_event_close(&ev);

	check(send_ready(sv[0], 0, 0) == 0, "a Ready of version 0 sent");
	check(sbx_ctl_recv_event(sv[1], &ev, &err) == -1 && strstr(err.msg, "protocol version 0") &&
		  strstr(err.msg, "same build"),
	      "refused: %s", err.msg);
	check(lowest_free_fd() == before, "its fd closed");

	/* ExecStarted without an egress listener carries no fd. */
	started.exec_id = 7;
	m.msg_case = SBX__V1__HELPER_MESSAGE__MSG_STARTED;
	m.started = &started;
	check(sbx_ctl_send(sv[0], &m, two, 1, &err) == -1, "the sender refuses a stray fd: %s",
	      err.msg);
	started.egress_listener = true;
	check(sbx_ctl_send(sv[0], &m, two, 1, &err) == 0, "the listener's fd goes");
	check(sbx_ctl_recv(sv[1], &got, fds, &nfds, SBX_CTL_MAX_FDS, &err) == 1 && nfds == 1,
	      "and arrives");
	sbx_close_fds(fds, nfds);
	sbx__v1__helper_message__free_unpacked(got, NULL);

	/* With egress deny a second fd, the connect watch, follows the
	 * resolver: ExecStarted says so, and carries exactly two. */
	started.deny_watch = true;
	check(sbx_ctl_send(sv[0], &m, two, 1, &err) == -1, "the watch's fd missing: refused: %s",
	      err.msg);
	check(sbx_ctl_send(sv[0], &m, two, 2, &err) == 0, "resolver and watch go");
	check(sbx_ctl_recv_event(sv[1], &ev, &err) == 1 && ev.kind == SBX_CTL_STARTED &&
		  ev.listen_fd >= 0 && ev.watch_fd >= 0 && ev.listen_fd != ev.watch_fd,
	      "and arrive as the event's listen_fd and watch_fd");
	sbx_ctl_event_close(&ev);
	check(lowest_free_fd() == before, "both closed with the event");
	started.deny_watch = false;

	/* An ExecRequest carries exactly three fds: two, sent past the
	 * sender's check, are refused by the receiver and closed. */
	m.msg_case = SBX__V1__HELPER_MESSAGE__MSG_EXEC;
	m.exec = &exec;
	len = sbx__v1__helper_message__pack(&m, buf);
	check(sbx_fd_sendmsg(sv[0], buf, len, two, 2) == (ssize_t)len, "an ExecRequest with 2 fds");
	check(sbx_ctl_recv(sv[1], &got, fds, &nfds, SBX_CTL_MAX_FDS, &err) == -1 && !got &&
		  nfds == 0,
	      "refused by the receiver: %s", err.msg);
	check(lowest_free_fd() == before, "its fds closed");
	close(sv[0]);
	close(sv[1]);
	return check_done();
}
