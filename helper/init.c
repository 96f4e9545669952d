/* SPDX-License-Identifier: Apache-2.0 */
#include "init.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "ctlmsg.h"
#include "exec.h"
#include "netns.h"
#include "phases.h"
#include "util.h"

#define MAX_EXECS 64
#define MAX_ARGV  4096
/* How long an exec init may take to hand over its egress listener (never
 * longer than the exec's script_seconds, which sbxd's watchdog holds pid 1
 * to): it is made right after the exec's namespaces, so only a wedged exec
 * init (a contended rtnl, a host out of breath) is later. pid 1 waits for
 * it in its main loop, so the wait costs no other exec anything; it stays
 * long enough for a loaded host to get there. */
#define LISTENER_WAIT_MS 5000
/* How long an exec killed before its command existed may take to be
 * reaped before pid 1 reports its end without the reap: half of the
 * RUN_GRACE_MS (2 s) that sbxd's watchdog allows past an exec's deadline,
 * the other half for the report to reach sbxd on a loaded host. */
#define UNSTARTED_REAP_WAIT_MS 1000

/* How an OOM that the run's shared limit caused is told apart. */
#define SBX_RUN_OOM_MESSAGE                                                                        \
	"out of memory (the run's memory, memory_mb + out_mb + 2 x tmp_mb, shared by the "         \
	"execs running at once; not this exec's own memory_mb)"

struct exec_slot {
	bool used;
	uint64_t id;
	pid_t pid;
	int report_fd;
	/* An allowlist exec between its spawn and its listener: no
	 * ExecStarted yet, its report socket polled by the main loop until
	 * listener_deadline_ms (LISTENER_WAIT_MS, or its deadline if sooner). */
	bool awaiting_listener;
	int64_t listener_deadline_ms;
	/* What exec init reported so far (read_reports): STARTING, and its
	 * final report (RAN, NOT_STARTED, SETUP_FAILED), which it writes only
	 * once nothing of the exec runs any more but itself. report_done:
	 * nothing more to read (the final report, or its end of the socket
	 * closed). */
	struct sbx_exec_report report;
	bool have_report;
	bool started;
	bool report_done;
	/* Killed before its command existed: it ends at its reap, or at
	 * end_by_ms without it (end_unstarted); then ended_sent, and its
	 * reap only cleans up. */
	int64_t end_by_ms;
	bool ended_sent;
	/* Exec init's mount namespace, held from its spawn: its last
	 * reference is let go here, off the exec's end (remove_stale), not in
	 * exec init's exit, where tearing down its mounts waits for an RCU
	 * grace period before pid 1 can reap it and report the end. -1: not
	 * held (the open failed; the exit pays it as before). */
	int mnt_ns;
	/* A prepared exec's connect watch, made by pid 1 at the claim, until
	 * it goes out with exec init's resolver in ExecStarted; -1 else. */
	int watch_fd;
	/* Its leaf: st->slot_cg[this slot's index], set when the slot is
	 * taken. Apart from the slot so that the slots stay small (a leaf's
	 * path is 4 KiB): the loops over every slot read a few pages, and
	 * only a slot's own leaf is written. */
	struct sbx_cgroup *cg;
	char cg_name[48];
	int64_t start_ms;
	int64_t deadline_ms;
	/* TIMEOUT, KILLED, RUN_EXPIRED, SETUP_FAILED (no listener in time:
	 * why says so) or 0 */
	Sbx__V1__ExecEnded__Reason forced;
	char why[128];
};

/* The next exec's init, made ahead (serve only): once the last one was
 * claimed, pid 1 has nothing to answer and has been quiet for
 * SBX_PREPARE_QUIET_MS (init.h), also while execs run, so that an exec
 * asked for after a pause finds it ready. Its namespaces, cgroup leaf,
 * network and listener are ready, and a claim hands it the request
 * (sbx_exec_claim). Used by one exec only, never shared; nothing of an
 * earlier or a running exec is in it but what pid 1's memory held when it
 * was cloned, as with any exec init (a fresh one can be started beside a
 * running exec alike); pid 1's end ends it. */
struct prepared {
	pid_t pid;    /* 0: none */
	bool dropped; /* killed by pid 1 (a claim that failed): reap, no more */
	int report_fd;
	int mnt_ns; /* as exec_slot's */
	int net_ns; /* with egress deny: where its watch is made at the claim */
	struct sbx_cgroup cg;
	char cg_name[48];
	uint64_t n;
};

struct init_state {
	struct sbx_init_ctx *ctx;
	int sfd; /* SIGCHLD's signalfd */
	struct exec_slot execs[MAX_EXECS];
	struct sbx_cgroup slot_cg[MAX_EXECS]; /* execs[i].cg */
	/* execs[0..n_taken) were taken at least once, and the loops over the
	 * slots stop there: all 64 span ~13 pages, and each first read of a
	 * page pid 1 never wrote is a page fault (~13 us on a VM; 12 in every
	 * run's pid 1 here), where a run of one exec at a time uses one. */
	int n_taken;
	int64_t run_deadline_ms;
	struct prepared prep;
	/* pid 1's own network namespace, to come back to from a prepared
	 * exec's (sbx_netns_deny_watch_in); -1 without egress deny. */
	int own_net_ns;
	/* A prepared exec init failed or died unclaimed: none is made again
	 * until an exec has been started the usual way. */
	bool prep_off;
	/* A HelperClaimRequest was taken, or an exec was asked for: the run
	 * clock is the run's from then on and never restarts. */
	bool clock_fixed;
	/* No exec's init is made ahead before this (CLOCK_MONOTONIC, ns: whole
	 * ms would make the quiet up to 1 ms short): SBX_PREPARE_QUIET_MS
	 * after Ready or the last exec's start or end. */
	int64_t prepare_after_ns;
	/* Ended execs' leaves, empty, not yet removed: their rmdir (several
	 * hierarchies on v1, ~20 ms on a loaded host) waits until pid 1 has
	 * nothing to answer (remove_stale). */
	struct {
		char leaf[48]; /* "": none (no cgroup) */
		int mnt_ns;    /* exec_slot's, or -1 */
	} stale[MAX_EXECS];
	size_t n_stale;
};

