/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-bench: every figure of issue 21 in one command. It runs the
 * benchmark programs beside it (each alternating sbx with its peer in its
 * own run, with --json), one built-in stage (one-shots against gVisor's
 * runsc, where installed), then prints one summary table:
 *
 *   measure | sbx p50 p90 p99 | peer p50 | ratio | target | met?
 *
 * A row is one entry of rows[] below: which stage's JSON it reads, the
 * path of sbx's figure and of the peer's in it, the unit and the target.
 * A part that adds a figure to a program's --json output plugs it in here
 * by one entry; a row whose figure is not there yet says so in its place
 * (`absent`, e.g. "pool: not configured") instead of failing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_scratch.h"
#include "bench_util.h"
#include "util.h"

#define PROG "sbx-bench"

/* ------------------------------------------------------------ stages */

enum { MAX_EXTRA = 16 };

struct stage {
	const char *name;		   /* for --only, and rows' .stage */
	const char *prog;		   /* next to this binary; NULL: built in */
	const char *args[MAX_EXTRA];	   /* besides --json */
	const char *quick_args[MAX_EXTRA]; /* with --quick instead */
	json_t *(*builtin)(bool quick);	   /* when prog is NULL */
	const char *about;		   /* --help */
	/* filled by running it */
	json_t *out;
	bool ran, failed;
	char why[256]; /* why it did not run, or how it failed */
};

static json_t *stage_runsc(bool quick);

/* The programs' options that sbx-bench passes on (when given). */
/* The scale stage's warm-pool row: a pool of sbx-bench-scale's creates'
 * own policy (its CREATE_POLICY), refilled as fast as the pool allows, so
 * that the row is measured unless --pool-config says otherwise. */
#define DEFAULT_POOL                                                                               \
	"{\"pool\":[{\"name\":\"bench\",\"size\":4,\"policy\":{\"image\":\"host\","                \
	"\"limits\":{\"script_seconds\":30,\"memory_mb\":256}}}],\"pool_builds_per_second\":100}"

static const char *opt_sbxd, *opt_helper, *opt_bwrap, *opt_pool = DEFAULT_POOL;
static const char *opt_runsc = "runsc";

static struct stage stages[] = {
    {.name = "helper",
     .prog = "sbx-bench-helper",
     .args = {"-n", "30"},
     .quick_args = {"-n", "3", "--warmup", "1"},
     .about = "one-shot `sbx-helper run` against bwrap (sbx-bench-helper)"},
    {.name = "runsc",
     .builtin = stage_runsc,
     .about = "one-shot `sbx-helper run` against `runsc --rootless --network=none do`"},
    {.name = "sbxd",
     .prog = "sbx-bench-sbxd",
     .quick_args = {"--quick"},
     .about = "sbxd over ipc and TLS: Health, cycles against bwrap, Exec against a bare "
	      "posix_spawn (the floor), fetches, the same-host export (sbx-bench-sbxd)"},
    {.name = "scale",
     .prog = "sbx-bench-scale",
     .quick_args = {"--quick"},
     .about = "500 idle runs: memory per run, Health p99, creates/s against bwrap "
	      "(sbx-bench-scale)"},
};

/* ------------------------------------------------------------ rows */

enum unit { U_MS, U_US, U_MIB, U_MIBS, U_PER_S, U_RUNS };
static const char *const unit_name[] = {"ms", "us", "MiB", "MiB/s", "/s", "runs"};

enum target {
	T_NONE,	    /* informational */
	T_RATIO_LE, /* ratio sbx/peer <= value */
	T_RATIO_GE, /* ratio sbx/peer >= value */
	T_P50_LE,   /* sbx's p50 <= value, in the row's unit */
	T_P99_LT,   /* sbx's p99 < value */
	T_JSON,	    /* the result's own "target" and "met" */
};

struct row {
	const char *label;
	const char *stage;
	/* A path into the stage's JSON: keys by dots, an array element by
	 * [key=value,key=value] (the first that matches). It names an object
	 * with p50 (or .field) and maybe p90 and p99, or a number. */
	const char *sbx;
	const char *peer;      /* the same for the peer; NULL: none */
	const char *peer_name; /* NULL: the peer object's "name" */
	const char *field;     /* the median's key (default "p50") */
	enum unit unit;
	enum target target;
	double value;
	const char *absent; /* said in place of figures the output does not have */
};

