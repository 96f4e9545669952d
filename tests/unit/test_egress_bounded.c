/* SPDX-License-Identifier: Apache-2.0 */
/* Adversarial review of the egress proxy (server/egress/): each case is an
 * attack a sandbox (or a second identity's runs) can make, driven against
 * the real proxy on real sockets, as tests/unit/test_egress_proxy.c does.
 * Each case asserts what the design promises (DESIGN.md invariants 2 and
 * 10, the egress brief) and fails while the hole is open.
 *
 *   test_egress_bounded oob        a TCP urgent byte stalls the relay and
 *                                  spins the proxy's thread
 *   test_egress_bounded pipes      one run's grown pipes use up the
 *                                  service user's pipe-user-pages-soft
 *   test_egress_bounded early      bytes sent with the head bypass the
 *                                  entry's bytes_per_second
 *   test_egress_bounded share      one identity's runs fill connections_max:
 *                                  another identity's run gets 429
 *   test_egress_bounded hostwide   one run holds a host-wide destination's
 *                                  max_concurrent: every other run gets 429
 *   test_egress_bounded audit      one identity's runs write exempt audit
 *                                  lines far past its audit byte rate
 *   test_egress_bounded lookups    teardown and stop with lookups in flight
 *                                  and answers racing them (run it under
 *                                  valgrind: it passes when nothing is
 *                                  touched after it is freed) */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit.h"
#include "check.h"
#include "clock.h"
#include "egress.h"
#include "egress_harness.h"
#include "util.h"

/* blast servers send 8 MiB (or until the peer stops reading), then read
 * until EOF. */
#define BLAST_BYTES (8 << 20)
#define DIGEST	    "sha256:review"

static struct scratch scratch;

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* ---- oob: one urgent byte ---- */

/* TCP urgent data (send MSG_OOB) marks a byte that splice(2) from the
 * socket never moves past: tcp_read_sock stops at the urgent mark and the
 * non-blocking splice says EAGAIN while the socket stays readable. The
 * relay (egress_relay.c) reads "EAGAIN with an empty pipe" as "nothing to
 * read" and keeps polling: level-triggered, the event fires again at once,
 * forever. Every byte after the urgent one never reaches the destination,
 * and the proxy's only thread burns a CPU on it until idle_seconds (which
 * one byte a while defers forever). Any sandbox program can do this. */
static void test_oob(void)
{
	struct sbx_config_egress cfg = base_config(scratch.hosts);
	struct server sink;
	struct sbx_egress *eg;
	uint16_t port;
	int fd;

	server_start(&sink, 0);
	eg = proxy_start(&cfg);
	Sbx__V1__EgressRule r[1] = {rule("dst.test", sink.port)};
	struct sbx_egress_run *run =
	    run_open(eg, "run-oob", "uid:1001", DIGEST, allowlist(r, 1), &port);

	check(connect_via(port, "dst.test", sink.port, &fd) == 200, "oob: CONNECT allowed");
	write_all(fd, "AAAA", 4);
	usleep(100 * 1000);
	check(send(fd, "U", 1, MSG_OOB) == 1, "oob: the urgent byte is sent");
	write_all(fd, "BBBB", 4);

	double cpu0 = cpu_seconds();
	int64_t t0 = sbx_mono_ms();
	bool got = false;

	while (sbx_mono_ms() - t0 < 2000) {
		pthread_mutex_lock(&sink.mu);
		got = strstr(sink.keep, "BBBB") != NULL;
		pthread_mutex_unlock(&sink.mu);
		if (got)
			break;
		usleep(20 * 1000);
	}
	/* Measure the proxy's CPU over a quiet second either way. */
	usleep(1000 * 1000);
	double used = cpu_seconds() - cpu0;
	double wall = (double)(sbx_mono_ms() - t0) / 1000.0;

	pthread_mutex_lock(&sink.mu);
	check(got, "oob: the bytes after an urgent byte reach the destination (server got \"%s\")",
	      sink.keep);
	pthread_mutex_unlock(&sink.mu);
	check(used < 0.3 * wall,
	      "oob: the proxy does not spin on an urgent byte (%.2f s of CPU in %.2f s)", used,
	      wall);
	close(fd);
	sbx_egress_run_free(run);
	sbx_egress_stop(eg);
}

