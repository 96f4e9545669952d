/* SPDX-License-Identifier: Apache-2.0 */
/* The transport: one nng REQ socket per client, one REQ context per call,
 * the Request/Response envelope, timeouts, retries, TLS. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "client_internal.h"
#include "clock.h"
#include "nng_close.h"
#include "nng_err.h"
#include "sleep.h"
#include "text.h"
#include "tls_names.h"
#include "util.h"

/* A server that answers nothing because no connection exists (it died, or
 * the network went away) is reported as UNAVAILABLE after this long without
 * any connection, instead of waiting out the whole timeout. nng keeps
 * redialing meanwhile, and REQ re-sends the request on a new connection. */
#define LOST_GRACE_MS 2000
/* How often a waiting call looks at the interrupt flag and the connection. */
#define POLL_MS	  100
#define TOKEN_MAX 256
#define PEM_MAX	  (1 << 20)

struct sbx_client {
	char *endpoint;
	char *token;
	uint32_t timeout_ms;
	uint32_t connect_timeout_ms;
	int retries;
	size_t max_message;
	nng_socket sock;
	nng_tls_config *tls;	     /* NULL unless tls+tcp */
	char tls_name[256];	     /* the name the server's certificate must carry */
	unsigned long name_failures; /* sbx_tls_name_failures() when a dial began */
	pthread_mutex_t dial_lock;
	bool dialed; /* a dialer holds (or is re-establishing) a connection */
	nng_dialer dialer;
	unsigned generation; /* of the dialer, so that only one caller replaces it */
	atomic_int npipes;   /* live connections, from nng's pipe callbacks */
	atomic_uint drops;   /* connections lost so far */
	volatile sig_atomic_t *_Atomic interrupt;
};

/* ---- small things ---- */

void sbx_hex(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

int sbx_request_id(char out[33], struct sbx_err *err)
{
	unsigned char raw[16];
	size_t got = 0;

	while (got < sizeof(raw)) {
		ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_fail_errno(err, "getrandom");
		if (n == 0)
			return sbx_fail(err, "getrandom: no bytes");
		got += (size_t)n;
	}
	sbx_hex(raw, sizeof(raw), out);
	return 0;
}

static bool interrupted(const sbx_client *c)
{
	volatile sig_atomic_t *flag = atomic_load(&c->interrupt);

	/* Set by a signal handler of whichever thread, read by the fetch's
	 * workers on theirs: an atomic load (sig_atomic_t is lock-free), not
	 * a plain one, which ThreadSanitizer rightly calls a data race. */
	return flag && __atomic_load_n(flag, __ATOMIC_RELAXED);
}

const char *sbx_client_endpoint(const sbx_client *c)
{
	return c->endpoint;
}

uint32_t sbx_client_timeout_ms(const sbx_client *c)
{
	return c->timeout_ms;
}

void sbx_client_set_interrupt(sbx_client *c, volatile sig_atomic_t *flag)
{
	atomic_store(&c->interrupt, flag);
}

/* ---- options ---- */

static char *read_small_file(const char *what, const char *path, struct sbx_err *err)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	if (!f) {
		sbx_fail_errno(err, "%s %s", what, path);
		return NULL;
	}
	_cleanup_free_ char *buf = malloc(PEM_MAX + 1);
	if (!buf) {
		sbx_fail(err, "out of memory");
		return NULL;
	}
	size_t n = fread(buf, 1, PEM_MAX + 1, f);
	if (ferror(f)) {
		sbx_fail_errno(err, "%s %s", what, path);
		return NULL;
	}
	if (n > PEM_MAX) {
		sbx_fail(err, "%s %s: larger than %d bytes", what, path, PEM_MAX);
		return NULL;
	}
	buf[n] = '\0';
	return sbx_steal_ptr(buf);
}

/* The host of tls+tcp://HOST:PORT or tls+tcp://[V6]:PORT, as the default
 * name the server's certificate must carry. */
