#include "oneshot.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "ctlmsg.h"
#include "result.h"
#include "supervisor.h"
#include "tree.h"
#include "util.h"

#define EXIT_SETUP 125
/* How long past script_seconds the helper waits for pid 1's own report
 * before it stops trusting pid 1 and kills the sandbox itself. */
#define BACKSTOP_MS 5000

struct relay {
	int fd;	   /* read end */
	int to;	   /* our stdout or stderr */
	bool dead; /* `to` stopped accepting: keep draining, stop writing */
	uint64_t bytes;
};

/* The caller's stdin, copied into a pipe: the command never gets the
 * caller's own fd, which could be a host file or directory that
 * /proc/self/fd/0 would reopen for writing, or the caller's terminal. */
struct feed {
	int from; /* our stdin; -1 when done */
	int to;	  /* the pipe's write end (non-blocking); -1 when done */
	size_t len, off;
	char buf[65536];
};

static void feed_close(struct feed *f)
{
	if (f->to >= 0)
		close(f->to);
	f->to = -1;
	f->from = -1;
}

static void feed_step(struct feed *f, short revents)
{
	if (f->off == f->len) {
		ssize_t n = read(f->from, f->buf, sizeof(f->buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			return;
		if (n <= 0) {
			feed_close(f);
			return;
		}
		f->len = (size_t)n;
		f->off = 0;
		return;
	}
	if (!(revents & (POLLOUT | POLLERR | POLLHUP)))
		return;
	ssize_t w = write(f->to, f->buf + f->off, f->len - f->off);
	if (w < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (w <= 0) {
		feed_close(f); /* the command closed its stdin */
		return;
	}
	f->off += (size_t)w;
}

int sbx_policy_supported(const SbxPolicy *p, struct sbx_err *err)
{
	if (p->egress->policy != SBX__V1__EGRESS__POLICY__DENY)
		return sbx_fail(err, "egress: an allowlist needs sbxd's egress proxy; sbx-helper "
				     "alone enforces only \"deny\"");
	if (strcmp(p->image, "host") != 0 && p->image[0] != '/')
		return sbx_fail(err, "image: pinned images need sbxd's image store; sbx-helper "
				     "alone takes \"host\" or a rootfs directory");
	if (p->image[0] == '/') {
		struct stat st;
		if (stat(p->image, &st) < 0 || !S_ISDIR(st.st_mode))
			return sbx_fail(err, "image: %s is not a directory", p->image);
	}
	return 0;
}

static void relay_once(struct relay *r)
{
	char buf[65536];
	ssize_t n = read(r->fd, buf, sizeof(buf));
	if (n <= 0) {
		if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
			close(r->fd);
			r->fd = -1;
		}
		return;
	}
	r->bytes += (uint64_t)n;
	for (ssize_t off = 0; !r->dead && off < n;) {
		ssize_t w = write(r->to, buf + off, (size_t)(n - off));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			r->dead = true;
			break;
		}
		off += w;
	}
}

static void report_skip(const char *rel, const char *why)
{
	fprintf(stderr, "sbx-helper: /out%s: %s\n", rel, why);
}

static int copy_out(int out_fd, const char *dir, uint64_t max_bytes, struct sbx_tree_stats *st,
		    struct sbx_err *err)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return sbx_fail_errno(err, "--out %s", dir);
	_cleanup_close_ int dst = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dst < 0)
		return sbx_fail_errno(err, "--out %s", dir);
	if (sbx_tree_copy(out_fd, dst, max_bytes, st, report_skip, err) < 0)
		return sbx_err_prefix(err, "copying /out to %s", dir);
	return 0;
}

static const char *reason_name(Sbx__V1__ExecEnded__Reason r)
{
	switch (r) {
	case SBX__V1__EXEC_ENDED__REASON__EXITED:
		return "exited";
	case SBX__V1__EXEC_ENDED__REASON__SIGNALED:
	case SBX__V1__EXEC_ENDED__REASON__KILLED:
		return "signaled";
	case SBX__V1__EXEC_ENDED__REASON__TIMEOUT:
	case SBX__V1__EXEC_ENDED__REASON__RUN_EXPIRED:
		return "timeout";
	case SBX__V1__EXEC_ENDED__REASON__OOM:
		return "oom";
	default:
		return "setup_failed";
	}
}

