/* SPDX-License-Identifier: Apache-2.0 */
/* The egress proxy's fair shares and descriptor budget (egress_limits.c,
 * egress.c), against the real proxy on real sockets, as
 * test_egress_bounded.c does; each case beside the review's share, hostwide
 * and audit ones:
 *
 *   test_egress_share perminute  one identity drains a host-wide
 *                                destination's connections_per_minute:
 *                                another's first connection still gets in
 *   test_egress_share bytes      two identities download from one throttled
 *                                destination: neither starves
 *   test_egress_share lines      one identity's spent audit-line budget
 *                                pauses its runs only, not another's
 *   test_egress_share fds        the proxy's descriptors fit in
 *                                RLIMIT_NOFILE less its fd_reserve; exec
 *                                listeners past the budget are refused */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "audit.h"
#include "check.h"
#include "clock.h"
#include "egress.h"
#include "egress_harness.h"

#define DIGEST "sha256:share"

static struct scratch scratch;

/* ---- perminute ---- */

/* The destination allows 4 new connections a minute (a burst of 4). One
 * identity's run asks for 6 in a row: it gets its half (2), and another
 * identity's run still gets in at once. Taken first come first served,
 * run A would get all 4 and run B a 429 for a minute. */
static void test_perminute(void)
{
	struct sbx_config_egress cfg = base_config(scratch.hosts);
	struct server sink;
	uint16_t pa, pb;
	int fd, ok = 0, status;

	server_start(&sink, 0);
	cfg.destinations[0] = (struct sbx_egress_destination){
	    .host = "dst.test", .port = sink.port, .connections_per_minute = 4};
	cfg.n_destinations = 1;
	struct sbx_egress *eg = proxy_start(&cfg);
	Sbx__V1__EgressRule r = rule("dst.test", sink.port);
	struct sbx_egress_run *a =
	    run_open(eg, "run-pm-a", "uid:1001", DIGEST, allowlist(&r, 1), &pa);
	struct sbx_egress_run *b =
	    run_open(eg, "run-pm-b", "uid:1002", DIGEST, allowlist(&r, 1), &pb);

	for (int i = 0; i < 6; i++) {
		if (connect_via(pa, "dst.test", sink.port, &fd) == 200)
			ok++;
		close(fd);
	}
	check(ok == 2, "perminute: one identity gets half of the destination's 4 a minute (got %d)",
	      ok);
	status = connect_via(pb, "dst.test", sink.port, &fd);
	close(fd);
	check(status == 200,
	      "perminute: another identity's first connection gets in after the first one "
	      "spent its half (got %d)",
	      status);
	sbx_egress_run_free(a);
	sbx_egress_run_free(b);
	sbx_egress_stop(eg);
}

/* ---- bytes ---- */

struct reader {
	int fd;
	atomic_bool *stop;
	unsigned long long got;
};

static void *reader(void *arg)
{
	struct reader *r = arg;
	char buf[65536];

	while (!*r->stop) {
		ssize_t n = recv(r->fd, buf, sizeof(buf), 0);

		if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR)))
			break;
		if (n > 0)
			r->got += (unsigned long long)n;
	}
	return NULL;
}

/* A destination throttled to 256 KiB/s host-wide; identity A's run opens
 * three downloads first, then identity B's run one. Each side reads as
 * fast as it can for 2 s: B gets at least a third of what A gets, and the
 * two together stay within the destination's rate. */