/* Every figure of issue 21. The items: 1 one-shot, 2 warm pool,
 * 3 Exec in a live run, 4 artifacts, 5 scale. */
static const struct row rows[] = {
    /* 1 */
    {"one-shot true, sbx-helper run", "helper", "workloads[name=true].sbx",
     "workloads[name=true].bwrap", "bwrap", NULL, U_MS, T_RATIO_LE, 1.0, NULL},
    {"one-shot python3, sbx-helper run", "helper", "workloads[name=python3].sbx",
     "workloads[name=python3].bwrap", "bwrap", NULL, U_MS, T_NONE, 0, NULL},
    {"one-shot true, vs gVisor", "runsc", "results[measure=oneshot_true]",
     "results[measure=oneshot_true].peer", NULL, NULL, U_MS, T_NONE, 0, NULL},
    /* 2: the whole cycle, cold and warm (the pool's rows are P2's) */
    {"CreateRun+Exec+Wait+Teardown, ipc", "sbxd", "results[transport=ipc,measure=cycle]",
     "results[transport=ipc,measure=cycle].peer", NULL, NULL, U_MS, T_RATIO_LE, 1.0, NULL},
    {"CreateRun+Exec+Wait+Teardown, tls", "sbxd", "results[transport=tls,measure=cycle]",
     "results[transport=tls,measure=cycle].peer", NULL, NULL, U_MS, T_RATIO_LE, 1.0, NULL},
    {"CreateRun, warm, ipc", "sbxd", "results[transport=ipc,measure=create_warm]", NULL, NULL, NULL,
     U_MS, T_P50_LE, 3.0, "pool: not configured"},
    {"the cycle, warm, ipc", "sbxd", "results[transport=ipc,measure=cycle_warm]",
     "results[transport=ipc,measure=cycle_warm].peer", NULL, NULL, U_MS, T_RATIO_LE, 0.5,
     "pool: not configured"},
    /* 3: next to the floor, a bare posix_spawn+waitpid of /bin/true */
    {"Exec(true)+Wait in a live run, ipc", "sbxd", "results[transport=ipc,measure=exec]",
     "results[transport=ipc,measure=exec].peer", NULL, NULL, U_MS, T_P50_LE, 2.0, NULL},
    {"Exec(true)+Wait in a live run, tls", "sbxd", "results[transport=tls,measure=exec]",
     "results[transport=tls,measure=exec].peer", NULL, NULL, U_MS, T_NONE, 0, NULL},
    /* ...each Exec 20 ms after the last Wait, as a caller that reads an
     * answer before its next call: the run's pid 1 has been quiet long
     * enough to make the next exec's init ahead (helper/init.h) */
    {"Exec(true)+Wait, 20 ms apart, ipc", "sbxd", "results[transport=ipc,measure=exec_apart]",
     "results[transport=ipc,measure=exec_apart].peer", NULL, NULL, U_MS, T_P50_LE, 2.0, NULL},
    {"Exec(true)+Wait, 20 ms apart, tls", "sbxd", "results[transport=tls,measure=exec_apart]",
     "results[transport=tls,measure=exec_apart].peer", NULL, NULL, U_MS, T_NONE, 0, NULL},
    {"Health, ipc", "sbxd", "results[transport=ipc,measure=health]", NULL, NULL, NULL, U_US, T_NONE,
     0, NULL},
    /* 4: against raw nng (P3's rows) and cp */
    {"FetchArtifact 256 MiB, ipc, vs raw nng", "sbxd", "results[transport=ipc,measure=fetch]",
     "results[transport=ipc,measure=fetch].peer", NULL, "mib_per_s_p50", U_MIBS, T_RATIO_GE, 0.8,
     NULL},
    {"FetchArtifact 256 MiB, tls, vs raw nng", "sbxd", "results[transport=tls,measure=fetch]",
     "results[transport=tls,measure=fetch].peer", NULL, "mib_per_s_p50", U_MIBS, T_RATIO_GE, 0.8,
     NULL},
    {"sbx_fetch_file 256 MiB, ipc, vs cp", "sbxd", "results[transport=ipc,measure=fetch_file]",
     "results[transport=ipc,measure=fetch_file].peer", NULL, "mib_per_s_p50", U_MIBS, T_NONE, 0,
     NULL},
    {"sbx_fetch_file 256 MiB, tls, vs cp", "sbxd", "results[transport=tls,measure=fetch_file]",
     "results[transport=tls,measure=fetch_file].peer", NULL, "mib_per_s_p50", U_MIBS, T_NONE, 0,
     NULL},
    {"export /out, same host, vs cp", "sbxd", "results[transport=ipc,measure=export]",
     "results[transport=ipc,measure=export].peer", NULL, "mib_per_s_p50", U_MIBS, T_RATIO_GE, 0.5,
     NULL},
    {"PutInput, same host, vs cp", "sbxd", "results[transport=ipc,measure=put_input]",
     "results[transport=ipc,measure=put_input].peer", NULL, "mib_per_s_p50", U_MIBS, T_RATIO_GE,
     0.5, NULL},
    {"PutInput, a new path, vs cp", "sbxd", "results[transport=ipc,measure=put_input_new]",
     "results[transport=ipc,measure=put_input_new].peer", NULL, "mib_per_s_p50", U_MIBS, T_NONE, 0,
     NULL},
    /* 5 */
    {"idle runs at once", "scale", "results[measure=idle_runs]", NULL, NULL, NULL, U_RUNS, T_JSON,
     0, NULL},
    {"memory per idle run, sbxd PSS", "scale", "results[measure=mem_sbxd_pss_per_run]", NULL, NULL,
     NULL, U_MIB, T_JSON, 0, NULL},
    {"memory per idle run, helpers PSS", "scale", "results[measure=mem_helpers_pss_per_run]", NULL,
     NULL, NULL, U_MIB, T_JSON, 0, NULL},
    {"Health with the runs idle, ipc", "scale", "results[measure=health_idle_runs]",
     "results[measure=health_idle_runs].peer", "no runs", NULL, U_US, T_P99_LT, 5000, NULL},
    {"creates/s (CreateRun+Teardown), cold", "scale", "results[measure=creates_per_s]",
     "results[measure=creates_per_s].peer", "bwrap", NULL, U_PER_S, T_RATIO_GE, 1.0, NULL},
    {"creates/s, warm pool", "scale", "results[measure=creates_per_s_pool]",
     "results[measure=creates_per_s_pool].peer", "bwrap", NULL, U_PER_S, T_RATIO_GE, 1.0,
     "pool: not configured"},
};