static int endpoint_host(const char *url, char *host, size_t size)
{
	const char *p = strstr(url, "://");
	if (!p)
		return -1;
	p += 3;
	const char *end;
	if (*p == '[') {
		p++;
		end = strchr(p, ']');
	} else {
		end = strrchr(p, ':');
	}
	if (!end || end == p || (size_t)(end - p) >= size)
		return -1;
	memcpy(host, p, (size_t)(end - p));
	host[end - p] = '\0';
	return 0;
}

static int tls_setup(sbx_client *c, const struct sbx_client_opts *o, struct sbx_err *err)
{
	char host[256];
	const char *name = o->tls_server_name;
	int rv;

	if (!o->tls_ca || !*o->tls_ca)
		return sbx_fail(err,
				"%s: a tls+tcp endpoint needs the CA that signed the server's "
				"certificate (tls_ca)",
				c->endpoint);
	if (!o->tls_cert != !o->tls_key)
		return sbx_fail(err,
				"%s: a client certificate needs its key and the other way round",
				c->endpoint);
	if (!name) {
		if (endpoint_host(c->endpoint, host, sizeof(host)) < 0)
			return sbx_fail(err, "%s: no host to verify the server certificate against",
					c->endpoint);
		name = host;
	}
	if (snprintf(c->tls_name, sizeof(c->tls_name), "%s", name) >= (int)sizeof(c->tls_name))
		return sbx_fail(err, "%s: server name longer than %zu bytes", c->endpoint,
				sizeof(c->tls_name) - 1);
	if ((rv = nng_tls_config_alloc(&c->tls, NNG_TLS_MODE_CLIENT)) != 0)
		return sbx_fail_nng(err, rv, "TLS");
	if ((rv = nng_tls_config_auth_mode(c->tls, NNG_TLS_AUTH_MODE_REQUIRED)) != 0 ||
	    (rv = nng_tls_config_server_name(c->tls, name)) != 0)
		return sbx_fail_nng(err, rv, "TLS");
	if ((rv = nng_tls_config_ca_file(c->tls, o->tls_ca)) != 0)
		return sbx_fail_nng(err, rv, "TLS CA %s", o->tls_ca);
	if (o->tls_cert) {
		_cleanup_free_ char *cert = read_small_file("TLS certificate", o->tls_cert, err);
		if (!cert)
			return -1;
		_cleanup_free_ char *key = read_small_file("TLS key", o->tls_key, err);
		if (!key)
			return -1;
		rv = nng_tls_config_own_cert(c->tls, cert, key, NULL);
		/* The key is a secret: do not leave it in freed memory. */
		explicit_bzero(key, strlen(key));
		if (rv != 0)
			return sbx_fail_nng(err, rv, "TLS certificate %s with key %s", o->tls_cert,
					    o->tls_key);
	}
	return 0;
}

static void pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	sbx_client *c = arg;

	(void)p;
	/* nng's own thread: count only, never block. */
	if (ev == NNG_PIPE_EV_ADD_POST) {
		atomic_fetch_add(&c->npipes, 1);
	} else if (ev == NNG_PIPE_EV_REM_POST) {
		atomic_fetch_sub(&c->npipes, 1);
		atomic_fetch_add(&c->drops, 1);
	}
}

static bool known_scheme(const char *url)
{
	return !strncmp(url, "ipc://", 6) || !strncmp(url, "tls+tcp://", 10) ||
	       !strncmp(url, "tcp://", 6);
}

void sbx_client_close(sbx_client *c)
{
	if (!c)
		return;
	/* Closing the socket closes its dialers, pipes and contexts. If nng
	 * hangs doing it (see nng_close.h), the TLS config stays with it. */
	bool closed = true;
	if (nng_socket_id(c->sock) > 0)
		closed = sbx_nng_close_bounded(c->sock, 5000);
	if (c->tls && closed)
		nng_tls_config_free(c->tls);
	pthread_mutex_destroy(&c->dial_lock);
	if (c->token)
		explicit_bzero(c->token, strlen(c->token));
	free(c->token);
	free(c->endpoint);
	free(c);
}

