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
#include <linux/magic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

#define PROG	      "sbx-bench-helper"
#define MAX_ARGS      64
#define CAPTURE_MAX   4096
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define DEFAULT_POLICY_TEXT                                                                        \
	"{\"image\":\"host\",\"limits\":{\"script_seconds\":30,\"memory_mb\":512}}"
#define DEFAULT_POLICY DEFAULT_POLICY_TEXT "\n"

#define PY_SCRIPT                                                                                  \
	"import json,hashlib; "                                                                    \
	"print(hashlib.sha256(json.dumps(list(range(1000))).encode()).hexdigest())"

enum runner { RUN_SBX, RUN_BWRAP, RUNNERS };

static const char *const runner_name[RUNNERS] = {"sbx", "bwrap"};

struct workload {
	const char *name;
	const char *const *cmd; /* NULL-terminated, absolute path first */
	char *argv[RUNNERS][MAX_ARGS];
	double *ms[RUNNERS]; /* samples, `runs` of each */
};

static const char *const cmd_true[] = {"/bin/true", NULL};
static const char *const cmd_python[] = {"/usr/bin/python3", "-c", PY_SCRIPT, NULL};

/* The children get this environment and nothing of ours: sbx hands the
 * sandboxed process an empty one, bwrap passes its own through. */
static char *const child_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};

/* A temporary policy we wrote, removed on every way out. */
static char tmp_policy[PATH_MAX];

static void cleanup(void)
{
	if (tmp_policy[0])
		unlink(tmp_policy);
}

static void on_signal(int sig)
{
	if (tmp_policy[0])
		unlink(tmp_policy);
	_exit(128 + sig);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

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
		"Prints median, p10 and p90 in ms and the ratio of medians sbx/bwrap.\n"
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

static long parse_count(const char *opt, const char *s, long min, long max)
{
	char *end;

	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max) {
		fprintf(stderr, PROG ": %s: expected an integer in %ld..%ld, got '%s'\n", opt, min,
			max, s);
		exit(2);
	}
	return v;
}

struct capture {
	int out, err; /* memfds, or -1 for /dev/null */
};

/* Runs argv once; returns its wall time in ms and its wait status. An exec
 * failure in the child is reported here rather than as a status. */
