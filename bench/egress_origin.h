/* SPDX-License-Identifier: Apache-2.0 */
/* The destination sbx-bench-egress downloads from: a minimal HTTP/1.1
 * server on 127.0.0.1 in a thread of the benchmark, fast enough not to be
 * what is measured. GET /big answers the big body straight from a memfd
 * with sendfile(2) (page cache to socket, no copy through user space), GET
 * /small a small body from memory; every answer says Connection: close and
 * ends the connection. One connection at a time (the benchmark's clients
 * are sequential); a peer that sends no whole head within 30 s is dropped. */
#ifndef SBX_BENCH_EGRESS_ORIGIN_H
#define SBX_BENCH_EGRESS_ORIGIN_H

#include <stddef.h>
#include <stdint.h>

struct origin_stats {
	uint64_t served;  /* answers 200 */
	uint64_t refused; /* other answers, and heads never completed */
};

/* Starts listening on a free port of 127.0.0.1 and serving; dies on
 * failure. big_bytes: the size of /big; small_bytes: of /small. */
void origin_start(uint64_t big_bytes, size_t small_bytes);
int origin_port(void);
/* Stops the thread and closes everything; safe to call twice. */
void origin_stop(void);
struct origin_stats origin_stats(void);

#endif
