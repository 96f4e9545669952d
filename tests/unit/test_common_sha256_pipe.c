/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of common/sha256_pipe.c: buffers handed over in turn to three
 * digests, threaded and not, give each digest what a one-pass sha256 of
 * its bytes gives; a slot is never handed out while the thread still
 * hashes it (each buffer is overwritten as soon as it is handed over the
 * next time round, so a hash of a reused slot would differ); freeing with
 * buffers not yet hashed stops the thread; when no thread can be made
 * (the uid's process limit spent) the pipe hashes inline and the digests
 * are the same. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "check.h"
#include "sha256.h"
#include "sha256_pipe.h"

#define SLOT  4096
#define FILES 3

static void fill(uint8_t *buf, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)((seed * 2654435761u + i * 40503u) >> 7);
}

/* Pushes `rounds` buffers of varying lengths into FILES digests (round i
 * goes to digest i % FILES), draining at every `drain_every`-th; then
 * checks each digest against a one-pass sha256 of the same bytes. */
static void run(bool threaded, int rounds, int drain_every)
{
	struct sbx_err err = {0};
	struct sbx_sha256_pipe *p = sbx_sha256_pipe_new(SLOT, threaded, "test-hash", &err);
	EVP_MD_CTX *md[FILES];
	uint8_t *whole[FILES];
	size_t len[FILES] = {0};
	bool ok = p != NULL;

	check(p, "a pipe is made, asked %s (%s)", threaded ? "threaded" : "inline", err.msg);
	if (p)
		threaded = sbx_sha256_pipe_threaded(p);

	for (int f = 0; f < FILES; f++) {
		md[f] = EVP_MD_CTX_new();
		ok = ok && md[f] && EVP_DigestInit_ex(md[f], EVP_sha256(), NULL);
		whole[f] = malloc((size_t)rounds * SLOT);
		ok = ok && whole[f];
	}
	for (int i = 0; ok && i < rounds; i++) {
		uint8_t *buf = sbx_sha256_pipe_slot(p);
		size_t n = 1 + (size_t)(i * 977) % SLOT;
		int f = i % FILES;

		fill(buf, n, (unsigned)i);
		memcpy(whole[f] + len[f], buf, n);
		len[f] += n;
		ok = sbx_sha256_pipe_push(p, md[f], n, &err) == 0;
		if (ok && drain_every && i % drain_every == 0)
			ok = sbx_sha256_pipe_drain(p, &err) == 0;
	}
	ok = ok && sbx_sha256_pipe_drain(p, &err) == 0;
	check(ok, "%s, %d buffers: every push and drain succeeds (%s)",
	      threaded ? "threaded" : "inline", rounds, err.msg);
	for (int f = 0; f < FILES; f++) {
		unsigned char got[32], want[32];
		unsigned int mdlen = 0;

		bool same = ok && EVP_DigestFinal_ex(md[f], got, &mdlen) && mdlen == 32 &&
			    sbx_sha256_buf(whole[f], len[f], want, &err) == 0 &&
			    memcmp(got, want, 32) == 0;
		check(same, "%s, %d buffers: digest %d is the sha256 of its %zu bytes",
		      threaded ? "threaded" : "inline", rounds, f, len[f]);
		EVP_MD_CTX_free(md[f]);
		free(whole[f]);
	}
	sbx_sha256_pipe_free(p);
}

/* Freed with buffers still queued: the thread stops and is joined (ASan,
 * TSan and valgrind runs of this test see no leak and no race). */
static void free_while_queued(void)
{
	struct sbx_err err = {0};
	struct sbx_sha256_pipe *p = sbx_sha256_pipe_new(1 << 20, true, NULL, &err);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	bool ok = p && md && EVP_DigestInit_ex(md, EVP_sha256(), NULL);

	for (int i = 0; ok && i < SBX_SHA256_PIPE_SLOTS; i++) {
		memset(sbx_sha256_pipe_slot(p), i, 1 << 20);
		ok = sbx_sha256_pipe_push(p, md, 1 << 20, &err) == 0;
	}
	sbx_sha256_pipe_free(p);
	check(ok, "freed with %d MiB queued: stops", SBX_SHA256_PIPE_SLOTS);
	EVP_MD_CTX_free(md);
}

static void *nothing(void *arg)
{
	return arg;
}

/* The soft RLIMIT_NPROC at 1, so that no thread can be made (the test's
 * own process is the one its uid has: EAGAIN, as a sandbox of sbxd's uid
 * spending the limit would make it): the pipe asked for a thread hashes
 * inline, and right. Root is not held by the limit: skipped. */
static void no_thread(void)
{
	struct rlimit was, one;
	pthread_t t;
	int e;

	if (geteuid() == 0) {
		printf("skip: no thread to be had: root ignores RLIMIT_NPROC\n");
		return;
	}
	check(getrlimit(RLIMIT_NPROC, &was) == 0, "getrlimit");
	one = was;
	one.rlim_cur = 1;
	check(setrlimit(RLIMIT_NPROC, &one) == 0, "soft RLIMIT_NPROC set to 1");
	e = pthread_create(&t, NULL, nothing, NULL);
	if (e == 0)
		pthread_join(t, NULL);
	check(e == EAGAIN, "with the limit spent, pthread_create fails EAGAIN (%d)", e);

	struct sbx_err err = {0};
	struct sbx_sha256_pipe *p = sbx_sha256_pipe_new(SLOT, true, "test-hash", &err);

	check(p && !sbx_sha256_pipe_threaded(p), "no thread to be had: the pipe hashes inline (%s)",
	      err.msg);
	sbx_sha256_pipe_free(p);
	run(true, 200, 0);
	check(setrlimit(RLIMIT_NPROC, &was) == 0, "RLIMIT_NPROC restored");
}

int main(void)
{
	run(false, 50, 0);
	run(true, 1, 0);
	run(true, 1000, 0);
	run(true, 1000, 7);
	free_while_queued();
	no_thread();
	return check_done();
}