/* ------------------------------------------------------------ paths */

/* Does object o match "k=v,k=v" (string or integer values)? */
static bool matches(json_t *o, const char *sel, size_t len)
{
	char buf[256];

	if (!json_is_object(o) || len >= sizeof(buf))
		return false;
	memcpy(buf, sel, len);
	buf[len] = '\0';
	char *save = NULL;
	for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq)
			return false;
		*eq = '\0';
		json_t *v = json_object_get(o, kv);
		if (json_is_string(v)	 ? strcmp(json_string_value(v), eq + 1) != 0
		    : json_is_integer(v) ? json_integer_value(v) != strtoll(eq + 1, NULL, 10)
					 : true)
			return false;
	}
	return true;
}

/* The value at path in root, or NULL. */
static json_t *lookup(json_t *root, const char *path)
{
	json_t *cur = root;
	const char *p = path;

	while (cur && *p) {
		size_t n = strcspn(p, ".[");
		if (n) {
			char key[128];
			if (n >= sizeof(key))
				return NULL;
			memcpy(key, p, n);
			key[n] = '\0';
			cur = json_object_get(cur, key);
			p += n;
		}
		if (*p == '[') {
			const char *end = strchr(p, ']');
			json_t *hit = NULL;
			if (!end || !json_is_array(cur))
				return NULL;
			for (size_t i = 0; !hit && i < json_array_size(cur); i++)
				if (matches(json_array_get(cur, i), p + 1, (size_t)(end - p - 1)))
					hit = json_array_get(cur, i);
			cur = hit;
			p = end + 1;
		}
		if (*p == '.')
			p++;
	}
	return cur;
}

