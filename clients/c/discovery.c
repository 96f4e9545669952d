/* SPDX-License-Identifier: Apache-2.0 */
/* Several endpoints and DNS SRV discovery (issue 19): the endpoint list's
 * syntax, the SRV answer's parsing (pure, unit-tested) and the lookups
 * through c-ares, against the system's resolv.conf or SBX_DNS_SERVER. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ares.h>

#include "fleet_internal.h"
#include "util.h"

#define DNS_TIMEOUT_MS 2000
#define DNS_TRIES      2
#define T_SRV	       33
#define T_A	       1
#define T_AAAA	       28
#define C_IN	       1

void sbx_endpoints_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
}

static bool valid_dns_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 253)
		return false;
	for (const char *p = s; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_')
			return false;
	return !strstr(s, "..") && s[0] != '.';
}

int sbx_endpoint_check(const char *e, struct sbx_err *err)
{
	if (!strncmp(e, SBX_SRV_SCHEME, strlen(SBX_SRV_SCHEME))) {
		const char *name = e + strlen(SBX_SRV_SCHEME);
		if (name[0] != '_' || !valid_dns_name(name))
			return sbx_fail(err,
					"endpoint %s: must be dns+srv://_SERVICE._tcp.NAME "
					"(e.g. dns+srv://_sbx._tcp.sbx.example)",
					e);
		return 0;
	}
	if (!strncmp(e, "ipc://", 6) || !strncmp(e, "tls+tcp://", 10) || !strncmp(e, "tcp://", 6))
		return 0;
	return sbx_fail(err,
			"endpoint %s: must be ipc://PATH, tls+tcp://HOST:PORT, tcp://HOST:PORT or "
			"dns+srv://_sbx._tcp.NAME",
			e);
}

/* On failure, what this call added is freed and *n is as it was. */
static int split_fail(char **out, size_t start, size_t *n)
{
	sbx_endpoints_free(out + start, *n - start);
	*n = start;
	return -1;
}

