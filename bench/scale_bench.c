/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-bench-scale: sbxd with many idle runs (issue 21, item 5), in one run:
 *
 *   N idle runs at once on one private sbxd (its config raised for them);
 *   if the host cannot hold N, how many it reached and the error that
 *   stopped it (it names the limit);
 *   memory per run: PSS and RSS (/proc/PID/smaps_rollup) of sbxd and of
 *   every helper process of those runs (sbxd's descendants), divided by
 *   the runs;
 *   Health with the N runs idle against Health of the same sbxd with none;
 *   sustained creates per second (CreateRun + Teardown, `cores` in flight
 *   for S seconds) alternating with bwrap one-shots per second on the same
 *   cores, and with a warm pool when --pool-config gives one.
 *
 * Everything it made is torn down (every run, then sbxd) on every way
 * out. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_sbxd.h"
#include "bench_scratch.h"
#include "bench_util.h"
#include "bwrap_baseline.h"
#include "util.h"

#define PROG		 "sbx-bench-scale"
#define START_TIMEOUT_MS 30000
#define STOP_TIMEOUT_MS	 120000
#define CALL_TIMEOUT_MS	 120000
#define MAX_THREADS	 64
#define MAX_ROUNDS	 20
#define RUNS_MAX	 4000
#define KIB		 1024.0
#define MIB		 (1024.0 * 1024.0)
/* Idle runs: nothing in them but pid 1 (and the helper's supervisor and
 * /out reader); their limits are what each commits against the capacity
 * (a quarter CPU, 66 MiB with /out and /tmp), not what it uses. */
#define IDLE_POLICY                                                                                \
	"{\"image\":\"host\",\"limits\":{\"cpu\":0.25,\"script_seconds\":30,\"memory_mb\":64,"     \
	"\"out_mb\":1,\"tmp_mb\":1}}"
/* The creates' runs: sbx-bench-sbxd's cycle policy. */
#define CREATE_POLICY "{\"image\":\"host\",\"limits\":{\"script_seconds\":30,\"memory_mb\":256}}"

/* Targets of issue 21, item 5. */
#define TARGET_MEM_PER_RUN_MIB 2.0
#define TARGET_HEALTH_P99_US   5000.0
#define TARGET_CREATES_RATIO   1.0

static char *const child_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};

struct daemon {
	const char *name; /* "sbxd", "sbxd (pool)" */
	pid_t pid;
	char endpoint[PATH_MAX + 8];
	char log[PATH_MAX + 16];
};

static struct daemon plain = {.name = "sbxd", .pid = -1};
static struct daemon pooled = {.name = "sbxd (pool)", .pid = -1};

/* The live runs of `plain`, torn down at the end whatever happened. */
static char **run_ids; /* run_slots of them, NULL where none */
static long run_slots;
static atomic_long n_runs;
static bool cleaning;

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p)
		bench_die("out of memory");
	return p;
}

/* ------------------------------------------------------------ sbxd */

static void teardown_all(void);

static void cleanup(void)
{
	if (cleaning)
		return;
	cleaning = true;
	teardown_all();
	bench_stop_child(&plain.pid, plain.name, STOP_TIMEOUT_MS);
	bench_stop_child(&pooled.pid, pooled.name, STOP_TIMEOUT_MS);
	bench_scratch_remove();
}

/* A private sbxd in <scratch>/<dir> whose caps fit runs_max runs of one
 * identity; extra (a JSON object, may be NULL) is merged into its config
 * last (the pool's keys). */
static void start_sbxd(struct daemon *d, const char *dir_name, const char *sbxd, const char *helper,
		       long runs_max, const char *extra)
{
	char dir[PATH_MAX], config[PATH_MAX + 16], state[PATH_MAX + 16], audit[PATH_MAX + 16];

	bench_scratch_path(dir, sizeof(dir), dir_name);
	if (mkdir(dir, 0700) < 0)
		bench_die_errno("mkdir %s", dir);
	snprintf(config, sizeof(config), "%s/sbxd.json", dir);
	snprintf(state, sizeof(state), "%s/state", dir);
	snprintf(audit, sizeof(audit), "%s/audit.log", dir);
	snprintf(d->log, sizeof(d->log), "%s/sbxd.stderr", dir);
	if ((size_t)snprintf(d->endpoint, sizeof(d->endpoint), "ipc://%s/sbxd.sock", dir) >=
	    sizeof(d->endpoint))
		bench_die("socket path too long");
	/* runs_max and the identity's cap are the runs asked for; capacity
	 * overcommitted so that admission by what runs commit is not what
	 * is measured; drain_seconds 0: SIGTERM tears
	 * down at once. */
	json_t *cfg = json_pack("{s:[s], s:s, s:s, s:s, s:I, s:I, s:{s:i, s:i}, s:i}", "listen",
				d->endpoint, "state_dir", state, "helper", helper, "log", audit,
				"runs_max", (json_int_t)runs_max, "runs_max_per_identity",
				(json_int_t)runs_max, "capacity", "cpu_overcommit_percent", 10000,
				"memory_overcommit_percent", 1000, "drain_seconds", 0);
	if (!cfg)
		bench_die("building the config failed");
	if (extra) {
		json_t *x = json_loads(extra, 0, NULL); /* checked by main */
		json_object_update(cfg, x);
		json_decref(x);
	}
	if (json_dump_file(cfg, config, JSON_INDENT(2)) < 0)
		bench_die_errno("write %s", config);
	json_decref(cfg);
	char *argv[] = {(char *)sbxd, "--config", config, NULL};
	bench_note("starting %s --config %s", sbxd, config);
	d->pid = bench_spawn(argv, child_env, d->log);
	bench_sbxd_wait(d->endpoint, &d->pid, d->log, START_TIMEOUT_MS);
}