__attribute__((noreturn)) static void shut_down(void)
{
	/* pid 1 leaving ends the namespace: the kernel kills every process
	 * left in it before our parent sees us exit. */
	_exit(0);
}

static void send_msg(struct init_state *st, Sbx__V1__HelperMessage *m, const int *fds, size_t nfds)
{
	struct sbx_err err;
	/* A server that cannot take a message within the socket's send timeout
	 * is gone or wedged; either way the sandbox must not outlive it. */
	if (sbx_ctl_send(st->ctx->ctl, m, fds, nfds, &err) < 0)
		_exit(0);
}

void sbx_init_send_failure(int ctl, const char *message)
{
	Sbx__V1__Failure f = SBX__V1__FAILURE__INIT;
	Sbx__V1__HelperMessage m = SBX__V1__HELPER_MESSAGE__INIT;
	struct sbx_err err;
	f.message = (char *)message;
	m.msg_case = SBX__V1__HELPER_MESSAGE__MSG_FAILURE;
	m.failure = &f;
	sbx_ctl_send(ctl, &m, NULL, 0, &err);
}

/* An exec started or ended, or the sandbox is Ready: the next init made
 * ahead waits SBX_PREPARE_QUIET_MS from now. Not on a refused request
 * (send_setup_failed): nothing started or ended. */
static void quiet_from_now(struct init_state *st)
{
	st->prepare_after_ns = sbx_mono_ns() + (int64_t)SBX_PREPARE_QUIET_MS * 1000000;
}

static void send_ended(struct init_state *st, Sbx__V1__ExecEnded *e)
{
	Sbx__V1__HelperMessage m = SBX__V1__HELPER_MESSAGE__INIT;
	m.msg_case = SBX__V1__HELPER_MESSAGE__MSG_ENDED;
	m.ended = e;
	send_msg(st, &m, NULL, 0);
}

static void send_setup_failed(struct init_state *st, uint64_t id, const char *why)
{
	Sbx__V1__ExecEnded e = SBX__V1__EXEC_ENDED__INIT;
	e.exec_id = id;
	e.reason = SBX__V1__EXEC_ENDED__REASON__SETUP_FAILED;
	e.exit_code = 125;
	e.message = (char *)why;
	send_ended(st, &e);
}

/* A regular file or a directory handed in as stdio is a door to the host:
 * /proc/self/fd/N reopens it with the sandbox user's (= the caller's) file
 * permissions, whatever the fd itself allowed. A memfd is the exception: it
 * lives nowhere but in memory. */
static bool stdio_acceptable(int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return false;
	if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISCHR(st.st_mode))
		return true;
	return S_ISREG(st.st_mode) && fcntl(fd, F_GET_SEALS) >= 0;
}

static struct exec_slot *find_exec(struct init_state *st, uint64_t id)
{
	for (int i = 0; i < st->n_taken; i++)
		if (st->execs[i].used && st->execs[i].id == id)
			return &st->execs[i];
	return NULL;
}

/* One packet from exec init's report socket into *r; the fds that came
 * with it go to got[] if one to max (at most 2) came, else are closed
 * (got stays -1). The packet's size, or -1 (errno), or 0 at its end. */
static ssize_t recv_report(int fd, struct sbx_exec_report *r, int got[2], size_t max)
{
	int fds[SBX_CTL_MAX_FDS];
	size_t nfds;
	int flags;
	ssize_t n = sbx_fd_recvmsg(fd, r, sizeof(*r), fds, &nfds, &flags);

	got[0] = got[1] = -1;
	if (n >= 0 && nfds >= 1 && nfds <= max && max <= 2 && !(flags & MSG_CTRUNC)) {
		for (size_t i = 0; i < nfds; i++)
			got[i] = fds[i];
		nfds = 0;
	}
	if (n >= 0)
		sbx_close_fds(fds, nfds);
	return n;
}

/* ExecStarted, with the exec's egress listener when there is one, and
 * with egress deny the deny resolver and the connect watch (the server
 * gets its own copies; the caller closes ours). */
static void send_started(struct init_state *st, uint64_t id, const int got[2])
{
	Sbx__V1__ExecStarted started = SBX__V1__EXEC_STARTED__INIT;
	Sbx__V1__HelperMessage m = SBX__V1__HELPER_MESSAGE__INIT;

	started.exec_id = id;
	started.egress_listener = got[0] >= 0;
	started.deny_watch = got[0] >= 0 && got[1] >= 0;
	m.msg_case = SBX__V1__HELPER_MESSAGE__MSG_STARTED;
	m.started = &started;
	send_msg(st, &m, got, (size_t)started.egress_listener + started.deny_watch);
}

/* One packet of exec init's into the slot's report so far. */
static void take_report(struct exec_slot *slot, const struct sbx_exec_report *next)
{
	if (next->kind == SBX_EXEC_STARTING) {
		slot->started = true;
	} else if (next->kind != SBX_EXEC_LISTENER) {
		slot->report = *next;
		slot->have_report = true;
		slot->report_done = true;
	}
}

/* Whether this run's execs make the deny resolver and the connect watch
 * (init.h: served only). */
static bool wants_deny_dns(const struct init_state *st)
{
	return st->ctx->served && sbx_exec_wants_deny_dns(st->ctx->policy);
}

/* An exec awaiting its listener: takes exec init's first packet if it is
 * there, and then the wait is over and ExecStarted goes out, with the
 * listener, or without it when exec init reported first (kept in
 * the slot for its end, so its setup failure is not lost), ended
 * or sent garbage (finish_exec says which). Nothing there yet: the wait
 * goes on. */
static void take_listener(struct init_state *st, struct exec_slot *slot)
{
	struct sbx_exec_report r;
	_cleanup_close_pair_ int got[2] = SBX_PAIR_INIT;
	/* With egress deny: the resolver, and the connect watch if it could
	 * be made. */
	size_t max = wants_deny_dns(st) ? 2 : 1;
	ssize_t n = recv_report(slot->report_fd, &r, got, max);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	slot->awaiting_listener = false;
	if (n == (ssize_t)sizeof(r) && r.kind == SBX_EXEC_LISTENER && got[0] >= 0) {
		/* pid 1's watch for a prepared exec: not where nothing was
		 * routed to be seen (the fresh path makes none then); finish_exec
		 * closes it. */
		if (got[1] < 0 && slot->watch_fd >= 0 && r.routed)
			got[1] = sbx_steal_fd(slot->watch_fd);
		send_started(st, slot->id, got);
		return;
	}
	if (n == (ssize_t)sizeof(r) && r.kind != SBX_EXEC_LISTENER)
		take_report(slot, &r);
	send_started(st, slot->id, (const int[2]){-1, -1});
}

