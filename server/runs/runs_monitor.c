/* SPDX-License-Identifier: Apache-2.0 */
/* One thread per run that alone reads everything the sandbox sends: the
 * helper's control socket (ExecStarted/ExecEnded, the end of the sandbox),
 * its stderr (alerts), the execs' stdout/stderr (into spill files), and
 * that enforces the deadlines itself, so a hung helper cannot keep a run
 * or an exec alive: at run deadline + 2 s, or at an exec's deadline + 2 s
 * that pid 1 did not act on, it kills the helper's process group (see
 * kill_hung_sandbox) and ends the records itself.
 *
 * It never blocks: every fd it reads is non-blocking and its poll wakes at
 * the next deadline or within a second. Handlers wake it through an
 * eventfd when the exec list changes or the run is being torn down. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "egress.h"
#include "helper_client.h"
#include "run_exec.h"
#include "runs_closer.h"
#include "runs_deny.h"
#include "runs_lease.h"
#include "runs_manager.h"
#include "runs_monitor.h"
#include "runs_output.h"
#include "runs_proc.h"
#include "util.h"

#define FIXED_FDS   4 /* wake, ctl, helper stderr, pidfd */
#define TICK_MAX_MS 1000
#define CTL_BATCH   64

#define CLOSING_MAX 16 /* done execs whose deny fds go per round, after the lock */

#define SLOT_DENY  2 /* an exec's deny resolver (runs_deny.h), beside its two streams */
#define SLOT_WATCH 3 /* and its connect watch */

struct slot {
	struct run_exec *e;
	int which;
	bool ended; /* a stream whose pipe ended this round: stream_finish */
};

struct monitor {
	struct sbx_run *r;
	struct pollfd *pfd;
	struct slot *slot;
	size_t cap;
	char line[RUN_ALERT_BYTES]; /* a stderr line not yet ended */
	size_t line_len;
	bool egress_closed; /* the sandbox is over: so is the run's egress */
	int64_t deny_next;  /* monotonic: when a spent deny budget refills */
	/* Done execs' deny resolvers and connect watches, closed once the
	 * run's lock is let go (deny_release says why): the resolvers here,
	 * the watches by the closer (runs_closer.h). more_closing: a done
	 * exec still holds its own, the next round comes at once. */
	int closing[CLOSING_MAX][2];
	size_t n_closing;
	bool more_closing;
};

static Sbx__V1__ExitReason public_reason(enum sbx_ctl_end end)
{
	switch (end) {
	case SBX_CTL_END_EXITED:
		return SBX__V1__EXIT_REASON__EXITED;
	case SBX_CTL_END_SIGNALED:
	case SBX_CTL_END_KILLED: /* stopped by a Signal call: signaled, with its signal */
		return SBX__V1__EXIT_REASON__SIGNALED;
	case SBX_CTL_END_TIMEOUT:
		return SBX__V1__EXIT_REASON__TIMEOUT;
	case SBX_CTL_END_OOM:
		return SBX__V1__EXIT_REASON__OOM;
	case SBX_CTL_END_RUN_EXPIRED:
		return SBX__V1__EXIT_REASON__RUN_EXPIRED;
	default:
		return SBX__V1__EXIT_REASON__SETUP_FAILED;
	}
}

/* mu held: the sandbox is gone (r->ctl closed); a run that was still live
 * expired or failed. One still STARTING is booked once CreateRun published
 * it: check_deadlines calls this every round. */
static void book_sandbox_end(struct sbx_run *r) REQUIRES(r->mu)
{
	bool expired;

	if (r->ctl >= 0 || !run_sandbox_live(r))
		return;
	expired = sbx_mono_ms() >= r->earliest_expiry;
	run_state_move(r, expired ? RUN_EXPIRED : RUN_FAILED);
	if (expired) {
		run_end_execs(r, SBX__V1__EXIT_REASON__RUN_EXPIRED, "run_seconds ran out");
		run_queue_audit(r, "run_expired", NULL);
	} else {
		run_alert(r, "sbxd: the sandbox ended unexpectedly (its pid 1 closed the control "
			     "socket)");
		run_end_execs(r, SBX__V1__EXIT_REASON__TORN_DOWN, "the sandbox ended unexpectedly");
		run_queue_audit(r, "run_failed", NULL);
	}
	run_changed(r);
}

/* mu held. */
static void sandbox_ended(struct sbx_run *r) REQUIRES(r->mu)
{
	if (r->ctl >= 0)
		close(r->ctl);
	r->ctl = -1;
	if (!r->ended_ms)
		r->ended_ms = sbx_unix_ms();
	book_sandbox_end(r);
}