/* ------------------------------------------------------------ calls */

struct call_err {
	pthread_mutex_t mu;
	atomic_int failed;
	char why[768];
};

static void call_fail(struct call_err *e, const char *call, const struct sbx_rpc_status *st)
{
	pthread_mutex_lock(&e->mu);
	if (!e->why[0])
		snprintf(e->why, sizeof(e->why), "%s: %s: %.600s", call, sbx_code_name(st->code),
			 st->err.msg);
	pthread_mutex_unlock(&e->mu);
	atomic_store(&e->failed, 1);
}

static char *create_run(sbx_client *c, const char *policy, struct call_err *e)
{
	Sbx__V1__CreateRunRequest req = SBX__V1__CREATE_RUN_REQUEST__INIT;
	struct sbx_rpc_status st;

	req.policy_json = (char *)policy;
	Sbx__V1__CreateRunResponse *r = sbx_create_run(c, &req, &st);
	if (!r) {
		call_fail(e, "CreateRun", &st);
		return NULL;
	}
	char *id = strdup(r->run_id);
	sbx__v1__create_run_response__free_unpacked(r, NULL);
	if (!id)
		bench_die("out of memory");
	return id;
}

static bool teardown(sbx_client *c, const char *id, struct call_err *e)
{
	struct sbx_rpc_status st;
	Sbx__V1__TeardownResponse *r = sbx_teardown(c, id, &st);

	if (!r) {
		call_fail(e, "Teardown", &st);
		return false;
	}
	sbx__v1__teardown_response__free_unpacked(r, NULL);
	return true;
}

/* ------------------------------------------------------------ idle runs */

struct filler {
	struct call_err err;
	atomic_long next; /* the next slot to fill */
	long want;
};

static void *fill_thread(void *arg)
{
	struct filler *f = arg;
	sbx_client *c = bench_client_open(plain.endpoint, CALL_TIMEOUT_MS, 0);

	for (;;) {
		if (atomic_load(&f->err.failed) || bench_interrupted)
			break;
		long i = atomic_fetch_add(&f->next, 1);
		if (i >= f->want)
			break;
		char *id = create_run(c, IDLE_POLICY, &f->err);
		if (!id)
			break;
		/* Slots fill in any order; n_runs counts the filled prefix's
		 * size only at the end (see fill). */
		run_ids[i] = id;
		long done = atomic_fetch_add(&n_runs, 1) + 1;
		if (done % 50 == 0)
			bench_note("%ld runs idle", done);
	}
	sbx_client_close(c);
	return NULL;
}

/* Creates up to want runs with threads in flight; returns how many live,
 * and the first refusal in why. */
static long fill(long want, int threads, char *why, size_t why_size)
{
	struct filler f = {.want = want};
	pthread_t t[MAX_THREADS];

	pthread_mutex_init(&f.err.mu, NULL);
	for (int i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, fill_thread, &f) != 0)
			bench_die("pthread_create failed");
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&f.err.mu);
	/* Compact: a slot handed out whose CreateRun failed stays NULL. */
	long n = 0;
	for (long i = 0; i < want; i++)
		if (run_ids[i])
			run_ids[n++] = run_ids[i];
	for (long i = n; i < want; i++)
		run_ids[i] = NULL;
	atomic_store(&n_runs, n);
	snprintf(why, why_size, "%s", f.err.why);
	bench_check_interrupt();
	return n;
}

struct drainer {
	struct call_err err;
	atomic_long next;
};

static void *drain_thread(void *arg)
{
	struct drainer *d = arg;
	sbx_client *c = bench_client_open(plain.endpoint, CALL_TIMEOUT_MS, 1);

	for (;;) {
		long i = atomic_fetch_add(&d->next, 1);
		if (i >= run_slots)
			break;
		if (run_ids[i] && teardown(c, run_ids[i], &d->err)) {
			free(run_ids[i]);
			run_ids[i] = NULL;
		}
	}
	sbx_client_close(c);
	return NULL;
}

/* Tears down every live run of `plain` (also on the way out after an
 * error: then sbxd's SIGTERM ends what is left). */
static void teardown_all(void)
{
	struct drainer d = {0};
	pthread_t t[4];

	if (!run_ids || atomic_load(&n_runs) == 0 || plain.pid <= 0)
		return;
	bench_note("tearing down %ld runs", atomic_load(&n_runs));
	pthread_mutex_init(&d.err.mu, NULL);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(t); i++)
		if (pthread_create(&t[i], NULL, drain_thread, &d) != 0)
			bench_die("pthread_create failed");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(t); i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&d.err.mu);
	long left = 0;
	for (long i = 0; i < run_slots; i++)
		left += run_ids[i] != NULL;
	atomic_store(&n_runs, 0);
	if (left)
		bench_note("%ld Teardowns failed (%s); stopping sbxd ends them", left, d.err.why);
}

