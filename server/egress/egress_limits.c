/* SPDX-License-Identifier: Apache-2.0 */
/* The rate limits: a run's allowlist entries (policy) and the host-wide
 * destinations (config egress.destinations), each with a bucket of new
 * connections, a bucket of bytes and a count of open connections. Only the
 * loop uses them.
 *
 * Connections per minute are counted in thousandths of a connection so
 * that a rate under one a second (30 a minute) is still a whole number of
 * units a second. The burst is the per-minute number itself. Bytes per
 * second have a burst of a tenth of a second, at least 16 KiB: enough for
 * one splice of a few pages, small enough that a throttled transfer
 * measures at its rate over a second or two.
 *
 * Fair shares (DESIGN.md invariant 10: no caller denies service to
 * another). The host-wide pools are shared by identities (the run's
 * identity string), not taken first come first served:
 *  - connections_max: an identity's runs together hold at most
 *    share(connections_max, k) open connections (heads included), where k
 *    is the number of identities holding one, the asker counted;
 *  - a destination's max_concurrent: an identity holds at most
 *    share(max_concurrent, k), k the identities holding the destination;
 *  - a destination's connections_per_minute: an identity takes from a
 *    bucket of its own at half the rate and burst as well as from the
 *    shared one, so at least half of it is always left for others;
 *  - a destination's bytes_per_second: while another identity has a
 *    connection open to it, an identity's relays also take from a bucket
 *    of its own at half the rate (alone, it may use all of it).
 * share(total, k) = total / max(2, k), at least 1: a lone identity gets
 * half, so a second one's first connection always finds room; with more,
 * each new one's share shrinks, and a larger holding already open only
 * stops growing (nothing open is cut). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress_internal.h"

#define MILLI		 1000
#define BYTES_BURST_MIN	 (16 * 1024)
#define BYTES_WAIT_CHUNK (16 * 1024) /* bytes a throttled side waits for */
#define RETRY_AFTER_BUSY 1	     /* seconds, for a max_concurrent refusal */

static void conns_bucket(struct egress_bucket *b, uint32_t per_minute, int64_t now)
{
	/* per_minute * 1000 / 60 per second, at least 1 unit. */
	uint64_t rate = per_minute ? ((uint64_t)per_minute * MILLI + 59) / 60 : 0;

	egress_bucket_init(b, rate, (uint64_t)per_minute * MILLI, now);
}

static void bytes_bucket(struct egress_bucket *b, uint64_t per_second, int64_t now)
{
	uint64_t burst = per_second / 10;

	if (burst < BYTES_BURST_MIN)
		burst = BYTES_BURST_MIN;
	egress_bucket_init(b, per_second, burst, now);
}

int egress_limits_init(struct sbx_egress *eg, const struct sbx_config_egress *cfg,
		       struct sbx_err *err)
{
	int64_t now = egress_now_us();

	eg->dests = calloc(cfg->n_destinations ? cfg->n_destinations : 1, sizeof(*eg->dests));
	if (!eg->dests)
		return sbx_fail_errno(err, "egress.destinations");
	for (size_t i = 0; i < cfg->n_destinations; i++) {
		const struct sbx_egress_destination *src = &cfg->destinations[i];
		struct egress_dest *d = &eg->dests[eg->n_dests];

		if (!src->host || !(d->host = strdup(src->host)))
			return sbx_fail_errno(err, "egress.destinations");
		eg->n_dests++;
		d->kind = sbx_hostname_kind(d->host);
		d->port = (uint16_t)src->port;
		d->max_concurrent = src->max_concurrent;
		d->connections_per_minute = src->connections_per_minute;
		d->bytes_per_second = src->bytes_per_second;
		conns_bucket(&d->conns, d->connections_per_minute, now);
		bytes_bucket(&d->bytes, d->bytes_per_second, now);
	}
	return 0;
}

