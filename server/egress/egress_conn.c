/* SPDX-License-Identifier: Apache-2.0 */
/* One connection from a sandbox: its head, the decision, a refusal's
 * answer, and its end.
 *
 *   HEAD --(parsed, listed, under its limits)--> RESOLVE --> CONNECT --> RELAY
 *     \__ refused at any step: ANSWER (status line, reason header) --> LINGER
 *
 * Every connection writes exactly one decision line (egress_record.c) and
 * exactly one close line, whatever path it takes; the states only say which
 * events and timer it holds. A refused client gets its answer, then has a
 * moment to read it (we shut our side and drop what it still sends until
 * it closes): closing with its bytes unread would send a reset that can
 * destroy the answer before it is read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egress_internal.h"

static void on_timer(evutil_socket_t fd, short what, void *arg);
static bool conn_head_read(struct egress_conn *c);

void egress_conn_arm_timer(struct egress_conn *c, int64_t us)
{
	struct timeval tv = {.tv_sec = us / 1000000, .tv_usec = us % 1000000};

	event_add(c->timer, &tv);
}

static const char *status_text(unsigned status)
{
	switch (status) {
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 408:
		return "Request Timeout";
	case 429:
		return "Too Many Requests";
	case 431:
		return "Request Header Fields Too Large";
	case 501:
		return "Not Implemented";
	case 502:
		return "Bad Gateway";
	case 504:
		return "Gateway Timeout";
	case 505:
		return "HTTP Version Not Supported";
	}
	return "Error";
}

/* The one line of the answer's body: what the sandbox's program shows. */
static void answer_body(const struct egress_conn *c, const char *reason, char *out, size_t size)
{
	const char *host = c->head_parsed ? c->head.host : "";
	unsigned port = c->head_parsed ? c->head.port : 0;

	if (!strcmp(reason, "not_allowed"))
		snprintf(out, size, "sbx egress: %s:%u is not in this run's allowlist\n", host,
			 port);
	else if (!strcmp(reason, "private_address"))
		snprintf(out, size,
			 "sbx egress: %s resolves only to addresses the allowlist entry does "
			 "not allow (private, loopback or reserved)\n",
			 host);
	else if (!strcmp(reason, "lookup_failed"))
		snprintf(out, size, "sbx egress: %s could not be resolved\n", host);
	else if (!strcmp(reason, "connect_failed"))
		snprintf(out, size, "sbx egress: %s:%u refused or failed the connection\n", host,
			 port);
	else if (!strcmp(reason, "connect_timeout"))
		snprintf(out, size, "sbx egress: %s:%u did not answer in time\n", host, port);
	else if (!strcmp(reason, "rate_limited"))
		snprintf(out, size, "sbx egress: too many new connections to %s:%u\n", host, port);
	else if (!strcmp(reason, "too_many_connections"))
		snprintf(out, size, "sbx egress: too many open connections\n");
	else if (!strcmp(reason, "max_bytes"))
		snprintf(out, size, "sbx egress: this run's max_bytes is spent\n");
	else if (!strcmp(reason, "head_timeout"))
		snprintf(out, size, "sbx egress: the request head did not arrive in time\n");
	else if (!strcmp(reason, "head_too_large"))
		snprintf(out, size, "sbx egress: the request head is too large\n");
	else
		snprintf(out, size,
			 "sbx egress: the proxy takes CONNECT host:port or an absolute-form "
			 "http:// request\n");
}

static void conn_linger_start(struct egress_conn *c)
{
	/* Refused at accept (over connections_per_run or connections_max):
	 * no lingering, or the refused would hold descriptors past the bound. */
	if (!c->counted) {
		egress_conn_end(c, NULL);
		return;
	}
	/* Shut our side: the client reads the answer, then its end. */
	shutdown(c->cfd, SHUT_WR);
	c->state = EGRESS_LINGER;
	event_del(c->cwrite);
	event_add(c->cread, NULL);
}

