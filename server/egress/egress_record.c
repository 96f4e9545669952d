/* SPDX-License-Identifier: Apache-2.0 */
/* What the proxy keeps of each connection: one decision line and one
 * close line in the audit log (exempt from the per-identity audit rate's
 * dropping: the run's and its identity's accept budgets bound them, and
 * the identity's budget of egress line bytes), a record for Status, and the run's
 * totals per requested host:port for Status and the manifest.
 *
 * Records: the allowed connections still relaying (bytes so far, open =
 * true) and a ring of the newest closed or refused ones, records_per_run
 * in all in a Status answer, the newest that fit its byte budget; older
 * ones are only counted (egress_records_dropped). A refused connection's record goes to the ring
 * at its decision; its close line follows when its answer was read.
 * Totals are never truncated: at most EGRESS_TOTALS_MAX rows per run, the
 * last of which ("(other)", port 0) sums every host:port past the rest; an
 * answer whose budget holds fewer rows sums the rest there too
 * (destinations_fit), so every connection and byte is still counted.
 * Connections whose head was unreadable are a row of host "" and port 0.
 *
 * Everything here that Status reads is under the run's rec_mu; the loop
 * holds it only to copy a few numbers, never across a write(2). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "audit.h"
#include "clock.h"
#include "egress_internal.h"
#include "metrics.h"
#include "util.h"

/* rec_mu held: the row of host:port, or -1 (out of memory). */
static int total_row(struct sbx_egress_run *run, const char *host, uint16_t port)
{
	struct egress_total *t;

	for (size_t i = 0; i < run->n_totals; i++)
		if (run->totals[i].port == port && !strcmp(run->totals[i].host, host))
			return (int)i;
	if (run->n_totals >= EGRESS_TOTALS_MAX - 1) {
		if (run->other_row >= 0)
			return run->other_row;
		host = EGRESS_OTHER_HOST;
		port = 0;
	}
	if (run->n_totals == run->totals_cap) {
		size_t cap = run->totals_cap ? 2 * run->totals_cap : 8;

		if (cap > EGRESS_TOTALS_MAX)
			cap = EGRESS_TOTALS_MAX;
		t = realloc(run->totals, cap * sizeof(*t));
		if (!t)
			return -1;
		run->totals = t;
		run->totals_cap = cap;
	}
	t = &run->totals[run->n_totals];
	memset(t, 0, sizeof(*t));
	snprintf(t->host, sizeof(t->host), "%s", host);
	t->port = port;
	if (!strcmp(host, EGRESS_OTHER_HOST) && port == 0)
		run->other_row = (int)run->n_totals;
	return (int)run->n_totals++;
}

/* rec_mu held: keeps a copy of rec among the newest records_per_run. */
static void ring_push(struct sbx_egress_run *run, const struct egress_record *rec)
{
	size_t max = run->eg->records_per_run;

	if (run->ring_len < max && run->ring_len == run->ring_cap) {
		size_t cap = run->ring_cap ? 2 * run->ring_cap : 16;
		struct egress_record *r;

		if (cap > max)
			cap = max;
		/* Grown only while nothing wrapped: start is 0 until full. */
		r = realloc(run->ring, cap * sizeof(*r));
		if (r) {
			run->ring = r;
			run->ring_cap = cap;
		}
	}
	if (run->ring_len < run->ring_cap) {
		run->ring[(run->ring_start + run->ring_len) % run->ring_cap] = *rec;
		run->ring_len++;
		return;
	}
	run->dropped++;
	if (!run->ring_cap)
		return;
	run->ring[run->ring_start] = *rec;
	run->ring_start = (run->ring_start + 1) % run->ring_cap;
}

/* Written whole (never dropped), and charged to the run's identity: its
 * budget of egress lines pauses its runs' accepts once spent. */
static void audit(struct sbx_egress_run *run, const char *event, json_t *fields)
{
	egress_identity_lines(
	    run, sbx_audit_exempt(event, run->run_id, run->identity, run->policy_digest, fields));
}

