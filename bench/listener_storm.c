/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-bench-listener: what a storm of bad connections costs a legitimate
 * caller of sbxd's tcp listener, next to a bare nng REP server measured in
 * the same run (the same nng, without sbxd's connection guard).
 *
 * For each storm rate (0, 10, 100, 1000 bad connections/s) and each
 * attacker address (127.0.0.2, and the caller's own 127.0.0.1), a thread
 * makes bad connections at that rate while the caller takes N samples of a
 * fresh connection + one call (nng REQ: dial, Health, reply), with random
 * 50-150 ms gaps so that they do not phase-lock with nng's 100 ms listener
 * pause. Each cell's p50 and p90 are printed with their ratio against the
 * same server's 0/s baseline.
 *
 * The servers: a private sbxd (a tcp:// listener on 127.0.0.1, "insecure",
 * with a bearer token the caller sends) started once in a temporary
 * directory, and "raw nng": this program re-executed as a bare nng_rep0
 * server echoing every request, started afresh for each cell (a storm can
 * stop nng 1.5.2's listener for good, nng #1518, and the next cell would
 * measure that instead). The caller links plain libnng: no
 * common/nngfix/nng_epipe.c, so both servers see the same client. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <jansson.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <openssl/evp.h>

#include "bench_scratch.h"
#include "bench_util.h"
#include "sbx/v1/sandbox.pb-c.h"
#include "sleep.h"
#include "util.h"

#define PROG		 "sbx-bench-listener"
#define SERVE_RAW_OPT	 "--serve-raw-nng" /* internal: the raw nng peer */
#define HEALTH_METHOD	 "/sbx.v1.Sandbox/Health"
#define START_TIMEOUT_MS 15000
#define STOP_TIMEOUT_MS	 30000
#define CALL_DEADLINE_MS 2000  /* a sample not answered by then is lost */
#define CELL_MAX_MS	 30000 /* no more samples in a cell after this */
#define WARMUP_MS	 300   /* storm running before the first sample */
#define SETTLE_MS	 1000  /* after a storm from the caller's address: its budget refills */
#define BAD_WAIT_MS	 200   /* an attacker's connect or header wait */
#define GAP_MIN_MS	 50
#define GAP_SPAN_MS	 100
#define MAX_RATES	 16
#define LEGIT_ADDR	 "127.0.0.1"

/* ------------------------------------------------------------ basics */

static pid_t sbxd_pid = -1; /* our sbxd, stopped at the end */
static pid_t raw_pid = -1;  /* the raw nng peer of the cell, if any */
static bool cleaning;

/* Sleeps until the monotonic instant at_ms (bench_now_ms's clock). */
static void sleep_until_ms(double at_ms)
{
	double ns = at_ms * 1e6;
	struct timespec ts = {.tv_sec = (time_t)(ns / 1e9),
			      .tv_nsec = (long)(ns - (double)(time_t)(ns / 1e9) * 1e9)};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR &&
	       !bench_interrupted)
		;
}

static uint64_t rng_state;

static uint32_t rng_next(void)
{
	/* xorshift64*: the gaps only need to be spread, not secret. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 2685821657736338717ULL) >> 32);
}

/* ------------------------------------------------------------ processes */

static void cleanup(void)
{
	if (cleaning)
		return;
	cleaning = true;
	bench_stop_child(&raw_pid, "the raw nng server", STOP_TIMEOUT_MS);
	bench_stop_child(&sbxd_pid, "sbxd", STOP_TIMEOUT_MS);
	bench_scratch_remove();
}

/* ------------------------------------------------------------ the caller */

struct target {
	const char *name; /* "sbxd", "raw nng" */
	bool sbxd;	  /* the answer must be an OK Response */
	char url[64];
	int port;
	uint8_t *req; /* the packed request */
	size_t req_len;
	char log[PATH_MAX]; /* the server's stderr */
	pid_t *pid;
};

struct call {
	double ms; /* dial start to reply */
	int rv;	   /* nng's, or NNG_EPROTO for a reply that is not OK */
	char why[160];
};

static void nng_or_die(int rv, const char *what)
{
	if (rv != 0)
		bench_die("%s: %s", what, nng_strerror(rv));
}

/* A new REQ socket and dialer (retrying every 10..100 ms, as a caller
 * whose connect was refused would), one request, its reply, close. The
 * whole call must fit CALL_DEADLINE_MS. */
static void one_call(const struct target *t, struct call *c)
{
	nng_socket s = NNG_SOCKET_INITIALIZER;
	nng_dialer d = NNG_DIALER_INITIALIZER;
	char *rep = NULL;
	size_t len = 0;

	*c = (struct call){0};
	double t0 = bench_now_ms();
	nng_or_die(nng_req0_open(&s), "nng_req0_open");
	nng_or_die(nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 10), "NNG_OPT_RECONNMINT");
	nng_or_die(nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 100), "NNG_OPT_RECONNMAXT");
	nng_or_die(nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, CALL_DEADLINE_MS), "NNG_OPT_SENDTIMEO");
	nng_or_die(nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 1 << 20), "NNG_OPT_RECVMAXSZ");
	nng_or_die(nng_dialer_create(&d, s, t->url), "nng_dialer_create");
	nng_or_die(nng_dialer_start(d, NNG_FLAG_NONBLOCK), "nng_dialer_start");
	c->rv = nng_send(s, t->req, t->req_len, 0);
	if (c->rv == 0) {
		int left = CALL_DEADLINE_MS - (int)(bench_now_ms() - t0);
		nng_or_die(nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, left > 1 ? left : 1),
			   "NNG_OPT_RECVTIMEO");
		c->rv = nng_recv(s, &rep, &len, NNG_FLAG_ALLOC);
	}
	c->ms = bench_now_ms() - t0;
	if (c->rv != 0) {
		snprintf(c->why, sizeof(c->why), "%s", nng_strerror(c->rv));
	} else if (t->sbxd) {
		Sbx__V1__Response *r = sbx__v1__response__unpack(NULL, len, (const uint8_t *)rep);
		if (!r || r->code != SBX__V1__CODE__OK) {
			c->rv = NNG_EPROTO;
			if (r)
				snprintf(c->why, sizeof(c->why), "Health answered code %d: %s",
					 (int)r->code, r->message ? r->message : "");
			else
				snprintf(c->why, sizeof(c->why),
					 "Health answered something that is not a Response");
		}
		if (r)
			sbx__v1__response__free_unpacked(r, NULL);
	}
	if (rep)
		nng_free(rep, len);
	nng_close(s);
}

