/* SPDX-License-Identifier: Apache-2.0 */
/* The egress proxy (server/egress/) end to end, without a sandbox: the
 * test makes the listening socket a sandbox's exec would hand over, starts
 * real TCP servers on 127.0.0.1, points the proxy's resolver at a hosts
 * file of its own (no nameserver) and talks to the proxy as the sandbox
 * would. Every byte count is checked against what the server counted, and
 * the audit log must hold exactly one decision and one close line per
 * connection.
 *
 * The server speaks two protocols: a plain HTTP request (its head is kept,
 * a fixed answer sent), or "SEND <m> <id>\n" followed by anything up to
 * the client's EOF, after which it sends m bytes and closes; what it
 * received and sent is kept under id. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "audit.h"
#include "check.h"
#include "clock.h"
#include "egress.h"
#include "egress_harness.h"
#include "egress_head.h"
#include "runs_egress.h"
#include "util.h"

#define SERVER_CONNS 128
#define HTTP_ANSWER  "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"

/* ---- the destination server ---- */

struct served {
	int id; /* 0: a plain HTTP request */
	size_t received, sent;
	char head[2048];
	bool done;
};

static struct {
	int fd;
	uint16_t port;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t conns[SERVER_CONNS];
	size_t n_conns;
	struct served served[SERVER_CONNS];
	size_t n_served;
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *serve_one(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct served s = {0};
	char buf[65536];
	size_t len = 0;
	unsigned long m = 0;

	for (;;) {
		ssize_t n = recv(fd, buf + len, sizeof(buf) - len - 1, 0);

		if (n <= 0)
			break;
		s.received += (size_t)n;
		len += (size_t)n;
		buf[len] = '\0';
		if (!strncmp(buf, "GET ", 4) && strstr(buf, "\r\n\r\n")) {
			snprintf(s.head, sizeof(s.head), "%.2000s", buf);
			s.sent += write_all(fd, HTTP_ANSWER, strlen(HTTP_ANSWER));
			goto out;
		}
		if (!strncmp(buf, "SEND ", 5) && strchr(buf, '\n')) {
			sscanf(buf, "SEND %lu %d", &m, &s.id);
			break;
		}
		if (len > sizeof(buf) / 2)
			break;
	}
	for (;;) { /* the rest, up to the client's EOF */
		ssize_t n = recv(fd, buf, sizeof(buf), 0);

		if (n <= 0)
			break;
		s.received += (size_t)n;
	}
	memset(buf, 'x', sizeof(buf));
	while (m) {
		size_t k = m < sizeof(buf) ? m : sizeof(buf);
		size_t sent = write_all(fd, buf, k);

		s.sent += sent;
		if (sent < k)
			break;
		m -= k;
	}
out:
	close(fd);
	s.done = true;
	pthread_mutex_lock(&srv.mu);
	if (srv.n_served < SERVER_CONNS)
		srv.served[srv.n_served++] = s;
	pthread_cond_broadcast(&srv.cv);
	pthread_mutex_unlock(&srv.mu);
	return NULL;
}

static void *server_thread(void *arg)
{
	for (;;) {
		int fd = accept(srv.fd, NULL, NULL);

		if (fd < 0)
			return NULL;
		pthread_mutex_lock(&srv.mu);
		if (srv.n_conns < SERVER_CONNS &&
		    pthread_create(&srv.conns[srv.n_conns], NULL, serve_one,
				   (void *)(intptr_t)fd) == 0)
			srv.n_conns++;
		else
			close(fd);
		pthread_mutex_unlock(&srv.mu);
	}
}

/* What the server kept of the connection with id (SEND's), or of the
 * plain HTTP one whose head holds marker, waiting for it. */
static struct served served_wait(int id, const char *marker)
{
	struct served found = {0};
	struct timespec until = sbx_mono_after_ms(5000);