static void client_closep(sbx_client **c)
{
	sbx_client_close(*c);
}

sbx_client *sbx_client_open(const struct sbx_client_opts *o, struct sbx_err *err)
{
	static const struct sbx_client_opts none;
	const char *url;
	nng_dialer probe;
	int rv;

	if (!o)
		o = &none;
	url = o->endpoint && *o->endpoint ? o->endpoint : SBX_DEFAULT_ENDPOINT;
	if (!known_scheme(url)) {
		sbx_fail(err,
			 "endpoint %s: must be ipc://PATH, tls+tcp://HOST:PORT or tcp://HOST:PORT",
			 url);
		return NULL;
	}
	if (o->token && (strlen(o->token) == 0 || strlen(o->token) > TOKEN_MAX)) {
		sbx_fail(err, "token: must be 1..%d bytes", TOKEN_MAX);
		return NULL;
	}
	_cleanup_(client_closep) sbx_client *c = calloc(1, sizeof(*c));
	if (!c) {
		sbx_fail(err, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&c->dial_lock, NULL);
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : SBX_DEFAULT_TIMEOUT_MS;
	c->connect_timeout_ms =
	    o->connect_timeout_ms ? o->connect_timeout_ms : SBX_DEFAULT_CONNECT_TIMEOUT_MS;
	c->retries = o->retries == 0 ? SBX_DEFAULT_RETRIES : o->retries < 0 ? 0 : o->retries;
	c->max_message = o->max_message ? o->max_message : SBX_DEFAULT_MAX_MESSAGE;
	c->endpoint = strdup(url);
	c->token = o->token ? strdup(o->token) : NULL;
	if (!c->endpoint || (o->token && !c->token)) {
		sbx_fail(err, "out of memory");
		return NULL;
	}
	if (!strncmp(url, "tls+tcp://", 10) && tls_setup(c, o, err) < 0)
		return NULL;
	if ((rv = nng_req0_open(&c->sock)) != 0) {
		sbx_fail_nng(err, rv, "nng REQ socket");
		return NULL;
	}
	/* A malformed address is an error now, not at the first call. */
	if ((rv = nng_dialer_create(&probe, c->sock, url)) != 0) {
		sbx_fail_nng(err, rv, "endpoint %s", url);
		return NULL;
	}
	nng_dialer_close(probe);
	if ((rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_POST, pipe_event, c)) != 0 ||
	    (rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, pipe_event, c)) != 0) {
		sbx_fail_nng(err, rv, "nng");
		return NULL;
	}
	return sbx_steal_ptr(c);
}

/* ---- dialing ---- */

struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
};

static void waiter_init(struct waiter *w)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, &attr);
	pthread_condattr_destroy(&attr);
	w->done = false;
}

static void waiter_destroy(struct waiter *w)
{
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
}