/* ------------------------------------------------------------ memory */

struct mem {
	double sbxd_pss, sbxd_rss;	 /* KiB */
	double helpers_pss, helpers_rss; /* KiB, every descendant of sbxd */
	long helpers, unreadable;
	/* Not readable by our uid (a prepared exec init is the sandbox user,
	 * not dumpable, before its claim): its cgroup leaf's memory charge
	 * counted instead, which is all of the leaf's memory, kernel's
	 * included: more than its PSS, never less of what it adds. */
	long charged;
};

/* The memory charged to pid's cgroup (the v1 memory hierarchy's, else
 * v2's) in KiB, and its path in leaf; false if unreadable. */
static bool cgroup_charge(pid_t pid, double *kib, char *leaf, size_t size)
{
	char path[PATH_MAX + 64], line[PATH_MAX + 64], v2[PATH_MAX] = "";
	bool v1 = false;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	if (!f)
		return false;
	while (!v1 && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		char *ctrl = strchr(line, ':'), *cg = ctrl ? strchr(ctrl + 1, ':') : NULL;
		if (!cg)
			continue;
		*cg++ = '\0';
		ctrl++;
		if (!*ctrl)
			snprintf(v2, sizeof(v2), "%s", cg);
		for (char *t = strtok(ctrl, ","); t && !v1; t = strtok(NULL, ","))
			if (!strcmp(t, "memory")) {
				snprintf(leaf, size, "memory%s", cg);
				v1 = true;
			}
	}
	if (!v1 && !v2[0])
		return false;
	if (!v1)
		snprintf(leaf, size, "%s", v2);
	snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/%s", leaf,
		 v1 ? "memory.usage_in_bytes" : "memory.current");
	_cleanup_fclose_ FILE *c = fopen(path, "re");
	unsigned long long bytes;
	if (!c || fscanf(c, "%llu", &bytes) != 1)
		return false;
	*kib = (double)bytes / 1024;
	return true;
}

/* Pss and Rss of pid in KiB from smaps_rollup; false if unreadable. */
static bool smaps_rollup(pid_t pid, double *pss, double *rss)
{
	char path[64], line[256];

	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	if (!f)
		return false;
	bool got_pss = false, got_rss = false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long kb;
		if (sscanf(line, "Pss: %llu kB", &kb) == 1) {
			*pss = (double)kb;
			got_pss = true;
		} else if (sscanf(line, "Rss: %llu kB", &kb) == 1) {
			*rss = (double)kb;
			got_rss = true;
		}
	}
	return got_pss && got_rss;
}

/* The parent of pid from /proc/PID/stat, or -1. */
static pid_t parent_of(pid_t pid)
{
	char path[64], buf[1024];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	const char *p = strrchr(buf, ')'); /* the name may hold anything */
	int ppid;
	char state;
	if (!p || sscanf(p + 1, " %c %d", &state, &ppid) != 2)
		return -1;
	return (pid_t)ppid;
}

/* sbxd's own figures and those of every process below it. */
static struct mem measure_memory(pid_t sbxd)
{
	struct mem m = {0};
	size_t cap = 4096, n = 0;
	pid_t *pid = xcalloc(cap, sizeof(pid_t)), *ppid = xcalloc(cap, sizeof(pid_t));
	_cleanup_closedir_ DIR *d = opendir("/proc");
	struct dirent *e;

	if (!d)
		bench_die_errno("opendir /proc");
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		if (n == cap) {
			cap *= 2;
			pid = realloc(pid, cap * sizeof(pid_t));
			ppid = realloc(ppid, cap * sizeof(pid_t));
			if (!pid || !ppid)
				bench_die("out of memory");
		}
		pid[n] = (pid_t)atoi(e->d_name);
		ppid[n] = parent_of(pid[n]);
		n++;
	}
	bool *below = xcalloc(n, sizeof(bool));
	char *leaves = xcalloc(n + 1, PATH_MAX);
	/* The tree is a few levels deep: mark children of marked processes
	 * until nothing changes. */
	for (bool changed = true; changed;) {
		changed = false;
		for (size_t i = 0; i < n; i++) {
			if (below[i])
				continue;
			bool hit = ppid[i] == sbxd;
			for (size_t k = 0; !hit && k < n; k++)
				hit = below[k] && pid[k] == ppid[i];
			if (hit)
				below[i] = changed = true;
		}
	}
	if (!smaps_rollup(sbxd, &m.sbxd_pss, &m.sbxd_rss))
		bench_die_errno("read /proc/%d/smaps_rollup (sbxd)", (int)sbxd);
	for (size_t i = 0; i < n; i++) {
		double pss, rss;
		if (!below[i])
			continue;
		m.helpers++;
		if (smaps_rollup(pid[i], &pss, &rss)) {
			m.helpers_pss += pss;
			m.helpers_rss += rss;
			continue;
		}
		/* Once per leaf: a leaf may hold more than one of them. */
		char *leaf = leaves + (size_t)m.charged * PATH_MAX;
		double kib;
		if (!cgroup_charge(pid[i], &kib, leaf, PATH_MAX)) {
			m.unreadable++;
			continue;
		}
		bool seen = false;
		for (long k = 0; k < m.charged && !seen; k++)
			seen = !strcmp(leaves + (size_t)k * PATH_MAX, leaf);
		if (seen)
			continue;
		m.charged++;
		m.helpers_pss += kib;
		m.helpers_rss += kib;
	}
	free(leaves);
	free(below);
	free(pid);
	free(ppid);
	return m;
}

