/* SPDX-License-Identifier: Apache-2.0 */
/* The RPC server: one nng REP socket, many contexts, two worker pools.
 *
 * Each context ("call") is a small state machine driven by its aio:
 *
 *   RECV --request--> (scan the envelope, authenticate, find the method)
 *        --Health or an error--> SEND        answered in the callback
 *        --anything else-------> WORK        handed to the short or long pool
 *   WORK --handler done / dedupe replay--> SEND
 *   WORK --repeat of a running request--> parked in the dedupe table,
 *                                          sent when the first one ends
 *   SEND --sent (or failed)--> RECV
 *
 * nng runs aio callbacks on a few fixed task threads, so a callback never
 * blocks: it scans at most one envelope (rpc_envelope.h: at most six keys,
 * nothing unpacked), hashes at most one token, and answers Health, whose
 * handler only reads counters. Nothing of the body is decoded before the
 * caller is known, and a connection whose request was refused before it
 * was known is closed at its next request (refused_check). Everything
 * that may wait runs on a pool: "long" (Wait, ReadOutput, FetchArtifact) and
 * "short" (the rest), so a caller long-polling never holds up another's
 * CreateRun; within each, an identity gets at most half the workers and
 * half the queue (rpc_pool.h), so its flood never takes another's worker.
 * Each pool's queue is bounded and a full one (or a full share) is answered
 * with RESOURCE_EXHAUSTED at once. A repeat of a running request waits,
 * parked, in contexts of its own budget (as many as the pools hold, a
 * caller a quarter of them); beyond both there are more, so some are always
 * free to answer Health and to refuse. A repeat of a long transfer
 * (ExportArtifacts, ImportInputs) whose first runs or is queued, and that
 * can be neither given a worker nor parked, is dropped unanswered instead
 * of refused (rpc_methods.h, repeat_waits). */
#include "rpc.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "clock.h"
#include "conn_guard.h"
#include "metrics.h"
#include "nng_close.h"
#include "nng_err.h"
#include "rpc_alloc.h"
#include "rpc_auth.h"
#include "rpc_dedupe.h"
#include "rpc_envelope.h"
#include "rpc_listen.h"
#include "rpc_methods.h"
#include "rpc_pipes.h"
#include "rpc_pool.h"
#include "rpc_reply.h"
#include "util.h"

/* A reply that cannot be handed to the connection in this long (a peer that
 * stopped reading) frees its context anyway. */
#define SEND_TIMEOUT_MS 30000
/* Contexts beyond what both pools can hold: Health and refusals. */
#define SPARE_CALLS 16
/* What both pools hold: each pool's workers and its queue of as many. */
#define POOL_CALLS(n_short, n_long) (2 * ((size_t)(n_short) + (size_t)(n_long)))
/* Repeats parked on a running request (rpc_dedupe.h) hold their contexts
 * outside the pools: as many again, one caller a quarter of them, so that
 * neither one caller's repeats nor a few callers' together take the spare
 * contexts, and a caller's retry never waits on another's place. */
#define PARKED_CALLS(n_short, n_long) POOL_CALLS(n_short, n_long)
/* Contexts in all. */
#define N_CALLS(n_short, n_long)                                                                   \
	(POOL_CALLS(n_short, n_long) + PARKED_CALLS(n_short, n_long) + SPARE_CALLS)

#define DEDUPE_ENTRIES 4096
#define DEDUPE_BYTES   (64u << 20)
#define DEDUPE_TTL_MS  (10 * 60 * 1000)
/* nng_close normally takes milliseconds; past this it is stuck. */
#define CLOSE_TIMEOUT_MS 5000
/* Requests one connection may have in hand at once. Replies on a pipe go
 * out one at a time, so a peer that sends many and reads none would
 * otherwise hold every context (and starve every other caller) until the
 * send timeout; beyond this its requests are dropped unanswered. */
#define PIPE_INFLIGHT_MAX 8
/* A peer (a uid on ipc, an address on tcp) with many connections could
 * still take every context, 8 at a time: its requests in hand across all
 * of them stop at the contexts less half the spare ones, so another peer
 * always finds a context. Both pools' queues hold less than that, so a
 * peer that reads its answers never comes near it. */
#define PEER_INFLIGHT_MAX(n_calls) ((n_calls)-SPARE_CALLS / 2)
/* One identity on several peers (its uid on ipc, addresses on tcp) would
 * get PEER_INFLIGHT_MAX on each: once it is known, its requests in hand
 * stop at half of what the pools hold (about its shares of them; a quarter
 * of the contexts less the spare ones, which are the pools' and as many
 * for parked repeats), so the other half and the spare contexts stay for
 * everyone else. */
#define IDENTITY_INFLIGHT_MAX(n_calls) (((n_calls)-SPARE_CALLS) / 4)
/* Descriptors that connections never take (conn_guard_start checks the
 * caps fit beside them): sbxd's own (log, state, nng's pollers: 64, and
 * ended execs' and ended runs' directories waiting for the closer:
 * SBX_CLOSER_FDS), each run's
 * own (its helper's control socket, pidfd, directories, /out, its reader:
 * 16) and its execs' share (exec_fds_share: what its running execs may
 * hold, SBX_EXEC_FDS each, charged at Exec admission so that one run's
 * execs never take another's), and each worker's open files and walks
 * (with the pipes an Exec opens while it is answered). One budget of
 * RLIMIT_NOFILE (N):
 *   N = FD_RESERVE + conn_guard_fds (the listeners' caps) + the egress
 *       proxy's part (6 per connection, 1 per exec listener: egress.c),
 * where the proxy takes only what the first two leave (sbx_rpc_fd_need is
 * its fd_reserve), so the guard's check below, FD_RESERVE + caps <= N,
 * holds with the proxy's part counted. */
#define FD_RESERVE_FIXED(cfg)                                                                      \
	(64 + SBX_CLOSER_FDS + 16 * (size_t)(cfg)->runs_max + 16 * (size_t)(cfg)->workers +        \
	 ((cfg)->metrics.listen ? CONN_GUARD_HTTP_MAX + 2 : 0))
#define FD_RESERVE(cfg) (FD_RESERVE_FIXED(cfg) + (size_t)(cfg)->runs_max * (cfg)->exec_fds_share)

size_t sbx_rpc_fd_need(const struct sbx_config *cfg)
{
	return FD_RESERVE(cfg) + conn_guard_fds(&cfg->connections, cfg->n_listen);
}