/* ---- pipes: the service user's pipe pages ---- */

/* Each relay direction's pipe grows to 1 MiB (EGRESS_PIPE_MAX) the first
 * time one splice fills it, and keeps that size for the connection's life.
 * Pipe sizes are charged to the uid (fs.pipe-user-pages-soft, 16384 pages =
 * 64 MiB by default), not to any cgroup: 64 grown pipes use it up. Past it
 * the kernel gives every new pipe of that uid 2 pages and refuses
 * F_SETPIPE_SZ: every other run's relay (and everything else sbxd's user
 * runs) is stuck with 8 KiB pipes. One run with 80 downloads it does not
 * read does it. */
static void test_pipes(void)
{
	struct sbx_config_egress cfg = base_config(scratch.hosts);
	struct server blast;
	struct sbx_egress *eg;
	enum { CONNS = 80 };
	int fds[CONNS];
	uint16_t port;
	int ok = 0;

	server_start(&blast, BLAST_BYTES);
	eg = proxy_start(&cfg);
	Sbx__V1__EgressRule r[1] = {rule("dst.test", blast.port)};
	struct sbx_egress_run *run =
	    run_open(eg, "run-pipes", "uid:1001", DIGEST, allowlist(r, 1), &port);

	for (int i = 0; i < CONNS; i++) {
		int rcv = 4096;

		fds[i] = -1;
		if (connect_via(port, "dst.test", blast.port, &fds[i]) == 200)
			ok++;
		/* Read nothing more: the download fills the pipe. */
		setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	}
	check(ok == CONNS, "pipes: %d of %d downloads allowed", ok, CONNS);
	usleep(1500 * 1000);

	/* What the next run's relay would get: a fresh pipe of sbxd's uid. */
	int p[2];
	int size = -1, grown = -1;

	if (pipe2(p, O_CLOEXEC) == 0) {
		size = fcntl(p[1], F_GETPIPE_SZ);
		grown = fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
		close(p[0]);
		close(p[1]);
	}
	check(size >= 65536 && grown >= (1 << 20),
	      "pipes: after one run's %d idle downloads a new pipe still gets its default "
	      "size and may grow (got %d bytes, grow to 1 MiB: %d)",
	      CONNS, size, grown);
	for (int i = 0; i < CONNS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	sbx_egress_run_free(run);
	sbx_egress_stop(eg);
}

/* ---- early: bytes with the head ---- */

/* The bytes a client sends in the same write as its CONNECT head (up to
 * 8 KiB less the head) are written to the destination from dir[0].pre
 * (egress_conn_connected, egress_relay_pump's first loop), which never asks
 * egress_limits_bytes nor takes from the buckets: each new connection moves
 * ~8 KiB past the entry's bytes_per_second (and the host-wide one). */
static void test_early(void)
{
	struct sbx_config_egress cfg = base_config(scratch.hosts);
	struct server sink;
	struct sbx_egress *eg;
	enum { CONNS = 24, EARLY = 8000 };
	const uint64_t rate = 16384; /* burst: 16 KiB */
	int fds[CONNS];
	uint16_t port;
	char req[EARLY + 256];

	server_start(&sink, 0);
	eg = proxy_start(&cfg);
	Sbx__V1__EgressRule r[1] = {rule("dst.test", sink.port)};
	r[0].bytes_per_second = rate;
	struct sbx_egress_run *run =
	    run_open(eg, "run-early", "uid:1001", DIGEST, allowlist(r, 1), &port);

	int n = snprintf(req, sizeof(req), "CONNECT dst.test:%u HTTP/1.1\r\n\r\n", sink.port);
	memset(req + n, 'e', EARLY);
	int64_t t0 = sbx_mono_ms();

	for (int i = 0; i < CONNS; i++) {
		fds[i] = proxy_connect(port);
		write_all(fds[i], req, (size_t)n + EARLY);
	}
	usleep(1000 * 1000);
	double secs = (double)(sbx_mono_ms() - t0) / 1000.0;
	unsigned long long got = sink.received;
	/* The burst plus the rate over the time, with 20 % to spare. */
	double allowed = 1.2 * ((double)16384 + (double)rate * secs);

	check((double)got <= allowed,
	      "early: %d connections with %d bytes each after the head: the destination got "
	      "%llu bytes in %.2f s, bytes_per_second %llu allows about %.0f",
	      CONNS, EARLY, got, secs, (unsigned long long)rate, allowed);
	for (int i = 0; i < CONNS; i++)
		close(fds[i]);
	sbx_egress_run_free(run);
	sbx_egress_stop(eg);
}

/* ---- share: connections_max across identities ---- */

/* connections_max is one host-wide pool and heads count in it; the only
 * finer bound is connections_per_run. With the defaults (256 per run, 16
 * runs per identity, 4096 in all, and connections_max clamped to
 * RLIMIT_NOFILE / 12) one identity's runs hold the whole pool with
 * connections that never send a byte (each lives head_seconds, and the
 * accept budget of 50/s re-opens them faster than that): every other
 * identity's sandbox then gets 429 too_many_connections. Here the pool is
 * 8, a run may hold 4, and identity A has two runs. */
static void test_share(void)
{
	struct sbx_config_egress cfg = base_config(scratch.hosts);
	struct server sink;
	struct sbx_egress *eg;
	uint16_t pa1, pa2, pb;
	int held[8], fd;

	cfg.connections_per_run = 4;
	cfg.connections_max = 8;
	server_start(&sink, 0);
	eg = proxy_start(&cfg);
	Sbx__V1__EgressRule r[1] = {rule("dst.test", sink.port)};
	struct sbx_egress_run *a1 =
	    run_open(eg, "run-a1", "uid:1001", DIGEST, allowlist(r, 1), &pa1);
	struct sbx_egress_run *a2 =
	    run_open(eg, "run-a2", "uid:1001", DIGEST, allowlist(r, 1), &pa2);
	struct sbx_egress_run *b = run_open(eg, "run-b", "uid:1002", DIGEST, allowlist(r, 1), &pb);

	/* Identity A: connections that never write (heads). */
	for (int i = 0; i < 8; i++)
		held[i] = proxy_connect(i < 4 ? pa1 : pa2);
	usleep(200 * 1000);
	int status = connect_via(pb, "dst.test", sink.port, &fd);

	check(status == 200,
	      "share: identity B's run connects while identity A's two runs hold idle "
	      "heads (got %d)",
	      status);
	close(fd);
	for (int i = 0; i < 8; i++)
		close(held[i]);
	sbx_egress_run_free(a1);
	sbx_egress_run_free(a2);
	sbx_egress_run_free(b);
	sbx_egress_stop(eg);
}

/* ---- hostwide: a shared destination's max_concurrent ---- */

/* A host-wide destination (config egress.destinations) has one
 * max_concurrent for every run on the host, taken first come first served
 * and held for a relay's whole life (idle_seconds, 300 by default, renewed
 * by a byte now and then). One run that opens max_concurrent connections
 * and keeps them quiet locks the destination for every other run and
 * identity: each gets 429 too_many_connections. */
static void test_hostwide(void)
{
	struct sbx_config_egress cfg = base_config(scratch.hosts);
	struct server sink;
	struct sbx_egress *eg;
	uint16_t pa, pb;
	int held[4], fd, ok = 0;

	server_start(&sink, 0);
	cfg.destinations[0] = (struct sbx_egress_destination){.host = "dst.test",
							      .port = sink.port,
							      .max_concurrent = 4,
							      .connections_per_minute = 600};
	cfg.n_destinations = 1;
	eg = proxy_start(&cfg);
	Sbx__V1__EgressRule r[1] = {rule("dst.test", sink.port)};
	struct sbx_egress_run *a =
	    run_open(eg, "run-hw-a", "uid:1001", DIGEST, allowlist(r, 1), &pa);
	struct sbx_egress_run *b =
	    run_open(eg, "run-hw-b", "uid:1002", DIGEST, allowlist(r, 1), &pb);

	/* Run A asks for all of it (a fair proxy may give it less). */
	for (int i = 0; i < 4; i++)
		if (connect_via(pa, "dst.test", sink.port, &held[i]) == 200)
			ok++;
	int status = connect_via(pb, "dst.test", sink.port, &fd);

	check(status == 200,
	      "hostwide: another identity's run reaches the shared destination while one run "
	      "holds %d quiet relays to it (got %d)",
	      ok, status);
	close(fd);
	for (int i = 0; i < 4; i++)
		close(held[i]);
	sbx_egress_run_free(a);
	sbx_egress_run_free(b);
	sbx_egress_stop(eg);
}

/* ---- audit: exempt lines against the identity's rate ---- */

/* Egress lines are exempt from the per-identity audit rate
 * (quotas.audit_identity_kb_per_s, default 16 KiB/s, the bound that keeps
 * "one caller cannot fill the log's disk"); what bounds them instead is
 * each run's accept budget, 50 connections a second with the default, each
 * writing a decision and a close line of up to ~700 bytes (a 253-byte
 * name, twice). That is per run, and an identity has 16 runs by default:
 * here 4 runs of one identity, at the default accept rate, connect with a
 * long name that is not allowed; the identity's egress lines must stay
 * within its audit rate (they are 10x past it). */
struct audit_client {
	uint16_t port;
	atomic_bool *stop;
	unsigned done;
};

static void *audit_client(void *arg)
{
	struct audit_client *a = arg;
	char name[260], req[400], head[1024];

	memset(name, 0, sizeof(name));
	for (int i = 0; i < 4; i++) {
		memset(name + i * 63 + i, 'a' + i, 63);
		if (i < 3)
			name[i * 63 + i + 63] = '.';
	}
	snprintf(req, sizeof(req), "CONNECT %s:1 HTTP/1.1\r\n\r\n", name);
	while (!*a->stop) {
		int fd = proxy_connect(a->port);

		write_all(fd, req, strlen(req));
		read_head(fd, head, sizeof(head));
		close(fd);
		a->done++;
	}
	return NULL;
}

static off_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? st.st_size : 0;
}