/* The number at key of o (or o itself when it is a number); NAN if none. */
static double num(json_t *o, const char *key)
{
	json_t *v = json_is_number(o) ? o : json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

/* ------------------------------------------------------------ running */

/* The stage program running now, which a signal to us is passed on to. */
static volatile pid_t stage_pid = -1;

/* SIGINT, SIGTERM, SIGHUP: passed on as SIGTERM to the stage program, so
 * that it stops its sbxd and tears its runs down before we go. */
static void on_signal(int sig)
{
	bench_on_signal(sig);
	if (stage_pid > 0)
		kill(stage_pid, SIGTERM);
}

/* Runs a stage's program with --json; its stdout is parsed, its stderr
 * (progress) is ours. */
static void run_stage(struct stage *s, bool quick)
{
	char path[PATH_MAX], rel[PATH_MAX];
	char *argv[BENCH_MAX_ARGS];
	size_t n = 0;

	if (!s->prog) {
		/* NULL with why and not failed: skipped (runsc not installed). */
		s->out = s->builtin(quick);
		s->ran = true;
		return;
	}
	snprintf(rel, sizeof(rel), "%s", s->prog);
	bench_default_path(path, sizeof(path), rel, s->prog);
	if (access(path, X_OK) < 0) {
		snprintf(s->why, sizeof(s->why), "%s not built next to " PROG, s->prog);
		s->failed = true;
		return;
	}
	bench_add_arg(argv, &n, path);
	bench_add_arg(argv, &n, "--json");
	for (const char *const *a = quick ? s->quick_args : s->args; *a; a++)
		bench_add_arg(argv, &n, *a);
	/* The options sbx-bench passes on, to the programs that take them. */
	bool helper_only = !strcmp(s->name, "helper");
	if (opt_helper) {
		bench_add_arg(argv, &n, "--helper");
		bench_add_arg(argv, &n, opt_helper);
	}
	if (opt_bwrap) {
		bench_add_arg(argv, &n, "--bwrap");
		bench_add_arg(argv, &n, opt_bwrap);
	}
	if (opt_sbxd && !helper_only) {
		bench_add_arg(argv, &n, "--sbxd");
		bench_add_arg(argv, &n, opt_sbxd);
	}
	if (opt_pool && !strcmp(s->name, "scale")) {
		bench_add_arg(argv, &n, "--pool-config");
		bench_add_arg(argv, &n, opt_pool);
	}

	_cleanup_close_ int out = memfd_create("sbx-bench-stage", MFD_CLOEXEC);
	_cleanup_close_ int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (out < 0 || null < 0)
		bench_die_errno("memfd_create");
	bench_note("== %s: %s", s->name, bench_argv_str(argv));
	int status;
	double ms = bench_run_stage(argv, null, out, &bench_interrupted, &stage_pid, &status);
	s->ran = true;
	bench_check_interrupt();
	if (status != 0) {
		snprintf(s->why, sizeof(s->why), "%s: %s (its stderr above)", s->prog,
			 bench_status_str(status));
		s->failed = true;
		return;
	}
	json_error_t je;
	if (lseek(out, 0, SEEK_SET) < 0)
		bench_die_errno("lseek");
	s->out = json_loadfd(out, 0, &je);
	if (!s->out) {
		snprintf(s->why, sizeof(s->why),
			 "%s: its --json output did not parse: %s (line %d)", s->prog, je.text,
			 je.line);
		s->failed = true;
		return;
	}
	bench_note("== %s: done in %.0f s", s->name, ms / 1e3);
}

/* ------------------------------------------------------------ runsc */

static char *const child_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};

/* runsc on PATH (or the --runsc path), or NULL. */
static const char *find_runsc(char *buf, size_t size)
{
	if (strchr(opt_runsc, '/'))
		return access(opt_runsc, X_OK) == 0 ? opt_runsc : NULL;
	const char *path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	for (const char *p = path; *p;) {
		size_t n = strcspn(p, ":");
		if ((size_t)snprintf(buf, size, "%.*s/%s", (int)n, p, opt_runsc) < size &&
		    access(buf, X_OK) == 0)
			return buf;
		p += n + (p[n] == ':');
	}
	return NULL;
}

static json_t *samples_json(const double *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_real(v[i]));
	return a;
}

static json_t *stats_json(const char *name, const double *v, size_t n)
{
	json_t *o = json_pack("{s:I, s:f, s:f, s:f, s:o}", "n", (json_int_t)n, "p50",
			      bench_pct(v, n, 50), "p90", bench_pct(v, n, 90), "p99",
			      bench_pct(v, n, 99), "samples", samples_json(v, n));
	if (name)
		json_object_set_new(o, "name", json_string(name));
	return o;
}

/* `sbx-helper run -- /bin/true` alternating with `runsc --rootless
 * --network=none do /bin/true`: gVisor, the heavier peer. runsc's `do`
 * shows the host's root read-only with an overlay, not bwrap's mounts. */
