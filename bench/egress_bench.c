/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-bench-egress: sbxd's egress proxy against a direct loopback connection
 * and against tinyproxy (Debian's) relaying the same, in one run:
 *
 *   a big download (256 MiB)       curl -o /dev/null, its own time_total:
 *                                  MiB/s, ratios proxy/direct (target >= 0.8)
 *                                  and proxy/tinyproxy (target > 1)
 *   small requests (1,000)         each a new connection, a plain HTTP GET
 *                                  with Connection: close, timed by the
 *                                  client around connect..EOF: p50, p90, and
 *                                  the setup overhead proxy p50 - direct p50
 *                                  (target < 1 ms); faster than tinyproxy
 *
 * The destination is a server in a thread of this program on 127.0.0.1
 * (egress_origin.c: sendfile from a memfd). Through sbx the client runs in a
 * sandbox of its own sbxd (a run whose allowlist holds the origin by a name
 * that sbxd's hosts file maps to 127.0.0.1), reaching it through the proxy
 * the run's http_proxy names; direct and through tinyproxy the same client
 * runs here. The same client program each time: curl for the download, a
 * short python3 program (below) for the small requests. Rounds rotate the
 * order of the three paths, so none always runs on the others' warm caches. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <jansson.h>

#include "bench_sbxd.h"
#include "bench_scratch.h"
#include "bench_util.h"
#include "egress_origin.h"
#include "sbxclient.h"
#include "sleep.h"
#include "util.h"

#define PROG		 "sbx-bench-egress"
#define MIB		 (1024.0 * 1024.0)
#define ORIGIN_NAME	 "origin.internal" /* sbxd's hosts file maps it to 127.0.0.1 */
#define SANDBOX_PROXY	 "127.0.0.1"	   /* where the run's http_proxy points, port 3128 */
#define SMALL_BYTES	 256
#define WARMUP_REQUESTS	 20
#define MAX_ROUNDS	 10
#define START_TIMEOUT_MS 15000
#define STOP_TIMEOUT_MS	 30000
#define CALL_TIMEOUT_MS	 120000

/* The rate limits the proxy keeps by default (600 connections a minute per
 * entry, 50 accepts a second per run, 100 per identity, and the identity's
 * audit lines: 16 KiB/s, half of it egress's, ~11 connections a second at
 * two lines each) would be what 1,000 back-to-back requests measure; lifted
 * here, as a busy job's policy and config would. */
#define BENCH_CONNECTIONS_PER_MINUTE 600000 /* the most a policy may say */
#define BENCH_ACCEPTS_PER_SECOND     100000
#define BENCH_AUDIT_KB_PER_SECOND    65536 /* 64 MiB/s of audit lines per identity */

/* The small-request client, the same here and in the sandbox: N requests
 * (after W unmeasured), each a new TCP connection to HOST:PORT sending "GET
 * TARGET" (absolute form to a proxy, origin form direct) with Connection:
 * close, read to EOF; it checks the status and the body's size, and prints
 * each request's microseconds, connect to EOF, one a line. */
static const char small_client[] =
    "import socket, sys, time\n"
    "host, port, target, host_hdr = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]\n"
    "n, warm, size = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])\n"
    "req = ('GET %s HTTP/1.1\\r\\nHost: %s\\r\\nConnection: close\\r\\n\\r\\n'\n"
    "       % (target, host_hdr)).encode()\n"
    "out = []\n"
    "for i in range(warm + n):\n"
    "    t0 = time.perf_counter()\n"
    "    s = socket.create_connection((host, port))\n"
    "    s.sendall(req)\n"
    "    parts = []\n"
    "    while True:\n"
    "        b = s.recv(65536)\n"
    "        if not b:\n"
    "            break\n"
    "        parts.append(b)\n"
    "    s.close()\n"
    "    t1 = time.perf_counter()\n"
    "    data = b''.join(parts)\n"
    "    head, _, body = data.partition(b'\\r\\n\\r\\n')\n"
    "    if not head.startswith(b'HTTP/1.1 200 ') or len(body) != size:\n"
    "        sys.exit('request %d: %r' % (i, data[:300]))\n"
    "    if i >= warm:\n"
    "        out.append('%.1f' % ((t1 - t0) * 1e6))\n"
    "print('\\n'.join(out))\n";

#define CURL_FORMAT "%{http_code} %{size_download} %{time_total} %{num_connects}\\n"

/* ------------------------------------------------------------ basics */

static pid_t sbxd_pid = -1, tinyproxy_pid = -1;
static double load_at_start; /* the 1-minute load average before anything started */
static bool cleaning;
static char *const child_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p)
		bench_die("out of memory");
	return p;
}

static void cleanup(void)
{
	if (cleaning)
		return;
	cleaning = true;
	bench_stop_child(&sbxd_pid, "sbxd", STOP_TIMEOUT_MS);
	bench_stop_child(&tinyproxy_pid, "tinyproxy", STOP_TIMEOUT_MS);
	origin_stop();
	bench_scratch_remove();
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");

	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		bench_die_errno("write %s", path);
}