void sbx_rpc_fit_exec_fds(struct sbx_config *cfg)
{
	struct rlimit rl = {0};
	size_t fixed = FD_RESERVE_FIXED(cfg), left = 0, share = cfg->exec_fds_per_run;

	if (!share) {
		/* Half of what the rest of the reserve leaves; the other half
		 * is the listeners' (which shrink to fit it, conn_guard_arm)
		 * and the proxy's. Caps the config wrote do not shrink: they
		 * are kept first, or a sbxd that started before would now be
		 * refused for its listeners. In whole execs, at least one. */
		if (cfg->connections.per_listener_given)
			fixed += conn_guard_fds(&cfg->connections, cfg->n_listen);
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > fixed)
			left = rl.rlim_cur - fixed < SIZE_MAX / 2 ? (size_t)(rl.rlim_cur - fixed)
								  : SIZE_MAX / 2;
		share = left / 2 / cfg->runs_max;
		share -= share % SBX_EXEC_FDS;
		if (share > SBX_EXEC_FDS_PER_RUN_MAX)
			share = SBX_EXEC_FDS_PER_RUN_MAX;
		if (share < SBX_EXEC_FDS)
			share = SBX_EXEC_FDS;
		if (share < SBX_EXEC_FDS_PER_RUN_MAX)
			fprintf(stderr,
				"sbxd: exec_fds_per_run fits %zu descriptors (%zu execs at once a "
				"run) in RLIMIT_NOFILE %llu beside %zu kept for runs, workers and "
				"the listeners' caps; "
				"raise the hard limit (ulimit -Hn) or lower runs_max for more\n",
				share, share / SBX_EXEC_FDS, (unsigned long long)rl.rlim_cur,
				fixed);
	}
	cfg->exec_fds_share = (uint32_t)share;
}
/* How often idle connections and stalled messages are looked for. */
#define SWEEP_MS 500
/* Connections remembered as having had a request refused before the caller
 * was known; the oldest is forgotten first (and then gets one more answered
 * refusal before it is closed). */
#define REFUSED_PIPES 256

#define container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

enum call_state { CALL_IDLE, CALL_RECV, CALL_WORK, CALL_SEND };

/* Shutting down in steps, so that nng never sees an operation start on a
 * socket it is closing: DRAINING takes no new work but still answers;
 * STOPPED starts nothing at all. */
enum phase { PHASE_RUNNING, PHASE_DRAINING, PHASE_STOPPED };
enum { POOL_SHORT, POOL_LONG, N_POOLS };

struct rpc_call {
	struct sbx_rpc *rpc;
	nng_ctx ctx;
	nng_aio *aio;
	enum call_state state;
	struct rpc_job job;		 /* while queued for a worker */
	struct rpc_dedupe_waiter waiter; /* while parked on a running twin */
	/* The request in hand, from RECV until its answer is sent: the
	 * message as received and the envelope's fields, whose body points
	 * into it. */
	nng_msg *msg;
	struct rpc_envelope env;
	const struct rpc_method *method;
	struct sbx_identity who;
	int64_t received_ms; /* sbx_mono_ms() */
	int64_t received_ns; /* sbx_mono_ns(): the answer's latency (metrics) */
	uint32_t pipe_id;    /* the connection of the request in hand; 0: none */
	char holder[sizeof(((struct sbx_identity *)0)->name)]; /* who, once known; "" */
	struct conn_peer_key peer_key;			       /* who is at its other end */
};

struct sbx_rpc {
	/* What a reload does not change (listeners, sizes, connection caps):
	 * the config sbxd started with. */
	const struct sbx_config *cfg;
	/* What it does: the auth table, swapped whole under auth_mu's write
	 * lock (sbx_rpc_reload), read under its read lock by every request. */
	pthread_rwlock_t auth_mu;
	struct rpc_auth_table *auth;
	struct sbx_runs *runs; /* what the handlers work on */
	atomic_int phase;
	nng_socket sock;
	bool sock_open;
	struct rpc_listeners listeners;
	struct rpc_pool pools[N_POOLS];
	bool pool_started[N_POOLS];
	struct rpc_dedupe *dedupe;
	struct rpc_call *calls;
	size_t n_calls;
	bool auth_mu_init;
	pthread_mutex_t pipes_mu; /* every call's pipe_id and peer_key, pipes, refused[] */
	struct rpc_pipes *pipes;  /* when each connection was last active */
	uint32_t refused[REFUSED_PIPES];
	size_t refused_next;
	/* Closes idle connections and stalled messages, every SWEEP_MS. */
	pthread_t sweeper;
	bool sweeper_started, sweep_stop;
	pthread_mutex_t sweep_mu;
	pthread_cond_t sweep_cv;
};

/* ---- the state machine's moves ---- */

/* Takes a slot for the request's connection; false when it has
 * PIPE_INFLIGHT_MAX requests in hand already, or its peer has
 * PEER_INFLIGHT_MAX across its connections. */
static bool pipe_admit(struct rpc_call *c, nng_pipe p)
{
	struct sbx_rpc *rpc = c->rpc;
	uint32_t pipe_id = nng_pipe_id(p);
	size_t on_pipe = 0, of_peer = 0;
	struct conn_peer_key key;
	bool ok;

	if (!conn_peer_key_of_pipe(p, &key))
		return false;
	pthread_mutex_lock(&rpc->pipes_mu);
	for (size_t i = 0; i < rpc->n_calls; i++) {
		const struct rpc_call *o = &rpc->calls[i];

		on_pipe += o->pipe_id == pipe_id;
		of_peer += o->pipe_id && memcmp(&o->peer_key, &key, sizeof(key)) == 0;
	}
	ok = on_pipe < PIPE_INFLIGHT_MAX && of_peer < PEER_INFLIGHT_MAX(rpc->n_calls);
	if (ok) {
		c->pipe_id = pipe_id;
		c->peer_key = key;
		c->holder[0] = '\0';
		rpc_pipes_touch(rpc->pipes, pipe_id, sbx_mono_ms());
	}
	pthread_mutex_unlock(&rpc->pipes_mu);
	return ok;
}

static void pipe_release(struct rpc_call *c)
{
	pthread_mutex_lock(&c->rpc->pipes_mu);
	/* Its answer just went: the connection is idle from now. */
	if (c->pipe_id)
		rpc_pipes_touch(c->rpc->pipes, c->pipe_id, sbx_mono_ms());
	c->pipe_id = 0;
	c->holder[0] = '\0';
	pthread_mutex_unlock(&c->rpc->pipes_mu);
}