	pthread_mutex_lock(&srv.mu);
	for (;;) {
		for (size_t i = 0; i < srv.n_served; i++)
			if (srv.served[i].id == id &&
			    (!marker || strstr(srv.served[i].head, marker))) {
				found = srv.served[i];
				pthread_mutex_unlock(&srv.mu);
				return found;
			}
		if (pthread_cond_timedwait(&srv.cv, &srv.mu, &until) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&srv.mu);
	return found;
}

/* ---- the sandbox's side ---- */

struct sandbox {
	uint16_t port; /* the run's listener */
	unsigned connections;
};

static int sandbox_connect(struct sandbox *sb)
{
	int fd = proxy_dial(sb->port, 10);

	if (fd < 0) {
		perror("proxy_connect");
		exit(2);
	}
	sb->connections++;
	return fd;
}

/* Everything up to EOF; its length. */
static size_t read_all(int fd, char *keep, size_t keep_size)
{
	char buf[65536];
	size_t total = 0;

	for (;;) {
		ssize_t k = recv(fd, buf, sizeof(buf), 0);

		if (k <= 0)
			break;
		if (keep && total < keep_size - 1) {
			size_t c =
			    (size_t)k < keep_size - 1 - total ? (size_t)k : keep_size - 1 - total;

			memcpy(keep + total, buf, c);
			keep[total + c] = '\0';
		}
		total += (size_t)k;
	}
	return total;
}

/* CONNECT host:port; the status, the answer's head in head. */
static int sandbox_connect_via(struct sandbox *sb, const char *host, uint16_t port, int *fdp,
			       char *head, size_t size)
{
	*fdp = sandbox_connect(sb);
	return connect_on(*fdp, host, port, head, size);
}

static bool has_reason(const char *head, const char *reason)
{
	char want[96];

	snprintf(want, sizeof(want), "\r\nX-Sbx-Egress-Reason: %s\r\n", reason);
	return strstr(head, want) != NULL;
}

/* A refusal: status and reason, and the proxy closes. */
static void expect_refusal(struct sandbox *sb, const char *host, uint16_t port, int status,
			   const char *reason)
{
	char head[2048];
	int fd;
	int got = sandbox_connect_via(sb, host, port, &fd, head, sizeof(head));

	check(got == status && has_reason(head, reason) && strstr(head, "Connection: close"),
	      "CONNECT %s:%u: %d %s (got %d)", host, port, status, reason, got);
	read_all(fd, NULL, 0);
	close(fd);
}

#define IDENTITY "token:test"
#define DIGEST	 "sha256:x"

/* An entry with the policy parser's defaults. */
static Sbx__V1__EgressRule parsed_rule(const char *host, uint16_t port, bool allow_private)
{
	Sbx__V1__EgressRule r = rule(host, port);

	r.allow_private = allow_private;
	r.connections_per_minute = 600;
	r.max_concurrent = 32;
	return r;
}

/* ---- the cases ---- */

static uint16_t server_port;
static uint16_t dead_port; /* was listened on, then closed */

static void test_connect_relay(struct sandbox *sb, struct sbx_egress_run *run)
{
	char head[1024], line[64], early[5000], more[50000], got[16];
	Sbx__V1__EgressRecord rec;
	struct served s;
	size_t in;
	int fd;

	/* The head and the first bytes in one write: the bytes past the head
	 * reach the destination first. */
	memset(early, 'e', sizeof(early));
	memset(more, 'm', sizeof(more));
	snprintf(line, sizeof(line), "SEND 100000 101\n");
	{
		char req[8192];
		int n = snprintf(req, sizeof(req),
				 "CONNECT api.test:%u HTTP/1.1\r\nHost: api.test:%u\r\n\r\n%s",
				 server_port, server_port, line);

		memcpy(req + n, early, sizeof(early));
		fd = sandbox_connect(sb);
		write_all(fd, req, (size_t)n + sizeof(early));
	}
	check(read_head(fd, head, sizeof(head)) == 200 &&
		  !strcmp(head, "HTTP/1.1 200 Connection established\r\n\r\n"),
	      "CONNECT allowed: 200 Connection established");
	write_all(fd, more, sizeof(more));
	shutdown(fd, SHUT_WR);
	in = read_all(fd, got, sizeof(got));
	close(fd);
	s = served_wait(101, NULL);
	check(s.done && s.received == strlen(line) + sizeof(early) + sizeof(more),
	      "the server got the early bytes and the rest (%zu)", s.received);
	check(in == 100000 && s.sent == 100000, "the client got what the server sent (%zu)", in);
	check(closed_record(run, sb->connections, &rec), "a closed record");
	check(rec.allowed && rec.bytes_out == s.received && rec.bytes_in == s.sent,
	      "record bytes: out %llu in %llu", (unsigned long long)rec.bytes_out,
	      (unsigned long long)rec.bytes_in);
	snprintf(line, sizeof(line), "127.0.0.1:%u", server_port);
	check(!strcmp(rec.reason, "closed") && !strcmp(rec.address, line) &&
		  !strcmp(rec.method, "CONNECT") && rec.status == 200 &&
		  !strcmp(rec.host, "api.test") && rec.port == server_port,
	      "record: closed, %s, CONNECT, 200 (reason %s address %s)", line, rec.reason,
	      rec.address);
	record_free(&rec);

	/* An IPv4 literal entry: no lookup. */
	check(sandbox_connect_via(sb, "127.0.0.1", server_port, &fd, head, sizeof(head)) == 200,
	      "CONNECT to a listed IPv4 literal: 200");
	close(fd);
}

static void test_plain_http(struct sandbox *sb, struct sbx_egress_run *run)
{
	char req[512], answer[512];
	Sbx__V1__EgressRecord rec;
	struct served s;
	size_t in;
	int fd = sandbox_connect(sb);

	snprintf(req, sizeof(req),
		 "GET http://api.test:%u/path?marker=plain HTTP/1.1\r\nHost: api.test:%u\r\n"
		 "Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n"
		 "User-Agent: t\r\n\r\n",
		 server_port, server_port);
	write_str(fd, req);
	in = read_all(fd, answer, sizeof(answer));
	close(fd);
	s = served_wait(0, "marker=plain");
	check(!strncmp(s.head, "GET /path?marker=plain HTTP/1.1\r\n", 33),
	      "plain HTTP: origin form upstream");
	check(!strstr(s.head, "Proxy-") && strstr(s.head, "Connection: close\r\n") &&
		  strstr(s.head, "User-Agent: t\r\n"),
	      "plain HTTP: Proxy-* dropped, Connection: close, the rest kept");
	check(in == strlen(HTTP_ANSWER) && !strcmp(answer, HTTP_ANSWER),
	      "plain HTTP: the destination's answer relayed");
	check(closed_record(run, sb->connections, &rec), "plain HTTP: a closed record");
	check(rec.bytes_out == s.received && rec.bytes_in == s.sent && !strcmp(rec.method, "GET"),
	      "plain HTTP: the rewritten head counts as sent (%llu = %zu)",
	      (unsigned long long)rec.bytes_out, s.received);
	record_free(&rec);
}

static void test_refusals(struct sandbox *sb, struct sbx_egress_run *run)
{
	char head[2048];
	int64_t t0;
	int fd;

	expect_refusal(sb, "nope.test", 443, 403, "not_allowed");
	expect_refusal(sb, "api.test", (uint16_t)(server_port + 1), 403, "not_allowed");
	expect_refusal(sb, "loop.test", server_port, 403, "private_address");
	t0 = sbx_mono_ms();
	expect_refusal(sb, "unknown.test", server_port, 502, "lookup_failed");
	check(sbx_mono_ms() - t0 < 1000, "without a nameserver: refused at once");

	/* 8 KiB and no end of the head. */
	fd = sandbox_connect(sb);
	{
		char big[EGRESS_HEAD_MAX + 100];
		const char *start = "CONNECT api.test:1 HTTP/1.1\r\nX-Long: ";

		memcpy(big, start, strlen(start));
		memset(big + strlen(start), 'a', sizeof(big) - strlen(start));
		write_all(fd, big, sizeof(big));
	}
	int got = read_head(fd, head, sizeof(head));

	check(got == 431 && has_reason(head, "head_too_large"),
	      "a head past 8 KiB: 431 head_too_large (%d)", got);
	close(fd);

	/* A listed address where nothing listens. */
	expect_refusal(sb, "127.0.0.1", dead_port, 502, "connect_failed");

	fd = sandbox_connect(sb);
	write_str(fd, "GET /origin-form HTTP/1.1\r\nHost: x\r\n\r\n");
	check(read_head(fd, head, sizeof(head)) >= 400 && has_reason(head, "bad_request"),
	      "an origin-form request: refused, bad_request");
	close(fd);

	fd = sandbox_connect(sb);
	t0 = sbx_mono_ms();
	check(read_head(fd, head, sizeof(head)) == 408 && has_reason(head, "head_timeout"),
	      "no head: 408 head_timeout");
	check(sbx_mono_ms() - t0 < 3000, "after head_seconds");
	close(fd);
}

static void test_rate(struct sandbox *sb, struct sbx_egress_run *run)
{
	char head[2048];
	int fd, hold;

	/* connections_per_minute 2 */
	for (int i = 0; i < 2; i++) {
		check(sandbox_connect_via(sb, "rate.test", server_port, &fd, head, sizeof(head)) ==
			  200,
		      "rate.test connection %d: 200", i + 1);
		close(fd);
	}
	check(sandbox_connect_via(sb, "rate.test", server_port, &fd, head, sizeof(head)) == 429 &&
		  has_reason(head, "rate_limited") && strstr(head, "\r\nRetry-After: "),
	      "rate.test past connections_per_minute: 429 rate_limited with Retry-After");
	{
		const char *ra = strstr(head, "Retry-After: ");

		int secs = ra ? atoi(ra + 13) : 0;

		check(secs >= 1 && secs <= 60, "Retry-After whole seconds until a token (%d)",
		      secs);
	}
	read_all(fd, NULL, 0);
	close(fd);

	/* max_concurrent 1 */
	check(sandbox_connect_via(sb, "conc.test", server_port, &hold, head, sizeof(head)) == 200,
	      "conc.test: first connection");
	expect_refusal(sb, "conc.test", server_port, 429, "too_many_connections");
	close(hold);
	usleep(100000);
	check(sandbox_connect_via(sb, "conc.test", server_port, &fd, head, sizeof(head)) == 200,
	      "conc.test: once the first closed, another");
	close(fd);
}

/* egress.destinations: hw.test has max_concurrent 1 across every run. */
static void test_host_wide(struct sandbox *sb1, struct sandbox *sb2)
{
	char head[1024];
	int hold, fd;

	check(sandbox_connect_via(sb1, "hw.test", server_port, &hold, head, sizeof(head)) == 200,
	      "hw.test from run one: 200");
	expect_refusal(sb2, "hw.test", server_port, 429, "too_many_connections");
	close(hold);
	usleep(100000);
	check(sandbox_connect_via(sb2, "hw.test", server_port, &fd, head, sizeof(head)) == 200,
	      "hw.test from run two once run one's closed: 200");
	close(fd);
}

static void test_throttle(struct sandbox *sb, struct sbx_egress_run *run, uint64_t rate)
{
	char head[1024];
	const size_t want = 1 << 20;
	int64_t t0, ms;
	size_t in;
	int fd;

	check(sandbox_connect_via(sb, "thr.test", server_port, &fd, head, sizeof(head)) == 200,
	      "thr.test: 200");
	t0 = sbx_mono_ms();
	write_str(fd, "SEND 1048576 102\n");
	shutdown(fd, SHUT_WR);
	in = read_all(fd, NULL, 0);
	ms = sbx_mono_ms() - t0;
	close(fd);
	{
		/* The bucket starts full (a tenth of a second's worth). */
		double burst = (double)rate / 10 > 16384 ? (double)rate / 10 : 16384;
		double measured = ((double)in - burst) * 1000.0 / (double)(ms ? ms : 1);

		check(in == want && measured > 0.75 * (double)rate &&
			  measured < 1.25 * (double)rate,
		      "bytes_per_second %llu: measured %.0f over %lld ms", (unsigned long long)rate,
		      measured, (long long)ms);
	}
}

static void test_status(struct sandbox *sb, struct sbx_egress_run *run)
{
	Sbx__V1__StatusResponse *resp = status_of(run);
	bool api = false, nope = false;
	struct sbx_err err;
	Sbx__V1__EgressDestination **d;
	size_t n;

	check(resp->n_egress == sb->connections && resp->egress_records_dropped == 0,
	      "Status: a record per connection (%zu of %u)", resp->n_egress, sb->connections);
	for (size_t i = 1; i < resp->n_egress; i++)
		if (resp->egress[i]->connection <= resp->egress[i - 1]->connection)
			check(false, "Status: records in connection order");
	for (size_t i = 0; i < resp->n_egress_destinations; i++) {
		Sbx__V1__EgressDestination *t = resp->egress_destinations[i];

		if (!strcmp(t->host, "api.test") && t->port == server_port)
			api = t->connections == 2 && t->bytes_in > 100000 && t->denied == 0;
		if (!strcmp(t->host, "nope.test") && t->port == 443)
			nope = t->connections == 0 && t->denied == 1;
	}
	check(api, "Status totals: api.test, 2 allowed, bytes summed");
	check(nope, "Status totals: nope.test:443, 1 denied");
	sbx__v1__status_response__free_unpacked(resp, NULL);
	uint32_t folded;
	int rc = runs_egress_destinations(run, SIZE_MAX, &d, &n, &folded, &err);

	/* api.test twice (its port, another), the two literals, nope,
	 * loop, unknown, rate, conc, thr, hw, and "" for the unreadable
	 * heads. */
	check(rc == 0 && n == 12 && folded == 0, "the manifest's destinations (%zu)", n);
	for (size_t i = 0; i < n; i++)
		sbx__v1__egress_destination__free_unpacked(d[i], NULL);
	free(d);
}

static void test_teardown(struct sandbox *sb, struct sbx_egress_run *run)
{
	char head[1024], buf[16];
	Sbx__V1__EgressRecord rec;
	Sbx__V1__StatusResponse *resp;
	bool open = false;
	int fd;

	check(sandbox_connect_via(sb, "api.test", server_port, &fd, head, sizeof(head)) == 200,
	      "a relay held open");
	write_str(fd, "SEND 10 103\n");
	usleep(50000);
	resp = status_of(run);
	for (size_t i = 0; i < resp->n_egress; i++)
		if (resp->egress[i]->connection == sb->connections)
			open = resp->egress[i]->open && resp->egress[i]->bytes_out == 12;
	sbx__v1__status_response__free_unpacked(resp, NULL);
	check(open, "Status: the open record shows its bytes so far");
	sbx_egress_run_close(run);
	check(recv(fd, buf, sizeof(buf), 0) <= 0, "teardown closed the relay");
	close(fd);
	check(closed_record(run, sb->connections, &rec) && !strcmp(rec.reason, "torn_down") &&
		  rec.bytes_out == 12,
	      "its close record: torn_down");
	record_free(&rec);
	sbx_egress_run_close(run); /* idempotent */
}

static void test_max_bytes(struct sandbox *sb, struct sbx_egress_run *run)
{
	Sbx__V1__EgressRecord rec;
	Sbx__V1__StatusResponse *resp;
	char head[1024];
	size_t in;
	int fd;
	int alerts = 0;

	check(sandbox_connect_via(sb, "api.test", server_port, &fd, head, sizeof(head)) == 200,
	      "max_bytes run: 200");
	write_str(fd, "SEND 1000000 104\n");
	shutdown(fd, SHUT_WR);
	in = read_all(fd, NULL, 0);
	close(fd);
	check(closed_record(run, sb->connections, &rec) && !strcmp(rec.reason, "max_bytes"),
	      "cut off: max_bytes");
	check(rec.bytes_in == in && rec.bytes_in + rec.bytes_out == 300000,
	      "exactly max_bytes moved (in %zu, out %llu)", in, (unsigned long long)rec.bytes_out);
	record_free(&rec);
	expect_refusal(sb, "api.test", server_port, 403, "max_bytes");
	resp = status_of(run);
	for (size_t i = 0; i < resp->n_alerts; i++)
		alerts += strstr(resp->alerts[i], "passed alert_bytes 10000") ||
			  strstr(resp->alerts[i], "reached max_bytes 300000");
	check(resp->n_alerts == 2 && alerts == 2, "Status: the two alerts (%zu)", resp->n_alerts);
	sbx__v1__status_response__free_unpacked(resp, NULL);
}

/* A second proxy whose nameserver never answers: the lookup's own timer
 * refuses, and the cancelled lookup's late callback is harmless. */
static void test_lookup_timeout(const char *dir, struct sbx_config_egress cfg)
{
	char resolv[160], head[1024];
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sin);
	int udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sbx_egress *eg;
	struct sbx_err err;
	struct sandbox sb = {0};
	int64_t t0, ms;
	int fd, got;
	FILE *f;

