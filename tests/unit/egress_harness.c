/* SPDX-License-Identifier: Apache-2.0 */
/* The egress unit tests' shared harness (see egress_harness.h). */
#include "egress_harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "audit.h"

/* ---- the scratch directory ---- */

void scratch_open(struct scratch *s, const char *dir_template, const char *hosts_line)
{
	struct sbx_err err;
	FILE *f;

	snprintf(s->dir, sizeof(s->dir), "%s", dir_template);
	if (!mkdtemp(s->dir)) {
		perror("mkdtemp");
		exit(2);
	}
	snprintf(s->hosts, sizeof(s->hosts), "%s/hosts", s->dir);
	snprintf(s->audit_path, sizeof(s->audit_path), "%s/audit.log", s->dir);
	f = fopen(s->hosts, "w");
	if (!f || fputs(hosts_line, f) < 0 || fclose(f) != 0) {
		perror("hosts file");
		exit(2);
	}
	if (sbx_audit_open(s->audit_path, NULL, &err) < 0) {
		fprintf(stderr, "audit: %s\n", err.msg);
		exit(2);
	}
}

void scratch_remove(struct scratch *s)
{
	unlink(s->hosts);
	unlink(s->audit_path);
	rmdir(s->dir);
}

/* ---- destination servers ---- */

struct conn_arg {
	struct server *s;
	int fd;
};

static void *serve_one(void *arg)
{
	struct conn_arg a = *(struct conn_arg *)arg;
	char buf[65536];
	size_t kept = 0;

	free(arg);
	if (a.s->blast_bytes) {
		size_t left = a.s->blast_bytes;

		memset(buf, 'd', sizeof(buf));
		while (left) {
			ssize_t n =
			    send(a.fd, buf, left < sizeof(buf) ? left : sizeof(buf), MSG_NOSIGNAL);
			if (n <= 0)
				break;
			left -= (size_t)n;
		}
	}
	for (;;) {
		ssize_t n = recv(a.fd, buf, sizeof(buf), 0);

		if (n <= 0)
			break;
		a.s->received += (unsigned long long)n;
		pthread_mutex_lock(&a.s->mu);
		for (ssize_t i = 0; i < n && kept < SERVER_KEEP - 1; i++)
			a.s->keep[kept++] = buf[i];
		a.s->keep[kept] = '\0';
		a.s->kept = kept;
		pthread_mutex_unlock(&a.s->mu);
	}
	close(a.fd);
	return NULL;
}

static void *server_thread(void *arg)
{
	struct server *s = arg;

	for (;;) {
		int fd = accept(s->fd, NULL, NULL);
		struct conn_arg *a;
		pthread_t t;

		if (fd < 0)
			return NULL;
		s->accepted++;
		a = malloc(sizeof(*a));
		if (!a) {
			close(fd);
			continue;
		}
		a->s = s;
		a->fd = fd;
		if (pthread_create(&t, NULL, serve_one, a) == 0) {
			pthread_detach(t);
		} else {
			free(a);
			close(fd);
		}
	}
}

void server_start(struct server *s, size_t blast_bytes)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	s->blast_bytes = blast_bytes;
	s->fd = listen_loopback(&s->port);
	if (pthread_create(&s->thread, NULL, server_thread, s) != 0) {
		fprintf(stderr, "server thread\n");
		exit(2);
	}
}

/* ---- sockets ---- */

int listen_loopback(uint16_t *port)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(fd, 512) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sin, &len) < 0) {
		perror("listen_loopback");
		exit(2);
	}
	*port = ntohs(sin.sin_port);
	return fd;
}