/* Counts the request in hand to its identity, now known; false when the
 * identity has IDENTITY_INFLIGHT_MAX in hand already. */
static bool identity_admit(struct rpc_call *c)
{
	struct sbx_rpc *rpc = c->rpc;
	size_t of_identity = 0;
	bool ok;

	pthread_mutex_lock(&rpc->pipes_mu);
	for (size_t i = 0; i < rpc->n_calls; i++) {
		const struct rpc_call *o = &rpc->calls[i];

		of_identity += o->pipe_id && strcmp(o->holder, c->who.name) == 0;
	}
	ok = of_identity < IDENTITY_INFLIGHT_MAX(rpc->n_calls);
	if (ok)
		snprintf(c->holder, sizeof(c->holder), "%s", c->who.name);
	pthread_mutex_unlock(&rpc->pipes_mu);
	return ok;
}

/* Pre-authentication work is bounded per connection: a request refused
 * before sbxd knew who sent it (no token, a wrong one, an envelope it would
 * not read on a transport that names nobody) is answered, so an honest
 * client learns why, and its connection is remembered; the next request on
 * it closes it, unread beyond what nng already read. A client's REQ socket
 * dials again and resends, so an honest one only pays a reconnect; a flood
 * gets one refusal per connection it makes (nng 1.5.2 finishes a send before
 * the bytes leave, so closing right after the answer could lose it). */
static void refused_add(struct sbx_rpc *rpc, uint32_t pipe_id)
{
	pthread_mutex_lock(&rpc->pipes_mu);
	rpc->refused[rpc->refused_next] = pipe_id;
	rpc->refused_next = (rpc->refused_next + 1) % REFUSED_PIPES;
	pthread_mutex_unlock(&rpc->pipes_mu);
}

/* true: pipe_id had a refusal, and is forgotten now (it is being closed). */
static bool refused_check(struct sbx_rpc *rpc, uint32_t pipe_id)
{
	bool found = false;

	pthread_mutex_lock(&rpc->pipes_mu);
	for (size_t i = 0; i < REFUSED_PIPES && !found; i++)
		if (rpc->refused[i] == pipe_id) {
			rpc->refused[i] = 0;
			found = true;
		}
	pthread_mutex_unlock(&rpc->pipes_mu);
	return found;
}

static void release_request(struct rpc_call *c)
{
	if (c->msg)
		nng_msg_free(c->msg);
	c->msg = NULL;
	c->env.body = NULL;
	c->env.body_len = 0;
	c->method = NULL;
}

/* The request in hand is over: a worker's call stops being pending (its
 * answer is on its connection's way, or there is none), then what it held
 * goes. Before this c must not change: a repeat's lookup may read it. */
static void end_request(struct rpc_call *c)
{
	if (c->job.taken_by) {
		rpc_pool_unlist(&c->job);
		c->job.taken_by = NULL;
	}
	release_request(c);
}

static void start_recv(struct rpc_call *c)
{
	end_request(c);
	pipe_release(c);
	if (atomic_load(&c->rpc->phase) == PHASE_STOPPED) {
		c->state = CALL_IDLE;
		return;
	}
	c->state = CALL_RECV;
	nng_aio_set_timeout(c->aio, NNG_DURATION_INFINITE);
	nng_ctx_recv(c->ctx, c->aio);
}

/* Sends m as the answer to the request in hand. Without a message (out of
 * memory) the request is dropped: the client's REQ sends it again. A
 * worker's call keeps its request until the send is done (start_recv),
 * and stays listed as pending until its worker's run returns, after this
 * send: nng's REP nng_ctx_send puts the answer on its connection's FIFO
 * send queue before it returns, so a refusal of a repeat on the same
 * connection comes after it (review 19). */
static void send_msg(struct rpc_call *c, nng_msg *m)
{
	if (!c->job.taken_by)
		release_request(c);
	if (m && atomic_load(&c->rpc->phase) == PHASE_STOPPED) {
		nng_msg_free(m);
		m = NULL;
	}
	if (!m) {
		start_recv(c);
		return;
	}
	c->state = CALL_SEND;
	nng_aio_set_msg(c->aio, m);
	nng_aio_set_timeout(c->aio, SEND_TIMEOUT_MS);
	nng_ctx_send(c->ctx, c->aio);
}

static void send_bytes(struct rpc_call *c, const uint8_t *bytes, size_t len)
{
	nng_msg *m = NULL;

	if (bytes && nng_msg_alloc(&m, len) == 0)
		memcpy(nng_msg_body(m), bytes, len);
	else
		m = NULL;
	send_msg(c, m);
}

/* An answer in the metrics: its method (NULL before it is known) and code. */
static void count_answer(const struct rpc_call *c, Sbx__V1__Code code)
{
	sbx_metrics_rpc(c->method ? c->method->name : NULL, code,
			(double)(sbx_mono_ns() - c->received_ns) / 1e9);
}

/* Answers the request in hand with an error status. */
static void answer_status(struct rpc_call *c, const struct sbx_rpc_status *st)
{
	count_answer(c, st->code);
	send_msg(c, rpc_reply_status(st, c->rpc->cfg->max_message_bytes));
}

__attribute__((format(printf, 3, 4))) static void
answer_error(struct rpc_call *c, Sbx__V1__Code code, const char *fmt, ...)
{
	struct sbx_rpc_status st = {.code = code};
	va_list ap;

	va_start(ap, fmt);
	sbx_failv(&st.err, 0, fmt, ap);
	va_end(ap);
	answer_status(c, &st);
}

/* Answers UNAVAILABLE with in_progress: the request's earlier attempt ran
 * or runs here, so its retry belongs here, never on another host. */