/* What every exec of the run shares; the request's part is left unset. */
static struct sbx_exec_spec base_spec(const struct init_state *st)
{
	const SbxPolicy *p = st->ctx->policy;
	return (struct sbx_exec_spec){
	    .stdio = {-1, -1, -1},
	    .policy = p,
	    .nofile = st->ctx->nofile,
	    .filter = st->ctx->filter,
	    .sysctl_dir = st->ctx->sysctl_dir,
	    .deny_dns = wants_deny_dns(st),
	};
}

/* Exec init in a cgroup leaf of its own, `name` (made here, with the
 * exec's limits), its end of the report socket in *report_fd; spec has
 * the rest. Returns its pid, or -1 with nothing left behind. */
static pid_t spawn_exec_init(struct init_state *st, struct sbx_exec_spec *spec, const char *name,
			     struct sbx_cgroup *cg, int *report_fd, int *mnt_ns, int *net_ns,
			     struct sbx_err *err)
{
	_cleanup_close_pair_ int report[2] = SBX_PAIR_INIT;
	pid_t pid = -1;
	sbx_cgroup_init(cg);
	if (st->ctx->run->mode != SBX_CG_NONE &&
	    (sbx_cgroup_create(st->ctx->run, name, false, cg, err) < 0 ||
	     sbx_cgroup_set_limits(cg, st->ctx->policy->limits, err) < 0))
		goto fail;
	sbx_phase_mark(SBX_PHASE_LEAF);
	/* A socket, not a pipe: the egress listener comes over it. Our end
	 * never blocks (finish_exec reads what is there); exec init's does,
	 * as its few packets always fit. */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, report) < 0 ||
	    fcntl(report[0], F_SETFL, O_NONBLOCK) < 0) {
		sbx_fail_errno(err, "report socket");
		goto fail;
	}
	spec->cgroup = cg;
	spec->report_fd = report[1];
	pid = sbx_exec_spawn(spec, mnt_ns, net_ns, err);
	/* Exec init holds the write end; ours would hide its end. */
	close(sbx_steal_fd(report[1]));
	if (pid < 0)
		goto fail;
	*report_fd = sbx_steal_fd(report[0]);
	return pid;
fail:
	sbx_cgroup_close(cg);
	if (st->ctx->run->mode != SBX_CG_NONE)
		sbx_cgroup_remove(st->ctx->run, name, &(struct sbx_err){0});
	return -1;
}

static void prepare_exec(struct init_state *st)
{
	struct prepared *pr = &st->prep;
	struct sbx_exec_spec spec = base_spec(st);
	struct sbx_err err;
	spec.prepared = true;
	pr->net_ns = -1;
	snprintf(pr->cg_name, sizeof(pr->cg_name), "prep-%llu", (unsigned long long)++pr->n);
	pid_t pid = spawn_exec_init(st, &spec, pr->cg_name, &pr->cg, &pr->report_fd, &pr->mnt_ns,
				    spec.deny_dns ? &pr->net_ns : NULL, &err);
	if (pid < 0) {
		st->prep_off = true;
		return;
	}
	pr->pid = pid;
	pr->dropped = false;
}

/* The prepared exec init takes the request: it becomes the slot's. False
 * when there is none or it could not take it (then it is killed, and the
 * exec starts the usual way). */
static bool claim_prepared(struct init_state *st, struct exec_slot *slot,
			   const Sbx__V1__HelperExecRequest *req, char *const *argv,
			   const char *cwd, const int *fds)
{
	struct prepared *pr = &st->prep;
	struct sbx_err err;
	if (pr->pid <= 0 || pr->dropped)
		return false;
	/* Its connect watch, before the claim lets its command start (exec.h:
	 * why pid 1 makes it). One that cannot be made costs the record, as in
	 * exec init (send_listener); pid 1 must not go on in the exec's
	 * network namespace. */
	if (pr->net_ns >= 0) {
		bool stranded;
		struct sbx_err ignored;
		slot->watch_fd =
		    sbx_netns_deny_watch_in(pr->net_ns, st->own_net_ns, &stranded, &ignored);
		close(sbx_steal_fd(pr->net_ns));
		if (stranded)
			shut_down();
	}
	if (sbx_exec_claim(pr->report_fd, argv, req->n_argv, cwd, req->env, req->n_env, fds, &err) <
	    0) {
		/* The exec starts the usual way, its exec init making its own. */
		if (slot->watch_fd >= 0)
			close(sbx_steal_fd(slot->watch_fd));
		kill(pr->pid, SIGKILL);
		close(sbx_steal_fd(pr->report_fd));
		pr->dropped = true; /* its leaf goes at its reap */
		st->prep_off = true;
		return false;
	}
	slot->pid = pr->pid;
	slot->report_fd = sbx_steal_fd(pr->report_fd);
	slot->mnt_ns = sbx_steal_fd(pr->mnt_ns);
	*slot->cg = pr->cg;
	snprintf(slot->cg_name, sizeof(slot->cg_name), "%s", pr->cg_name);
	pr->pid = 0;
	return true;
}

/* A prepared exec init reaped before its claim: its leaf goes. One that
 * failed or died on its own: no other is made for now (prep_off). One
 * dropped after a failed claim: that claim's exec was started the usual
 * way, which allows the next one to be made ahead again. */
static bool reap_prepared(struct init_state *st, pid_t pid)
{
	struct prepared *pr = &st->prep;
	if (pr->pid <= 0 || pid != pr->pid)
		return false;
	if (pr->report_fd >= 0)
		close(sbx_steal_fd(pr->report_fd));
	if (pr->mnt_ns >= 0)
		close(sbx_steal_fd(pr->mnt_ns));
	if (pr->net_ns >= 0)
		close(sbx_steal_fd(pr->net_ns));
	sbx_cgroup_close(&pr->cg);
	if (st->ctx->run->mode != SBX_CG_NONE)
		sbx_cgroup_remove(st->ctx->run, pr->cg_name, &(struct sbx_err){0});
	pr->pid = 0;
	/* A dropped one's prep_off was set at the kill and cleared by the
	 * usual start since; set again here, it made the next exec start
	 * fresh too, for nothing (review 30). */
	if (!pr->dropped)
		st->prep_off = true;
	return true;
}