static void waiter_signal(struct waiter *w)
{
	pthread_mutex_lock(&w->lock);
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Waits up to ms for w; true when done. */
static bool waiter_wait(struct waiter *w, unsigned ms)
{
	struct timespec end = sbx_mono_after_ms(ms);
	bool done;

	pthread_mutex_lock(&w->lock);
	while (!w->done && pthread_cond_timedwait(&w->cond, &w->lock, &end) != ETIMEDOUT)
		;
	done = w->done;
	pthread_mutex_unlock(&w->lock);
	return done;
}

static void dialer_closep(nng_dialer *d)
{
	if (nng_dialer_id(*d) > 0)
		nng_dialer_close(*d);
}

struct dial_job {
	struct waiter w;
	nng_dialer dialer;
	int rv;
};

static void *dial_thread(void *arg)
{
	struct dial_job *j = arg;

	j->rv = nng_dialer_start(j->dialer, 0);
	waiter_signal(&j->w);
	return NULL;
}

/* What tls_names.c saw of the server certificate's names (nothing where
 * it is not built: the error then stays nng's). */
static unsigned long tls_name_failures(void)
{
#ifdef SBX_TLS_NAMES
	return sbx_tls_name_failures();
#else
	return 0;
#endif
}

static bool tls_name_failed(const sbx_client *c, char *sans, size_t size)
{
#ifdef SBX_TLS_NAMES
	return sbx_tls_name_failed(c->name_failures, c->tls_name, sans, size);
#else
	(void)c, (void)sans, (void)size;
	return false;
#endif
}

static int dial_error(sbx_client *c, int rv, struct sbx_rpc_status *st)
{
	switch (rv) {
	case NNG_EPEERAUTH:
	case NNG_ECRYPTO: {
		char sans[512];

		if (c->tls && tls_name_failed(c, sans, sizeof(sans)))
			return sbx_rpc_fail(
			    st, SBX__V1__CODE__UNAVAILABLE,
			    "TLS handshake with %s failed: the server's certificate "
			    "does not name %s (it names %s); dial a name or address "
			    "it carries, or give --tls-server-name",
			    c->endpoint, c->tls_name, sans);
	}
		return sbx_rpc_fail_nng(st, SBX__V1__CODE__UNAVAILABLE, rv,
					"TLS handshake with %s failed (check the CA, the client "
					"certificate and the server name)",
					c->endpoint);
	case NNG_EADDRINVAL:
		return sbx_rpc_fail_nng(st, SBX__V1__CODE__INVALID_ARGUMENT, rv, "endpoint %s",
					c->endpoint);
	default:
		return sbx_rpc_fail_nng(st, SBX__V1__CODE__UNAVAILABLE, rv, "cannot connect to %s",
					c->endpoint);
	}
}

static int dialer_options(sbx_client *c, nng_dialer d)
{
	int rv;

	/* nng accepts messages of any size unless told: bound what a server
	 * (or anything else on the endpoint) can make us allocate. */
	if ((rv = nng_dialer_set_size(d, NNG_OPT_RECVMAXSZ, c->max_message)) != 0 ||
	    (rv = nng_dialer_set_ms(d, NNG_OPT_RECONNMINT, 100)) != 0 ||
	    (rv = nng_dialer_set_ms(d, NNG_OPT_RECONNMAXT, 1000)) != 0)
		return rv;
	if (c->tls && (rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, c->tls)) != 0)
		return rv;
	return 0;
}

/* Starts a dialer, with c->dial_lock held. The first connection is made
 * blocking, so that "nobody listens" (ENOENT, ECONNREFUSED) and a refused
 * TLS handshake are reported at once with their reason; it runs on a
 * thread so that a connect into a black hole is bounded by timeout_ms. */
static int dial_locked(sbx_client *c, uint32_t timeout_ms, bool connect_bound,
		       struct sbx_rpc_status *st)
{
	_cleanup_(dialer_closep) nng_dialer d = NNG_DIALER_INITIALIZER;
	struct dial_job job = {.rv = NNG_ETIMEDOUT};
	pthread_t thread;
	int rv;