/* Whole file into a NUL-terminated malloc'd string. */
static char *read_text(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t len = 0;

	if (!f)
		bench_die_errno("open %s", path);
	FILE *m = open_memstream(&buf, &len);
	char chunk[8192];
	size_t n;
	if (!m)
		bench_die("out of memory");
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		fwrite(chunk, 1, n, m);
	if (ferror(f))
		bench_die_errno("read %s", path);
	fclose(f);
	if (fclose(m) != 0)
		bench_die("out of memory");
	return buf;
}

/* ------------------------------------------------------------ peers */

static bool port_answers(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	_cleanup_close_ int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	return s >= 0 && connect(s, (struct sockaddr *)&a, sizeof(a)) == 0;
}

/* tinyproxy in the foreground with a config of its own, on a free port of
 * 127.0.0.1, as this (unprivileged) user; returns its port. */
static int start_tinyproxy(const char *tinyproxy)
{
	char conf[PATH_MAX], log[PATH_MAX], out[PATH_MAX], pidf[PATH_MAX], text[3 * PATH_MAX];
	int port = bench_free_port();

	bench_scratch_path(conf, sizeof(conf), "tinyproxy.conf");
	bench_scratch_path(log, sizeof(log), "tinyproxy.log");
	bench_scratch_path(out, sizeof(out), "tinyproxy.stderr");
	bench_scratch_path(pidf, sizeof(pidf), "tinyproxy.pid");
	/* No Via header and no logging per request: as little work as it can be
	 * told to do; MaxClients above anything the benchmark opens. */
	snprintf(text, sizeof(text),
		 "Port %d\nListen 127.0.0.1\nTimeout 60\nMaxClients 256\nAllow 127.0.0.1\n"
		 "DisableViaHeader Yes\nLogLevel Error\nLogFile \"%s\"\nPidFile \"%s\"\n",
		 port, log, pidf);
	write_text(conf, text);
	char *argv[] = {(char *)tinyproxy, "-d", "-c", conf, NULL};
	bench_note("starting %s -d -c %s (port %d)", tinyproxy, conf, port);
	tinyproxy_pid = bench_spawn(argv, child_env, out);
	for (int waited = 0; !port_answers(port); waited += 20) {
		int status;
		if (waitpid(tinyproxy_pid, &status, WNOHANG) == tinyproxy_pid) {
			tinyproxy_pid = -1;
			bench_die("tinyproxy exited (%s): %s %s", bench_status_str(status),
				  bench_tail_of(out), bench_tail_of(log));
		}
		bench_check_interrupt();
		if (waited >= START_TIMEOUT_MS)
			bench_die("tinyproxy did not listen within %d s: %s",
				  START_TIMEOUT_MS / 1000, bench_tail_of(out));
		sbx_sleep_ms(20);
	}
	return port;
}

/* ------------------------------------------------------------ sbxd */

struct server {
	char ipc[PATH_MAX + 8];
	char log[PATH_MAX]; /* sbxd's stderr */
	char audit[PATH_MAX];
	sbx_client *c;
};

/* sbxd with an ipc listener, its egress resolver reading a hosts file of
 * ours (ORIGIN_NAME -> 127.0.0.1) and no nameserver. */
static void start_sbxd(struct server *s, const char *sbxd, const char *helper)
{
	char config[PATH_MAX], state[PATH_MAX], hosts[PATH_MAX];

	bench_scratch_path(config, sizeof(config), "sbxd.json");
	bench_scratch_path(state, sizeof(state), "state");
	bench_scratch_path(hosts, sizeof(hosts), "hosts");
	bench_scratch_path(s->audit, sizeof(s->audit), "audit.log");
	bench_scratch_path(s->log, sizeof(s->log), "sbxd.stderr");
	if ((size_t)snprintf(s->ipc, sizeof(s->ipc), "ipc://%s/sbxd.sock", bench_scratch_dir()) >=
	    sizeof(s->ipc))
		bench_die("socket path too long");
	write_text(hosts, "127.0.0.1 " ORIGIN_NAME "\n");
	json_t *cfg = json_pack("{s:[s], s:s, s:s, s:s, s:{s:i}, s:{s:s, s:s, s:i, s:i}}", "listen",
				s->ipc, "state_dir", state, "helper", helper, "log", s->audit,
				"quotas", "audit_identity_kb_per_s", BENCH_AUDIT_KB_PER_SECOND,
				"egress", "hosts_file", hosts, "resolv_conf", "",
				"accepts_per_run_per_second", BENCH_ACCEPTS_PER_SECOND,
				"accepts_per_identity_per_second", BENCH_ACCEPTS_PER_SECOND);
	if (!cfg)
		bench_die("building the config failed");
	if (json_dump_file(cfg, config, JSON_INDENT(2)) < 0)
		bench_die_errno("write %s", config);
	json_decref(cfg);

	char *argv[] = {(char *)sbxd, "--config", config, NULL};
	bench_note("starting %s --config %s", sbxd, config);
	sbxd_pid = bench_spawn(argv, child_env, s->log);
	bench_sbxd_wait(s->ipc, &sbxd_pid, s->log, START_TIMEOUT_MS);
	s->c = bench_client_open(s->ipc, CALL_TIMEOUT_MS, 0);
}

