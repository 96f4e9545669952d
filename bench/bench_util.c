/* SPDX-License-Identifier: Apache-2.0 */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "sleep.h"
#include "util.h"

const char *bench_prog = "sbx-bench";

__attribute__((format(printf, 2, 0))) static void vnote(int errnum, const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", bench_prog);
	vfprintf(stderr, fmt, ap);
	if (errnum)
		fprintf(stderr, ": %s", strerror(errnum));
	fputc('\n', stderr);
}

void bench_die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout); /* what was printed comes before why it stopped */
	va_start(ap, fmt);
	vnote(0, fmt, ap);
	va_end(ap);
	exit(1);
}

void bench_die_errno(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	fflush(stdout);
	va_start(ap, fmt);
	vnote(saved, fmt, ap);
	va_end(ap);
	exit(1);
}

void bench_note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vnote(0, fmt, ap);
	va_end(ap);
}

long bench_parse_count(const char *opt, const char *s, long min, long max)
{
	char *end;

	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max) {
		fprintf(stderr, "%s: %s: expected an integer in %ld..%ld, got '%s'\n", bench_prog,
			opt, min, max, s);
		exit(2);
	}
	return v;
}

void bench_refuse_root(const char *argv0, const char *why)
{
	if (getuid() != 0 && geteuid() != 0)
		return;
	fprintf(stderr,
		"%s: refusing to run as root (%s): run as an unprivileged user, e.g. "
		"runuser -u sbx-test -- %s ...\n",
		bench_prog, why, argv0);
	exit(1);
}

void bench_default_path(char *buf, size_t size, const char *rel, const char *opt)
{
	char self[PATH_MAX], real[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n < 0)
		bench_die_errno("readlink /proc/self/exe (pass %s PATH)", opt);
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	if ((size_t)snprintf(buf, size, "%s/%s", self, rel) >= size)
		bench_die("path of this binary too long; pass %s PATH", opt);
	if (realpath(buf, real) && strlen(real) < size)
		memcpy(buf, real, strlen(real) + 1);
}

void bench_check_exec(const char *what, const char *path, const char *hint)
{
	if (access(path, X_OK) < 0)
		bench_die_errno("%s %s%s", what, path, hint);
}