__attribute__((format(printf, 2, 3))) static void answer_in_progress(struct rpc_call *c,
								     const char *fmt, ...)
{
	struct sbx_rpc_status st;
	char msg[SBX_ERR_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	sbx_rpc_in_progress(&st, "%s", msg);
	answer_status(c, &st);
}

/* Runs the method on the request in hand; the packed Response, or NULL when
 * out of memory. *code is what it says. */
static nng_msg *run_method(struct rpc_call *c, Sbx__V1__Code *code)
{
	ProtobufCMessage *resp = NULL;
	struct sbx_rpc_status st = {0};
	struct rpc_bulk bulk;
	nng_msg *m;
	int rc;

	rpc_bulk_init(&bulk);
	rc = rpc_method_run(c->method, c->rpc->runs, &c->who, c->env.body, c->env.body_len, &resp,
			    &bulk.b, &st);
	*code = rc < 0 ? st.code : SBX__V1__CODE__OK;
	count_answer(c, *code);
	if (rc < 0)
		m = rpc_reply_status(&st, c->rpc->cfg->max_message_bytes);
	else if (bulk.msg)
		m = rpc_reply_bulk(resp, &bulk, c->rpc->cfg->max_message_bytes);
	else
		m = rpc_reply(SBX__V1__CODE__OK, "", resp, c->rpc->cfg->max_message_bytes);
	rpc_bulk_drop(&bulk);
	if (resp)
		protobuf_c_message_free_unpacked(resp, NULL);
	return m;
}

/* ---- on a worker ---- */

/* A request id seen with another method or body (a client's bug: both
 * clients make a new id per call), said the same by a worker and by the
 * refusal of a repeat no worker can take. */
#define MISMATCH_FMT                                                                               \
	"request_id \"%s\" was already used for a different request (method or body differ)"

/* What makes two requests with one id the same request. */
static void fingerprint(const struct rpc_envelope *req, uint8_t out[32])
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned int len = 0;

	memset(out, 0, 32);
	if (md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) &&
	    EVP_DigestUpdate(md, req->method, strlen(req->method) + 1) &&
	    (!req->body_len || EVP_DigestUpdate(md, req->body, req->body_len)))
		EVP_DigestFinal_ex(md, out, &len);
	EVP_MD_CTX_free(md);
}

/* A parked repeat gets the first one's answer, byte for byte. */
static void answer_parked(struct rpc_dedupe_waiter *w, const uint8_t *answer, size_t len)
{
	send_bytes(container_of(w, struct rpc_call, waiter), answer, len);
}

/* ---- a repeat's first, pending in a pool (rpc_pool_pending_match) ---- */

/* How a pending call of the caller's stands to a repeat
 * (repeat_refused_here), weakest first: the strongest found decides. */
enum pending_relation {
	PENDING_NONE,
	PENDING_OTHER_BODY, /* its method and request id, another body */
	PENDING_ELSEWHERE,  /* the same request, for another connection */
	PENDING_HERE,	    /* the same request on this connection, where its
			     * answer reaches this caller (REQ resends on the
			     * connection it uses until it redials) */
};

struct pending_probe {
	const struct rpc_call *repeat;
	enum pending_relation *found;
};

/* Records how job stands to the probe's repeat; true (the scan stops) at
 * the strongest relation only. The pool lists a call from its submit until
 * its answer is sent (end_request), so no pending first is missed between
 * the queue, the worker and the dedupe table, and what this reads of it
 * does not change while it is listed. The bodies are compared byte for
 * byte (what a resend carries), not by a fingerprint: one scan, and one
 * compare per call with the repeat's id, is what a repeat costs the nng
 * callback. */
static bool relate(const struct rpc_job *job, const void *arg)
{
	const struct pending_probe *probe = arg;
	const struct rpc_call *q = container_of(job, struct rpc_call, job);
	const struct rpc_call *c = probe->repeat;
	enum pending_relation r;

	if (q == c || q->method != c->method || strcmp(q->env.request_id, c->env.request_id) != 0)
		return false;
	if (q->env.body_len != c->env.body_len ||
	    (c->env.body_len && memcmp(q->env.body, c->env.body, c->env.body_len) != 0))
		r = PENDING_OTHER_BODY;
	else if (q->pipe_id == c->pipe_id)
		r = PENDING_HERE;
	else
		r = PENDING_ELSEWHERE;
	if (r > *probe->found)
		*probe->found = r;
	return r == PENDING_HERE;
}

static enum pending_relation pending(struct rpc_call *c)
{
	int pool = c->method->lane == RPC_LONG ? POOL_LONG : POOL_SHORT;
	enum pending_relation found = PENDING_NONE;
	struct pending_probe probe = {.repeat = c, .found = &found};

	rpc_pool_pending_match(&c->rpc->pools[pool], c->who.name, relate, &probe);
	return found;
}

/* The verdicts whose answer is the same wherever the dedupe table is asked
 * (a worker's rpc_dedupe_begin, the callback's rpc_dedupe_repeat): the
 * first's answer replayed, c parked on the first, or the id's other body
 * refused. true: c is answered or parked (then the table's, until
 * answer_parked). */
static bool answer_repeat(struct rpc_call *c, enum rpc_dedupe_verdict v, uint8_t *replay,
			  size_t replay_len, const char *shown_id)
{
	switch (v) {
	case DEDUPE_REPLAY:
		sbx_metrics_add(SBX_M_RPC_REPEATS, SBX_REPEAT_REPLAYED, 1);
		send_bytes(c, replay, replay_len);
		free(replay);
		return true;
	case DEDUPE_PARKED:
		sbx_metrics_add(SBX_M_RPC_REPEATS, SBX_REPEAT_PARKED, 1);
		return true;
	case DEDUPE_MISMATCH:
		sbx_metrics_add(SBX_M_RPC_REPEATS, SBX_REPEAT_MISMATCHED, 1);
		answer_error(c, SBX__V1__CODE__INVALID_ARGUMENT, MISMATCH_FMT, shown_id);
		return true;
	case DEDUPE_FIRST:
	case DEDUPE_FULL:
	case DEDUPE_BUSY:
	case DEDUPE_NOMEM:
	case DEDUPE_ABSENT:
		break;
	}
	return false;
}

/* A long transfer's repeat, left unanswered: a refusal would reach the
 * caller before the first's answer and end its transfer (review 16; an
 * in_progress answer as well, review 20); the first's answer, a parked
 * copy or its next resend's replay answers the caller. */
static void drop_repeat(struct rpc_call *c)
{
	sbx_metrics_add(SBX_M_RPC_REPEATS, SBX_REPEAT_DROPPED, 1);
	send_msg(c, NULL);
}

/* A long transfer's repeat (repeat_waits) whose first is pending for
 * another connection: REQ redialled and resent, and the first's answer
 * will go to the connection the first came on. Parked on the first's
 * entry when it has one and there is room, it gets that answer (replayed
 * if the first just answered); otherwise (the first still queued, or
 * its worker not yet at rpc_dedupe_begin; the caller's parking share
 * spent; no memory) it is dropped. It may hash the request: only the
 * caller's own repeats come here, at its own bytes' cost. */