static double run_once(char *const *argv, int devnull, const struct capture *cap, int *status)
{
	int ep[2];

	if (pipe2(ep, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	double t0 = bench_now_ms();
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		int out = cap && cap->out >= 0 ? cap->out : devnull;
		int err = cap && cap->err >= 0 ? cap->err : devnull;
		int e;

		close(ep[0]);
		if (dup2(devnull, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) {
			e = errno;
		} else {
			execve(argv[0], argv, child_env);
			e = errno;
		}
		if (write(ep[1], &e, sizeof(e)) != (ssize_t)sizeof(e))
			_exit(127);
		_exit(127);
	}
	close(ep[1]);
	while (waitpid(pid, status, 0) < 0)
		if (errno != EINTR)
			die("waitpid: %s", strerror(errno));
	double t1 = bench_now_ms();
	int e;
	ssize_t n = read(ep[0], &e, sizeof(e));
	close(ep[0]);
	if (n == (ssize_t)sizeof(e))
		die("cannot execute %s: %s\n  command: %s", argv[0], strerror(e),
		    bench_argv_str(argv));
	return t1 - t0;
}

/* The text captured in memfd `fd` (at most CAPTURE_MAX bytes, the tail). */
static char *capture_read(int fd)
{
	static char bufs[4][CAPTURE_MAX + 1];
	static unsigned next;
	char *buf = bufs[next++ % ARRAY_SIZE(bufs)];
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
		die("ftruncate: %s", strerror(errno));
	lseek(cap->out, 0, SEEK_SET);
	lseek(cap->err, 0, SEEK_SET);
}

static void fail(const char *phase, const struct workload *w, enum runner r, int status,
		 const struct capture *cap)
{
	fprintf(stderr, PROG ": %s: %s via %s failed: %s\n  command: %s\n", phase, w->name,
		runner_name[r], bench_status_str(status), bench_argv_str(w->argv[r]));
	if (cap) {
		const char *err = capture_read(cap->err);
		if (*err)
			fprintf(stderr, "  its stderr:\n%s%s", err,
				err[strlen(err) - 1] == '\n' ? "" : "\n");
	}
	exit(1);
}

static void add_arg(char **argv, size_t *n, const char *a)
{
	if (*n + 1 >= MAX_ARGS)
		die("too many arguments");
	argv[(*n)++] = (char *)a;
	argv[*n] = NULL;
}

/* One top-level entry of the host mirrored the way sbx's host image does:
 * a link is recreated with the same target, a real directory is bound
 * read-only, a missing one is left out. */
struct toplink {
	char path[16];
	char target[PATH_MAX];
	enum { TOP_ABSENT, TOP_LINK, TOP_DIR } kind;
};

static struct toplink tops[] = {
    {.path = "/bin"},	{.path = "/sbin"},  {.path = "/lib"},
    {.path = "/lib32"}, {.path = "/lib64"}, {.path = "/libx32"},
};

static void scan_toplinks(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(tops); i++) {
		struct toplink *t = &tops[i];
		struct stat st;
		ssize_t n = readlink(t->path, t->target, sizeof(t->target) - 1);

		if (n >= 0) {
			t->target[n] = '\0';
			t->kind = TOP_LINK;
		} else if (stat(t->path, &st) == 0 && S_ISDIR(st.st_mode)) {
			t->kind = TOP_DIR;
		} else {
			t->kind = TOP_ABSENT;
		}
	}
}

static void build_bwrap_argv(char **argv, const char *bwrap, const char *const *cmd)
{
	size_t n = 0;

	add_arg(argv, &n, bwrap);
	add_arg(argv, &n, "--unshare-all");
	add_arg(argv, &n, "--die-with-parent");
	add_arg(argv, &n, "--new-session");
	add_arg(argv, &n, "--ro-bind");
	add_arg(argv, &n, "/usr");
	add_arg(argv, &n, "/usr");
	for (size_t i = 0; i < ARRAY_SIZE(tops); i++) {
		if (tops[i].kind == TOP_LINK) {
			add_arg(argv, &n, "--symlink");
			add_arg(argv, &n, tops[i].target);
			add_arg(argv, &n, tops[i].path);
		} else if (tops[i].kind == TOP_DIR) {
			add_arg(argv, &n, "--ro-bind");
			add_arg(argv, &n, tops[i].path);
			add_arg(argv, &n, tops[i].path);
		}
	}
	add_arg(argv, &n, "--proc");
	add_arg(argv, &n, "/proc");
	add_arg(argv, &n, "--dev");
	add_arg(argv, &n, "/dev");
	add_arg(argv, &n, "--tmpfs");
	add_arg(argv, &n, "/tmp");
	for (size_t i = 0; cmd[i]; i++)
		add_arg(argv, &n, cmd[i]);
}

static void build_sbx_argv(char **argv, const char *helper, const char *policy,
			   const char *const *cmd)
{
	size_t n = 0;

	add_arg(argv, &n, helper);
	add_arg(argv, &n, "run");
	add_arg(argv, &n, "--policy");
	add_arg(argv, &n, policy);
	add_arg(argv, &n, "--");
	for (size_t i = 0; cmd[i]; i++)
		add_arg(argv, &n, cmd[i]);
}

static void default_helper(char *buf, size_t size)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n < 0)
		die("readlink /proc/self/exe: %s; pass --helper PATH", strerror(errno));
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	if ((size_t)snprintf(buf, size, "%s/../helper/sbx-helper", self) >= size)
		die("path of this binary too long; pass --helper PATH");
	char real[PATH_MAX];
	if (realpath(buf, real) && strlen(real) < size)
		memcpy(buf, real, strlen(real) + 1);
}