/* Calls until one is answered: the server is up. */
static void wait_answers(const struct target *t)
{
	struct call c;

	for (double t0 = bench_now_ms();;) {
		int status;

		one_call(t, &c);
		if (c.rv == 0)
			return;
		if (*t->pid > 0 && waitpid(*t->pid, &status, WNOHANG) == *t->pid) {
			*t->pid = -1;
			bench_die("%s exited (%s): %s", t->name, bench_status_str(status),
				  bench_tail_of(t->log));
		}
		bench_check_interrupt();
		if (bench_now_ms() - t0 > START_TIMEOUT_MS)
			bench_die("%s did not answer on %s within %d s (%s): %s", t->name, t->url,
				  START_TIMEOUT_MS / 1000, c.why, bench_tail_of(t->log));
		sbx_sleep_ms(50);
	}
}

/* ------------------------------------------------------------ servers */

static void random_hex(char *out, size_t bytes)
{
	unsigned char buf[32];

	if (bytes > sizeof(buf))
		bytes = sizeof(buf);
	if (getrandom(buf, bytes, 0) != (ssize_t)bytes)
		bench_die_errno("getrandom");
	for (size_t i = 0; i < bytes; i++)
		snprintf(out + 2 * i, 3, "%02x", buf[i]);
}

/* The Health request every sample sends, with the token. */
static void pack_health(struct target *t, const char *token)
{
	Sbx__V1__Request r = SBX__V1__REQUEST__INIT;

	r.method = HEALTH_METHOD;
	r.credentials = (char *)token;
	t->req_len = sbx__v1__request__get_packed_size(&r);
	t->req = malloc(t->req_len);
	if (!t->req)
		bench_die("out of memory");
	sbx__v1__request__pack(&r, t->req);
}