int proxy_dial(uint16_t port, int recv_seconds)
{
	struct sockaddr_in sin = {.sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				  .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct timeval tv = {.tv_sec = recv_seconds};

	if (fd < 0) {
		perror("socket");
		exit(2);
	}
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
		int saved = errno;

		close(fd);
		errno = saved;
		return -1;
	}
	/* Without the timeout a test fails only by ctest's TIMEOUT. */
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

int proxy_connect(uint16_t port)
{
	int fd = proxy_dial(port, 5);

	if (fd < 0) {
		perror("proxy_connect");
		exit(2);
	}
	return fd;
}

size_t write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	size_t sent = 0;

	while (n) {
		ssize_t k = send(fd, c, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		c += k;
		n -= (size_t)k;
		sent += (size_t)k;
	}
	return sent;
}

void write_str(int fd, const char *s)
{
	/* A short write shows in what the other side counted. */
	(void)write_all(fd, s, strlen(s));
}

int read_head(int fd, char *out, size_t size)
{
	size_t n = 0;

	while (n + 1 < size) {
		ssize_t k = recv(fd, out + n, 1, 0);

		if (k <= 0)
			break;
		n++;
		out[n] = '\0';
		if (n >= 4 && !memcmp(out + n - 4, "\r\n\r\n", 4))
			break;
	}
	out[n] = '\0';
	return n > 12 && !strncmp(out, "HTTP/1.1 ", 9) ? atoi(out + 9) : -1;
}

int connect_on(int fd, const char *host, uint16_t port, char *head, size_t size)
{
	char req[600];

	snprintf(req, sizeof(req), "CONNECT %s:%u HTTP/1.1\r\nHost: %s:%u\r\n\r\n", host, port,
		 host, port);
	write_str(fd, req);
	return read_head(fd, head, size);
}

int connect_via(uint16_t proxy, const char *host, uint16_t port, int *fdp)
{
	char head[1024];
	int fd = proxy_dial(proxy, 5);

	*fdp = fd;
	if (fd < 0)
		return -1;
	return connect_on(fd, host, port, head, sizeof(head));
}

/* ---- the proxy and its runs ---- */

struct sbx_config_egress base_config(char *hosts)
{
	struct sbx_config_egress cfg = {0};

	cfg.hosts_file = hosts;
	cfg.resolv_conf = "";
	cfg.head_seconds = 10;
	cfg.lookup_seconds = 2;
	cfg.connect_seconds = 2;
	cfg.idle_seconds = 30;
	cfg.connections_per_run = 256;
	cfg.connections_max = 4096;
	cfg.records_per_run = 256;
	cfg.accepts_per_run_per_second = 1000;
	return cfg;
}

struct sbx_egress *proxy_start(struct sbx_config_egress *cfg)
{
	struct sbx_egress *eg;
	struct sbx_err err;

	if (sbx_egress_start(cfg, &eg, &err) < 0) {
		fprintf(stderr, "start: %s\n", err.msg);
		exit(2);
	}
	return eg;
}

Sbx__V1__EgressRule rule(const char *host, uint16_t port)
{
	Sbx__V1__EgressRule r = SBX__V1__EGRESS_RULE__INIT;

	r.host = (char *)host;
	r.port = port;
	r.allow_private = true; /* the test's servers are on loopback */
	r.connections_per_minute = 6000;
	r.max_concurrent = 256;
	return r;
}

Sbx__V1__Egress *allowlist(Sbx__V1__EgressRule *rules, size_t n)
{
	enum { POLICIES = 64, RULES = 16 };
	static Sbx__V1__EgressRule *ptrs[POLICIES][RULES];
	static Sbx__V1__Egress pols[POLICIES];
	static int used;
	Sbx__V1__Egress *pol;

	if (used == POLICIES || n > RULES) {
		fprintf(stderr, "allowlist: more than %d policies or %d rules\n", POLICIES, RULES);
		exit(2);
	}
	pol = &pols[used];
	sbx__v1__egress__init(pol);
	for (size_t i = 0; i < n; i++)
		ptrs[used][i] = &rules[i];
	pol->allow = ptrs[used];
	pol->n_allow = n;
	used++;
	return pol;
}

struct sbx_egress_run *run_new(struct sbx_egress *eg, const char *id, const char *who,
			       const char *digest, Sbx__V1__Egress *policy)
{
	struct sbx_egress_run_info info = {
	    .run_id = id, .identity = who, .policy_digest = digest, .policy = policy};
	struct sbx_err err;
	struct sbx_egress_run *run = sbx_egress_run_open(eg, &info, &err);

	if (!run) {
		fprintf(stderr, "run: %s\n", err.msg);
		exit(2);
	}
	return run;
}

void run_listen(struct sbx_egress_run *run, uint64_t exec_id, uint16_t *port)
{
	struct sbx_err err;

	if (sbx_egress_run_listen(run, exec_id, listen_loopback(port), &err) < 0) {
		fprintf(stderr, "listen: %s\n", err.msg);
		exit(2);
	}
}

struct sbx_egress_run *run_open(struct sbx_egress *eg, const char *id, const char *who,
				const char *digest, Sbx__V1__Egress *policy, uint16_t *port)
{
	struct sbx_egress_run *run = run_new(eg, id, who, digest, policy);

	run_listen(run, 1, port);
	return run;
}

/* ---- Status ---- */

Sbx__V1__StatusResponse *status_fit(struct sbx_egress_run *run, size_t max_bytes)
{
	Sbx__V1__StatusResponse *resp = malloc(sizeof(*resp));
	struct sbx_err err;

	if (!resp) {
		fprintf(stderr, "status: out of memory\n");
		exit(2);
	}
	sbx__v1__status_response__init(resp);
	if (runs_egress_status(run, resp, max_bytes, &err) < 0) {
		fprintf(stderr, "status: %s\n", err.msg);
		exit(2);
	}
	return resp;
}

Sbx__V1__StatusResponse *status_of(struct sbx_egress_run *run)
{
	return status_fit(run, SIZE_MAX);
}

bool closed_record(struct sbx_egress_run *run, uint64_t n, Sbx__V1__EgressRecord *out)
{
	for (int tries = 0; tries < 300; tries++) {
		Sbx__V1__StatusResponse *resp = status_of(run);
		bool found = false;

		for (size_t i = 0; i < resp->n_egress; i++) {
			Sbx__V1__EgressRecord *r = resp->egress[i];

			if (r->connection == n && !r->open) {
				*out = *r;
				out->host = strdup(r->host);
				out->reason = strdup(r->reason);
				out->address = strdup(r->address);
				out->method = strdup(r->method);
				found = true;
			}
		}
		sbx__v1__status_response__free_unpacked(resp, NULL);
		if (found)
			return true;
		usleep(10000);
	}
	return false;
}

void record_free(Sbx__V1__EgressRecord *r)
{
	free(r->host);
	free(r->reason);
	free(r->address);
	free(r->method);
}
