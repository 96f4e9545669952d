/* SPDX-License-Identifier: Apache-2.0 */
/* What a benchmark that starts its own sbxd needs around it: one scratch
 * directory (made at start, removed at the end, links never followed),
 * paths in it, the tail of a log for error messages, a free loopback port,
 * a token's digest as sbxd's config wants it, and the interrupt flag that
 * SIGINT/SIGTERM set. The directory and the flag are this file's. */
#ifndef SBX_BENCH_SCRATCH_H
#define SBX_BENCH_SCRATCH_H

#include <signal.h>
#include <stddef.h>

extern volatile sig_atomic_t bench_interrupted;

/* The signal handler that only sets bench_interrupted. */
void bench_on_signal(int sig);
/* Dies "interrupted" once a signal came. */
void bench_check_interrupt(void);
/* Makes the scratch directory under $TMPDIR (or /tmp when that is unset or
 * too long for an ipc socket's sun_path inside it); dies on failure. */
void bench_scratch_make(void);
/* Removes it and everything in it; safe to call twice. */
void bench_scratch_remove(void);
const char *bench_scratch_dir(void);
/* buf = <scratch>/name; dies if it does not fit. */
void bench_scratch_path(char *buf, size_t size, const char *name);
/* The last bytes of a file, as one line without trailing newlines. */
const char *bench_tail_of(const char *path);
/* Runs argv (on env's PATH) in dir (NULL: here), stdin on /dev/null,
 * stdout into outfile (NULL: /dev/null), stderr into <scratch>/child.stderr;
 * dies naming what, the command and that stderr's tail unless it exits 0.
 * Returns the wall time in ms (bench_run's). */
double bench_run_ok(const char *what, char *const *argv, char *const *env, const char *dir,
		    const char *outfile);
/* A TCP port on 127.0.0.1 that was free a moment ago. */
int bench_free_port(void);
/* sha256 of s as 64 lowercase hex digits. */
void bench_sha256_hex_of(const char *s, char hex[65]);

#endif