/* mu held. */
static void apply(struct sbx_run *r, const struct sbx_ctl_event *ev) REQUIRES(r->mu)
{
	struct run_exec *e;

	switch (ev->kind) {
	case SBX_CTL_ENDED:
		e = run_exec_by_num(r, ev->exec_id);
		if (!e || e->ended)
			return; /* already ended by sbxd's watchdog */
		e->reason = public_reason(ev->end);
		e->exit_code = ev->exit_code;
		e->signal = ev->signal;
		e->cpu_ms = ev->cpu_ms;
		e->peak_memory_bytes = ev->peak_memory_bytes;
		if (ev->message[0])
			e->message = strdup(ev->message);
		exec_mark_ended(r, e);
		return;
	case SBX_CTL_FAILURE:
		run_alert(r, "sbx-helper: %s", ev->message);
		return;
	case SBX_CTL_EOF:
		sandbox_ended(r);
		return;
	case SBX_CTL_READY:
		if (ev->out_fd >= 0)
			close(ev->out_fd);
		return;
	default:
		return;
	}
}

/* What an exec's start and end mean to the egress proxy, outside the
 * run's lock (egress.h). A listener goes to the proxy only for an exec of
 * a run with an allowlist that sbxd started and that has none yet; any
 * other is closed: a helper must not be able to make sbxd hold
 * descriptors. */
static void egress_event(struct sbx_run *r, struct sbx_ctl_event *ev)
{
	struct run_exec *e;
	struct sbx_err err;
	bool take = false;
	int fd;
	/* Egress deny's connect watch, beside its resolver; -1 else. */
	_cleanup_close_ int watch = sbx_steal_fd(ev->watch_fd);

	if (ev->kind == SBX_CTL_ENDED && r->egress) {
		sbx_egress_run_unlisten(r->egress, ev->exec_id);
		return;
	}
	if (ev->kind != SBX_CTL_STARTED || ev->listen_fd < 0)
		return;
	fd = sbx_steal_fd(ev->listen_fd);
	run_lock(r);
	e = run_exec_by_num(r, ev->exec_id);
	if (e && !e->ended && !e->egress_listener && r->egress)
		take = e->egress_listener = true;
	/* Egress deny: the exec's deny resolver and connect watch, for the
	 * monitor (this thread). */
	else if (e && !e->ended && !e->egress_listener && !r->egress &&
		 r->policy->egress->policy == SBX__V1__EGRESS__POLICY__DENY &&
		 deny_take(r, e, fd, watch))
		e->egress_listener = true, fd = -1, watch = -1;
	run_unlock(r);
	if (!take) {
		if (fd >= 0)
			close(fd);
		return;
	}
	/* The proxy owns fd from here, also when it refuses it (the run's
	 * egress was closed: the sandbox is over). */
	if (sbx_egress_run_listen(r->egress, ev->exec_id, fd, &err) < 0) {
		run_lock(r);
		run_alert(r, "sbxd: egress: exec-%llu: %s", (unsigned long long)ev->exec_id,
			  err.msg);
		run_unlock(r);
	}
}

/* Before an exec's end is recorded (apply): what its deny resolver and
 * connect watch hold, which the round's pumps may not have come to (the
 * end and the last attempt read in one round). The monitor owns both
 * descriptors, and an exec stays on its run's list while this runs. */
static void drain_deny(struct sbx_run *r, uint64_t exec_id)
{
	struct run_exec *e;

	run_lock(r);
	e = run_exec_by_num(r, exec_id);
	run_unlock(r);
	if (e)
		deny_drain(r, e);
}

static void read_ctl(struct monitor *m)
{
	struct sbx_run *r = m->r;

	for (int i = 0; i < CTL_BATCH && r->ctl >= 0; i++) {
		struct sbx_ctl_event ev;
		struct sbx_err err;
		int rc = sbx_ctl_recv_event(r->ctl, &ev, &err);

		if (rc == 0)
			return;
		if (rc > 0)
			egress_event(r, &ev);
		if (rc > 0 && ev.kind == SBX_CTL_ENDED)
			drain_deny(r, ev.exec_id);
		run_lock(r);
		if (rc < 0) {
			/* A garbled message from pid 1: it can no longer be trusted
			 * to report, so the sandbox is over. */
			run_alert(r, "sbxd: control socket: %s", err.msg);
			proc_kill_group(r->reaped ? -1 : r->pid);
			r->killed = true;
			ev.kind = SBX_CTL_EOF;
		}
		apply(r, &ev);
		run_unlock(r);
		if (ev.kind == SBX_CTL_EOF)
			return;
	}
}