	if (udp < 0 || bind(udp, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
	    getsockname(udp, (struct sockaddr *)&sin, &len) < 0)
		exit(2);
	snprintf(resolv, sizeof(resolv), "%s/resolv.conf", dir);
	f = fopen(resolv, "w");
	fprintf(f, "nameserver 127.0.0.1:%u\n", ntohs(sin.sin_port));
	fclose(f);
	cfg.resolv_conf = resolv;
	cfg.lookup_seconds = 1;
	cfg.records_per_run = 1;
	cfg.accepts_per_run_per_second = 2;
	cfg.idle_seconds = 1;
	check(sbx_egress_start(&cfg, &eg, &err) == 0, "a proxy with a nameserver: started");

	Sbx__V1__EgressRule r[2] = {parsed_rule("slow.test", server_port, true),
				    parsed_rule("api.test", server_port, true)};
	struct sbx_egress_run *run =
	    run_open(eg, "run-three", IDENTITY, DIGEST, allowlist(r, 2), &sb.port);

	t0 = sbx_mono_ms();
	got = sandbox_connect_via(&sb, "slow.test", server_port, &fd, head, sizeof(head));
	ms = sbx_mono_ms() - t0;
	check(got == 502 && has_reason(head, "lookup_failed") && ms >= 900 && ms < 3000,
	      "a nameserver that never answers: 502 lookup_failed after lookup_seconds (%lld ms)",
	      (long long)ms);
	close(fd);
	/* records_per_run 1: the older record is counted, not kept. */
	expect_refusal(&sb, "other.test", 80, 403, "not_allowed");
	usleep(50000);
	{
		Sbx__V1__StatusResponse *resp = status_of(run);

		check(resp->n_egress == 1 && resp->egress_records_dropped == 1 &&
			  !strcmp(resp->egress[0]->host, "other.test") &&
			  resp->n_egress_destinations == 2,
		      "records_per_run bounds the records, the totals keep every destination");
		sbx__v1__status_response__free_unpacked(resp, NULL);
	}
	/* accepts_per_run_per_second 2 (burst 4, about 3 left): the sixth of
	 * six connections at once is accepted only when its token is back;
	 * meanwhile it waits in the listener's backlog. */
	{
		int fds[6];
		int64_t start = sbx_mono_ms();
		bool all = true;

		for (int i = 0; i < 6; i++) {
			fds[i] = sandbox_connect(&sb);
			write_str(fds[i], "CONNECT other.test:80 HTTP/1.1\r\n\r\n");
		}
		for (int i = 0; i < 6; i++) {
			all = all && read_head(fds[i], head, sizeof(head)) == 403;
			close(fds[i]);
		}
		ms = sbx_mono_ms() - start;
		check(all && ms >= 900 && ms < 4000,
		      "accepts_per_run_per_second: the last waited for its token (%lld ms)",
		      (long long)ms);
	}
	/* idle_seconds 1: a relay with no byte either way is closed. */
	{
		Sbx__V1__EgressRecord rec;
		char buf[16];
		int64_t start;

		check(sandbox_connect_via(&sb, "api.test", server_port, &fd, head, sizeof(head)) ==
			  200,
		      "an idle relay: 200");
		start = sbx_mono_ms();
		check(recv(fd, buf, sizeof(buf), 0) == 0, "an idle relay: closed by the proxy");
		ms = sbx_mono_ms() - start;
		close(fd);
		check(ms >= 900 && ms < 4000 && closed_record(run, sb.connections, &rec) &&
			  !strcmp(rec.reason, "idle_timeout"),
		      "after idle_seconds, reason idle_timeout (%lld ms)", (long long)ms);
		record_free(&rec);
	}
	sbx_egress_stop(eg);
	sbx_egress_run_free(run);
	unlink(resolv);
	close(udp);
}

/* What the elements of a repeated field take packed (tag, length, body). */
static size_t elements_bytes(ProtobufCMessage *const *v, size_t n)
{
	size_t total = 0;

	for (size_t i = 0; i < n; i++) {
		size_t len = protobuf_c_message_get_packed_size(v[i]);

		total += 1 + (len < 128 ? 1 : len < 16384 ? 2 : 3) + len;
	}
	return total;
}

/* A destination that never answers a SYN: a listener whose one-place
 * backlog is taken (the kernel drops SYNs past it), on loopback. */
static int black_hole(uint16_t *port, int *filler)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(fd, 0) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sin, &len) < 0 ||
	    (*filler = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    connect(*filler, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
		perror("black_hole");
		exit(2);
	}
	*port = ntohs(sin.sin_port);
	return fd;
}

/* connect_ms says how long a connect that timed out tried. */
static void test_connect_timeout(struct sandbox *sb, struct sbx_egress_run *run, uint16_t bh)
{
	Sbx__V1__EgressRecord rec;
	int64_t t0 = sbx_mono_ms();

	expect_refusal(sb, "127.0.0.1", bh, 504, "connect_timeout");
	check(sbx_mono_ms() - t0 >= 1900, "a black hole: 504 after connect_seconds");
	if (!closed_record(run, sb->connections, &rec)) {
		check(false, "connect_timeout: a record");
		return;
	}
	check(rec.connect_ms >= 1900 && rec.connect_ms < 4000 &&
		  !strcmp(rec.reason, "connect_timeout"),
	      "connect_timeout: connect_ms %u (connect_seconds 2)", rec.connect_ms);
	record_free(&rec);
}

/* An exec's end closes its listener's connections (heads and relays
 * alike), not another exec's. */
static void test_exec_ended(struct sandbox *sb1, struct sandbox *sb2, struct sbx_egress_run *run)
{
	char head[1024], buf[16];
	Sbx__V1__EgressRecord rec;
	Sbx__V1__StatusResponse *resp;
	int relay1, head1, relay2;
	unsigned n_relay1, n_head1, n_relay2;
	struct served s;
	bool open2 = false;

	check(sandbox_connect_via(sb1, "api.test", server_port, &relay1, head, sizeof(head)) == 200,
	      "exec 1: a relay");
	n_relay1 = sb1->connections;
	/* The upstream waits for its EOF (as a quiet destination would). */
	write_str(relay1, "SEND 0 105\n");
	head1 = sandbox_connect(sb1); /* a head that never comes */
	n_head1 = sb1->connections;
	usleep(50000); /* accepted before exec 2's: connection numbers in order */
	check(sandbox_connect_via(sb2, "api.test", server_port, &relay2, head, sizeof(head)) == 200,
	      "exec 2: a relay");
	n_relay2 = sb1->connections + sb2->connections;
	usleep(50000);
	sbx_egress_run_unlisten(run, 1);
	check(recv(relay1, buf, sizeof(buf), 0) == 0 && recv(head1, buf, sizeof(buf), 0) == 0,
	      "exec 1 ended: its connections are closed");
	s = served_wait(105, NULL);
	check(s.done && s.received == 11, "the destination saw the relay end (%zu)", s.received);
	/* (The record is read before check's arguments are.) */
	if (!closed_record(run, n_relay1, &rec))
		exit(2);
	check(!strcmp(rec.reason, "exec_ended") && rec.allowed && rec.bytes_out == 11,
	      "the relay's record: exec_ended (%s), 11 bytes out", rec.reason);
	record_free(&rec);
	if (!closed_record(run, n_head1, &rec))
		exit(2);
	check(!strcmp(rec.reason, "exec_ended") && !rec.allowed,
	      "the head's record: exec_ended (%s)", rec.reason);
	record_free(&rec);
	resp = status_of(run);
	for (size_t i = 0; i < resp->n_egress; i++)
		if (resp->egress[i]->connection == n_relay2)
			open2 = resp->egress[i]->open;
	sbx__v1__status_response__free_unpacked(resp, NULL);
	check(open2, "exec 2's relay is still open");
	write_str(relay2, "SEND 3 106\n");
	shutdown(relay2, SHUT_WR);
	check(read_all(relay2, NULL, 0) == 3, "exec 2's relay still relays");
	close(relay2);
	close(relay1);
	close(head1);
}

/* Records and destinations fit a byte budget whatever hosts the sandbox
 * asks for: the oldest records are left out, rows only denied folded into
 * "(other)" before those with allowed connections, nothing uncounted. */
static void test_budget(struct sandbox *sb, struct sbx_egress_run *run)
{
	char host[256];
	Sbx__V1__StatusResponse *all, *fit;
	Sbx__V1__EgressDestination **d;
	uint64_t sum_all = 0, sum_fit = 0, sum_d = 0;
	size_t n, budget = 4096;
	uint32_t folded;
	struct sbx_err err;
	bool api = false;

	char label[64];

	memset(label, 'x', 63);
	label[63] = '\0';
	/* 40 names of 195 bytes, each refused: about 9 KB of rows. */
	for (int i = 0; i < 40; i++) {
		snprintf(host, sizeof(host), "%s.%s.%s.n%02d", label, label, label, i);
		expect_refusal(sb, host, 443, 403, "not_allowed");
	}
	usleep(50000);
	all = status_of(run);
	fit = status_fit(run, budget);
	for (size_t i = 0; i < all->n_egress_destinations; i++)
		sum_all +=
		    all->egress_destinations[i]->connections + all->egress_destinations[i]->denied;
	for (size_t i = 0; i < fit->n_egress_destinations; i++) {
		sum_fit +=
		    fit->egress_destinations[i]->connections + fit->egress_destinations[i]->denied;
		api = api || (!strcmp(fit->egress_destinations[i]->host, "api.test") &&
			      fit->egress_destinations[i]->connections > 0);
	}
	check(all->egress_destinations_folded == 0 && all->n_egress_destinations > 40,
	      "unbounded: every row (%zu)", all->n_egress_destinations);
	check(elements_bytes((ProtobufCMessage *const *)fit->egress, fit->n_egress) +
		      elements_bytes((ProtobufCMessage *const *)fit->egress_destinations,
				     fit->n_egress_destinations) <=
		  budget,
	      "Status: records and destinations in the budget");
	check(
	    fit->egress_destinations_folded > 0 &&
		fit->n_egress_destinations + fit->egress_destinations_folded ==
		    all->n_egress_destinations + 1 &&
		!strcmp(fit->egress_destinations[fit->n_egress_destinations - 1]->host, "(other)"),
	    "Status: %u rows folded into (other), the last row", fit->egress_destinations_folded);
	check(sum_fit == sum_all && api,
	      "Status: every connection still counted (%llu), allowed rows kept",
	      (unsigned long long)sum_fit);
	check(fit->n_egress > 0 && fit->n_egress < all->n_egress &&
		  fit->egress_records_dropped ==
		      all->egress_records_dropped + (all->n_egress - fit->n_egress) &&
		  fit->egress[fit->n_egress - 1]->connection ==
		      all->egress[all->n_egress - 1]->connection,
	      "Status: the newest %zu records, the older counted", fit->n_egress);
	if (runs_egress_destinations(run, 2048, &d, &n, &folded, &err) < 0)
		exit(2);
	check(elements_bytes((ProtobufCMessage *const *)d, n) <= 2048 && folded > 0,
	      "the manifest's destinations in 2048 bytes (%zu rows, %u folded)", n, folded);
	for (size_t i = 0; i < n; i++) {
		sum_d += d[i]->connections + d[i]->denied;
		sbx__v1__egress_destination__free_unpacked(d[i], NULL);
	}
	free(d);
	check(sum_d == sum_all, "the manifest: every connection still counted");
	sbx__v1__status_response__free_unpacked(all, NULL);
	sbx__v1__status_response__free_unpacked(fit, NULL);
}

static unsigned test_fourth_run(struct sbx_egress *eg)
{
	struct sandbox sb1 = {0}, sb2 = {0};
	uint16_t bh;
	int filler, bh_fd = black_hole(&bh, &filler);
	Sbx__V1__EgressRule r[2] = {parsed_rule("api.test", server_port, true),
				    parsed_rule("127.0.0.1", bh, true)};
	struct sbx_egress_run *run =
	    run_open(eg, "run-four", IDENTITY, DIGEST, allowlist(r, 2), &sb1.port);

	run_listen(run, 2, &sb2.port);
	test_connect_timeout(&sb1, run, bh);
	test_exec_ended(&sb1, &sb2, run);
	test_budget(&sb2, run);
	sbx_egress_run_free(run);
	close(filler);
	close(bh_fd);
	return sb1.connections + sb2.connections;
}

/* ---- the audit log ---- */

static void check_audit(const char *path, const char *run_id, unsigned connections, int alerts_want,
			int max_want)
{
	FILE *f = fopen(path, "r");
	char line[8192];
	int decisions[256] = {0}, closes[256] = {0}, alerts = 0, maxes = 0;
	bool once = true;

	while (f && fgets(line, sizeof(line), f)) {
		json_t *j = json_loads(line, 0, NULL);
		const char *ev = json_string_value(json_object_get(j, "event"));
		const char *run = json_string_value(json_object_get(j, "run_id"));
		json_int_t n = json_integer_value(json_object_get(j, "connection"));

		if (ev && run && !strcmp(run, run_id) && n >= 0 && n < 256) {
			if (!strcmp(ev, "egress_decision"))
				decisions[n]++;
			else if (!strcmp(ev, "egress_close"))
				closes[n]++;
			else if (!strcmp(ev, "egress_alert"))
				alerts++;
			else if (!strcmp(ev, "egress_max_bytes"))
				maxes++;
		}
		json_decref(j);
	}
	if (f)
		fclose(f);
	for (unsigned i = 1; i <= connections; i++)
		if (decisions[i] != 1 || closes[i] != 1) {
			once = false;
			fprintf(stderr, "run %s connection %u: %d decisions, %d closes\n", run_id,
				i, decisions[i], closes[i]);
		}
	check(once && decisions[connections + 1] == 0,
	      "audit %s: one decision and one close line for each of %u connections", run_id,
	      connections);
	check(alerts == alerts_want && maxes == max_want, "audit %s: %d egress_alert, %d max",
	      run_id, alerts, maxes);
}

int main(void)
{
	struct scratch scratch;
	struct sbx_config_egress cfg = {0};
	struct sbx_egress *eg;
	struct sbx_err err;
	struct sandbox sb1 = {0}, sb2 = {0};
	const uint64_t rate = 512 * 1024;

	signal(SIGPIPE, SIG_IGN);
	{
		/* served_wait waits until a CLOCK_MONOTONIC deadline. */
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&srv.cv, &ca);
		pthread_condattr_destroy(&ca);
	}
	scratch_open(&scratch, "/tmp/sbx-test-egress-XXXXXX",
		     "127.0.0.1 api.test loop.test rate.test conc.test thr.test hw.test\n");
	/* A tiny identity rate: egress lines must not be dropped by it. */
	sbx_audit_set_identity_rate(1);