/* ANSWER: writes what is left of dir[1].pre (the answer). */
static void conn_answer_write(struct egress_conn *c)
{
	struct egress_dir *d = &c->dir[1];

	while (d->pre_off < d->pre_len) {
		ssize_t n = send(c->cfd, d->pre + d->pre_off, d->pre_len - d->pre_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			event_add(c->cwrite, NULL);
			return;
		}
		if (n <= 0) {
			egress_conn_end(c, NULL);
			return;
		}
		d->pre_off += (size_t)n;
	}
	conn_linger_start(c);
}

void egress_conn_refuse(struct egress_conn *c, unsigned status, const char *reason,
			unsigned retry_after_s)
{
	char body[512], retry[48] = "";
	struct egress_dir *d = &c->dir[1];
	int n;

	if (c->decided) {
		egress_conn_end(c, "error");
		return;
	}
	egress_resolve_cancel(c);
	egress_record_decision(c, false, reason, status);
	answer_body(c, reason, body, sizeof(body));
	if (status == 429)
		snprintf(retry, sizeof(retry), "Retry-After: %u\r\n", retry_after_s);
	free(d->pre);
	d->pre = malloc(1024);
	if (!d->pre) {
		egress_conn_end(c, NULL);
		return;
	}
	n = snprintf(d->pre, 1024,
		     "HTTP/1.1 %u %s\r\nConnection: close\r\nContent-Type: text/plain\r\n"
		     "Content-Length: %zu\r\nX-Sbx-Egress-Reason: %s\r\n%s\r\n%s",
		     status, status_text(status), strlen(body), reason, retry, body);
	d->pre_len = n > 0 && n < 1024 ? (size_t)n : 0;
	d->pre_off = 0;
	if (c->uread)
		event_free(c->uread);
	if (c->uwrite)
		event_free(c->uwrite);
	c->uread = c->uwrite = NULL;
	if (c->ufd >= 0)
		close(c->ufd);
	c->ufd = -1;
	event_del(c->cread);
	c->state = EGRESS_ANSWER;
	egress_conn_arm_timer(c, EGRESS_LINGER_MS * 1000);
	conn_answer_write(c);
}

/* ---- the head ---- */

/* A whole head: is it allowed, and under its limits? */
static void conn_decide(struct egress_conn *c)
{
	struct sbx_egress_run *run = c->run;
	const char *reason;
	unsigned retry;

	if (c->head.host_kind == SBX_HOST_IPV6) {
		egress_conn_refuse(c, 403, "not_allowed", 0);
		return;
	}
	c->rule = egress_rule_find(run, c->head.host, c->head.host_kind, c->head.port);
	if (c->rule < 0) {
		egress_conn_refuse(c, 403, "not_allowed", 0);
		return;
	}
	if (run->maxed || (run->max_bytes && run->bytes >= run->max_bytes)) {
		egress_conn_refuse(c, 403, "max_bytes", 0);
		return;
	}
	c->dest = egress_dest_find(c->eg, c->head.host, c->head.host_kind, c->head.port);
	if (egress_limits_admit(c, &reason, &retry) < 0) {
		egress_conn_refuse(c, 429, reason, retry);
		return;
	}
	event_del(c->cread);
	event_del(c->timer);
	c->state = EGRESS_RESOLVE;
	egress_resolve_start(c);
}

/* Reads what the head has now; true: c waits for more of it (false: c
 * moved on, or ended). */
