/* SPDX-License-Identifier: Apache-2.0 */
/* A sha256 beside the copy: the thread that receives bytes and writes
 * them fills one of SBX_SHA256_PIPE_SLOTS buffers at a time and hands it
 * over; a thread of the pipe's own hashes the buffers in the order they
 * were handed over, into the digest each names. The copy and the hash
 * then cost the slower of the two, not their sum: on a CPU whose sha256
 * (SHA-NI) moves ~1.4 GiB/s, the hash alone is most of a same-host
 * upload's time (docs/dev/benchmarks.md, "Same-host upload").
 *
 * One owner: the thread that made the pipe calls every function; the
 * pipe's thread touches only the slots handed over and the digests they
 * name, until sbx_sha256_pipe_drain says it caught up. A pipe made with
 * `threaded` false hashes in sbx_sha256_pipe_push itself (small uploads:
 * no thread for a few KiB). */
#ifndef SBX_SHA256_PIPE_H
#define SBX_SHA256_PIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define SBX_SHA256_PIPE_SLOTS 4

struct sbx_sha256_pipe;

/* SBX_SHA256_PIPE_SLOTS buffers of slot_bytes each, and the hashing
 * thread when `threaded` (named thread_name, with a stack of
 * SBX_SHA256_PIPE_STACK: a sha256 needs little); when no thread can be
 * made (EAGAIN) the pipe hashes inline instead, as if `threaded` were
 * false (sbx_sha256_pipe_threaded says which). NULL with err when out of
 * memory. */
#define SBX_SHA256_PIPE_STACK (256 * 1024)
struct sbx_sha256_pipe *sbx_sha256_pipe_new(size_t slot_bytes, bool threaded,
					    const char *thread_name, struct sbx_err *err);
/* Whether a thread of the pipe's own hashes (false: push hashes). */
bool sbx_sha256_pipe_threaded(const struct sbx_sha256_pipe *p);
/* The next buffer to fill (slot_bytes long): waits until the hashing
 * thread is done with it. */
uint8_t *sbx_sha256_pipe_slot(struct sbx_sha256_pipe *p);
/* The buffer sbx_sha256_pipe_slot gave, len bytes of it, hashed into md
 * (an EVP_MD_CTX of sha256 the caller owns and does not touch until the
 * next drain). -1 with err when an earlier hash failed. */
int sbx_sha256_pipe_push(struct sbx_sha256_pipe *p, void *md, size_t len, struct sbx_err *err);
/* Waits until every buffer handed over is hashed: then the digests are
 * the caller's again. -1 with err when a hash failed. */
int sbx_sha256_pipe_drain(struct sbx_sha256_pipe *p, struct sbx_err *err);
/* Stops the thread (what it had not hashed is dropped) and frees. */
void sbx_sha256_pipe_free(struct sbx_sha256_pipe *p);
void sbx_sha256_pipe_freep(struct sbx_sha256_pipe **p);

#endif