static void start_sbxd(struct target *t, const char *sbxd, const char *helper)
{
	char config[PATH_MAX], state[PATH_MAX], audit[PATH_MAX], token[65], hash[65];

	bench_scratch_path(config, sizeof(config), "sbxd.json");
	bench_scratch_path(state, sizeof(state), "state");
	bench_scratch_path(audit, sizeof(audit), "audit.log");
	bench_scratch_path(t->log, sizeof(t->log), "sbxd.stderr");
	t->port = bench_free_port();
	snprintf(t->url, sizeof(t->url), "tcp://127.0.0.1:%d", t->port);
	random_hex(token, 32);
	bench_sha256_hex_of(token, hash);
	json_t *cfg = json_pack("{s:[s], s:b, s:s, s:s, s:s, s:[{s:s, s:s}]}", "listen", t->url,
				"insecure", 1, "state_dir", state, "helper", helper, "log", audit,
				"tokens", "name", "bench", "sha256", hash);
	if (!cfg)
		bench_die("building the config failed");
	if (json_dump_file(cfg, config, JSON_INDENT(2)) < 0)
		bench_die_errno("write %s", config);
	json_decref(cfg);
	pack_health(t, token);

	char *argv[] = {(char *)sbxd, "--config", config, NULL};
	bench_note("starting %s --config %s (%s)", sbxd, config, t->url);
	sbxd_pid = bench_spawn(argv, NULL, t->log);
	t->pid = &sbxd_pid;
	wait_answers(t);
}

static void start_raw(struct target *t, const char *self)
{
	bench_scratch_path(t->log, sizeof(t->log), "raw-nng.stderr");
	t->port = bench_free_port();
	snprintf(t->url, sizeof(t->url), "tcp://127.0.0.1:%d", t->port);
	char *argv[] = {(char *)self, SERVE_RAW_OPT, t->url, NULL};
	raw_pid = bench_spawn(argv, NULL, t->log);
	t->pid = &raw_pid;
	wait_answers(t);
}

/* The raw nng peer (this program with SERVE_RAW_OPT URL): a bare nng_rep0
 * socket listening on URL, echoing every request, until SIGTERM. */
static int serve_raw(const char *url)
{
	nng_socket s;
	int rv;

	if ((rv = nng_rep0_open(&s)) != 0 || (rv = nng_listen(s, url, NULL, 0)) != 0) {
		fprintf(stderr, "%s: raw nng server on %s: %s\n", PROG, url, nng_strerror(rv));
		return 1;
	}
	for (;;) {
		nng_msg *m;

		if ((rv = nng_recvmsg(s, &m, 0)) != 0) {
			fprintf(stderr, "%s: raw nng server: recv: %s\n", PROG, nng_strerror(rv));
			continue;
		}
		if ((rv = nng_sendmsg(s, m, 0)) != 0) {
			nng_msg_free(m);
			fprintf(stderr, "%s: raw nng server: send: %s\n", PROG, nng_strerror(rv));
		}
	}
}

/* ------------------------------------------------------------ the storm */

enum kind { K_HDRGARBAGE, K_CLOSE, K_FINRST, K_COUNT };

static const char *const kind_names[K_COUNT] = {"hdrgarbage", "close", "finrst"};
static const char *const kind_help[K_COUNT] = {
    "reads the server's 8-byte SP header, sends 8 bad bytes, closes",
    "closes right after connect",
    "shutdown(SHUT_WR) (a FIN), then close with SO_LINGER 0 (an RST)",
};

struct storm {
	enum kind kind;
	long rate; /* per second */
	struct sockaddr_in src, dst;
	pthread_t thread;
	atomic_bool stop;
	long made, failed; /* bad connections made; connects that failed */
	double ms;	   /* how long it ran */
};

/* Waits up to BAD_WAIT_MS for events on fd. */
static bool wait_fd(int fd, short events)
{
	struct pollfd p = {.fd = fd, .events = events};

	return poll(&p, 1, BAD_WAIT_MS) == 1;
}