static bool conn_head_read(struct egress_conn *c)
{
	struct sbx_err err;
	int status = 400;
	ssize_t n;
	int rc;

	n = recv(c->cfd, c->buf + c->buf_len, EGRESS_HEAD_MAX - c->buf_len, MSG_DONTWAIT);
	if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
		return true;
	if (n <= 0) {
		/* It ended (or failed) before a whole head. */
		egress_conn_refuse(c, 400, "bad_request", 0);
		return false;
	}
	/* Parsing only when a line ended keeps a client that trickles a byte
	 * at a time from costing a parse per byte. */
	if (!memchr(c->buf + c->buf_len, '\n', (size_t)n) &&
	    c->buf_len + (size_t)n < EGRESS_HEAD_MAX) {
		c->buf_len += (size_t)n;
		return true;
	}
	c->buf_len += (size_t)n;
	rc = egress_head_parse(c->buf, c->buf_len, &c->head, &status, &err);
	if (rc == 0 && c->buf_len < EGRESS_HEAD_MAX)
		return true;
	if (rc <= 0) {
		if (rc == 0)
			status = 431;
		egress_conn_refuse(c, (unsigned)status,
				   status == 431 ? "head_too_large" : "bad_request", 0);
		return false;
	}
	c->head_parsed = true;
	snprintf(c->rec.host, sizeof(c->rec.host), "%s", c->head.host);
	c->rec.port = c->head.port;
	snprintf(c->rec.method, sizeof(c->rec.method), "%s", c->head.method);
	conn_decide(c);
	return false;
}

/* LINGER: the client's bytes after its answer, dropped until it closes. */
static void conn_linger_read(struct egress_conn *c)
{
	char sink[4096];

	for (;;) {
		ssize_t n = recv(c->cfd, sink, sizeof(sink), MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0 || (c->linger_read += (size_t)n) > EGRESS_LINGER_MAX) {
			egress_conn_end(c, NULL);
			return;
		}
	}
}

static void on_cread(evutil_socket_t fd, short what, void *arg)
{
	struct egress_conn *c = arg;

	if (c->state == EGRESS_HEAD)
		conn_head_read(c);
	else if (c->state == EGRESS_LINGER)
		conn_linger_read(c);
	else if (c->state == EGRESS_RELAY)
		egress_relay_pump(c, 0);
}

static void on_cwrite(evutil_socket_t fd, short what, void *arg)
{
	struct egress_conn *c = arg;

	if (c->state == EGRESS_ANSWER) {
		event_del(c->cwrite);
		conn_answer_write(c);
	} else if (c->state == EGRESS_RELAY) {
		egress_relay_pump(c, 1);
	}
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct egress_conn *c = arg;

	switch (c->state) {
	case EGRESS_HEAD:
		egress_conn_refuse(c, 408, "head_timeout", 0);
		break;
	case EGRESS_RESOLVE:
		egress_conn_refuse(c, 502, "lookup_failed", 0);
		break;
	case EGRESS_CONNECT:
		egress_conn_refuse(c, 504, "connect_timeout", 0);
		break;
	case EGRESS_RELAY: {
		int64_t idle = (int64_t)c->eg->idle_seconds * 1000000;
		int64_t quiet = egress_now_us() - c->last_us;

		if (quiet >= idle)
			egress_conn_end(c, "idle_timeout");
		else
			egress_conn_arm_timer(c, idle - quiet);
		break;
	}
	case EGRESS_ANSWER:
	case EGRESS_LINGER:
		egress_conn_end(c, NULL);
		break;
	}
}