int sbx_endpoints_split(const char *list, char **out, size_t max, size_t *n, struct sbx_err *err)
{
	const char *p = list;
	size_t start = *n;

	if (!list || !*list)
		return sbx_fail(err, "endpoints: empty list");
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		while (len && isspace((unsigned char)*p))
			p++, len--;
		while (len && isspace((unsigned char)p[len - 1]))
			len--;
		if (!len) {
			sbx_fail(err, "endpoints %s: an empty entry", list);
			return split_fail(out, start, n);
		}
		if (*n >= max) {
			sbx_fail(err, "endpoints: more than %zu", max);
			return split_fail(out, start, n);
		}
		if (!(out[*n] = strndup(p, len))) {
			sbx_fail(err, "out of memory");
			return split_fail(out, start, n);
		}
		if (sbx_endpoint_check(out[(*n)++], err) < 0)
			return split_fail(out, start, n);
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

void sbx_host_name_of(const char *url, char *name, size_t size)
{
	const char *p = strstr(url, "://");

	/* tls+tcp://H:P and tcp://H:P are named H:P; ipc:// by its URL. */
	snprintf(name, size, "%s", p && strncmp(url, "ipc://", 6) ? p + 3 : url);
}

static uint16_t get16(const unsigned char *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* Skips a (possibly compressed) name at p; NULL if it runs off the end. */
static const unsigned char *skip_name(const unsigned char *msg, size_t len, const unsigned char *p)
{
	char *s = NULL;
	long enclen = 0;

	if (ares_expand_name(p, msg, (int)len, &s, &enclen) != ARES_SUCCESS)
		return NULL;
	ares_free_string(s);
	return p + enclen <= msg + len ? p + enclen : NULL;
}

int sbx_srv_parse(const unsigned char *msg, size_t len, struct sbx_srv_record *out, size_t max,
		  size_t *n, struct sbx_err *err)
{
	const unsigned char *p = msg + 12, *end = msg + len;

	*n = 0;
	if (len < 12 || len > 65535)
		return sbx_fail(err, "DNS answer: %zu bytes", len);
	unsigned rcode = msg[3] & 15, qd = get16(msg + 4), an = get16(msg + 6);
	if (rcode == 3)
		return sbx_fail(err, "no such name (NXDOMAIN)");
	if (rcode != 0)
		return sbx_fail(err, "DNS server answered rcode %u", rcode);
	for (unsigned i = 0; i < qd; i++) {
		if (!(p = skip_name(msg, len, p)) || end - p < 4)
			return sbx_fail(err, "DNS answer: question %u cut short", i);
		p += 4;
	}
	for (unsigned i = 0; i < an; i++) {
		if (!(p = skip_name(msg, len, p)) || end - p < 10)
			return sbx_fail(err, "DNS answer: record %u cut short", i);
		uint16_t type = get16(p), klass = get16(p + 2), rdlen = get16(p + 8);
		uint32_t ttl =
		    (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
		p += 10;
		if (end - p < rdlen)
			return sbx_fail(err, "DNS answer: record %u's data cut short", i);
		if (type == T_SRV && klass == C_IN) {
			char *target = NULL;
			long enclen = 0;
			if (rdlen < 7 || ares_expand_name(p + 6, msg, (int)len, &target, &enclen) !=
					     ARES_SUCCESS)
				return sbx_fail(err, "DNS answer: SRV record %u malformed", i);
			struct sbx_srv_record r = {.priority = get16(p),
						   .weight = get16(p + 2),
						   .port = get16(p + 4),
						   .ttl = ttl & 0x7fffffff};
			size_t tl = strlen(target);
			bool ok = tl > 0 && tl < sizeof(r.target) && valid_dns_name(target);
			if (ok)
				memcpy(r.target, target, tl + 1);
			ares_free_string(target);
			/* "." (the service is not here) and port 0 name no host. */
			if (ok && r.port != 0) {
				if (*n >= max)
					return sbx_fail(
					    err, "DNS answer: more than %zu SRV records", max);
				out[(*n)++] = r;
			}
		}
		p += rdlen;
	}
	return 0;
}

/* ---- c-ares ---- */

static pthread_once_t ares_once = PTHREAD_ONCE_INIT;
static int ares_init_rc;

static void ares_lib_init(void)
{
	ares_init_rc = ares_library_init(ARES_LIB_INIT_ALL);
}

struct answer {
	int status;
	unsigned char *buf;
	int len;
};

static void on_answer(void *arg, int status, int timeouts, unsigned char *abuf, int alen)
{
	struct answer *a = arg;

	(void)timeouts;
	a->status = status;
	if (status == ARES_SUCCESS && abuf && alen > 0 && (a->buf = malloc((size_t)alen))) {
		memcpy(a->buf, abuf, (size_t)alen);
		a->len = alen;
	}
}

static void channel_destroyp(ares_channel *ch)
{
	if (*ch)
		ares_destroy(*ch);
}

/* One query, answered or timed out within about DNS_TRIES x DNS_TIMEOUT_MS. */
static int dns_query(const char *name, int type, struct answer *a, struct sbx_err *err)
{
	struct ares_options o = {.timeout = DNS_TIMEOUT_MS, .tries = DNS_TRIES};
	_cleanup_(channel_destroyp) ares_channel ch = NULL;
	const char *server = getenv("SBX_DNS_SERVER");
	int rc;

	pthread_once(&ares_once, ares_lib_init);
	if (ares_init_rc != ARES_SUCCESS)
		return sbx_fail(err, "c-ares: %s", ares_strerror(ares_init_rc));
	if ((rc = ares_init_options(&ch, &o, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES)) != ARES_SUCCESS)
		return sbx_fail(err, "c-ares: %s", ares_strerror(rc));
	/* A test and debug knob: the DNS server to ask instead of resolv.conf's. */
	if (server && *server && (rc = ares_set_servers_ports_csv(ch, server)) != ARES_SUCCESS)
		return sbx_fail(err, "SBX_DNS_SERVER %s: %s", server, ares_strerror(rc));
	*a = (struct answer){.status = -1};
	ares_query(ch, name, C_IN, type, on_answer, a);
	for (;;) {
		ares_socket_t socks[ARES_GETSOCK_MAXNUM];
		struct pollfd pf[ARES_GETSOCK_MAXNUM];
		/* c-ares's ARES_GETSOCK_WRITABLE shifts a signed 1 by up to 31
		 * (undefined; UBSan stops on it): the same bits, unsigned. */
		unsigned bits = (unsigned)ares_getsock(ch, socks, ARES_GETSOCK_MAXNUM);
		nfds_t np = 0;
		for (unsigned i = 0; i < (unsigned)ARES_GETSOCK_MAXNUM; i++) {
			bool readable = bits & (1u << i);
			bool writable = bits & (1u << (i + ARES_GETSOCK_MAXNUM));
			short ev = (short)((readable ? POLLIN : 0) | (writable ? POLLOUT : 0));
			if (ev)
				pf[np++] = (struct pollfd){.fd = socks[i], .events = ev};
		}
		if (!np)
			break;
		struct timeval tv, *tvp = ares_timeout(ch, NULL, &tv);
		int ms = tvp ? (int)(tvp->tv_sec * 1000 + tvp->tv_usec / 1000) : DNS_TIMEOUT_MS;
		int r = poll(pf, np, ms);
		if (r < 0 && errno != EINTR)
			return sbx_fail_errno(err, "poll");
		if (r <= 0) {
			ares_process_fd(ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
			continue;
		}
		for (nfds_t i = 0; i < np; i++)
			ares_process_fd(ch,
					pf[i].revents & (POLLIN | POLLERR | POLLHUP)
					    ? pf[i].fd
					    : ARES_SOCKET_BAD,
					pf[i].revents & POLLOUT ? pf[i].fd : ARES_SOCKET_BAD);
	}
	if (a->status != ARES_SUCCESS) {
		free(a->buf);
		a->buf = NULL;
		return sbx_fail(err, "%s", a->status < 0 ? "no answer" : ares_strerror(a->status));
	}
	return 0;
}

/* The addresses of name: A records, else AAAA; the first one, and the
 * least TTL. */
static int lookup_addr(const char *name, char *addr, size_t size, uint32_t *ttl,
		       struct sbx_err *err)
{
	struct answer a;
	struct ares_addrttl v4[8];
	struct ares_addr6ttl v6[8];
	int n = 8;

	if (dns_query(name, T_A, &a, err) == 0) {
		int rc = ares_parse_a_reply(a.buf, a.len, NULL, v4, &n);
		free(a.buf);
		if (rc == ARES_SUCCESS && n > 0) {
			inet_ntop(AF_INET, &v4[0].ipaddr, addr, (socklen_t)size);
			*ttl = v4[0].ttl > 0 ? (uint32_t)v4[0].ttl : 0;
			return 0;
		}
	}
	n = 8;
	if (dns_query(name, T_AAAA, &a, err) < 0)
		return sbx_err_prefix(err, "address of %s", name);
	int rc = ares_parse_aaaa_reply(a.buf, a.len, NULL, v6, &n);
	free(a.buf);
	if (rc != ARES_SUCCESS || n <= 0)
		return sbx_fail(err, "address of %s: none", name);
	char six[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, &v6[0].ip6addr, six, sizeof(six));
	snprintf(addr, size, "[%s]", six);
	*ttl = v6[0].ttl > 0 ? (uint32_t)v6[0].ttl : 0;
	return 0;
}

static int srv_order(const void *a, const void *b)
{
	const struct sbx_srv_record *x = a, *y = b;

	if (x->priority != y->priority)
		return x->priority < y->priority ? -1 : 1;
	return strcmp(x->target, y->target);
}

int sbx_srv_resolve(const char *endpoint, struct sbx_resolved *out, size_t max, size_t *n,
		    uint32_t *ttl, struct sbx_err *err)
{
	const char *name = endpoint + strlen(SBX_SRV_SCHEME);
	struct sbx_srv_record recs[SBX_FLEET_MAX_HOSTS];
	size_t nrec = 0;
	struct answer a;

	*n = 0;
	if (dns_query(name, T_SRV, &a, err) < 0)
		return sbx_err_prefix(err, "%s", endpoint);
	int rc = sbx_srv_parse(a.buf, (size_t)a.len, recs, SBX_ARRAY_SIZE(recs), &nrec, err);
	free(a.buf);
	if (rc < 0)
		return sbx_err_prefix(err, "%s", endpoint);
	if (!nrec)
		return sbx_fail(err, "%s: no SRV records", endpoint);
	qsort(recs, nrec, sizeof(recs[0]), srv_order);
	*ttl = UINT32_MAX;
	for (size_t i = 0; i < nrec && *n < max; i++) {
		char addr[INET6_ADDRSTRLEN + 2];
		uint32_t attl = 0;
		/* Placement spreads over every host: priority only orders them. */
		if (lookup_addr(recs[i].target, addr, sizeof(addr), &attl, err) < 0)
			continue; /* a host without an address is left out this round */
		struct sbx_resolved *r = &out[(*n)++];
		snprintf(r->name, sizeof(r->name), "%s:%u", recs[i].target, recs[i].port);
		snprintf(r->url, sizeof(r->url), "tls+tcp://%s:%u", addr, recs[i].port);
		snprintf(r->server_name, sizeof(r->server_name), "%s", recs[i].target);
		*ttl = recs[i].ttl < *ttl ? recs[i].ttl : *ttl;
		*ttl = attl < *ttl ? attl : *ttl;
	}
	if (!*n)
		return sbx_err_prefix(err, "%s: no SRV target has an address", endpoint);
	return 0;
}