/* One bad connection; false if the connect itself failed. */
static bool bad_connection(const struct storm *st)
{
	_cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	static const struct linger rst = {.l_onoff = 1, .l_linger = 0};
	int one = 1, err = 0;
	socklen_t len = sizeof(err);

	if (fd < 0)
		return false;
	/* The port is chosen at connect, per destination: no ephemeral port
	 * is held by a bound, unconnected socket. */
	setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&st->src, sizeof(st->src)) < 0)
		return false;
	if (connect(fd, (const struct sockaddr *)&st->dst, sizeof(st->dst)) < 0) {
		if (errno != EINPROGRESS || !wait_fd(fd, POLLOUT) ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err)
			return false;
	}
	switch (st->kind) {
	case K_CLOSE:
		break;
	case K_FINRST:
		shutdown(fd, SHUT_WR);
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
		break;
	case K_HDRGARBAGE: {
		char hdr[8];
		size_t got = 0;

		while (got < sizeof(hdr) && wait_fd(fd, POLLIN)) {
			ssize_t n = recv(fd, hdr + got, sizeof(hdr) - got, 0);
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		(void)!send(fd, "GET / HT", 8, MSG_NOSIGNAL);
		break;
	}
	case K_COUNT:
		break;
	}
	return true;
}

/* Bad connections on a schedule of rate per second from the start (one
 * that ran late is followed at once by the next), until told to stop. */
static void *storm_main(void *arg)
{
	struct storm *st = arg;
	double t0 = bench_now_ms();

	for (long i = 0; !atomic_load(&st->stop) && !bench_interrupted; i++) {
		sleep_until_ms(t0 + (double)i * 1000.0 / (double)st->rate);
		if (bad_connection(st))
			st->made++;
		else
			st->failed++;
	}
	st->ms = bench_now_ms() - t0;
	return NULL;
}

static void sockaddr_of(struct sockaddr_in *a, const char *ip, int port)
{
	*a = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (inet_pton(AF_INET, ip, &a->sin_addr) != 1)
		bench_die("bad address %s", ip);
}

/* ------------------------------------------------------------ cells */

struct cell {
	const char *target;
	enum kind kind;
	const char *from; /* the attacker's address; NULL at 0/s */
	long rate;
	double made_per_s; /* what the storm achieved */
	long failed;	   /* its connects that failed */
	double *ms;	   /* answered samples */
	size_t n, taken;
	const struct cell *base; /* the same server's 0/s */
};

static struct cell cells[2 * (1 + 2 * K_COUNT * MAX_RATES)];
static size_t n_cells;

static void measure(struct cell *c, const struct target *t, long samples)
{
	struct storm st = {.kind = c->kind, .rate = c->rate};
	struct call call;
	bool storming = c->rate > 0;
	char first_why[160] = "";

	c->ms = calloc((size_t)samples, sizeof(double));
	if (!c->ms)
		bench_die("out of memory");
	if (storming) {
		sockaddr_of(&st.src, c->from, 0);
		sockaddr_of(&st.dst, "127.0.0.1", t->port);
		atomic_init(&st.stop, false);
		int e = pthread_create(&st.thread, NULL, storm_main, &st);
		if (e) {
			errno = e;
			bench_die_errno("pthread_create");
		}
		sbx_sleep_ms(WARMUP_MS);
	}
	double t0 = bench_now_ms();
	for (long i = 0; i < samples && bench_now_ms() - t0 < CELL_MAX_MS; i++) {
		bench_check_interrupt();
		one_call(t, &call);
		c->taken++;
		if (call.rv == 0)
			c->ms[c->n++] = call.ms;
		else if (!first_why[0])
			snprintf(first_why, sizeof(first_why), "%s", call.why);
		sbx_sleep_ms(GAP_MIN_MS + (int64_t)(rng_next() % (GAP_SPAN_MS + 1)));
	}
	if (storming) {
		atomic_store(&st.stop, true);
		pthread_join(st.thread, NULL);
		c->made_per_s = st.ms > 0 ? (double)st.made * 1000.0 / st.ms : 0;
		c->failed = st.failed;
	}
	bench_check_interrupt();
	bench_note("%-7s %-10s %-9s %5ld/s: %zu/%zu answered, p50 %.1f p90 %.1f ms%s%s", c->target,
		   storming ? kind_names[c->kind] : "-", storming ? c->from : "-", c->rate, c->n,
		   c->taken, bench_pct(c->ms, c->n, 50), bench_pct(c->ms, c->n, 90),
		   first_why[0] ? "; first loss: " : "", first_why);
	if (storming && !strcmp(c->from, LEGIT_ADDR))
		sbx_sleep_ms(SETTLE_MS);
}