	if ((rv = nng_dialer_create(&d, c->sock, c->endpoint)) != 0 ||
	    (rv = dialer_options(c, d)) != 0)
		return dial_error(c, rv, st);
	job.dialer = d;
	c->name_failures = tls_name_failures();
	waiter_init(&job.w);
	if (pthread_create(&thread, NULL, dial_thread, &job) != 0) {
		waiter_destroy(&job.w);
		return dial_error(c, NNG_ENOMEM, st);
	}
	int64_t end = sbx_mono_ms() + timeout_ms;
	bool done = false, cancelled = false;
	while (!(done = waiter_wait(&job.w, POLL_MS))) {
		if (interrupted(c)) {
			cancelled = true;
			break;
		}
		if (sbx_mono_ms() >= end)
			break;
	}
	if (!done) { /* closing it makes the blocking start return */
		nng_dialer_close(d);
		d = (nng_dialer)NNG_DIALER_INITIALIZER;
	}
	pthread_join(thread, NULL);
	waiter_destroy(&job.w);
	if (cancelled)
		return sbx_rpc_fail(st, SBX__V1__CODE__CANCELLED, "interrupted");
	/* The whole call's time went into connecting: not worth a retry. The
	 * connect bound (shorter than the call's timeout) is the host being
	 * unreachable: UNAVAILABLE, and not retried either (errnum ETIMEDOUT). */
	if (!done && connect_bound)
		return sbx_rpc_fail_errnum(st, SBX__V1__CODE__UNAVAILABLE, ETIMEDOUT,
					   "cannot connect to %s within %u ms (connect timeout)",
					   c->endpoint, timeout_ms);
	if (!done)
		return sbx_rpc_fail(st, SBX__V1__CODE__DEADLINE_EXCEEDED,
				    "cannot connect to %s within %u ms", c->endpoint, timeout_ms);
	if (job.rv != 0)
		return dial_error(c, job.rv, st);
	c->dialer = d;
	d = (nng_dialer)NNG_DIALER_INITIALIZER; /* c's now; it reconnects by itself */
	c->dialed = true;
	c->generation++;
	return 0;
}

/* Makes sure a dialer is running. */
static int dial(sbx_client *c, uint32_t timeout_ms, bool connect_bound, struct sbx_rpc_status *st)
{
	pthread_mutex_lock(&c->dial_lock);
	int rc = c->dialed ? 0 : dial_locked(c, timeout_ms, connect_bound, st);
	pthread_mutex_unlock(&c->dial_lock);
	return rc;
}

/* The connection went away and did not come back: drop the dialer, so that
 * the next try dials blocking again and says why it cannot connect. */
static void undial(sbx_client *c, unsigned generation)
{
	pthread_mutex_lock(&c->dial_lock);
	if (c->dialed && c->generation == generation) {
		nng_dialer_close(c->dialer);
		c->dialed = false;
	}
	pthread_mutex_unlock(&c->dial_lock);
}

/* ---- one exchange ---- */

/* protobuf-c may allocate far more than the bytes it unpacks: bound it. */
struct budget {
	size_t left;
};

static void *budget_alloc(void *data, size_t size)
{
	struct budget *b = data;

	if (size > b->left)
		return NULL;
	b->left -= size;
	return malloc(size);
}

static void budget_free(void *data, void *p)
{
	(void)data;
	free(p);
}

/* Unpacked with malloc, so the caller frees with a NULL allocator. */
static ProtobufCMessage *unpack_bounded(const ProtobufCMessageDescriptor *d, size_t budget,
					size_t len, const uint8_t *data)
{
	struct budget b = {.left = budget};
	ProtobufCAllocator a = {.alloc = budget_alloc, .free = budget_free, .allocator_data = &b};

	return protobuf_c_message_unpack(d, &a, len, data);
}

struct exchange {
	struct waiter w;
	nng_aio *aio;
};

static void exchange_done(void *arg)
{
	struct exchange *x = arg;

	waiter_signal(&x->w);
}

enum wait_end { W_DONE, W_INTERRUPTED, W_LOST };

/* Waits for the aio, watching the interrupt flag and the connection. */
static enum wait_end exchange_wait(sbx_client *c, struct exchange *x)
{
	unsigned without_pipe = 0;

	for (;;) {
		if (waiter_wait(&x->w, POLL_MS))
			return W_DONE;
		enum wait_end why = W_DONE;
		if (interrupted(c))
			why = W_INTERRUPTED;
		if (atomic_load(&c->npipes) > 0)
			without_pipe = 0;
		else if ((without_pipe += POLL_MS) >= LOST_GRACE_MS)
			why = W_LOST;
		if (why != W_DONE) {
			nng_aio_cancel(x->aio);
			nng_aio_wait(x->aio);
			return why;
		}
	}
}

