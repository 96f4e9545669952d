/* SPDX-License-Identifier: Apache-2.0 */
/* Idempotency keys without a helper (runs_idem.c): what a key may be, the
 * request's digest, and what a key stands for in a manager made by hand:
 * its run while registered, nothing for another identity, a record once
 * the run is torn down (none for a create that failed), the bound on an
 * identity's records, and the bound on repeats waiting for a starting run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "run.h"
#include "runs_idem.h"
#include "runs_manager.h"
#include "runs_registry.h"
#include "service.h"

static const struct sbx_identity alice = {.name = "uid:1000"}, bob = {.name = "token:bob"};
static const uint8_t d1[32] = {1}, d2[32] = {2};

static void keys(void)
{
	static const char *const good[] = {"a", "job-42:try.1_x", "A-Z.a-z:0-9_"};
	static const char *const bad[] = {"", "a b", "a/b", "k\n", "\xc3\xa9", "a%", "a,b"};
	struct sbx_rpc_status st = {0};
	char longest[RUN_IDEM_KEY_MAX + 2];

	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++)
		check(idem_key_check(good[i], &st) == 0, "key %s is taken", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		check(idem_key_check(bad[i], &st) < 0 &&
			  st.code == SBX__V1__CODE__INVALID_ARGUMENT &&
			  strncmp(st.err.msg, "idempotency_key: ", 17) == 0,
		      "key %zu is refused naming the field: %s", i, st.err.msg);
	memset(longest, 'k', sizeof(longest));
	longest[RUN_IDEM_KEY_MAX] = '\0';
	check(idem_key_check(longest, &st) == 0, "a key of %d bytes is taken", RUN_IDEM_KEY_MAX);
	longest[RUN_IDEM_KEY_MAX] = 'k';
	longest[RUN_IDEM_KEY_MAX + 1] = '\0';
	check(idem_key_check(longest, &st) < 0 && strstr(st.err.msg, "129 bytes, must be 1..128"),
	      "one byte more is refused: %s", st.err.msg);
}

static void digests(void)
{
	Sbx__V1__CreateRunRequest a = SBX__V1__CREATE_RUN_REQUEST__INIT, b;
	struct sbx_rpc_status st = {0};
	uint8_t da[32], db[32];

	a.policy_json = "{\"image\":\"host\"}";
	a.idempotency_key = "one";
	b = a;
	b.idempotency_key = "two";
	check(idem_request_digest(&a, da, &st) == 0 && idem_request_digest(&b, db, &st) == 0 &&
		  memcmp(da, db, 32) == 0,
	      "the digest leaves the key out");
	b.input_dir = "/srv/in";
	check(idem_request_digest(&b, db, &st) == 0 && memcmp(da, db, 32) != 0,
	      "and covers the rest of the request");
}

static struct sbx_run *keyed(struct sbx_runs *runs, const struct sbx_identity *who, const char *id,
			     const char *key, const uint8_t digest[32], struct sbx_rpc_status *st,
			     int *rc)
{
	struct sbx_run *r = run_alloc(runs);
	const struct runs_live live = runs_live(runs);

	snprintf(r->identity, sizeof(r->identity), "%s", who->name);
	snprintf(r->id, sizeof(r->id), "%s", id);
	snprintf(r->idem_key, sizeof(r->idem_key), "%s", key);
	memcpy(r->idem_digest, digest, 32);
	if ((*rc = run_register(r, &live, st)) != 0) {
		run_unref(r);
		return NULL;
	}
	return r;
}

/* Published, claimed and unregistered, as a Teardown does. */
static void torn(struct sbx_run *r)
{
	struct sbx_rpc_status st = {0};

	if (r->state == RUN_STARTING)
		run_publish(r);
	check(run_claim(r, &st) == 0, "%s is claimed", r->id);
	run_unregister(r);
}