static const char *write_default_policy(void)
{
	const char *dir = getenv("TMPDIR");

	if (!dir || !*dir)
		dir = "/tmp";
	if ((size_t)snprintf(tmp_policy, sizeof(tmp_policy), "%s/sbx-bench-policy-XXXXXX.json",
			     dir) >= sizeof(tmp_policy))
		die("TMPDIR too long");
	int fd = mkstemps(tmp_policy, 5);
	if (fd < 0) {
		int e = errno;
		tmp_policy[0] = '\0';
		die("create temporary policy in %s: %s", dir, strerror(e));
	}
	size_t len = strlen(DEFAULT_POLICY);
	if (write(fd, DEFAULT_POLICY, len) != (ssize_t)len || fchmod(fd, 0644) < 0 || close(fd) < 0)
		die("write %s: %s", tmp_policy, strerror(errno));
	return tmp_policy;
}

struct host {
	char kernel[3 * 65 + 3];
	const char *cgroup;
	bool hybrid; /* v1 with a cgroup2 hierarchy at /sys/fs/cgroup/unified */
};

static void probe_host(struct host *h)
{
	struct utsname u;

	if (uname(&u) == 0)
		snprintf(h->kernel, sizeof(h->kernel), "%s %s %s", u.sysname, u.release, u.machine);
	else
		snprintf(h->kernel, sizeof(h->kernel), "unknown");
	h->hybrid = false;
	if (bench_fs_is("/sys/fs/cgroup/memory", CGROUP_SUPER_MAGIC)) {
		h->cgroup = "v1";
		h->hybrid = bench_fs_is("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC);
	} else if (bench_fs_is("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC)) {
		h->cgroup = "v2";
	} else {
		h->cgroup = "unknown";
	}
}

/* Percentile of sorted v[0..n-1], linear between closest ranks. */
static double pct(const double *v, size_t n, double p)
{
	double rank = p / 100.0 * (double)(n - 1);
	size_t lo = (size_t)rank;

	if (lo + 1 >= n)
		return v[n - 1];
	return v[lo] + (rank - (double)lo) * (v[lo + 1] - v[lo]);
}

struct stats {
	double p10, p50, p90;
};

static struct stats summarize(const double *samples, size_t n)
{
	double *v = malloc(n * sizeof(*v));

	if (!v)
		die("out of memory");
	memcpy(v, samples, n * sizeof(*v));
	qsort(v, n, sizeof(*v), bench_cmp_double);
	struct stats s = {pct(v, n, 10), pct(v, n, 50), pct(v, n, 90)};
	free(v);
	return s;
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

static void print_json(const struct host *h, struct workload *w, size_t nw, size_t runs,
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
		printf(",\"ratio_p50\":%.4f}", s[RUN_SBX].p50 / s[RUN_BWRAP].p50);
	}
	printf("]}\n");
}

static void print_table(const struct host *h, struct workload *w, size_t nw, size_t runs)
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
	printf("host: %s, cgroup %s%s\n", h->kernel, h->cgroup,
	       h->hybrid ? " (hybrid: cgroup2 also at /sys/fs/cgroup/unified)" : "");
}

static void check_exec(const char *what, const char *path, const char *hint)
{
	if (access(path, X_OK) < 0)
		die("%s %s: %s%s", what, path, strerror(errno), hint);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"helper", required_argument, NULL, 'H'},
	    {"policy", required_argument, NULL, 'p'},
	    {"warmup", required_argument, NULL, 'w'},
	    {"bwrap", required_argument, NULL, 'b'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	char helper_buf[PATH_MAX];
	const char *helper = NULL, *policy = NULL, *bwrap = "/usr/bin/bwrap";
	long runs = 30, warmup = 3;
	bool json = false;
	int c;

	while ((c = getopt_long(argc, argv, "hn:", opts, NULL)) != -1) {
		switch (c) {
		case 'H':
			helper = optarg;
			break;
		case 'p':
			policy = optarg;
			break;
		case 'n':
			runs = parse_count("-n", optarg, 1, 100000);
			break;
		case 'w':
			warmup = parse_count("--warmup", optarg, 0, 100000);
			break;
		case 'b':
			bwrap = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (getuid() == 0 || geteuid() == 0) {
		fprintf(stderr,
			PROG ": refusing to run as root (sbx-helper refuses root): "
			     "run as an unprivileged user, e.g. runuser -u sbx-test -- %s ...\n",
			argv[0]);
		return 1;
	}

	if (!helper) {
		default_helper(helper_buf, sizeof(helper_buf));
		helper = helper_buf;
	}
	check_exec("sbx-helper", helper, "; pass --helper PATH");
	check_exec("bwrap", bwrap, "; pass --bwrap PATH");
	check_exec("workload", cmd_true[0], "");
	check_exec("workload", cmd_python[0], "");
	if (policy) {
		if (access(policy, R_OK) < 0)
			die("policy %s: %s", policy, strerror(errno));
	} else {
		atexit(cleanup);
		struct sigaction sa = {.sa_handler = on_signal};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGHUP, &sa, NULL);
		policy = write_default_policy();
	}

	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0)
		die("open /dev/null: %s", strerror(errno));

	scan_toplinks();
	struct workload w[] = {{.name = "true", .cmd = cmd_true},
			       {.name = "python3", .cmd = cmd_python}};
	const size_t nw = ARRAY_SIZE(w);
	for (size_t i = 0; i < nw; i++) {
		build_sbx_argv(w[i].argv[RUN_SBX], helper, policy, w[i].cmd);
		build_bwrap_argv(w[i].argv[RUN_BWRAP], bwrap, w[i].cmd);
		for (int r = 0; r < RUNNERS; r++) {
			w[i].ms[r] = calloc((size_t)runs, sizeof(double));
			if (!w[i].ms[r])
				die("out of memory");
		}
	}
	fprintf(stderr, PROG ": sbx:   %s\n", bench_argv_str(w[0].argv[RUN_SBX]));
	fprintf(stderr, PROG ": bwrap: %s\n", bench_argv_str(w[0].argv[RUN_BWRAP]));

	/* Warm-up: the first iteration keeps the children's output, checks that
	 * both exit 0 and that both print the same thing; the rest only warm
	 * the page cache. */
	struct capture cap = {memfd_create("sbx-bench-out", MFD_CLOEXEC),
			      memfd_create("sbx-bench-err", MFD_CLOEXEC)};
	if (cap.out < 0 || cap.err < 0)
		die("memfd_create: %s", strerror(errno));
	if (warmup > 0)
		fprintf(stderr, PROG ": warm-up: %ld iteration%s\n", warmup,
			warmup == 1 ? "" : "s");
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
				die("warm-up: %s prints different output via sbx and bwrap\n"
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

				w[i].ms[r][it] = run_once(w[i].argv[r], devnull, NULL, &status);
				if (status != 0)
					fail("measured run", &w[i], r, status, NULL);
			}
		}
		if ((it + 1) % 10 == 0 || it + 1 == runs)
			fprintf(stderr, PROG ": %ld/%ld iterations\n", it + 1, runs);
	}

	struct host h;
	probe_host(&h);
	if (json)
		print_json(&h, w, nw, (size_t)runs, warmup);
	else
		print_table(&h, w, nw, (size_t)runs);
	for (size_t i = 0; i < nw; i++)
		for (int r = 0; r < RUNNERS; r++)
			free(w[i].ms[r]);
	close(devnull);
	if (fflush(stdout) != 0 || ferror(stdout))
		die("write output: %s", strerror(errno));
	return 0;
}