/* ------------------------------------------------------------ Health */

static void health_samples(const char *endpoint, double *us, long n)
{
	sbx_client *c = bench_client_open(endpoint, CALL_TIMEOUT_MS, 0);
	struct sbx_rpc_status st;

	for (long i = -20; i < n; i++) { /* 20 unmeasured first */
		bench_check_interrupt();
		double t0 = bench_now_ms();
		Sbx__V1__HealthResponse *h = sbx_health(c, &st);
		double t1 = bench_now_ms();
		if (!h)
			bench_die("Health: %s: %s", sbx_code_name(st.code), st.err.msg);
		sbx__v1__health_response__free_unpacked(h, NULL);
		if (i >= 0)
			us[i] = (t1 - t0) * 1e3;
	}
	sbx_client_close(c);
}

static uint32_t runs_active(const char *endpoint)
{
	sbx_client *c = bench_client_open(endpoint, CALL_TIMEOUT_MS, 0);
	struct sbx_rpc_status st;
	Sbx__V1__HealthResponse *h = sbx_health(c, &st);

	if (!h)
		bench_die("Health: %s: %s", sbx_code_name(st.code), st.err.msg);
	uint32_t n = h->runs_active;
	sbx__v1__health_response__free_unpacked(h, NULL);
	sbx_client_close(c);
	return n;
}

/* ------------------------------------------------------------ rates */

struct round {
	const char *endpoint; /* NULL: bwrap one-shots */
	char **bwrap_argv;
	double deadline_ms;
	atomic_long done;
	struct call_err err;
};

static void *round_thread(void *arg)
{
	struct round *r = arg;
	sbx_client *c = r->endpoint ? bench_client_open(r->endpoint, CALL_TIMEOUT_MS, 0) : NULL;
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (devnull < 0)
		bench_die_errno("open /dev/null");
	while (bench_now_ms() < r->deadline_ms && !atomic_load(&r->err.failed) &&
	       !bench_interrupted) {
		if (c) {
			char *id = create_run(c, CREATE_POLICY, &r->err);
			if (!id)
				break;
			bool ok = teardown(c, id, &r->err);
			free(id);
			if (!ok)
				break;
		} else {
			int status;
			bench_run(r->bwrap_argv, child_env, NULL, devnull, devnull, devnull,
				  &bench_interrupted, &status);
			if (status != 0) {
				struct sbx_rpc_status st = {0};
				snprintf(st.err.msg, sizeof(st.err.msg), "%s",
					 bench_status_str(status));
				call_fail(&r->err, "bwrap", &st);
				break;
			}
		}
		atomic_fetch_add(&r->done, 1);
	}
	close(devnull);
	if (c)
		sbx_client_close(c);
	return NULL;
}

/* threads doing CreateRun+Teardown on endpoint (or bwrap one-shots) for
 * seconds; returns completions per second. */
static double one_round(const char *what, const char *endpoint, char **bwrap_argv, long seconds,
			int threads)
{
	struct round r = {.endpoint = endpoint, .bwrap_argv = bwrap_argv};
	pthread_t t[MAX_THREADS];

	pthread_mutex_init(&r.err.mu, NULL);
	double t0 = bench_now_ms();
	r.deadline_ms = t0 + (double)seconds * 1000.0;
	for (int i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, round_thread, &r) != 0)
			bench_die("pthread_create failed");
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	double ms = bench_now_ms() - t0;
	pthread_mutex_destroy(&r.err.mu);
	bench_check_interrupt();
	if (atomic_load(&r.err.failed))
		bench_die("%s: %s", what, r.err.why);
	double rate = (double)atomic_load(&r.done) * 1000.0 / ms;
	bench_note("%s: %.1f/s (%ld in %.1f s, %d in flight)", what, rate, atomic_load(&r.done),
		   ms / 1e3, threads);
	return rate;
}

/* ------------------------------------------------------------ output */

struct figures {
	long want, reached;
	char stopped[768]; /* the refusal that stopped the filling, or "" */
	struct mem idle, full;
	double *health0, *health; /* us */
	long health_n;
	double creates[MAX_ROUNDS], bwrap[MAX_ROUNDS], pool[MAX_ROUNDS];
	long rounds, seconds;
	int threads;
	bool pool_on;
	double fill_s, drain_s;
};

static double per_run_mib(double kib, long runs)
{
	return runs > 0 ? kib / KIB / (double)runs : 0;
}

static const char *met(bool ok)
{
	return ok ? "met" : "MISSED";
}

static json_t *json_samples(const double *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_real(v[i]));
	return a;
}

/* One result of the JSON output, in the shape every row of sbx-bench reads:
 * {measure, unit, p50[, p90, p99], [peer:{name, p50...}], ratio, target, met}. */