/* What one identity may hold of total when k identities hold some. */
static uint32_t share(uint32_t total, uint32_t k)
{
	uint32_t s = total / (k < 2 ? 2 : k);

	return s ? s : 1;
}

/* An identity's egress lines: EGRESS_LINES_SHARE_DIV (egress_internal.h),
 * LINES_BURST_S seconds of that rate at once. */
#define LINES_BURST_S	2	   /* seconds of it held at once */
#define LINES_BURST_MIN (4 * 1024) /* one connection's two lines fit */

void egress_limits_free(struct sbx_egress *eg)
{
	/* Every run the loop took was closed (and detached) before this; a
	 * proxy that failed to start has none. */
	while (eg->identities) {
		struct egress_identity *id = eg->identities;

		eg->identities = id->next;
		free(id->dests);
		free(id->name);
		free(id);
	}
	for (size_t i = 0; i < eg->n_dests; i++)
		free(eg->dests[i].host);
	free(eg->dests);
	eg->dests = NULL;
	eg->n_dests = 0;
}

void egress_rules_init(struct sbx_egress_run *run, int64_t now_us)
{
	for (size_t i = 0; i < run->n_rules; i++) {
		struct egress_rule *r = &run->rules[i];

		conns_bucket(&r->conns, r->connections_per_minute, now_us);
		bytes_bucket(&r->bytes, r->bytes_per_second, now_us);
	}
}

int egress_rule_find(const struct sbx_egress_run *run, const char *host, enum sbx_host_kind kind,
		     uint16_t port)
{
	for (size_t i = 0; i < run->n_rules; i++)
		if (run->rules[i].port == port &&
		    sbx_hostname_covers(run->rules[i].host, run->rules[i].kind, host, kind))
			return (int)i;
	return -1;
}

int egress_dest_find(const struct sbx_egress *eg, const char *host, enum sbx_host_kind kind,
		     uint16_t port)
{
	for (size_t i = 0; i < eg->n_dests; i++)
		if (eg->dests[i].port == port &&
		    sbx_hostname_covers(eg->dests[i].host, eg->dests[i].kind, host, kind))
			return (int)i;
	return -1;
}

/* Whole seconds until b holds one connection, at least 1. */
static unsigned retry_after(struct egress_bucket *b, int64_t now)
{
	int64_t us = egress_bucket_wait_us(b, MILLI, now);
	int64_t s = (us + 999999) / 1000000;

	return s < 1 ? 1 : s > 3600 ? 3600 : (unsigned)s;
}

/* c's identity's part of its host-wide destination, or NULL. */
static struct egress_ident_dest *ident_dest(const struct egress_conn *c)
{
	struct egress_identity *id = c->run->ident;

	return c->dest >= 0 && id && id->dests ? &id->dests[c->dest] : NULL;
}

int egress_limits_admit(struct egress_conn *c, const char **reason, unsigned *retry_after_s)
{
	struct egress_rule *r = &c->run->rules[c->rule];
	struct egress_dest *d = c->dest >= 0 ? &c->eg->dests[c->dest] : NULL;
	struct egress_ident_dest *mine = ident_dest(c);
	int64_t now = egress_now_us();

	if ((r->max_concurrent && r->open >= r->max_concurrent) ||
	    (d && d->max_concurrent && d->open >= d->max_concurrent) ||
	    (d && mine && d->max_concurrent &&
	     mine->open >= share(d->max_concurrent, d->holders + !mine->open))) {
		*reason = "too_many_connections";
		*retry_after_s = RETRY_AFTER_BUSY;
		return -1;
	}
	if (egress_bucket_available(&r->conns, now) < MILLI) {
		*reason = "rate_limited";
		*retry_after_s = retry_after(&r->conns, now);
		return -1;
	}
	if (d && egress_bucket_available(&d->conns, now) < MILLI) {
		*reason = "rate_limited";
		*retry_after_s = retry_after(&d->conns, now);
		return -1;
	}
	if (mine && egress_bucket_available(&mine->conns, now) < MILLI) {
		*reason = "rate_limited";
		*retry_after_s = retry_after(&mine->conns, now);
		return -1;
	}
	egress_bucket_take(&r->conns, MILLI, now);
	r->open++;
	if (d) {
		egress_bucket_take(&d->conns, MILLI, now);
		d->open++;
	}
	if (mine) {
		egress_bucket_take(&mine->conns, MILLI, now);
		if (mine->open++ == 0)
			d->holders++;
	}
	c->holds_limits = true;
	return 0;
}