static void lives(void)
{
	struct sbx_runs *runs = runs_new();
	struct sbx_rpc_status st = {0};
	struct sbx_run *r, *first = NULL;
	int rc;

	runs->cfg.runs_max = 1000;
	runs->live.runs_max_per_identity = 1000;
	r = keyed(runs, &alice, "run-a1", "k1", d1, &st, &rc);
	check(r && rc == 0, "a keyed run registers");
	check(!keyed(runs, &alice, "run-a2", "k1", d1, &st, &rc) && rc == RUN_REGISTER_REPEAT,
	      "a second run with the key does not: its caller asks idem_repeat");
	r->idem_waiters = RUNS_IDEM_WAITERS;
	check(idem_repeat(runs, alice.name, "k1", d1, &first, &st) < 0 &&
		  st.code == SBX__V1__CODE__UNAVAILABLE && st.in_progress &&
		  strstr(st.err.msg, "still creating"),
	      "with RUNS_IDEM_WAITERS waiting, a repeat of a starting run is told to retry "
	      "here (in_progress): %s",
	      st.err.msg);
	r->idem_waiters = 0;
	run_publish(r);
	check(idem_repeat(runs, alice.name, "k1", d1, &first, &st) == 1 && first == r,
	      "a repeat finds the published run");
	run_unref(first);
	check(idem_repeat(runs, alice.name, "k1", d2, &first, &st) < 0 &&
		  st.code == SBX__V1__CODE__INVALID_ARGUMENT && !st.in_progress &&
		  strstr(st.err.msg, "idempotency_key k1: already used") &&
		  strstr(st.err.msg, "run-a1"),
	      "another request with the key is INVALID_ARGUMENT: %s", st.err.msg);
	check(idem_repeat(runs, bob.name, "k1", d2, &first, &st) == 0 && !first,
	      "another identity's key of the same name is a new create");
	torn(r);
	check(idem_repeat(runs, alice.name, "k1", d1, &first, &st) < 0 &&
		  st.code == SBX__V1__CODE__FAILED_PRECONDITION &&
		  strstr(st.err.msg, "the run this key created (run-a1) was torn down"),
	      "after teardown a repeat is told so: %s", st.err.msg);
	check(!keyed(runs, &alice, "run-a3", "k1", d1, &st, &rc) && rc == RUN_REGISTER_REPEAT,
	      "and cannot register a second run");
	check(idem_repeat(runs, bob.name, "k1", d1, &first, &st) == 0,
	      "which another identity never learns");

	/* A create that failed while STARTING made no run: its key is free. */
	r = keyed(runs, &alice, "run-a4", "k-failed", d1, &st, &rc);
	run_unregister(r);
	check(idem_repeat(runs, alice.name, "k-failed", d1, &first, &st) == 0,
	      "a failed create's key is not remembered");

	/* An identity's records: at most RUNS_IDEM_GONE_PER_IDENTITY, its own
	 * oldest going first, never another identity's. */
	r = keyed(runs, &bob, "run-b1", "bob-key", d1, &st, &rc);
	torn(r);
	for (int i = 0; i < RUNS_IDEM_GONE_PER_IDENTITY + 1; i++) {
		char id[32], key[32];

		snprintf(id, sizeof(id), "run-m%d", i);
		snprintf(key, sizeof(key), "many-%d", i);
		r = keyed(runs, &alice, id, key, d1, &st, &rc);
		check(r != NULL, "%s registers", id);
		if (r)
			torn(r);
	}
	check(idem_repeat(runs, bob.name, "bob-key", d1, &first, &st) < 0 &&
		  st.code == SBX__V1__CODE__FAILED_PRECONDITION,
	      "bob's record outlives alice's many");
	check(idem_repeat(runs, alice.name, "many-0", d1, &first, &st) == 0,
	      "alice's second oldest record went past her share");
	check(idem_repeat(runs, alice.name, "k1", d1, &first, &st) == 0,
	      "and her oldest before it");
	check(idem_repeat(runs, alice.name, "many-128", d1, &first, &st) < 0 &&
		  st.code == SBX__V1__CODE__FAILED_PRECONDITION,
	      "her newest is kept");
	check(runs->count == 0, "the registry is empty");
	runs_free(runs);
}

int main(void)
{
	keys();
	digests();
	lives();
	return check_done();
}