/* Whether pid 1 waits for a packet on the slot's report socket: its
 * listener (awaiting_listener), or its final report (end_on_report). */
static bool report_watched(const struct exec_slot *s)
{
	return s->used &&
	       (s->awaiting_listener || (!s->ended_sent && !s->forced && !s->report_done));
}

static int next_timeout(const struct init_state *st);

/* Whether pid 1 has something to answer first: a request on the control
 * socket, an ended exec's report or a child to reap, an exec's listener or
 * deny resolver to hand over (its ExecStarted: a claimed init sent it
 * before its claim, so it is there at once), or a deadline that is due
 * (a kill, a give-up). Execs run meanwhile now: none of theirs may wait
 * behind the next one's prepare. */
static bool work_waits(const struct init_state *st)
{
	struct pollfd pfd[2 + MAX_EXECS] = {{.fd = st->ctx->ctl, .events = POLLIN},
					    {.fd = st->sfd, .events = POLLIN}};
	nfds_t n = 2;
	for (int i = 0; i < st->n_taken; i++)
		if (report_watched(&st->execs[i]))
			pfd[n++] = (struct pollfd){.fd = st->execs[i].report_fd, .events = POLLIN};
	return poll(pfd, n, 0) != 0 || next_timeout(st) == 0;
}

/* Whether a next exec's init is to be made ahead at all: served runs that
 * did not turn it off, none made yet, none failed, and the run not ending. */
static bool prepare_wanted(const struct init_state *st)
{
	return st->ctx->prepare_execs && st->prep.pid <= 0 && !st->prep_off &&
	       !(wants_deny_dns(st) && st->own_net_ns < 0) && sbx_mono_ms() < st->run_deadline_ms;
}

/* How long pid 1 may sleep before it is quiet enough to make one (0: it
 * is; rounded up), or -1: none is wanted. */
static int prepare_wait_ms(const struct init_state *st)
{
	if (!prepare_wanted(st))
		return -1;
	int64_t wait = st->prepare_after_ns - sbx_mono_ns();
	return wait <= 0 ? 0 : (int)((wait + 999999) / 1000000);
}

/* Made when pid 1 has been quiet for SBX_PREPARE_QUIET_MS since Ready or
 * the last exec's start or end and nothing waits to be answered (work_waits: the
 * make takes pid 1 ~2 ms, cgroup leaf and clone included); whether
 * execs run does not matter, as each holds its own namespaces and leaf. */
static void maybe_prepare(struct init_state *st)
{
	if (prepare_wait_ms(st) != 0 || work_waits(st))
		return;
	prepare_exec(st);
}

/* Whether an ended exec's leaf of that id waits for its removal: an id
 * used again would find it (mkdir takes an existing leaf) with its old
 * OOM count. sbxd never repeats an id; pid 1 does not count on that. */
static bool leaf_waits(const struct init_state *st, uint64_t exec_id)
{
	char leaf[sizeof(st->stale[0].leaf)];
	snprintf(leaf, sizeof(leaf), "exec-%llu", (unsigned long long)exec_id);
	for (size_t i = 0; i < st->n_stale; i++)
		if (strcmp(st->stale[i].leaf, leaf) == 0)
			return true;
	return false;
}

static void finish_exec(struct init_state *st, struct exec_slot *slot, int init_status);

/* A slot for a new exec, or NULL. An exec that ended on its report holds
 * its slot until exec init, which has nothing left to do but exit, is
 * reaped: with none free, such an exec init is reaped here, so that a
 * caller that starts an exec on another's end does not find every slot
 * taken. The wait for one still exiting is bounded (its exit runs under
 * the exec's cpu limit, which may be a sliver): the first of those to
 * exit within FREE_SLOT_WAIT_MS, else the exec is refused, as it was
 * before an exec could end before its reap. */
#define FREE_SLOT_WAIT_MS 250

/* The slot's exec init reaped if it is gone: then the slot is free. */
static bool reap_if_gone(struct init_state *st, struct exec_slot *s)
{
	int status;
	if (waitpid(s->pid, &status, WNOHANG | __WALL) != s->pid)
		return false;
	finish_exec(st, s, status);
	return true;
}

