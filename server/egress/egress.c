/* SPDX-License-Identifier: Apache-2.0 */
/* The proxy's thread and the run API (egress.h).
 *
 * One thread runs a libevent loop; the run manager's threads never touch
 * its state: they queue a command under eg->mu and wake the loop with
 * event_active on a user event (libevent's pthread locking makes that
 * safe from another thread). sbx_egress_run_close waits on eg->cv until
 * the loop has closed the run; when the loop stopped, every run was closed
 * on the way out, so nothing waits for a thread that is gone. */
#include "egress.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <event2/thread.h>

#include "clock.h"
#include "egress_internal.h"
#include "util.h"

int64_t egress_now_us(void)
{
	return sbx_mono_ns() / 1000;
}

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int threads_rc;

static void use_pthreads(void)
{
	threads_rc = evthread_use_pthreads();
}

/* ---- references ---- */

static void egress_free(struct sbx_egress *eg)
{
	egress_limits_free(eg);
	pthread_mutex_destroy(&eg->mu);
	pthread_cond_destroy(&eg->cv);
	free(eg);
}

/* eg->mu held on entry, released on return. */
static void egress_unref_unlock(struct sbx_egress *eg)
{
	bool last = --eg->refs == 0;

	pthread_mutex_unlock(&eg->mu);
	if (last)
		egress_free(eg);
}

static void run_unref(struct sbx_egress_run *run)
{
	struct sbx_egress *eg = run->eg;

	pthread_mutex_lock(&eg->mu);
	if (--run->refs > 0) {
		pthread_mutex_unlock(&eg->mu);
		return;
	}
	egress_record_free(run);
	pthread_mutex_destroy(&run->rec_mu);
	free(run->run_id);
	free(run->identity);
	free(run->policy_digest);
	free(run->rules);
	free(run);
	egress_unref_unlock(eg);
}

/* ---- the loop's side ---- */

static void listener_free(struct egress_listener *l)
{
	if (l->ev)
		event_free(l->ev);
	close(l->fd);
	free(l);
}

static void listeners_enable(struct sbx_egress_run *run, bool on)
{
	for (struct egress_listener *l = run->listeners; l; l = l->next)
		if (on && !l->dead)
			event_add(l->ev, NULL);
		else
			event_del(l->ev);
}

/* The run's accept budget is spent (or descriptors are): its listeners
 * are not polled for us, so connections wait in the sandbox's backlog. */
static void accepts_pause(struct sbx_egress_run *run, int64_t us)
{
	struct timeval tv = {.tv_sec = us / 1000000, .tv_usec = us % 1000000};

	if (!run->accepts_paused) {
		listeners_enable(run, false);
		run->accepts_paused = true;
	}
	event_add(run->accept_timer, &tv);
}

static void on_accept_timer(evutil_socket_t fd, short what, void *arg)
{
	struct sbx_egress_run *run = arg;

	run->accepts_paused = false;
	listeners_enable(run, true);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	struct egress_listener *l = arg;
	struct sbx_egress_run *run = l->run;

	for (int i = 0; i < EGRESS_ACCEPT_MANY; i++) {
		int64_t now = egress_now_us();
		int fd;

		if (egress_bucket_available(&run->accepts, now) < 1) {
			int64_t us = egress_bucket_wait_us(&run->accepts, 1, now);

			accepts_pause(run, us > 0 ? us : 1000);
			return;
		}
		fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (fd < 0 &&
		    (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
			/* Out of descriptors for a moment: polling on would
			 * spin on the same pending connection. */
			accepts_pause(run, 100 * 1000);
			return;
		}
		if (fd < 0) {
			fprintf(stderr,
				"sbxd: egress: run %s exec %llu: accept: %s: listener closed\n",
				run->run_id, (unsigned long long)l->exec_id, strerror(errno));
			l->dead = true;
			event_del(l->ev);
			return;
		}
		egress_bucket_take(&run->accepts, 1, now);
		egress_conn_start(run, fd);
	}
}

static void loop_listen(struct sbx_egress *eg, struct sbx_egress_run *run, uint64_t exec_id, int fd)
{
	struct egress_listener *l;
	int flags = fcntl(fd, F_GETFL);

	if (run->loop_closed) {
		close(fd);
		return;
	}
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
	    !(l = calloc(1, sizeof(*l)))) {
		fprintf(stderr, "sbxd: egress: run %s exec %llu: listener refused: %s\n",
			run->run_id, (unsigned long long)exec_id, strerror(errno));
		close(fd);
		return;
	}
	l->run = run;
	l->exec_id = exec_id;
	l->fd = fd;
	l->ev = event_new(eg->base, fd, EV_READ | EV_PERSIST, on_accept, l);
	if (!l->ev) {
		fprintf(stderr, "sbxd: egress: run %s: out of memory for a listener\n",
			run->run_id);
		listener_free(l);
		return;
	}
	l->next = run->listeners;
	run->listeners = l;
	if (!run->accepts_paused)
		event_add(l->ev, NULL);
}