static int exit_status_of(const Sbx__V1__ExecEnded *e)
{
	switch (e->reason) {
	case SBX__V1__EXEC_ENDED__REASON__TIMEOUT:
	case SBX__V1__EXEC_ENDED__REASON__RUN_EXPIRED:
		return 124;
	case SBX__V1__EXEC_ENDED__REASON__SETUP_FAILED:
		return EXIT_SETUP;
	default:
		return e->exit_code;
	}
}

/* Waits for Ready (with the /out fd) or Failure. */
static int await_ready(int ctl, int *out_fd, char *cgroup_mode, size_t cgsize, struct sbx_err *err)
{
	Sbx__V1__HelperMessage *m;
	int fds[SBX_CTL_MAX_FDS];
	size_t nfds;
	int rc = sbx_ctl_recv(ctl, &m, fds, &nfds, 1, err);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return sbx_fail(err, "the sandbox ended before it was ready");
	if (m->msg_case == SBX__V1__HELPER_MESSAGE__MSG_FAILURE) {
		sbx_fail(err, "%s", m->failure->message);
		rc = -1;
	} else if (m->msg_case != SBX__V1__HELPER_MESSAGE__MSG_READY) {
		sbx_fail(err, "unexpected message from the sandbox");
		rc = -1;
	} else {
		snprintf(cgroup_mode, cgsize, "%s", m->ready->cgroup);
		*out_fd = nfds ? sbx_steal_fd(fds[0]) : -1;
		rc = 0;
	}
	sbx_close_fds(fds, nfds);
	sbx__v1__helper_message__free_unpacked(m, NULL);
	return rc;
}

static int send_exec(int ctl, char **argv, int in_r, int out_w, int err_w, struct sbx_err *err)
{
	Sbx__V1__HelperExecRequest req = SBX__V1__HELPER_EXEC_REQUEST__INIT;
	Sbx__V1__HelperMessage m = SBX__V1__HELPER_MESSAGE__INIT;
	size_t n = 0;
	while (argv[n])
		n++;
	req.exec_id = 1;
	req.n_argv = n;
	req.argv = argv;
	m.msg_case = SBX__V1__HELPER_MESSAGE__MSG_EXEC;
	m.exec = &req;
	int fds[3] = {in_r, out_w, err_w};
	return sbx_ctl_send(ctl, &m, fds, 3, err);
}

static void send_destroy(int ctl)
{
	Sbx__V1__HelperDestroyRequest d = SBX__V1__HELPER_DESTROY_REQUEST__INIT;
	Sbx__V1__HelperMessage m = SBX__V1__HELPER_MESSAGE__INIT;
	struct sbx_err ignored;
	m.msg_case = SBX__V1__HELPER_MESSAGE__MSG_DESTROY;
	m.destroy = &d;
	sbx_ctl_send(ctl, &m, NULL, 0, &ignored);
}

