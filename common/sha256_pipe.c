/* SPDX-License-Identifier: Apache-2.0 */
/* sha256_pipe.h: a ring of SBX_SHA256_PIPE_SLOTS buffers between the
 * owner, which fills slot[filled % SLOTS], and the hashing thread, which
 * hashes slot[hashed % SLOTS]; hashed <= filled <= hashed + SLOTS. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "sha256_pipe.h"

struct slot {
	uint8_t *buf;
	size_t len;
	EVP_MD_CTX *md;
};

struct sbx_sha256_pipe {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct slot slot[SBX_SHA256_PIPE_SLOTS];
	uint64_t filled; /* [mu] slots handed over, ever */
	uint64_t hashed; /* [mu] slots hashed, ever */
	bool failed;	 /* [mu] an EVP_DigestUpdate failed */
	bool stop;	 /* [mu] the owner is freeing the pipe */
	bool threaded;
	pthread_t thread;
};

static void *hash_slots(void *arg)
{
	struct sbx_sha256_pipe *p = arg;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->hashed == p->filled)
			pthread_cond_wait(&p->cv, &p->mu);
		if (p->stop)
			break;
		/* The owner leaves this slot alone until hashed moves past it. */
		struct slot *s = &p->slot[p->hashed % SBX_SHA256_PIPE_SLOTS];
		pthread_mutex_unlock(&p->mu);
		bool ok = EVP_DigestUpdate(s->md, s->buf, s->len) == 1;
		pthread_mutex_lock(&p->mu);
		p->failed = p->failed || !ok;
		p->hashed++;
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

struct sbx_sha256_pipe *sbx_sha256_pipe_new(size_t slot_bytes, bool threaded,
					    const char *thread_name, struct sbx_err *err)
{
	struct sbx_sha256_pipe *p = calloc(1, sizeof(*p));
	pthread_attr_t attr;
	int e;

	if (!p) {
		sbx_fail(err, "sha256: out of memory");
		return NULL;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	/* Unthreaded, the one slot is filled and hashed in turn. */
	for (size_t i = 0; i < (threaded ? SBX_SHA256_PIPE_SLOTS : 1); i++)
		if (!(p->slot[i].buf = malloc(slot_bytes))) {
			sbx_sha256_pipe_free(p);
			sbx_fail(err, "sha256: out of memory");
			return NULL;
		}
	if (threaded) {
		pthread_attr_init(&attr);
		pthread_attr_setstacksize(&attr, SBX_SHA256_PIPE_STACK);
		e = pthread_create(&p->thread, &attr, hash_slots, p);
		pthread_attr_destroy(&attr);
		/* No thread to be had (EAGAIN: the uid's process limit spent,
		 * which runs under host_uids "shared" count against, or the
		 * host's threads): the same digests, hashed inline and so
		 * slower, rather than a failed call. Any other error is a bug
		 * of ours. */
		if (e == EAGAIN) {
			threaded = false;
			for (size_t i = 1; i < SBX_SHA256_PIPE_SLOTS; i++) {
				free(p->slot[i].buf);
				p->slot[i].buf = NULL;
			}
		} else if (e != 0) {
			sbx_sha256_pipe_free(p);
			sbx_fail_errnum(err, e, "sha256: a thread to hash beside the copy");
			return NULL;
		} else if (thread_name) {
			pthread_setname_np(p->thread, thread_name);
		}
	}
	p->threaded = threaded;
	return p;
}

bool sbx_sha256_pipe_threaded(const struct sbx_sha256_pipe *p)
{
	return p->threaded;
}

uint8_t *sbx_sha256_pipe_slot(struct sbx_sha256_pipe *p)
{
	uint8_t *buf;

	if (!p->threaded)
		return p->slot[0].buf;
	pthread_mutex_lock(&p->mu);
	while (p->filled - p->hashed >= SBX_SHA256_PIPE_SLOTS)
		pthread_cond_wait(&p->cv, &p->mu);
	buf = p->slot[p->filled % SBX_SHA256_PIPE_SLOTS].buf;
	pthread_mutex_unlock(&p->mu);
	return buf;
}

int sbx_sha256_pipe_push(struct sbx_sha256_pipe *p, void *md, size_t len, struct sbx_err *err)
{
	bool failed;

	if (!p->threaded) {
		if (EVP_DigestUpdate(md, p->slot[0].buf, len) != 1)
			return sbx_fail(err, "sha256 failed");
		return 0;
	}
	pthread_mutex_lock(&p->mu);
	/* sbx_sha256_pipe_slot waited for room: this slot is free. */
	struct slot *s = &p->slot[p->filled % SBX_SHA256_PIPE_SLOTS];
	s->len = len;
	s->md = md;
	p->filled++;
	failed = p->failed;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	return failed ? sbx_fail(err, "sha256 failed") : 0;
}

int sbx_sha256_pipe_drain(struct sbx_sha256_pipe *p, struct sbx_err *err)
{
	bool failed;

	if (!p->threaded)
		return 0;
	pthread_mutex_lock(&p->mu);
	while (p->hashed != p->filled)
		pthread_cond_wait(&p->cv, &p->mu);
	failed = p->failed;
	pthread_mutex_unlock(&p->mu);
	return failed ? sbx_fail(err, "sha256 failed") : 0;
}

void sbx_sha256_pipe_free(struct sbx_sha256_pipe *p)
{
	if (!p)
		return;
	if (p->threaded) {
		pthread_mutex_lock(&p->mu);
		p->stop = true;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
		pthread_join(p->thread, NULL);
	}
	for (size_t i = 0; i < SBX_SHA256_PIPE_SLOTS; i++)
		free(p->slot[i].buf);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

void sbx_sha256_pipe_freep(struct sbx_sha256_pipe **p)
{
	sbx_sha256_pipe_free(*p);
	*p = NULL;
}