static void loop_unlisten(struct sbx_egress_run *run, uint64_t exec_id)
{
	struct egress_listener **p = &run->listeners;

	while (*p) {
		struct egress_listener *l = *p;

		if (l->exec_id == exec_id) {
			*p = l->next;
			listener_free(l);
		} else {
			p = &l->next;
		}
	}
}

/* Closes everything of run's, records written, and says so to whoever
 * waits in sbx_egress_run_close. Drops eg->runs' reference. */
static void loop_close_run(struct sbx_egress *eg, struct sbx_egress_run *run)
{
	bool listed;

	if (!run->loop_closed) {
		run->loop_closed = true;
		while (run->listeners) {
			struct egress_listener *l = run->listeners;

			run->listeners = l->next;
			listener_free(l);
		}
		while (run->conns)
			egress_conn_end(run->conns, "torn_down");
		if (run->accept_timer) {
			event_free(run->accept_timer);
			run->accept_timer = NULL;
		}
	}
	pthread_mutex_lock(&eg->mu);
	listed = run->listed;
	if (listed) {
		if (run->prev)
			run->prev->next = run->next;
		else
			eg->runs = run->next;
		if (run->next)
			run->next->prev = run->prev;
		run->listed = false;
	}
	run->closed = true;
	pthread_cond_broadcast(&eg->cv);
	pthread_mutex_unlock(&eg->mu);
	if (listed)
		run_unref(run);
}

static void loop_take_run(struct sbx_egress *eg, struct sbx_egress_run *run)
{
	/* The accept timer is the loop's: made here, on the loop's base. */
	if (!run->accept_timer && !run->loop_closed)
		run->accept_timer = evtimer_new(eg->base, on_accept_timer, run);
}

/* Runs one command; returns whether it was STOP. */
static bool loop_command(struct sbx_egress *eg, struct egress_cmd *cmd)
{
	bool stop = false;

	if (cmd->run)
		loop_take_run(eg, cmd->run);
	switch (cmd->kind) {
	case EGRESS_CMD_LISTEN:
		if (!cmd->run->accept_timer)
			close(cmd->fd); /* out of memory for its timer */
		else
			loop_listen(eg, cmd->run, cmd->exec_id, cmd->fd);
		break;
	case EGRESS_CMD_UNLISTEN:
		loop_unlisten(cmd->run, cmd->exec_id);
		break;
	case EGRESS_CMD_CLOSE:
		loop_close_run(eg, cmd->run);
		break;
	case EGRESS_CMD_STOP:
		stop = true;
		break;
	}
	if (cmd->run)
		run_unref(cmd->run);
	free(cmd);
	return stop;
}

static void loop_stop(struct sbx_egress *eg)
{
	struct egress_cmd *left;

	/* No command is queued past this point: sbx_egress_* see !taking
	 * and do their part themselves. */
	pthread_mutex_lock(&eg->mu);
	eg->taking = false;
	left = eg->cmds;
	eg->cmds = NULL;
	eg->cmds_tail = &eg->cmds;
	pthread_mutex_unlock(&eg->mu);
	while (left) {
		struct egress_cmd *next = left->next;

		loop_command(eg, left);
		left = next;
	}
	for (;;) {
		struct sbx_egress_run *run;

		pthread_mutex_lock(&eg->mu);
		run = eg->runs;
		if (run)
			run->refs++;
		pthread_mutex_unlock(&eg->mu);
		if (!run)
			break;
		loop_take_run(eg, run);
		loop_close_run(eg, run);
		run_unref(run);
	}
	event_base_loopbreak(eg->base);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
	struct sbx_egress *eg = arg;
	struct egress_cmd *cmds;

	pthread_mutex_lock(&eg->mu);
	cmds = eg->cmds;
	eg->cmds = NULL;
	eg->cmds_tail = &eg->cmds;
	pthread_mutex_unlock(&eg->mu);
	while (cmds) {
		struct egress_cmd *next = cmds->next;

		if (loop_command(eg, cmds)) {
			/* Commands queued behind STOP run in loop_stop. */
			pthread_mutex_lock(&eg->mu);
			if (next) {
				struct egress_cmd *last = next;

				while (last->next)
					last = last->next;
				last->next = eg->cmds;
				if (!eg->cmds)
					eg->cmds_tail = &last->next;
				eg->cmds = next;
			}
			pthread_mutex_unlock(&eg->mu);
			loop_stop(eg);
			return;
		}
		cmds = next;
	}
}