static json_t *stage_runsc(bool quick)
{
	struct stage *s = &stages[1];
	char runsc_buf[PATH_MAX], helper_buf[PATH_MAX], policy[PATH_MAX];
	const char *runsc = find_runsc(runsc_buf, sizeof(runsc_buf));
	const char *helper = opt_helper;
	long n = quick ? 3 : 20;

	if (!runsc) {
		snprintf(s->why, sizeof(s->why),
			 "runsc not installed (Debian: apt-get install runsc): skipped");
		return NULL;
	}
	if (!helper) {
		bench_default_path(helper_buf, sizeof(helper_buf), "../helper/sbx-helper",
				   "--helper");
		helper = helper_buf;
	}
	bench_check_exec("sbx-helper", helper, " (pass --helper PATH)");
	bench_scratch_path(policy, sizeof(policy), "policy.json");
	FILE *f = fopen(policy, "we");
	if (!f ||
	    fputs("{\"image\":\"host\",\"limits\":{\"script_seconds\":30,\"memory_mb\":512}}\n",
		  f) < 0 ||
	    fclose(f) != 0)
		bench_die_errno("write %s", policy);
	char *sbx_argv[] = {(char *)helper, "run", "--policy", policy, "--", "/bin/true", NULL};
	char *runsc_argv[] = {(char *)runsc, "--rootless", "--network=none",
			      "do",	     "/bin/true",  NULL};
	char **argvs[2] = {sbx_argv, runsc_argv};
	double *v[2] = {calloc((size_t)n, sizeof(double)), calloc((size_t)n, sizeof(double))};
	if (!v[0] || !v[1])
		bench_die("out of memory");
	_cleanup_close_ int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0)
		bench_die_errno("open /dev/null");
	bench_note("== runsc: %s, %ld times,", bench_argv_str(runsc_argv), n);
	bench_note("   alternating with %s", bench_argv_str(sbx_argv));
	for (long i = -1; i < n; i++) { /* one unmeasured first */
		for (int k = 0; k < 2; k++) {
			int w = (int)((k + i + 2) % 2), status;
			double ms = bench_run(argvs[w], child_env, bench_scratch_dir(), null, null,
					      null, &bench_interrupted, &status);
			if (status != 0) {
				snprintf(s->why, sizeof(s->why), "%s: %s", argvs[w][0],
					 bench_status_str(status));
				s->failed = true;
				free(v[0]);
				free(v[1]);
				return NULL;
			}
			if (i >= 0)
				v[w][i] = ms;
		}
	}
	json_t *r = stats_json(NULL, v[0], (size_t)n);
	json_object_set_new(r, "measure", json_string("oneshot_true"));
	json_object_set_new(r, "unit", json_string("ms"));
	json_object_set_new(r, "peer", stats_json("runsc", v[1], (size_t)n));
	free(v[0]);
	free(v[1]);
	return json_pack("{s:[o]}", "results", r);
}

/* ------------------------------------------------------------ summary */

struct cell {
	/* "measured"; "absent" (the figure's part has not landed: said, not an
	 * error), "not run" (--only), "skipped" (runsc not installed),
	 * "failed" (the stage), "missing" (a row's path not in the output) */
	const char *state;
	const char *why;
	double p50, p90, p99, peer;
	const char *peer_name;
	double ratio;
	char target[48];
	int met;	  /* -1: no target */
	const char *note; /* the result's "note", printed under its row */
};

static struct stage *stage_named(const char *name)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(stages); i++)
		if (!strcmp(stages[i].name, name))
			return &stages[i];
	bench_die("row names stage %s, which does not exist", name);
}

static struct cell evaluate(const struct row *r)
{
	struct stage *s = stage_named(r->stage);
	struct cell c = {.met = -1, .p50 = NAN, .p90 = NAN, .p99 = NAN, .peer = NAN, .ratio = NAN};
	const char *field = r->field ? r->field : "p50";