static int block_signals(void)
{
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* Relays output until the exec has ended and both pipes are drained.
 * Returns 0 with *ended filled, or -1 when the sandbox had to be killed. */
static int drive_exec(int ctl, int sigfd, struct relay rel[2], struct feed *in, int64_t deadline,
		      Sbx__V1__ExecEnded **ended, int *interrupted, struct sbx_err *err)
{
	Sbx__V1__HelperMessage *done = NULL;
	while (!done || rel[0].fd >= 0 || rel[1].fd >= 0) {
		if (done)
			feed_close(in);
		bool want_input = in->to >= 0 && in->off == in->len;
		struct pollfd pfd[5] = {
		    {.fd = done ? -1 : ctl, .events = POLLIN},
		    {.fd = sigfd, .events = POLLIN},
		    {.fd = rel[0].fd, .events = POLLIN},
		    {.fd = rel[1].fd, .events = POLLIN},
		    {.fd = in->to < 0	? -1
			   : want_input ? in->from
					: in->to,
		     .events = want_input ? POLLIN : POLLOUT},
		};
		int64_t left = deadline - sbx_mono_ms();
		if (!done && left <= 0) {
			sbx_fail(err, "the sandbox did not end the command at its deadline");
			return -1;
		}
		if (poll(pfd, 5, done ? -1 : (int)left) < 0 && errno != EINTR)
			return sbx_fail_errno(err, "poll");
		if (pfd[4].revents)
			feed_step(in, pfd[4].revents);
		if (pfd[1].revents) {
			struct signalfd_siginfo si;
			if (read(sigfd, &si, sizeof(si)) == sizeof(si)) {
				*interrupted = (int)si.ssi_signo;
				return sbx_fail(err, "interrupted by signal %d", *interrupted);
			}
		}
		for (int i = 0; i < 2; i++)
			if (pfd[2 + i].revents)
				relay_once(&rel[i]);
		if (!done && pfd[0].revents) {
			Sbx__V1__HelperMessage *m;
			int fds[SBX_CTL_MAX_FDS];
			size_t nfds;
			int rc = sbx_ctl_recv(ctl, &m, fds, &nfds, 0, err);
			if (rc <= 0) {
				if (rc == 0)
					sbx_fail(err, "the sandbox ended unexpectedly");
				return -1;
			}
			if (m->msg_case == SBX__V1__HELPER_MESSAGE__MSG_ENDED)
				done = m;
			else
				sbx__v1__helper_message__free_unpacked(m, NULL);
		}
	}
	*ended = done->ended;
	done->ended = NULL;
	done->msg_case = SBX__V1__HELPER_MESSAGE__MSG__NOT_SET;
	sbx__v1__helper_message__free_unpacked(done, NULL);
	return 0;
}

int sbx_oneshot_run(const struct sbx_helper_opts *o, SbxPolicy *policy)
{
	struct sbx_err err;
	struct sbx_result res = {.exit_reason = "setup_failed",
				 .exit_code = EXIT_SETUP,
				 .cgroup = "none",
				 .userns = true,
				 .seccomp = true,
				 .rlimit_fallback = false};
	char digest[65] = "";
	char cg_mode[8] = "none";
	int status = EXIT_SETUP;
	int interrupted = 0;
	int64_t started = sbx_mono_ms();
	Sbx__V1__ExecEnded *ended = NULL;
	struct sbx_sandbox sb = {.pid = -1};
	bool have_sandbox = false;
	_cleanup_close_ int out_fd = -1;
	_cleanup_close_ int sigfd = block_signals();
	int ctl[2] = {-1, -1};
	struct relay rel[2] = {{.fd = -1, .to = STDOUT_FILENO}, {.fd = -1, .to = STDERR_FILENO}};
	static struct feed in = {.from = -1, .to = -1};

	if (sigfd < 0) {
		sbx_fail_errno(&err, "signalfd");
		goto out;
	}
	if (sbx_policy_supported(policy, &err) < 0)
		goto out;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0) {
		sbx_fail_errno(&err, "socketpair");
		goto out;
	}
	struct sbx_sandbox_opts so = {
	    .policy = policy,
	    .data_dir = o->data_dir,
	    .data_no_symlinks = o->data_no_symlinks,
	    .cgroup_root = o->cgroup_root,
	    .rlimit_fallback = o->rlimit_fallback,
	    .ctl = ctl[1],
	};
	if (sbx_sandbox_start(&so, &sb, &err) < 0)
		goto out;
	have_sandbox = true;
	close(ctl[1]);
	ctl[1] = -1;
	/* The request goes out before Ready comes back: pid 1 reads it as soon
	 * as the sandbox is built, which saves a round trip per run. */
	int pin[2], pout[2], perr[2];
	if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0) {
		sbx_fail_errno(&err, "pipe");
		goto out;
	}
	fcntl(pin[1], F_SETFL, O_NONBLOCK);
	in.from = STDIN_FILENO;
	in.to = pin[1];
	rel[0].fd = pout[0];
	rel[1].fd = perr[0];
	int rc = send_exec(ctl[0], o->argv, pin[0], pout[1], perr[1], &err);
	close(pin[0]);
	close(pout[1]);
	close(perr[1]);
	if (rc < 0) {
		/* pid 1 may have failed before it read anything: its own
		 * Failure says why better than our broken pipe. */
		struct sbx_err why;
		if (await_ready(ctl[0], &out_fd, cg_mode, sizeof(cg_mode), &why) < 0)
			err = why;
		goto out;
	}
	if (await_ready(ctl[0], &out_fd, cg_mode, sizeof(cg_mode), &err) < 0)
		goto out;
	res.cgroup = cg_mode;
	res.rlimit_fallback = strcmp(cg_mode, "none") == 0;
	int64_t deadline =
	    sbx_mono_ms() + (int64_t)policy->limits->script_seconds * 1000 + BACKSTOP_MS;
	if (drive_exec(ctl[0], sigfd, rel, &in, deadline, &ended, &interrupted, &err) < 0) {
		if (interrupted) {
			status = 128 + interrupted;
			res.exit_reason = "signaled";
			res.signal = interrupted;
		}
		goto out;
	}
	res.exit_reason = reason_name(ended->reason);
	res.exit_code = ended->exit_code;
	res.signal = ended->signal;
	res.cpu_ms = ended->cpu_ms;
	res.peak_memory_bytes = ended->peak_memory_bytes;
	status = exit_status_of(ended);
	if (ended->reason == SBX__V1__EXEC_ENDED__REASON__SETUP_FAILED) {
		sbx_fail(&err, "%s", ended->message);
		goto out;
	}
	if (ended->reason == SBX__V1__EXEC_ENDED__REASON__EXITED && ended->message &&
	    ended->message[0] && (status == 126 || status == 127))
		fprintf(stderr, "sbx-helper: %s: %s\n", o->argv[0], ended->message);
	if (o->out_dir && out_fd >= 0) {
		struct sbx_tree_stats st = {0};
		/* /out holds at most out_mb; a copy that comes to more is made of
		 * sparse or linked files, and stops there. */
		if (copy_out(out_fd, o->out_dir, policy->limits->out_mb << 20, &st, &err) < 0) {
			fprintf(stderr, "sbx-helper: %s\n", err.msg);
			if (status == 0)
				status = 1;
		}
		res.out_files = st.files;
		res.out_bytes = st.bytes;
		res.out_skipped = st.skipped;
	}
	err.msg[0] = '\0';