	close(listen_loopback(&dead_port));
	srv.fd = listen_loopback(&srv.port);
	server_port = srv.port;
	pthread_create(&srv.thread, NULL, server_thread, NULL);

	cfg = base_config(scratch.hosts);
	cfg.head_seconds = 1;
	cfg.idle_seconds = 10;
	cfg.connections_per_run = 64;
	cfg.connections_max = 256;
	cfg.destinations[0] = (struct sbx_egress_destination){.host = "hw.test",
							      .port = server_port,
							      .max_concurrent = 1,
							      .connections_per_minute = 600};
	cfg.n_destinations = 1;
	cfg.hosts_file = "/nonexistent/hosts";
	int rc = sbx_egress_start(&cfg, &eg, &err);

	check(rc < 0 && strstr(err.msg, "hosts_file") && !eg,
	      "a hosts_file that cannot be read: refused (%s)", err.msg);
	cfg.hosts_file = scratch.hosts;
	cfg.resolv_conf = "/nonexistent/resolv.conf";
	rc = sbx_egress_start(&cfg, &eg, &err);
	check(rc < 0 && strstr(err.msg, "resolv_conf"),
	      "a resolv_conf that cannot be read: refused (%s)", err.msg);
	cfg.resolv_conf = "";
	eg = proxy_start(&cfg);

