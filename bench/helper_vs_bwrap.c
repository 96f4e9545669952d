/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-bench-helper: wall time of a one-shot sandbox through `sbx-helper run`
 * against bubblewrap with the closest equivalent isolation, in one run,
 * alternating the two on every iteration.
 *
 * Each sample is CLOCK_MONOTONIC around fork + exec + waitpid of the
 * launcher (sbx-helper or bwrap), children's stdout/stderr on /dev/null. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "bwrap_baseline.h"
#include "util.h"

#define PROG	    "sbx-bench-helper"
#define CAPTURE_MAX 4096

#define DEFAULT_POLICY_TEXT                                                                        \
	"{\"image\":\"host\",\"limits\":{\"script_seconds\":30,\"memory_mb\":512}}"
#define DEFAULT_POLICY DEFAULT_POLICY_TEXT "\n"

#define PY_SCRIPT                                                                                  \
	"import json,hashlib; "                                                                    \
	"print(hashlib.sha256(json.dumps(list(range(1000))).encode()).hexdigest())"

enum runner { RUN_SBX, RUN_BWRAP, RUNNERS };

static const char *const runner_name[RUNNERS] = {"sbx", "bwrap"};

static const char *const cmd_true[] = {"/bin/true", NULL};
static const char *const cmd_python[] = {"/usr/bin/python3", "-c", PY_SCRIPT, NULL};

/* The children get this environment and nothing of ours: sbx hands the
 * sandboxed process an empty one, bwrap passes its own through. */
static char *const child_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};

/* A temporary policy we wrote and the helper's --timings file, removed
 * on every way out. */
static char tmp_policy[PATH_MAX];
static char tmp_timings[PATH_MAX];

static void cleanup(void)
{
	if (tmp_policy[0])
		unlink(tmp_policy);
	if (tmp_timings[0])
		unlink(tmp_timings);
}

static void on_signal(int sig)
{
	cleanup();
	_exit(128 + sig);
}

/* The per-phase breakdown of a one-shot through sbx-helper: each phase is
 * the time from the mark before it to its own (`sbx-helper run --timings`,
 * helper/phases.h), on the path of the command; the first starts at our
 * fork, the last ends at our waitpid. Phases that overlap another process's
 * work (the seccomp filter is compiled while newuidmap runs) count where
 * the path waited for them. */
static const struct {
	const char *mark; /* the helper's mark that ends the phase; NULL: waitpid */
	const char *name;
	const char *what;
} phases[] = {
    {"main", "spawn", "fork+exec of sbx-helper, its libraries"},
    {"prepared", "prepare", "policy read, host uid slot locked"},
    {"cgroup", "cgroup", "the run's cgroups made, limits written"},
    {"cloned", "namespaces", "pid 1 cloned (user, mount, pid, net, ipc, uts)"},
    {"mapped", "idmap", "newuidmap+newgidmap (filter compiled meanwhile)"},
    {"mounts", "mounts", "pid 1 builds the root (tmpfs, binds, /proc, pivot)"},
    {"ready", "ready", "filter handed over, Ready sent"},
    {"leaf", "exec leaf", "the exec's cgroup leaf made, limits written"},
    {"exec_ns", "exec ns", "exec init cloned (user, mount, pid, net, ipc), mapped"},
    {"joined", "exec cgroup", "exec init in its leaf (v2: born there; else it migrates)"},
    {"confined", "confine", "loopback, devpts, uid, caps, seccomp loaded"},
    {"execve", "cmd spawn", "the command's process forked, fds, rlimits"},
    {"reaped", "command", "execve of the command, its run and exit"},
    {"ended", "report", "exec init exits, pid 1 reaps, leaf removed, Ended"},
    {"done", "teardown", "Destroy, pid 1 and its namespaces end, cgroups removed"},
    {NULL, "exit", "the helper exits, we reap it"},
};
#define NPHASES SBX_ARRAY_SIZE(phases)