/* The metrics' decision of a refusal's reason (egress_conn.c's names). */
static enum sbx_metrics_egress decision_of(bool allowed, const char *reason)
{
	if (allowed)
		return SBX_EGRESS_ALLOWED;
	if (!strcmp(reason, "not_allowed") || !strcmp(reason, "private_address") ||
	    !strcmp(reason, "max_bytes"))
		return SBX_EGRESS_DENIED;
	if (!strcmp(reason, "rate_limited") || !strcmp(reason, "too_many_connections"))
		return SBX_EGRESS_LIMITED;
	return SBX_EGRESS_FAILED;
}

void egress_record_decision(struct egress_conn *c, bool allowed, const char *reason,
			    unsigned status)
{
	struct sbx_egress_run *run = c->run;
	struct egress_record *r = &c->rec;
	int64_t now = egress_now_us();

	c->decided = true;
	sbx_metrics_add(SBX_M_EGRESS_CONNS, decision_of(allowed, reason), 1);
	pthread_mutex_lock(&run->rec_mu);
	r->time_unix_ms = sbx_unix_ms();
	r->allowed = allowed;
	snprintf(r->reason, sizeof(r->reason), "%s", reason);
	r->status = status;
	r->duration_ms = (uint64_t)(now - c->accept_us) / 1000;
	c->total_row = total_row(run, r->host, r->port);
	if (c->total_row >= 0) {
		if (allowed)
			run->totals[c->total_row].connections++;
		else
			run->totals[c->total_row].denied++;
	}
	if (allowed) {
		r->open = true;
		c->open_prev = NULL;
		c->open_next = run->open_head;
		if (run->open_head)
			run->open_head->open_prev = c;
		run->open_head = c;
	} else {
		ring_push(run, r);
	}
	pthread_mutex_unlock(&run->rec_mu);
	audit(run, "egress_decision",
	      json_pack("{s:I, s:s, s:i, s:s, s:s, s:s, s:i, s:s, s:i, s:i}", "connection",
			(json_int_t)r->connection, "host", r->host, "port", (int)r->port, "method",
			r->method, "decision", allowed ? "allowed" : "denied", "reason", r->reason,
			"status", (int)r->status, "address", r->address, "lookup_ms",
			(int)r->lookup_ms, "connect_ms", (int)r->connect_ms));
}

void egress_record_bytes(struct egress_conn *c)
{
	pthread_mutex_lock(&c->run->rec_mu);
	c->rec.bytes_out = c->dir[0].bytes;
	c->rec.bytes_in = c->dir[1].bytes;
	pthread_mutex_unlock(&c->run->rec_mu);
}

void egress_record_close(struct egress_conn *c, const char *reason)
{
	struct sbx_egress_run *run = c->run;
	struct egress_record *r = &c->rec;
	uint64_t duration = (uint64_t)(egress_now_us() - c->accept_us) / 1000;
	char why[EGRESS_REASON_MAX];

	snprintf(why, sizeof(why), "%s", reason);
	pthread_mutex_lock(&run->rec_mu);
	r->bytes_out = c->dir[0].bytes;
	r->bytes_in = c->dir[1].bytes;
	if (r->open) {
		if (c->open_prev)
			c->open_prev->open_next = c->open_next;
		else
			run->open_head = c->open_next;
		if (c->open_next)
			c->open_next->open_prev = c->open_prev;
		r->open = false;
		r->duration_ms = duration;
		snprintf(r->reason, sizeof(r->reason), "%s", why);
		sbx_metrics_add(SBX_M_EGRESS_BYTES, SBX_EGRESS_OUT, r->bytes_out);
		sbx_metrics_add(SBX_M_EGRESS_BYTES, SBX_EGRESS_IN, r->bytes_in);
		if (c->total_row >= 0) {
			run->totals[c->total_row].bytes_out += r->bytes_out;
			run->totals[c->total_row].bytes_in += r->bytes_in;
		}
		ring_push(run, r);
	}
	pthread_mutex_unlock(&run->rec_mu);
	audit(run, "egress_close",
	      json_pack("{s:I, s:s, s:i, s:s, s:s, s:I, s:I, s:I}", "connection",
			(json_int_t)r->connection, "host", r->host, "port", (int)r->port, "address",
			r->address, "reason", why, "bytes_out", (json_int_t)r->bytes_out,
			"bytes_in", (json_int_t)r->bytes_in, "duration_ms", (json_int_t)duration));
}