static void repeat_elsewhere(struct rpc_call *c, const char *shown_id)
{
	uint8_t fp[32], *replay;
	size_t replay_len;
	enum rpc_dedupe_verdict v;

	fingerprint(&c->env, fp);
	v = rpc_dedupe_repeat(c->rpc->dedupe, c->who.name, c->env.request_id, fp, &c->waiter,
			      &replay, &replay_len);
	if (!answer_repeat(c, v, replay, replay_len, shown_id))
		drop_repeat(c);
}

static void work(struct rpc_job *job)
{
	struct rpc_call *c = container_of(job, struct rpc_call, job);
	struct sbx_rpc *rpc = c->rpc;
	const struct rpc_envelope *req = &c->env;
	struct rpc_dedupe_entry *first = NULL;
	char shown_id[RPC_REQUEST_ID_MAX + 1];
	uint8_t *replay;
	size_t replay_len;
	uint8_t fp[32];
	enum rpc_dedupe_verdict v;
	Sbx__V1__Code code;
	nng_msg *m;

	/* The caller gave up while this sat in the queue: doing it now would
	 * act for nobody (and a retry would act again). */
	int64_t waited_ms = sbx_mono_ms() - c->received_ms;

	if (req->deadline_ms && waited_ms > (int64_t)req->deadline_ms) {
		answer_error(c, SBX__V1__CODE__DEADLINE_EXCEEDED,
			     "%s: waited %lld ms for a worker, past deadline_ms %u",
			     c->method->name, (long long)waited_ms, req->deadline_ms);
		return;
	}

	if (c->method->dedupe && req->request_id[0]) {
		rpc_text_clean(shown_id, sizeof(shown_id), req->request_id);
		fingerprint(req, fp);
		v = rpc_dedupe_begin(rpc->dedupe, c->who.name, req->request_id, fp, &c->waiter,
				     &first, &replay, &replay_len);
		if (answer_repeat(c, v, replay, replay_len, shown_id))
			return;
		switch (v) {
		case DEDUPE_FIRST:
			break;
		case DEDUPE_REPLAY:
		case DEDUPE_PARKED:
		case DEDUPE_MISMATCH: /* answer_repeat's */
			return;
		case DEDUPE_BUSY:
			/* A long transfer's repeat is never refused while its
			 * first runs: the first's answer, or a parked copy,
			 * answers it. */
			if (c->method->repeat_waits) {
				drop_repeat(c);
				return;
			}
			answer_in_progress(c,
					   "request_id \"%s\": an earlier attempt is still running "
					   "here; retry on this host",
					   shown_id);
			return;
		case DEDUPE_NOMEM:
			answer_in_progress(
			    c,
			    "request_id \"%s\": an earlier attempt ran here, and there "
			    "was no memory for its answer now; retry on this host",
			    shown_id);
			return;
		case DEDUPE_FULL:
		case DEDUPE_ABSENT: /* rpc_dedupe_begin makes the entry instead */
			answer_error(c, SBX__V1__CODE__UNAVAILABLE,
				     "request_id \"%s\": no room to remember it now; retry",
				     shown_id);
			return;
		}
	}

	m = run_method(c, &code);
	if (first) {
		/* "Try again later" must not become the remembered answer, or
		 * the retry it invites could never run. */
		bool keep = m && code != SBX__V1__CODE__UNAVAILABLE &&
			    code != SBX__V1__CODE__RESOURCE_EXHAUSTED;

		rpc_dedupe_finish(rpc->dedupe, first, m ? nng_msg_body(m) : NULL,
				  m ? nng_msg_len(m) : 0, keep, answer_parked);
	}
	send_msg(c, m);
}

/* ---- in the nng callback: never blocks ---- */

/* Answers a request refused before its caller was known, and marks its
 * connection (refused_add). */
static void refuse(struct rpc_call *c, const struct sbx_rpc_status *st)
{
	refused_add(c->rpc, c->pipe_id);
	answer_status(c, st);
}

/* A request the pools cannot take now (its caller's share in hand, or
 * every worker and queue place taken), answered UNAVAILABLE with
 * in_progress when it repeats a request id whose first ran or runs here:
 * a resend after a timeout must not read "try elsewhere", or a fleet
 * client makes a second run on another host while this one makes its
 * own. A long transfer's repeat (repeat_waits) whose first is pending on
 * its own connection is dropped unanswered instead (the first's answer is
 * its caller's: a refusal would reach the caller first and end the
 * transfer), one whose first is pending for another connection is
 * parked on it where it can be (repeat_elsewhere), and its id with
 * another body is INVALID_ARGUMENT, as a worker would say. true: answered,
 * parked or dropped. */
static bool repeat_refused_here(struct rpc_call *c)
{
	char shown_id[RPC_REQUEST_ID_MAX + 1];

	if (!c->method->dedupe || !c->env.request_id[0])
		return false;
	rpc_text_clean(shown_id, sizeof(shown_id), c->env.request_id);
	switch (c->method->repeat_waits ? pending(c) : PENDING_NONE) {
	case PENDING_HERE:
		drop_repeat(c);
		return true;
	case PENDING_ELSEWHERE:
		repeat_elsewhere(c, shown_id);
		return true;
	case PENDING_OTHER_BODY: /* what the dedupe table would say */
		return answer_repeat(c, DEDUPE_MISMATCH, NULL, 0, shown_id);
	case PENDING_NONE:
		break;
	}
	if (!rpc_dedupe_seen(c->rpc->dedupe, c->who.name, c->env.request_id))
		return false;
	answer_in_progress(c,
			   "request_id \"%s\": an earlier attempt ran or is running here, and no "
			   "worker is free for this one; retry on this host",
			   shown_id);
	return true;
}