static void test_bytes(void)
{
	struct sbx_config_egress cfg = base_config(scratch.hosts);
	const uint64_t rate = 256 * 1024;
	enum { A_CONNS = 3 };
	struct server blast;
	struct reader rd[A_CONNS + 1];
	pthread_t th[A_CONNS + 1];
	atomic_bool stop = false;
	uint16_t pa, pb;
	int ok = 0;

	server_start(&blast, SIZE_MAX); /* until the peer stops reading */
	cfg.destinations[0] = (struct sbx_egress_destination){
	    .host = "dst.test", .port = blast.port, .bytes_per_second = rate};
	cfg.n_destinations = 1;
	struct sbx_egress *eg = proxy_start(&cfg);
	Sbx__V1__EgressRule r = rule("dst.test", blast.port);
	struct sbx_egress_run *a =
	    run_open(eg, "run-by-a", "uid:1001", DIGEST, allowlist(&r, 1), &pa);
	struct sbx_egress_run *b =
	    run_open(eg, "run-by-b", "uid:1002", DIGEST, allowlist(&r, 1), &pb);

	for (int i = 0; i <= A_CONNS; i++) {
		if (connect_via(i < A_CONNS ? pa : pb, "dst.test", blast.port, &rd[i].fd) == 200)
			ok++;
		rd[i].stop = &stop;
		rd[i].got = 0;
	}
	check(ok == A_CONNS + 1, "bytes: %d of %d downloads allowed", ok, A_CONNS + 1);
	int64_t t0 = sbx_mono_ms();

	for (int i = 0; i <= A_CONNS; i++)
		pthread_create(&th[i], NULL, reader, &rd[i]);
	usleep(2000 * 1000);
	stop = true;
	for (int i = 0; i <= A_CONNS; i++)
		shutdown(rd[i].fd, SHUT_RDWR);
	for (int i = 0; i <= A_CONNS; i++)
		pthread_join(th[i], NULL);
	double secs = (double)(sbx_mono_ms() - t0) / 1000.0;
	unsigned long long got_a = 0, got_b = rd[A_CONNS].got;

	for (int i = 0; i < A_CONNS; i++)
		got_a += rd[i].got;
	/* The 200 lines aside, the rate over the time and the bursts (a tenth
	 * of a second of the shared bucket and of each half) with 30 % to spare. */
	double allowed = 1.3 * ((double)rate * secs + 0.2 * (double)rate + 3 * 16384);

	check(got_b * 3 >= got_a * 2,
	      "bytes: identity B's one download gets at least two thirds of what A's three get "
	      "(A %llu, B %llu bytes in %.2f s)",
	      got_a, got_b, secs);
	check((double)(got_a + got_b) <= allowed,
	      "bytes: together within the destination's %llu bytes/s (%llu in %.2f s)",
	      (unsigned long long)rate, got_a + got_b, secs);
	for (int i = 0; i <= A_CONNS; i++)
		close(rd[i].fd);
	sbx_egress_run_free(a);
	sbx_egress_run_free(b);
	sbx_egress_stop(eg);
}

/* ---- lines ---- */

struct flooder {
	uint16_t port;
	atomic_bool *stop;
	unsigned done;
};

static void *flood(void *arg)
{
	struct flooder *f = arg;
	char head[1024];
	static const char req[] = "CONNECT not-allowed.test:1 HTTP/1.1\r\n\r\n";

	while (!*f->stop) {
		int fd = proxy_connect(f->port);

		if (fd < 0)
			break;
		write_all(fd, req, sizeof(req) - 1);
		read_head(fd, head, sizeof(head));
		close(fd);
		f->done++;
	}
	return NULL;
}

/* Identity A's two runs connect in a loop (each refused, two lines each)
 * and spend A's budget of audit lines; identity B's run, meanwhile, gets
 * each of its answers at once: the budget is A's, not the proxy's. */
static void test_lines(void)
{
	struct sbx_config_egress cfg = base_config(scratch.hosts);
	struct server sink;
	struct flooder fl[2];
	pthread_t th[2];
	atomic_bool stop = false;
	uint16_t pa[2], pb;
	int64_t worst = 0;
	int ok = 0;

	sbx_audit_set_identity_rate(16 * 1024);
	server_start(&sink, 0);
	struct sbx_egress *eg = proxy_start(&cfg);
	Sbx__V1__EgressRule r = rule("dst.test", sink.port);
	struct sbx_egress_run *a1 =
	    run_open(eg, "run-li-a1", "uid:1001", DIGEST, allowlist(&r, 1), &pa[0]);
	struct sbx_egress_run *a2 =
	    run_open(eg, "run-li-a2", "uid:1001", DIGEST, allowlist(&r, 1), &pa[1]);
	struct sbx_egress_run *b =
	    run_open(eg, "run-li-b", "uid:1002", DIGEST, allowlist(&r, 1), &pb);

	for (int i = 0; i < 2; i++) {
		fl[i] = (struct flooder){.port = pa[i], .stop = &stop};
		pthread_create(&th[i], NULL, flood, &fl[i]);
	}
	usleep(1500 * 1000); /* past A's burst: its runs are paused by now */
	unsigned before = fl[0].done + fl[1].done;

	for (int i = 0; i < 5; i++) {
		int64_t t0 = sbx_mono_ms();
		int fd;

		if (connect_via(pb, "dst.test", sink.port, &fd) == 200)
			ok++;
		close(fd);
		if (sbx_mono_ms() - t0 > worst)
			worst = sbx_mono_ms() - t0;
	}
	unsigned during = fl[0].done + fl[1].done - before;

	stop = true;
	check(ok == 5 && worst < 500,
	      "lines: identity B's 5 connections answered at once while A's budget is spent "
	      "(%d allowed, the slowest in %lld ms)",
	      ok, (long long)worst);
	/* A's connections meanwhile: its budget of 8 KiB/s of lines, each
	 * refusal two lines of ~300 bytes, over well under a second. */
	check(during < 40, "lines: identity A's runs are paused meanwhile (%u connections)",
	      during);
	sbx_egress_run_free(a1); /* closes the flooders' listeners: they stop */
	sbx_egress_run_free(a2);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	sbx_egress_run_free(b);
	sbx_egress_stop(eg);
	sbx_audit_set_identity_rate(0);
}

