/* SPDX-License-Identifier: Apache-2.0 */
/* A helper's last words: what it writes on stderr from the moment sbxd
 * stops reading that pipe as it goes (a Teardown's monitor stopped, a pool
 * member destroyed) until it is reaped: its DestroyRequest's work, a
 * sanitizer's report at its exit. Read while the helper is waited for, so
 * that a helper saying more than a pipe holds is never blocked into the
 * kill; the first LAST_WORDS_BYTES kept, the rest counted. */
#ifndef SBX_RUNS_LAST_WORDS_H
#define SBX_RUNS_LAST_WORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define LAST_WORDS_BYTES 16384

struct last_words {
	int fd;	    /* the helper's stderr pipe (non-blocking), -1 once at its end */
	char *kept; /* LAST_WORDS_BYTES, or NULL: everything is only counted */
	size_t len;
	uint64_t lost;
};

/* Reads fd (the pipe stays the caller's; -1: nothing to read). */
void last_words_init(struct last_words *lw, int fd);
/* What is in the pipe now, never a wait. */
void last_words_read(struct last_words *lw);
/* pid reaped within timeout_ms (its status in *status), its stderr read
 * meanwhile; false when it did not exit in time. */
bool last_words_reap(struct last_words *lw, pid_t pid, int pidfd, int timeout_ms, int *status);
void last_words_free(struct last_words *lw);

#endif