static struct exec_slot *free_slot(struct init_state *st)
{
	struct exec_slot *ended[MAX_EXECS];
	struct pollfd pfd[MAX_EXECS];
	size_t n = 0;
	for (int i = 0; i < MAX_EXECS; i++)
		if (!st->execs[i].used) {
			if (i >= st->n_taken)
				st->n_taken = i + 1;
			return &st->execs[i];
		}
	for (int i = 0; i < st->n_taken; i++) {
		struct exec_slot *s = &st->execs[i];
		if (!s->ended_sent || !s->have_report || s->forced)
			continue;
		if (reap_if_gone(st, s))
			return s;
		/* pidfd_open: Linux 5.3; without it, no wait for this one. */
		int fd = (int)syscall(SYS_pidfd_open, s->pid, 0);
		if (fd >= 0) {
			ended[n] = s;
			pfd[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
		}
	}
	struct exec_slot *got = NULL;
	if (n > 0 && poll(pfd, n, FREE_SLOT_WAIT_MS) > 0)
		for (size_t i = 0; i < n && !got; i++)
			if (pfd[i].revents && reap_if_gone(st, ended[i]))
				got = ended[i];
	for (size_t i = 0; i < n; i++)
		close(pfd[i].fd);
	return got;
}

static void start_exec(struct init_state *st, Sbx__V1__HelperExecRequest *req, int *fds,
		       size_t nfds)
{
	_cleanup_free_ char **argv = NULL;
	struct sbx_err err;
	const SbxPolicy *p = st->ctx->policy;
	if (nfds != 3 || req->n_argv == 0 || req->n_argv > MAX_ARGV || !req->argv[0][0]) {
		send_setup_failed(st, req->exec_id,
				  "exec request needs a non-empty argv and 3 stdio fds");
		return;
	}
	for (int i = 0; i < 3; i++)
		if (!stdio_acceptable(fds[i])) {
			send_setup_failed(
			    st, req->exec_id,
			    "stdio fds must be pipes, sockets, character devices or "
			    "memfds: a host file or directory would be reopened through "
			    "/proc/self/fd");
			return;
		}
	if (find_exec(st, req->exec_id) || leaf_waits(st, req->exec_id)) {
		send_setup_failed(st, req->exec_id, "exec id already in use");
		return;
	}
	struct exec_slot *slot = free_slot(st);
	if (!slot) {
		send_setup_failed(st, req->exec_id, "too many concurrent execs in this run");
		return;
	}
	memset(slot, 0, sizeof(*slot));
	slot->cg = &st->slot_cg[slot - st->execs];
	/* Wiped with the slot, as when it was part of it: no earlier exec's
	 * leaf path stays in the memory later exec inits are cloned from. */
	memset(slot->cg, 0, sizeof(*slot->cg));
	sbx_cgroup_init(slot->cg);
	slot->report_fd = -1;
	slot->mnt_ns = -1;
	slot->watch_fd = -1;
	/* argv must be NULL-terminated for execve: protobuf-c's array is not. */
	argv = calloc(req->n_argv + 1, sizeof(char *));
	if (!argv) {
		sbx_fail_errno(&err, "argv");
		send_setup_failed(st, req->exec_id, err.msg);
		return;
	}
	memcpy(argv, req->argv, req->n_argv * sizeof(char *));
	const char *cwd = req->cwd && req->cwd[0]	? req->cwd
			  : sbx_policy_mount(p, "/out") ? "/out"
							: "/tmp";
	slot->start_ms = sbx_mono_ms();
	if (!claim_prepared(st, slot, req, argv, cwd, fds)) {
		struct sbx_exec_spec spec = base_spec(st);
		spec.argv = argv;
		spec.cwd = cwd;
		spec.env = req->env;
		spec.n_env = req->n_env;
		memcpy(spec.stdio, fds, sizeof(spec.stdio));
		snprintf(slot->cg_name, sizeof(slot->cg_name), "exec-%llu",
			 (unsigned long long)req->exec_id);
		slot->pid = spawn_exec_init(st, &spec, slot->cg_name, slot->cg, &slot->report_fd,
					    &slot->mnt_ns, NULL, &err);
		if (slot->pid < 0) {
			send_setup_failed(st, req->exec_id, err.msg);
			return;
		}
		st->prep_off = false;
	}
	sbx_phase_mark(SBX_PHASE_EXEC_NS);
	quiet_from_now(st);
	slot->used = true;
	slot->id = req->exec_id;
	/* The exec's own wall clock, never past script_seconds (sbxd refuses
	 * more; a request that asks more gets script_seconds here). */
	uint32_t seconds = req->timeout_seconds && req->timeout_seconds < p->limits->script_seconds
			       ? req->timeout_seconds
			       : p->limits->script_seconds;
	slot->deadline_ms = slot->start_ms + (int64_t)seconds * 1000;
	/* With an allowlist ExecStarted waits for the listener, in the main
	 * loop: pid 1 goes on serving every other exec meanwhile. */
	if (sbx_exec_wants_listener(p) || wants_deny_dns(st)) {
		slot->awaiting_listener = true;
		slot->listener_deadline_ms = slot->start_ms + LISTENER_WAIT_MS;
		if (slot->deadline_ms < slot->listener_deadline_ms)
			slot->listener_deadline_ms = slot->deadline_ms;
		return;
	}
	send_started(st, slot->id, (const int[2]){-1, -1});
}

/* What exec init wrote and pid 1 has not read: a listener (already taken,
 * or dropped here: read() closes the fds of a packet), a STARTING marker
 * and the final report. */
static void read_reports(struct exec_slot *slot)
{
	struct sbx_exec_report next;
	ssize_t n = -1;
	while (!slot->report_done &&
	       (n = read(slot->report_fd, &next, sizeof(next))) == (ssize_t)sizeof(next))
		take_report(slot, &next);
	if (!slot->report_done && n >= 0)
		slot->report_done = true; /* its end closed, or a packet of no report */
}

/* An OOM kill makes the exec end as "oom", exit status 137 (the OOM
 * killer's SIGKILL), whatever the command did afterwards: on v1 the killer
 * may pick one of the command's children and the command exit 0, and a
 * caller reading 0 would take a half-done job for a success. */
static void end_as_oom(Sbx__V1__ExecEnded *e, const struct sbx_cg_usage *u, bool have_report,
		       int status, char *msg, size_t size)
{
	e->reason = SBX__V1__EXEC_ENDED__REASON__OOM;
	e->signal = SIGKILL;
	e->exit_code = 128 + SIGKILL;
	/* The run's limit, not this exec's own, refused the memory: execs
	 * running at once share it, and the OOM killer picked from this one
	 * although another may hold more (tmpfs files, SysV segments). */
	bool run_wide = !u->reached_limit;
	size_t len = 0;
	if (run_wide)
		len = (size_t)snprintf(msg, size, "%s", SBX_RUN_OOM_MESSAGE);
	if (have_report && WIFEXITED(status) && len < size)
		snprintf(msg + len, size - len,
			 "%sa process of this exec was killed by the OOM killer; the command "
			 "itself exited %d",
			 run_wide ? "; " : "", WEXITSTATUS(status));
	e->message = msg[0] ? msg : NULL;
}

/* An exec that sbx ended (deadline, kill, run expiry, no listener in
 * time): its reason, whatever the command did meanwhile. */
static void end_as_forced(Sbx__V1__ExecEnded *e, const struct exec_slot *slot)
{
	e->reason = slot->forced;
	if (slot->forced == SBX__V1__EXEC_ENDED__REASON__SETUP_FAILED) {
		e->exit_code = 125;
		e->message = (char *)slot->why;
		return;
	}
	e->signal = SIGKILL;
	e->exit_code = slot->forced == SBX__V1__EXEC_ENDED__REASON__TIMEOUT ? 124 : 128 + SIGKILL;
	e->message = slot->why[0] ? (char *)slot->why : NULL;
}

/* The slot's cgroup leaf (its fds closed already), and the slot with it:
 * the leaf is empty (exec init reaped, the pid namespace's last process
 * with it), so it counts nothing and limits nothing any more; its rmdir is
 * put off (remove_stale), or done here when too many wait. Names are never
 * reused (exec-N, prep-N count up), and leaves left at pid 1's end go with
 * the run's cgroup. */
static void remove_leaf(struct init_state *st, struct exec_slot *slot)
{
	bool leaf = st->ctx->run->mode != SBX_CG_NONE;
	if (st->n_stale < MAX_EXECS) {
		snprintf(st->stale[st->n_stale].leaf, sizeof(st->stale[0].leaf), "%s",
			 leaf ? slot->cg_name : "");
		st->stale[st->n_stale++].mnt_ns = sbx_steal_fd(slot->mnt_ns);
	} else {
		if (leaf)
			sbx_cgroup_remove(st->ctx->run, slot->cg_name, &(struct sbx_err){0});
		if (slot->mnt_ns >= 0)
			close(sbx_steal_fd(slot->mnt_ns));
	}
	slot->used = false;
}

/* The put-off rmdirs and mount namespaces, one exec's at a time, while
 * nothing waits to be answered: a request or an exec's end that came
 * meanwhile goes first, the rest wait for the next round. */
static void remove_stale(struct init_state *st)
{
	while (st->n_stale > 0 && !work_waits(st)) {
		st->n_stale--;
		if (st->stale[st->n_stale].mnt_ns >= 0)
			close(st->stale[st->n_stale].mnt_ns);
		if (st->stale[st->n_stale].leaf[0])
			sbx_cgroup_remove(st->ctx->run, st->stale[st->n_stale].leaf,
					  &(struct sbx_err){0});
	}
}

/* ExecEnded of the slot's exec from what exec init reported and the
 * leaf's usage u; init_status is exec init's wait status, looked at only
 * without a report (have_report is then false: it was reaped). */
static void end_exec(struct init_state *st, struct exec_slot *slot, const struct sbx_cg_usage *u,
		     int init_status)
{
	const struct sbx_exec_report *r = &slot->report;
	bool have_report = slot->have_report, started = slot->started;
	Sbx__V1__ExecEnded e = SBX__V1__EXEC_ENDED__INIT;
	char msg[sizeof(r->msg) + 256] = "";
	e.exec_id = slot->id;
	e.wall_ms = (uint64_t)(sbx_mono_ms() - slot->start_ms);
	/* v2 counts every process the leaf held, also those exec init never
	 * reaped and an exec killed at its deadline (whose report is lost);
	 * so does v1's cpuacct where it is mounted with cpu; else (cpuacct a
	 * hierarchy of its own) the report's rusage it is. */
	e.cpu_ms = u->cpu_usec ? u->cpu_usec / 1000 : (have_report ? r->cpu_ms : 0);
	e.peak_memory_bytes =
	    u->peak_bytes ? u->peak_bytes : (have_report ? r->maxrss_kb * 1024 : 0);
	int status = r->status;
	if (slot->forced) {
		end_as_forced(&e, slot);
	} else if (u->oom_kills > 0) {
		/* Looked at before the report, which is missing when the OOM
		 * killer picked exec init itself (the command's memory was
		 * socket buffers, or files in /tmp and /out, which tmpfs
		 * charges to the exec). */
		end_as_oom(&e, u, have_report && r->kind == SBX_EXEC_RAN, status, msg, sizeof(msg));
	} else if (!have_report && started && WIFSIGNALED(init_status)) {
		/* Exec init died while the command ran, and not of anything
		 * sbx did (no deadline, no kill, no OOM): the command had the
		 * means to cause it, or the host did. Not setup_failed, which
		 * says nothing ran and invites a retry. */
		e.reason = SBX__V1__EXEC_ENDED__REASON__SIGNALED;
		e.signal = WTERMSIG(init_status);
		e.exit_code = 128 + e.signal;
		snprintf(msg, sizeof(msg),
			 "exec init was killed by signal %d while the command ran; the command's "
			 "own status is unknown",
			 e.signal);
		e.message = msg;
	} else if (!have_report) {
		e.reason = SBX__V1__EXEC_ENDED__REASON__SETUP_FAILED;
		e.exit_code = 125;
		e.message = WIFSIGNALED(init_status)
				? "exec init was killed before the command started"
				: "exec init ended without a report";
	} else if (r->kind == SBX_EXEC_SETUP_FAILED) {
		e.reason = SBX__V1__EXEC_ENDED__REASON__SETUP_FAILED;
		e.exit_code = 125;
		e.message = (char *)r->msg;
	} else if (r->kind == SBX_EXEC_NOT_STARTED) {
		e.reason = SBX__V1__EXEC_ENDED__REASON__EXITED;
		e.exit_code = (r->errnum == ENOENT || r->errnum == ENOTDIR) ? 127 : 126;
		e.message = strerror(r->errnum);
	} else if (WIFSIGNALED(status)) {
		e.reason = SBX__V1__EXEC_ENDED__REASON__SIGNALED;
		e.signal = WTERMSIG(status);
		e.exit_code = 128 + WTERMSIG(status);
	} else {
		e.reason = SBX__V1__EXEC_ENDED__REASON__EXITED;
		e.exit_code = WEXITSTATUS(status);
	}
	slot->ended_sent = true;
	quiet_from_now(st);
	send_ended(st, &e);
}

/* The exec's end on exec init's final report, before exec init is gone:
 * it writes the report once it has killed and reaped everything else of
 * the exec (exec.c), so nothing of the exec runs any more, and its own
 * exit (the exec's namespaces, its copy of pid 1's memory) is none of the
 * caller's wait. Its reap then only cleans up (finish_exec). An exec sbx
 * killed ends at its reap, as before. */
static void end_on_report(struct init_state *st, struct exec_slot *slot)
{
	read_reports(slot);
	if (!slot->have_report || slot->forced || slot->ended_sent)
		return;
	struct sbx_cg_usage u;
	sbx_cgroup_usage(slot->cg, &u);
	end_exec(st, slot, &u, 0);
}

/* Exec init reaped (init_status its wait status): the exec's end if it was
 * not told yet, then its slot and leaf go. */
static void finish_exec(struct init_state *st, struct exec_slot *slot, int init_status)
{
	/* Reaped before its first packet was looked at: ExecStarted still
	 * goes first, so that every spawned exec has one. */
	if (slot->awaiting_listener)
		take_listener(st, slot);
	read_reports(slot);
	close(sbx_steal_fd(slot->report_fd));
	/* The leaf's usage only for an end not told yet (it is in the
	 * ExecEnded sent on the report): four files read for nothing, on
	 * the CPUs the next exec wants. */
	if (!slot->ended_sent) {
		struct sbx_cg_usage u;
		sbx_cgroup_usage(slot->cg, &u);
		end_exec(st, slot, &u, init_status);
	}
	sbx_cgroup_close(slot->cg);
	/* Never handed over (exec init reported before its resolver, or had
	 * nothing routed): ours is the last close, and waits for a grace
	 * period (exec.h), after the end is told. */
	if (slot->watch_fd >= 0)
		close(sbx_steal_fd(slot->watch_fd));
	/* The leaf goes after the report: its rmdir (several hierarchies on
	 * v1) is none of the caller's wait. */
	remove_leaf(st, slot);
}

static void reap(struct init_state *st)
{
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG | __WALL);
		if (pid <= 0)
			return;
		if (reap_prepared(st, pid))
			continue;
		for (int i = 0; i < st->n_taken; i++)
			if (st->execs[i].used && st->execs[i].pid == pid)
				finish_exec(st, &st->execs[i], status);
	}
}