/* mu held: r is m->r (named for the analysis). */
static void flush_line(struct sbx_run *r, struct monitor *m) REQUIRES(r->mu)
{
	if (m->line_len)
		run_alert(r, "%.*s", (int)m->line_len, m->line);
	m->line_len = 0;
}

static void read_stderr(struct monitor *m)
{
	struct sbx_run *r = m->r;
	char buf[4096];
	ssize_t n = read(r->err_pipe, buf, sizeof(buf));

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	run_lock(r);
	if (n <= 0) {
		flush_line(r, m);
		close(r->err_pipe);
		r->err_pipe = -1;
	}
	for (ssize_t i = 0; i < n; i++) {
		/* A NUL too: run_alert takes the line as a C string. */
		if (buf[i] == '\n' || buf[i] == '\0') {
			flush_line(r, m);
			continue;
		}
		if (m->line_len == sizeof(m->line) - 1)
			flush_line(r, m);
		m->line[m->line_len++] = buf[i];
	}
	run_unlock(r);
}

void monitor_reaped(struct sbx_run *r, bool exited)
{
	bool by_itself, cgroups;

	run_lock(r);
	r->reaped = true;
	by_itself = exited && !r->killed;
	r->sandbox_gone |= by_itself;
	cgroups = r->cgroups;
	run_unlock(r);
	if (by_itself)
		return;
	/* A killed helper could not remove the run's cgroups: now that its pid
	 * is reaped they count as stale, and are swept (every process left in
	 * them SIGKILLed, and waited for until each cgroup can be removed). */
	if (runs_cleanup_cgroups(r->runs) && cgroups) {
		run_lock(r);
		r->sandbox_gone = true;
		run_unlock(r);
	}
}

static void reap(struct sbx_run *r)
{
	int status = 0;
	pid_t p = waitpid(r->pid, &status, WNOHANG);

	if (p == 0 || (p < 0 && errno != ECHILD))
		return;
	run_lock(r);
	r->reaped = true;
	if (p == r->pid && !r->killed && WIFEXITED(status) && WEXITSTATUS(status) != 0)
		run_alert(r, "sbx-helper exited with status %d", WEXITSTATUS(status));
	else if (p == r->pid && !r->killed && WIFSIGNALED(status))
		run_alert(r, "sbx-helper was killed by signal %d", WTERMSIG(status));
	run_unlock(r);
	/* ECHILD: reaped elsewhere, its status unknown. */
	monitor_reaped(r, p == r->pid && WIFEXITED(status));
}

/* mu held: pid 1 let an exec outlive script_seconds by RUN_GRACE_MS, so it
 * is hung (SIGSTOP, a wedged kernel call) or lying, and whatever it should
 * have killed is still running: only the kernel can end that now. SIGKILL
 * reaches the helper and pid 1 even when stopped; once pid 1 dies the
 * kernel kills every process of its pid namespace (an exec's setsid()
 * leaves the process group, never the namespace) and no fork can enter it
 * any more, which is the atomic kill that v1 cgroups lack. The run's
 * cgroups are then swept and removed by `sbx-helper cleanup` as soon as
 * the helper is reaped (reap). The run is over: a pid 1 that misses one
 * deadline cannot be trusted with the next. */
static void kill_hung_sandbox(struct sbx_run *r, const struct run_exec *e) REQUIRES(r->mu)
{
	char why[160];

	if (r->ctl < 0 || r->killed || r->reaped)
		return;
	proc_kill_group(r->pid);
	r->killed = true;
	snprintf(why, sizeof(why),
		 "sbx-helper did not end exec-%llu at script_seconds; sbxd killed the sandbox",
		 (unsigned long long)e->num);
	run_alert(r, "sbxd: %s", why);
	if (run_sandbox_live(r)) {
		run_state_move(r, RUN_FAILED);
		run_end_execs(r, SBX__V1__EXIT_REASON__TORN_DOWN, why);
		run_queue_audit(r, "run_failed", json_pack("{s:b, s:s}", "killed", 1, "why", why));
	}
}

/* mu held: nobody called on the run for idle_seconds (its owner may be
 * gone: invariant 10), so it ends as an expired run does: EXPIRED, its
 * execs ended with reason IDLE, its artifacts kept for
 * expired_keep_seconds. pid 1 is asked to end the sandbox (it kills every
 * process and exits, as at teardown); one that does not is killed by
 * check_deadlines after RUN_HELPER_EXIT_MS. */
