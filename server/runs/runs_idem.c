/* SPDX-License-Identifier: Apache-2.0 */
/* Idempotent creates: a caller that does not know whether its CreateRun
 * made a run (the reply was lost, the connection dropped, the host was
 * slow) sends it again with the same idempotency_key and gets the first
 * answer, never a second run. Unlike the RPC layer's request_id dedupe
 * (server/rpc/rpc_dedupe.c: any changing call, kept minutes, forgotten
 * under pressure), a key is kept for its run's whole life and a day
 * after it, and keys of one identity are never seen by another.
 *
 * Lock order: the registry lock, then a run's lock (to read its state). */
#include "runs_idem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "clock.h"
#include "run.h"
#include "runs_manager.h"
#include "util.h"

int idem_key_check(const char *key, struct sbx_rpc_status *st)
{
	size_t n = strlen(key);

	if (n == 0 || n > RUN_IDEM_KEY_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "idempotency_key: %zu bytes, must be 1..%d", n,
				    RUN_IDEM_KEY_MAX);
	for (size_t i = 0; i < n; i++) {
		char c = key[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == ':' || c == '-'))
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "idempotency_key: byte %zu (0x%02x) is not one of "
					    "[A-Za-z0-9._:-]",
					    i, (unsigned)(unsigned char)c);
	}
	return 0;
}

int idem_request_digest(const Sbx__V1__CreateRunRequest *req, uint8_t digest[32],
			struct sbx_rpc_status *st)
{
	Sbx__V1__CreateRunRequest bare = *req;
	_cleanup_free_ uint8_t *buf = NULL;
	unsigned int len = 0;
	size_t n;

	bare.idempotency_key = (char *)"";
	n = protobuf_c_message_get_packed_size(&bare.base);
	if (!(buf = malloc(n ? n : 1)))
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "idempotency_key: out of memory");
	protobuf_c_message_pack(&bare.base, buf);
	if (!EVP_Digest(buf, n, digest, &len, EVP_sha256(), NULL) || len != 32)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "idempotency_key: sha256 failed");
	return 0;
}

/* mu held: identity's registered run with key, or NULL. */
static struct sbx_run *live_of(struct sbx_runs *runs, const char *identity, const char *key)
{
	for (struct sbx_run *r = runs->head; r; r = r->next)
		if (r->idem_key[0] && !strcmp(r->idem_key, key) && !strcmp(r->identity, identity))
			return r;
	return NULL;
}

/* mu held: identity's record of key, or NULL. */
static struct runs_idem_gone *gone_of(struct sbx_runs *runs, const char *identity, const char *key)
{
	int64_t now = sbx_mono_ms();

	for (size_t i = 0; i < RUNS_IDEM_GONE; i++) {
		struct runs_idem_gone *g = &runs->idem_gone[i];

		if (g->at && now - g->at < RUNS_IDEM_GONE_MS && !strcmp(g->key, key) &&
		    !strcmp(g->owner, identity))
			return g;
	}
	return NULL;
}

bool idem_taken_locked(struct sbx_runs *runs, const char *identity, const char *key)
{
	return key[0] && (live_of(runs, identity, key) || gone_of(runs, identity, key));
}

void idem_remember_locked(struct sbx_run *r)
{
	struct sbx_runs *runs = r->runs;
	struct runs_idem_gone *slot, *free_slot = NULL, *oldest = NULL, *own_oldest = NULL;
	int64_t now = sbx_mono_ms();
	unsigned own = 0;
	bool failed_create;

	if (!r->idem_key[0])
		return;
	run_lock(r);
	failed_create = r->state == RUN_STARTING;
	run_unlock(r);
	if (failed_create)
		return;
	/* An empty or expired slot, else the oldest; but an identity that
	 * holds its share already gives up its own oldest, so that one
	 * identity's creates never push another's keys out early. */
	for (size_t i = 0; i < RUNS_IDEM_GONE; i++) {
		struct runs_idem_gone *g = &runs->idem_gone[i];

		if (!g->at || now - g->at >= RUNS_IDEM_GONE_MS) {
			if (!free_slot)
				free_slot = g;
			continue;
		}
		if (!oldest || g->seq < oldest->seq)
			oldest = g;
		if (!strcmp(g->owner, r->identity)) {
			own++;
			if (!own_oldest || g->seq < own_oldest->seq)
				own_oldest = g;
		}
	}
	slot = own >= RUNS_IDEM_GONE_PER_IDENTITY ? own_oldest : free_slot ? free_slot : oldest;
	snprintf(slot->owner, sizeof(slot->owner), "%s", r->identity);
	snprintf(slot->key, sizeof(slot->key), "%s", r->idem_key);
	memcpy(slot->digest, r->idem_digest, sizeof(slot->digest));
	snprintf(slot->id, sizeof(slot->id), "%s", r->id);
	slot->at = now;
	slot->at_unix_ms = sbx_unix_ms();
	slot->seq = ++runs->idem_seq;
}

static int different(struct sbx_rpc_status *st, const char *key, const char *id)
{
	return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
			    "idempotency_key %s: already used by this identity for a different "
			    "request (run %s); a repeat must send the same policy, inputs, labels "
			    "and input_dir, a new create a new key",
			    key, id);
}

int idem_repeat(struct sbx_runs *runs, const char *identity, const char *key,
		const uint8_t digest[32], struct sbx_run **first, struct sbx_rpc_status *st)
{
	int64_t until = sbx_mono_ms() + RUNS_IDEM_WAIT_MS;
	int rc = 0;

	*first = NULL;
	pthread_mutex_lock(&runs->mu);
	for (;;) {
		struct sbx_run *r = live_of(runs, identity, key);
		const struct runs_idem_gone *g;
		enum run_state state;
		struct timespec ts;

		if (!r) {
			g = gone_of(runs, identity, key);
			if (g && memcmp(g->digest, digest, 32) != 0)
				rc = different(st, key, g->id);
			else if (g)
				rc = sbx_rpc_fail(
				    st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "idempotency_key %s: the run this key created (%s) "
				    "was torn down at unix ms %lld; a new run needs a "
				    "new key",
				    key, g->id, (long long)g->at_unix_ms);
			break;
		}
		if (memcmp(r->idem_digest, digest, 32) != 0) {
			rc = different(st, key, r->id);
			break;
		}
		run_lock(r);
		state = r->state;
		run_unlock(r);
		if (state != RUN_STARTING) {
			if (state == RUN_TEARING || state == RUN_TORN) {
				rc = sbx_rpc_fail(
				    st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "idempotency_key %s: the run this key created (%s) "
				    "was torn down; a new run needs a new key",
				    key, r->id);
			} else {
				run_ref(r);
				*first = r;
				rc = 1;
			}
			break;
		}
		if (r->idem_waiters >= RUNS_IDEM_WAITERS || sbx_mono_ms() >= until) {
			rc = sbx_rpc_in_progress(st,
						 "idempotency_key %s: its run is still creating; "
						 "retry with the same key",
						 key);
			break;
		}
		/* Published or abandoned, the run broadcasts runs->cv. */
		r->idem_waiters++;
		run_ref(r);
		ts = sbx_mono_after_ms(until - sbx_mono_ms());
		pthread_cond_timedwait(&runs->cv, &runs->mu, &ts);
		r->idem_waiters--;
		/* Perhaps the last reference: dropped outside the registry lock. */
		pthread_mutex_unlock(&runs->mu);
		run_unref(r);
		pthread_mutex_lock(&runs->mu);
	}
	pthread_mutex_unlock(&runs->mu);
	return rc;
}