static struct cell *new_cell(const char *target, enum kind kind, const char *from, long rate)
{
	if (n_cells == SBX_ARRAY_SIZE(cells))
		bench_die("too many cells");
	struct cell *c = &cells[n_cells++];
	*c = (struct cell){.target = target, .kind = kind, .from = from, .rate = rate};
	return c;
}

/* One server: its 0/s baseline, then each kind, rate and address. With
 * raw, a fresh raw nng server for every cell. */
static void measure_target(struct target *t, const char *self, const bool *kinds, const long *rates,
			   size_t n_rates, long samples)
{
	static const char *const froms[] = {"127.0.0.2", LEGIT_ADDR};

	if (!t->sbxd)
		start_raw(t, self);
	struct cell *base = new_cell(t->name, K_HDRGARBAGE, NULL, 0);
	base->base = base;
	measure(base, t, samples);
	for (int k = 0; k < K_COUNT; k++) {
		if (!kinds[k])
			continue;
		for (size_t r = 0; r < n_rates; r++) {
			if (!rates[r])
				continue;
			for (size_t f = 0; f < SBX_ARRAY_SIZE(froms); f++) {
				struct cell *c =
				    new_cell(t->name, (enum kind)k, froms[f], rates[r]);
				c->base = base;
				if (!t->sbxd) {
					bench_stop_child(&raw_pid, "the raw nng server",
							 STOP_TIMEOUT_MS);
					start_raw(t, self);
				}
				measure(c, t, samples);
			}
		}
	}
	if (!t->sbxd)
		bench_stop_child(&raw_pid, "the raw nng server", STOP_TIMEOUT_MS);
}

static void fmt_ratio(char *buf, size_t size, double x, double base)
{
	if (base > 0 && x > 0)
		snprintf(buf, size, "%.2f", x / base);
	else
		snprintf(buf, size, "-");
}