/* An exec killed before its command existed whose exec init is not
 * reaped by end_by_ms (it is in a kernel call that must return first: a
 * contended rtnl) ends without the reap: sbxd's watchdog fails the whole
 * run at the exec's deadline + RUN_GRACE_MS. Nothing of the exec runs
 * again: with SIGKILL pending exec init never returns to user space, so
 * never forks the command. */
static void end_unstarted(struct init_state *st, struct exec_slot *slot)
{
	Sbx__V1__ExecEnded e = SBX__V1__EXEC_ENDED__INIT;

	if (slot->awaiting_listener) {
		slot->awaiting_listener = false;
		send_started(st, slot->id, (const int[2]){-1, -1});
	}
	e.exec_id = slot->id;
	e.wall_ms = (uint64_t)(sbx_mono_ms() - slot->start_ms);
	end_as_forced(&e, slot);
	slot->ended_sent = true;
	quiet_from_now(st);
	send_ended(st, &e);
}

static void kill_exec(struct init_state *st, struct exec_slot *slot, Sbx__V1__ExecEnded__Reason why)
{
	/* SIGKILL of an exec init from its parent namespace takes down its
	 * whole pid namespace: the command and everything it started. */
	if (!slot->forced)
		slot->forced = why;
	kill(slot->pid, SIGKILL);
	if (!slot->awaiting_listener || slot->end_by_ms)
		return;
	/* A listener sent before the kill is in the socket by now; without
	 * one there, exec init dies before it gets to the command. */
	take_listener(st, slot);
	if (!slot->awaiting_listener)
		return;
	slot->end_by_ms = sbx_mono_ms() + UNSTARTED_REAP_WAIT_MS;
	if (!slot->why[0])
		snprintf(slot->why, sizeof(slot->why),
			 "ended before the command started (exec init had not handed over the "
			 "egress listener yet)");
}

