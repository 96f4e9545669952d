/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-bench-sbxd: sbxd's RPC over ipc and over TLS, each figure next to a
 * peer measured in the same run:
 *
 *   Health round trip                          p50, p99 (us)
 *   CreateRun + Exec(/bin/true) + Wait + Teardown  next to a one-shot
 *                                              `bwrap ... /bin/true`, alternating
 *   Exec(/bin/true) + Wait in one live run     next to the floor: this process
 *                                              starting /bin/true by posix_spawn
 *                                              and waitpid (no sandbox),
 *                                              alternating
 *   FetchArtifact of a 256 MiB file            next to a raw nng REQ/REP peer
 *     (sbx_fetch_fd into /dev/null, sha256       carrying the same bytes at the
 *     checked, SBX_FETCH_WINDOW chunks in        same chunk size and window and
 *     flight)                                    dropping them (bench_nng_peer.c)
 *   sbx_fetch_file of it                       next to `cp` of a 256 MiB file
 *   CreateRun from the warm pool               next to a cold CreateRun
 *   the cycle with a warm CreateRun            next to the one-shot bwrap
 *
 * It starts its own sbxd in a temporary directory (ipc listener, and a
 * tls+tcp listener on 127.0.0.1 with certificates made by the openssl CLI
 * and a bearer token stored as its sha256), drives it through libsbxclient,
 * then stops it with SIGTERM and removes the directory. Each sample is
 * CLOCK_MONOTONIC around the calls (or around the peer's fork+exec+waitpid,
 * posix_spawn+waitpid for the floor). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "bench_nng_peer.h"
#include "bench_sbxd.h"
#include "bench_scratch.h"
#include "bench_util.h"
#include "bwrap_baseline.h"
#include "chunk_malloc.h"
#include "sbxclient.h"
#include "sleep.h"
#include "util.h"

#define PROG		 "sbx-bench-sbxd"
#define MIB		 (1024.0 * 1024.0)
#define FETCH_BYTES	 268435456ULL /* 256 MiB */
#define FETCH_NAME	 "big"
#define START_TIMEOUT_MS 15000
#define STOP_TIMEOUT_MS	 30000
#define CALL_TIMEOUT_MS	 60000

#define CYCLE_POLICY BENCH_COLD_POLICY
#define FETCH_POLICY                                                                               \
	"{\"image\":\"host\",\"limits\":{\"memory_mb\":512,\"out_mb\":300,\"tmp_mb\":16}}"
#define FETCH_SCRIPT "head -c 268435456 /dev/urandom > /out/" FETCH_NAME

/* ------------------------------------------------------------ basics */

static pid_t sbxd_pid = -1; /* our sbxd, stopped at the end */
static bool cleaning;

/* The children (openssl, bwrap, cp) get this environment only. */
static char *const child_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};

static void cleanup(void);

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p)
		bench_die("out of memory");
	return p;
}

/* ------------------------------------------------------------ children */

/* Runs argv (on child_env's PATH) in dir and dies naming it unless it exits 0. */
static double run_ok(const char *what, char *const *argv, const char *dir)
{
	return bench_run_ok(what, argv, child_env, dir, NULL);
}

/* ------------------------------------------------------------ set-up */

static void stop_sbxd(void)
{
	bench_stop_child(&sbxd_pid, "sbxd", STOP_TIMEOUT_MS);
}

static void cleanup(void)
{
	if (cleaning)
		return;
	cleaning = true;
	stop_sbxd();
	bench_scratch_remove();
}