static void test_audit(void)
{
	struct sbx_config_egress cfg = base_config(scratch.hosts);
	enum { RUNS = 4 };
	const uint64_t identity_rate = 16 * 1024; /* the config's default */
	struct sbx_egress *eg;
	struct sbx_egress_run *runs[RUNS];
	struct audit_client cl[RUNS];
	pthread_t th[RUNS];
	atomic_bool stop = false;
	char id[32];

	sbx_audit_set_identity_rate(identity_rate);
	cfg.accepts_per_run_per_second = 50; /* the config's default */
	eg = proxy_start(&cfg);
	Sbx__V1__EgressRule r[1] = {rule("dst.test", 9)};
	for (int i = 0; i < RUNS; i++) {
		snprintf(id, sizeof(id), "run-audit-%d", i);
		runs[i] = run_open(eg, id, "uid:1001", DIGEST, allowlist(r, 1), &cl[i].port);
		cl[i].stop = &stop;
		cl[i].done = 0;
		pthread_create(&th[i], NULL, audit_client, &cl[i]);
	}
	/* Past the accept burst (twice the rate), then measured. */
	usleep(2500 * 1000);
	off_t before = file_size(scratch.audit_path);
	int64_t t0 = sbx_mono_ms();

	usleep(3000 * 1000);
	off_t after = file_size(scratch.audit_path);
	double secs = (double)(sbx_mono_ms() - t0) / 1000.0;
	double rate = (double)(after - before) / secs;

	stop = true;
	for (int i = 0; i < RUNS; i++)
		pthread_join(th[i], NULL);
	check(rate <= (double)identity_rate,
	      "audit: one identity's %d runs write %.0f bytes/s of exempt egress lines, its "
	      "audit rate is %llu bytes/s",
	      RUNS, rate, (unsigned long long)identity_rate);
	for (int i = 0; i < RUNS; i++)
		sbx_egress_run_free(runs[i]);
	sbx_egress_stop(eg);
}