/* The listener's time is up: a last look at the socket, then the exec
 * ends as a setup failure that says so. */
static void give_up_listener(struct init_state *st, struct exec_slot *slot)
{
	take_listener(st, slot);
	if (!slot->awaiting_listener)
		return;
	if (slot->listener_deadline_ms < slot->deadline_ms)
		snprintf(slot->why, sizeof(slot->why),
			 "exec init did not hand over the egress listener within %d s; the "
			 "command did not start",
			 LISTENER_WAIT_MS / 1000);
	else
		snprintf(slot->why, sizeof(slot->why),
			 "exec init did not hand over the egress listener within script_seconds "
			 "(%u s); the command did not start",
			 st->ctx->policy->limits->script_seconds);
	kill_exec(st, slot, SBX__V1__EXEC_ENDED__REASON__SETUP_FAILED);
}

static void handle_signal_request(struct init_state *st, Sbx__V1__HelperSignalRequest *req)
{
	static const int forwarded[] = {SBX_FORWARDED_SIGNALS};
	struct exec_slot *slot = find_exec(st, req->exec_id);
	bool known = req->signal == SIGKILL;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(forwarded); i++)
		known |= req->signal == forwarded[i];
	if (!slot || slot->ended_sent || !known)
		return;
	if (req->signal == SIGKILL)
		kill_exec(st, slot, SBX__V1__EXEC_ENDED__REASON__KILLED);
	else
		kill(slot->pid, req->signal); /* exec init forwards it to the command */
}

static void check_deadlines(struct init_state *st)
{
	int64_t now = sbx_mono_ms();
	bool run_over = now >= st->run_deadline_ms;
	for (int i = 0; i < st->n_taken; i++) {
		struct exec_slot *s = &st->execs[i];
		if (s->used && s->end_by_ms && !s->ended_sent && now >= s->end_by_ms)
			end_unstarted(st, s);
		if (!s->used || s->forced || s->ended_sent)
			continue;
		if (run_over)
			kill_exec(st, s, SBX__V1__EXEC_ENDED__REASON__RUN_EXPIRED);
		else if (s->awaiting_listener && now >= s->listener_deadline_ms)
			give_up_listener(st, s);
		else if (now >= s->deadline_ms)
			kill_exec(st, s, SBX__V1__EXEC_ENDED__REASON__TIMEOUT);
	}
}

static int next_timeout(const struct init_state *st)
{
	int64_t next = st->run_deadline_ms;
	for (int i = 0; i < st->n_taken; i++) {
		const struct exec_slot *s = &st->execs[i];
		int64_t due = s->awaiting_listener ? s->listener_deadline_ms : s->deadline_ms;
		if (s->used && !s->forced && !s->ended_sent && due < next)
			next = due;
		if (s->used && s->end_by_ms && !s->ended_sent && s->end_by_ms < next)
			next = s->end_by_ms;
	}
	int64_t wait = next - sbx_mono_ms();
	return wait < 0 ? 0 : wait > 60000 ? 60000 : (int)wait;
}