static void print_table(const struct bench_host *h, long samples, const bool *kinds)
{
	printf("%-8s %-10s %-10s %6s %8s %9s %8s %8s %9s %9s\n", "server", "storm", "from",
	       "rate/s", "made/s", "answered", "p50 ms", "p90 ms", "p50/base", "p90/base");
	for (size_t i = 0; i < n_cells; i++) {
		const struct cell *c = &cells[i];
		const struct cell *b = c->base;
		double p50 = bench_pct(c->ms, c->n, 50), p90 = bench_pct(c->ms, c->n, 90);
		double b50 = bench_pct(b->ms, b->n, 50), b90 = bench_pct(b->ms, b->n, 90);
		char made[16], ans[24], s50[16], s90[16], r50[16], r90[16];

		if (c->rate)
			snprintf(made, sizeof(made), "%.0f", c->made_per_s);
		else
			snprintf(made, sizeof(made), "-");
		snprintf(ans, sizeof(ans), "%zu/%zu", c->n, c->taken);
		snprintf(s50, sizeof(s50), c->n ? "%.1f" : "-", p50);
		snprintf(s90, sizeof(s90), c->n ? "%.1f" : "-", p90);
		fmt_ratio(r50, sizeof(r50), c->n ? p50 : 0, b50);
		fmt_ratio(r90, sizeof(r90), c->n ? p90 : 0, b90);
		printf("%-8s %-10s %-10s %6ld %8s %9s %8s %8s %9s %9s\n", c->target,
		       c->rate ? kind_names[c->kind] : "-", c->rate ? c->from : "-", c->rate, made,
		       ans, s50, s90, r50, r90);
	}
	printf("(a sample: a fresh nng REQ connection + one call (Health on sbxd, an echo on raw "
	       "nng),\n"
	       " %ld per row, 50-150 ms apart, lost after %d ms; p50/p90 of the answered ones; "
	       "ratios\n"
	       " against the same server's 0/s row; the caller is %s; made/s: bad connections "
	       "the\n"
	       " storm made per second)\n",
	       samples, CALL_DEADLINE_MS, LEGIT_ADDR);
	for (int k = 0; k < K_COUNT; k++)
		if (kinds[k])
			printf("storm %s: %s\n", kind_names[k], kind_help[k]);
	printf("host: %s, cgroup %s%s, %ld CPUs, load %.2f %.2f %.2f\n", h->kernel, h->cgroup,
	       h->hybrid ? " (hybrid)" : "", h->cpus, h->load[0], h->load[1], h->load[2]);
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f)
{
	fprintf(
	    f, "usage: " PROG " [--sbxd PATH] [--helper PATH] [--kind LIST] [--rates LIST]\n"
	       "                          [--samples N] [--no-raw] [-n|--quick]\n"
	       "\n"
	       "What a storm of bad connections costs a legitimate caller. Starts a private\n"
	       "sbxd (tcp://127.0.0.1, insecure, a bearer token) and, for each storm rate\n"
	       "and attacker address (127.0.0.2, then the caller's own 127.0.0.1), makes bad\n"
	       "connections at that rate from a thread while taking N samples of a fresh\n"
	       "nng REQ connection + one Health call, 50-150 ms apart (random, so that they\n"
	       "do not phase-lock with nng's 100 ms listener pause). The same against a\n"
	       "bare nng REP server (this program, re-executed; a fresh one for each row):\n"
	       "what sbxd's connection guard buys. Prints p50 and p90 of each row and\n"
	       "their ratio against the same server's 0/s row. Loopback only.\n"
	       "\n"
	       "  --sbxd PATH      sbxd (default <dir of this binary>/../server/sbxd)\n"
	       "  --helper PATH    sbx-helper (default <dir of this binary>/../helper/sbx-helper)\n"
	       "  --kind LIST      bad connections, comma-separated (default hdrgarbage):\n"
	       "                     hdrgarbage  read the SP header, send 8 bad bytes, close\n"
	       "                     close       close right after connect\n"
	       "                     finrst      shutdown(SHUT_WR), then close with SO_LINGER 0\n"
	       "                     all         the three\n"
	       "  --rates LIST     storm rates per second, comma-separated (default\n"
	       "                   0,10,100,1000; 0/s is always measured: the baseline)\n"
	       "  --samples N      samples per row (default 60)\n"
	       "  --no-raw         sbxd only\n"
	       "  -n, --quick      20 samples per row\n"
	       "  -h, --help       this text\n"
	       "\n"
	       "Must run as an unprivileged user (sbxd refuses root), e.g.\n"
	       "  runuser -u sbx-test -- " PROG " --quick\n"
	       "Exit status: 0 done (lost samples are figures, not failures); 1 a server\n"
	       "did not start or bad set-up; 2 usage.\n");
}

static void parse_kinds(const char *s, bool *kinds)
{
	_cleanup_free_ char *copy = strdup(s);
	char *save = NULL;

	if (!copy)
		bench_die("out of memory");
	memset(kinds, 0, K_COUNT * sizeof(*kinds));
	for (char *k = strtok_r(copy, ",", &save); k; k = strtok_r(NULL, ",", &save)) {
		bool all = !strcmp(k, "all"), found = all;

		for (int i = 0; i < K_COUNT; i++) {
			if (all || !strcmp(k, kind_names[i])) {
				kinds[i] = true;
				found = true;
			}
		}
		if (!found) {
			bench_note("--kind: expected hdrgarbage, close, finrst or all, got '%s'",
				   k);
			exit(2);
		}
	}
}