static void *egress_thread(void *arg)
{
	struct sbx_egress *eg = arg;

	event_base_loop(eg->base, EVLOOP_NO_EXIT_ON_EMPTY);
	/* Cancelled lookups call back once more (deferred): let them free
	 * what they hold before the resolver goes. */
	for (int i = 0; i < 4; i++)
		event_base_loop(eg->base, EVLOOP_NONBLOCK);
	return NULL;
}

/* Queues cmd and wakes the loop; false (cmd not taken) once the loop no
 * longer takes commands. */
static bool queue(struct sbx_egress *eg, struct egress_cmd *cmd)
{
	bool taken;

	pthread_mutex_lock(&eg->mu);
	taken = eg->taking;
	if (taken) {
		if (cmd->run)
			cmd->run->refs++;
		cmd->next = NULL;
		*eg->cmds_tail = cmd;
		eg->cmds_tail = &cmd->next;
		event_active(eg->wake, EV_READ, 0);
	}
	pthread_mutex_unlock(&eg->mu);
	return taken;
}

/* ---- start, stop ---- */

/* connections_max, lowered so that every connection's descriptors fit in
 * half of RLIMIT_NOFILE. */
static uint32_t connections_fit(uint32_t want)
{
	struct rlimit rl;
	uint64_t fit;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return want;
	fit = (uint64_t)rl.rlim_cur / 2 / EGRESS_FDS_PER_CONN;
	if (fit < 1)
		fit = 1;
	if (want > fit) {
		fprintf(stderr,
			"sbxd: egress.connections_max lowered from %u to %llu: %d descriptors "
			"each must fit in half of RLIMIT_NOFILE %llu\n",
			want, (unsigned long long)fit, EGRESS_FDS_PER_CONN,
			(unsigned long long)rl.rlim_cur);
		return (uint32_t)fit;
	}
	return want;
}

static int resolver_init(struct sbx_egress *eg, const struct sbx_config_egress *cfg,
			 struct sbx_err *err)
{
	int rc;

	/* flags 0: no /etc/resolv.conf nor /etc/hosts behind the config's back. */
	eg->dns = evdns_base_new(eg->base, 0);
	if (!eg->dns)
		return sbx_fail(err, "egress: cannot make the resolver");
	if (cfg->resolv_conf && cfg->resolv_conf[0]) {
		/* NO_DEFAULT: a file without nameservers means none (a lookup
		 * of a name not in hosts_file is refused at once), not
		 * libevent's 127.0.0.1. */
		rc = evdns_base_resolv_conf_parse(
		    eg->dns, DNS_OPTION_NAMESERVERS | DNS_OPTION_NAMESERVERS_NO_DEFAULT,
		    cfg->resolv_conf);
		if (rc != 0 && rc != 6)
			return sbx_fail(err, "egress.resolv_conf %s: cannot be read (evdns %d)",
					cfg->resolv_conf, rc);
	}
	if (cfg->hosts_file && cfg->hosts_file[0] &&
	    evdns_base_load_hosts(eg->dns, cfg->hosts_file) != 0)
		return sbx_fail(err, "egress.hosts_file %s: cannot be read", cfg->hosts_file);
	eg->have_nameservers = evdns_base_count_nameservers(eg->dns) > 0;
	return 0;
}

static void loop_parts_free(struct sbx_egress *eg)
{
	if (eg->dns)
		evdns_base_free(eg->dns, 0);
	if (eg->wake)
		event_free(eg->wake);
	if (eg->base)
		event_base_free(eg->base);
	eg->dns = NULL;
	eg->wake = NULL;
	eg->base = NULL;
}

int sbx_egress_start(const struct sbx_config_egress *cfg, struct sbx_egress **out,
		     struct sbx_err *err)
{
	struct sbx_egress *eg;
	sigset_t all, old;
	int rc;