static void on_request(struct rpc_call *c, nng_msg *msg)
{
	struct sbx_rpc *rpc = c->rpc;
	struct rpc_envelope *req = &c->env;
	char shown[RPC_METHOD_MAX + 1];
	struct sbx_rpc_status st = {0};
	struct rpc_peer peer;
	nng_pipe pipe = nng_msg_get_pipe(msg);
	int pool;

	c->received_ns = sbx_mono_ns();
	c->received_ms = c->received_ns / 1000000;
	if (refused_check(rpc, nng_pipe_id(pipe))) {
		/* Its last request was refused unauthenticated: this one is
		 * not looked at, and the connection goes. */
		nng_msg_free(msg);
		nng_pipe_close(pipe);
		start_recv(c);
		return;
	}
	if (!rpc_peer_of(&rpc->listeners, msg, &peer) || !pipe_admit(c, pipe)) {
		/* The connection is gone (nobody to answer), or has too many
		 * requests in hand: dropped, and the context is free again. */
		nng_msg_free(msg);
		start_recv(c);
		return;
	}
	/* The body stays in msg, unread, until the caller is known. */
	c->msg = msg;
	if (rpc_envelope_scan(nng_msg_body(msg), nng_msg_len(msg), req, &st.err) !=
	    RPC_ENVELOPE_OK) {
		st.code = SBX__V1__CODE__INVALID_ARGUMENT;
		/* ipc names the caller whatever the bytes say; elsewhere an
		 * unreadable envelope is as anonymous as a missing token. */
		if (peer.have_uid)
			answer_status(c, &st);
		else
			refuse(c, &st);
		return;
	}
	rpc_text_clean(shown, sizeof(shown), req->method);
	int auth;

	pthread_rwlock_rdlock(&rpc->auth_mu);
	auth = rpc_auth(rpc->auth, &peer, req->credentials, shown, &c->who, &st);
	pthread_rwlock_unlock(&rpc->auth_mu);

	/* The token has done its job; it need not linger in the heap. */
	OPENSSL_cleanse((uint8_t *)nng_msg_body(msg) + req->credentials_at,
			strlen(req->credentials));
	OPENSSL_cleanse(req->credentials, sizeof(req->credentials));
	if (auth < 0) {
		refuse(c, &st);
		return;
	}
	if (!identity_admit(c)) {
		/* As pipe_admit: dropped (an answer would queue behind the
		 * sends that hold the identity's contexts). */
		release_request(c);
		start_recv(c);
		return;
	}
	c->method = rpc_method_find(req->method);
	if (!c->method) {
		answer_error(c, SBX__V1__CODE__UNIMPLEMENTED, "unknown method \"%s\"", shown);
		return;
	}
	if (c->method->body_max && req->body_len > c->method->body_max) {
		answer_error(c, SBX__V1__CODE__INVALID_ARGUMENT,
			     "body: %zu bytes, more than a valid %s request can have (%zu)",
			     req->body_len, shown, c->method->body_max);
		return;
	}

	if (c->method->lane == RPC_INLINE) {
		Sbx__V1__Code code;

		send_msg(c, run_method(c, &code));
		return;
	}
	if (atomic_load(&rpc->phase) != PHASE_RUNNING) {
		answer_error(c, SBX__V1__CODE__UNAVAILABLE, "sbxd is shutting down");
		return;
	}
	pool = c->method->lane == RPC_LONG ? POOL_LONG : POOL_SHORT;
	c->state = CALL_WORK;
	c->job.owner = c->who.name;
	/* From a successful submit on, c is the worker's: touch nothing. */
	enum rpc_pool_verdict v = rpc_pool_submit(&rpc->pools[pool], &c->job);

	if (v == RPC_POOL_TAKEN)
		return;
	if ((v == RPC_POOL_SHARE || v == RPC_POOL_FULL) && repeat_refused_here(c))
		return;
	switch (v) {
	case RPC_POOL_TAKEN: /* returned above; named for -Wswitch */
		return;
	case RPC_POOL_SHARE:
		answer_error(c, SBX__V1__CODE__RESOURCE_EXHAUSTED,
			     "%s has its share of the %s pool in hand already (%zu running and "
			     "%zu queued); retry when one of them has returned",
			     c->who.name, pool == POOL_LONG ? "long-call" : "short-call",
			     rpc->pools[pool].run_share, rpc->pools[pool].queue_share);
		return;
	case RPC_POOL_STOPPING:
		answer_error(c, SBX__V1__CODE__UNAVAILABLE, "sbxd is shutting down");
		return;
	case RPC_POOL_FULL:
		break;
	}
	answer_error(c, SBX__V1__CODE__RESOURCE_EXHAUSTED,
		     "server busy: every %s worker is taken and its queue is full; retry later",
		     pool == POOL_LONG ? "long-call" : "short-call");
}

static void call_cb(void *arg)
{
	struct rpc_call *c = arg;
	int rv = nng_aio_result(c->aio);
	nng_msg *msg;

	switch (c->state) {
	case CALL_RECV:
		if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
			c->state = CALL_IDLE;
			return;
		}
		if (rv != 0) {
			start_recv(c);
			return;
		}
		msg = nng_aio_get_msg(c->aio);
		/* Ours now; the aio must not point at it once it is freed. */
		nng_aio_set_msg(c->aio, NULL);
		on_request(c, msg);
		return;
	case CALL_SEND:
		/* On failure the message is still ours. */
		if (rv != 0) {
			nng_msg_free(nng_aio_get_msg(c->aio));
			nng_aio_set_msg(c->aio, NULL);
		}
		if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
			end_request(c);
			c->state = CALL_IDLE;
			return;
		}
		start_recv(c);
		return;
	default:
		return; /* no operation was outstanding */
	}
}

/* ---- connections: idle ones and stalled messages ---- */

static void pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct sbx_rpc *rpc = arg;
	nng_sockaddr sa;

	if (ev == NNG_PIPE_EV_ADD_POST && nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) == 0)
		conn_guard_pipe_added(&sa);
	pthread_mutex_lock(&rpc->pipes_mu);
	if (ev == NNG_PIPE_EV_ADD_POST)
		rpc_pipes_touch(rpc->pipes, nng_pipe_id(p), sbx_mono_ms());
	else
		rpc_pipes_forget(rpc->pipes, nng_pipe_id(p));
	pthread_mutex_unlock(&rpc->pipes_mu);
}

/* Under pipes_mu. */
static bool pipe_busy(void *arg, uint32_t pipe_id)
{
	const struct sbx_rpc *rpc = arg;

	for (size_t i = 0; i < rpc->n_calls; i++)
		if (rpc->calls[i].pipe_id == pipe_id)
			return true;
	return false;
}

/* A connection with no request in hand and none for idle_seconds is
 * closed: an attacker's idle one, or one stopped mid-message where the
 * connection guard cannot read the framing (tls+tcp). A client that was
 * merely quiet redials (nng's dialer does it by itself). */
static void close_idle(struct sbx_rpc *rpc, int64_t now)
{
	int64_t before = now - (int64_t)rpc->cfg->connections.idle_seconds * 1000;
	uint32_t ids[256];
	size_t n;

	do {
		pthread_mutex_lock(&rpc->pipes_mu);
		n = rpc_pipes_take_idle(rpc->pipes, before, pipe_busy, rpc, ids, 256);
		pthread_mutex_unlock(&rpc->pipes_mu);
		for (size_t i = 0; i < n; i++) {
			nng_pipe p = NNG_PIPE_INITIALIZER;

			p.id = ids[i];
			nng_pipe_close(p); /* a pipe already gone: NNG_ENOENT, fine */
		}
	} while (n == 256);
}