static int exchange_step(sbx_client *c, struct exchange *x, nng_ctx ctx, bool send,
			 int64_t deadline, unsigned generation, unsigned drops0,
			 struct sbx_rpc_status *st)
{
	int64_t now = sbx_mono_ms();
	int rv;

	x->w.done = false;
	nng_aio_set_timeout(x->aio, deadline > now ? (nng_duration)(deadline - now) : 1);
	if (send)
		nng_ctx_send(ctx, x->aio);
	else
		nng_ctx_recv(ctx, x->aio);
	enum wait_end why = exchange_wait(c, x);
	if (why == W_INTERRUPTED)
		return sbx_rpc_fail(st, SBX__V1__CODE__CANCELLED, "interrupted");
	if (why == W_LOST) {
		undial(c, generation);
		return sbx_rpc_fail(st, SBX__V1__CODE__UNAVAILABLE, "connection to %s lost",
				    c->endpoint);
	}
	if ((rv = nng_aio_result(x->aio)) == 0)
		return 0;
	if (rv == NNG_ETIMEDOUT) {
		unsigned drops = atomic_load(&c->drops) - drops0;
		if (drops)
			return sbx_rpc_fail(st, SBX__V1__CODE__DEADLINE_EXCEEDED,
					    "no answer from %s in time; the connection dropped %u "
					    "times (a response larger than the client's maximum "
					    "message size, %zu bytes, also drops it)",
					    c->endpoint, drops, c->max_message);
		return sbx_rpc_fail(st, SBX__V1__CODE__DEADLINE_EXCEEDED,
				    "no answer from %s in time", c->endpoint);
	}
	return sbx_rpc_fail_nng(st, SBX__V1__CODE__UNAVAILABLE, rv, "%s", c->endpoint);
}

/* Where a reply goes: unpacked into *resp (desc), or kept as it arrived
 * (desc NULL: *msg, with the body's place in it). */
struct reply_to {
	const ProtobufCMessageDescriptor *desc;
	ProtobufCMessage **resp;
	nng_msg **msg;
	const uint8_t **body;
	size_t *len;
};

/* An OK Response's body found where it lies: 1, or 0 when the reply is
 * not OK (or not plainly one), left to the unpack below. */
static int body_in_place(nng_msg *m, const uint8_t **body, size_t *len)
{
	const uint8_t *p = nng_msg_body(m), *end = p + nng_msg_len(m);
	struct sbx_pb_field f;
	int rc;

	*body = p;
	*len = 0;
	while ((rc = sbx_pb_next(&p, end, &f)) == 1) {
		if (f.num == 1 && (f.wt != 0 || f.v != SBX__V1__CODE__OK))
			return 0;
		if (f.num == 3) {
			if (f.wt != 2)
				return 0;
			*body = f.data;
			*len = f.len;
		}
	}
	return rc == 0;
}

/* Parses a reply into the caller's message, or the server's error. */
static int take_reply(sbx_client *c, nng_msg **mp, const struct reply_to *to,
		      struct sbx_rpc_status *st)
{
	size_t budget = c->max_message * 16 > (64u << 20) ? c->max_message * 16 : (64u << 20);
	nng_msg *m = *mp;
	int rc;