	*out = NULL;
	pthread_once(&threads_once, use_pthreads);
	if (threads_rc != 0)
		return sbx_fail(err, "egress: libevent's pthread locking");
	if (!(eg = calloc(1, sizeof(*eg))))
		return sbx_fail_errno(err, "egress");
	pthread_mutex_init(&eg->mu, NULL);
	pthread_cond_init(&eg->cv, NULL);
	eg->refs = 1;
	eg->cmds_tail = &eg->cmds;
	eg->head_seconds = cfg->head_seconds;
	eg->lookup_seconds = cfg->lookup_seconds;
	eg->connect_seconds = cfg->connect_seconds;
	eg->idle_seconds = cfg->idle_seconds;
	eg->connections_per_run = cfg->connections_per_run;
	eg->connections_max = connections_fit(cfg->connections_max);
	eg->records_per_run = cfg->records_per_run;
	eg->accepts_per_run_per_second = cfg->accepts_per_run_per_second;
	if (egress_limits_init(eg, cfg, err) < 0)
		goto fail;
	if (!(eg->base = event_base_new())) {
		sbx_fail(err, "egress: cannot make the event loop");
		goto fail;
	}
	if (resolver_init(eg, cfg, err) < 0)
		goto fail;
	if (!(eg->wake = event_new(eg->base, -1, 0, on_wake, eg))) {
		sbx_fail(err, "egress: out of memory");
		goto fail;
	}
	eg->taking = true;
	/* The thread takes no signal: sbxd's are the main thread's, and a
	 * SIGPIPE that splice(2) raises on a socket the peer closed stays
	 * pending on this thread, harmless (EPIPE says the same). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&eg->thread, NULL, egress_thread, eg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		sbx_fail_errnum(err, rc, "egress: thread");
		goto fail;
	}
	*out = eg;
	return 0;
fail:
	loop_parts_free(eg);
	egress_free(eg);
	return -1;
}

void sbx_egress_stop(struct sbx_egress *eg)
{
	struct egress_cmd *cmd;

	if (!eg)
		return;
	cmd = calloc(1, sizeof(*cmd));
	pthread_mutex_lock(&eg->mu);
	if (cmd) {
		cmd->kind = EGRESS_CMD_STOP;
		*eg->cmds_tail = cmd;
		eg->cmds_tail = &cmd->next;
	} else {
		/* No memory for a command: the loop's own exit path still
		 * closes everything once it breaks. */
		event_base_loopbreak(eg->base);
	}
	event_active(eg->wake, EV_READ, 0);
	pthread_mutex_unlock(&eg->mu);
	pthread_join(eg->thread, NULL);
	pthread_mutex_lock(&eg->mu);
	bool clean = !eg->taking;
	pthread_mutex_unlock(&eg->mu);
	if (!clean)
		loop_stop(eg); /* the thread is gone: the same work here */
	loop_parts_free(eg);
	pthread_mutex_lock(&eg->mu);
	egress_unref_unlock(eg);
}

/* ---- runs ---- */

struct sbx_egress_run *sbx_egress_run_open(struct sbx_egress *eg,
					   const struct sbx_egress_run_info *info,
					   struct sbx_err *err)
{
	struct sbx_egress_run *run = calloc(1, sizeof(*run));
	const Sbx__V1__Egress *p = info->policy;
	size_t n = p ? p->n_allow : 0;

	if (!run)
		return sbx_fail_errno(err, "egress run"), NULL;
	run->eg = eg;
	run->refs = 1;
	pthread_mutex_init(&run->rec_mu, NULL);
	run->run_id = strdup(info->run_id ? info->run_id : "");
	run->identity = info->identity ? strdup(info->identity) : NULL;
	run->policy_digest = info->policy_digest ? strdup(info->policy_digest) : NULL;
	run->rules = calloc(n ? n : 1, sizeof(*run->rules));
	if (!run->run_id || (info->identity && !run->identity) ||
	    (info->policy_digest && !run->policy_digest) || !run->rules) {
		pthread_mutex_lock(&eg->mu);
		eg->refs++;
		pthread_mutex_unlock(&eg->mu);
		run_unref(run);
		return sbx_fail_errnum(err, ENOMEM, "egress run"), NULL;
	}
	for (size_t i = 0; i < n; i++) {
		const Sbx__V1__EgressRule *src = p->allow[i];
		struct egress_rule *r = &run->rules[run->n_rules];

		if (!src->host || strlen(src->host) >= sizeof(r->host) || src->port == 0 ||
		    src->port > 65535)
			continue; /* the policy parser never lets one through */
		snprintf(r->host, sizeof(r->host), "%s", src->host);
		r->kind = sbx_hostname_kind(r->host);
		r->port = (uint16_t)src->port;
		r->allow_private = src->allow_private;
		r->max_concurrent = src->max_concurrent;
		r->connections_per_minute = src->connections_per_minute;
		r->bytes_per_second = src->bytes_per_second;
		run->n_rules++;
	}
	run->alert_bytes = p ? p->alert_bytes : 0;
	run->max_bytes = p ? p->max_bytes : 0;
	run->next_connection = 1;
	run->other_row = -1;
	egress_rules_init(run, egress_now_us());
	egress_bucket_init(&run->accepts, eg->accepts_per_run_per_second,
			   2 * (uint64_t)eg->accepts_per_run_per_second, egress_now_us());