static json_t *json_result(const char *measure, const char *unit, const double *v, size_t n,
			   const char *peer, const double *pv, size_t pn, double ratio,
			   const char *target, bool ok)
{
	json_t *o =
	    json_pack("{s:s, s:s, s:I, s:f, s:f, s:f, s:o}", "measure", measure, "unit", unit, "n",
		      (json_int_t)n, "p50", bench_pct(v, n, 50), "p90", bench_pct(v, n, 90), "p99",
		      bench_pct(v, n, 99), "samples", json_samples(v, n));
	if (peer)
		json_object_set_new(o, "peer",
				    json_pack("{s:s, s:I, s:f, s:f, s:f, s:o}", "name", peer, "n",
					      (json_int_t)pn, "p50", bench_pct(pv, pn, 50), "p90",
					      bench_pct(pv, pn, 90), "p99", bench_pct(pv, pn, 99),
					      "samples", json_samples(pv, pn)));
	if (ratio > 0)
		json_object_set_new(o, "ratio", json_real(ratio));
	if (target) {
		json_object_set_new(o, "target", json_string(target));
		json_object_set_new(o, "met", json_boolean(ok));
	}
	return o;
}

static void print_json(const struct figures *f, const struct bench_host *h)
{
	size_t hn = (size_t)f->health_n, rn = (size_t)f->rounds;
	double sbxd_pss = per_run_mib(f->full.sbxd_pss, f->reached),
	       helper_pss = per_run_mib(f->full.helpers_pss, f->reached);
	double hp99 = bench_pct(f->health, hn, 99), hp99_0 = bench_pct(f->health0, hn, 99);
	double c50 = bench_pct(f->creates, rn, 50), b50 = bench_pct(f->bwrap, rn, 50);
	json_t *results = json_array();

	/* The row names every run asked for, and says what stopped it
	 * ("note": sbx-bench prints it under its row). */
	char want[32];
	snprintf(want, sizeof(want), "all %ld", f->want);
	double reached = (double)f->reached;
	json_t *runs = json_result("idle_runs", "runs", &reached, 1, NULL, NULL, 0, 0, want,
				   f->reached >= f->want);
	json_object_set_new(runs, "want", json_integer(f->want));
	json_object_set_new(runs, "stopped_by", json_string(f->stopped));
	if (f->stopped[0]) {
		char note[sizeof(f->stopped) + 64];
		snprintf(note, sizeof(note), "%ld of %ld, stopped by %s", f->reached, f->want,
			 f->stopped);
		json_object_set_new(runs, "note", json_string(note));
	}
	json_array_append_new(results, runs);
	struct {
		const char *measure;
		double v;
		bool target;
	} mem[] = {
	    {"mem_sbxd_pss_per_run", sbxd_pss, true},
	    {"mem_helpers_pss_per_run", helper_pss, true},
	    {"mem_sbxd_rss_per_run", per_run_mib(f->full.sbxd_rss, f->reached), false},
	    {"mem_helpers_rss_per_run", per_run_mib(f->full.helpers_rss, f->reached), false},
	    {"mem_sbxd_growth_per_run",
	     per_run_mib(f->full.sbxd_pss - f->idle.sbxd_pss, f->reached), false},
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(mem); i++)
		json_array_append_new(results,
				      json_result(mem[i].measure, "MiB", &mem[i].v, 1, NULL, NULL,
						  0, 0, mem[i].target ? "<= 2 MiB" : NULL,
						  mem[i].v <= TARGET_MEM_PER_RUN_MIB));
	json_array_append_new(results,
			      json_result("health_idle_runs", "us", f->health, hn, "health_no_runs",
					  f->health0, hn, hp99_0 > 0 ? hp99 / hp99_0 : 0,
					  "p99 < 5 ms", hp99 < TARGET_HEALTH_P99_US));
	json_array_append_new(results, json_result("creates_per_s", "1/s", f->creates, rn,
						   "bwrap_one_shots_per_s", f->bwrap, rn,
						   b50 > 0 ? c50 / b50 : 0, ">= 1.0",
						   b50 > 0 && c50 / b50 >= TARGET_CREATES_RATIO));
	if (f->pool_on) {
		double p50 = bench_pct(f->pool, rn, 50);
		json_array_append_new(results, json_result("creates_per_s_pool", "1/s", f->pool, rn,
							   "bwrap_one_shots_per_s", f->bwrap, rn,
							   b50 > 0 ? p50 / b50 : 0, ">= 1.0",
							   b50 > 0 && p50 / b50 >= 1.0));
	} else {
		json_array_append_new(results,
				      json_pack("{s:s, s:s}", "measure", "creates_per_s_pool",
						"absent", "pool: not configured"));
	}
	json_t *out = json_pack(
	    "{s:{s:s, s:s, s:b, s:I, s:[f,f,f]}, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, "
	    "s:f}, s:o}",
	    "host", "kernel", h->kernel, "cgroup", h->cgroup, "cgroup_hybrid", h->hybrid, "cpus",
	    (json_int_t)h->cpus, "loadavg", h->load[0], h->load[1], h->load[2], "counts", "runs",
	    (json_int_t)f->want, "reached", (json_int_t)f->reached, "helper_processes",
	    (json_int_t)f->full.helpers, "unreadable", (json_int_t)f->full.unreadable, "health",
	    (json_int_t)f->health_n, "rounds", (json_int_t)f->rounds, "seconds",
	    (json_int_t)f->seconds, "fill_seconds", f->fill_s, "teardown_seconds", f->drain_s,
	    "results", results);
	json_object_set_new(json_object_get(out, "counts"), "in_flight", json_integer(f->threads));
	json_object_set_new(json_object_get(out, "counts"), "charged",
			    json_integer(f->full.charged));
	if (json_dumpf(out, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(6)) < 0)
		bench_die("writing JSON failed");
	putchar('\n');
	json_decref(out);
}