struct workload {
	const char *name;
	const char *const *cmd; /* NULL-terminated, absolute path first */
	char *argv[RUNNERS][BENCH_MAX_ARGS];
	double *ms[RUNNERS];	   /* samples, `runs` of each */
	double *phase_ms[NPHASES]; /* sbx's, per phase, `runs` of each */
	size_t phase_runs;	   /* runs whose marks were all there */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [--helper PATH] [--policy FILE] [-n N] [--warmup K]\n"
		"                        [--bwrap PATH] [--json]\n"
		"\n"
		"Wall time of /bin/true and a small python3 script run through\n"
		"`sbx-helper run --policy FILE -- CMD` and through bwrap (--unshare-all,\n"
		"read-only /usr and the host's top-level links into it, /proc, /dev,\n"
		"tmpfs /tmp), alternating the two on every iteration (the order is\n"
		"swapped every other iteration). Each sample is CLOCK_MONOTONIC around\n"
		"fork+exec+waitpid; the children's stdout and stderr go to /dev/null\n"
		"and their environment is only PATH.\n"
		"Prints median, p10 and p90 in ms and the ratio of medians sbx/bwrap,\n"
		"then sbx's time per phase (spawn, cgroup, namespaces, idmap, mounts,\n"
		"exec namespaces and cgroup, seccomp, command, teardown...) from the\n"
		"marks `sbx-helper run --timings FILE` writes, next to bwrap's total.\n"
		"\n"
		"  --helper PATH  sbx-helper (default: <dir of this binary>/../helper/sbx-helper)\n"
		"  --policy FILE  run policy (default: a temporary one,\n"
		"                 " DEFAULT_POLICY_TEXT ")\n"
		"  -n N           measured iterations (default 30)\n"
		"  --warmup K     unmeasured iterations first (default 3); the first one\n"
		"                 checks that both exit 0 and print the same output\n"
		"  --bwrap PATH   bubblewrap (default /usr/bin/bwrap)\n"
		"  --json         machine-readable output, with every sample\n"
		"  -h, --help     this text\n"
		"\n"
		"Must run as an unprivileged user (sbx-helper refuses root).\n"
		"Exit status: 0 all runs succeeded; 1 a run failed or bad setup; 2 usage.\n");
}

struct capture {
	int out, err; /* memfds, or -1 for /dev/null */
};

/* Runs argv once; returns its wall time in ms and its wait status. */
static double run_once(char *const *argv, int devnull, const struct capture *cap, int *status)
{
	int out = cap && cap->out >= 0 ? cap->out : devnull;
	int err = cap && cap->err >= 0 ? cap->err : devnull;

	return bench_run(argv, child_env, NULL, devnull, out, err, NULL, status);
}