	if (!s->ran) {
		c.state = "not run";
		c.why = s->why[0] ? s->why : "not chosen (--only)";
		return c;
	}
	if (!s->out) {
		c.state = s->failed ? "failed" : "skipped";
		c.why = s->why;
		return c;
	}
	json_t *o = lookup(s->out, r->sbx);
	if (!o || json_object_get(o, "absent")) {
		json_t *a = json_object_get(o, "absent");
		c.state = r->absent ? "absent" : "missing";
		c.why = json_is_string(a) ? json_string_value(a) : r->absent ? r->absent : r->sbx;
		return c;
	}
	c.state = "measured";
	json_t *note = json_object_get(o, "note");
	c.note = json_is_string(note) ? json_string_value(note) : NULL;
	c.p50 = num(o, field);
	c.p90 = r->field ? NAN : num(o, "p90");
	c.p99 = r->field ? NAN : num(o, "p99");
	if (r->peer) {
		json_t *p = lookup(s->out, r->peer);
		c.peer = num(p, field);
		json_t *name = json_object_get(p, "name");
		c.peer_name = r->peer_name	     ? r->peer_name
			      : json_is_string(name) ? json_string_value(name)
						     : "peer";
		if (c.peer > 0)
			c.ratio = c.p50 / c.peer;
	}
	switch (r->target) {
	case T_NONE:
		break;
	case T_RATIO_LE:
		snprintf(c.target, sizeof(c.target), "ratio <= %.1f", r->value);
		c.met = c.ratio <= r->value;
		break;
	case T_RATIO_GE:
		snprintf(c.target, sizeof(c.target), "ratio >= %.1f", r->value);
		c.met = c.ratio >= r->value;
		break;
	case T_P50_LE:
		snprintf(c.target, sizeof(c.target), "p50 <= %g %s", r->value, unit_name[r->unit]);
		c.met = c.p50 <= r->value;
		break;
	case T_P99_LT:
		snprintf(c.target, sizeof(c.target), "p99 < %g %s", r->value, unit_name[r->unit]);
		c.met = c.p99 < r->value;
		break;
	case T_JSON: {
		json_t *t = json_object_get(o, "target"), *m = json_object_get(o, "met");
		if (json_is_string(t))
			snprintf(c.target, sizeof(c.target), "%s", json_string_value(t));
		if (json_is_boolean(m))
			c.met = json_is_true(m);
		break;
	}
	}
	return c;
}

static const char *fmt(char *buf, size_t size, double v, enum unit u)
{
	if (isnan(v))
		return "-";
	switch (u) {
	case U_US:
		snprintf(buf, size, "%.0f us", v);
		break;
	case U_MS:
		snprintf(buf, size, "%.1f ms", v);
		break;
	case U_MIB:
		snprintf(buf, size, "%.2f MiB", v);
		break;
	case U_MIBS:
		snprintf(buf, size, "%.0f MiB/s", v);
		break;
	case U_PER_S:
		snprintf(buf, size, "%.1f/s", v);
		break;
	case U_RUNS:
		snprintf(buf, size, "%.0f", v);
		break;
	}
	return buf;
}

static const char *met_word(int met)
{
	return met < 0 ? "" : met ? "met" : "MISSED";
}

static void print_table(const struct cell *cells, const struct bench_host *h, bool quick)
{
	printf("%-40s %-10s %-10s %-10s %-22s %-6s %-16s %s\n", "measure", "sbx p50", "p90", "p99",
	       "peer p50", "ratio", "target", "met?");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(rows); i++) {
		const struct row *r = &rows[i];
		const struct cell *c = &cells[i];
		char a[32], b[32], d[32], e[32], p[48], q[16];

		if (strcmp(c->state, "measured")) {
			printf("%-40s %s: %s\n", r->label, c->state, c->why);
			continue;
		}
		if (c->peer_name)
			snprintf(p, sizeof(p), "%s %s", c->peer_name,
				 fmt(e, sizeof(e), c->peer, r->unit));
		else
			snprintf(p, sizeof(p), "-");
		if (isnan(c->ratio))
			snprintf(q, sizeof(q), "-");
		else
			snprintf(q, sizeof(q), "%.2f", c->ratio);
		printf("%-40s %-10s %-10s %-10s %-22s %-6s %-16s %s\n", r->label,
		       fmt(a, sizeof(a), c->p50, r->unit), fmt(b, sizeof(b), c->p90, r->unit),
		       fmt(d, sizeof(d), c->p99, r->unit), p, q, c->target[0] ? c->target : "-",
		       met_word(c->met));
		if (c->note)
			printf("  %s\n", c->note);
	}
	for (size_t i = 0; i < SBX_ARRAY_SIZE(stages); i++)
		if (stages[i].failed)
			printf("stage %s failed: %s\n", stages[i].name, stages[i].why);
	printf("(ratios of medians, sbx/peer; each stage alternates sbx with its peer in its own "
	       "run%s)\n",
	       quick ? "; --quick: few samples, a smoke run, not a measurement" : "");
	printf("host: %s, cgroup %s%s, %ld CPUs, load %.2f %.2f %.2f\n", h->kernel, h->cgroup,
	       h->hybrid ? " (hybrid)" : "", h->cpus, h->load[0], h->load[1], h->load[2]);
}