static void end_idle(struct sbx_run *r, int64_t now) REQUIRES(r->mu)
{
	uint32_t idle = r->policy->limits->idle_seconds;
	struct sbx_err err;
	char why[160];

	if (!run_sandbox_live(r) || r->ctl < 0 || r->killed || r->destroy_sent ||
	    !lease_ran_out(now, atomic_load(&r->last_call), r->pollers, idle))
		return;
	snprintf(why, sizeof(why),
		 "idle_seconds (%u s) ran out: no call on the run, so sbxd ended it", idle);
	r->idle_ended = true;
	r->destroy_sent = now;
	run_state_move(r, RUN_EXPIRED);
	run_end_execs(r, SBX__V1__EXIT_REASON__IDLE, why);
	run_alert(r, "sbxd: %s", why);
	run_queue_audit(r, "run_idle", json_pack("{s:i}", "idle_seconds", (int)idle));
	if (sbx_ctl_send_destroy(r->ctl, &err) < 0) {
		/* A pid 1 that cannot be asked is ended the hard way. */
		proc_kill_group(r->pid);
		r->killed = true;
		run_alert(r, "sbxd: DestroyRequest: %s; killed the sandbox", err.msg);
	}
	run_changed(r);
}

/* mu held: the watchdog. */
static void check_deadlines(struct sbx_run *r) REQUIRES(r->mu)
{
	int64_t now = sbx_mono_ms();
	struct run_exec *overran = NULL;

	book_sandbox_end(r);
	end_idle(r, now);
	if (r->destroy_sent && r->ctl >= 0 && !r->killed && !r->reaped &&
	    now >= r->destroy_sent + RUN_HELPER_EXIT_MS) {
		proc_kill_group(r->pid);
		r->killed = true;
		run_alert(r, "sbxd: sbx-helper did not end the idle sandbox within %d s; killed",
			  RUN_HELPER_EXIT_MS / 1000);
	}
	if (r->ctl >= 0 && !r->killed && !r->reaped && now >= r->deadline + RUN_GRACE_MS) {
		proc_kill_group(r->pid);
		r->killed = true;
		run_alert(r, "sbxd: the sandbox outlived run_seconds by %d s; sbxd killed it",
			  RUN_GRACE_MS / 1000);
		if (run_sandbox_live(r)) {
			run_state_move(r, RUN_EXPIRED);
			run_end_execs(r, SBX__V1__EXIT_REASON__RUN_EXPIRED,
				      "run_seconds ran out; sbxd killed the sandbox");
			run_queue_audit(r, "run_expired", json_pack("{s:b}", "killed", 1));
		}
	}
	for (struct run_exec *e = r->execs; e; e = e->next) {
		if (!e->ended && now >= e->deadline) {
			e->reason = SBX__V1__EXIT_REASON__TIMEOUT;
			e->exit_code = 124;
			e->signal = SIGKILL;
			e->message = strdup("script_seconds ran out and sbx-helper did not end the "
					    "exec; sbxd killed the sandbox");
			run_alert(r, "sbxd: exec-%llu outlived script_seconds by %d s",
				  (unsigned long long)e->num, RUN_GRACE_MS / 1000);
			r->out_unsettled = true; /* its processes live until the sandbox is gone */
			exec_mark_ended(r, e);
			if (!overran)
				overran = e;
		}
		if (e->ended && !e->done && now >= e->ended_at + RUN_OUTPUT_GRACE_MS) {
			/* Only a process that got the pipe passed to it can hold
			 * it open after its exec ended: stop listening. */
			for (int w = 0; w < 2; w++)
				if (!e->out[w].closed)
					stream_close(r, e, w);
		}
	}
	if (overran)
		kill_hung_sandbox(r, overran);
}

