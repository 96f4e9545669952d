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
 * measures at its rate over a second or two. */
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

void egress_limits_free(struct sbx_egress *eg)
{
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

int egress_limits_admit(struct egress_conn *c, const char **reason, unsigned *retry_after_s)
{
	struct egress_rule *r = &c->run->rules[c->rule];
	struct egress_dest *d = c->dest >= 0 ? &c->eg->dests[c->dest] : NULL;
	int64_t now = egress_now_us();

	if ((r->max_concurrent && r->open >= r->max_concurrent) ||
	    (d && d->max_concurrent && d->open >= d->max_concurrent)) {
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
	egress_bucket_take(&r->conns, MILLI, now);
	r->open++;
	if (d) {
		egress_bucket_take(&d->conns, MILLI, now);
		d->open++;
	}
	c->holds_limits = true;
	return 0;
}

void egress_limits_release(struct egress_conn *c)
{
	if (!c->holds_limits)
		return;
	c->holds_limits = false;
	c->run->rules[c->rule].open--;
	if (c->dest >= 0)
		c->eg->dests[c->dest].open--;
}

uint64_t egress_limits_bytes(struct egress_conn *c, uint64_t want, int64_t now_us, int64_t *wait_us)
{
	struct egress_bucket *b[2] = {&c->run->rules[c->rule].bytes,
				      c->dest >= 0 ? &c->eg->dests[c->dest].bytes : NULL};
	uint64_t n = want;

	*wait_us = 0;
	for (size_t i = 0; i < 2; i++) {
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
	egress_bucket_take(&c->run->rules[c->rule].bytes, n, now_us);
	if (c->dest >= 0)
		egress_bucket_take(&c->eg->dests[c->dest].bytes, n, now_us);
}