static void call_failed(const struct server *s, const char *call, const struct sbx_rpc_status *st)
    __attribute__((noreturn));

static void call_failed(const struct server *s, const char *call, const struct sbx_rpc_status *st)
{
	if (bench_interrupted)
		bench_die("interrupted (during %s)", call);
	bench_die("%s failed: %s: %s (sbxd: %s)", call, sbx_code_name(st->code), st->err.msg,
		  bench_tail_of(s->log));
}

/* The run: the origin, by name, is its allowlist's one entry. */
static char *create_run(const struct server *s, int origin_port)
{
	Sbx__V1__CreateRunRequest req = SBX__V1__CREATE_RUN_REQUEST__INIT;
	struct sbx_rpc_status st;
	json_t *pol = json_pack(
	    "{s:s, s:[{s:s, s:s}, {s:s, s:s}], s:{}, s:{s:s, s:[{s:s, s:i, s:b, s:i}]},"
	    " s:{s:i, s:i, s:i, s:i, s:i, s:i}, s:s}",
	    "image", "host", "mounts", "path", "/data", "mode", "ro", "path", "/out", "mode", "rw",
	    "env", "egress", "policy", "allowlist", "allow", "host", ORIGIN_NAME, "port",
	    origin_port, "allow_private", 1, "connections_per_minute", BENCH_CONNECTIONS_PER_MINUTE,
	    "limits", "cpu", 2, "memory_mb", 256, "script_seconds", 600, "run_seconds", 3600,
	    "pids", 64, "output_kb", 1024, "lifetime", "per_run");
	_cleanup_free_ char *text = pol ? json_dumps(pol, JSON_COMPACT) : NULL;

	json_decref(pol);
	if (!text)
		bench_die("building the policy failed");
	req.policy_json = text;
	Sbx__V1__CreateRunResponse *r = sbx_create_run(s->c, &req, &st);
	if (!r)
		call_failed(s, "CreateRun", &st);
	char *id = strdup(r->run_id);
	sbx__v1__create_run_response__free_unpacked(r, NULL);
	if (!id)
		bench_die("out of memory");
	return id;
}

/* Everything the exec wrote on one stream, NUL-terminated, malloc'd. */
static char *read_stream(const struct server *s, const char *run_id, const char *exec_id,
			 Sbx__V1__Stream stream)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	uint64_t offset = 0;

	if (!m)
		bench_die("out of memory");
	for (;;) {
		Sbx__V1__ReadOutputRequest req = SBX__V1__READ_OUTPUT_REQUEST__INIT;
		struct sbx_rpc_status st;

		req.run_id = (char *)run_id;
		req.exec_id = (char *)exec_id;
		req.stream = stream;
		req.offset = offset;
		req.max_bytes = 1 << 20;
		Sbx__V1__ReadOutputResponse *r = sbx_read_output(s->c, &req, &st);
		if (!r)
			call_failed(s, "ReadOutput", &st);
		fwrite(r->data.data, 1, r->data.len, m);
		bool eof = r->eof, stuck = !r->data.len && r->next_offset == offset;
		offset = r->next_offset;
		if (r->truncated)
			bench_die("the exec's output was cut (output_kb)");
		sbx__v1__read_output_response__free_unpacked(r, NULL);
		if (eof)
			break;
		if (stuck)
			bench_die("ReadOutput: no progress at offset %llu and no eof",
				  (unsigned long long)offset);
	}
	if (fclose(m) != 0)
		bench_die("out of memory");
	return buf;
}

/* Exec + Wait in the run; dies unless it exited 0; returns its stdout and
 * (if cpu_s) the CPU seconds its cgroup counted. */
static char *exec_capture(const struct server *s, const char *run_id, char **argv, size_t argc,
			  double *cpu_s)
{
	Sbx__V1__ExecRequest req = SBX__V1__EXEC_REQUEST__INIT;
	struct sbx_rpc_status st;

	req.run_id = (char *)run_id;
	req.argv = argv;
	req.n_argv = argc;
	Sbx__V1__ExecResponse *e = sbx_exec(s->c, &req, &st);
	if (!e)
		call_failed(s, "Exec", &st);
	Sbx__V1__WaitResponse *w = sbx_wait_end(s->c, run_id, e->exec_id, &st);
	if (!w)
		call_failed(s, "Wait", &st);
	const Sbx__V1__ExecStatus *x = w->status;
	if (x->reason != SBX__V1__EXIT_REASON__EXITED || x->exit_code != 0) {
		_cleanup_free_ char *err =
		    read_stream(s, run_id, e->exec_id, SBX__V1__STREAM__STDERR);
		bench_die("in the sandbox: %s ended %s (exit code %d, signal %d)%s%s: %.600s",
			  argv[0], sbx_exit_reason_name(x->reason), x->exit_code, x->signal,
			  x->message && *x->message ? ": " : "", x->message ? x->message : "", err);
	}
	char *out = read_stream(s, run_id, e->exec_id, SBX__V1__STREAM__STDOUT);
	if (cpu_s)
		*cpu_s = (double)x->cpu_ms / 1e3;
	sbx__v1__wait_response__free_unpacked(w, NULL);
	sbx__v1__exec_response__free_unpacked(e, NULL);
	return out;
}