	pthread_mutex_lock(&eg->mu);
	eg->refs++;
	if (eg->taking) {
		run->refs++; /* eg->runs' */
		run->listed = true;
		run->next = eg->runs;
		if (eg->runs)
			eg->runs->prev = run;
		eg->runs = run;
	} else {
		/* The proxy stopped: a run that refuses its listeners. */
		run->closed = true;
		run->loop_closed = true;
	}
	pthread_mutex_unlock(&eg->mu);
	return run;
}

int sbx_egress_run_listen(struct sbx_egress_run *er, uint64_t exec_id, int listen_fd,
			  struct sbx_err *err)
{
	struct egress_cmd *cmd = calloc(1, sizeof(*cmd));
	bool closed;

	pthread_mutex_lock(&er->eg->mu);
	closed = er->closed || er->close_queued;
	pthread_mutex_unlock(&er->eg->mu);
	if (closed || !cmd) {
		free(cmd);
		close(listen_fd);
		return closed ? sbx_fail(err, "egress: the run's proxy is closed")
			      : sbx_fail_errnum(err, ENOMEM, "egress: listener");
	}
	cmd->kind = EGRESS_CMD_LISTEN;
	cmd->run = er;
	cmd->exec_id = exec_id;
	cmd->fd = listen_fd;
	if (!queue(er->eg, cmd)) {
		free(cmd);
		close(listen_fd);
		return sbx_fail(err, "egress: the proxy stopped");
	}
	return 0;
}

void sbx_egress_run_unlisten(struct sbx_egress_run *er, uint64_t exec_id)
{
	struct egress_cmd *cmd = calloc(1, sizeof(*cmd));

	if (!cmd) {
		/* The listener then stays until the run closes. */
		fprintf(stderr, "sbxd: egress: run %s: out of memory to close a listener\n",
			er->run_id);
		return;
	}
	cmd->kind = EGRESS_CMD_UNLISTEN;
	cmd->run = er;
	cmd->exec_id = exec_id;
	if (!queue(er->eg, cmd))
		free(cmd);
}

void sbx_egress_run_close(struct sbx_egress_run *er)
{
	struct sbx_egress *eg = er->eg;
	struct egress_cmd *cmd = NULL;
	bool ask;

	pthread_mutex_lock(&eg->mu);
	ask = !er->closed && !er->close_queued && eg->taking;
	pthread_mutex_unlock(&eg->mu);
	if (ask && (cmd = calloc(1, sizeof(*cmd)))) {
		cmd->kind = EGRESS_CMD_CLOSE;
		cmd->run = er;
		pthread_mutex_lock(&eg->mu);
		er->close_queued = true;
		pthread_mutex_unlock(&eg->mu);
		if (!queue(eg, cmd))
			free(cmd); /* stopping: the loop closes every listed run */
	} else if (ask) {
		/* No memory for the command: the loop closes it when it
		 * stops; until then it is closed for new listeners only. */
		fprintf(stderr, "sbxd: egress: run %s: out of memory to close it\n", er->run_id);
		pthread_mutex_lock(&eg->mu);
		er->close_queued = true;
		pthread_mutex_unlock(&eg->mu);
		return;
	}
	pthread_mutex_lock(&eg->mu);
	/* A listed run is closed by its CLOSE command or by the loop's
	 * stop; an unlisted one was closed already. */
	while (!er->closed)
		pthread_cond_wait(&eg->cv, &eg->mu);
	pthread_mutex_unlock(&eg->mu);
}

void sbx_egress_run_free(struct sbx_egress_run *er)
{
	if (!er)
		return;
	sbx_egress_run_close(er);
	run_unref(er);
}