static size_t parse_rates(const char *s, long *rates)
{
	_cleanup_free_ char *copy = strdup(s);
	char *save = NULL;
	size_t n = 0;

	if (!copy)
		bench_die("out of memory");
	for (char *r = strtok_r(copy, ",", &save); r; r = strtok_r(NULL, ",", &save)) {
		if (n == MAX_RATES) {
			bench_note("--rates: at most %d rates", MAX_RATES);
			exit(2);
		}
		rates[n++] = bench_parse_count("--rates", r, 0, 100000);
	}
	if (!n) {
		bench_note("--rates: expected a comma-separated list of rates");
		exit(2);
	}
	return n;
}

int main(int argc, char **argv)
{
	enum { O_SBXD = 256, O_HELPER, O_KIND, O_RATES, O_SAMPLES, O_NO_RAW };
	static const struct option opts[] = {
	    {"sbxd", required_argument, NULL, O_SBXD},
	    {"helper", required_argument, NULL, O_HELPER},
	    {"kind", required_argument, NULL, O_KIND},
	    {"rates", required_argument, NULL, O_RATES},
	    {"samples", required_argument, NULL, O_SAMPLES},
	    {"no-raw", no_argument, NULL, O_NO_RAW},
	    {"quick", no_argument, NULL, 'n'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	char sbxd_buf[PATH_MAX], helper_buf[PATH_MAX], self[PATH_MAX];
	const char *sbxd = NULL, *helper = NULL;
	bool kinds[K_COUNT] = {[K_HDRGARBAGE] = true};
	long rates[MAX_RATES] = {0, 10, 100, 1000}, samples = 0;
	size_t n_rates = 4;
	bool quick = false, raw = true;
	int c;

	bench_prog = PROG;
	if (argc == 3 && !strcmp(argv[1], SERVE_RAW_OPT))
		return serve_raw(argv[2]);
	atexit(cleanup); /* bench_die's exit stops the servers and removes the scratch directory */

	while ((c = getopt_long(argc, argv, "hn", opts, NULL)) != -1) {
		switch (c) {
		case O_SBXD:
			sbxd = optarg;
			break;
		case O_HELPER:
			helper = optarg;
			break;
		case O_KIND:
			parse_kinds(optarg, kinds);
			break;
		case O_RATES:
			n_rates = parse_rates(optarg, rates);
			break;
		case O_SAMPLES:
			samples = bench_parse_count("--samples", optarg, 1, 100000);
			break;
		case O_NO_RAW:
			raw = false;
			break;
		case 'n':
			quick = true;
			break;
		default:
			return bench_option_other(c, usage);
		}
	}
	if (bench_no_operands(argc, argv, optind, usage))
		return 2;
	bench_refuse_root(argv[0], "sbxd refuses root");
	if (!samples)
		samples = quick ? 20 : 60;
	bench_find_sbxd_helper(&sbxd, sbxd_buf, &helper, helper_buf, sizeof(helper_buf));
	bench_make_absolute(&helper, helper_buf, sizeof(helper_buf));
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len < 0)
		bench_die_errno("readlink /proc/self/exe");
	self[len] = '\0';
	if (getrandom(&rng_state, sizeof(rng_state), 0) != (ssize_t)sizeof(rng_state))
		bench_die_errno("getrandom");
	rng_state |= 1;

	bench_on_signals(bench_on_signal);
	signal(SIGPIPE, SIG_IGN);
	bench_scratch_make();
	bench_note("temporary directory %s", bench_scratch_dir());

	struct target ts = {.name = "sbxd", .sbxd = true};
	start_sbxd(&ts, sbxd, helper);
	measure_target(&ts, self, kinds, rates, n_rates, samples);
	bench_stop_child(&sbxd_pid, "sbxd", STOP_TIMEOUT_MS);
	if (raw) {
		struct target tr = {.name = "raw nng", .req = ts.req, .req_len = ts.req_len};
		measure_target(&tr, self, kinds, rates, n_rates, samples);
	}
	free(ts.req);

	struct bench_host h;
	bench_probe_host(&h);
	cleanup();
	print_table(&h, samples, kinds);
	return 0;
}