	if (!to->desc && body_in_place(m, to->body, to->len)) {
		*to->msg = m;
		*mp = NULL;
		sbx_rpc_ok(st);
		return 0;
	}
	Sbx__V1__Response *r = (Sbx__V1__Response *)unpack_bounded(
	    &sbx__v1__response__descriptor, budget, nng_msg_len(m), nng_msg_body(m));
	if (!r)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
				    "%s sent a reply that is not an sbx.v1.Response", c->endpoint);
	if (r->code != SBX__V1__CODE__OK) {
		/* It may quote a sandbox's names (sbxd escapes them, and drops C0
		 * from messages): what else could reorder or hijack a terminal
		 * (C1, bidi controls) is escaped here, for every caller. */
		char msg[SBX_ERR_MAX];
		sbx_escape_flags(msg, sizeof(msg),
				 r->message && *r->message ? r->message : sbx_code_name(r->code),
				 SBX_ESCAPE_KEEP_BACKSLASH);
		rc = sbx_rpc_fail(st, r->code, "%s", msg);
		st->in_progress = r->in_progress && r->code == SBX__V1__CODE__UNAVAILABLE;
	} else if (!to->desc) {
		rc = sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
				  "%s sent a reply that is not an sbx.v1.Response", c->endpoint);
	} else if (!(*to->resp = unpack_bounded(to->desc, budget, r->body.len, r->body.data))) {
		rc = sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "%s sent a body that is not an %s",
				  c->endpoint, to->desc->name);
	} else {
		sbx_rpc_ok(st);
		rc = 0;
	}
	sbx__v1__response__free_unpacked(r, NULL);
	return rc;
}

static void ctx_closep(nng_ctx *ctx)
{
	if (nng_ctx_id(*ctx) > 0)
		nng_ctx_close(*ctx);
}

static void msg_freep(nng_msg **m)
{
	if (*m)
		nng_msg_free(*m);
}

/* The exchange's waiter lives until its aio is freed (which waits for the
 * callback that signals it). */
static void exchange_freep(struct exchange *x)
{
	if (x->aio)
		nng_aio_free(x->aio);
	waiter_destroy(&x->w);
}

static int call_once(sbx_client *c, const uint8_t *req, size_t len, uint32_t timeout_ms,
		     const struct reply_to *to, struct sbx_rpc_status *st)
{
	int64_t deadline = sbx_mono_ms() + timeout_ms;
	int rv;

	/* A dead host costs at most connect_timeout_ms per try, not the call's. */
	bool bound = c->connect_timeout_ms < timeout_ms;
	if (dial(c, bound ? c->connect_timeout_ms : timeout_ms, bound, st) < 0)
		return -1;
	pthread_mutex_lock(&c->dial_lock);
	unsigned generation = c->generation;
	pthread_mutex_unlock(&c->dial_lock);
	unsigned drops0 = atomic_load(&c->drops);

	_cleanup_(ctx_closep) nng_ctx ctx = NNG_CTX_INITIALIZER;
	_cleanup_(exchange_freep) struct exchange x = {.aio = NULL};
	waiter_init(&x.w);
	_cleanup_(msg_freep) nng_msg *m = NULL;
	if ((rv = nng_msg_alloc(&m, len)) != 0 || (rv = nng_ctx_open(&ctx, c->sock)) != 0 ||
	    (rv = nng_aio_alloc(&x.aio, exchange_done, &x)) != 0)
		return sbx_rpc_fail_nng(st, SBX__V1__CODE__INTERNAL, rv, "nng");
	memcpy(nng_msg_body(m), req, len);
	nng_aio_set_msg(x.aio, sbx_steal_ptr(m));
	if (exchange_step(c, &x, ctx, true, deadline, generation, drops0, st) < 0) {
		m = nng_aio_get_msg(x.aio); /* a message that was not sent is still ours */
		return -1;
	}
	if (exchange_step(c, &x, ctx, false, deadline, generation, drops0, st) < 0)
		return -1;
	m = nng_aio_get_msg(x.aio);
	return take_reply(c, &m, to, st);
}

/* Calls that only read are safe to repeat as they are; the others carry a
 * request id so that sbxd acts on them once however often they arrive. */
