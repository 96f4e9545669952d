/* SPDX-License-Identifier: Apache-2.0 */
/* Closes that wait for the kernel, off the threads that answer callers.
 *
 * The last close of an AF_PACKET socket waits for an RCU grace period
 * (packet_release calls synchronize_net): measured 8-12 ms on a HZ=250
 * kernel at rest, for every exec of a run with egress deny, whose connect
 * watch is one (runs_deny.c). Closed by a run's monitor thread, that wait
 * held back the run's next exec's events. The monitors hand them to a
 * closer instead: a few threads that only close, whose waits run side by
 * side (concurrent waiters share grace periods), so a burst of ended execs
 * costs about one. (A run's end closes what its monitor did not hand over
 * itself, on the time of whoever ends it: the closer is every run's.)
 *
 * A run's removed directories go the same way (run.c close_removed_dir):
 * on ext4 their last close frees the inode under the journal, which a
 * Teardown's answer need not wait for.
 *
 * Bounded: at most SBX_CLOSER_FDS descriptors wait or are being closed
 * (counted in sbxd's descriptor reserve, rpc_server.c); past that, or
 * without a closer, the close is the caller's, as before. Directories may
 * take only RUNS_CLOSER_DIRS_QUEUED of the places, so that a caller
 * tearing down many runs on a busy disk never leaves the other runs'
 * watch sockets to their monitors' threads. */
#ifndef SBX_RUNS_CLOSER_H
#define SBX_RUNS_CLOSER_H

#include "config.h"
#include "err.h"

#define RUNS_CLOSER_THREADS 4
/* Each thread holds the one it closes beside those waiting. */
#define RUNS_CLOSER_QUEUED (SBX_CLOSER_FDS - RUNS_CLOSER_THREADS)
/* Of those, what directories may fill: the rest stays for sockets. */
#define RUNS_CLOSER_DIRS_QUEUED (RUNS_CLOSER_QUEUED - 4)

struct runs_closer;

/* The closer threads, started. NULL with err on failure. */
struct runs_closer *closer_start(struct sbx_err *err);

/* Closes fd (>= 0; -1 is ignored) on a closer thread, or right here when
 * c is NULL, stopped, or has RUNS_CLOSER_QUEUED waiting already. */
void closer_close(struct runs_closer *c, int fd);

/* closer_close for a removed directory: queued only while fewer than
 * RUNS_CLOSER_DIRS_QUEUED wait. */
void closer_close_dir(struct runs_closer *c, int fd);

/* Closes what still waits, joins the threads, frees c (NULL is fine). */
void closer_stop(struct runs_closer *c);

#endif