static json_t *jnum(double v)
{
	return isnan(v) ? json_null() : json_real(v);
}

static void print_json(FILE *f, const struct cell *cells, const struct bench_host *h, bool quick)
{
	json_t *rs = json_array(), *st = json_object();

	for (size_t i = 0; i < SBX_ARRAY_SIZE(rows); i++) {
		const struct row *r = &rows[i];
		const struct cell *c = &cells[i];
		json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "measure", r->label, "stage",
				      r->stage, "state", c->state, "unit", unit_name[r->unit]);
		if (c->why)
			json_object_set_new(o, "why", json_string(c->why));
		if (!strcmp(c->state, "measured")) {
			json_object_set_new(o, "p50", jnum(c->p50));
			json_object_set_new(o, "p90", jnum(c->p90));
			json_object_set_new(o, "p99", jnum(c->p99));
			if (c->peer_name)
				json_object_set_new(o, "peer",
						    json_pack("{s:s, s:o}", "name", c->peer_name,
							      "p50", jnum(c->peer)));
			json_object_set_new(o, "ratio", jnum(c->ratio));
			if (c->note)
				json_object_set_new(o, "note", json_string(c->note));
			if (c->met >= 0) {
				json_object_set_new(o, "target", json_string(c->target));
				json_object_set_new(o, "met", json_boolean(c->met));
			}
		}
		json_array_append_new(rs, o);
	}
	for (size_t i = 0; i < SBX_ARRAY_SIZE(stages); i++) {
		const struct stage *s = &stages[i];
		json_t *o = json_pack("{s:b, s:b}", "ran", s->ran, "failed", s->failed);
		if (s->why[0])
			json_object_set_new(o, "why", json_string(s->why));
		if (s->out)
			json_object_set(o, "output", s->out);
		json_object_set_new(st, s->name, o);
	}
	json_t *out = json_pack("{s:{s:s, s:s, s:b, s:I, s:[f,f,f]}, s:b, s:o, s:o}", "host",
				"kernel", h->kernel, "cgroup", h->cgroup, "cgroup_hybrid",
				h->hybrid, "cpus", (json_int_t)h->cpus, "loadavg", h->load[0],
				h->load[1], h->load[2], "quick", quick, "rows", rs, "stages", st);
	if (json_dumpf(out, f, JSON_INDENT(1) | JSON_REAL_PRECISION(6)) < 0)
		bench_die("writing JSON failed");
	fputc('\n', f);
	json_decref(out);
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " [--quick] [--json] [--json-file FILE] [--only STAGE,...]\n"
		   "                 [--sbxd PATH] [--helper PATH] [--bwrap PATH] [--runsc PATH]\n"
		   "                 [--pool-config JSON]\n"
		   "\n"
		   "Every figure of issue 21 with its peer and ratio, in one run: runs the\n"
		   "stages below in turn (each alternates sbx with its peer, progress on\n"
		   "stderr), then prints one table on stdout: measure, sbx's p50/p90/p99, the\n"
		   "peer's p50, the ratio of medians, the target and whether it was met. A row\n"
		   "whose figure a stage does not produce yet says so (\"pool: not configured\").\n"
		   "Stages:\n");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(stages); i++)
		fprintf(f, "  %-7s %s\n", stages[i].name, stages[i].about);
	fprintf(f, "\n"
		   "  --quick          few samples each (a smoke run, not a measurement)\n"
		   "  --json           rows as JSON, with every stage's own output\n"
		   "  --only STAGES    a comma list of the stages above\n"
		   "  --sbxd PATH, --helper PATH, --bwrap PATH   passed on to the stages\n"
		   "  --runsc PATH     gVisor's runsc (default: runsc on PATH; the stage is\n"
		   "                   skipped, saying so, where it is not installed)\n"
		   "  --pool-config JSON  passed on to sbx-bench-scale (its warm-pool row);\n"
		   "                   default: a pool of 4 of the creates' own policy, built\n"
		   "                   at up to 100 a second (DEFAULT_POOL)\n"
		   "  -h, --help       this text\n"
		   "\n"
		   "Must run as an unprivileged user (sbxd and sbx-helper refuse root), e.g.\n"
		   "  runuser -u sbx-test -- build/bench/" PROG "\n"
		   "Exit status: 0 every stage ran and every row found its figure or says why\n"
		   "not (a missed target is printed, not an error); 1 a stage failed or a row's\n"
		   "figure is missing from its stage's output; 2 usage.\n");
}