static double rusage_s(int who)
{
	struct rusage r;

	if (getrusage(who, &r) < 0)
		bench_die_errno("getrusage");
	return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
	       (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

/* utime + stime of a process (every thread), from /proc/PID/stat. */
static double pid_cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long long ut, st;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		bench_die_errno("read %s", path);
	buf[n] = '\0';
	/* After "(comm)" (which may hold anything): state, then fields 4..13,
	 * then utime and stime (fields 14, 15). */
	const char *p = strrchr(buf, ')');
	if (!p ||
	    sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		bench_die("%s: cannot read utime and stime", path);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Runs argv here, stdout captured; dies unless it exits 0. cpu_s (if
 * non-NULL): the CPU seconds it used. */
static char *host_capture(char *const *argv, double *cpu_s)
{
	char outp[PATH_MAX], errp[PATH_MAX];
	int status;

	bench_scratch_path(outp, sizeof(outp), "client.stdout");
	bench_scratch_path(errp, sizeof(errp), "client.stderr");
	_cleanup_close_ int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int out = open(outp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	_cleanup_close_ int err = open(errp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (null < 0 || out < 0 || err < 0)
		bench_die_errno("open %s", outp);
	double c0 = rusage_s(RUSAGE_CHILDREN); /* counts children once waited for */
	bench_run(argv, child_env, NULL, null, out, err, &bench_interrupted, &status);
	if (cpu_s)
		*cpu_s = rusage_s(RUSAGE_CHILDREN) - c0;
	if (status != 0)
		bench_die("%s: %s: %s", bench_argv_str(argv), bench_status_str(status),
			  bench_tail_of(errp));
	return read_text(outp);
}

/* ------------------------------------------------------------ measures */

enum path { P_DIRECT, P_SBX, P_TINYPROXY, P_COUNT };
static const char *const path_names[P_COUNT] = {"direct", "sbx proxy", "tinyproxy"};
static const char *const path_keys[P_COUNT] = {"direct", "sbx", "tinyproxy"};

struct measures {
	double *dl_s[P_COUNT];	    /* seconds per download */
	double *dl_cpu[P_COUNT][3]; /* CPU seconds per download: client, relay, this program */
	size_t n_dl[P_COUNT];
	double *lat_us[P_COUNT]; /* microseconds per small request */
	size_t n_lat[P_COUNT];
};

struct setup {
	const struct server *srv;
	const char *run_id;
	const char *curl, *python;
	int origin_port, tinyproxy_port;
	uint64_t big;
};

/* curl's "code size seconds connects" line for one download. */
static double parse_download(const char *out, const struct setup *u, enum path p)
{
	unsigned long long size = 0;
	int code = 0, connects = 0;
	double seconds = 0;

	if (sscanf(out, "%d %llu %lf %d", &code, &size, &seconds, &connects) != 4 || code != 200 ||
	    size != u->big || seconds <= 0)
		bench_die("%s: download: curl said '%.200s' (want 200 and %llu bytes)",
			  path_names[p], out, (unsigned long long)u->big);
	return seconds;
}

/* One download: curl's time, and the CPU seconds it took of the client,
 * of the relay (sbxd or tinyproxy, every thread) and of this program (the
 * origin's thread; the main one only waits meanwhile). */
struct dl_sample {
	double seconds, client_cpu, relay_cpu, self_cpu;
};

static struct dl_sample download(const struct setup *u, enum path p)
{
	char url[128], proxy[64];
	_cleanup_free_ char *out = NULL;
	struct dl_sample d = {0};
	pid_t relay = p == P_SBX ? sbxd_pid : p == P_TINYPROXY ? tinyproxy_pid : -1;
	double relay0 = relay > 0 ? pid_cpu_s(relay) : 0, self0 = rusage_s(RUSAGE_SELF);

	if (p == P_SBX) {
		/* The proxy from the run's environment (http_proxy), as any job. */
		snprintf(url, sizeof(url), "http://%s:%d/big", ORIGIN_NAME, u->origin_port);
		char *argv[] = {(char *)u->curl, "-sS", "-o", "/dev/null", "-w",
				CURL_FORMAT,	 url,	NULL};
		out =
		    exec_capture(u->srv, u->run_id, argv, SBX_ARRAY_SIZE(argv) - 1, &d.client_cpu);
	} else {
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/big", u->origin_port);
		snprintf(proxy, sizeof(proxy), "http://127.0.0.1:%d", u->tinyproxy_port);
		char *argv[] = {(char *)u->curl,
				"-sS",
				"-o",
				"/dev/null",
				"-w",
				CURL_FORMAT,
				p == P_DIRECT ? "--noproxy" : "--proxy",
				p == P_DIRECT ? "*" : proxy,
				url,
				NULL};
		out = host_capture(argv, &d.client_cpu);
	}
	d.relay_cpu = relay > 0 ? pid_cpu_s(relay) - relay0 : 0;
	d.self_cpu = rusage_s(RUSAGE_SELF) - self0;
	d.seconds = parse_download(out, u, p);
	return d;
}

/* count requests on path p; their microseconds appended to m. */
static void small_requests(const struct setup *u, enum path p, long count, struct measures *m)
{
	char port[16], target[160], host_hdr[128], n[24], warm[16], size[16];
	_cleanup_free_ char *out = NULL;
	const char *host = "127.0.0.1";

	snprintf(n, sizeof(n), "%ld", count);
	snprintf(warm, sizeof(warm), "%d", WARMUP_REQUESTS);
	snprintf(size, sizeof(size), "%d", SMALL_BYTES);
	switch (p) {
	case P_DIRECT:
		snprintf(port, sizeof(port), "%d", u->origin_port);
		snprintf(target, sizeof(target), "/small");
		snprintf(host_hdr, sizeof(host_hdr), "127.0.0.1:%d", u->origin_port);
		break;
	case P_SBX:
		host = SANDBOX_PROXY;
		snprintf(port, sizeof(port), "3128");
		snprintf(host_hdr, sizeof(host_hdr), "%s:%d", ORIGIN_NAME, u->origin_port);
		snprintf(target, sizeof(target), "http://%s/small", host_hdr);
		break;
	default:
		snprintf(port, sizeof(port), "%d", u->tinyproxy_port);
		snprintf(host_hdr, sizeof(host_hdr), "127.0.0.1:%d", u->origin_port);
		snprintf(target, sizeof(target), "http://%s/small", host_hdr);
		break;
	}
	char *argv[] = {(char *)u->python,
			"-c",
			(char *)small_client,
			(char *)host,
			port,
			target,
			host_hdr,
			n,
			warm,
			size,
			NULL};
	if (p == P_SBX)
		out = exec_capture(u->srv, u->run_id, argv, SBX_ARRAY_SIZE(argv) - 1, NULL);
	else
		out = host_capture(argv, NULL);

	long got = 0;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		char *end;
		double us = strtod(line, &end);
		if (end == line || us <= 0)
			bench_die("%s: small requests: bad line '%.80s'", path_names[p], line);
		m->lat_us[p][m->n_lat[p]++] = us;
		got++;
	}
	if (got != count)
		bench_die("%s: small requests: %ld results for %ld requests", path_names[p], got,
			  count);
}

/* The three paths in rotating order, round by round. */
static void measure(const struct setup *u, long downloads, long requests, struct measures *m)
{
	for (int p = 0; p < P_COUNT; p++) {
		m->dl_s[p] = xcalloc((size_t)downloads, sizeof(double));
		for (int k = 0; k < 3; k++)
			m->dl_cpu[p][k] = xcalloc((size_t)downloads, sizeof(double));
		m->lat_us[p] = xcalloc((size_t)requests, sizeof(double));
	}
	bench_note("warm-up: one download on each path");
	for (int p = 0; p < P_COUNT; p++)
		download(u, (enum path)p);
	for (long i = 0; i < downloads; i++) {
		for (int j = 0; j < P_COUNT; j++) {
			enum path p = (enum path)((i + j) % P_COUNT);
			bench_check_interrupt();
			struct dl_sample d = download(u, p);
			m->dl_cpu[p][0][m->n_dl[p]] = d.client_cpu;
			m->dl_cpu[p][1][m->n_dl[p]] = d.relay_cpu;
			m->dl_cpu[p][2][m->n_dl[p]] = d.self_cpu;
			m->dl_s[p][m->n_dl[p]++] = d.seconds;
		}
		bench_note("download %ld/%ld: direct %.0f, sbx %.0f, tinyproxy %.0f MiB/s", i + 1,
			   downloads, (double)u->big / MIB / m->dl_s[P_DIRECT][i],
			   (double)u->big / MIB / m->dl_s[P_SBX][i],
			   (double)u->big / MIB / m->dl_s[P_TINYPROXY][i]);
	}
	long rounds = requests < MAX_ROUNDS ? requests : MAX_ROUNDS;
	for (long i = 0; i < rounds; i++) {
		long count = requests / rounds + (i == rounds - 1 ? requests % rounds : 0);
		for (int j = 0; j < P_COUNT; j++) {
			enum path p = (enum path)((i + j) % P_COUNT);
			bench_check_interrupt();
			small_requests(u, p, count, m);
		}
		bench_note("small requests: round %ld/%ld (%ld on each path, after %d unmeasured)",
			   i + 1, rounds, count, WARMUP_REQUESTS);
	}
}

/* ------------------------------------------------------------ results */

static double mib_s(const struct setup *u, const struct measures *m, enum path p)
{
	double s = bench_pct(m->dl_s[p], m->n_dl[p], 50);
	return s > 0 ? (double)u->big / MIB / s : 0;
}

struct verdicts {
	double dl_direct, dl_tiny; /* sbx throughput / the peer's */
	double small_tiny;	   /* tinyproxy p50 / sbx p50 */
	double setup_us;	   /* sbx p50 - direct p50 */
	bool met[4];
};

static struct verdicts judge(const struct setup *u, const struct measures *m)
{
	struct verdicts v;
	double sbx = mib_s(u, m, P_SBX);
	double p50[P_COUNT];

	for (int p = 0; p < P_COUNT; p++)
		p50[p] = bench_pct(m->lat_us[p], m->n_lat[p], 50);
	v.dl_direct = sbx / mib_s(u, m, P_DIRECT);
	v.dl_tiny = sbx / mib_s(u, m, P_TINYPROXY);
	v.small_tiny = p50[P_TINYPROXY] / p50[P_SBX];
	v.setup_us = p50[P_SBX] - p50[P_DIRECT];
	v.met[0] = v.dl_direct >= 0.8;
	v.met[1] = v.dl_tiny > 1.0;
	v.met[2] = v.small_tiny > 1.0;
	v.met[3] = v.setup_us < 1000;
	return v;
}

struct recorded {
	uint64_t connections, denied, bytes_out, bytes_in;
};

static void print_table(const struct setup *u, const struct measures *m, const struct verdicts *v,
			const struct recorded *rec, const struct bench_host *h)
{
	static const char *const yes[] = {"NOT met", "met"};

	printf("%-10s %14s %12s %12s %12s\n", "path", "download p50", "small p50", "small p90",
	       "small p99");
	for (int p = 0; p < P_COUNT; p++)
		printf("%-10s %9.0f MiB/s %9.0f us %9.0f us %9.0f us\n", path_names[p],
		       mib_s(u, m, (enum path)p), bench_pct(m->lat_us[p], m->n_lat[p], 50),
		       bench_pct(m->lat_us[p], m->n_lat[p], 90),
		       bench_pct(m->lat_us[p], m->n_lat[p], 99));
	printf("CPU seconds per download (p50): client, relay, origin\n");
	for (int p = 0; p < P_COUNT; p++)
		printf("  %-10s %6.3f %6.3f %6.3f  (wall %.3f)\n", path_names[p],
		       bench_pct(m->dl_cpu[p][0], m->n_dl[p], 50),
		       bench_pct(m->dl_cpu[p][1], m->n_dl[p], 50),
		       bench_pct(m->dl_cpu[p][2], m->n_dl[p], 50),
		       bench_pct(m->dl_s[p], m->n_dl[p], 50));
	printf("download sbx/direct     %6.2f  (target >= 0.8: %s)\n", v->dl_direct,
	       yes[v->met[0]]);
	printf("download sbx/tinyproxy  %6.2f  (target > 1: %s)\n", v->dl_tiny, yes[v->met[1]]);
	printf("small p50 tinyproxy/sbx %6.2f  (target > 1, sbx faster: %s)\n", v->small_tiny,
	       yes[v->met[2]]);
	printf("setup overhead          %6.0f us (sbx p50 - direct p50; target < 1000 us: %s)\n",
	       v->setup_us, yes[v->met[3]]);
	printf("counts: %zu downloads of %llu bytes and %zu small requests (%d-byte body) per "
	       "path, after one download and %d requests per client unmeasured\n",
	       m->n_dl[P_SBX], (unsigned long long)u->big, m->n_lat[P_SBX], SMALL_BYTES,
	       WARMUP_REQUESTS);
	printf("sbx recorded %llu connections (%llu denied), %llu bytes out, %llu bytes in\n",
	       (unsigned long long)rec->connections, (unsigned long long)rec->denied,
	       (unsigned long long)rec->bytes_out, (unsigned long long)rec->bytes_in);
	printf("host: %s, cgroup %s%s, %ld CPUs, load %.2f %.2f %.2f (1-minute load at the start "
	       "%.2f)\n",
	       h->kernel, h->cgroup, h->hybrid ? " (hybrid)" : "", h->cpus, h->load[0], h->load[1],
	       h->load[2], load_at_start);
}

static json_t *json_samples(const double *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_real(v[i]));
	return a;
}

static void print_json(const struct setup *u, const struct measures *m, const struct verdicts *v,
		       const struct recorded *rec, const struct bench_host *h)
{
	json_t *paths = json_array();

	for (int p = 0; p < P_COUNT; p++)
		json_array_append_new(
		    paths,
		    json_pack("{s:s, s:{s:f, s:o, s:o, s:o, s:o}, s:{s:f, s:f, s:f, s:o}}", "path",
			      path_keys[p], "download", "mib_per_s_p50", mib_s(u, m, (enum path)p),
			      "seconds", json_samples(m->dl_s[p], m->n_dl[p]), "client_cpu_s",
			      json_samples(m->dl_cpu[p][0], m->n_dl[p]), "relay_cpu_s",
			      json_samples(m->dl_cpu[p][1], m->n_dl[p]), "origin_cpu_s",
			      json_samples(m->dl_cpu[p][2], m->n_dl[p]), "small", "p50_us",
			      bench_pct(m->lat_us[p], m->n_lat[p], 50), "p90_us",
			      bench_pct(m->lat_us[p], m->n_lat[p], 90), "p99_us",
			      bench_pct(m->lat_us[p], m->n_lat[p], 99), "us",
			      json_samples(m->lat_us[p], m->n_lat[p])));
	json_t *out = json_pack(
	    "{s:{s:s, s:s, s:b, s:I, s:[f,f,f], s:f}, s:{s:I, s:I, s:I, s:i, s:i}, s:o,"
	    " s:{s:f, s:f, s:f, s:f}, s:{s:b, s:b, s:b, s:b}, s:{s:I, s:I, s:I, s:I}}",
	    "host", "kernel", h->kernel, "cgroup", h->cgroup, "cgroup_hybrid", h->hybrid, "cpus",
	    (json_int_t)h->cpus, "loadavg", h->load[0], h->load[1], h->load[2], "load_at_start",
	    load_at_start, "counts", "download_bytes", (json_int_t)u->big, "downloads",
	    (json_int_t)m->n_dl[P_SBX], "requests", (json_int_t)m->n_lat[P_SBX], "small_bytes",
	    SMALL_BYTES, "warmup_requests", WARMUP_REQUESTS, "paths", paths, "ratios",
	    "download_sbx_direct", v->dl_direct, "download_sbx_tinyproxy", v->dl_tiny,
	    "small_p50_tinyproxy_sbx", v->small_tiny, "setup_overhead_us", v->setup_us,
	    "targets_met", "download_ge_0.8_direct", v->met[0], "download_faster_than_tinyproxy",
	    v->met[1], "small_faster_than_tinyproxy", v->met[2], "setup_overhead_lt_1ms", v->met[3],
	    "sbx_recorded", "connections", (json_int_t)rec->connections, "denied",
	    (json_int_t)rec->denied, "bytes_out", (json_int_t)rec->bytes_out, "bytes_in",
	    (json_int_t)rec->bytes_in);

	if (!out || json_dumpf(out, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(6)) < 0)
		bench_die("writing JSON failed");
	putchar('\n');
	json_decref(out);
}

/* What sbxd's Status says went through the proxy for the run: every
 * download and request must be there, or the proxy was not what carried
 * them. */
static struct recorded status_totals(const struct server *s, const char *run_id)
{
	struct sbx_rpc_status st;
	struct recorded r = {0};
	Sbx__V1__StatusResponse *resp = sbx_status(s->c, run_id, &st);

	if (!resp)
		call_failed(s, "Status", &st);
	for (size_t i = 0; i < resp->n_egress_destinations; i++) {
		const Sbx__V1__EgressDestination *d = resp->egress_destinations[i];
		r.connections += d->connections;
		r.denied += d->denied;
		r.bytes_out += d->bytes_out;
		r.bytes_in += d->bytes_in;
	}
	sbx__v1__status_response__free_unpacked(resp, NULL);
	return r;
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: " PROG " [--size MiB] [--requests N] [--downloads K] [--json]\n"
	    "                        [--sbxd PATH] [--helper PATH] [--tinyproxy PATH]\n"
	    "\n"
	    "sbxd's egress proxy against a direct loopback connection and tinyproxy, in\n"
	    "one run. A server in this program on 127.0.0.1 is the destination; this\n"
	    "program starts a private sbxd (its egress hosts file names the server\n" ORIGIN_NAME
	    ") and tinyproxy (a config of its own, a free port), then:\n"
	    "  download  K downloads (5) of MiB (256) by curl -o /dev/null, its\n"
	    "            time_total: in a sandbox through the proxy, here direct, here\n"
	    "            through tinyproxy: MiB/s of the median, ratios sbx/direct\n"
	    "            (target >= 0.8) and sbx/tinyproxy (target > 1)\n"
	    "  small     N plain HTTP GETs (1000) per path, each a new connection with\n"
	    "            Connection: close, timed by a python3 client around\n"
	    "            connect..EOF: p50, p90, p99, tinyproxy/sbx (target > 1) and\n"
	    "            the setup overhead sbx p50 - direct p50 (target < 1000 us)\n"
	    "Rounds rotate the order of the paths. Tables go to stdout, progress to stderr.\n"
	    "\n"
	    "  --size MiB        the download's size (default 256)\n"
	    "  --requests N      small requests per path (default 1000)\n"
	    "  --downloads K     measured downloads per path (default 5)\n"
	    "  --json            machine-readable output, with every sample\n"
	    "  --sbxd PATH       sbxd (default <dir of this binary>/../server/sbxd)\n"
	    "  --helper PATH     sbx-helper (default <dir of this binary>/../helper/sbx-helper)\n"
	    "  --tinyproxy PATH  tinyproxy (default /usr/bin/tinyproxy)\n"
	    "  -h, --help        this text\n"
	    "\n"
	    "Must run as an unprivileged user (sbxd and sbx-helper refuse root), e.g.\n"
	    "  runuser -u sbx-test -- " PROG "\n"
	    "Exit status: 0 every measure ran (targets met or not: see the table);\n"
	    "1 a measure, a peer or the set-up failed (named on stderr); 2 usage.\n");
}

int main(int argc, char **argv)
{
	enum { O_SIZE = 256, O_REQUESTS, O_DOWNLOADS, O_JSON, O_SBXD, O_HELPER, O_TINYPROXY };
	static const struct option opts[] = {
	    {"size", required_argument, NULL, O_SIZE},
	    {"requests", required_argument, NULL, O_REQUESTS},
	    {"downloads", required_argument, NULL, O_DOWNLOADS},
	    {"json", no_argument, NULL, O_JSON},
	    {"sbxd", required_argument, NULL, O_SBXD},
	    {"helper", required_argument, NULL, O_HELPER},
	    {"tinyproxy", required_argument, NULL, O_TINYPROXY},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	char sbxd_buf[PATH_MAX], helper_buf[PATH_MAX];
	const char *sbxd = NULL, *helper = NULL, *tinyproxy = "/usr/bin/tinyproxy";
	long size_mib = 256, requests = 1000, downloads = 5;
	bool json = false;
	int c;

	bench_prog = PROG;
	atexit(cleanup); /* bench_die's exit stops the peers and removes the scratch directory */

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_SIZE:
			size_mib = bench_parse_count("--size", optarg, 1, 8192);
			break;
		case O_REQUESTS:
			requests = bench_parse_count("--requests", optarg, 1, 100000);
			break;
		case O_DOWNLOADS:
			downloads = bench_parse_count("--downloads", optarg, 1, 1000);
			break;
		case O_JSON:
			json = true;
			break;
		case O_SBXD:
			sbxd = optarg;
			break;
		case O_HELPER:
			helper = optarg;
			break;
		case O_TINYPROXY:
			tinyproxy = optarg;
			break;
		default:
			return bench_option_other(c, usage);
		}
	}
	if (bench_no_operands(argc, argv, optind, usage))
		return 2;
	bench_refuse_root(argv[0], "sbxd and sbx-helper refuse root");
	bench_find_sbxd_helper(&sbxd, sbxd_buf, &helper, helper_buf, sizeof(helper_buf));
	bench_check_exec("tinyproxy", tinyproxy,
			 " (apt-get install tinyproxy, or pass --tinyproxy PATH)");
	bench_check_exec("curl", "/usr/bin/curl", " (apt-get install curl)");
	bench_check_exec("python3", "/usr/bin/python3", " (apt-get install python3)");
	bench_make_absolute(&helper, helper_buf, sizeof(helper_buf));

	bench_on_signals(bench_on_signal);
	signal(SIGPIPE, SIG_IGN);
	struct bench_host h0;
	bench_probe_host(&h0);
	load_at_start = h0.load[0];
	bench_scratch_make();
	bench_note("temporary directory %s", bench_scratch_dir());

	struct setup u = {
	    .curl = "/usr/bin/curl", .python = "/usr/bin/python3", .big = (uint64_t)size_mib << 20};
	bench_note("origin: %ld MiB in a memfd", size_mib);
	origin_start(u.big, SMALL_BYTES);
	u.origin_port = origin_port();
	bench_note("origin listens on 127.0.0.1:%d", u.origin_port);
	u.tinyproxy_port = start_tinyproxy(tinyproxy);
	struct server srv = {0};
	start_sbxd(&srv, sbxd, helper);
	u.srv = &srv;
	_cleanup_free_ char *run_id = create_run(&srv, u.origin_port);
	u.run_id = run_id;
	bench_note("run %s: allowlist %s:%d", run_id, ORIGIN_NAME, u.origin_port);

	struct measures m = {0};
	measure(&u, downloads, requests, &m);

	struct recorded rec = status_totals(&srv, run_id);
	uint64_t want =
	    (uint64_t)(downloads + 1) + (uint64_t)requests +
	    (uint64_t)WARMUP_REQUESTS * (uint64_t)(requests < MAX_ROUNDS ? requests : MAX_ROUNDS);
	if (rec.connections != want || rec.denied != 0 || rec.bytes_in < (downloads + 1) * u.big)
		bench_die("sbxd's Status counts %llu allowed and %llu denied connections, %llu "
			  "bytes in; the benchmark made %llu, each allowed, over %llu bytes",
			  (unsigned long long)rec.connections, (unsigned long long)rec.denied,
			  (unsigned long long)rec.bytes_in, (unsigned long long)want,
			  (unsigned long long)((downloads + 1) * u.big));
	struct sbx_rpc_status st;
	Sbx__V1__TeardownResponse *t = sbx_teardown(srv.c, run_id, &st);
	if (!t)
		call_failed(&srv, "Teardown", &st);
	sbx__v1__teardown_response__free_unpacked(t, NULL);
	sbx_client_close(srv.c);

	struct bench_host h;
	bench_probe_host(&h);
	struct origin_stats os = origin_stats();
	bench_note("stopping sbxd and tinyproxy (origin served %llu, refused %llu)",
		   (unsigned long long)os.served, (unsigned long long)os.refused);
	cleanup();

	struct verdicts v = judge(&u, &m);
	if (json)
		print_json(&u, &m, &v, &rec, &h);
	else
		print_table(&u, &m, &v, &rec, &h);
	return 0;
}
