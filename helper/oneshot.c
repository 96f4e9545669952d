/* SPDX-License-Identifier: Apache-2.0 */
#include "oneshot.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "fds.h"
#include "helper_client.h"
#include "out_reader.h"
#include "phases.h"
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

int sbx_policy_supported(const SbxPolicy *p, bool oneshot, const char *image_root,
			 struct sbx_err *err)
{
	/* Served, the exec's listener goes to sbxd, whose proxy enforces the
	 * allowlist; run alone there is nobody to accept on it. */
	if (oneshot && p->egress->policy != SBX__V1__EGRESS__POLICY__DENY)
		return sbx_fail(err, "egress: an allowlist needs sbxd's egress proxy, which "
				     "`sbx-helper run` does not have; run it through sbxd (`sbxctl "
				     "run` starts a private sbxd); sbx-helper alone enforces only "
				     "\"deny\"");
	bool pinned = strcmp(p->image, "host") != 0 && p->image[0] != '/';
	/* The pin is sbxd's to resolve and verify; the tree it resolved to
	 * comes as --image-root, and only with a pin: one never stands in for
	 * the other. */
	if (pinned && !image_root)
		return sbx_fail(err, "image: pinned images need sbxd's image store; sbx-helper "
				     "alone takes \"host\" or a rootfs directory");
	if (!pinned && image_root)
		return sbx_fail(err,
				"--image-root: the policy's image (%.200s) is not a pinned "
				"store image",
				p->image);
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

/* What the copying child reports back. */
struct copy_report {
	int rc;
	struct sbx_tree_stats st;
	struct sbx_err err;
};

/* The sandbox's files belong to the run's own uid (host_ids.h), with the
 * modes it chose: the copy is made by a child that joined the run's user
 * namespace, where we hold every capability (we made it), so that no mode
 * keeps a file from its caller. What it writes to `dir` is still ours, and
 * the walk is the same no-links walk as ever. */
static int copy_out_joined(int userns_fd, int out_fd, const char *dir, uint64_t max_bytes,
			   struct sbx_tree_stats *st, struct sbx_err *err)
{
	_cleanup_close_pair_ int p[2] = SBX_PAIR_INIT;
	if (pipe2(p, O_CLOEXEC) < 0)
		return sbx_fail_errno(err, "pipe");
	pid_t child = sbx_fork_single();
	if (child < 0)
		return sbx_fail_errno(err, "fork");
	if (child == 0) {
		struct copy_report r = {0};
		if (setns(userns_fd, CLONE_NEWUSER) < 0)
			r.rc = sbx_fail_errno(&r.err, "joining the sandbox's user namespace");
		else
			r.rc = copy_out(out_fd, dir, max_bytes, &r.st, &r.err);
		sbx_report_exit(p[1], &r, sizeof(r));
	}
	close(sbx_steal_fd(p[1]));
	struct copy_report r;
	if (!sbx_report_collect(p[0], child, &r, sizeof(r), NULL))
		return sbx_fail(err, "copying /out to %s: the copying process died", dir);
	*st = r.st;
	if (r.rc < 0) {
		*err = r.err;
		return -1;
	}
	return 0;
}

static const char *reason_name(enum sbx_ctl_end end)
{
	switch (end) {
	case SBX_CTL_END_EXITED:
		return "exited";
	case SBX_CTL_END_SIGNALED:
	case SBX_CTL_END_KILLED:
		return "signaled";
	case SBX_CTL_END_TIMEOUT:
	case SBX_CTL_END_RUN_EXPIRED:
		return "timeout";
	case SBX_CTL_END_OOM:
		return "oom";
	default:
		return "setup_failed";
	}
}

static int block_signals(void)
{
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	/* Neither call can fail with these arguments. */
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* Relays output until the exec has ended and both pipes are drained.
 * Returns 0 with *ended filled, or -1 when the sandbox had to be killed. */
static int drive_exec(int ctl, int sigfd, struct relay rel[2], struct feed *in, int64_t deadline,
		      struct sbx_ctl_event *ended, int *interrupted, struct sbx_err *err)
{
	bool done = false;
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
			if (sbx_ctl_recv_event(ctl, ended, err) < 0)
				return -1;
			sbx_ctl_event_close(ended); /* an ExecStarted's listener: no proxy here */
			if (ended->kind == SBX_CTL_EOF)
				return sbx_fail(err, "the sandbox ended unexpectedly");
			done = ended->kind == SBX_CTL_ENDED;
		}
	}
	return 0;
}