/* The text captured in memfd `fd` (at most CAPTURE_MAX bytes, the tail). */
static char *capture_read(int fd)
{
	static char bufs[4][CAPTURE_MAX + 1];
	static unsigned next;
	char *buf = bufs[next++ % SBX_ARRAY_SIZE(bufs)];
	struct stat st;
	off_t off = 0;

	buf[0] = '\0';
	if (fstat(fd, &st) < 0)
		return buf;
	if (st.st_size > CAPTURE_MAX)
		off = st.st_size - CAPTURE_MAX;
	ssize_t n = pread(fd, buf, CAPTURE_MAX, off);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static void capture_reset(const struct capture *cap)
{
	if (ftruncate(cap->out, 0) < 0 || ftruncate(cap->err, 0) < 0)
		bench_die_errno("ftruncate");
	lseek(cap->out, 0, SEEK_SET);
	lseek(cap->err, 0, SEEK_SET);
}

static void fail(const char *phase, const struct workload *w, enum runner r, int status,
		 const struct capture *cap)
{
	bench_note("%s: %s via %s failed: %s\n  command: %s", phase, w->name, runner_name[r],
		   bench_status_str(status), bench_argv_str(w->argv[r]));
	if (cap) {
		const char *err = capture_read(cap->err);
		if (*err)
			fprintf(stderr, "  its stderr:\n%s%s", err,
				err[strlen(err) - 1] == '\n' ? "" : "\n");
	}
	exit(1);
}

static void build_sbx_argv(char **argv, const char *helper, const char *policy,
			   const char *const *cmd)
{
	size_t n = 0;

	bench_add_arg(argv, &n, helper);
	bench_add_arg(argv, &n, "run");
	bench_add_arg(argv, &n, "--policy");
	bench_add_arg(argv, &n, policy);
	bench_add_arg(argv, &n, "--timings");
	bench_add_arg(argv, &n, tmp_timings);
	bench_add_arg(argv, &n, "--");
	for (size_t i = 0; cmd[i]; i++)
		bench_add_arg(argv, &n, cmd[i]);
}

static const char *tmp_dir(void)
{
	const char *dir = getenv("TMPDIR");

	return dir && *dir ? dir : "/tmp";
}

/* The file sbx-helper writes its marks to (--timings), ours. */
static void make_timings_file(void)
{
	if ((size_t)snprintf(tmp_timings, sizeof(tmp_timings), "%s/sbx-bench-timings-XXXXXX",
			     tmp_dir()) >= sizeof(tmp_timings))
		bench_die("TMPDIR too long");
	int fd = mkstemp(tmp_timings);
	if (fd < 0) {
		tmp_timings[0] = '\0';
		bench_die_errno("create temporary file in %s", tmp_dir());
	}
	close(fd);
}

/* One sbx run's phases from the marks in tmp_timings, t0 our fork and t1
 * our waitpid; false when a mark is missing (the sample is left out). */
static bool read_phases(double t0, double t1, double out[NPHASES])
{
	_cleanup_fclose_ FILE *f = fopen(tmp_timings, "re");
	double at[NPHASES];
	char name[32];
	long long ns;

	for (size_t i = 0; i < NPHASES; i++)
		at[i] = phases[i].mark ? -1 : t1;
	while (f && fscanf(f, "%31s %lld", name, &ns) == 2)
		for (size_t i = 0; i < NPHASES; i++)
			if (phases[i].mark && strcmp(name, phases[i].mark) == 0)
				at[i] = (double)ns / 1e6;
	double prev = t0;
	for (size_t i = 0; i < NPHASES; i++) {
		if (at[i] < 0)
			return false;
		out[i] = at[i] - prev;
		prev = at[i];
	}
	return true;
}

static const char *write_default_policy(void)
{
	const char *dir = tmp_dir();

	if ((size_t)snprintf(tmp_policy, sizeof(tmp_policy), "%s/sbx-bench-policy-XXXXXX.json",
			     dir) >= sizeof(tmp_policy))
		bench_die("TMPDIR too long");
	int fd = mkstemps(tmp_policy, 5);
	if (fd < 0) {
		tmp_policy[0] = '\0';
		bench_die_errno("create temporary policy in %s", dir);
	}
	size_t len = strlen(DEFAULT_POLICY);
	if (write(fd, DEFAULT_POLICY, len) != (ssize_t)len || fchmod(fd, 0644) < 0 || close(fd) < 0)
		bench_die_errno("write %s", tmp_policy);
	return tmp_policy;
}

struct stats {
	double p10, p50, p90;
};

static struct stats summarize(const double *samples, size_t n)
{
	return (struct stats){bench_pct(samples, n, 10), bench_pct(samples, n, 50),
			      bench_pct(samples, n, 90)};
}

static void json_str(const char *s)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

static void json_argv(char *const *argv)
{
	putchar('[');
	for (size_t i = 0; argv[i]; i++) {
		if (i)
			putchar(',');
		json_str(argv[i]);
	}
	putchar(']');
}

static void print_json(const struct bench_host *h, struct workload *w, size_t nw, size_t runs,
		       long warmup)
{
	printf("{\"host\":{\"kernel\":");
	json_str(h->kernel);
	printf(",\"cgroup\":\"%s\",\"cgroup_hybrid\":%s},", h->cgroup,
	       h->hybrid ? "true" : "false");
	printf("\"iterations\":%zu,\"warmup\":%ld,\"unit\":\"ms\",\"workloads\":[", runs, warmup);
	for (size_t i = 0; i < nw; i++) {
		struct stats s[RUNNERS];

		printf("%s{\"name\":", i ? "," : "");
		json_str(w[i].name);
		printf(",\"runs\":%zu", runs);
		for (int r = 0; r < RUNNERS; r++) {
			s[r] = summarize(w[i].ms[r], runs);
			printf(",\"%s\":{\"p50\":%.3f,\"p10\":%.3f,\"p90\":%.3f,\"argv\":",
			       runner_name[r], s[r].p50, s[r].p10, s[r].p90);
			json_argv(w[i].argv[r]);
			printf(",\"samples\":[");
			for (size_t k = 0; k < runs; k++)
				printf("%s%.3f", k ? "," : "", w[i].ms[r][k]);
			printf("]}");
		}
		printf(",\"ratio_p50\":%.4f,\"sbx_phases\":{\"runs\":%zu",
		       s[RUN_SBX].p50 / s[RUN_BWRAP].p50, w[i].phase_runs);
		for (size_t k = 0; k < NPHASES; k++) {
			struct stats ph = summarize(w[i].phase_ms[k], w[i].phase_runs);
			printf(",");
			json_str(phases[k].name);
			printf(":{\"p50\":%.3f,\"p90\":%.3f}", ph.p50, ph.p90);
		}
		printf("}}");
	}
	printf("]}\n");
}

/* sbx's phases of one workload, next to bwrap's whole run. */
static void print_phases(const struct workload *w, size_t runs)
{
	struct stats s = summarize(w->ms[RUN_SBX], runs);
	struct stats b = summarize(w->ms[RUN_BWRAP], runs);
	double sum = 0;

	if (!w->phase_runs)
		return;
	printf("\nsbx phases of '%s' (%zu runs; ms; p50s add up to about the total):\n", w->name,
	       w->phase_runs);
	printf("  %-12s %7s %7s %6s  %s\n", "phase", "p50", "p90", "share", "what");
	for (size_t k = 0; k < NPHASES; k++) {
		struct stats ph = summarize(w->phase_ms[k], w->phase_runs);
		sum += ph.p50;
		printf("  %-12s %7.2f %7.2f %5.0f%%  %s\n", phases[k].name, ph.p50, ph.p90,
		       100.0 * ph.p50 / s.p50, phases[k].what);
	}
	printf("  %-12s %7.2f                 (sum of the p50s)\n", "sbx phases", sum);
	printf("  %-12s %7.2f %7.2f         ratio sbx/bwrap %.2f", "sbx total", s.p50, s.p90,
	       s.p50 / b.p50);
	/* Issue 21's target is the one-shot of `true`. */
	if (strcmp(w->name, "true") == 0)
		printf(" (target <= 1.00: %s)", s.p50 <= b.p50 ? "met" : "missed");
	printf("\n");
	printf("  %-12s %7.2f %7.2f         --unshare-all --die-with-parent --new-session\n",
	       "bwrap total", b.p50, b.p90);
}

static void print_table(const struct bench_host *h, struct workload *w, size_t nw, size_t runs)
{
	printf("%-9s %5s %8s %6s %6s  %9s %6s %6s  %15s\n", "workload", "runs", "sbx p50", "p10",
	       "p90", "bwrap p50", "p10", "p90", "ratio sbx/bwrap");
	for (size_t i = 0; i < nw; i++) {
		struct stats s = summarize(w[i].ms[RUN_SBX], runs);
		struct stats b = summarize(w[i].ms[RUN_BWRAP], runs);

		printf("%-9s %5zu %8.1f %6.1f %6.1f  %9.1f %6.1f %6.1f  %15.2f\n", w[i].name, runs,
		       s.p50, s.p10, s.p90, b.p50, b.p10, b.p90, s.p50 / b.p50);
	}
	printf("(wall ms per run: CLOCK_MONOTONIC around fork+exec+waitpid)\n");
	for (size_t i = 0; i < nw; i++)
		print_phases(&w[i], runs);
	printf("host: %s, cgroup %s%s\n", h->kernel, h->cgroup,
	       h->hybrid ? " (hybrid: cgroup2 also at /sys/fs/cgroup/unified)" : "");
}

int main(int argc, char **argv)
{
	enum { O_HELPER = 256, O_POLICY, O_WARMUP, O_BWRAP, O_JSON };
	static const struct option opts[] = {
	    {"helper", required_argument, NULL, O_HELPER},
	    {"policy", required_argument, NULL, O_POLICY},
	    {"warmup", required_argument, NULL, O_WARMUP},
	    {"bwrap", required_argument, NULL, O_BWRAP},
	    {"json", no_argument, NULL, O_JSON},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	char helper_buf[PATH_MAX];
	const char *helper = NULL, *policy = NULL, *bwrap = "/usr/bin/bwrap";
	long runs = 30, warmup = 3;
	bool json = false;
	int c;

	bench_prog = PROG;
	while ((c = getopt_long(argc, argv, "hn:", opts, NULL)) != -1) {
		switch (c) {
		case O_HELPER:
			helper = optarg;
			break;
		case O_POLICY:
			policy = optarg;
			break;
		case 'n':
			runs = bench_parse_count("-n", optarg, 1, 100000);
			break;
		case O_WARMUP:
			warmup = bench_parse_count("--warmup", optarg, 0, 100000);
			break;
		case O_BWRAP:
			bwrap = optarg;
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
	bench_refuse_root(argv[0], "sbx-helper refuses root");

	if (!helper) {
		bench_default_path(helper_buf, sizeof(helper_buf), "../helper/sbx-helper",
				   "--helper");
		helper = helper_buf;
	}
	bench_check_exec("sbx-helper", helper, " (pass --helper PATH)");
	bench_check_exec("bwrap", bwrap, " (pass --bwrap PATH)");
	bench_check_exec("workload", cmd_true[0], "");
	bench_check_exec("workload", cmd_python[0], "");
	if (policy) {
		if (access(policy, R_OK) < 0)
			bench_die_errno("policy %s", policy);
	}
	atexit(cleanup);
	bench_on_signals(on_signal);
	make_timings_file();
	if (!policy)
		policy = write_default_policy();

	_cleanup_close_ int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0)
		bench_die_errno("open /dev/null");

	struct workload w[] = {{.name = "true", .cmd = cmd_true},
			       {.name = "python3", .cmd = cmd_python}};
	const size_t nw = SBX_ARRAY_SIZE(w);
	for (size_t i = 0; i < nw; i++) {
		build_sbx_argv(w[i].argv[RUN_SBX], helper, policy, w[i].cmd);
		bwrap_baseline_argv(w[i].argv[RUN_BWRAP], bwrap, w[i].cmd);
		for (int r = 0; r < RUNNERS; r++) {
			w[i].ms[r] = calloc((size_t)runs, sizeof(double));
			if (!w[i].ms[r])
				bench_die("out of memory");
		}
		for (size_t k = 0; k < NPHASES; k++)
			if (!(w[i].phase_ms[k] = calloc((size_t)runs, sizeof(double))))
				bench_die("out of memory");
	}
	bench_note("sbx:   %s", bench_argv_str(w[0].argv[RUN_SBX]));
	bench_note("bwrap: %s", bench_argv_str(w[0].argv[RUN_BWRAP]));

	/* Warm-up: the first iteration keeps the children's output, checks that
	 * both exit 0 and that both print the same thing; the rest only warm
	 * the page cache. */
	struct capture cap = {memfd_create("sbx-bench-out", MFD_CLOEXEC),
			      memfd_create("sbx-bench-err", MFD_CLOEXEC)};
	if (cap.out < 0 || cap.err < 0)
		bench_die_errno("memfd_create");
	if (warmup > 0)
		bench_note("warm-up: %ld iteration%s", warmup, warmup == 1 ? "" : "s");
	for (long it = 0; it < warmup; it++) {
		for (size_t i = 0; i < nw; i++) {
			char out[RUNNERS][CAPTURE_MAX + 1];

			for (int r = 0; r < RUNNERS; r++) {
				int status;

				capture_reset(&cap);
				run_once(w[i].argv[r], devnull, it == 0 ? &cap : NULL, &status);
				if (status != 0)
					fail("warm-up", &w[i], (enum runner)r, status,
					     it == 0 ? &cap : NULL);
				if (it == 0)
					snprintf(out[r], sizeof(out[r]), "%s",
						 capture_read(cap.out));
			}
			if (it == 0 && strcmp(out[RUN_SBX], out[RUN_BWRAP]) != 0)
				bench_die("warm-up: %s prints different output via sbx and bwrap\n"
					  "  sbx:   '%s'\n  bwrap: '%s'",
					  w[i].name, out[RUN_SBX], out[RUN_BWRAP]);
		}
	}
	close(cap.out);
	close(cap.err);

	for (long it = 0; it < runs; it++) {
		for (size_t i = 0; i < nw; i++) {
			for (int k = 0; k < RUNNERS; k++) {
				/* Alternate which goes first, so neither always
				 * runs on the other's warm caches. */
				enum runner r = (enum runner)((k + it) % RUNNERS);
				int status;
				double ph[NPHASES];

				if (r == RUN_SBX && truncate(tmp_timings, 0) < 0)
					bench_die_errno("truncate %s", tmp_timings);
				double t0 = bench_now_ms();
				w[i].ms[r][it] = run_once(w[i].argv[r], devnull, NULL, &status);
				double t1 = bench_now_ms();
				if (status != 0)
					fail("measured run", &w[i], r, status, NULL);
				if (r == RUN_SBX && read_phases(t0, t1, ph)) {
					for (size_t q = 0; q < NPHASES; q++)
						w[i].phase_ms[q][w[i].phase_runs] = ph[q];
					w[i].phase_runs++;
				}
			}
		}
		if ((it + 1) % 10 == 0 || it + 1 == runs)
			bench_note("%ld/%ld iterations", it + 1, runs);
	}

	struct bench_host h;
	bench_probe_host(&h);
	if (json)
		print_json(&h, w, nw, (size_t)runs, warmup);
	else
		print_table(&h, w, nw, (size_t)runs);
	for (size_t i = 0; i < nw; i++) {
		for (int r = 0; r < RUNNERS; r++)
			free(w[i].ms[r]);
		for (size_t k = 0; k < NPHASES; k++)
			free(w[i].phase_ms[k]);
	}
	if (fflush(stdout) != 0 || ferror(stdout))
		bench_die_errno("write output");
	return 0;
}