static void make_certs(void)
{
	static const struct {
		const char *name, *ext;
	} leaves[] = {
	    {"server", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"},
	    {"client", "extendedKeyUsage=clientAuth\n"},
	};
	char *ca[] = {"openssl", "req",	   "-x509", "-newkey", "rsa:2048",
		      "-nodes",	 "-days",  "2",	    "-subj",   "/CN=sbx bench ca",
		      "-keyout", "ca.key", "-out",  "ca.pem",  NULL};

	run_ok("openssl (CA)", ca, bench_scratch_dir());
	for (size_t i = 0; i < SBX_ARRAY_SIZE(leaves); i++) {
		char subj[64], key[32], csr[32], pem[32], ext[32], extpath[PATH_MAX];
		const char *n = leaves[i].name;

		snprintf(subj, sizeof(subj), "/CN=%s", n);
		snprintf(key, sizeof(key), "%s.key", n);
		snprintf(csr, sizeof(csr), "%s.csr", n);
		snprintf(pem, sizeof(pem), "%s.pem", n);
		snprintf(ext, sizeof(ext), "%s.ext", n);
		bench_scratch_path(extpath, sizeof(extpath), ext);
		FILE *f = fopen(extpath, "we");
		if (!f || fputs(leaves[i].ext, f) < 0 || fclose(f) != 0)
			bench_die_errno("write %s", extpath);
		char *req[] = {"openssl", "req",     "-newkey", "rsa:2048", "-nodes", "-subj",
			       subj,	  "-keyout", key,	"-out",	    csr,      NULL};
		char *sign[] = {"openssl", "x509",   "-req",	 "-in",	   csr,
				"-CA",	   "ca.pem", "-CAkey",	 "ca.key", "-CAcreateserial",
				"-days",   "2",	     "-extfile", ext,	   "-out",
				pem,	   NULL};
		run_ok("openssl (key and request)", req, bench_scratch_dir());
		run_ok("openssl (signing)", sign, bench_scratch_dir());
	}
}

static void random_hex(char *out, size_t bytes)
{
	unsigned char buf[64];

	if (bytes > sizeof(buf))
		bytes = sizeof(buf);
	if (getrandom(buf, bytes, 0) != (ssize_t)bytes)
		bench_die_errno("getrandom");
	for (size_t i = 0; i < bytes; i++)
		snprintf(out + 2 * i, 3, "%02x", buf[i]);
}

struct server {
	char ipc[PATH_MAX + 8];
	char tls[64];
	char token[65];
	char ca[PATH_MAX], cert[PATH_MAX], key[PATH_MAX];
	char log[PATH_MAX]; /* sbxd's stderr */
};

/* The caller's --sbxd-config, merged over the config below, or NULL. */
static json_t *config_extra;

static void write_config(struct server *s, const char *helper, const char *path)
{
	char state[PATH_MAX], audit[PATH_MAX], scert[PATH_MAX], skey[PATH_MAX], hash[65];

	bench_scratch_path(state, sizeof(state), "state");
	bench_scratch_path(audit, sizeof(audit), "audit.log");
	bench_scratch_path(scert, sizeof(scert), "server.pem");
	bench_scratch_path(skey, sizeof(skey), "server.key");
	bench_sha256_hex_of(s->token, hash);
	/* One pool member of BENCH_POOL_POLICY (the warm rows), refilled at
	 * once; the other rows use another policy, so they stay cold. */
	json_t *cfg = json_pack(
	    "{s:[s,s], s:s, s:s, s:s, s:{s:s, s:s, s:s}, s:[{s:s, s:s}], s:o, s:i, s:b}", "listen",
	    s->ipc, s->tls, "state_dir", state, "helper", helper, "log", audit, "tls", "cert",
	    scert, "key", skey, "client_ca", s->ca, "tokens", "name", "bench", "sha256", hash,
	    "pool", bench_pool_config(1), "pool_builds_per_second", 100, "same_host_export", 1);
	if (!cfg || (config_extra && json_object_update(cfg, config_extra) < 0))
		bench_die("building the config failed");
	if (json_dump_file(cfg, path, JSON_INDENT(2)) < 0)
		bench_die_errno("write %s", path);
	json_decref(cfg);
}

static sbx_client *open_client(const struct server *s, bool tls, uint32_t timeout_ms, int retries)
{
	struct sbx_client_opts o = {
	    .endpoint = tls ? s->tls : s->ipc,
	    .timeout_ms = timeout_ms,
	    .retries = retries,
	};
	struct sbx_err err;

	if (tls) {
		o.tls_cert = s->cert;
		o.tls_key = s->key;
		o.tls_ca = s->ca;
		/* mbedTLS matches names, not IP addresses, in certificates. */
		o.tls_server_name = "localhost";
		o.token = s->token;
	}
	sbx_client *c = sbx_client_open(&o, &err);
	if (!c)
		bench_die("libsbxclient for %s: %s", o.endpoint, err.msg);
	sbx_client_set_interrupt(c, &bench_interrupted);
	return c;
}

static void start_sbxd(struct server *s, const char *sbxd, const char *helper)
{
	char config[PATH_MAX];

	bench_note("temporary directory %s", bench_scratch_dir());
	bench_note("making certificates with openssl");
	make_certs();
	bench_scratch_path(s->ca, sizeof(s->ca), "ca.pem");
	bench_scratch_path(s->cert, sizeof(s->cert), "client.pem");
	bench_scratch_path(s->key, sizeof(s->key), "client.key");
	bench_scratch_path(s->log, sizeof(s->log), "sbxd.stderr");
	bench_scratch_path(config, sizeof(config), "sbxd.json");
	if ((size_t)snprintf(s->ipc, sizeof(s->ipc), "ipc://%s/sbxd.sock", bench_scratch_dir()) >=
	    sizeof(s->ipc))
		bench_die("socket path too long");
	snprintf(s->tls, sizeof(s->tls), "tls+tcp://127.0.0.1:%d", bench_free_port());
	random_hex(s->token, 32);
	write_config(s, helper, config);

	_cleanup_close_ int out = open(s->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	_cleanup_close_ int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (out < 0 || null < 0)
		bench_die_errno("open %s", s->log);
	bench_note("starting %s --config %s", sbxd, config);
	fflush(NULL);
	pid_t parent = getpid();
	sbxd_pid = fork();
	if (sbxd_pid < 0)
		bench_die_errno("fork");
	if (sbxd_pid == 0) {
		/* Its own process group: a ^C reaches us, and we stop it (SIGTERM
		 * tears its runs down); if we die, it gets SIGTERM anyway. */
		setpgid(0, 0);
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
			_exit(1);
		if (dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
			_exit(127);
		char *argv[] = {(char *)sbxd, "--config", config, NULL};
		execve(sbxd, argv, environ);
		struct sbx_err err;
		sbx_fail_errno(&err, "exec %s", sbxd);
		dprintf(STDERR_FILENO, "%s\n", err.msg);
		_exit(127);
	}

	/* Health over ipc until it answers. */
	sbx_client *c = open_client(s, false, 1000, -1);
	struct sbx_rpc_status st = {0};
	for (int waited = 0;; waited += 50) {
		Sbx__V1__HealthResponse *h = sbx_health(c, &st);
		int status;

		if (h) {
			bench_note("sbxd %s answers (pid %d, identity %s, cgroup %s)", h->version,
				   (int)sbxd_pid, h->identity, h->cgroup);
			sbx__v1__health_response__free_unpacked(h, NULL);
			break;
		}
		if (waitpid(sbxd_pid, &status, WNOHANG) == sbxd_pid) {
			sbxd_pid = -1;
			sbx_client_close(c);
			bench_die("sbxd exited (%s): %s", bench_status_str(status),
				  bench_tail_of(s->log));
		}
		bench_check_interrupt();
		if (waited >= START_TIMEOUT_MS) {
			sbx_client_close(c);
			bench_die("sbxd did not answer Health within %d s (%s: %s): %s",
				  START_TIMEOUT_MS / 1000, sbx_code_name(st.code), st.err.msg,
				  bench_tail_of(s->log));
		}
		sbx_sleep_ms(50);
	}
	sbx_client_close(c);
}

/* ------------------------------------------------------------ peers */

/* ------------------------------------------------------------ results */

enum unit { U_US, U_MS, U_RATE };

struct result {
	const char *transport;
	const char *key;   /* for --json */
	const char *label; /* for the table */
	enum unit unit;
	double hi; /* the second percentile shown: 99 or 90 */
	double *v; /* us, ms, or seconds (U_RATE) */
	size_t n;
	double bytes;	  /* U_RATE: per sample */
	const char *peer; /* NULL, "bwrap", "cp", "floor", ... */
	char **peer_argv;
	double *pv; /* the peer's samples, same unit (ms for bwrap, seconds for cp) */
	size_t pn;
	const char *target;
	double min_ratio; /* a throughput target: ratio >= min_ratio (0: none) */
};

/* Every measure of every transport: 17 in a whole run; room to add more. */
static struct result results[32];
static size_t n_results;

static struct result *new_result(const char *transport, const char *key, const char *label,
				 enum unit unit, double hi, size_t n)
{
	if (n_results == SBX_ARRAY_SIZE(results))
		bench_die("too many results");
	struct result *r = &results[n_results++];
	*r = (struct result){.transport = transport,
			     .key = key,
			     .label = label,
			     .unit = unit,
			     .hi = hi,
			     .v = xcalloc(n, sizeof(double))};
	return r;
}

static double rate(double bytes, double seconds)
{
	return seconds > 0 ? bytes / MIB / seconds : 0;
}

static double ratio(const struct result *r)
{
	if (!r->peer || !r->pn || !r->n)
		return 0;
	double a = bench_pct(r->v, r->n, 50), b = bench_pct(r->pv, r->pn, 50);
	if (r->unit == U_RATE) /* throughput: peer time / our time */
		return a > 0 ? b / a : 0;
	return b > 0 ? a / b : 0;
}

static const char *fmt_value(char *buf, size_t size, const struct result *r, double x)
{
	switch (r->unit) {
	case U_US:
		snprintf(buf, size, "%.0f us", x);
		break;
	case U_MS:
		snprintf(buf, size, "%.1f ms", x);
		break;
	case U_RATE:
		snprintf(buf, size, "%.0f MiB/s", rate(r->bytes, x));
		break;
	}
	return buf;
}

static void print_table(const struct bench_host *h, const char *counts)
{
	char a[32], b[32], c[48], d[32];

	printf("%-10s %-25s %-10s %-10s %-16s %-10s %s\n", "transport", "measure", "p50", "p90/p99",
	       "peer p50", "peer p90", "ratio");
	for (size_t i = 0; i < n_results; i++) {
		const struct result *r = &results[i];

		fmt_value(a, sizeof(a), r, bench_pct(r->v, r->n, 50));
		if (r->unit == U_RATE)
			b[0] = '\0';
		else
			fmt_value(b, sizeof(b), r, bench_pct(r->v, r->n, r->hi));
		if (!r->peer) {
			printf("%-10s %-25s %-10s %s\n", r->transport, r->label, a, b);
			continue;
		}
		char pv[32];
		snprintf(c, sizeof(c), "%s %s", r->peer,
			 fmt_value(pv, sizeof(pv), r, bench_pct(r->pv, r->pn, 50)));
		if (r->unit == U_RATE)
			d[0] = '\0';
		else
			fmt_value(d, sizeof(d), r, bench_pct(r->pv, r->pn, r->hi));
		printf("%-10s %-25s %-10s %-10s %-16s %-10s %.2f\n", r->transport, r->label, a, b,
		       c, d, ratio(r));
	}
	printf("(p90/p99: p99 for Health, p90 otherwise; FetchArtifact: MiB/s of the median time,\n"
	       " ratios of p50: cycle/bwrap, target <= 1.0; FetchArtifact/raw nng, target >= 0.8;\n"
	       " sbx_fetch_file/cp for reference; Exec+Wait/floor, where the floor is this\n"
	       " process's posix_spawn+waitpid of /bin/true, which no exec path beats)\n");
	for (size_t i = 0; i < n_results; i++) {
		const struct result *r = &results[i];
		double x = ratio(r);

		if (!r->peer || !r->target || !r->min_ratio)
			continue;
		printf("%s %s: %.2f of %s, target %s: %s\n", r->transport, r->label, x, r->peer,
		       r->target, x >= r->min_ratio ? "met" : "MISSED");
	}
	printf("counts: %s\n", counts);
	printf("host: %s, cgroup %s%s, %ld CPUs, load %.2f %.2f %.2f\n", h->kernel, h->cgroup,
	       h->hybrid ? " (hybrid)" : "", h->cpus, h->load[0], h->load[1], h->load[2]);
}

static json_t *json_samples(const double *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_real(v[i]));
	return a;
}

static json_t *json_argv(char *const *argv)
{
	json_t *a = json_array();

	for (size_t i = 0; argv && argv[i]; i++)
		json_array_append_new(a, json_string(argv[i]));
	return a;
}

static void print_json(const struct bench_host *h, json_t *counts)
{
	json_t *out =
	    json_pack("{s:{s:s, s:s, s:b, s:I, s:[f,f,f]}, s:o, s:[]}", "host", "kernel", h->kernel,
		      "cgroup", h->cgroup, "cgroup_hybrid", h->hybrid, "cpus", (json_int_t)h->cpus,
		      "loadavg", h->load[0], h->load[1], h->load[2], "counts", counts, "results");
	json_t *arr = json_object_get(out, "results");

	for (size_t i = 0; i < n_results; i++) {
		const struct result *r = &results[i];
		static const char *const units[] = {"us", "ms", "s"};
		json_t *o =
		    json_pack("{s:s, s:s, s:s, s:s, s:I, s:f, s:f, s:f, s:o}", "transport",
			      r->transport, "measure", r->key, "label", r->label, "unit",
			      units[r->unit], "n", (json_int_t)r->n, "p50",
			      bench_pct(r->v, r->n, 50), "p90", bench_pct(r->v, r->n, 90), "p99",
			      bench_pct(r->v, r->n, 99), "samples", json_samples(r->v, r->n));
		if (r->unit == U_RATE) {
			json_object_set_new(o, "bytes", json_integer((json_int_t)r->bytes));
			json_object_set_new(o, "mib_per_s_p50",
					    json_real(rate(r->bytes, bench_pct(r->v, r->n, 50))));
		}
		if (r->peer) {
			json_t *p = json_pack("{s:s, s:o, s:I, s:f, s:f, s:o}", "name", r->peer,
					      "argv", json_argv(r->peer_argv), "n",
					      (json_int_t)r->pn, "p50", bench_pct(r->pv, r->pn, 50),
					      "p90", bench_pct(r->pv, r->pn, 90), "samples",
					      json_samples(r->pv, r->pn));
			if (r->unit == U_RATE)
				json_object_set_new(
				    p, "mib_per_s_p50",
				    json_real(rate(r->bytes, bench_pct(r->pv, r->pn, 50))));
			json_object_set_new(o, "peer", p);
			json_object_set_new(o, "ratio", json_real(ratio(r)));
			if (r->target)
				json_object_set_new(o, "target", json_string(r->target));
		}
		json_array_append_new(arr, o);
	}
	if (json_dumpf(out, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(6)) < 0)
		bench_die("writing JSON failed");
	putchar('\n');
	json_decref(out);
}

/* ------------------------------------------------------------ the calls */

struct transport {
	const char *name; /* "ipc", "tls" */
	sbx_client *c;
};

static void call_failed(const struct transport *t, const char *call,
			const struct sbx_rpc_status *st) __attribute__((noreturn));

static void call_failed(const struct transport *t, const char *call,
			const struct sbx_rpc_status *st)
{
	if (bench_interrupted)
		bench_die("interrupted (during %s over %s)", call, t->name);
	bench_die("%s: %s failed: %s: %s", t->name, call, sbx_code_name(st->code), st->err.msg);
}

/* A new run of policy whose manifest declares inputs[0..n): its id. */
static char *create_run_with(const struct transport *t, const char *policy,
			     Sbx__V1__InputFile **inputs, size_t n)
{
	Sbx__V1__CreateRunRequest req = SBX__V1__CREATE_RUN_REQUEST__INIT;
	struct sbx_rpc_status st;

	req.policy_json = (char *)policy;
	req.inputs = inputs;
	req.n_inputs = n;
	Sbx__V1__CreateRunResponse *r = sbx_create_run(t->c, &req, &st);
	if (!r)
		call_failed(t, "CreateRun", &st);
	char *id = strdup(r->run_id);
	sbx__v1__create_run_response__free_unpacked(r, NULL);
	if (!id)
		bench_die("out of memory");
	return id;
}

static char *create_run(const struct transport *t, const char *policy)
{
	return create_run_with(t, policy, NULL, 0);
}

static void teardown(const struct transport *t, const char *run_id)
{
	struct sbx_rpc_status st;
	Sbx__V1__TeardownResponse *r = sbx_teardown(t->c, run_id, &st);

	if (!r)
		call_failed(t, "Teardown", &st);
	sbx__v1__teardown_response__free_unpacked(r, NULL);
}

/* Exec + Wait until it ended; dies unless it exited 0. */
static void exec_wait(const struct transport *t, const char *run_id, char **argv, size_t argc)
{
	Sbx__V1__ExecRequest req = SBX__V1__EXEC_REQUEST__INIT;
	struct sbx_rpc_status st;

	req.run_id = (char *)run_id;
	req.argv = argv;
	req.n_argv = argc;
	Sbx__V1__ExecResponse *e = sbx_exec(t->c, &req, &st);
	if (!e)
		call_failed(t, "Exec", &st);
	Sbx__V1__WaitResponse *w = sbx_wait_end(t->c, run_id, e->exec_id, &st);
	if (!w) {
		sbx__v1__exec_response__free_unpacked(e, NULL);
		call_failed(t, "Wait", &st);
	}
	const Sbx__V1__ExecStatus *s = w->status;
	if (s->reason != SBX__V1__EXIT_REASON__EXITED || s->exit_code != 0)
		bench_die("%s: Exec %s in run %s ended %s (exit code %d, signal %d)%s%s", t->name,
			  bench_argv_str(argv), run_id, sbx_exit_reason_name(s->reason),
			  s->exit_code, s->signal, s->message && *s->message ? ": " : "",
			  s->message ? s->message : "");
	sbx__v1__wait_response__free_unpacked(w, NULL);
	sbx__v1__exec_response__free_unpacked(e, NULL);
}

static char *argv_true[] = {"/bin/true", NULL};

static double rpc_cycle(const struct transport *t)
{
	double t0 = bench_now_ms();
	char *id = create_run(t, CYCLE_POLICY);
	exec_wait(t, id, argv_true, 1);
	teardown(t, id);
	double t1 = bench_now_ms();
	free(id);
	return t1 - t0;
}

static double bwrap_once(char **bwrap_argv)
{
	return run_ok("bwrap", bwrap_argv, NULL);
}

/* The floor of Exec+Wait: this process starting /bin/true by posix_spawn
 * (glibc's clone(CLONE_VM|CLONE_VFORK), the cheapest way to start a
 * program) and waiting for it, with no sandbox and no hop between
 * processes; ms. A sandboxed exec of the same program on the same host
 * pays at least this. Dies unless it exits 0. */
static double floor_once(void)
{
	pid_t pid;
	int status;
	double t0 = bench_now_ms();
	int e = posix_spawn(&pid, argv_true[0], NULL, NULL, argv_true, child_env);

	if (e != 0) {
		errno = e;
		bench_die_errno("posix_spawn %s", argv_true[0]);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			bench_die_errno("waitpid %s", argv_true[0]);
	double t1 = bench_now_ms();
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		bench_die("%s (posix_spawn): %s", argv_true[0], bench_status_str(status));
	return t1 - t0;
}

/* ------------------------------------------------------------ measures */

struct counts {
	long health_ipc, health_tls, cycles, execs, fetches, warm;
	long exec_gap_ms;   /* the pause before each Exec of the exec measure */
	long exec_apart_ms; /* the same for its second series (0: none) */
};

static void bench_health(const struct transport *t, long n)
{
	struct result *r = new_result(t->name, "health", "Health", U_US, 99, (size_t)n);
	struct sbx_rpc_status st;

	bench_note("%s: Health x %ld", t->name, n);
	for (long i = -20; i < n; i++) { /* 20 unmeasured first */
		double t0 = bench_now_ms();
		Sbx__V1__HealthResponse *h = sbx_health(t->c, &st);
		double t1 = bench_now_ms();

		if (!h)
			call_failed(t, "Health", &st);
		sbx__v1__health_response__free_unpacked(h, NULL);
		if (i >= 0)
			r->v[r->n++] = (t1 - t0) * 1e3;
	}
}

static void bench_cycle(const struct transport *t, long n, char **bwrap_argv)
{
	struct result *r = new_result(t->name, "cycle", "CreateRun..Teardown", U_MS, 90, (size_t)n);

	r->peer = "bwrap";
	r->peer_argv = bwrap_argv;
	r->pv = xcalloc((size_t)n, sizeof(double));
	r->target = "<= 1.0";
	bench_note("%s: CreateRun+Exec(/bin/true)+Wait+Teardown x %ld, alternating with bwrap",
		   t->name, n);
	for (int i = 0; i < 2; i++) { /* warm-up */
		rpc_cycle(t);
		bwrap_once(bwrap_argv);
	}
	for (long i = 0; i < n; i++) {
		bench_check_interrupt();
		/* Alternate which goes first, so neither always runs on the
		 * other's warm caches. */
		if (i % 2 == 0) {
			r->v[r->n++] = rpc_cycle(t);
			r->pv[r->pn++] = bwrap_once(bwrap_argv);
		} else {
			r->pv[r->pn++] = bwrap_once(bwrap_argv);
			r->v[r->n++] = rpc_cycle(t);
		}
		if ((i + 1) % 10 == 0 || i + 1 == n)
			bench_note("%s: cycle %ld/%ld", t->name, i + 1, n);
	}
}

static double exec_once(const struct transport *t, const char *run_id)
{
	double t0 = bench_now_ms();
	exec_wait(t, run_id, argv_true, 1);
	return bench_now_ms() - t0;
}

/* Exec(/bin/true)+Wait in one live run next to the floor (floor_once),
 * alternating which goes first, as result key. Each Exec comes at least
 * gap_ms after the previous one's Wait (0: back to back, but with the
 * order swapped every other pair of execs has two floor samples between
 * them); the floor samples come after the same pause. */
static void bench_exec(const struct transport *t, long n, long gap_ms, const char *key,
		       const char *label)
{
	struct result *r = new_result(t->name, key, label, U_MS, 90, (size_t)n);

	r->peer = "floor";
	r->peer_argv = argv_true;
	r->pv = xcalloc((size_t)n, sizeof(double));
	if (!strcmp(t->name, "ipc"))
		r->target = "p50 <= 2 ms";
	bench_note("%s: Exec(/bin/true)+Wait x %ld in one run, %ld ms between a Wait and the next "
		   "Exec, alternating with the floor (posix_spawn+waitpid of /bin/true here)",
		   t->name, n, gap_ms);
	char *id = create_run(t, CYCLE_POLICY);
	for (long i = -3; i < n; i++) { /* 3 unmeasured first */
		double sbx, bare;

		bench_check_interrupt();
		if (gap_ms)
			sbx_sleep_ms(gap_ms);
		if (i % 2 == 0) {
			sbx = exec_once(t, id);
			bare = floor_once();
		} else {
			bare = floor_once();
			sbx = exec_once(t, id);
		}
		if (i < 0)
			continue;
		r->v[r->n++] = sbx;
		r->pv[r->pn++] = bare;
		if ((i + 1) % 50 == 0 || i + 1 == n)
			bench_note("%s: %s %ld/%ld", t->name, key, i + 1, n);
	}
	teardown(t, id);
	free(id);
}

/* The warm pool: CreateRun warm next to cold, and the warm cycle next to
 * bwrap, alternating; before each sample the pool is full again (its
 * refill is not under a measure). */
static void bench_warm(const struct transport *t, long n, char **bwrap_argv)
{
	struct result *create =
	    new_result(t->name, "create_warm", "CreateRun warm", U_MS, 90, (size_t)n);
	struct result *cycle =
	    new_result(t->name, "cycle_warm", "warm CreateRun..Teardown", U_MS, 90, (size_t)n);
	Sbx__V1__Launch launch;

	create->peer = "cold";
	create->pv = xcalloc((size_t)n, sizeof(double));
	create->target = "p50 <= 3 ms";
	cycle->peer = "bwrap";
	cycle->peer_argv = bwrap_argv;
	cycle->pv = xcalloc((size_t)n, sizeof(double));
	cycle->target = "<= 0.5";
	bench_note("%s: warm pool: CreateRun warm vs cold and the warm cycle vs bwrap x %ld",
		   t->name, n);
	bench_pool_wait_ready(t->c, 1, START_TIMEOUT_MS);
	for (long i = -2; i < n; i++) { /* 2 unmeasured first */
		double warm = 0, warm_create = 0, cold_create = 0, bw = 0;

		bench_check_interrupt();
		for (int k = 0; k < 3; k++) {
			int which = (int)((k + (i & 1 ? 1 : 0)) % 3); /* rotate the order */

			bench_pool_wait_ready(t->c, 1, START_TIMEOUT_MS);
			if (which == 0) {
				warm = bench_cycle_timed(t->c, BENCH_POOL_POLICY, &warm_create,
							 &launch);
				if (launch != SBX__V1__LAUNCH__LAUNCH_WARM)
					bench_die("%s: a CreateRun of the pool's policy was cold",
						  t->name);
			} else if (which == 1) {
				bench_cycle_timed(t->c, BENCH_COLD_POLICY, &cold_create, &launch);
				if (launch != SBX__V1__LAUNCH__LAUNCH_COLD)
					bench_die("%s: a CreateRun of another policy was warm",
						  t->name);
			} else {
				bw = bwrap_once(bwrap_argv);
			}
		}
		if (i < 0)
			continue;
		create->v[create->n++] = warm_create;
		create->pv[create->pn++] = cold_create;
		cycle->v[cycle->n++] = warm;
		cycle->pv[cycle->pn++] = bw;
		if ((i + 1) % 10 == 0 || i + 1 == n)
			bench_note("%s: warm %ld/%ld", t->name, i + 1, n);
	}
}

/* The targets of the exec and the cycle rows, said plainly. */
static void print_verdicts(void)
{
	for (size_t i = 0; i < n_results; i++) {
		const struct result *r = &results[i];
		double p50 = bench_pct(r->v, r->n, 50);

		if (!strcmp(r->key, "create_warm"))
			printf("%s warm CreateRun p50 %.2f ms (cold %.2f ms): target <= 3 ms %s\n",
			       r->transport, p50, bench_pct(r->pv, r->pn, 50),
			       p50 <= 3 ? "met" : "MISSED");
		else if (!strcmp(r->key, "cycle_warm"))
			printf("%s warm cycle / bwrap %.2f: target <= 0.5 %s\n", r->transport,
			       ratio(r), ratio(r) <= 0.5 ? "met" : "MISSED");
		else if (!strcmp(r->key, "cycle"))
			printf("%s cold cycle / bwrap %.2f: target <= 1.0 %s\n", r->transport,
			       ratio(r), ratio(r) <= 1.0 ? "met" : "MISSED");
		else if ((!strcmp(r->key, "exec") || !strcmp(r->key, "exec_apart")) && r->target)
			printf("%s %s p50 %.2f ms (floor %.2f ms, %.2fx): target <= 2 ms %s\n",
			       r->transport, r->label, p50, bench_pct(r->pv, r->pn, 50), ratio(r),
			       p50 <= 2 ? "met" : "MISSED");
	}
}

/* sbx_fetch_fd into /dev/null: SBX_FETCH_WINDOW chunks in flight, the sha256
 * of what arrived checked against the server's (by the library) and against
 * the listing's. The sink is /dev/null because the raw nng peer drops what
 * it receives: the row compares what the two carry and what sbx does to
 * every byte (the envelope, the verification), not the page cache of a
 * file only one of them writes (sbx_fetch_file's row has that, next to
 * cp). */
static void fetch_fd(const struct transport *t, const char *run_id, const char *expect)
{
	_cleanup_close_ int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	struct sbx_fetch_info info;
	struct sbx_rpc_status st;

	if (fd < 0)
		bench_die_errno("open /dev/null");
	if (sbx_fetch_fd(t->c, run_id, FETCH_NAME, fd, NULL, NULL, &info, &st) < 0)
		call_failed(t, "sbx_fetch_fd (FetchArtifact)", &st);
	if (info.size != FETCH_BYTES || strcmp(info.sha256, expect))
		bench_die("%s: FetchArtifact %s: got %llu bytes with sha256 %s; ListArtifacts said "
			  "%s",
			  t->name, FETCH_NAME, (unsigned long long)info.size, info.sha256, expect);
}

static void fetch_file(const struct transport *t, const char *run_id, const char *dest,
		       const char *expect)
{
	struct sbx_rpc_status st;

	if (sbx_fetch_file(t->c, run_id, FETCH_NAME, dest, expect, NULL, NULL, &st) < 0)
		call_failed(t, "sbx_fetch_file (FetchArtifact)", &st);
}

static void unlink_quiet(const char *path)
{
	if (unlink(path) < 0 && errno != ENOENT)
		bench_die_errno("unlink %s", path);
}

/* cp's command line, kept for --json. */
static char cp_src[PATH_MAX], cp_dst[PATH_MAX];
static char *cp_argv[] = {"cp", cp_src, cp_dst, NULL};

/* A same-host transfer's result: FETCH_BYTES each of k samples, against cp
 * of the same file (issue 21 target 4: at least 0.5 of cp). */
static struct result *new_same_host_result(const char *transport, const char *key,
					   const char *label, long k)
{
	struct result *r = new_result(transport, key, label, U_RATE, 90, (size_t)k);

	r->bytes = (double)FETCH_BYTES;
	r->peer = "cp";
	r->peer_argv = cp_argv;
	r->pv = xcalloc((size_t)k, sizeof(double));
	r->target = ">= 0.5";
	r->min_ratio = 0.5;
	return r;
}

/* The raw nng peer serves a memfd holding the same 256 MiB. */
static int memfd_of(const char *src)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
	int fd = memfd_create("sbx-bench-raw-nng", MFD_CLOEXEC);
	off_t off = 0;

	if (in < 0 || fd < 0)
		bench_die_errno("memfd of %s", src);
	while (off < (off_t)FETCH_BYTES) {
		ssize_t k = sendfile(fd, in, &off, FETCH_BYTES - (size_t)off);
		if (k <= 0)
			bench_die_errno("copy %s into a memfd", src);
	}
	return fd;
}

/* A run whose /out holds FETCH_BYTES of random bytes as FETCH_NAME, listed
 * (so hashed, and /out settled: the digest is final): its id, and the
 * listing's sha256 in expect. */
static char *big_artifact_run(const struct transport *t, char expect[65])
{
	struct sbx_rpc_status st;

	expect[0] = '\0';
	bench_note("%s: a run writing 256 MiB to /out/%s", t->name, FETCH_NAME);
	char *id = create_run(t, FETCH_POLICY);
	char *script[] = {"/bin/sh", "-c", FETCH_SCRIPT, NULL};
	exec_wait(t, id, script, 3);
	Sbx__V1__ListArtifactsResponse *l = sbx_list_artifacts(t->c, id, &st);
	if (!l)
		call_failed(t, "ListArtifacts", &st);
	for (size_t i = 0; i < l->n_artifacts; i++)
		if (!strcmp(l->artifacts[i]->path, FETCH_NAME) &&
		    l->artifacts[i]->size == FETCH_BYTES)
			snprintf(expect, 65, "%s", l->artifacts[i]->sha256);
	sbx__v1__list_artifacts_response__free_unpacked(l, NULL);
	if (!*expect)
		bench_die("%s: ListArtifacts does not list %s with %llu bytes", t->name, FETCH_NAME,
			  FETCH_BYTES);
	return id;
}

static void bench_fetch(const struct server *s, const struct transport *t, long k)
{
	char d_file[PATH_MAX], raw_url[PATH_MAX + 16];
	const char *src = cp_src, *d_cp = cp_dst;
	char expect[65] = "";
	bool tls = !strcmp(t->name, "tls");

	bench_scratch_path(cp_src, sizeof(cp_src), "local-256m");
	bench_scratch_path(d_file, sizeof(d_file), "fetched-file");
	bench_scratch_path(cp_dst, sizeof(cp_dst), "copied");

	char *id = big_artifact_run(t, expect);

	/* Warm-up: one fetch; the first one also makes the local file cp
	 * copies (the same kind of bytes, in the page cache as the artifact
	 * is in the run's tmpfs). */
	struct stat sb;
	if (stat(src, &sb) < 0) {
		bench_note("%s: fetching once (warm-up) into %s, the file cp copies", t->name, src);
		fetch_file(t, id, src, expect);
	} else {
		bench_note("%s: fetching once (warm-up)", t->name);
		fetch_fd(t, id, expect);
	}
	run_ok("cp", cp_argv, NULL);
	unlink_quiet(d_cp);

	/* The raw nng peer: same transport, chunk size and window. */
	struct bench_nng_tls peer_tls = {0};
	if (tls) {
		static char scert[PATH_MAX], skey[PATH_MAX];
		bench_scratch_path(scert, sizeof(scert), "server.pem");
		bench_scratch_path(skey, sizeof(skey), "server.key");
		peer_tls = (struct bench_nng_tls){.server_cert = scert,
						  .server_key = skey,
						  .client_cert = s->cert,
						  .client_key = s->key,
						  .ca = s->ca,
						  .server_name = "localhost"};
		snprintf(raw_url, sizeof(raw_url), "tls+tcp://127.0.0.1:%d", bench_free_port());
	} else {
		snprintf(raw_url, sizeof(raw_url), "ipc://%s/raw-nng.sock", bench_scratch_dir());
	}
	_cleanup_close_ int mfd = memfd_of(src);
	struct bench_nng_peer *peer = bench_nng_peer_start(
	    raw_url, tls ? &peer_tls : NULL, mfd, FETCH_BYTES, SBX_CHUNK_BYTES, SBX_FETCH_WINDOW);
	bench_nng_peer_fetch(raw_url, tls ? &peer_tls : NULL, FETCH_BYTES, SBX_CHUNK_BYTES,
			     SBX_FETCH_WINDOW); /* warm-up */

	struct result *r =
	    new_result(t->name, "fetch", "FetchArtifact 256 MiB", U_RATE, 90, (size_t)k);
	struct result *f =
	    new_result(t->name, "fetch_file", "sbx_fetch_file 256 MiB", U_RATE, 90, (size_t)k);
	r->bytes = f->bytes = (double)FETCH_BYTES;
	r->peer = "raw nng";
	r->peer_argv = NULL;
	r->pv = xcalloc((size_t)k, sizeof(double));
	r->target = ">= 0.8";
	r->min_ratio = 0.8;
	f->peer = "cp";
	f->peer_argv = cp_argv;
	f->pv = xcalloc((size_t)k, sizeof(double));
	f->target = "none (the same-host export's peer)";

	bench_note("%s: FetchArtifact (sbx_fetch_fd into /dev/null, %d chunks in flight), raw "
		   "nng (%d in flight), sbx_fetch_file and cp, %ld each, rotating",
		   t->name, SBX_FETCH_WINDOW, SBX_FETCH_WINDOW, k);
	for (long i = 0; i < k; i++) {
		for (long j = 0; j < 4; j++) {
			bench_check_interrupt();
			double t0 = bench_now_ms(), t1;
			switch ((i + j) % 4) {
			case 0:
				fetch_fd(t, id, expect);
				t1 = bench_now_ms();
				r->v[r->n++] = (t1 - t0) / 1e3;
				break;
			case 1:
				r->pv[r->pn++] = bench_nng_peer_fetch(
				    raw_url, tls ? &peer_tls : NULL, FETCH_BYTES, SBX_CHUNK_BYTES,
				    SBX_FETCH_WINDOW);
				break;
			case 2:
				fetch_file(t, id, d_file, expect);
				t1 = bench_now_ms();
				f->v[f->n++] = (t1 - t0) / 1e3;
				unlink_quiet(d_file);
				break;
			default:
				f->pv[f->pn++] = run_ok("cp", cp_argv, NULL) / 1e3;
				unlink_quiet(d_cp);
				break;
			}
			/* What one sample left dirty is written back now, not
			 * during the next one's time. */
			sync();
		}
		bench_note("%s: fetch %ld/%ld: FetchArtifact %.0f MiB/s, raw nng %.0f MiB/s, "
			   "sbx_fetch_file %.0f MiB/s, cp %.0f MiB/s",
			   t->name, i + 1, k, rate(r->bytes, r->v[r->n - 1]),
			   rate(r->bytes, r->pv[r->pn - 1]), rate(f->bytes, f->v[f->n - 1]),
			   rate(f->bytes, f->pv[f->pn - 1]));
	}
	bench_nng_peer_stop(peer);
	teardown(t, id);
	free(id);
}

/* ------------------------------------------------------------ export */

/* sbx_export_at of the 256 MiB artifact into a directory of ours (its
 * bytes sent one way over a unix socket of our uid and written here; the
 * sha256 sbxd vouches for when /out stayed settled, else the copy hashed),
 * its sha256 checked against the listing's. */
static void export_once(const struct transport *t, const char *run_id, int dirfd,
			const char *expect)
{
	const char *paths[] = {FETCH_NAME};
	struct sbx_export_info info;
	struct sbx_rpc_status st;

	if (sbx_export_at(t->c, run_id, 1, paths, NULL, dirfd, 0777, NULL, false, &info, &st) < 0)
		call_failed(t, "sbx_export_at (ExportArtifacts)", &st);
	if (info.size != FETCH_BYTES || strcmp(info.sha256, expect))
		bench_die("%s: ExportArtifacts %s: got %llu bytes with sha256 %s; ListArtifacts "
			  "said %s",
			  t->name, FETCH_NAME, (unsigned long long)info.size, info.sha256, expect);
}

/* The same-host export next to `cp` of a local file of the same size,
 * rotating, K each; ipc only (ExportArtifacts refuses other transports). */
static void bench_export(const struct transport *t, long k)
{
	char dir[PATH_MAX], exported[PATH_MAX + 8];
	struct sbx_rpc_status st;
	char expect[65] = "";

	bench_scratch_path(cp_src, sizeof(cp_src), "local-256m");
	bench_scratch_path(cp_dst, sizeof(cp_dst), "copied");
	bench_scratch_path(dir, sizeof(dir), "exported");
	snprintf(exported, sizeof(exported), "%s/" FETCH_NAME, dir);
	char *id = big_artifact_run(t, expect);
	_cleanup_close_ int dirfd = sbx_dest_open(dir, &st.err);
	if (dirfd < 0)
		bench_die("%s: %s", dir, st.err.msg);

	/* Warm-up: one export, which also makes the local file cp copies
	 * when the fetch measure did not (the same bytes, in the page cache
	 * as the artifact is in the run's tmpfs). */
	export_once(t, id, dirfd, expect);
	struct stat sb;
	if (stat(cp_src, &sb) < 0 && rename(exported, cp_src) < 0)
		bench_die_errno("rename %s to %s", exported, cp_src);
	unlink_quiet(exported);
	run_ok("cp", cp_argv, NULL);
	unlink_quiet(cp_dst);

	struct result *r = new_same_host_result(t->name, "export", "ExportArtifacts 256 MiB", k);
	bench_note("%s: ExportArtifacts (sbx_export_at: bytes over a one-way unix socket, "
		   "written by the client) and cp, %ld each, rotating",
		   t->name, k);
	for (long i = 0; i < k; i++) {
		for (long j = 0; j < 2; j++) {
			bench_check_interrupt();
			double t0 = bench_now_ms();
			if ((i + j) % 2 == 0) {
				export_once(t, id, dirfd, expect);
				r->v[r->n++] = (bench_now_ms() - t0) / 1e3;
				unlink_quiet(exported);
			} else {
				r->pv[r->pn++] = run_ok("cp", cp_argv, NULL) / 1e3;
				unlink_quiet(cp_dst);
			}
			sync(); /* what one sample left dirty is not the next one's */
		}
		bench_note("%s: export %ld/%ld: ExportArtifacts %.0f MiB/s, cp %.0f MiB/s", t->name,
			   i + 1, k, rate(r->bytes, r->v[r->n - 1]),
			   rate(r->bytes, r->pv[r->pn - 1]));
	}
	teardown(t, id);
	free(id);
}

/* ------------------------------------------------------------ import */

/* FETCH_BYTES of random bytes in src, unless it is there (the fetch and
 * export measures leave it). */
static void make_local_file(const char *src)
{
	struct stat sb;

	if (stat(src, &sb) == 0 && (uint64_t)sb.st_size == FETCH_BYTES)
		return;
	_cleanup_close_ int fd = open(src, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	_cleanup_free_ uint8_t *buf = xcalloc(1, 1 << 20);
	if (fd < 0)
		bench_die_errno("%s", src);
	for (uint64_t off = 0; off < FETCH_BYTES; off += 1 << 20) {
		for (size_t i = 0; i < (1 << 20); i += 256)
			if (getrandom(buf + i, 256, 0) != 256)
				bench_die_errno("getrandom");
		if (write(fd, buf, 1 << 20) != 1 << 20)
			bench_die_errno("write %s", src);
	}
}

/* sbx_import_files of src into a new run's /data (untimed: the run's
 * creation and teardown): seconds. With `declared` (the digest, hex) the
 * run's CreateRun manifest declares the file, as a parent service's does
 * and `sbxctl put` expects, and the client sends it with sha256 "" (sbxd
 * checks the bytes against the manifest as they arrive); without, the
 * path is new, so the client is refused that, hashes the file and calls
 * again, as `sbxctl put` of an undeclared path does. */
static double import_once(const struct transport *t, const char *src, const char *declared)
{
	const char *locals[] = {src}, *remotes[] = {FETCH_NAME};
	Sbx__V1__InputFile in = SBX__V1__INPUT_FILE__INIT, *inputs[] = {&in};
	struct sbx_rpc_status st;

	in.path = (char *)FETCH_NAME;
	in.size = FETCH_BYTES;
	in.sha256 = (char *)declared;
	char *id = create_run_with(t, FETCH_POLICY, inputs, declared ? 1 : 0);
	double t0 = bench_now_ms();

	if (sbx_import_files(t->c, id, 1, locals, remotes, NULL, &st) < 0)
		call_failed(t, "sbx_import_files (ImportInputs)", &st);
	double secs = (bench_now_ms() - t0) / 1e3;
	teardown(t, id);
	free(id);
	return secs;
}

/* The same-host upload next to `cp` of the same local file, rotating, K
 * each; ipc only (ImportInputs refuses other transports). Two results,
 * each next to the same cp samples: the upload of an input the run's
 * manifest declared (issue 21's row: what PutInput is for), and of a new
 * path, whose digest the client must declare, so it hashes the file
 * before sending it. */
static void bench_import(const struct transport *t, long k)
{
	char hex[65];
	struct sbx_err err;

	bench_scratch_path(cp_src, sizeof(cp_src), "local-256m");
	bench_scratch_path(cp_dst, sizeof(cp_dst), "copied");
	make_local_file(cp_src);
	if (sbx_file_sha256(cp_src, hex, NULL, &err) < 0)
		bench_die("%s", err.msg);
	(void)import_once(t, cp_src, hex); /* warm-up: the file in the page cache */
	run_ok("cp", cp_argv, NULL);
	unlink_quiet(cp_dst);

	struct result *d =
	    new_same_host_result(t->name, "put_input", "ImportInputs 256 MiB (declared input)", k);
	struct result *n = new_same_host_result(
	    t->name, "put_input_new", "ImportInputs 256 MiB (new path, client hashes)", k);
	bench_note("%s: ImportInputs (sbx_import_files, 256 KiB messages, sbxd writes and hashes) "
		   "of an input the manifest declared and of a new path (the client hashes "
		   "first), and cp, %ld each, rotating",
		   t->name, k);
	for (long i = 0; i < k; i++) {
		for (long j = 0; j < 3; j++) {
			bench_check_interrupt();
			switch ((i + j) % 3) {
			case 0:
				d->v[d->n++] = import_once(t, cp_src, hex);
				break;
			case 1:
				n->v[n->n++] = import_once(t, cp_src, NULL);
				break;
			default:
				d->pv[d->pn++] = run_ok("cp", cp_argv, NULL) / 1e3;
				n->pv[n->pn++] = d->pv[d->pn - 1];
				unlink_quiet(cp_dst);
				break;
			}
			sync(); /* what one sample left dirty is not the next one's */
		}
		bench_note("%s: import %ld/%ld: declared input %.0f MiB/s, new path %.0f MiB/s, cp "
			   "%.0f MiB/s",
			   t->name, i + 1, k, rate(d->bytes, d->v[d->n - 1]),
			   rate(n->bytes, n->v[n->n - 1]), rate(d->bytes, d->pv[d->pn - 1]));
	}
}

/* ------------------------------------------------------------ main */

enum only {
	ONLY_HEALTH = 1,
	ONLY_CYCLE = 2,
	ONLY_EXEC = 4,
	ONLY_FETCH = 8,
	ONLY_WARM = 16,
	ONLY_EXPORT = 32,
	ONLY_IMPORT = 64,
	ONLY_ALL = 127
};

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: " PROG " [--sbxd PATH] [--helper PATH] [--bwrap PATH] [-n|--quick]\n"
	    "                      [--only health|cycle|exec|fetch|warm|export|import] [--json]\n"
	    "                      [--health N] [--cycles N] [--execs N] [--fetches K]\n"
	    "                      [--warm N] [--exec-gap-ms N] [--exec-apart-ms N]\n"
	    "                      [--sbxd-config JSON]\n"
	    "\n"
	    "Starts a private sbxd (ipc and tls+tcp://127.0.0.1 listeners, certificates\n"
	    "made with openssl, a bearer token) and measures, over ipc then over TLS:\n"
	    "  health  Health round trip, N sequential calls (2000 ipc, 500 tls): p50, p99\n"
	    "  cycle   CreateRun + Exec(/bin/true) + Wait + Teardown, N cycles (50),\n"
	    "          alternating with a one-shot `bwrap --unshare-all ... /bin/true`:\n"
	    "          p50, p90 and the ratio cycle/bwrap (target <= 1.0)\n"
	    "  exec    Exec(/bin/true) + Wait in one live run, N (100), alternating with\n"
	    "          the floor: this process starting /bin/true by posix_spawn and\n"
	    "          waiting for it (no sandbox), which no exec path beats: p50, p90,\n"
	    "          the ratio exec/floor; target (ipc) p50 <= 2 ms. Two series:\n"
	    "          back to back (--exec-gap-ms) and each Exec 20 ms after the last\n"
	    "          Wait (--exec-apart-ms), as a caller that reads an answer first\n"
	    "  fetch   a 256 MiB artifact fetched K times (3) by sbx_fetch_fd into\n"
	    "          /dev/null (1 MiB FetchArtifact chunks, 4 in flight, sha256\n"
	    "          checked) next to a raw nng REQ/REP peer carrying the same bytes\n"
	    "          at the same chunk size and window and dropping them (target\n"
	    "          >= 0.8), and by sbx_fetch_file (a new file, fsynced) next to\n"
	    "          `cp` of a local 256 MiB file, rotating\n"
	    "  warm    the warm pool (config pool, one member of its own policy), N (50):\n"
	    "          CreateRun warm next to cold (target p50 <= 3 ms) and the warm\n"
	    "          cycle next to the one-shot bwrap (target <= 0.5), rotating the\n"
	    "          three, the pool full again before each\n"
	    "  export  (ipc only) the 256 MiB artifact exported K times (--fetches) by\n"
	    "          sbx_export_at (ExportArtifacts: the bytes one way over a unix\n"
	    "          socket of our uid, sha256 vouched for by sbxd or of the copy)\n"
	    "          next to `cp` of a local 256 MiB file, rotating (target >= 0.5)\n"
	    "  import  (ipc only) a local 256 MiB file uploaded K times (--fetches) into\n"
	    "          new runs' /data by sbx_import_files (ImportInputs: the bytes over\n"
	    "          a unix socket, sbxd writes them and hashes beside): as an input\n"
	    "          the run's manifest declared (target >= 0.5) and as a new path\n"
	    "          (the client hashes it first), next to `cp` of it, rotating\n"
	    "Tables go to stdout, progress to stderr.\n"
	    "\n"
	    "  --sbxd PATH     sbxd (default <dir of this binary>/../server/sbxd)\n"
	    "  --helper PATH   sbx-helper (default <dir of this binary>/../helper/sbx-helper)\n"
	    "  --bwrap PATH    bubblewrap (default /usr/bin/bwrap)\n"
	    "  -n, --quick     small counts for a smoke run (health 200/50, cycles 5,\n"
	    "                  execs 10, fetches 1, warm 5)\n"
	    "  --only WHAT     one measure: health, cycle, exec, fetch, warm, export or\n"
	    "                  import\n"
	    "  --health N, --cycles N, --execs N, --fetches K, --warm N   override the counts\n"
	    "  --exec-gap-ms N pause N ms (0..10000) between one exec's Wait and the next\n"
	    "                  Exec of the first series (default 0: back to back)\n"
	    "  --exec-apart-ms N  the same for the second series (default 20; 0: no\n"
	    "                  second series); pid 1 makes the next exec's init ahead once\n"
	    "                  quiet for 10 ms after Ready or an exec's start or end\n"
	    "                  (SBX_PREPARE_QUIET_MS, helper/init.h)\n"
	    "  --sbxd-config JSON  a JSON object merged into sbxd's config (e.g. a small\n"
	    "                  host's capacity: '{\"capacity\": {\"memory_overcommit_percent\":\n"
	    "                  300}}')\n"
	    "  --json          machine-readable output, with every sample\n"
	    "  -h, --help      this text\n"
	    "\n"
	    "Must run as an unprivileged user (sbxd and sbx-helper refuse root), e.g.\n"
	    "  runuser -u sbx-test -- " PROG "\n"
	    "Exit status: 0 all calls succeeded; 1 a call or a peer failed (named on\n"
	    "stderr) or bad set-up; 2 usage.\n");
}

int main(int argc, char **argv)
{
	enum {
		O_SBXD = 256,
		O_HELPER,
		O_BWRAP,
		O_ONLY,
		O_JSON,
		O_HEALTH,
		O_CYCLES,
		O_EXECS,
		O_FETCHES,
		O_WARM,
		O_EXEC_GAP,
		O_EXEC_APART,
		O_SBXD_CONFIG
	};
	static const struct option opts[] = {
	    {"sbxd", required_argument, NULL, O_SBXD},
	    {"helper", required_argument, NULL, O_HELPER},
	    {"bwrap", required_argument, NULL, O_BWRAP},
	    {"quick", no_argument, NULL, 'n'},
	    {"only", required_argument, NULL, O_ONLY},
	    {"json", no_argument, NULL, O_JSON},
	    {"health", required_argument, NULL, O_HEALTH},
	    {"cycles", required_argument, NULL, O_CYCLES},
	    {"execs", required_argument, NULL, O_EXECS},
	    {"fetches", required_argument, NULL, O_FETCHES},
	    {"warm", required_argument, NULL, O_WARM},
	    {"exec-gap-ms", required_argument, NULL, O_EXEC_GAP},
	    {"exec-apart-ms", required_argument, NULL, O_EXEC_APART},
	    {"sbxd-config", required_argument, NULL, O_SBXD_CONFIG},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	char sbxd_buf[PATH_MAX], helper_buf[PATH_MAX];
	const char *sbxd = NULL, *helper = NULL, *bwrap = "/usr/bin/bwrap";
	struct counts n = {2000, 500, 50, 100, 3, 50, 0, 20};
	long health_n = 0, cycles_n = 0, execs_n = 0, fetches_n = 0, warm_n = 0, gap_ms = 0,
	     apart_ms = 20;
	unsigned only = ONLY_ALL;
	bool json = false, quick = false;
	int c;

	sbx_malloc_reuse_chunks();
	bench_prog = PROG;
	atexit(cleanup); /* bench_die's exit stops sbxd and removes the scratch directory */

	while ((c = getopt_long(argc, argv, "hn", opts, NULL)) != -1) {
		switch (c) {
		case O_SBXD:
			sbxd = optarg;
			break;
		case O_HELPER:
			helper = optarg;
			break;
		case O_BWRAP:
			bwrap = optarg;
			break;
		case 'n':
			quick = true;
			break;
		case O_ONLY:
			if (!strcmp(optarg, "health"))
				only = ONLY_HEALTH;
			else if (!strcmp(optarg, "cycle"))
				only = ONLY_CYCLE;
			else if (!strcmp(optarg, "exec"))
				only = ONLY_EXEC;
			else if (!strcmp(optarg, "fetch"))
				only = ONLY_FETCH;
			else if (!strcmp(optarg, "warm"))
				only = ONLY_WARM;
			else if (!strcmp(optarg, "export"))
				only = ONLY_EXPORT;
			else if (!strcmp(optarg, "import"))
				only = ONLY_IMPORT;
			else {
				bench_note(
				    "--only: expected health, cycle, exec, fetch, warm, export or "
				    "import, got '%s'",
				    optarg);
				return 2;
			}
			break;
		case O_JSON:
			json = true;
			break;
		case O_HEALTH:
			health_n = bench_parse_count("--health", optarg, 1, 10000000);
			break;
		case O_CYCLES:
			cycles_n = bench_parse_count("--cycles", optarg, 1, 100000);
			break;
		case O_EXECS:
			execs_n = bench_parse_count("--execs", optarg, 1, 1000000);
			break;
		case O_FETCHES:
			fetches_n = bench_parse_count("--fetches", optarg, 1, 1000);
			break;
		case O_WARM:
			warm_n = bench_parse_count("--warm", optarg, 1, 100000);
			break;
		case O_EXEC_GAP:
			gap_ms = bench_parse_count("--exec-gap-ms", optarg, 0, 10000);
			break;
		case O_EXEC_APART:
			apart_ms = bench_parse_count("--exec-apart-ms", optarg, 0, 10000);
			break;
		case O_SBXD_CONFIG:
			json_decref(config_extra);
			config_extra = bench_config_object("--sbxd-config", optarg);
			break;
		default:
			return bench_option_other(c, usage);
		}
	}
	if (bench_no_operands(argc, argv, optind, usage))
		return 2;
	bench_refuse_root(argv[0], "sbxd and sbx-helper refuse root");
	if (quick)
		n = (struct counts){200, 50, 5, 10, 1, 5, 0, 20};
	if (health_n)
		n.health_ipc = n.health_tls = health_n;
	if (cycles_n)
		n.cycles = cycles_n;
	if (execs_n)
		n.execs = execs_n;
	if (fetches_n)
		n.fetches = fetches_n;
	if (warm_n)
		n.warm = warm_n;
	n.exec_gap_ms = gap_ms;
	n.exec_apart_ms = apart_ms;

	bench_find_sbxd_helper(&sbxd, sbxd_buf, &helper, helper_buf, sizeof(helper_buf));
	if (only & (ONLY_CYCLE | ONLY_WARM))
		bench_check_exec("bwrap", bwrap, " (pass --bwrap PATH)");
	bench_make_absolute(&helper, helper_buf, sizeof(helper_buf));

	bench_on_signals(bench_on_signal);
	signal(SIGPIPE, SIG_IGN);

	bench_scratch_make();
	struct server srv = {0};
	start_sbxd(&srv, sbxd, helper);

	static const char *const cmd_true[] = {"/bin/true", NULL};
	char *bwrap_argv[BENCH_MAX_ARGS];
	bwrap_baseline_argv(bwrap_argv, bwrap, cmd_true);
	if (only & (ONLY_CYCLE | ONLY_WARM))
		bench_note("bwrap: %s", bench_argv_str(bwrap_argv));

	struct transport tps[] = {
	    {"ipc", open_client(&srv, false, CALL_TIMEOUT_MS, 0)},
	    {"tls", open_client(&srv, true, CALL_TIMEOUT_MS, 0)},
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(tps); i++) {
		struct sbx_rpc_status st;
		Sbx__V1__HealthResponse *h = sbx_health(tps[i].c, &st);

		if (!h)
			call_failed(&tps[i], "Health", &st);
		bench_note("%s: %s, identity %s", tps[i].name, sbx_client_endpoint(tps[i].c),
			   h->identity);
		sbx__v1__health_response__free_unpacked(h, NULL);
	}

	/* The results keep their labels: one for both transports. */
	static char apart_label[48];
	snprintf(apart_label, sizeof(apart_label), "Exec+Wait, %ld ms apart", n.exec_apart_ms);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(tps); i++) {
		const struct transport *t = &tps[i];

		if (only & ONLY_HEALTH)
			bench_health(t, i == 0 ? n.health_ipc : n.health_tls);
		if (only & ONLY_CYCLE)
			bench_cycle(t, n.cycles, bwrap_argv);
		if (only & ONLY_EXEC)
			bench_exec(t, n.execs, n.exec_gap_ms, "exec",
				   n.exec_gap_ms ? "Exec+Wait (live run)"
						 : "Exec+Wait, back to back");
		if ((only & ONLY_EXEC) && n.exec_apart_ms)
			bench_exec(t, n.execs, n.exec_apart_ms, "exec_apart", apart_label);
		if (only & ONLY_FETCH)
			bench_fetch(&srv, t, n.fetches);
		if (only & ONLY_WARM)
			bench_warm(t, n.warm, bwrap_argv);
		if ((only & ONLY_EXPORT) && i == 0)
			bench_export(t, n.fetches);
		if ((only & ONLY_IMPORT) && i == 0)
			bench_import(t, n.fetches);
	}
	for (size_t i = 0; i < SBX_ARRAY_SIZE(tps); i++)
		sbx_client_close(tps[i].c);

	struct bench_host h;
	bench_probe_host(&h);
	bench_note("stopping sbxd");
	cleanup();

	char counts[256] = "", gap_said[48] = "back to back";
	if (n.exec_gap_ms)
		snprintf(gap_said, sizeof(gap_said), "%ld ms apart", n.exec_gap_ms);
	size_t len = 0;
	if (only & ONLY_HEALTH)
		len += (size_t)snprintf(counts + len, sizeof(counts) - len,
					"%shealth %ld (ipc) / %ld (tls) calls", len ? ", " : "",
					n.health_ipc, n.health_tls);
	if (only & ONLY_CYCLE)
		len += (size_t)snprintf(counts + len, sizeof(counts) - len, "%s%ld cycles",
					len ? ", " : "", n.cycles);
	if (only & ONLY_EXEC)
		len += (size_t)snprintf(counts + len, sizeof(counts) - len, "%s%ld execs %s",
					len ? ", " : "", n.execs, gap_said);
	if ((only & ONLY_EXEC) && n.exec_apart_ms)
		len += (size_t)snprintf(counts + len, sizeof(counts) - len, " and %ld %ld ms apart",
					n.execs, n.exec_apart_ms);
	if (only & ONLY_FETCH)
		len += (size_t)snprintf(counts + len, sizeof(counts) - len,
					"%s%ld fetches of %llu bytes", len ? ", " : "", n.fetches,
					FETCH_BYTES);
	if (only & ONLY_WARM)
		len += (size_t)snprintf(counts + len, sizeof(counts) - len, "%s%ld warm rounds",
					len ? ", " : "", n.warm);
	if (only & ONLY_EXPORT)
		len += (size_t)snprintf(counts + len, sizeof(counts) - len, "%s%ld exports (ipc)",
					len ? ", " : "", n.fetches);
	if (only & ONLY_IMPORT)
		snprintf(counts + len, sizeof(counts) - len, "%s%ld imports (ipc)", len ? ", " : "",
			 n.fetches);
	if (json)
		print_json(&h, json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
					 "health_ipc", (json_int_t)n.health_ipc, "health_tls",
					 (json_int_t)n.health_tls, "cycles", (json_int_t)n.cycles,
					 "execs", (json_int_t)n.execs, "exec_gap_ms",
					 (json_int_t)n.exec_gap_ms, "exec_apart_ms",
					 (json_int_t)n.exec_apart_ms, "fetches",
					 (json_int_t)n.fetches, "fetch_bytes",
					 (json_int_t)FETCH_BYTES, "warm", (json_int_t)n.warm));
	else {
		print_table(&h, counts);
		print_verdicts();
	}
	return 0;
}