static void print_table(const struct figures *f, const struct bench_host *h)
{
	size_t hn = (size_t)f->health_n, rn = (size_t)f->rounds;
	double sp = per_run_mib(f->full.sbxd_pss, f->reached),
	       hp = per_run_mib(f->full.helpers_pss, f->reached);
	double h50 = bench_pct(f->health, hn, 50), h90 = bench_pct(f->health, hn, 90),
	       h99 = bench_pct(f->health, hn, 99);
	double z50 = bench_pct(f->health0, hn, 50), z99 = bench_pct(f->health0, hn, 99);
	double c50 = bench_pct(f->creates, rn, 50), b50 = bench_pct(f->bwrap, rn, 50);

	printf("%-40s %-24s %-28s %-7s %-12s %s\n", "measure", "sbx", "peer", "ratio", "target",
	       "met?");
	char a[64], b[64];
	snprintf(a, sizeof(a), "%ld of %ld", f->reached, f->want);
	snprintf(b, sizeof(b), "all %ld", f->want);
	printf("%-40s %-24s %-28s %-7s %-12s %s\n", "idle runs at once", a, "", "", b,
	       met(f->reached >= f->want));
	if (f->stopped[0])
		printf("  stopped by: %s\n", f->stopped);
	snprintf(a, sizeof(a), "%.2f MiB", sp);
	printf("%-40s %-24s %-28s %-7s %-12s %s\n", "memory per run, sbxd PSS", a, "", "",
	       "<= 2 MiB", met(sp <= TARGET_MEM_PER_RUN_MIB));
	snprintf(a, sizeof(a), "%.2f MiB", hp);
	printf("%-40s %-24s %-28s %-7s %-12s %s\n", "memory per run, helpers PSS", a, "", "",
	       "<= 2 MiB", met(hp <= TARGET_MEM_PER_RUN_MIB));
	snprintf(a, sizeof(a), "%.2f MiB", per_run_mib(f->full.sbxd_rss, f->reached));
	snprintf(b, sizeof(b), "%.2f MiB", per_run_mib(f->full.helpers_rss, f->reached));
	printf("%-40s %-24s %-28s\n", "memory per run, sbxd / helpers RSS", a, b);
	printf("  sbxd PSS %.1f MiB with no run, %.1f MiB with %ld (%.2f MiB more per run); "
	       "%ld helper processes%s%s\n",
	       f->idle.sbxd_pss / KIB, f->full.sbxd_pss / KIB, f->reached,
	       per_run_mib(f->full.sbxd_pss - f->idle.sbxd_pss, f->reached), f->full.helpers,
	       f->full.charged ? " (prepared exec inits, not readable by this uid, at their leaf's "
				 "memory charge)"
			       : "",
	       f->full.unreadable ? " (some unreadable: figures are a lower bound)" : "");
	snprintf(a, sizeof(a), "%.0f/%.0f/%.0f us", h50, h90, h99);
	snprintf(b, sizeof(b), "no runs %.0f/%.0f us", z50, z99);
	char r[16];
	snprintf(r, sizeof(r), "%.2f", z99 > 0 ? h99 / z99 : 0);
	printf("%-40s %-24s %-28s %-7s %-12s %s\n", "Health p50/p90/p99, runs idle", a, b, r,
	       "p99 < 5 ms", met(h99 < TARGET_HEALTH_P99_US));
	snprintf(a, sizeof(a), "%.1f/s", c50);
	snprintf(b, sizeof(b), "bwrap %.1f/s", b50);
	snprintf(r, sizeof(r), "%.2f", b50 > 0 ? c50 / b50 : 0);
	printf("%-40s %-24s %-28s %-7s %-12s %s\n", "creates/s (CreateRun+Teardown)", a, b, r,
	       ">= 1.0", met(b50 > 0 && c50 / b50 >= TARGET_CREATES_RATIO));
	if (f->pool_on) {
		double p50 = bench_pct(f->pool, rn, 50);
		snprintf(a, sizeof(a), "%.1f/s", p50);
		snprintf(r, sizeof(r), "%.2f", b50 > 0 ? p50 / b50 : 0);
		printf("%-40s %-24s %-28s %-7s %-12s %s\n", "creates/s, warm pool", a, b, r,
		       ">= 1.0", met(b50 > 0 && p50 / b50 >= 1.0));
	} else {
		printf("%-40s %s\n", "creates/s, warm pool", "pool: not configured");
	}
	printf("counts: %ld runs asked, %ld Health calls each way, %ld rounds of %ld s each way "
	       "with %d in flight (the cores); filled in %.1f s, torn down in %.1f s\n",
	       f->want, f->health_n, f->rounds, f->seconds, f->threads, f->fill_s, f->drain_s);
	printf("host: %s, cgroup %s%s, %ld CPUs, load %.2f %.2f %.2f\n", h->kernel, h->cgroup,
	       h->hybrid ? " (hybrid)" : "", h->cpus, h->load[0], h->load[1], h->load[2]);
}

/* ------------------------------------------------------------ main */