/* ---- lookups: teardown and stop while names are being looked up ---- */

/* A nameserver on loopback that answers every A query with 127.0.0.1 (and
 * AAAA with nothing) after delay_ms, so answers race the teardowns. */
struct dns_server {
	int fd;
	uint16_t port;
	unsigned delay_ms;
	atomic_bool stop;
	pthread_t thread;
};

static void *dns_thread(void *arg)
{
	struct dns_server *d = arg;
	unsigned char q[512], a[600];

	while (!d->stop) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		struct pollfd p = {.fd = d->fd, .events = POLLIN};

		if (poll(&p, 1, 100) != 1)
			continue;
		ssize_t n = recvfrom(d->fd, q, sizeof(q), 0, (struct sockaddr *)&from, &fl);
		if (n < 12 + 5)
			continue;
		usleep(d->delay_ms * 1000);
		/* Header: the id, QR|RD|RA, one question, one answer (A only). */
		size_t qend = 12;
		while (qend < (size_t)n && q[qend])
			qend += q[qend] + 1;
		qend += 5;
		if (qend > (size_t)n)
			continue;
		bool is_a = q[qend - 4] == 0 && q[qend - 3] == 1;
		memcpy(a, q, qend);
		a[2] = 0x81;
		a[3] = 0x80;
		a[6] = 0;
		a[7] = is_a ? 1 : 0;
		a[8] = a[9] = a[10] = a[11] = 0;
		size_t len = qend;
		if (is_a) {
			static const unsigned char rr[] = {0xc0, 0x0c, 0, 1, 0,	  1, 0, 0,
							   0,	 5,    0, 4, 127, 0, 0, 1};
			memcpy(a + len, rr, sizeof(rr));
			len += sizeof(rr);
		}
		sendto(d->fd, a, len, 0, (struct sockaddr *)&from, fl);
	}
	return NULL;
}