void egress_limits_release(struct egress_conn *c)
{
	struct egress_ident_dest *mine = ident_dest(c);

	if (!c->holds_limits)
		return;
	c->holds_limits = false;
	c->run->rules[c->rule].open--;
	if (c->dest >= 0)
		c->eg->dests[c->dest].open--;
	if (mine && --mine->open == 0)
		c->eg->dests[c->dest].holders--;
}

/* c's buckets of bytes: the entry's, the destination's, and its
 * identity's part of the destination while another identity holds it. */
static size_t byte_buckets(struct egress_conn *c, struct egress_bucket *b[3])
{
	struct egress_ident_dest *mine = ident_dest(c);
	size_t n = 0;

	b[n++] = &c->run->rules[c->rule].bytes;
	if (c->dest >= 0) {
		b[n++] = &c->eg->dests[c->dest].bytes;
		if (mine && c->eg->dests[c->dest].holders > 1)
			b[n++] = &mine->bytes;
	}
	return n;
}

uint64_t egress_limits_bytes(struct egress_conn *c, uint64_t want, int64_t now_us, int64_t *wait_us)
{
	struct egress_bucket *b[3];
	size_t nb = byte_buckets(c, b);
	uint64_t n = want;

	*wait_us = 0;
	for (size_t i = 0; i < nb; i++) {
		uint64_t avail;

		if (!b[i])
			continue;
		avail = egress_bucket_available(b[i], now_us);
		if (avail < n)
			n = avail;
		if (avail == 0) {
			int64_t w = egress_bucket_wait_us(b[i], BYTES_WAIT_CHUNK, now_us);

			if (w > *wait_us)
				*wait_us = w;
		}
	}
	if (n == 0 && *wait_us == 0)
		*wait_us = 1000;
	return n;
}

void egress_limits_take(struct egress_conn *c, uint64_t n, int64_t now_us)
{
	struct egress_bucket *b[3];
	size_t nb = byte_buckets(c, b);

	/* A bucket with fewer (one joined since egress_limits_bytes) is
	 * emptied: egress_bucket_take never wraps. */
	for (size_t i = 0; i < nb; i++)
		egress_bucket_take(b[i], n, now_us);
}

/* ---- identities ---- */

int egress_identity_attach(struct sbx_egress_run *run)
{
	struct sbx_egress *eg = run->eg;
	const char *name = run->identity ? run->identity : "";
	struct egress_identity *id;
	int64_t now = egress_now_us();

	if (run->ident)
		return 0;
	for (id = eg->identities; id; id = id->next)
		if (!strcmp(id->name, name))
			break;
	if (!id) {
		uint64_t rate = eg->lines_per_identity_per_second, burst = rate * LINES_BURST_S;

		if (!(id = calloc(1, sizeof(*id))) || !(id->name = strdup(name)) ||
		    (eg->n_dests && !(id->dests = calloc(eg->n_dests, sizeof(*id->dests))))) {
			if (id)
				free(id->name);
			free(id);
			return -1;
		}
		egress_bucket_init(&id->accepts, eg->accepts_per_identity_per_second,
				   2 * (uint64_t)eg->accepts_per_identity_per_second, now);
		egress_bucket_init(&id->lines, rate,
				   rate && burst < LINES_BURST_MIN ? LINES_BURST_MIN : burst, now);
		for (size_t i = 0; i < eg->n_dests; i++) {
			const struct egress_dest *d = &eg->dests[i];

			/* Halves rounded up: a limit of 1 stays a limit. */
			conns_bucket(&id->dests[i].conns, (d->connections_per_minute + 1) / 2, now);
			egress_bucket_init(&id->dests[i].bytes, (d->bytes_per_second + 1) / 2,
					   d->bytes.burst / 2, now);
		}
		id->next = eg->identities;
		eg->identities = id;
	}
	id->runs++;
	run->ident = id;
	return 0;
}