static void alert(struct sbx_egress_run *run, const char *text)
{
	char *copy = strdup(text);

	pthread_mutex_lock(&run->rec_mu);
	if (copy && run->n_alerts < SBX_ARRAY_SIZE(run->alerts))
		run->alerts[run->n_alerts++] = copy;
	else
		free(copy);
	pthread_mutex_unlock(&run->rec_mu);
}

void egress_record_alert(struct sbx_egress_run *run)
{
	char text[160];

	run->alerted = true;
	snprintf(text, sizeof(text), "egress: %llu bytes through the proxy passed alert_bytes %llu",
		 (unsigned long long)run->bytes, (unsigned long long)run->alert_bytes);
	alert(run, text);
	audit(run, "egress_alert",
	      json_pack("{s:I, s:I}", "bytes", (json_int_t)run->bytes, "alert_bytes",
			(json_int_t)run->alert_bytes));
}

void egress_record_max(struct sbx_egress_run *run)
{
	char text[160];

	snprintf(text, sizeof(text),
		 "egress: %llu bytes through the proxy reached max_bytes %llu: its connections "
		 "are cut off",
		 (unsigned long long)run->bytes, (unsigned long long)run->max_bytes);
	alert(run, text);
	audit(run, "egress_max_bytes",
	      json_pack("{s:I, s:I}", "bytes", (json_int_t)run->bytes, "max_bytes",
			(json_int_t)run->max_bytes));
}

void egress_record_free(struct sbx_egress_run *run)
{
	free(run->ring);
	free(run->totals);
	for (size_t i = 0; i < run->n_alerts; i++)
		free(run->alerts[i]);
	run->ring = NULL;
	run->totals = NULL;
	run->n_alerts = 0;
}

/* ---- reports ---- */

/* rec_mu held: an open record's connection knows its start. */
static int64_t record_accept_ms(struct sbx_egress_run *er, const struct egress_record *r,
				int64_t now_ms)
{
	if (r->open)
		for (struct egress_conn *c = er->open_head; c; c = c->open_next)
			if (&c->rec == r)
				return c->accept_us / 1000;
	return now_ms - (int64_t)r->duration_ms;
}

/* The copies below lose nothing: the report's fields are as wide as the
 * proxy's own. */
_Static_assert(sizeof(((struct sbx_egress_record *)0)->reason) == EGRESS_REASON_MAX,
	       "reason as wide as the proxy's");
_Static_assert(sizeof(((struct sbx_egress_record *)0)->address) ==
		   sizeof(((struct egress_record *)0)->address),
	       "address as wide as the proxy's");
_Static_assert(sizeof(((struct sbx_egress_record *)0)->method) ==
		   sizeof(((struct egress_record *)0)->method),
	       "method as wide as the proxy's");

static void record_copy(struct sbx_egress_record *d, const struct egress_record *r, int64_t now_ms,
			int64_t accept_ms)
{
	d->time_unix_ms = r->time_unix_ms;
	snprintf(d->host, sizeof(d->host), "%s", r->host);
	d->port = r->port;
	d->allowed = r->allowed;
	d->open = r->open;
	d->bytes_out = r->bytes_out;
	d->bytes_in = r->bytes_in;
	snprintf(d->reason, sizeof(d->reason), "%s", r->reason);
	d->connection = r->connection;
	snprintf(d->address, sizeof(d->address), "%s", r->address);
	d->lookup_ms = r->lookup_ms;
	d->connect_ms = r->connect_ms;
	d->duration_ms = r->open ? (uint64_t)(now_ms - accept_ms) : r->duration_ms;
	snprintf(d->method, sizeof(d->method), "%s", r->method);
	d->status = r->status;
}