static void test_lookups(void)
{
	struct sbx_config_egress cfg = base_config(scratch.hosts);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sin);
	struct dns_server dns = {.delay_ms = 150};
	struct server sink;
	char resolv[160];
	FILE *f;

	server_start(&sink, 0);
	dns.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (bind(dns.fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
	    getsockname(dns.fd, (struct sockaddr *)&sin, &sl) < 0)
		exit(2);
	dns.port = ntohs(sin.sin_port);
	pthread_create(&dns.thread, NULL, dns_thread, &dns);
	snprintf(resolv, sizeof(resolv), "%s/resolv.conf", scratch.dir);
	f = fopen(resolv, "w");
	fprintf(f, "nameserver 127.0.0.1:%u\n", dns.port);
	fclose(f);
	cfg.resolv_conf = resolv;
	cfg.lookup_seconds = 3;

	Sbx__V1__EgressRule r[1] = {rule("slow.test", sink.port)};
	for (int round = 0; round < 6; round++) {
		struct sbx_egress *eg = proxy_start(&cfg);
		uint16_t port;
		int fds[8];
		char req[128];
		struct sbx_egress_run *run =
		    run_open(eg, "run-lookups", "uid:1001", DIGEST, allowlist(r, 1), &port);

		snprintf(req, sizeof(req), "CONNECT slow.test:%u HTTP/1.1\r\n\r\n", sink.port);
		for (int i = 0; i < 8; i++) {
			fds[i] = proxy_connect(port);
			write_all(fds[i], req, strlen(req));
		}
		/* Around the answers' time: 100..200 ms. */
		usleep((useconds_t)(100 + 20 * round) * 1000);
		if (round % 2 == 0) {
			sbx_egress_run_free(run);
			sbx_egress_stop(eg);
		} else {
			sbx_egress_stop(eg);
			sbx_egress_run_free(run);
		}
		for (int i = 0; i < 8; i++)
			close(fds[i]);
	}
	dns.stop = true;
	pthread_join(dns.thread, NULL);
	close(dns.fd);
	unlink(resolv);
	check(true, "lookups: teardowns and stops with lookups in flight returned");
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	/* As sbxd does at start (server/main.c): the proxy's pool is sized
	 * from the soft limit, which ctest leaves at 1024. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (argc != 2) {
		fprintf(stderr, "usage: %s oob|pipes|early|share|hostwide|audit|lookups\n",
			argv[0]);
		return 2;
	}
	scratch_open(&scratch, "/tmp/sbx-test-egress-review-XXXXXX", "127.0.0.1 dst.test\n");
	if (!strcmp(argv[1], "oob"))
		test_oob();
	else if (!strcmp(argv[1], "pipes"))
		test_pipes();
	else if (!strcmp(argv[1], "early"))
		test_early();
	else if (!strcmp(argv[1], "share"))
		test_share();
	else if (!strcmp(argv[1], "hostwide"))
		test_hostwide();
	else if (!strcmp(argv[1], "audit"))
		test_audit();
	else if (!strcmp(argv[1], "lookups"))
		test_lookups();
	else
		return 2;
	sbx_audit_close();
	scratch_remove(&scratch);
	return check_done();
}