void egress_identity_detach(struct sbx_egress_run *run)
{
	struct sbx_egress *eg = run->eg;
	struct egress_identity *id = run->ident, **p;

	if (!id)
		return;
	run->ident = NULL;
	if (--id->runs > 0)
		return;
	for (p = &eg->identities; *p != id; p = &(*p)->next)
		;
	*p = id->next;
	free(id->dests);
	free(id->name);
	free(id);
}

/* Pays what lines owes from its bucket; true when nothing is owed. */
static bool lines_paid(struct egress_identity *id, int64_t now)
{
	uint64_t avail = egress_bucket_available(&id->lines, now);
	uint64_t pay = avail < id->lines_debt ? avail : id->lines_debt;

	if (pay && id->lines.rate) {
		egress_bucket_take(&id->lines, pay, now);
		id->lines_debt -= pay;
	}
	if (!id->lines.rate)
		id->lines_debt = 0;
	return id->lines_debt == 0 && egress_bucket_available(&id->lines, now) > 0;
}

int64_t egress_identity_accept_wait(struct sbx_egress_run *run, int64_t now_us)
{
	struct egress_identity *id = run->ident;
	int64_t w;

	if (egress_bucket_available(&run->accepts, now_us) < 1)
		return (w = egress_bucket_wait_us(&run->accepts, 1, now_us)) > 0 ? w : 1000;
	if (!id)
		return 0;
	if (egress_bucket_available(&id->accepts, now_us) < 1)
		return (w = egress_bucket_wait_us(&id->accepts, 1, now_us)) > 0 ? w : 1000;
	if (!lines_paid(id, now_us)) {
		uint64_t owed = id->lines_debt ? id->lines_debt : 1;

		w = egress_bucket_wait_us(&id->lines, owed, now_us);
		return w > 0 ? w : 1000;
	}
	return 0;
}

void egress_identity_accepted(struct sbx_egress_run *run, int64_t now_us)
{
	egress_bucket_take(&run->accepts, 1, now_us);
	if (run->ident)
		egress_bucket_take(&run->ident->accepts, 1, now_us);
}

void egress_identity_lines(struct sbx_egress_run *run, uint64_t n)
{
	struct egress_identity *id = run->ident;
	int64_t now = egress_now_us();
	uint64_t avail, take;

	if (!id || !id->lines.rate)
		return;
	avail = egress_bucket_available(&id->lines, now);
	take = avail < n ? avail : n;
	egress_bucket_take(&id->lines, take, now);
	id->lines_debt += n - take;
}

bool egress_limits_count(struct egress_conn *c)
{
	struct sbx_egress_run *run = c->run;
	struct sbx_egress *eg = c->eg;
	struct egress_identity *id = run->ident;

	if (run->n_conns >= eg->connections_per_run || eg->n_conns >= eg->connections_max)
		return false;
	if (id && id->n_conns >= share(eg->connections_max, eg->n_holding + !id->n_conns))
		return false;
	c->counted = true;
	run->n_conns++;
	eg->n_conns++;
	if (id && id->n_conns++ == 0)
		eg->n_holding++;
	return true;
}

void egress_limits_uncount(struct egress_conn *c)
{
	struct egress_identity *id = c->run->ident;

	if (!c->counted)
		return;
	c->counted = false;
	c->run->n_conns--;
	c->eg->n_conns--;
	if (id && --id->n_conns == 0)
		c->eg->n_holding--;
}