/* Dies unless text (when given) is a JSON object, naming opt. */
/* An option's value when given (non-zero), else its --quick or full default. */
static long pick(long given, bool quick, long quick_default, long full_default)
{
	return given ? given : quick ? quick_default : full_default;
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: " PROG " [--sbxd PATH] [--helper PATH] [--bwrap PATH] [--runs N]\n"
	    "                       [--health N] [--seconds S] [--rounds R] [--in-flight N]\n"
	    "                       [--pool-config JSON] [--sbxd-config JSON] [--quick]\n"
	    "                       [--json]\n"
	    "\n"
	    "sbxd at scale (issue 21, item 5), its own private sbxd (runs_max and the\n"
	    "identity's cap raised to --runs, capacity overcommitted):\n"
	    "  - N idle runs at once (default 500); if the host cannot hold them, how many\n"
	    "    it reached and the refusal that stopped it (naming the limit);\n"
	    "  - memory per run: PSS and RSS (smaps_rollup) of sbxd and of every helper\n"
	    "    process below it, divided by the runs (target <= 2 MiB each);\n"
	    "  - Health p50/p90/p99 with the runs idle, against the same sbxd with none\n"
	    "    (target p99 < 5 ms);\n"
	    "  - creates per second (CreateRun + Teardown, --in-flight at once, default the\n"
	    "    number of CPUs) for S seconds, alternating with bwrap one-shots of\n"
	    "    /bin/true per second on the same cores; medians of R rounds;\n"
	    "  - the same with a warm pool: a second sbxd whose config gets --pool-config\n"
	    "    merged in (without it: \"pool: not configured\").\n"
	    "Every run is torn down and every sbxd stopped at the end, and on an error.\n"
	    "\n"
	    "  --sbxd PATH, --helper PATH   (default ../server/sbxd, ../helper/sbx-helper\n"
	    "                  next to this program)\n"
	    "  --bwrap PATH    bubblewrap (default /usr/bin/bwrap)\n"
	    "  --runs N        idle runs to hold (default 500; 1..%d)\n"
	    "  --health N      Health calls each way (default 2000)\n"
	    "  --seconds S     length of a creates/s round (default 10)\n"
	    "  --rounds R      rounds of each (default 3; at most %d)\n"
	    "  --in-flight N   creators at once (default the CPUs; at most %d)\n"
	    "  --pool-config JSON  a JSON object merged into the pool sbxd's config\n"
	    "  --sbxd-config JSON  a JSON object merged into the first sbxd's config, after\n"
	    "                  the keys above (e.g. {\"runs_max\": 100}: how many a config holds)\n"
	    "  --quick         small counts for a smoke run (20 runs, 200 Health calls,\n"
	    "                  1 round of 2 s)\n"
	    "  --json          machine-readable output, with every sample\n"
	    "  -h, --help      this text\n"
	    "\n"
	    "Must run as an unprivileged user with a subordinate id range of at least\n"
	    "--runs ids (sbxd's host_uids). Exit status: 0 measured (a missed target is\n"
	    "said, not an error; so are fewer runs than asked); 1 a call or bwrap failed\n"
	    "or bad set-up; 2 usage.\n",
	    RUNS_MAX, MAX_ROUNDS, MAX_THREADS);
}

