/* SPDX-License-Identifier: Apache-2.0 */
/* The client end of the helper protocol: what sbxd, `sbx-helper run` and
 * the tests send to a sandbox's pid 1 and what they make of the answers.
 * The only client file that includes the helper protocol's generated code
 * (see helper_client.h). */
#include "helper_client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "ctlmsg.h"
#include "util.h"

/* Large enough for the biggest ExecRequest (SBX_CTL_MAX_BYTES); the kernel
 * caps it at wmem_max, and a send that does not fit fails cleanly. */
#define SBX_CTL_SNDBUF (2 * SBX_CTL_MAX_BYTES)

int sbx_ctl_prepare(int ctl, struct sbx_err *err)
{
	int size = SBX_CTL_SNDBUF;
	int fl = fcntl(ctl, F_GETFL);

	if (fl < 0 || fcntl(ctl, F_SETFL, fl | O_NONBLOCK) < 0)
		return sbx_fail_errno(err, "control socket");
	/* Best effort: without it only very large argv fail (EMSGSIZE). */
	setsockopt(ctl, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
	return 0;
}

static enum sbx_ctl_end map_end(Sbx__V1__ExecEnded__Reason r)
{
	switch (r) {
	case SBX__V1__EXEC_ENDED__REASON__EXITED:
		return SBX_CTL_END_EXITED;
	case SBX__V1__EXEC_ENDED__REASON__SIGNALED:
		return SBX_CTL_END_SIGNALED;
	case SBX__V1__EXEC_ENDED__REASON__KILLED:
		return SBX_CTL_END_KILLED;
	case SBX__V1__EXEC_ENDED__REASON__TIMEOUT:
		return SBX_CTL_END_TIMEOUT;
	case SBX__V1__EXEC_ENDED__REASON__OOM:
		return SBX_CTL_END_OOM;
	case SBX__V1__EXEC_ENDED__REASON__RUN_EXPIRED:
		return SBX_CTL_END_RUN_EXPIRED;
	default:
		/* Unknown to this sbxd: the exec did not end the way it should. */
		return SBX_CTL_END_SETUP_FAILED;
	}
}

int sbx_ctl_recv_event(int ctl, struct sbx_ctl_event *ev, struct sbx_err *err)
{
	Sbx__V1__HelperMessage *m = NULL;
	int fds[SBX_CTL_MAX_FDS];
	size_t nfds = 0;
	int rc;

	memset(ev, 0, sizeof(*ev));
	ev->out_fd = ev->listen_fd = ev->watch_fd = -1;
	rc = sbx_ctl_recv(ctl, &m, fds, &nfds, SBX_CTL_MAX_FDS, err);
	/* pid 1 died with our packets unread. The kernel reports that reset
	 * before the messages pid 1 sent last (its Failure says why it died),
	 * and clears it once reported: read on, so they are not lost. */
	if (rc < 0 && err->errnum == ECONNRESET)
		rc = sbx_ctl_recv(ctl, &m, fds, &nfds, SBX_CTL_MAX_FDS, err);
	if (rc < 0 && (err->errnum == EAGAIN || err->errnum == EWOULDBLOCK))
		return 0;
	if (rc < 0 && err->errnum == ECONNRESET)
		rc = 0; /* reset twice: nothing more will come, the same end */
	if (rc < 0)
		return -1;
	if (rc == 0) {
		ev->kind = SBX_CTL_EOF;
		return 1;
	}
	switch (m->msg_case) {
	case SBX__V1__HELPER_MESSAGE__MSG_READY:
		if (m->ready->protocol_version != SBX_CTL_PROTOCOL_VERSION) {
			sbx_fail(err,
				 "pid 1 speaks helper protocol version %u, this program %u: sbxd "
				 "and sbx-helper must come from the same build",
				 m->ready->protocol_version, SBX_CTL_PROTOCOL_VERSION);
			sbx_close_fds(fds, nfds);
			sbx__v1__helper_message__free_unpacked(m, NULL);
			return -1;
		}
		ev->kind = SBX_CTL_READY;
		snprintf(ev->cgroup, sizeof(ev->cgroup), "%s", m->ready->cgroup);
		if (nfds == 1) {
			ev->out_fd = fds[0];
			nfds = 0;
		}
		break;
	case SBX__V1__HELPER_MESSAGE__MSG_STARTED:
		ev->kind = SBX_CTL_STARTED;
		ev->exec_id = m->started->exec_id;
		/* The table held the count: one fd per flag, in order. */
		if (m->started->egress_listener && m->started->deny_watch && nfds == 2) {
			ev->listen_fd = fds[0];
			ev->watch_fd = fds[1];
			nfds = 0;
		} else if (m->started->egress_listener && !m->started->deny_watch && nfds == 1) {
			ev->listen_fd = fds[0];
			nfds = 0;
		}
		break;
	case SBX__V1__HELPER_MESSAGE__MSG_ENDED:
		ev->kind = SBX_CTL_ENDED;
		ev->exec_id = m->ended->exec_id;
		ev->end = map_end(m->ended->reason);
		ev->exit_code = m->ended->exit_code;
		ev->signal = m->ended->signal;
		ev->cpu_ms = m->ended->cpu_ms;
		ev->peak_memory_bytes = m->ended->peak_memory_bytes;
		snprintf(ev->message, sizeof(ev->message), "%s", m->ended->message);
		break;
	case SBX__V1__HELPER_MESSAGE__MSG_FAILURE:
		ev->kind = SBX_CTL_FAILURE;
		snprintf(ev->message, sizeof(ev->message), "%s", m->failure->message);
		break;
	default:
		ev->kind = SBX_CTL_OTHER;
		break;
	}
	sbx_close_fds(fds, nfds);
	sbx__v1__helper_message__free_unpacked(m, NULL);
	return 1;
}

void sbx_ctl_event_close(struct sbx_ctl_event *ev)
{
	if (ev->out_fd >= 0)
		close(ev->out_fd);
	if (ev->listen_fd >= 0)
		close(ev->listen_fd);
	if (ev->watch_fd >= 0)
		close(ev->watch_fd);
	ev->out_fd = ev->listen_fd = ev->watch_fd = -1;
}

int sbx_ctl_next(int ctl, int timeout_ms, struct sbx_ctl_event *ev, struct sbx_err *err)
{
	int64_t deadline = sbx_mono_ms() + timeout_ms;

	for (;;) {
		struct pollfd pfd = {.fd = ctl, .events = POLLIN};
		int wait = -1;
		int n, rc;

		if (timeout_ms >= 0) {
			int64_t left = deadline - sbx_mono_ms();

			wait = left > 0 ? (int)left : 0;
		}
		n = poll(&pfd, 1, wait);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_fail_errno(err, "poll");
		if (n == 0)
			return 0;
		rc = sbx_ctl_recv_event(ctl, ev, err);
		if (rc != 0)
			return rc;
	}
}

int sbx_ctl_await_ready(int ctl, int timeout_ms, struct sbx_ctl_event *ready, struct sbx_err *err)
{
	struct sbx_ctl_event ev;
	int rc = sbx_ctl_next(ctl, timeout_ms, &ev, err);

	if (rc < 0)
		return -1;
	if (rc == 0)
		return sbx_fail(err, "the sandbox was not ready within %d ms", timeout_ms);
	if (ev.kind != SBX_CTL_READY)
		sbx_ctl_event_close(&ev);
	switch (ev.kind) {
	case SBX_CTL_READY:
		*ready = ev;
		return 0;
	case SBX_CTL_FAILURE:
		return sbx_fail(err, "%s", ev.message);
	case SBX_CTL_EOF:
		return sbx_fail(err, "the sandbox ended before it was ready");
	default:
		/* pid 1 says nothing before Ready: this is not our sandbox. */
		return sbx_fail(err, "unexpected message from the sandbox");
	}
}

int sbx_ctl_exit_status(const struct sbx_ctl_event *ended)
{
	switch (ended->end) {
	case SBX_CTL_END_TIMEOUT:
	case SBX_CTL_END_RUN_EXPIRED:
		return 124;
	case SBX_CTL_END_SETUP_FAILED:
		return 125;
	default:
		return ended->exit_code;
	}
}

/* An ExecRequest in its envelope; both point into the caller's storage. */
static void exec_message(Sbx__V1__HelperMessage *m, Sbx__V1__HelperExecRequest *req,
			 uint64_t exec_id, char *const *argv, size_t argc, const char *cwd,
			 const struct sbx_ctl_exec_opts *o)
{
	sbx__v1__helper_exec_request__init(req);
	sbx__v1__helper_message__init(m);
	req->exec_id = exec_id;
	req->argv = (char **)argv;
	req->n_argv = argc;
	req->cwd = (char *)(cwd ? cwd : "");
	if (o) {
		req->env = (char **)o->env;
		req->n_env = o->n_env;
		req->timeout_seconds = o->timeout_seconds;
	}
	m->msg_case = SBX__V1__HELPER_MESSAGE__MSG_EXEC;
	m->exec = req;
}

bool sbx_ctl_exec_fits(char *const *argv, size_t argc, const char *cwd,
		       const struct sbx_ctl_exec_opts *o)
{
	Sbx__V1__HelperExecRequest req;
	Sbx__V1__HelperMessage m;

	exec_message(&m, &req, UINT64_MAX, argv, argc, cwd, o);
	return sbx__v1__helper_message__get_packed_size(&m) <= SBX_CTL_MAX_BYTES;
}

int sbx_ctl_send_exec(int ctl, uint64_t exec_id, char *const *argv, size_t argc, const char *cwd,
		      const struct sbx_ctl_exec_opts *o, const int stdio[3], struct sbx_err *err)
{
	Sbx__V1__HelperExecRequest req;
	Sbx__V1__HelperMessage m;

	exec_message(&m, &req, exec_id, argv, argc, cwd, o);
	return sbx_ctl_send(ctl, &m, stdio, 3, err);
}

int sbx_ctl_send_signal(int ctl, uint64_t exec_id, int sig, struct sbx_err *err)
{
	Sbx__V1__HelperSignalRequest req = SBX__V1__HELPER_SIGNAL_REQUEST__INIT;
	Sbx__V1__HelperMessage m = SBX__V1__HELPER_MESSAGE__INIT;

	req.exec_id = exec_id;
	req.signal = sig;
	m.msg_case = SBX__V1__HELPER_MESSAGE__MSG_SIGNAL;
	m.signal = &req;
	return sbx_ctl_send(ctl, &m, NULL, 0, err);
}

int sbx_ctl_send_destroy(int ctl, struct sbx_err *err)
{
	Sbx__V1__HelperDestroyRequest req = SBX__V1__HELPER_DESTROY_REQUEST__INIT;
	Sbx__V1__HelperMessage m = SBX__V1__HELPER_MESSAGE__INIT;

	m.msg_case = SBX__V1__HELPER_MESSAGE__MSG_DESTROY;
	m.destroy = &req;
	return sbx_ctl_send(ctl, &m, NULL, 0, err);
}

int sbx_ctl_send_claim(int ctl, struct sbx_err *err)
{
	Sbx__V1__HelperClaimRequest req = SBX__V1__HELPER_CLAIM_REQUEST__INIT;
	Sbx__V1__HelperMessage m = SBX__V1__HELPER_MESSAGE__INIT;

	m.msg_case = SBX__V1__HELPER_MESSAGE__MSG_CLAIM;
	m.claim = &req;
	return sbx_ctl_send(ctl, &m, NULL, 0, err);
}

/* The helper reports a setup failure as "sbx-helper: <why>" on stderr before
 * it exits; the last non-empty line is the one that says why. */
static void last_line(const char *text, char *out, size_t size)
{
	size_t end = strlen(text);
	size_t start;

	while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r'))
		end--;
	start = end;
	while (start > 0 && text[start - 1] != '\n')
		start--;
	snprintf(out, size, "%.*s", (int)(end - start), text + start);
}

int sbx_ctl_wait_ready(int ctl, int errfd, int timeout_ms, struct sbx_ctl_event *ready,
		       char *errtext, size_t errsize, struct sbx_err *err)
{
	int64_t deadline = sbx_mono_ms() + timeout_ms;
	size_t errlen = 0;
	bool eof = false;

	errtext[0] = '\0';
	for (;;) {
		int64_t left = deadline - sbx_mono_ms();
		struct pollfd pfd[2] = {{.fd = eof ? -1 : ctl, .events = POLLIN},
					{.fd = errfd, .events = POLLIN}};

		if (left <= 0)
			return sbx_fail(err,
					"sbx-helper did not report the sandbox ready within %d s",
					timeout_ms / 1000);
		if (eof && errfd < 0)
			break;
		if (poll(pfd, 2, (int)left) < 0 && errno != EINTR)
			return sbx_fail_errno(err, "poll");
		if (pfd[1].revents) {
			char buf[1024];
			ssize_t n = read(errfd, buf, sizeof(buf));

			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (n <= 0) {
				errfd = -1; /* the helper exited (or closed stderr) */
			} else if (errlen + 1 < errsize) {
				size_t k = (size_t)n < errsize - 1 - errlen ? (size_t)n
									    : errsize - 1 - errlen;
				memcpy(errtext + errlen, buf, k);
				errlen += k;
				errtext[errlen] = '\0';
			}
		}
		if (eof || !pfd[0].revents)
			continue;
		struct sbx_ctl_event ev;
		int rc = sbx_ctl_recv_event(ctl, &ev, err);

		if (rc < 0)
			return sbx_err_prefix(err, "sbx-helper");
		if (rc == 0)
			continue;
		if (ev.kind == SBX_CTL_READY) {
			*ready = ev;
			return 0;
		}
		sbx_ctl_event_close(&ev); /* nothing but Ready comes first from pid 1 */
		if (ev.kind == SBX_CTL_FAILURE)
			return sbx_fail(err, "sbx-helper: %s", ev.message);
		if (ev.kind == SBX_CTL_EOF)
			eof = true; /* read stderr to its end for the reason */
	}
	char why[512];

	last_line(errtext, why, sizeof(why));
	if (!why[0])
		return sbx_fail(err, "sbx-helper exited before the sandbox was ready");
	return sbx_fail(err, "%s", why);
}