/* ---- fds ---- */

/* RLIMIT_NOFILE 256 with 200 of it kept for the rest of sbxd: the proxy
 * has 56, 7 a connection with its listener: 8 connections and 8
 * listeners, 56 descriptors at most. A 9th exec listener is refused (its
 * port refuses connections), the first 8 work. With 250 kept, not one
 * connection fits: the proxy does not start. Without a reserve, half. */
/* Until no connection of the run is open (at most 2 s): the proxy closes
 * a connection's descriptors after the client's end, on its own thread. */
static void wait_closed(struct sbx_egress_run *run)
{
	for (int i = 0; i < 200; i++) {
		Sbx__V1__StatusResponse *st = status_fit(run, 1 << 20);
		bool open = false;

		for (size_t j = 0; j < st->n_egress; j++)
			open |= st->egress[j]->open;
		sbx__v1__status_response__free_unpacked(st, NULL);
		if (!open)
			return;
		usleep(10 * 1000);
	}
}

static void test_fds(void)
{
	struct sbx_config_egress cfg = base_config(scratch.hosts);
	struct rlimit rl, low;
	struct server sink;
	struct sbx_egress *eg;
	struct sbx_err err;
	uint16_t ports[9];
	int ok = 0, refused = 0;

	server_start(&sink, 0);
	getrlimit(RLIMIT_NOFILE, &rl);
	low = rl;
	low.rlim_cur = 256;
	if (setrlimit(RLIMIT_NOFILE, &low) < 0) {
		perror("setrlimit");
		exit(2);
	}
	cfg.fd_reserve = 250;
	check(sbx_egress_start(&cfg, &eg, &err) < 0 && strstr(err.msg, "no descriptors left"),
	      "fds: with 250 of 256 kept, the proxy does not start (%s)", err.msg);
	cfg.fd_reserve = 0;
	eg = proxy_start(&cfg);
	check(sbx_egress_fd_budget(eg) <= 128 && sbx_egress_fd_budget(eg) > 128 - 7,
	      "fds: without a reserve, the proxy's budget is half of 256 (%zu)",
	      sbx_egress_fd_budget(eg));
	sbx_egress_stop(eg);

	cfg.fd_reserve = 200;
	eg = proxy_start(&cfg);
	check(sbx_egress_fd_budget(eg) == 8 * 6 + 8,
	      "fds: 56 of 256 left: 8 connections of 6 and 8 listeners (budget %zu)",
	      sbx_egress_fd_budget(eg));
	Sbx__V1__EgressRule r = rule("dst.test", sink.port);
	struct sbx_egress_run *run = run_new(eg, "run-fds", "uid:1001", DIGEST, allowlist(&r, 1));

	for (int i = 0; i < 9; i++)
		run_listen(run, (uint64_t)i + 1, &ports[i]);
	usleep(200 * 1000);
	for (int i = 0; i < 9; i++) {
		int fd, status = connect_via(ports[i], "dst.test", sink.port, &fd);

		ok += status == 200;
		refused += fd < 0;
		if (fd >= 0)
			close(fd);
		/* Each connection's six descriptors are back before the next:
		 * what is counted is the listeners, not a lagging close. */
		wait_closed(run);
	}
	check(ok == 8 && refused == 1,
	      "fds: 8 exec listeners serve, the 9th is refused (%d served, %d refused)", ok,
	      refused);
	sbx_egress_run_free(run);
	sbx_egress_stop(eg);
	setrlimit(RLIMIT_NOFILE, &rl);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc != 2) {
		fprintf(stderr, "usage: %s perminute|bytes|lines|fds\n", argv[0]);
		return 2;
	}
	scratch_open(&scratch, "/tmp/sbx-test-egress-share-XXXXXX", "127.0.0.1 dst.test\n");
	if (!strcmp(argv[1], "perminute"))
		test_perminute();
	else if (!strcmp(argv[1], "bytes"))
		test_bytes();
	else if (!strcmp(argv[1], "lines"))
		test_lines();
	else if (!strcmp(argv[1], "fds"))
		test_fds();
	else
		return 2;
	sbx_audit_close();
	scratch_remove(&scratch);
	return check_done();
}