void bench_on_signals(void (*handler)(int))
{
	struct sigaction sa = {.sa_handler = handler};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

void bench_add_arg(char **argv, size_t *n, const char *a)
{
	if (*n + 1 >= BENCH_MAX_ARGS)
		bench_die("too many arguments");
	argv[(*n)++] = (char *)a;
	argv[*n] = NULL;
}

/* bench_run and bench_run_stage: with running, the child dies by SIGTERM
 * with us (it cleans up), its pid is in *running while it runs, and an
 * interrupt does not kill it (the caller's handler passes SIGTERM on; we
 * wait). Without, an interrupt (*stop) kills it. */
static double run_child(char *const *argv, char *const *env, const char *dir, int in, int out,
			int err, volatile sig_atomic_t *stop, volatile pid_t *running, int *status)
{
	_cleanup_close_pair_ int ep[2] = SBX_PAIR_INIT; /* the child's exec errno */

	if (pipe2(ep, O_CLOEXEC) < 0)
		bench_die_errno("pipe");
	fflush(NULL);
	double t0 = bench_now_ms();
	pid_t pid = fork();
	if (pid < 0)
		bench_die_errno("fork");
	if (pid == 0) {
		int e = 0;

		if (prctl(PR_SET_PDEATHSIG, running ? SIGTERM : SIGKILL) < 0 || dup2(in, 0) < 0 ||
		    dup2(out, 1) < 0 || dup2(err, 2) < 0 || (dir && chdir(dir) < 0)) {
			e = errno;
		} else {
			execvpe(argv[0], argv, env);
			e = errno;
		}
		if (write(ep[1], &e, sizeof(e)) != (ssize_t)sizeof(e))
			_exit(127);
		_exit(127);
	}
	sbx_closep(&ep[1]);
	ep[1] = -1;
	if (running) {
		*running = pid;
		if (stop && *stop) /* a signal before *running was set */
			kill(pid, SIGTERM);
	}
	while (waitpid(pid, status, 0) < 0) {
		if (errno == EINTR && (running || !stop || !*stop))
			continue;
		int e = errno;
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		if (e != EINTR) {
			errno = e;
			bench_die_errno("waitpid");
		}
		bench_die("interrupted");
	}
	if (running)
		*running = -1;
	double t1 = bench_now_ms();
	int e;
	if (read(ep[0], &e, sizeof(e)) == (ssize_t)sizeof(e)) {
		errno = e;
		if (!running)
			bench_die_errno("cannot execute %s (command: %s)", argv[0],
					bench_argv_str(argv));
		/* A stage that cannot start is that stage's failure (exit 127). */
		fprintf(stderr, "cannot execute %s: %s\n", argv[0], strerror(e));
	}
	return t1 - t0;
}

double bench_run(char *const *argv, char *const *env, const char *dir, int in, int out, int err,
		 volatile sig_atomic_t *stop, int *status)
{
	return run_child(argv, env, dir, in, out, err, stop, NULL, status);
}

double bench_run_stage(char *const *argv, int in, int out, volatile sig_atomic_t *stop,
		       volatile pid_t *running, int *status)
{
	return run_child(argv, environ, NULL, in, out, STDERR_FILENO, stop, running, status);
}

/* Appends to buf[size], truncating; *len counts what would have been written. */
static void append(char *buf, size_t size, size_t *len, const char *s, size_t n)
{
	size_t room = size - 1; /* size >= 1 */

	for (size_t i = 0; i < n; i++, (*len)++)
		if (*len < room)
			buf[*len] = s[i];
	buf[*len < room ? *len : room] = '\0';
}

const char *bench_argv_str(char *const *argv)
{
	static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				   "0123456789-_./=:,+@%";
	static char buf[8192];
	size_t len = 0;

	buf[0] = '\0';
	for (size_t i = 0; argv[i]; i++) {
		const char *a = argv[i];

		if (i)
			append(buf, sizeof(buf), &len, " ", 1);
		if (*a && strspn(a, safe) == strlen(a)) {
			append(buf, sizeof(buf), &len, a, strlen(a));
			continue;
		}
		append(buf, sizeof(buf), &len, "'", 1);
		for (const char *p = a; *p; p++) {
			if (*p == '\'')
				append(buf, sizeof(buf), &len, "'\\''", 4);
			else
				append(buf, sizeof(buf), &len, p, 1);
		}
		append(buf, sizeof(buf), &len, "'", 1);
	}
	return buf;
}

const char *bench_status_str(int status)
{
	static char buf[96];

	if (WIFEXITED(status))
		snprintf(buf, sizeof(buf), "exit status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, sizeof(buf), "killed by signal %d (%s)", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	else
		snprintf(buf, sizeof(buf), "wait status 0x%x", (unsigned)status);
	return buf;
}

double bench_now_ms(void)
{
	return (double)sbx_mono_ns() / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double bench_pct(const double *samples, size_t n, double p)
{
	if (!n)
		return 0;
	double *v = malloc(n * sizeof(*v));
	if (!v)
		bench_die("out of memory");
	memcpy(v, samples, n * sizeof(*v));
	qsort(v, n, sizeof(*v), cmp_double);
	double rank = p / 100.0 * (double)(n - 1);
	size_t lo = (size_t)rank;
	double x = lo + 1 >= n ? v[n - 1] : v[lo] + (rank - (double)lo) * (v[lo + 1] - v[lo]);
	free(v);
	return x;
}

static bool fs_is(const char *path, unsigned long magic)
{
	struct statfs sf;

	return statfs(path, &sf) == 0 && (unsigned long)sf.f_type == magic;
}

void bench_probe_host(struct bench_host *h)
{
	struct utsname u;

	if (uname(&u) == 0)
		snprintf(h->kernel, sizeof(h->kernel), "%s %s %s", u.sysname, u.release, u.machine);
	else
		snprintf(h->kernel, sizeof(h->kernel), "unknown");
	h->hybrid = false;
	if (fs_is("/sys/fs/cgroup/memory", CGROUP_SUPER_MAGIC)) {
		h->cgroup = "v1";
		h->hybrid = fs_is("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC);
	} else if (fs_is("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC)) {
		h->cgroup = "v2";
	} else {
		h->cgroup = "unknown";
	}
	h->cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (getloadavg(h->load, 3) != 3)
		h->load[0] = h->load[1] = h->load[2] = -1;
}

int bench_option_other(int opt, void (*usage)(FILE *))
{
	usage(opt == 'h' ? stdout : stderr);
	return opt == 'h' ? 0 : 2;
}

int bench_no_operands(int argc, char **argv, int optind_, void (*usage)(FILE *))
{
	if (optind_ >= argc)
		return 0;
	bench_note("unexpected argument '%s'", argv[optind_]);
	usage(stderr);
	return 2;
}

void bench_find_sbxd_helper(const char **sbxd, char *sbxd_buf, const char **helper,
			    char *helper_buf, size_t size)
{
	if (!*sbxd) {
		bench_default_path(sbxd_buf, size, "../server/sbxd", "--sbxd");
		*sbxd = sbxd_buf;
	}
	if (!*helper) {
		bench_default_path(helper_buf, size, "../helper/sbx-helper", "--helper");
		*helper = helper_buf;
	}
	bench_check_exec("sbxd", *sbxd, " (pass --sbxd PATH)");
	bench_check_exec("sbx-helper", *helper, " (pass --helper PATH)");
}

void bench_make_absolute(const char **path, char *buf, size_t size)
{
	char real[PATH_MAX];

	if (!realpath(*path, real))
		bench_die_errno("%s", *path);
	snprintf(buf, size, "%s", real);
	*path = buf;
}

pid_t bench_spawn(char *const *argv, char *const *env, const char *logfile)
{
	_cleanup_close_ int out = open(logfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	_cleanup_close_ int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

	if (out < 0 || null < 0)
		bench_die_errno("open %s", logfile);
	fflush(NULL);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		bench_die_errno("fork");
	if (pid == 0) {
		setpgid(0, 0);
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
			_exit(1);
		if (dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
			_exit(127);
		if (env)
			execve(argv[0], argv, env);
		else
			execv(argv[0], argv);
		dprintf(STDERR_FILENO, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return pid;
}

void bench_stop_child(pid_t *pid, const char *what, int timeout_ms)
{
	if (*pid <= 0)
		return;
	kill(*pid, SIGTERM);
	for (int waited = 0;; waited += 20) {
		pid_t p = waitpid(*pid, NULL, WNOHANG);
		if (p == *pid || (p < 0 && errno != EINTR))
			break;
		if (waited >= timeout_ms) {
			bench_note("%s did not stop within %d s of SIGTERM; killing it", what,
				   timeout_ms / 1000);
			kill(*pid, SIGKILL);
			waitpid(*pid, NULL, 0);
			break;
		}
		sbx_sleep_ms(20);
	}
	*pid = -1;
}