/* mu held: milliseconds until check_deadlines has something to do. */
static int next_tick(struct sbx_run *r) REQUIRES(r->mu)
{
	int64_t now = sbx_mono_ms(), next = now + TICK_MAX_MS;

	if (r->ctl >= 0 && !r->killed && r->deadline + RUN_GRACE_MS < next)
		next = r->deadline + RUN_GRACE_MS;
	if (run_sandbox_live(r) && r->ctl >= 0 && !r->destroy_sent) {
		int64_t lease = lease_ends_at(atomic_load(&r->last_call), r->pollers,
					      r->policy->limits->idle_seconds);

		if (lease < next)
			next = lease;
	}
	if (r->destroy_sent && r->ctl >= 0 && !r->killed &&
	    r->destroy_sent + RUN_HELPER_EXIT_MS < next)
		next = r->destroy_sent + RUN_HELPER_EXIT_MS;
	for (struct run_exec *e = r->execs; e; e = e->next) {
		if (!e->ended && e->deadline < next)
			next = e->deadline;
		if (e->ended && !e->done && e->ended_at + RUN_OUTPUT_GRACE_MS < next)
			next = e->ended_at + RUN_OUTPUT_GRACE_MS;
	}
	if (!r->reaped && r->pidfd < 0 && r->ctl < 0 && now + 50 < next)
		next = now + 50; /* no pidfd: poll for the exit */
	return next <= now ? 0 : (int)(next - now);
}

static bool grow(struct monitor *m, size_t need)
{
	struct pollfd *p;
	struct slot *s;

	if (need <= m->cap)
		return true;
	p = realloc(m->pfd, need * sizeof(*p));
	if (!p)
		return false;
	m->pfd = p;
	s = realloc(m->slot, need * sizeof(*s));
	if (!s)
		return false;
	m->slot = s;
	m->cap = need;
	return true;
}

/* mu held: the fds to watch this round (r is m->r, named for the analysis). */
static size_t build(struct sbx_run *r, struct monitor *m) REQUIRES(r->mu)
{
	size_t n = FIXED_FDS, streams = 0;

	int64_t now = sbx_mono_ms();

	m->deny_next = INT64_MAX;
	m->more_closing = false;
	for (struct run_exec *e = r->execs; e; e = e->next) {
		/* Done: whatever could ask is gone. Past what this round
		 * can hold (many execs done at once), the next round's, which
		 * comes at once: never closed under the lock, as a watch's
		 * close waits (runs_closer.h). */
		if (e->done && (e->deny_fd >= 0 || e->watch_fd >= 0)) {
			if (m->n_closing < CLOSING_MAX)
				deny_release(e, m->closing[m->n_closing++]);
			else
				m->more_closing = true;
		}
		/* Done, its deny fds released above (handed to the closer as
		 * this round begins, before any poll: runs_closer.h counts what
		 * it holds apart), its stdin closed when it ended, its pipes and
		 * spill files with its streams: nothing of sbxd's is held for it
		 * any more, and its run may start another. */
		if (e->done && e->fds_charged && e->deny_fd < 0 && e->watch_fd < 0) {
			e->fds_charged = false;
			r->exec_fds -= SBX_EXEC_FDS;
		}
		streams += (e->out[0].pipe >= 0) + (e->out[1].pipe >= 0) + (e->deny_fd >= 0) +
			   (e->watch_fd >= 0);
	}
	if (!grow(m, FIXED_FDS + streams))
		streams = 0; /* out of memory: watch the rest, retry next round */
	m->pfd[0] = (struct pollfd){.fd = r->wake, .events = POLLIN};
	m->pfd[1] = (struct pollfd){.fd = r->ctl, .events = POLLIN};
	m->pfd[2] = (struct pollfd){.fd = r->err_pipe, .events = POLLIN};
	m->pfd[3] = (struct pollfd){.fd = r->reaped ? -1 : r->pidfd, .events = POLLIN};
	for (struct run_exec *e = r->execs; e && streams; e = e->next)
		for (int w = 0; w < 2; w++)
			if (e->out[w].pipe >= 0) {
				m->pfd[n] = (struct pollfd){.fd = e->out[w].pipe, .events = POLLIN};
				m->slot[n++] = (struct slot){e, w, false};
			}
	for (struct run_exec *e = r->execs; e && streams; e = e->next)
		if (deny_watch(e, now, &m->deny_next)) {
			m->pfd[n] = (struct pollfd){.fd = e->deny_fd, .events = POLLIN};
			m->slot[n++] = (struct slot){e, SLOT_DENY, false};
			/* Counted above only when there is one (an exec whose
			 * kernel refused it has none): no entry beyond them. */
			if (e->watch_fd >= 0) {
				m->pfd[n] = (struct pollfd){.fd = e->watch_fd, .events = POLLIN};
				m->slot[n++] = (struct slot){e, SLOT_WATCH, false};
			}
		}
	return n;
}