int main(int argc, char **argv)
{
	enum {
		O_QUICK = 256,
		O_JSON,
		O_JSON_FILE,
		O_ONLY,
		O_SBXD,
		O_HELPER,
		O_BWRAP,
		O_RUNSC,
		O_POOL
	};
	static const struct option opts[] = {
	    {"quick", no_argument, NULL, O_QUICK},
	    {"json", no_argument, NULL, O_JSON},
	    {"json-file", required_argument, NULL, O_JSON_FILE},
	    {"only", required_argument, NULL, O_ONLY},
	    {"sbxd", required_argument, NULL, O_SBXD},
	    {"helper", required_argument, NULL, O_HELPER},
	    {"bwrap", required_argument, NULL, O_BWRAP},
	    {"runsc", required_argument, NULL, O_RUNSC},
	    {"pool-config", required_argument, NULL, O_POOL},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	bool quick = false, json = false;
	const char *only = NULL, *json_file = NULL;
	int c;

	bench_prog = PROG;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_QUICK:
			quick = true;
			break;
		case O_JSON:
			json = true;
			break;
		case O_JSON_FILE:
			json_file = optarg;
			break;
		case O_ONLY:
			only = optarg;
			break;
		case O_SBXD:
			opt_sbxd = optarg;
			break;
		case O_HELPER:
			opt_helper = optarg;
			break;
		case O_BWRAP:
			opt_bwrap = optarg;
			break;
		case O_RUNSC:
			opt_runsc = optarg;
			break;
		case O_POOL:
			opt_pool = optarg;
			break;
		default:
			return bench_option_other(c, usage);
		}
	}
	if (bench_no_operands(argc, argv, optind, usage))
		return 2;
	bool chosen[SBX_ARRAY_SIZE(stages)];
	for (size_t i = 0; i < SBX_ARRAY_SIZE(stages); i++)
		chosen[i] = !only;
	if (only) {
		char buf[256];
		snprintf(buf, sizeof(buf), "%s", only);
		char *save = NULL;
		for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			size_t i = 0;
			while (i < SBX_ARRAY_SIZE(stages) && strcmp(stages[i].name, t))
				i++;
			if (i == SBX_ARRAY_SIZE(stages)) {
				bench_note("--only: no stage '%s'", t);
				usage(stderr);
				return 2;
			}
			chosen[i] = true;
		}
	}
	bench_refuse_root(argv[0], "sbxd and sbx-helper refuse root");

	bench_on_signals(on_signal);
	bench_scratch_make();
	if (atexit(bench_scratch_remove) != 0)
		bench_die("atexit failed");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(stages); i++) {
		if (!chosen[i])
			continue;
		bench_check_interrupt();
		run_stage(&stages[i], quick);
	}

	struct cell cells[SBX_ARRAY_SIZE(rows)];
	bool missing = false;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(rows); i++) {
		cells[i] = evaluate(&rows[i]);
		missing |= !strcmp(cells[i].state, "missing");
	}
	bool failed = false;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(stages); i++)
		failed |= stages[i].failed;
	struct bench_host h;
	bench_probe_host(&h);
	if (json)
		print_json(stdout, cells, &h, quick);
	else
		print_table(cells, &h, quick);
	if (json_file) {
		_cleanup_fclose_ FILE *f = fopen(json_file, "we");
		if (!f)
			bench_die_errno("open %s", json_file);
		print_json(f, cells, &h, quick);
		if (fflush(f) != 0 || ferror(f))
			bench_die_errno("write %s", json_file);
	}
	if (fflush(stdout) != 0 || ferror(stdout))
		bench_die_errno("write output");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(stages); i++)
		json_decref(stages[i].out);
	return failed || missing ? 1 : 0;
}
