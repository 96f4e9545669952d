/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the request-id table (server/rpc/rpc_dedupe.c): first call,
 * replay byte for byte, repeats parked while the first runs, mismatches,
 * "try again" answers that are not remembered, expiry, a repeat that must
 * not run (rpc_dedupe_repeat), and the caps: parked
 * repeats (all, and a caller's own), a caller's quarter of entries and of
 * bytes, never another caller's answers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "rpc_dedupe.h"

static const struct rpc_dedupe_limits small = {
    .max_entries = 16, /* a caller's quarter: 16 / 4 + 1 = 5 entries */
    .max_bytes = 4096, /* ... and 1024 bytes of answers */
    .max_parked = 3,
    .max_parked_per_identity = 2,
    .ttl_ms = 60000,
};

static const uint8_t fp_a[32] = {1}, fp_b[32] = {2};

/* What notify was handed. */
static struct {
	int calls;
	size_t len;
	uint8_t bytes[64];
	struct rpc_dedupe_waiter *last;
} notified;

static void notify(struct rpc_dedupe_waiter *w, const uint8_t *answer, size_t len)
{
	notified.calls++;
	notified.len = len;
	notified.last = w;
	memcpy(notified.bytes, answer, len < sizeof(notified.bytes) ? len : sizeof(notified.bytes));
}

/* For calls nobody is parked on. */
static void no_notify(struct rpc_dedupe_waiter *w, const uint8_t *answer, size_t len)
{
	(void)w;
	(void)answer;
	(void)len;
}

static enum rpc_dedupe_verdict begin(struct rpc_dedupe *d, const char *who, const char *id,
				     const uint8_t *fp, struct rpc_dedupe_entry **first,
				     uint8_t **replay, size_t *len)
{
	static struct rpc_dedupe_waiter w[64];
	static size_t n;

	return rpc_dedupe_begin(d, who, id, fp, &w[n++ % 64], first, replay, len);
}

/* A call that runs and answers with len bytes of c. true: it ran (FIRST). */
static bool answered(struct rpc_dedupe *d, const char *who, const char *id, size_t len, char c)
{
	struct rpc_dedupe_entry *first;
	uint8_t *replay, answer[2048];
	size_t rlen;
	enum rpc_dedupe_verdict v = begin(d, who, id, fp_a, &first, &replay, &rlen);

	free(replay);
	if (v != DEDUPE_FIRST)
		return false;
	memset(answer, c, len);
	rpc_dedupe_finish(d, first, answer, len, true, no_notify);
	return true;
}

/* The verdict a repeat of (who, id) gets, without running anything. */
static enum rpc_dedupe_verdict repeat(struct rpc_dedupe *d, const char *who, const char *id)
{
	struct rpc_dedupe_entry *first;
	uint8_t *replay;
	size_t len;
	enum rpc_dedupe_verdict v = begin(d, who, id, fp_a, &first, &replay, &len);

	free(replay);
	/* A first call holds a running entry: answer it "try again", which
	 * is not remembered, so the table is as it was. */
	if (first)
		rpc_dedupe_finish(d, first, (const uint8_t *)"", 0, false, no_notify);
	return v;
}

static void test_first_replay_parked(void)
{
	struct rpc_dedupe *d = rpc_dedupe_new(&small);
	struct rpc_dedupe_waiter w1, w2, w3;
	struct rpc_dedupe_entry *first, *other;
	uint8_t *replay;
	size_t len;

	check(rpc_dedupe_begin(d, "uid:1", "r1", fp_a, &w1, &first, &replay, &len) ==
		      DEDUPE_FIRST &&
		  first && !replay,
	      "a new request id runs");
	check(rpc_dedupe_begin(d, "uid:1", "r1", fp_a, &w1, &other, &replay, &len) ==
		      DEDUPE_PARKED &&
		  !other,
	      "a repeat while the first runs is parked");
	check(rpc_dedupe_begin(d, "uid:1", "r1", fp_a, &w2, &other, &replay, &len) == DEDUPE_PARKED,
	      "a second repeat is parked too");
	check(rpc_dedupe_begin(d, "uid:1", "r1", fp_a, &w3, &other, &replay, &len) == DEDUPE_BUSY,
	      "past max_parked_per_identity a repeat is told to try later");
	check(rpc_dedupe_begin(d, "uid:1", "r1", fp_b, &w3, &other, &replay, &len) ==
		  DEDUPE_MISMATCH,
	      "the same id with another fingerprint is a mismatch");

	memset(&notified, 0, sizeof(notified));
	rpc_dedupe_finish(d, first, (const uint8_t *)"answer", 6, true, notify);
	check(notified.calls == 2 && notified.len == 6 && memcmp(notified.bytes, "answer", 6) == 0,
	      "both parked repeats get the first answer (%d notified)", notified.calls);

	check(rpc_dedupe_begin(d, "uid:1", "r1", fp_a, &w1, &first, &replay, &len) ==
		      DEDUPE_REPLAY &&
		  !first && replay && len == 6 && memcmp(replay, "answer", 6) == 0,
	      "a repeat after the answer gets it byte for byte");
	free(replay);
	check(repeat(d, "uid:1", "r1") == DEDUPE_REPLAY,
	      "... and again, the answer stays for later repeats");
	check(rpc_dedupe_begin(d, "uid:1", "r1", fp_b, &w1, &first, &replay, &len) ==
		  DEDUPE_MISMATCH,
	      "a finished id reused for another request is a mismatch");
	check(repeat(d, "uid:2", "r1") == DEDUPE_FIRST,
	      "another caller's same request id is its own");
	rpc_dedupe_free(d);
}

/* rpc_dedupe_seen: what sbxd asks of a repeat no worker can take, to say
 * "in progress here" rather than "busy, try elsewhere". */
static void test_seen(void)
{
	struct rpc_dedupe *d = rpc_dedupe_new(&small);
	struct rpc_dedupe_waiter w;
	struct rpc_dedupe_entry *first;
	uint8_t *replay;
	size_t len;

	check(!rpc_dedupe_seen(d, "uid:1", "s1"), "an id never sent is not seen");
	check(rpc_dedupe_begin(d, "uid:1", "s1", fp_a, &w, &first, &replay, &len) == DEDUPE_FIRST,
	      "its first runs");
	check(rpc_dedupe_seen(d, "uid:1", "s1"), "a running first is seen");
	check(!rpc_dedupe_seen(d, "uid:2", "s1"), "... by its own caller only");
	rpc_dedupe_finish(d, first, (const uint8_t *)"answer", 6, true, notify);
	check(rpc_dedupe_seen(d, "uid:1", "s1"), "a remembered answer is seen");
	check(rpc_dedupe_begin(d, "uid:1", "s2", fp_a, &w, &first, &replay, &len) == DEDUPE_FIRST,
	      "another first runs");
	rpc_dedupe_finish(d, first, (const uint8_t *)"retry", 5, false, notify);
	check(!rpc_dedupe_seen(d, "uid:1", "s2"), "an answer not kept (\"retry\") is not seen");
	rpc_dedupe_free(d);
}

static void test_not_kept(void)
{
	struct rpc_dedupe *d = rpc_dedupe_new(&small);
	struct rpc_dedupe_waiter w;
	struct rpc_dedupe_entry *first, *other;
	uint8_t *replay;
	size_t len;

	rpc_dedupe_begin(d, "uid:1", "busy", fp_a, &w, &first, &replay, &len);
	rpc_dedupe_begin(d, "uid:1", "busy", fp_a, &w, &other, &replay, &len);
	memset(&notified, 0, sizeof(notified));
	rpc_dedupe_finish(d, first, (const uint8_t *)"later", 5, false, notify);
	check(notified.calls == 1 && notified.last == &w && notified.len == 5,
	      "an answer not kept still reaches the parked repeat");
	check(repeat(d, "uid:1", "busy") == DEDUPE_FIRST,
	      "an answer not kept (\"try again\") lets the retry run");
	rpc_dedupe_free(d);
}

static void test_expiry(void)
{
	struct rpc_dedupe_limits lim = small;
	struct rpc_dedupe *d;

	lim.ttl_ms = 50;
	d = rpc_dedupe_new(&lim);
	answered(d, "uid:1", "old", 3, 'x');
	check(repeat(d, "uid:1", "old") == DEDUPE_REPLAY, "an answer is there before its ttl");
	nanosleep(&(struct timespec){.tv_nsec = 120 * 1000000}, NULL);
	check(repeat(d, "uid:1", "old") == DEDUPE_FIRST, "past its ttl the id runs again");
	rpc_dedupe_free(d);
}

static void test_entry_share(void)
{
	struct rpc_dedupe *d = rpc_dedupe_new(&small);
	char id[16];
	bool all = true;

	check(answered(d, "uid:2", "theirs", 10, 'b'), "another caller answers once");
	for (int i = 0; i < 6; i++) {
		snprintf(id, sizeof(id), "mine-%d", i);
		all &= answered(d, "uid:1", id, 10, 'a');
	}
	check(all, "six answers of one caller are taken");
	/* Replays first: a probe that runs takes an entry of its own. */
	check(repeat(d, "uid:1", "mine-1") == DEDUPE_REPLAY &&
		  repeat(d, "uid:1", "mine-5") == DEDUPE_REPLAY,
	      "the caller's five newest answers stay");
	check(repeat(d, "uid:2", "theirs") == DEDUPE_REPLAY, "the other caller's answer stays");
	check(repeat(d, "uid:1", "mine-0") == DEDUPE_FIRST,
	      "past a quarter of the entries the caller's oldest answer went");
	rpc_dedupe_free(d);
}

static void test_byte_share(void)
{
	struct rpc_dedupe *d = rpc_dedupe_new(&small);

	check(answered(d, "uid:2", "theirs", 1000, 'b'), "another caller keeps 1000 bytes");
	check(answered(d, "uid:1", "big", 1025, 'a') && repeat(d, "uid:1", "big") == DEDUPE_FIRST,
	      "an answer over a quarter of max_bytes is not remembered");
	check(answered(d, "uid:1", "a", 600, 'a') && repeat(d, "uid:1", "a") == DEDUPE_REPLAY,
	      "an answer within the caller's quarter is");
	check(answered(d, "uid:1", "b", 600, 'a'), "a second one that overflows the quarter runs");
	check(repeat(d, "uid:1", "a") == DEDUPE_FIRST && repeat(d, "uid:1", "b") == DEDUPE_REPLAY,
	      "the caller's own oldest answer made room for it");
	check(repeat(d, "uid:2", "theirs") == DEDUPE_REPLAY,
	      "another caller's answer is never what makes room");
	rpc_dedupe_free(d);
}

static void test_refused(void)
{
	struct rpc_dedupe *d = rpc_dedupe_new(&small);
	char who[200];

	memset(who, 'u', sizeof(who) - 1);
	who[sizeof(who) - 1] = '\0';
	/* FULL, not BUSY: nothing of it ran, so it says nothing is in
	 * progress (sbxd: UNAVAILABLE without in_progress). */
	check(repeat(d, who, "r") == DEDUPE_FULL, "an identity too long for the table is refused");
	check(repeat(d, "uid:1",
		     "0123456789012345678901234567890123456789012345678901234567890123456789") ==
		  DEDUPE_FULL,
	      "a request id too long for the table is refused");
	rpc_dedupe_free(d);
	rpc_dedupe_free(NULL);
	check(true, "freeing NULL is harmless");
}

/* One caller's parked repeats stop at its own share, not at another's:
 * the table-wide cap counts all callers, the share one (review,
 * 2026-12-03: a shared cap alone let one caller refuse every other's
 * retry). */
static void test_parked_share(void)
{
	struct rpc_dedupe *d = rpc_dedupe_new(&small);
	struct rpc_dedupe_waiter w[6];
	struct rpc_dedupe_entry *a = NULL, *b = NULL, *c = NULL, *none = NULL;
	uint8_t *replay;
	size_t len;

	check(rpc_dedupe_begin(d, "uid:1", "a", fp_a, &w[0], &a, &replay, &len) == DEDUPE_FIRST &&
		  rpc_dedupe_begin(d, "uid:2", "b", fp_a, &w[0], &b, &replay, &len) ==
		      DEDUPE_FIRST &&
		  rpc_dedupe_begin(d, "uid:3", "c", fp_a, &w[0], &c, &replay, &len) == DEDUPE_FIRST,
	      "three callers' first requests run");
	check(rpc_dedupe_begin(d, "uid:1", "a", fp_a, &w[1], &none, &replay, &len) ==
		      DEDUPE_PARKED &&
		  rpc_dedupe_begin(d, "uid:1", "a", fp_a, &w[2], &none, &replay, &len) ==
		      DEDUPE_PARKED,
	      "a caller parks up to its share");
	check(rpc_dedupe_begin(d, "uid:1", "a", fp_a, &w[3], &none, &replay, &len) == DEDUPE_BUSY,
	      "its next repeat is refused: the share is full");
	check(rpc_dedupe_begin(d, "uid:2", "b", fp_a, &w[4], &none, &replay, &len) == DEDUPE_PARKED,
	      "another caller's repeat still parks");
	check(rpc_dedupe_begin(d, "uid:3", "c", fp_a, &w[5], &none, &replay, &len) == DEDUPE_BUSY,
	      "past max_parked in all, a third caller's repeat is refused");
	memset(&notified, 0, sizeof(notified));
	rpc_dedupe_finish(d, a, (const uint8_t *)"a", 1, true, notify);
	check(notified.calls == 2, "the first caller's two parked repeats are answered (%d)",
	      notified.calls);
	check(rpc_dedupe_begin(d, "uid:3", "c", fp_a, &w[5], &none, &replay, &len) == DEDUPE_PARKED,
	      "their places are free again");
	rpc_dedupe_finish(d, b, (const uint8_t *)"b", 1, true, notify);
	rpc_dedupe_finish(d, c, (const uint8_t *)"c", 1, true, notify);

	/* The share is the caller's, over all its running requests, and a
	 * finished one (its answer kept) counts no repeats any more. */
	struct rpc_dedupe_entry *x = NULL, *y = NULL;
	check(rpc_dedupe_begin(d, "uid:1", "x", fp_a, &w[0], &x, &replay, &len) == DEDUPE_FIRST &&
		  rpc_dedupe_begin(d, "uid:1", "y", fp_a, &w[1], &y, &replay, &len) == DEDUPE_FIRST,
	      "a caller's two requests run");
	check(rpc_dedupe_begin(d, "uid:1", "x", fp_a, &w[2], &none, &replay, &len) ==
		      DEDUPE_PARKED &&
		  rpc_dedupe_begin(d, "uid:1", "y", fp_a, &w[3], &none, &replay, &len) ==
		      DEDUPE_PARKED,
	      "one repeat of each parks, after the first caller's answered ones went");
	check(rpc_dedupe_begin(d, "uid:1", "x", fp_a, &w[4], &none, &replay, &len) == DEDUPE_BUSY,
	      "a third is past the caller's share although each request has one");
	rpc_dedupe_finish(d, x, (const uint8_t *)"x", 1, true, notify);
	rpc_dedupe_finish(d, y, (const uint8_t *)"y", 1, true, notify);
	rpc_dedupe_free(d);
}

/* rpc_dedupe_repeat: a repeat that must not run (its first runs for
 * another connection) is parked, replayed or refused as begin would, and
 * where begin would make an entry it says ABSENT and makes none. */
static void test_repeat(void)
{
	struct rpc_dedupe *d = rpc_dedupe_new(&small);
	struct rpc_dedupe_waiter w1, w2, w3;
	struct rpc_dedupe_entry *first;
	uint8_t *replay;
	size_t len;

	check(rpc_dedupe_repeat(d, "uid:1", "p1", fp_a, &w1, &replay, &len) == DEDUPE_ABSENT,
	      "a repeat of a first that has not begun is ABSENT");
	check(!rpc_dedupe_seen(d, "uid:1", "p1"), "... and nothing was added for it");
	check(rpc_dedupe_begin(d, "uid:1", "p1", fp_a, &w1, &first, &replay, &len) == DEDUPE_FIRST,
	      "the first begins after it");
	check(rpc_dedupe_repeat(d, "uid:1", "p1", fp_b, &w2, &replay, &len) == DEDUPE_MISMATCH,
	      "a repeat with another body is MISMATCH");
	check(rpc_dedupe_repeat(d, "uid:2", "p1", fp_a, &w2, &replay, &len) == DEDUPE_ABSENT,
	      "another caller's id is its own");
	check(rpc_dedupe_repeat(d, "uid:1", "p1", fp_a, &w2, &replay, &len) == DEDUPE_PARKED,
	      "a repeat of a running first is parked");
	check(rpc_dedupe_repeat(d, "uid:1", "p1", fp_a, &w3, &replay, &len) == DEDUPE_PARKED,
	      "... up to the caller's share (2)");
	check(rpc_dedupe_repeat(d, "uid:1", "p1", fp_a, &w1, &replay, &len) == DEDUPE_BUSY,
	      "past it, BUSY");
	memset(&notified, 0, sizeof(notified));
	rpc_dedupe_finish(d, first, (const uint8_t *)"done", 4, true, notify);
	check(notified.calls == 2 && notified.len == 4 && memcmp(notified.bytes, "done", 4) == 0,
	      "both parked repeats get the first's answer");
	check(rpc_dedupe_repeat(d, "uid:1", "p1", fp_a, &w1, &replay, &len) == DEDUPE_REPLAY &&
		  len == 4 && memcmp(replay, "done", 4) == 0,
	      "once it answered, a repeat is replayed");
	free(replay);
	rpc_dedupe_free(d);
}

/* A caller's share is counted per caller (rpc_dedupe.c's owners), not by a
 * walk of every entry under the lock: the counts follow its entries as the
 * table's own room evicts them, and a caller whose entries all went comes
 * back with a whole share. 2000 callers pass through a table of 16 (owners
 * made and freed by the hundred, past the owner table's 1024 buckets);
 * under ASan a leaked owner fails the run. */
static void test_owner_counts(void)
{
	struct rpc_dedupe *d = rpc_dedupe_new(&small);
	char who[32], id[32];
	bool all = true;

	for (int c = 0; c < 2000; c++) {
		snprintf(who, sizeof(who), "uid:%d", c);
		all &= answered(d, who, "r", 10, 'a');
	}
	check(all, "2000 callers' answers are taken, the oldest making room");
	check(repeat(d, "uid:0", "r") == DEDUPE_FIRST &&
		  repeat(d, "uid:1999", "r") == DEDUPE_REPLAY,
	      "the table kept its newest answers");
	/* The probe kept nothing (repeat answers it unkept): uid:0 has no
	 * entry, and five answers fill its share of 5 without evicting. */
	for (int i = 0; i < 5; i++) {
		snprintf(id, sizeof(id), "again-%d", i);
		all &= answered(d, "uid:0", id, 10, 'b');
	}
	check(all && repeat(d, "uid:0", "again-0") == DEDUPE_REPLAY &&
		  repeat(d, "uid:0", "again-4") == DEDUPE_REPLAY,
	      "a caller whose entries went has its whole share again");
	check(repeat(d, "uid:1999", "r") == DEDUPE_REPLAY,
	      "another caller's answer is not what made its room");
	rpc_dedupe_free(d);
}

/* Review 44: a caller whose record lives throughout (one request of its
 * own left running) keeps right counts: parked repeats answered give their
 * places back, round after round; answers evicted for its byte quarter give
 * their bytes back; past its share it evicts its own oldest, never the
 * answer of another caller that arrived between its own. */
static void test_owner_lives(void)
{
	struct rpc_dedupe *d = rpc_dedupe_new(&small);
	struct rpc_dedupe_entry *hold = NULL, *p = NULL, *none = NULL;
	struct rpc_dedupe_waiter w[3];
	uint8_t *replay;
	size_t len;
	char id[16];
	bool ok = true;

	check(begin(d, "uid:7", "hold", fp_a, &hold, &replay, &len) == DEDUPE_FIRST,
	      "a request of the caller's stays running");
	for (int round = 0; round < 4; round++) {
		snprintf(id, sizeof(id), "p-%d", round);
		ok &= rpc_dedupe_begin(d, "uid:7", id, fp_a, &w[0], &p, &replay, &len) ==
		      DEDUPE_FIRST;
		ok &= rpc_dedupe_begin(d, "uid:7", id, fp_a, &w[1], &none, &replay, &len) ==
			  DEDUPE_PARKED &&
		      rpc_dedupe_begin(d, "uid:7", id, fp_a, &w[2], &none, &replay, &len) ==
			  DEDUPE_PARKED;
		memset(&notified, 0, sizeof(notified));
		rpc_dedupe_finish(d, p, (const uint8_t *)"p", 1, false, notify);
		ok &= notified.calls == 2;
	}
	check(ok, "four rounds of two parked repeats: each round's places were given back");
	ok = true;
	for (int round = 0; round < 5; round++) {
		snprintf(id, sizeof(id), "b-%d", round);
		ok &= answered(d, "uid:7", id, 600, 'b') && repeat(d, "uid:7", id) == DEDUPE_REPLAY;
	}
	check(ok, "five answers of 600 bytes, each evicting the last for the 1024-byte quarter, "
		  "are each remembered");
	/* Its own answers with another caller's between them. */
	check(answered(d, "uid:7", "m-0", 10, 'a') && answered(d, "uid:8", "theirs", 10, 'c'),
	      "an answer of the caller's, then another caller's");
	for (int i = 1; i < 6; i++) {
		snprintf(id, sizeof(id), "m-%d", i);
		answered(d, "uid:7", id, 10, 'a');
	}
	check(repeat(d, "uid:8", "theirs") == DEDUPE_REPLAY,
	      "past its share the caller evicted its own answers, not the one between them");
	check(repeat(d, "uid:7", "m-0") == DEDUPE_FIRST &&
		  repeat(d, "uid:7", "m-5") == DEDUPE_REPLAY,
	      "its own oldest went, its newest stayed");
	rpc_dedupe_finish(d, hold, (const uint8_t *)"", 0, false, no_notify);
	rpc_dedupe_free(d);
}

/* More callers at once than the owner table has buckets (1024), so that
 * callers share buckets: one caller going past its share evicts its own
 * answers, and none of the 2999 others (whose records share its bucket's
 * chain with it). */
static void test_many_owners(void)
{
	static const struct rpc_dedupe_limits many = {
	    .max_entries = 8192, /* a caller's quarter: 2049 */
	    .max_bytes = 1 << 20,
	    .max_parked = 3,
	    .max_parked_per_identity = 2,
	    .ttl_ms = 600000,
	};
	struct rpc_dedupe *d = rpc_dedupe_new(&many);
	char who[32], id[32];
	bool ok = true;

	for (int c = 0; c < 3000; c++) {
		snprintf(who, sizeof(who), "uid:%d", c);
		ok &= answered(d, who, "r", 10, 'a');
	}
	for (int i = 0; i < 2100; i++) {
		snprintf(id, sizeof(id), "more-%d", i);
		ok &= answered(d, "uid:0", id, 1, 'm');
	}
	check(ok, "3000 callers' answers, then 2100 more of one caller's, are taken");
	for (int c = 1; c < 3000 && ok; c++) {
		snprintf(who, sizeof(who), "uid:%d", c);
		ok &= repeat(d, who, "r") == DEDUPE_REPLAY;
	}
	check(ok, "every other caller's answer stayed");
	check(repeat(d, "uid:0", "r") == DEDUPE_FIRST &&
		  repeat(d, "uid:0", "more-2099") == DEDUPE_REPLAY,
	      "the caller past its share evicted its own oldest");
	rpc_dedupe_free(d);
}

int main(void)
{
	test_first_replay_parked();
	test_seen();
	test_repeat();
	test_parked_share();
	test_not_kept();
	test_expiry();
	test_entry_share();
	test_byte_share();
	test_refused();
	test_owner_counts();
	test_owner_lives();
	test_many_owners();
	return check_done();
}
