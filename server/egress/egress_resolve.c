/* SPDX-License-Identifier: Apache-2.0 */
/* The lookup of a connection's host, by the proxy itself (evdns: the loop
 * never blocks on it), and the vetting of every address it gives: one
 * lookup per connection, never a second one (DNS rebinding gains nothing),
 * and only the addresses the entry allows are tried.
 *
 * evdns calls back before evdns_getaddrinfo returns when it answers at
 * once (a name in hosts_file); without a nameserver it never calls back
 * for any other name, so such a lookup is refused at once; with one, the
 * connection's own lookup_seconds bounds it. A lookup the connection gives
 * up on is cancelled, and its callback (which still comes, later) finds no
 * connection: `struct egress_lookup` is what lives until then. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress_addr.h"
#include "egress_internal.h"

struct egress_lookup {
	struct egress_conn *conn; /* NULL once the connection gave up on it */
	struct evdns_getaddrinfo_request *req;
};

/* Keeps the addresses of res the entry allows; refuses c when none. */
static void vet(struct egress_conn *c, const struct evutil_addrinfo *res)
{
	bool allow_private = c->run->rules[c->rule].allow_private;
	size_t seen = 0;

	for (const struct evutil_addrinfo *ai = res; ai; ai = ai->ai_next) {
		const char *what;

		if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
		    ai->ai_addrlen > sizeof(c->addrs[0]))
			continue;
		seen++;
		if (c->n_addrs < EGRESS_ADDRS_MAX &&
		    egress_addr_allowed(ai->ai_addr, allow_private, &what)) {
			memset(&c->addrs[c->n_addrs], 0, sizeof(c->addrs[0]));
			memcpy(&c->addrs[c->n_addrs], ai->ai_addr, ai->ai_addrlen);
			c->n_addrs++;
		}
	}
	if (!seen)
		egress_conn_refuse(c, 502, "lookup_failed", 0);
	else if (!c->n_addrs)
		egress_conn_refuse(c, 403, "private_address", 0);
	else
		egress_conn_connect(c);
}

static void on_lookup(int result, struct evutil_addrinfo *res, void *arg)
{
	struct egress_lookup *lk = arg;
	struct egress_conn *c = lk->conn;

	free(lk);
	if (!c) {
		if (res)
			evutil_freeaddrinfo(res);
		return;
	}
	c->lookup = NULL;
	c->rec.lookup_ms = (uint32_t)((egress_now_us() - c->lookup_start_us) / 1000);
	if (result != 0 || !res)
		egress_conn_refuse(c, 502, "lookup_failed", 0);
	else
		vet(c, res);
	if (res)
		evutil_freeaddrinfo(res);
}

void egress_resolve_start(struct egress_conn *c)
{
	struct evutil_addrinfo hints = {
	    .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_protocol = IPPROTO_TCP};
	struct evdns_getaddrinfo_request *req;
	struct egress_lookup *lk;
	char port[8];

	c->lookup_start_us = egress_now_us();
	if (c->head.host_kind == SBX_HOST_IPV4) {
		/* A literal entry covers only the literal: no lookup. */
		struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(c->head.port)};
		struct evutil_addrinfo ai = {.ai_family = AF_INET,
					     .ai_socktype = SOCK_STREAM,
					     .ai_addrlen = sizeof(sin),
					     .ai_addr = (struct sockaddr *)&sin};

		if (inet_pton(AF_INET, c->head.host, &sin.sin_addr) != 1) {
			egress_conn_refuse(c, 400, "bad_request", 0);
			return;
		}
		vet(c, &ai);
		return;
	}
	if (!(lk = calloc(1, sizeof(*lk)))) {
		egress_conn_refuse(c, 502, "lookup_failed", 0);
		return;
	}
	lk->conn = c;
	c->lookup = lk;
	snprintf(port, sizeof(port), "%u", c->head.port);
	req = evdns_getaddrinfo(c->eg->dns, c->head.host, port, &hints, on_lookup, lk);
	if (!req)
		return; /* answered already (hosts_file, or a failure): c may be gone */
	lk->req = req;
	if (!c->eg->have_nameservers) {
		/* It would never call back. */
		egress_conn_refuse(c, 502, "lookup_failed", 0);
		return;
	}
	egress_conn_arm_timer(c, (int64_t)c->eg->lookup_seconds * 1000000);
}

void egress_resolve_cancel(struct egress_conn *c)
{
	struct egress_lookup *lk = c->lookup;

	if (!lk)
		return;
	c->lookup = NULL;
	lk->conn = NULL;
	/* Its callback comes (EVUTIL_EAI_CANCEL) and frees lk. */
	evdns_getaddrinfo_cancel(lk->req);
}