out:
	if (err.msg[0] && !interrupted)
		fprintf(stderr, "sbx-helper: %s\n", err.msg);
	res.message = (status == EXIT_SETUP && err.msg[0]) ? err.msg : NULL;
	if (ctl[0] >= 0)
		send_destroy(ctl[0]);
	for (int i = 0; i < 2; i++)
		if (rel[i].fd >= 0)
			close(rel[i].fd);
	feed_close(&in);
	if (have_sandbox)
		sbx_sandbox_finish(&sb, !ended);
	if (ctl[0] >= 0)
		close(ctl[0]);
	if (ctl[1] >= 0)
		close(ctl[1]);
	res.wall_ms = (uint64_t)(sbx_mono_ms() - started);
	res.stdout_bytes = rel[0].bytes;
	res.stderr_bytes = rel[1].bytes;
	if (o->result_path) {
		struct sbx_err rerr;
		/* Computed last: only the result needs it, and a helper that never
		 * initialised libcrypto forks its sandbox faster. */
		if (sbx_policy_digest(policy, digest, &rerr) == 0)
			res.policy_digest = digest;
		if (sbx_result_write(o->result_path, &res, &rerr) < 0)
			fprintf(stderr, "sbx-helper: %s\n", rerr.msg);
	}
	if (ended)
		sbx__v1__exec_ended__free_unpacked(ended, NULL);
	return status;
}

int sbx_serve(const struct sbx_helper_opts *o, SbxPolicy *policy)
{
	struct sbx_err err;
	struct sbx_sandbox sb;
	if (sbx_policy_supported(policy, &err) < 0) {
		fprintf(stderr, "sbx-helper: %s\n", err.msg);
		return EXIT_SETUP;
	}
	int sigfd = block_signals();
	if (sigfd < 0) {
		fprintf(stderr, "sbx-helper: signalfd: %s\n", strerror(errno));
		return EXIT_SETUP;
	}
	struct sbx_sandbox_opts so = {
	    .policy = policy,
	    .data_dir = o->data_dir,
	    .data_no_symlinks = o->data_no_symlinks,
	    .cgroup_root = o->cgroup_root,
	    .rlimit_fallback = o->rlimit_fallback,
	    .ctl = o->control_fd,
	};
	if (sbx_sandbox_start(&so, &sb, &err) < 0) {
		fprintf(stderr, "sbx-helper: %s\n", err.msg);
		return EXIT_SETUP;
	}
	/* Only pid 1 holds the control socket now: when the server goes away,
	 * pid 1 sees the end of it and the sandbox ends. */
	close(o->control_fd);
	int pidfd = pidfd_open(sb.pid, 0);
	bool kill_first = false;
	/* Without pidfd (Linux < 5.3) wait for pid 1 directly: SIGTERM then
	 * reaches us only as pid 1's own end, which is acceptable there. */
	for (; pidfd >= 0;) {
		struct pollfd pfd[2] = {{.fd = pidfd, .events = POLLIN},
					{.fd = sigfd, .events = POLLIN}};
		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents)
			break;
		if (pfd[1].revents) {
			kill_first = true;
			break;
		}
	}
	if (pidfd >= 0)
		close(pidfd);
	if (sigfd >= 0)
		close(sigfd);
	sbx_sandbox_finish(&sb, kill_first);
	return 0;
}