/* An exec already ended but not reaped does not count: pid 1 leaving
 * takes it along. */
static bool any_running(struct init_state *st)
{
	for (int i = 0; i < st->n_taken; i++)
		if (st->execs[i].used && !st->execs[i].ended_sent)
			return true;
	return false;
}

/* The report sockets pid 1 waits on into pfd, their slots into slot; how
 * many (at most MAX_EXECS). */
static size_t watch_reports(struct init_state *st, struct pollfd *pfd, struct exec_slot **slot)
{
	size_t n = 0;
	for (int i = 0; i < st->n_taken; i++)
		if (report_watched(&st->execs[i])) {
			pfd[n] = (struct pollfd){.fd = st->execs[i].report_fd, .events = POLLIN};
			slot[n++] = &st->execs[i];
		}
	return n;
}

void sbx_init_main(struct sbx_init_ctx *ctx)
{
	/* Mapped, not on the stack: its exec slots are ~330 KiB, and a
	 * zeroed stack copy wrote every page of it in every run's pid 1 (81
	 * page faults before Ready, each a fresh page). An anonymous mapping
	 * is zero already and gets a page only where pid 1 writes: the slots
	 * it uses. Never unmapped: pid 1 leaves by _exit. */
	struct init_state *st =
	    mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (st == MAP_FAILED) {
		sbx_init_send_failure(ctx->ctl, "out of memory");
		_exit(1);
	}
	st->ctx = ctx;
	st->own_net_ns = -1;
	st->prep.report_fd = st->prep.mnt_ns = st->prep.net_ns = -1;
	st->run_deadline_ms = sbx_mono_ms() + (int64_t)ctx->policy->limits->run_seconds * 1000;
	/* Without the way back, prepared execs' watches cannot be made at
	 * their claims: then none is prepared (maybe_prepare). */
	if (ctx->prepare_execs && wants_deny_dns(st))
		st->own_net_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);

	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_SETMASK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	st->sfd = sfd;
	if (sfd < 0) {
		sbx_init_send_failure(ctx->ctl, "signalfd failed");
		_exit(1);
	}

	/* A warm pool's member: its Ready comes with the first exec's init
	 * made (it finishes its own set-up meanwhile). One that cannot be
	 * made is not a failed sandbox: its first exec makes its own
	 * (prep_off), as after any failed prepare. */
	if (ctx->prepare_first && prepare_wanted(st))
		prepare_exec(st);

	Sbx__V1__Ready ready = SBX__V1__READY__INIT;
	Sbx__V1__HelperMessage m = SBX__V1__HELPER_MESSAGE__INIT;
	ready.cgroup = (char *)sbx_cg_mode_name(ctx->run->mode);
	ready.seccomp = ctx->seccomp;
	ready.userns = true;
	ready.protocol_version = SBX_CTL_PROTOCOL_VERSION;
	m.msg_case = SBX__V1__HELPER_MESSAGE__MSG_READY;
	m.ready = &ready;
	send_msg(st, &m, &ctx->out_fd, ctx->out_fd >= 0 ? 1 : 0);
	if (ctx->out_fd >= 0)
		close(ctx->out_fd);
	sbx_phase_mark(SBX_PHASE_READY);
	/* After Ready too: a run torn down at once (sbx-bench-scale's creates)
	 * made one for nothing, and an Exec sent at once waited for it. */
	quiet_from_now(st);

	for (;;) {
		maybe_prepare(st);
		remove_stale(st);
		struct pollfd pfd[2 + MAX_EXECS] = {{.fd = ctx->ctl, .events = POLLIN},
						    {.fd = sfd, .events = POLLIN}};
		struct exec_slot *watched[MAX_EXECS];
		size_t n_watched = watch_reports(st, pfd + 2, watched);
		int timeout = next_timeout(st), prepare_wait = prepare_wait_ms(st);
		if (prepare_wait >= 0 && prepare_wait < timeout)
			timeout = prepare_wait;
		int rc = poll(pfd, 2 + n_watched, timeout);
		if (rc < 0 && errno != EINTR)
			shut_down();
		/* Before the reap: an exec's ExecStarted goes before its end. */
		for (size_t i = 0; i < n_watched; i++) {
			if (!pfd[2 + i].revents)
				continue;
			if (watched[i]->awaiting_listener)
				take_listener(st, watched[i]);
			else
				end_on_report(st, watched[i]);
		}
		if (pfd[1].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) > 0)
				;
			reap(st);
		}
		check_deadlines(st);
		if (sbx_mono_ms() >= st->run_deadline_ms && !any_running(st))
			shut_down();
		if (!(pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		Sbx__V1__HelperMessage *req;
		int fds[SBX_CTL_MAX_FDS];
		size_t nfds;
		struct sbx_err err;
		rc = sbx_ctl_recv(ctx->ctl, &req, fds, &nfds, SBX_CTL_MAX_FDS, &err);
		if (rc <= 0)
			shut_down(); /* the server is gone: so is the sandbox */
		switch (req->msg_case) {
		case SBX__V1__HELPER_MESSAGE__MSG_EXEC:
			st->clock_fixed = true;
			if (sbx_mono_ms() >= st->run_deadline_ms)
				send_setup_failed(st, req->exec->exec_id, "run_seconds ran out");
			else
				start_exec(st, req->exec, fds, nfds);
			break;
		case SBX__V1__HELPER_MESSAGE__MSG_SIGNAL:
			handle_signal_request(st, req->signal);
			break;
		case SBX__V1__HELPER_MESSAGE__MSG_CLAIM:
			/* Built ahead (sbxd's warm pool): run_seconds counts from
			 * the claim. Once, and never after an exec. */
			if (!st->clock_fixed)
				st->run_deadline_ms =
				    sbx_mono_ms() +
				    (int64_t)ctx->policy->limits->run_seconds * 1000;
			st->clock_fixed = true;
			break;
		case SBX__V1__HELPER_MESSAGE__MSG_DESTROY:
			shut_down();
		default:
			break;
		}
		sbx_close_fds(fds, nfds);
		sbx__v1__helper_message__free_unpacked(req, NULL);
	}
}