void egress_conn_start(struct sbx_egress_run *run, int fd)
{
	struct sbx_egress *eg = run->eg;
	struct egress_conn *c = calloc(1, sizeof(*c));

	if (!c || !(c->buf = malloc(EGRESS_HEAD_MAX))) {
		/* No record can be kept: nothing of it is relayed either. */
		fprintf(stderr, "sbxd: egress: run %s: out of memory for a connection\n",
			run->run_id);
		free(c);
		close(fd);
		return;
	}
	c->eg = eg;
	c->run = run;
	c->cfd = fd;
	c->ufd = -1;
	c->rule = c->dest = -1;
	c->total_row = -1;
	c->dir[0].pipe_r = c->dir[0].pipe_w = c->dir[1].pipe_r = c->dir[1].pipe_w = -1;
	c->accept_us = egress_now_us();
	c->rec.connection = run->next_connection++;
	c->next = run->conns;
	if (run->conns)
		run->conns->prev = c;
	run->conns = c;
	c->cread = event_new(eg->base, fd, EV_READ | EV_PERSIST, on_cread, c);
	c->cwrite = event_new(eg->base, fd, EV_WRITE | EV_PERSIST, on_cwrite, c);
	c->timer = evtimer_new(eg->base, on_timer, c);
	if (!c->cread || !c->cwrite || !c->timer) {
		fprintf(stderr, "sbxd: egress: run %s: out of memory for a connection\n",
			run->run_id);
		egress_conn_end(c, "error");
		return;
	}
	/* Heads count: a sandbox opening connections it never writes to
	 * holds a place each. */
	if (run->n_conns >= eg->connections_per_run || eg->n_conns >= eg->connections_max) {
		egress_conn_refuse(c, 429, "too_many_connections", 1);
		return;
	}
	c->counted = true;
	run->n_conns++;
	eg->n_conns++;
	c->state = EGRESS_HEAD;
	egress_conn_arm_timer(c, (int64_t)eg->head_seconds * 1000000);
	/* A client writes its head right after connecting: it is often here
	 * already (one wakeup less). */
	if (conn_head_read(c))
		event_add(c->cread, NULL);
}

void egress_conn_end(struct egress_conn *c, const char *reason)
{
	struct sbx_egress_run *run = c->run;

	if (!c->decided)
		/* Ended before its decision (teardown, a failure): the one
		 * decision line still says so. */
		egress_record_decision(c, false, reason ? reason : "error", 0);
	egress_resolve_cancel(c);
	egress_record_close(c, reason ? reason : c->rec.reason);
	egress_limits_release(c);
	egress_relay_free(c);
	if (c->cread)
		event_free(c->cread);
	if (c->cwrite)
		event_free(c->cwrite);
	if (c->timer)
		event_free(c->timer);
	if (c->uread)
		event_free(c->uread);
	if (c->uwrite)
		event_free(c->uwrite);
	if (c->ufd >= 0)
		close(c->ufd);
	close(c->cfd);
	if (c->counted) {
		run->n_conns--;
		c->eg->n_conns--;
	}
	if (c->prev)
		c->prev->next = c->next;
	else
		run->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->head_parsed)
		egress_head_free(&c->head);
	free(c->dir[1].pre);
	free(c->dir[0].pre);
	free(c->buf);
	free(c);
}

void egress_conn_connected(struct egress_conn *c)
{
	struct egress_dir *out = &c->dir[0], *in = &c->dir[1];
	size_t early = c->buf_len - c->head.head_len;
	size_t lead = c->head.kind == EGRESS_HEAD_HTTP ? c->head.rewritten_len : 0;

	event_del(c->timer);
	egress_record_decision(c, true, "allowed", c->head.kind == EGRESS_HEAD_CONNECT ? 200 : 0);
	/* What the destination gets first: the rewritten head (plain HTTP)
	 * and the bytes the client sent past its head. */
	if (lead + early) {
		if (!(out->pre = malloc(lead + early))) {
			egress_conn_end(c, "error");
			return;
		}
		if (lead)
			memcpy(out->pre, c->head.rewritten, lead);
		memcpy(out->pre + lead, c->buf + c->head.head_len, early);
		out->pre_len = lead + early;
		out->pre_counted = true;
	}
	if (c->head.kind == EGRESS_HEAD_CONNECT) {
		static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";

		if (!(in->pre = strdup(ok))) {
			egress_conn_end(c, "error");
			return;
		}
		in->pre_len = sizeof(ok) - 1;
	}
	free(c->buf);
	c->buf = NULL;
	c->state = EGRESS_RELAY;
	if (egress_relay_start(c) < 0)
		return;
	/* Now rather than on the next readiness event (one wakeup less per
	 * connection): the 200 (or the rewritten head) and whatever is
	 * waiting. Every caller returns right after this, c may be gone. */
	if (egress_relay_pump(c, 1) == 0)
		egress_relay_pump(c, 0);
}
