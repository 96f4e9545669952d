/* SPDX-License-Identifier: Apache-2.0 */
/* What the proxy keeps of each connection: one decision line and one
 * close line in the audit log (exempt from the per-identity audit rate:
 * the run's accept budget bounds them), a record for Status, and the run's
 * totals per requested host:port for Status and the manifest.
 *
 * Records: the allowed connections still relaying (bytes so far, open =
 * true) and a ring of the newest closed or refused ones, records_per_run
 * in all in a Status answer; older ones are only counted
 * (egress_records_dropped). A refused connection's record goes to the ring
 * at its decision; its close line follows when its answer was read.
 * Totals are never truncated: at most EGRESS_TOTALS_MAX rows per run, the
 * last of which ("(other)", port 0) sums every host:port past the rest.
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

static void audit(struct sbx_egress_run *run, const char *event, json_t *fields)
{
	sbx_audit_exempt(event, run->run_id, run->identity, run->policy_digest, fields);
}

void egress_record_decision(struct egress_conn *c, bool allowed, const char *reason,
			    unsigned status)
{
	struct sbx_egress_run *run = c->run;
	struct egress_record *r = &c->rec;
	int64_t now = egress_now_us();

	c->decided = true;
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

/* ---- snapshots ---- */

static char *str_or_empty(const char *s)
{
	return strdup(s ? s : "");
}

static Sbx__V1__EgressRecord *record_message(const struct egress_record *r, int64_t now_ms,
					     int64_t accept_ms)
{
	Sbx__V1__EgressRecord *m = malloc(sizeof(*m));

	if (!m)
		return NULL;
	sbx__v1__egress_record__init(m);
	m->time_unix_ms = r->time_unix_ms;
	m->port = r->port;
	m->allowed = r->allowed;
	m->bytes_out = r->bytes_out;
	m->bytes_in = r->bytes_in;
	m->connection = r->connection;
	m->lookup_ms = r->lookup_ms;
	m->connect_ms = r->connect_ms;
	m->duration_ms = r->open ? (uint64_t)(now_ms - accept_ms) : r->duration_ms;
	m->open = r->open;
	m->status = r->status;
	m->host = str_or_empty(r->host);
	m->reason = str_or_empty(r->reason);
	m->address = str_or_empty(r->address);
	m->method = str_or_empty(r->method);
	if (!m->host || !m->reason || !m->address || !m->method) {
		sbx__v1__egress_record__free_unpacked(m, NULL);
		return NULL;
	}
	return m;
}

static int by_connection(const void *a, const void *b)
{
	const struct egress_record *x = *(const struct egress_record *const *)a;
	const struct egress_record *y = *(const struct egress_record *const *)b;

	return x->connection < y->connection ? -1 : x->connection > y->connection;
}

/* rec_mu held: the totals with the open connections' bytes so far. */
static int destinations(struct sbx_egress_run *run, Sbx__V1__EgressDestination ***out, size_t *n)
{
	Sbx__V1__EgressDestination **v = calloc(run->n_totals ? run->n_totals : 1, sizeof(*v));

	*out = v;
	*n = 0;
	if (!v)
		return -1;
	for (size_t i = 0; i < run->n_totals; i++) {
		const struct egress_total *t = &run->totals[i];
		Sbx__V1__EgressDestination *m = malloc(sizeof(*m));

		if (!m)
			return -1;
		sbx__v1__egress_destination__init(m);
		v[(*n)++] = m;
		if (!(m->host = strdup(t->host)))
			return -1;
		m->port = t->port;
		m->connections = t->connections;
		m->denied = t->denied;
		m->bytes_out = t->bytes_out;
		m->bytes_in = t->bytes_in;
	}
	for (struct egress_conn *c = run->open_head; c; c = c->open_next)
		if (c->total_row >= 0 && (size_t)c->total_row < *n) {
			v[c->total_row]->bytes_out += c->rec.bytes_out;
			v[c->total_row]->bytes_in += c->rec.bytes_in;
		}
	return 0;
}

static int status_locked(struct sbx_egress_run *er, Sbx__V1__StatusResponse *resp)
{
	size_t n_open = 0, total, show, k = 0;
	struct egress_record **all;
	int64_t now_ms = egress_now_us() / 1000;
	char **alerts;

	for (struct egress_conn *c = er->open_head; c; c = c->open_next)
		n_open++;
	total = er->ring_len + n_open;
	show = total < er->eg->records_per_run ? total : er->eg->records_per_run;
	resp->egress_records_dropped = er->dropped + (total - show);
	if (!(all = calloc(total ? total : 1, sizeof(*all))))
		return -1;
	for (size_t i = 0; i < er->ring_len; i++)
		all[k++] = &er->ring[(er->ring_start + i) % er->ring_cap];
	for (struct egress_conn *c = er->open_head; c; c = c->open_next)
		all[k++] = &c->rec;
	qsort(all, total, sizeof(*all), by_connection);
	resp->egress = calloc(show ? show : 1, sizeof(*resp->egress));
	for (size_t i = 0; resp->egress && i < show; i++) {
		const struct egress_record *r = all[total - show + i];
		int64_t accept_ms = now_ms - (int64_t)r->duration_ms;

		if (r->open) {
			/* The open record's own connection knows its start. */
			for (struct egress_conn *c = er->open_head; c; c = c->open_next)
				if (&c->rec == r)
					accept_ms = c->accept_us / 1000;
		}
		if (!(resp->egress[i] = record_message(r, now_ms, accept_ms)))
			break;
		resp->n_egress = i + 1;
	}
	free(all);
	if (!resp->egress || resp->n_egress < show)
		return -1;
	if (destinations(er, &resp->egress_destinations, &resp->n_egress_destinations) < 0)
		return -1;
	alerts = realloc(resp->alerts, (resp->n_alerts + er->n_alerts + 1) * sizeof(char *));
	if (!alerts)
		return -1;
	resp->alerts = alerts;
	for (size_t i = 0; i < er->n_alerts; i++) {
		if (!(alerts[resp->n_alerts] = strdup(er->alerts[i])))
			return -1;
		resp->n_alerts++;
	}
	return 0;
}

int sbx_egress_run_status(struct sbx_egress_run *er, Sbx__V1__StatusResponse *resp,
			  struct sbx_err *err)
{
	int rc;

	pthread_mutex_lock(&er->rec_mu);
	rc = status_locked(er, resp);
	pthread_mutex_unlock(&er->rec_mu);
	return rc < 0 ? sbx_fail_errnum(err, ENOMEM, "egress status") : 0;
}

int sbx_egress_run_destinations(struct sbx_egress_run *er, Sbx__V1__EgressDestination ***out,
				size_t *n, struct sbx_err *err)
{
	int rc;

	pthread_mutex_lock(&er->rec_mu);
	rc = destinations(er, out, n);
	pthread_mutex_unlock(&er->rec_mu);
	if (rc < 0) {
		for (size_t i = 0; *out && i < *n; i++)
			sbx__v1__egress_destination__free_unpacked((*out)[i], NULL);
		free(*out);
		*out = NULL;
		*n = 0;
		return sbx_fail_errnum(err, ENOMEM, "egress destinations");
	}
	return 0;
}
