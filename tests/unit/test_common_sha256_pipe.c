/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of common/sha256_pipe.c: buffers handed over in turn to three
 * digests, threaded and not, give each digest what a one-pass sha256 of
 * its bytes gives; a slot is never handed out while the thread still
 * hashes it (each buffer is overwritten as soon as it is handed over the
 * next time round, so a hash of a reused slot would differ); freeing with
 * buffers not yet hashed stops the thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
	run(false, 50, 0);
	run(true, 1, 0);
	run(true, 1000, 0);
	run(true, 1000, 7);
	free_while_queued();
	return check_done();
}