	Sbx__V1__EgressRule r1[9] = {parsed_rule("api.test", server_port, true),
				     parsed_rule("loop.test", server_port, false),
				     parsed_rule("unknown.test", server_port, true),
				     parsed_rule("rate.test", server_port, true),
				     parsed_rule("conc.test", server_port, true),
				     parsed_rule("thr.test", server_port, true),
				     parsed_rule("127.0.0.1", server_port, true),
				     parsed_rule("127.0.0.1", dead_port, true),
				     parsed_rule("hw.test", server_port, true)};

	r1[3].connections_per_minute = 2;
	r1[4].max_concurrent = 1;
	r1[5].bytes_per_second = rate;

	Sbx__V1__EgressRule r2[2] = {parsed_rule("api.test", server_port, true),
				     parsed_rule("hw.test", server_port, true)};
	Sbx__V1__Egress *pol2 = allowlist(r2, 2);

	pol2->alert_bytes = 10000;
	pol2->max_bytes = 300000;

	struct sbx_egress_run *run1 =
	    run_open(eg, "run-one", IDENTITY, DIGEST, allowlist(r1, 9), &sb1.port);
	struct sbx_egress_run *run2 = run_open(eg, "run-two", IDENTITY, DIGEST, pol2, &sb2.port);

	test_connect_relay(&sb1, run1);
	test_plain_http(&sb1, run1);
	test_refusals(&sb1, run1);
	test_rate(&sb1, run1);
	test_throttle(&sb1, run1, rate);
	test_host_wide(&sb1, &sb2);
	test_status(&sb1, run1);
	test_teardown(&sb1, run1);
	test_max_bytes(&sb2, run2);
	test_lookup_timeout(scratch.dir, cfg);
	unsigned four = test_fourth_run(eg);

	sbx_egress_run_free(run1);
	sbx_egress_stop(eg);
	/* run2 outlives the proxy: closing and freeing it still works. */
	sbx_egress_run_close(run2);
	{
		Sbx__V1__StatusResponse *resp = status_of(run2);

		check(resp->n_egress == sb2.connections, "Status after the proxy stopped");
		sbx__v1__status_response__free_unpacked(resp, NULL);
	}
	sbx_egress_run_free(run2);
	sbx_audit_close();
	check_audit(scratch.audit_path, "run-one", sb1.connections, 0, 0);
	check_audit(scratch.audit_path, "run-two", sb2.connections, 1, 1);
	check_audit(scratch.audit_path, "run-three", 9, 0, 0);
	check_audit(scratch.audit_path, "run-four", four, 0, 0);

	shutdown(srv.fd, SHUT_RDWR);
	close(srv.fd);
	pthread_join(srv.thread, NULL);
	for (size_t i = 0; i < srv.n_conns; i++)
		pthread_join(srv.conns[i], NULL);
	scratch_remove(&scratch);
	return check_done();
}