static int by_connection(const void *a, const void *b)
{
	const struct egress_record *x = *(const struct egress_record *const *)a;
	const struct egress_record *y = *(const struct egress_record *const *)b;

	return x->connection < y->connection ? -1 : x->connection > y->connection;
}

/* rec_mu held: the totals with the open connections' bytes so far. */
static int report_totals(struct sbx_egress_run *er, struct sbx_egress_report *out)
{
	out->totals = calloc(er->n_totals ? er->n_totals : 1, sizeof(*out->totals));
	if (!out->totals)
		return -1;
	for (size_t i = 0; i < er->n_totals; i++) {
		const struct egress_total *t = &er->totals[i];
		struct sbx_egress_total *d = &out->totals[i];

		snprintf(d->host, sizeof(d->host), "%s", t->host);
		d->port = t->port;
		d->connections = t->connections;
		d->denied = t->denied;
		d->bytes_out = t->bytes_out;
		d->bytes_in = t->bytes_in;
	}
	out->n_totals = er->n_totals;
	for (struct egress_conn *c = er->open_head; c; c = c->open_next)
		if (c->total_row >= 0 && (size_t)c->total_row < out->n_totals) {
			out->totals[c->total_row].bytes_out += c->rec.bytes_out;
			out->totals[c->total_row].bytes_in += c->rec.bytes_in;
		}
	return 0;
}

/* rec_mu held: the newest records_per_run records (closed, refused and
 * still open), oldest first; the older ones only counted. */
static int report_records(struct sbx_egress_run *er, struct sbx_egress_report *out)
{
	size_t n_open = 0, total, show, k = 0;
	_cleanup_free_ struct egress_record **all = NULL;
	int64_t now_ms = egress_now_us() / 1000;

	for (struct egress_conn *c = er->open_head; c; c = c->open_next)
		n_open++;
	total = er->ring_len + n_open;
	show = total < er->eg->records_per_run ? total : er->eg->records_per_run;
	if (!(all = calloc(total ? total : 1, sizeof(*all))))
		return -1;
	for (size_t i = 0; i < er->ring_len; i++)
		all[k++] = &er->ring[(er->ring_start + i) % er->ring_cap];
	for (struct egress_conn *c = er->open_head; c; c = c->open_next)
		all[k++] = &c->rec;
	qsort(all, total, sizeof(*all), by_connection);
	if (!(out->records = calloc(show ? show : 1, sizeof(*out->records))))
		return -1;
	for (size_t i = 0; i < show; i++) {
		const struct egress_record *r = all[total - show + i];

		record_copy(&out->records[i], r, now_ms, record_accept_ms(er, r, now_ms));
	}
	out->n_records = show;
	out->records_dropped = er->dropped + (total - show);
	return 0;
}

static int report_locked(struct sbx_egress_run *er, struct sbx_egress_report *out)
{
	if (report_totals(er, out) < 0 || report_records(er, out) < 0)
		return -1;
	for (size_t i = 0; i < er->n_alerts && i < SBX_EGRESS_ALERTS_MAX; i++) {
		if (!(out->alerts[i] = strdup(er->alerts[i])))
			return -1;
		out->n_alerts++;
	}
	return 0;
}

int sbx_egress_run_report(struct sbx_egress_run *er, struct sbx_egress_report *out,
			  struct sbx_err *err)
{
	int rc;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&er->rec_mu);
	rc = report_locked(er, out);
	pthread_mutex_unlock(&er->rec_mu);
	if (rc < 0) {
		sbx_egress_report_free(out);
		return sbx_fail_errnum(err, ENOMEM, "egress report");
	}
	return 0;
}

void sbx_egress_report_free(struct sbx_egress_report *r)
{
	if (!r)
		return;
	free(r->records);
	free(r->totals);
	for (size_t i = 0; i < r->n_alerts; i++)
		free(r->alerts[i]);
	memset(r, 0, sizeof(*r));
}
