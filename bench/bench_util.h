/* SPDX-License-Identifier: Apache-2.0 */
/* What both benchmark programs share: one way to fail, to read options,
 * to find the binaries they measure, to time and summarize, and to say
 * which host the figures come from. */
#ifndef SBX_BENCH_UTIL_H
#define SBX_BENCH_UTIL_H

#include <stdio.h>

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define BENCH_MAX_ARGS 64

/* The program's name, first in every message; set by main. */
extern const char *bench_prog;

/* "prog: message" on stderr, then exit(1) (atexit handlers clean up). */
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* ... appending ": strerror(errno)". */
void bench_die_errno(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* "prog: message" on stderr, for progress. */
void bench_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The option idiom: an integer option in min..max, or exit 2 naming it. */
long bench_parse_count(const char *opt, const char *s, long min, long max);
/* The getopt_long cases every benchmark shares: -h prints usage on stdout
 * (returns 0), anything unknown prints it on stderr (returns 2); main
 * returns what this returns. */
int bench_option_other(int opt, void (*usage)(FILE *));
/* After the options: 0, or 2 with a message and usage when operands are
 * left (no benchmark takes any). */
int bench_no_operands(int argc, char **argv, int optind_, void (*usage)(FILE *));
/* Exits 1 unless run by an unprivileged user; why: who refuses root. */
void bench_refuse_root(const char *argv0, const char *why);
/* rel resolved against the directory of this binary, into buf (the default
 * of a --sbxd or --helper option opt). */
void bench_default_path(char *buf, size_t size, const char *rel, const char *opt);
/* Dies unless path is executable, naming what it is and (hint, e.g.
 * " (pass --helper PATH)") how to choose another. */
void bench_check_exec(const char *what, const char *path, const char *hint);
/* The --sbxd and --helper defaults (../server/sbxd and ../helper/sbx-helper
 * next to this binary, into the size-byte buffers) when *sbxd or *helper is
 * NULL, then the check that both are executable: the benchmarks that start
 * a private sbxd all begin so. */
void bench_find_sbxd_helper(const char **sbxd, char *sbxd_buf, const char **helper,
			    char *helper_buf, size_t size);
/* *path made absolute in buf (sbxd's config wants an absolute helper path),
 * or die naming it. */
void bench_make_absolute(const char **path, char *buf, size_t size);
/* handler for SIGINT, SIGTERM and SIGHUP. */
void bench_on_signals(void (*handler)(int));

/* Runs argv (looked up on env's PATH) in dir (NULL: here) with stdin,
 * stdout and stderr on the fds in, out and err; returns the wall time in ms
 * around fork+exec+waitpid and the wait status in *status. A command that
 * cannot be executed is fatal. Once *stop (if non-NULL) is set by a signal
 * handler, the child is killed and the program dies "interrupted". The
 * child dies with us (PR_SET_PDEATHSIG). */
double bench_run(char *const *argv, char *const *env, const char *dir, int in, int out, int err,
		 volatile sig_atomic_t *stop, int *status);

/* bench_run for a program that cleans up after itself (a stage of
 * sbx-bench): stderr is ours, it gets SIGTERM rather than SIGKILL if we
 * die, *running holds its pid while it runs (for a signal handler to pass
 * SIGTERM on), and an interrupt (*stop) does not kill it: we wait for it. */
double bench_run_stage(char *const *argv, int in, int out, volatile sig_atomic_t *stop,
		       volatile pid_t *running, int *status);

/* Forks argv[0] with argv (and env; NULL: ours), stdin on /dev/null,
 * stdout and stderr into logfile, in its own process group (a ^C reaches
 * us, and we stop it); it gets SIGTERM if we die. For the daemons a
 * benchmark keeps running beside it (sbxd, tinyproxy, a raw server). */
pid_t bench_spawn(char *const *argv, char *const *env, const char *logfile);
/* SIGTERM to *pid, then SIGKILL after timeout_ms with a note naming what;
 * *pid becomes -1. Nothing when *pid <= 0. */
void bench_stop_child(pid_t *pid, const char *what, int timeout_ms);

/* Appends a to the NULL-terminated argv[BENCH_MAX_ARGS] holding *n. */
void bench_add_arg(char **argv, size_t *n, const char *a);
/* argv as one shell-quoted line, for messages (a static buffer). */
const char *bench_argv_str(char *const *argv);
/* "exit status N", "killed by signal N (name)" (a static buffer). */
const char *bench_status_str(int status);

/* Milliseconds on common/clock.h's monotonic clock, as a double. */
double bench_now_ms(void);
/* Percentile p of samples[0..n-1], linear between closest ranks; 0 if n is 0. */
double bench_pct(const double *samples, size_t n, double p);

struct bench_host {
	char kernel[3 * 65 + 3];
	const char *cgroup; /* "v1", "v2", "unknown" */
	bool hybrid;	    /* v1 with a cgroup2 hierarchy at /sys/fs/cgroup/unified */
	long cpus;
	double load[3]; /* -1 when unknown */
};
void bench_probe_host(struct bench_host *h);

#endif