/* mu held: nothing left to watch, the thread may end. */
static bool finished(struct sbx_run *r) REQUIRES(r->mu)
{
	/* A STARTING run's end is booked once it is published. */
	if (r->state == RUN_STARTING || r->ctl >= 0 || !r->reaped || r->err_pipe >= 0)
		return false;
	for (struct run_exec *e = r->execs; e; e = e->next)
		if (!e->out[0].closed || !e->out[1].closed)
			return false;
	return true;
}

static void *monitor_main(void *arg)
{
	struct monitor m = {.r = arg};
	struct sbx_run *r = m.r;

	for (;;) {
		size_t n;
		int tick;
		bool done, over;

		run_lock(r);
		if (run_is_claimed(r)) {
			flush_line(r, &m);
			run_unlock(r);
			break;
		}
		n = build(r, &m);
		tick = next_tick(r);
		run_unlock(r);
		for (size_t i = 0; i < m.n_closing; i++) {
			if (m.closing[i][0] >= 0)
				close(m.closing[i][0]);
			closer_close(r->runs->closer, m.closing[i][1]);
		}
		m.n_closing = 0;
		if (m.more_closing)
			tick = 0;
		if (m.deny_next != INT64_MAX) {
			int64_t until = m.deny_next - sbx_mono_ms();

			if (until < tick)
				tick = until < 0 ? 0 : (int)until;
		}

		if (poll(m.pfd, n, tick) < 0 && errno != EINTR)
			usleep(10000); /* ENOMEM: back off, never spin */
		if (m.pfd[0].revents) {
			uint64_t v;

			if (read(r->wake, &v, sizeof(v)) < 0) {
				/* EAGAIN: someone else's wake-up was already read */
			}
		}
		/* The resolvers and connect watches before the pipes: a
		 * refused connect is in its watch before the command's next
		 * byte, so an exec whose stderr ends this round gets its
		 * notice (stream_note) before that end. */
		for (size_t i = FIXED_FDS; i < n; i++)
			if (m.pfd[i].revents && m.slot[i].which == SLOT_DENY)
				deny_pump(r, m.slot[i].e);
			else if (m.pfd[i].revents && m.slot[i].which == SLOT_WATCH)
				watch_pump(r, m.slot[i].e);
		/* Output before the control socket: an exec's last bytes are
		 * usually in its pipe when its ExecEnded arrives. A note above
		 * may have read a pipe to its end: stream_pump skips it. A
		 * pipe's end is recorded after the control messages, whose
		 * ExecStarted may hand over the watch that holds the refusal
		 * its notice tells of (stream_finish). */
		for (size_t i = FIXED_FDS; i < n; i++)
			m.slot[i].ended = m.pfd[i].revents && m.slot[i].which < SLOT_DENY &&
					  stream_pump(r, m.slot[i].e, m.slot[i].which);
		if (m.pfd[2].revents)
			read_stderr(&m);
		if (m.pfd[1].revents)
			read_ctl(&m);
		for (size_t i = FIXED_FDS; i < n; i++)
			if (m.slot[i].ended)
				stream_finish(r, m.slot[i].e, m.slot[i].which);
		if (m.pfd[3].revents || (!r->reaped && r->pidfd < 0 && r->ctl < 0))
			reap(r);

		run_lock(r);
		check_deadlines(r);
		done = finished(r);
		over = r->ctl < 0 || r->state == RUN_EXPIRED || r->state == RUN_FAILED;
		run_unlock(r);
		/* Expired or failed: nothing of the sandbox may still talk out
		 * (the run's records and totals stay for Status). */
		if (over && r->egress && !m.egress_closed) {
			sbx_egress_run_close(r->egress);
			m.egress_closed = true;
		}
		if (done)
			break;
	}
	free(m.pfd);
	free(m.slot);
	return NULL;
}

int monitor_start(struct sbx_run *r, struct sbx_err *err)
{
	pthread_attr_t attr;
	int rc;

	r->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->wake < 0)
		return sbx_fail_errno(err, "eventfd");
	pthread_attr_init(&attr);
	if (pthread_attr_setstacksize(&attr, 512 * 1024) != 0) {
		/* the default stack is larger, and enough */
	}
	rc = pthread_create(&r->monitor, &attr, monitor_main, r);
	pthread_attr_destroy(&attr);
	if (rc)
		return sbx_fail_errnum(err, rc, "monitor thread");
	r->monitor_started = true;
	return 0;
}

void monitor_stop(struct sbx_run *r)
{
	if (!r->monitor_started)
		return;
	run_wake(r); /* it sees the run claimed, and returns */
	pthread_join(r->monitor, NULL);
	r->monitor_started = false;
}