/* The caller's stdin goes through a pipe (struct feed), its stdout and
 * stderr are relayed from pipes (struct relay): pid 1 gets the pipes' far
 * ends, and so never one of the caller's own fds. */
static int make_stdio(int pin[2], int pout[2], int perr[2], struct sbx_err *err)
{
	if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0)
		return sbx_fail_errno(err, "pipe");
	/* A command that does not read its stdin must not block the relay. */
	if (fcntl(pin[1], F_SETFL, O_NONBLOCK) < 0)
		return sbx_fail_errno(err, "pipe");
	return 0;
}

/* What both modes ask of the sandbox: the command line's options, and the
 * control socket pid 1 speaks on. */
static struct sbx_sandbox_opts sandbox_opts(const struct sbx_helper_opts *o, SbxPolicy *policy,
					    int ctl)
{
	return (struct sbx_sandbox_opts){
	    .policy = policy,
	    .data_dir = o->data_dir,
	    .data_no_symlinks = o->data_no_symlinks,
	    .image_root = o->image_root,
	    .cgroup_root = o->cgroup_root,
	    .rlimit_fallback = o->rlimit_fallback,
	    .nofile = o->nofile,
	    .ctl = ctl,
	    .host_ids = o->host_ids,
	    .host_id_dir = o->host_id_dir,
	    .slot = o->slot_given ? &o->slot : NULL,
	};
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
	/* The policy's digest, for --result (derr: why not). */
	bool digest_tried = false;
	int digest_rc = -1;
	struct sbx_err derr;
	int status = EXIT_SETUP;
	int interrupted = 0;
	int64_t started = sbx_mono_ms();
	struct sbx_ctl_event ready = {.out_fd = -1}, ended = {0};
	bool exec_ended = false;
	struct sbx_sandbox sb = {.pid = -1};
	bool have_sandbox = false;
	_cleanup_close_ int sigfd = block_signals();
	_cleanup_close_pair_ int ctl[2] = SBX_PAIR_INIT;
	_cleanup_close_pair_ int pin[2] = SBX_PAIR_INIT;
	_cleanup_close_pair_ int pout[2] = SBX_PAIR_INIT;
	_cleanup_close_pair_ int perr[2] = SBX_PAIR_INIT;
	struct relay rel[2] = {{.fd = -1, .to = STDOUT_FILENO}, {.fd = -1, .to = STDERR_FILENO}};
	static struct feed in = {.from = -1, .to = -1};

	if (sigfd < 0) {
		sbx_fail_errno(&err, "signalfd");
		goto out;
	}
	if (sbx_policy_supported(policy, true, NULL, &err) < 0)
		goto out;
	if (o->timings_path && sbx_phases_enable(&err) < 0)
		goto out;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0) {
		sbx_fail_errno(&err, "socketpair");
		goto out;
	}
	struct sbx_sandbox_opts so = sandbox_opts(o, policy, ctl[1]);
	if (sbx_sandbox_start(&so, &sb, &err) < 0)
		goto out;
	have_sandbox = true;
	close(sbx_steal_fd(ctl[1]));
	/* The request goes out before Ready comes back: pid 1 reads it as soon
	 * as the sandbox is built, which saves a round trip per run. */
	if (make_stdio(pin, pout, perr, &err) < 0)
		goto out;
	in.from = STDIN_FILENO;
	in.to = sbx_steal_fd(pin[1]);
	rel[0].fd = sbx_steal_fd(pout[0]);
	rel[1].fd = sbx_steal_fd(perr[0]);
	size_t argc = 0;
	while (o->argv[argc])
		argc++;
	int rc = sbx_ctl_send_exec(ctl[0], 1, o->argv, argc, NULL, NULL,
				   (const int[3]){pin[0], pout[1], perr[1]}, &err);
	/* pid 1 holds them now; ours would keep the pipes from ending. */
	close(sbx_steal_fd(pin[0]));
	close(sbx_steal_fd(pout[1]));
	close(sbx_steal_fd(perr[1]));
	if (rc < 0) {
		/* pid 1 may have failed before it read anything: its own
		 * Failure says why better than our broken pipe. */
		struct sbx_err why;
		if (sbx_ctl_await_ready(ctl[0], -1, &ready, &why) < 0)
			err = why;
		goto out;
	}
	/* While pid 1 builds the root: the digest loads libcrypto (2 ms,
	 * sha256_dl.c), off the critical path here, and before anything of
	 * the sandbox's reaches the host (the copy into --out): a library
	 * search made after that could find a file the sandbox wrote there
	 * (review: libcrypto's own dependencies, libz on Fedora, are searched
	 * for at its dlopen). */
	if (o->result_path) {
		digest_rc = sbx_policy_digest(policy, digest, &derr);
		digest_tried = true;
		sbx_phase_mark(SBX_PHASE_DIGEST);
	}
	if (sbx_ctl_await_ready(ctl[0], -1, &ready, &err) < 0)
		goto out;
	res.cgroup = ready.cgroup;
	res.rlimit_fallback = strcmp(ready.cgroup, "none") == 0;
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
	exec_ended = true;
	sbx_phase_mark(SBX_PHASE_ENDED);
	res.exit_reason = reason_name(ended.end);
	res.exit_code = ended.exit_code;
	res.signal = ended.signal;
	res.cpu_ms = ended.cpu_ms;
	res.peak_memory_bytes = ended.peak_memory_bytes;
	status = sbx_ctl_exit_status(&ended);
	if (ended.end == SBX_CTL_END_SETUP_FAILED) {
		sbx_fail(&err, "%s", ended.message);
		goto out;
	}
	if (ended.end == SBX_CTL_END_EXITED && ended.message[0] && (status == 126 || status == 127))
		fprintf(stderr, "sbx-helper: %s: %s\n", o->argv[0], ended.message);
	/* What an oom, or an exec init killed under the command, adds. */
	if ((ended.end == SBX_CTL_END_OOM || ended.end == SBX_CTL_END_SIGNALED) &&
	    ended.message[0]) {
		res.message = ended.message;
		fprintf(stderr, "sbx-helper: %s\n", ended.message);
	}
	if (o->out_dir && ready.out_fd >= 0) {
		struct sbx_tree_stats st = {0};
		/* /out holds at most out_mb; a copy that comes to more is made of
		 * sparse or linked files, and stops there. */
		if (copy_out_joined(sb.userns_fd, ready.out_fd, o->out_dir,
				    policy->limits->out_mb << 20, &st, &err) < 0) {
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
	if (status == EXIT_SETUP && err.msg[0])
		res.message = err.msg;
	/* Best effort: pid 1 also ends when our end of the socket closes. */
	if (ctl[0] >= 0)
		sbx_ctl_send_destroy(ctl[0], &(struct sbx_err){0});
	for (int i = 0; i < 2; i++)
		if (rel[i].fd >= 0)
			close(rel[i].fd);
	feed_close(&in);
	if (ready.out_fd >= 0)
		close(ready.out_fd);
	if (have_sandbox)
		sbx_sandbox_finish(&sb, !exec_ended);
	sbx_phase_mark(SBX_PHASE_DONE);
	res.wall_ms = (uint64_t)(sbx_mono_ms() - started);
	if (o->timings_path) {
		struct sbx_err terr;
		if (sbx_phases_write(o->timings_path, &terr) < 0)
			fprintf(stderr, "sbx-helper: %s\n", terr.msg);
	}
	res.stdout_bytes = rel[0].bytes;
	res.stderr_bytes = rel[1].bytes;
	if (o->result_path) {
		struct sbx_err rerr;
		/* Not tried yet: the run failed before its command, so nothing
		 * of the sandbox's reached the host (--out is copied only after
		 * the command): safe to load libcrypto now. */
		if (!digest_tried)
			digest_rc = sbx_policy_digest(policy, digest, &derr);
		if (digest_rc == 0) {
			res.policy_digest = digest;
		} else {
			/* Said, not just left out of the result. */
			fprintf(stderr, "sbx-helper: %s\n", derr.msg);
			if (!res.message)
				res.message = derr.msg;
		}
		if (sbx_result_write(o->result_path, &res, &rerr) < 0)
			fprintf(stderr, "sbx-helper: %s\n", rerr.msg);
	}
	return status;
}

/* sbxd's /out reader (out_reader.h): a child of ours that outlives us, as
 * artifacts outlive the sandbox, until sbxd closes its end. Forked before
 * it joins the run's user namespace, since we must not: we still remove
 * the run's cgroups as ourselves when pid 1 is gone. */
static int start_reader(int reader_fd, int userns_fd, struct sbx_err *err)
{
	pid_t child = sbx_fork_single();
	if (child < 0)
		return sbx_fail_errno(err, "fork the /out reader");
	if (child == 0) {
		struct sbx_err rerr;
		int keep[2] = {reader_fd, userns_fd};
		/* Its own process group: sbxd's signals to the helper's group
		 * are for the sandbox, not for a reader of what it left. */
		setpgid(0, 0);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (sbx_close_fds_except(keep, 2, &rerr) < 0 ||
		    sbx_out_reader_serve(reader_fd, userns_fd, &rerr) < 0) {
			fprintf(stderr, "sbx-helper: %s\n", rerr.msg);
			_exit(1);
		}
		_exit(0);
	}
	close(reader_fd);
	return 0;
}

int sbx_serve(const struct sbx_helper_opts *o, SbxPolicy *policy)
{
	struct sbx_err err;
	struct sbx_sandbox sb;
	if (sbx_policy_supported(policy, false, o->image_root.path, &err) < 0) {
		fprintf(stderr, "sbx-helper: %s\n", err.msg);
		return EXIT_SETUP;
	}
	_cleanup_close_ int sigfd = block_signals();
	if (sigfd < 0) {
		sbx_fail_errno(&err, "signalfd");
		fprintf(stderr, "sbx-helper: %s\n", err.msg);
		return EXIT_SETUP;
	}
	struct sbx_sandbox_opts so = sandbox_opts(o, policy, o->control_fd);
	/* Execs come one by one over the run's life: the next one's init is
	 * made ahead, once the last was claimed (init.c). A one-shot has one
	 * exec. */
	so.prepare_execs = !o->no_prepare;
	so.prepare_first = o->prepare_first;
	so.served = true;
	if (sbx_sandbox_start(&so, &sb, &err) < 0) {
		fprintf(stderr, "sbx-helper: %s\n", err.msg);
		return EXIT_SETUP;
	}
	/* Only pid 1 holds the control socket now: when the server goes away,
	 * pid 1 sees the end of it and the sandbox ends. */
	close(o->control_fd);
	if (o->reader_fd >= 0 && start_reader(o->reader_fd, sb.userns_fd, &err) < 0) {
		fprintf(stderr, "sbx-helper: %s\n", err.msg);
		sbx_sandbox_finish(&sb, true);
		return EXIT_SETUP;
	}
	_cleanup_close_ int pidfd = pidfd_open(sb.pid, 0);
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
	sbx_sandbox_finish(&sb, kill_first);
	return 0;
}