static bool idempotent(const char *method)
{
	static const char *const reads[] = {
	    "Health", "Wait", "ReadOutput", "Status", "ListArtifacts", "FetchArtifact", "ListRuns"};
	size_t plen = strlen(SBX_METHOD_PREFIX);

	if (strncmp(method, SBX_METHOD_PREFIX, plen))
		return false;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(reads); i++)
		if (!strcmp(method + plen, reads[i]))
			return true;
	return false;
}

/* Bytes that must not stay in freed memory. */
struct secret {
	uint8_t *data;
	size_t len;
};

static void secret_freep(struct secret *s)
{
	if (s->data)
		explicit_bzero(s->data, s->len);
	free(s->data);
}

static int call(sbx_client *c, const char *method, const ProtobufCMessage *req,
		const struct reply_to *to, const struct sbx_call_opts *o, struct sbx_rpc_status *st)
{
	Sbx__V1__Request env = SBX__V1__REQUEST__INIT;
	uint32_t timeout = o && o->timeout_ms ? o->timeout_ms : c->timeout_ms;
	char id[33];
	int rc = -1;

	if (to->resp)
		*to->resp = NULL;
	if (to->msg)
		*to->msg = NULL;
	if (!method || strlen(method) > 128)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "method: must be 1..128 bytes");
	if (o && o->request_id) {
		size_t n = strlen(o->request_id);
		if (n < 1 || n > 64)
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "request id: must be 1..64 bytes");
		env.request_id = (char *)o->request_id;
	} else if (!idempotent(method)) {
		if (sbx_request_id(id, &st->err) < 0)
			return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
		env.request_id = id;
	}
	size_t blen = protobuf_c_message_get_packed_size(req);
	_cleanup_free_ uint8_t *body = malloc(blen ? blen : 1);
	if (!body)
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
	protobuf_c_message_pack(req, body);
	env.method = (char *)method;
	env.body.data = body;
	env.body.len = blen;
	env.deadline_ms = timeout;
	if (c->token)
		env.credentials = c->token;
	/* The token is in there: zeroed on every way out. */
	_cleanup_(secret_freep) struct secret buf = {.len =
							 sbx__v1__request__get_packed_size(&env)};
	if (!(buf.data = malloc(buf.len)))
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
	sbx__v1__request__pack(&env, buf.data);

	for (int attempt = 0;; attempt++) {
		if (interrupted(c))
			return sbx_rpc_fail(st, SBX__V1__CODE__CANCELLED, "interrupted");
		rc = call_once(c, buf.data, buf.len, timeout, to, st);
		if (rc == 0 || st->code != SBX__V1__CODE__UNAVAILABLE || attempt >= c->retries ||
		    st->err.errnum == ETIMEDOUT)
			break;
		/* 100 ms, 200 ms, ...: enough for a restarting server, short
		 * enough that "nobody there" is still answered at once. */
		unsigned backoff = 100u << (attempt < 10 ? attempt : 10);
		for (unsigned slept = 0; slept < backoff && !interrupted(c); slept += 20)
			sbx_sleep_ms(20);
	}
	return rc;
}

int sbx_client_call_opts(sbx_client *c, const char *method, const ProtobufCMessage *req,
			 const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
			 const struct sbx_call_opts *o, struct sbx_rpc_status *st)
{
	struct reply_to to = {.desc = resp_desc, .resp = resp};

	return call(c, method, req, &to, o, st);
}

int sbx_client_call_msg(sbx_client *c, const char *method, const ProtobufCMessage *req,
			nng_msg **reply, const uint8_t **body, size_t *len,
			struct sbx_rpc_status *st)
{
	struct reply_to to = {.msg = reply, .body = body, .len = len};

	return call(c, method, req, &to, NULL, st);
}

int sbx_client_call(sbx_client *c, const char *method, const ProtobufCMessage *req,
		    const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
		    struct sbx_rpc_status *st)
{
	return sbx_client_call_opts(c, method, req, resp_desc, resp, NULL, st);
}