static void *sweeper(void *arg)
{
	struct sbx_rpc *rpc = arg;

	pthread_mutex_lock(&rpc->sweep_mu);
	while (!rpc->sweep_stop) {
		struct timespec until = sbx_mono_after_ms(SWEEP_MS);

		pthread_cond_timedwait(&rpc->sweep_cv, &rpc->sweep_mu, &until);
		if (rpc->sweep_stop)
			break;
		pthread_mutex_unlock(&rpc->sweep_mu);
		conn_guard_sweep(sbx_mono_ms());
		close_idle(rpc, sbx_mono_ms());
		pthread_mutex_lock(&rpc->sweep_mu);
	}
	pthread_mutex_unlock(&rpc->sweep_mu);
	return NULL;
}

static int start_sweeper(struct sbx_rpc *rpc, struct sbx_err *err)
{
	pthread_condattr_t ca;
	int rc;

	pthread_mutex_init(&rpc->sweep_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&rpc->sweep_cv, &ca);
	pthread_condattr_destroy(&ca);
	if ((rc = pthread_create(&rpc->sweeper, NULL, sweeper, rpc)) != 0)
		return sbx_fail_errnum(err, rc, "connection sweeper thread");
	rpc->sweeper_started = true;
	return 0;
}

static void stop_sweeper(struct sbx_rpc *rpc)
{
	if (!rpc->sweeper_started)
		return;
	pthread_mutex_lock(&rpc->sweep_mu);
	rpc->sweep_stop = true;
	pthread_cond_signal(&rpc->sweep_cv);
	pthread_mutex_unlock(&rpc->sweep_mu);
	pthread_join(rpc->sweeper, NULL);
	rpc->sweeper_started = false;
	pthread_cond_destroy(&rpc->sweep_cv);
	pthread_mutex_destroy(&rpc->sweep_mu);
}

/* ---- life cycle ---- */

const char *sbx_rpc_listener_url(const struct sbx_rpc *rpc, size_t i)
{
	return i < rpc->listeners.n ? rpc->listeners.items[i].url : NULL;
}

static int open_calls(struct sbx_rpc *rpc, size_t n, struct sbx_err *err)
{
	int rv;

	rpc->calls = calloc(n, sizeof(*rpc->calls));
	if (!rpc->calls)
		return sbx_fail(err, "out of memory for %zu contexts", n);
	while (rpc->n_calls < n) {
		/* Counted before it is set up, so that a failure halfway is
		 * cleaned up with the rest. */
		struct rpc_call *c = &rpc->calls[rpc->n_calls++];

		c->rpc = rpc;
		c->job.run = work;
		if ((rv = nng_aio_alloc(&c->aio, call_cb, c)) != 0)
			return sbx_fail_nng(err, rv, "nng_aio_alloc");
		if ((rv = nng_ctx_open(&c->ctx, rpc->sock)) != 0)
			return sbx_fail_nng(err, rv, "nng_ctx_open");
	}
	return 0;
}

/* A start that fails halfway undoes what it did (sbx_rpc_stop takes any
 * half-built server). */
static void rpc_stopp(struct sbx_rpc **rpc)
{
	sbx_rpc_stop(*rpc);
}

struct sbx_rpc *sbx_rpc_start(const struct sbx_config *cfg, struct sbx_runs *runs,
			      struct sbx_err *err)
{
	struct rpc_dedupe_limits lim;
	/* workers is split between the pools; each gets at least one. */
	size_t workers = cfg->workers ? cfg->workers : 1;
	size_t n_short = workers / 2 ? workers / 2 : 1;
	size_t n_long = workers > n_short ? workers - n_short : 1;
	_cleanup_(rpc_stopp) struct sbx_rpc *rpc = NULL;
	pthread_rwlockattr_t rwattr;
	int rv;

	if (rpc_methods_check(err) < 0)
		return NULL;
	rpc = calloc(1, sizeof(*rpc));
	if (!rpc) {
		sbx_fail_errnum(err, ENOMEM, "RPC server");
		return NULL;
	}
	rpc->cfg = cfg;
	rpc->runs = runs;
	pthread_mutex_init(&rpc->pipes_mu, NULL);
	/* Writer first: a steady stream of requests must not hold a reload
	 * off (glibc's default prefers readers). */
	pthread_rwlockattr_init(&rwattr);
	pthread_rwlockattr_setkind_np(&rwattr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&rpc->auth_mu, &rwattr);
	pthread_rwlockattr_destroy(&rwattr);
	rpc->auth_mu_init = true;
	if (!(rpc->auth = rpc_auth_table_new(cfg))) {
		sbx_fail_errnum(err, ENOMEM, "token table");
		return NULL;
	}
	if (!(rpc->pipes = rpc_pipes_new())) {
		sbx_fail_errnum(err, ENOMEM, "connection table");
		return NULL;
	}
	lim.max_entries = DEDUPE_ENTRIES;
	/* Any answer that can be sent (a Teardown's manifest may be large)
	 * fits in one caller's quarter of the table. */
	lim.max_bytes =
	    DEDUPE_BYTES > 4 * cfg->max_message_bytes ? DEDUPE_BYTES : 4 * cfg->max_message_bytes;
	/* A parked repeat holds its context until the first request ends,
	 * also when its connection is gone, and it stays counted to its
	 * identity (IDENTITY_INFLIGHT_MAX). The parked budget is contexts of
	 * its own (PARKED_CALLS), a caller a quarter of it (half its share of
	 * requests in hand at the default sizes): one caller's repeats of its
	 * own slow request (a Teardown listing a large /out) neither refuse
	 * another caller's retry, as a cap of 8 for all once did, nor take
	 * every place of its own, and no callers' repeats together take the
	 * spare contexts Health is answered in. */
	lim.max_parked = PARKED_CALLS(n_short, n_long);
	lim.max_parked_per_identity = PARKED_CALLS(n_short, n_long) / 4;
	lim.ttl_ms = DEDUPE_TTL_MS;
	rpc->dedupe = rpc_dedupe_new(&lim);
	if (!rpc->dedupe) {
		sbx_fail_errnum(err, ENOMEM, "request-id table");
		return NULL;
	}
	/* Each queue holds as many as its pool runs: at most twice the
	 * workers in flight per pool, then RESOURCE_EXHAUSTED. */
	if (rpc_pool_start(&rpc->pools[POOL_SHORT], "short", n_short, n_short, err) < 0)
		return NULL;
	rpc->pool_started[POOL_SHORT] = true;
	if (rpc_pool_start(&rpc->pools[POOL_LONG], "long", n_long, n_long, err) < 0)
		return NULL;
	rpc->pool_started[POOL_LONG] = true;

