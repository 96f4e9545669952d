/* SPDX-License-Identifier: Apache-2.0 */
/* Request-id deduplication: a retried CreateRun, PutInput, Exec, Signal,
 * WriteStdin, ExportArtifacts, ImportInputs or Teardown happens once (a
 * retried Teardown gets the manifest, not NOT_FOUND for a run that is
 * gone; a resent export or import waits for the first's answer instead
 * of connecting to the caller's socket again).
 *
 * REQ re-sends a request after 60 s without an answer and after every
 * reconnect, and clients retry on their own, so the same (identity,
 * request_id) can arrive while the first is still running or after it
 * answered. The first one runs; a repeat gets the first one's packed answer,
 * byte for byte, or (while it still runs) is parked and answered when it
 * ends. A repeat whose method or body differs is refused: reusing an id for
 * another request is a client bug that would otherwise lose data silently.
 *
 * Bounded: entries live ttl_ms after their answer, at most max_entries and
 * max_bytes of answers (oldest finished ones evicted), at most max_parked
 * repeats waiting in all and max_parked_per_identity of one caller's (sbxd:
 * its contexts, and half of a caller's share of them, rpc_server.c: a
 * parked repeat holds one, so one caller's repeats never take another's
 * place, nor every place of its own). One caller holds at most a quarter of
 * the entries and of the bytes, and past that evicts its own oldest
 * answers, never another's; an answer larger than a quarter of max_bytes
 * is not remembered. The table as a whole, once full (four or more callers
 * at their quarter), evicts the oldest finished answers whoever's they are:
 * such a caller's retry then runs again (review 44). */
#ifndef SBX_RPC_DEDUPE_H
#define SBX_RPC_DEDUPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rpc_dedupe;
struct rpc_dedupe_entry;

/* Embedded in a parked call. */
struct rpc_dedupe_waiter {
	struct rpc_dedupe_waiter *next;
};

struct rpc_dedupe_limits {
	size_t max_entries;
	size_t max_bytes;
	size_t max_parked;
	size_t max_parked_per_identity;
	int64_t ttl_ms;
};

enum rpc_dedupe_verdict {
	DEDUPE_FIRST,	 /* run it, then rpc_dedupe_finish(*first, ...) */
	DEDUPE_REPLAY,	 /* answer with *replay (malloc'd copy; caller frees) */
	DEDUPE_PARKED,	 /* don't answer: notify will, when the first ends */
	DEDUPE_MISMATCH, /* the id was used for a different request */
	DEDUPE_BUSY,	 /* the first runs, but this repeat cannot be parked (too
			    many waiting: all, or the caller's) */
	DEDUPE_NOMEM,	 /* the first ran, but there was no memory for a copy of its
			    answer: retry here */
	DEDUPE_FULL,	 /* no room or memory for a first's entry: nothing ran, try
			    later */
	DEDUPE_ABSENT,	 /* rpc_dedupe_repeat only: no first has begun (nothing
			    was added) */
};

struct rpc_dedupe *rpc_dedupe_new(const struct rpc_dedupe_limits *lim);
void rpc_dedupe_free(struct rpc_dedupe *d);

/* fingerprint: sha256 of what makes two requests the same (method, body). */
enum rpc_dedupe_verdict rpc_dedupe_begin(struct rpc_dedupe *d, const char *identity,
					 const char *request_id, const uint8_t fingerprint[32],
					 struct rpc_dedupe_waiter *w,
					 struct rpc_dedupe_entry **first, uint8_t **replay,
					 size_t *replay_len);

/* rpc_dedupe_begin for a repeat that must not run: the same verdicts for
 * a first that began (REPLAY, PARKED, MISMATCH, BUSY, NOMEM), ABSENT where
 * begin would have made an entry. For a repeat no worker can take whose
 * first runs for another connection (rpc_server.c): parked, it still gets
 * that first's answer. */
enum rpc_dedupe_verdict rpc_dedupe_repeat(struct rpc_dedupe *d, const char *identity,
					  const char *request_id, const uint8_t fingerprint[32],
					  struct rpc_dedupe_waiter *w, uint8_t **replay,
					  size_t *replay_len);

/* Whether (identity, request_id) has an entry: its first is running, or
 * answered and remembered. Costs one lookup under the table's lock (no
 * fingerprint), for answering a repeat that cannot be given a worker. */
bool rpc_dedupe_seen(struct rpc_dedupe *d, const char *identity, const char *request_id);

/* The first call's answer. keep: remember it for repeats (false for answers
 * that say "try again", so the retry really runs). Every parked repeat is
 * passed to notify with the same bytes, outside the lock; e is gone after. */
void rpc_dedupe_finish(struct rpc_dedupe *d, struct rpc_dedupe_entry *e, const uint8_t *answer,
		       size_t len, bool keep,
		       void (*notify)(struct rpc_dedupe_waiter *w, const uint8_t *answer,
				      size_t len));

#endif