int main(int argc, char **argv)
{
	enum {
		O_SBXD = 256,
		O_HELPER,
		O_BWRAP,
		O_RUNS,
		O_HEALTH,
		O_SECONDS,
		O_ROUNDS,
		O_FLIGHT,
		O_POOL,
		O_SBXD_CONFIG,
		O_QUICK,
		O_JSON
	};
	static const struct option opts[] = {
	    {"sbxd", required_argument, NULL, O_SBXD},
	    {"helper", required_argument, NULL, O_HELPER},
	    {"bwrap", required_argument, NULL, O_BWRAP},
	    {"runs", required_argument, NULL, O_RUNS},
	    {"health", required_argument, NULL, O_HEALTH},
	    {"seconds", required_argument, NULL, O_SECONDS},
	    {"rounds", required_argument, NULL, O_ROUNDS},
	    {"in-flight", required_argument, NULL, O_FLIGHT},
	    {"pool-config", required_argument, NULL, O_POOL},
	    {"sbxd-config", required_argument, NULL, O_SBXD_CONFIG},
	    {"quick", no_argument, NULL, O_QUICK},
	    {"json", no_argument, NULL, O_JSON},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	char sbxd_buf[PATH_MAX], helper_buf[PATH_MAX];
	const char *sbxd = NULL, *helper = NULL, *bwrap = "/usr/bin/bwrap", *pool_cfg = NULL,
		   *sbxd_cfg = NULL;
	long runs = 0, health = 0, seconds = 0, rounds = 0, flight = 0;
	bool quick = false, json = false;
	int c;

	bench_prog = PROG;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
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
		case O_RUNS:
			runs = bench_parse_count("--runs", optarg, 1, RUNS_MAX);
			break;
		case O_HEALTH:
			health = bench_parse_count("--health", optarg, 1, 1000000);
			break;
		case O_SECONDS:
			seconds = bench_parse_count("--seconds", optarg, 1, 3600);
			break;
		case O_ROUNDS:
			rounds = bench_parse_count("--rounds", optarg, 1, MAX_ROUNDS);
			break;
		case O_FLIGHT:
			flight = bench_parse_count("--in-flight", optarg, 1, MAX_THREADS);
			break;
		case O_POOL:
			pool_cfg = optarg;
			break;
		case O_SBXD_CONFIG:
			sbxd_cfg = optarg;
			break;
		case O_QUICK:
			quick = true;
			break;
		case O_JSON:
			json = true;
			break;
		default:
			return bench_option_other(c, usage);
		}
	}
	if (bench_no_operands(argc, argv, optind, usage))
		return 2;
	bench_refuse_root(argv[0], "sbxd and sbx-helper refuse root");

	struct bench_host host;
	bench_probe_host(&host);
	struct figures f = {
	    .want = pick(runs, quick, 20, 500),
	    .health_n = pick(health, quick, 200, 2000),
	    .seconds = pick(seconds, quick, 2, 10),
	    .rounds = pick(rounds, quick, 1, 3),
	    .threads = (int)(flight		       ? flight
			     : host.cpus > MAX_THREADS ? MAX_THREADS
			     : host.cpus > 0	       ? host.cpus
						       : 1),
	    .pool_on = pool_cfg != NULL,
	};

	json_decref(bench_config_object("--pool-config", pool_cfg));
	json_decref(bench_config_object("--sbxd-config", sbxd_cfg));
	bench_find_sbxd_helper(&sbxd, sbxd_buf, &helper, helper_buf, sizeof(helper_buf));
	bench_make_absolute(&sbxd, sbxd_buf, sizeof(sbxd_buf));
	bench_make_absolute(&helper, helper_buf, sizeof(helper_buf));
	bench_check_exec("bwrap", bwrap, " (pass --bwrap PATH)");
	static const char *const cmd_true[] = {"/bin/true", NULL};
	char *bwrap_argv[BENCH_MAX_ARGS];
	bwrap_baseline_argv(bwrap_argv, bwrap, cmd_true);

	bench_on_signals(bench_on_signal);
	bench_scratch_make();
	if (atexit(cleanup) != 0)
		bench_die("atexit failed");
	run_ids = xcalloc((size_t)f.want, sizeof(char *));
	run_slots = f.want;
	f.health0 = xcalloc((size_t)f.health_n, sizeof(double));
	f.health = xcalloc((size_t)f.health_n, sizeof(double));

	/* runs_max leaves room for the creators' runs beside the idle ones
	 * only in the rates' phase, which starts after the teardown. */
	start_sbxd(&plain, "sbxd", sbxd, helper, f.want + f.threads, sbxd_cfg);
	f.idle = measure_memory(plain.pid);
	bench_note("Health x %ld with no run", f.health_n);
	health_samples(plain.endpoint, f.health0, f.health_n);

	bench_note("%ld idle runs, %d CreateRuns in flight", f.want, f.threads);
	double t0 = bench_now_ms();
	f.reached = fill(f.want, f.threads, f.stopped, sizeof(f.stopped));
	f.fill_s = (bench_now_ms() - t0) / 1e3;
	if (f.reached < f.want)
		bench_note("reached %ld of %ld runs: %s", f.reached, f.want, f.stopped);
	uint32_t active = runs_active(plain.endpoint);
	if ((long)active != f.reached)
		bench_die("Health says %u runs active, %ld were created", active, f.reached);
	f.full = measure_memory(plain.pid);
	bench_note("Health x %ld with %ld runs idle", f.health_n, f.reached);
	health_samples(plain.endpoint, f.health, f.health_n);
	t0 = bench_now_ms();
	teardown_all();
	f.drain_s = (bench_now_ms() - t0) / 1e3;
	if ((active = runs_active(plain.endpoint)) != 0)
		bench_die("Health says %u runs active after every Teardown", active);

	/* The warm pool's hook (issue 21, item 2, its part's keys): a second
	 * sbxd with --pool-config merged into its config. Its pool fills in
	 * the background from here, during the warm-up rounds; a wait for
	 * Health to list its members ready would go here. */
	if (f.pool_on)
		start_sbxd(&pooled, "sbxd-pool", sbxd, helper, f.threads + 64L, pool_cfg);
	/* A warm-up round each, unmeasured: the helper's pages, bwrap's. */
	one_round("warm-up, sbxd", plain.endpoint, NULL, 1, f.threads);
	one_round("warm-up, bwrap", NULL, bwrap_argv, 1, f.threads);
	for (long i = 0; i < f.rounds; i++) {
		/* Rotate the order so that none always follows the same one. */
		for (int k = 0; k < 3; k++) {
			switch ((k + i) % 3) {
			case 0:
				f.creates[i] = one_round("sbxd creates", plain.endpoint, NULL,
							 f.seconds, f.threads);
				break;
			case 1:
				f.bwrap[i] = one_round("bwrap one-shots", NULL, bwrap_argv,
						       f.seconds, f.threads);
				break;
			default:
				/* The warm pool's row (issue 21, item 2): measured when
				 * --pool-config configures one. */
				if (f.pool_on)
					f.pool[i] = one_round("sbxd creates, pool", pooled.endpoint,
							      NULL, f.seconds, f.threads);
				break;
			}
		}
	}
	bench_probe_host(&host);
	bench_note("stopping sbxd");
	cleanup();
	if (json)
		print_json(&f, &host);
	else
		print_table(&f, &host);
	free(f.health0);
	free(f.health);
	if (fflush(stdout) != 0 || ferror(stdout))
		bench_die_errno("write output");
	return 0;
}