	if ((rv = nng_rep0_open(&rpc->sock)) != 0) {
		sbx_fail_nng(err, rv, "nng_rep0_open");
		return NULL;
	}
	rpc->sock_open = true;
	/* Also set per listener; this covers anything created later. */
	nng_socket_set_size(rpc->sock, NNG_OPT_RECVMAXSZ, (size_t)cfg->max_message_bytes);
	if (open_calls(rpc, N_CALLS(n_short, n_long), err) < 0)
		return NULL;
	if ((rv = nng_pipe_notify(rpc->sock, NNG_PIPE_EV_ADD_POST, pipe_event, rpc)) != 0 ||
	    (rv = nng_pipe_notify(rpc->sock, NNG_PIPE_EV_REM_POST, pipe_event, rpc)) != 0) {
		sbx_fail_nng(err, rv, "nng_pipe_notify");
		return NULL;
	}
	if (conn_guard_start(&cfg->connections, cfg->n_listen, FD_RESERVE(cfg), err) < 0)
		return NULL;
	if (start_sweeper(rpc, err) < 0)
		return NULL;
	if (rpc_listen(rpc->sock, cfg, &rpc->listeners, err) < 0)
		return NULL;
	/* Only now: the callbacks read the listener table without a lock, so
	 * it must be complete before the first of them can run. */
	for (size_t i = 0; i < rpc->n_calls; i++)
		start_recv(&rpc->calls[i]);
	return sbx_steal_ptr(rpc);
}

int sbx_rpc_reload(struct sbx_rpc *rpc, const struct sbx_config *next, char *changed, size_t size,
		   struct sbx_err *err)
{
	struct rpc_auth_table *tab = rpc_auth_table_new(next), *old;
	size_t n, len;

	if (!tab)
		return sbx_fail_errnum(err, ENOMEM, "token table");
	/* The step that can fail first: a bad certificate refuses the whole
	 * reload with nothing changed. */
	if (rpc_listen_tls_reload(&rpc->listeners, next, changed, size, err) < 0) {
		free(tab);
		return -1;
	}
	pthread_rwlock_wrlock(&rpc->auth_mu);
	old = rpc->auth;
	n = rpc_auth_table_changes(old, tab);
	rpc->auth = tab;
	pthread_rwlock_unlock(&rpc->auth_mu);
	free(old);
	len = strlen(changed);
	if (n && len < size)
		snprintf(changed + len, size - len, "%stokens (%zu changed)", len ? ", " : "", n);
	return 0;
}

int sbx_rpc_stop(struct sbx_rpc *rpc)
{
	if (!rpc)
		return 0;
	/* No new connections (ipc socket files go), no new work; handlers
	 * still running finish and their answers are sent. */
	atomic_store(&rpc->phase, PHASE_DRAINING);
	stop_sweeper(rpc);
	for (size_t i = 0; i < rpc->listeners.n; i++)
		nng_listener_close(rpc->listeners.items[i].l);
	for (int i = 0; i < N_POOLS; i++)
		if (rpc->pool_started[i])
			rpc_pool_stop(&rpc->pools[i], NULL);
	/* Then nothing starts any more, and every pending receive and send
	 * is cancelled and its callback waited for, before the socket closes. */
	atomic_store(&rpc->phase, PHASE_STOPPED);
	for (size_t i = 0; i < rpc->n_calls; i++)
		if (rpc->calls[i].aio)
			nng_aio_stop(rpc->calls[i].aio);
	for (size_t i = 0; i < rpc->n_calls; i++) {
		struct rpc_call *c = &rpc->calls[i];

		/* A send refused after the stop leaves its message here. */
		if (c->aio && nng_aio_get_msg(c->aio))
			nng_msg_free(nng_aio_get_msg(c->aio));
		/* Parked repeats and jobs that never ran. */
		release_request(c);
	}
	if (rpc->sock_open && !sbx_nng_close_bounded(rpc->sock, CLOSE_TIMEOUT_MS))
		return -1;
	for (size_t i = 0; i < rpc->n_calls; i++)
		if (rpc->calls[i].aio)
			nng_aio_free(rpc->calls[i].aio);
	free(rpc->calls);
	conn_guard_stop();
	rpc_pipes_free(rpc->pipes);
	rpc_listeners_free(&rpc->listeners);
	rpc_dedupe_free(rpc->dedupe);
	for (int i = 0; i < N_POOLS; i++)
		if (rpc->pool_started[i])
			rpc_pool_destroy(&rpc->pools[i]);
	pthread_mutex_destroy(&rpc->pipes_mu);
	if (rpc->auth_mu_init)
		pthread_rwlock_destroy(&rpc->auth_mu);
	free(rpc->auth);
	free(rpc);
	/* No nng_fini(): nng 1.5.2's tears its TLS engine down before it
	 * drains its reaper (core/init.c), so a TLS connection still being
	 * reaped then locks a destroyed mutex and nng panics
	 * ("pthread_mutex_lock: Invalid argument", sbxd.capacity in ci72, at
	 * a drain's end). sbxd exits right after this; nng's threads and
	 * globals stay reachable, which valgrind's and LeakSanitizer's checks
	 * of definite leaks do not count. */
	return 0;
}

void sbx_rpc_collect(void *arg)
{
	struct sbx_rpc *rpc = arg;

	for (size_t i = 0; i < N_POOLS; i++) {
		size_t busy = 0, queued = 0;

		if (rpc->pool_started[i])
			rpc_pool_load(&rpc->pools[i], &busy, &queued);
		sbx_metrics_set(SBX_M_WORKERS, i, (int64_t)rpc->pools[i].n_threads);
		sbx_metrics_set(SBX_M_WORKERS_BUSY, i, (int64_t)busy);
		sbx_metrics_set(SBX_M_WORKERS_QUEUED, i, (int64_t)queued);
	}
}

int sbx_rpc_guard_metrics(int port, struct sbx_err *err)
{
	if (conn_guard_http_listener(port) < 0)
		return sbx_fail(err, "metrics.listen: port %d is an RPC listener's too", port);
	return 0;
}
