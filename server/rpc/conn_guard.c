/* SPDX-License-Identifier: Apache-2.0 */
/* The connection guard: bounds on what sbxd's listeners accept, enforced
 * where sbxd can see a connection before nng spends anything on it.
 *
 * nng gives no hook between the kernel's accept and its own SP
 * negotiation, so common/nngfix/nng_interpose.c defines accept(), readv()
 * and close() in sbxd and hands libnng's own calls to the hooks below (this
 * file is their accounting; a unit test drives it without interposing):
 *
 *  - accept: the new connection is counted per listener and per peer (uid
 *    by SO_PEERCRED on ipc, the address on tcp and tls+tcp), pending ones
 *    included, and charged to the peer's token bucket of new connections
 *    per second. Over a cap, it is closed at once and accept reports
 *    ECONNABORTED, which libnng drops without a word ("Eat them, they
 *    aren't interesting"): nng never negotiates it, so it costs no pipe,
 *    no TLS handshake and none of the listener's 100 ms pauses.
 *  - readv: on ipc and tcp the SP framing is plain (an 8-byte header, then
 *    per message [ipc: a type byte] and a 64-bit length), so the guard
 *    follows it and knows when a message started to arrive. nng allocates a
 *    message's whole length as soon as it has read the length, long before
 *    sbxd sees it; a message (or the peer's SP header) still incomplete
 *    message_seconds after its first byte gets shutdown(2), and nng closes
 *    the connection as one whose peer hung up. The lengths announced by
 *    messages still arriving are charged to the peer and to sbxd as a
 *    whole (pending_bytes_per_peer_mb, pending_bytes_mb; messages up to
 *    64 KiB free): a length over either budget fails the readv that
 *    brought it with ECONNRESET, so nng drops the pipe before it
 *    allocates. TLS bytes are ciphertext:
 *    there nng's 10 s negotiation timeout bounds a handshake and the RPC
 *    layer's idle timeout bounds a pipe that stopped mid-message.
 *    Two endings of a negotiation nng 1.5.2 answers with a 100 ms pause of
 *    the whole listener (listener_accept_cb's default case) are reported
 *    as ECONNRESET instead, which it takes as "remote condition, no cool
 *    down": an SP header nng would refuse (EPROTO), and end of file before
 *    the negotiation is done (ECONNSHUT; on tls+tcp, whose phase the guard
 *    cannot see, any end of file: for a pipe the two mean the same). A
 *    peer that sends garbage then costs every other caller nothing.
 *  - close: the connection's counts are given back. The fd's entry is
 *    cleared under the lock before the real close, so the sweeper never
 *    shuts down a number that already names something else. nng says
 *    nothing of a TLS handshake that failed: a tls+tcp connection closed
 *    before the RPC layer saw it become a pipe (conn_guard_pipe_added,
 *    matched by the peer's address and port) is one, or a peer that left
 *    before it was done; it is logged with the peer's address, at most
 *    HANDSHAKE_LINES_PER_SECOND lines a second (the rest counted).
 *
 * libnng never forks, so the lock is never taken in a child. On an nng that
 * stops calling these functions the guard simply sees nothing; sbxd checks
 * at start-up that they bind to the interposers (conn_guard_start). */
#include "conn_guard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "metrics.h"
#include "nngfix.h"
#include "rpc_ratelimit.h"

/* Connections of one listener shut down to make room for a newcomer and
 * not yet closed by nng: the listener may hold this many over its cap. */
#define EVICTING_MAX 8

enum framing { FRAMING_NONE, FRAMING_IPC, FRAMING_TCP };

struct guarded_listener {
	enum sbx_scheme scheme;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int port;
	uint32_t conns;
	uint32_t evicting; /* of conns: shut down for a newcomer, not yet closed */
	bool revoke_next;  /* tls+tcp: shut the next accepted (conn_guard_tls_revoke) */
};

/* One accepted connection, indexed by its fd. */
struct conn {
	bool used, shut;
	bool http;	 /* the metrics listener's: counted in g.http_conns alone */
	bool evicted;	 /* shut for a newcomer: counted in its listener's evicting */
	bool first_done; /* a whole request has arrived (ipc, tcp) */
	int64_t accepted_ms;
	uint8_t framing;
	uint8_t listener;
	uint32_t peer;
	bool sp_done;	    /* the peer's 8-byte SP header is in */
	bool bad_header;    /* and nng would refuse it */
	uint8_t head_got;   /* bytes of the current header */
	uint8_t head[9];    /* [type byte on ipc] + 64-bit big-endian length */
	uint64_t body_left; /* bytes of the current message still to come */
	int64_t started_ms; /* when the current message began; 0: between messages */
	uint64_t charged;   /* the current message's length, charged to its peer and g */
	bool over;	    /* a length over the pending budget: reset before nng allocates */
	/* tls+tcp: the peer's address, and whether it became a pipe */
	bool tls, piped;
	bool revoked;	 /* shut by conn_guard_tls_revoke: not a failed handshake */
	uint8_t rfamily; /* AF_INET, AF_INET6 */
	uint16_t rport;	 /* host order */
	uint8_t raddr[16];
};

struct peer {
	struct conn_peer_key key;
	uint32_t conns;
	uint64_t pending; /* announced, incomplete message bytes on its connections */
	double tokens;
	int64_t last_ms;
};

static struct {
	pthread_mutex_t mu;
	bool on;
	struct sbx_config_connections lim;
	struct guarded_listener listeners[16];
	size_t nlisteners;
	struct conn *conns; /* [nfds] */
	size_t nfds, high;  /* high: one past the highest fd tracked */
	struct peer *peers; /* [npeers]: every live peer holds a connection */
	size_t npeers;
	uint64_t pending; /* every peer's pending bytes */
	int http_port;	  /* the metrics listener (conn_guard_http_listener); 0: none */
	uint32_t http_conns;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- peers ---- */

/* An IPv6 peer is its /64 (a host is handed a /64 and picks any address in
 * it); a v4-mapped address is the IPv4 peer it names. */
static void key_of_in6(struct conn_peer_key *key, const uint8_t a[16])
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	if (memcmp(a, mapped, sizeof(mapped)) == 0) {
		key->b[0] = AF_INET;
		memcpy(key->b + 1, a + 12, 4);
		return;
	}
	key->b[0] = AF_INET6;
	memcpy(key->b + 1, a, 8);
}

static bool key_of_fd(int fd, struct conn_peer_key *key, struct sockaddr_storage *local,
		      struct sockaddr_storage *remote)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(*local);

	memset(key, 0, sizeof(*key));
	if (getsockname(fd, (struct sockaddr *)local, &len) != 0)
		return false;
	if (local->ss_family == AF_UNIX) {
		struct ucred cr;

		len = sizeof(cr);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
			return false;
		key->b[0] = AF_UNIX;
		memcpy(key->b + 1, &cr.uid, sizeof(cr.uid));
		return true;
	}
	len = sizeof(ss);
	if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
		return false;
	key->b[0] = (uint8_t)ss.ss_family;
	if (ss.ss_family == AF_INET)
		memcpy(key->b + 1, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	else if (ss.ss_family == AF_INET6)
		key_of_in6(key, ((struct sockaddr_in6 *)&ss)->sin6_addr.s6_addr);
	else
		return false;
	if (remote)
		*remote = ss;
	return true;
}

bool conn_peer_key_of_pipe(nng_pipe p, struct conn_peer_key *key)
{
	nng_sockaddr sa;
	uint64_t uid;

	memset(key, 0, sizeof(*key));
	/* A uint64 option in 1.5.2 (nng_pipe_get_int says EBADTYPE). */
	if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) == 0) {
		uint32_t u = (uint32_t)uid;

		key->b[0] = AF_UNIX;
		memcpy(key->b + 1, &u, sizeof(u));
		return true;
	}
	if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != 0)
		return false;
	if (sa.s_family == NNG_AF_INET) {
		key->b[0] = AF_INET;
		memcpy(key->b + 1, &sa.s_in.sa_addr, 4);
	} else if (sa.s_family == NNG_AF_INET6) {
		key_of_in6(key, sa.s_in6.sa_addr);
	} else {
		return false;
	}
	return true;
}

/* The peer's entry, or a fresh one in place of a peer with no connection
 * left (the one heard from longest ago); NULL if the table is full. */
static struct peer *find_peer(const struct conn_peer_key *key, int64_t now)
{
	struct peer *free = NULL;

	for (size_t i = 0; i < g.npeers; i++) {
		struct peer *p = &g.peers[i];

		if (memcmp(&p->key, key, sizeof(*key)) == 0 && p->last_ms)
			return p;
		if (p->conns == 0 && (!free || p->last_ms < free->last_ms))
			free = p;
	}
	if (free) {
		free->key = *key;
		free->tokens = g.lim.new_per_peer_per_second;
		free->last_ms = now;
	}
	return free;
}

/* A new connection from p, within its budget of new connections. */
static bool take_token(struct peer *p, int64_t now)
{
	double rate = g.lim.new_per_peer_per_second;

	p->tokens += (double)(now - p->last_ms) * rate / 1000.0;
	if (p->tokens > rate)
		p->tokens = rate;
	p->last_ms = now;
	if (p->tokens < 1.0)
		return false;
	p->tokens -= 1.0;
	return true;
}

/* ---- accept ---- */

static int listener_of(const struct sockaddr_storage *local)
{
	for (size_t i = 0; i < g.nlisteners; i++) {
		const struct guarded_listener *l = &g.listeners[i];

		if (local->ss_family == AF_UNIX && l->scheme == SBX_SCHEME_IPC &&
		    strncmp(((const struct sockaddr_un *)local)->sun_path, l->path,
			    sizeof(l->path)) == 0)
			return (int)i;
		if (local->ss_family == AF_INET && l->scheme != SBX_SCHEME_IPC && l->port &&
		    ntohs(((const struct sockaddr_in *)local)->sin_port) == l->port)
			return (int)i;
		if (local->ss_family == AF_INET6 && l->scheme != SBX_SCHEME_IPC && l->port &&
		    ntohs(((const struct sockaddr_in6 *)local)->sin6_port) == l->port)
			return (int)i;
	}
	return -1;
}

/* Listener li is full: shuts down its oldest connection that has not yet
 * brought a whole request (ipc, tcp), so that connections which send
 * nothing cannot keep a caller out; false if there is none to take. */
static bool evict_for(int li)
{
	struct conn *oldest = NULL;
	size_t fd = 0;

	if (g.listeners[li].evicting >= EVICTING_MAX)
		return false;
	for (size_t i = 0; i < g.high; i++) {
		struct conn *c = &g.conns[i];

		if (c->used && c->listener == li && c->framing && !c->first_done && !c->shut &&
		    (!oldest || c->accepted_ms < oldest->accepted_ms)) {
			oldest = c;
			fd = i;
		}
	}
	if (!oldest)
		return false;
	/* As the sweeper: nng closes it as a peer that hung up. */
	shutdown((int)fd, SHUT_RDWR);
	sbx_metrics_add(SBX_M_CONN_REFUSED, SBX_REFUSED_EVICTED, 1);
	oldest->shut = oldest->evicted = true;
	g.listeners[li].evicting++;
	return true;
}

static bool refused(enum sbx_metrics_refusal why)
{
	sbx_metrics_add(SBX_M_CONN_REFUSED, why, 1);
	return false;
}

static bool is_http(const struct sockaddr_storage *local)
{
	int port =
	    local->ss_family == AF_INET	   ? ntohs(((const struct sockaddr_in *)local)->sin_port)
	    : local->ss_family == AF_INET6 ? ntohs(((const struct sockaddr_in6 *)local)->sin6_port)
					   : 0;

	return g.http_port && port == g.http_port;
}

/* The metrics listener's connections: CONN_GUARD_HTTP_MAX at once, with no
 * peer's share, so that they take nothing from the RPC listeners' caps or
 * any peer's budgets (a local flood of scrapers fills only its own). */
static bool admit_http(int fd, int64_t now)
{
	if (g.http_conns >= CONN_GUARD_HTTP_MAX)
		return refused(SBX_REFUSED_METRICS_FULL);
	g.http_conns++;
	g.conns[fd] = (struct conn){.used = true, .http = true, .accepted_ms = now};
	if ((size_t)fd >= g.high)
		g.high = (size_t)fd + 1;
	return true;
}

/* ---- TLS handshakes nng does not report ---- */

#define HANDSHAKE_LINES_PER_SECOND 5

static struct rpc_ratelimit handshake_lines = RPC_RATELIMIT_INIT(HANDSHAKE_LINES_PER_SECOND);

static void remember_remote(struct conn *c, const struct sockaddr_storage *ss)
{
	c->tls = true;
	c->rfamily = (uint8_t)ss->ss_family;
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;

		memcpy(c->raddr, &in->sin_addr, 4);
		c->rport = ntohs(in->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;

		memcpy(c->raddr, in6->sin6_addr.s6_addr, 16);
		c->rport = ntohs(in6->sin6_port);
	}
}

void conn_guard_pipe_added(const nng_sockaddr *sa)
{
	uint8_t family, addr[16] = {0};
	uint16_t port;

	if (sa->s_family == NNG_AF_INET) {
		family = AF_INET;
		memcpy(addr, &sa->s_in.sa_addr, 4);
		port = ntohs(sa->s_in.sa_port);
	} else if (sa->s_family == NNG_AF_INET6) {
		family = AF_INET6;
		memcpy(addr, sa->s_in6.sa_addr, 16);
		port = ntohs(sa->s_in6.sa_port);
	} else {
		return;
	}
	pthread_mutex_lock(&g.mu);
	for (size_t fd = 0; g.on && fd < g.high; fd++) {
		struct conn *c = &g.conns[fd];

		if (c->used && c->tls && !c->piped && c->rfamily == family && c->rport == port &&
		    !memcmp(c->raddr, addr, family == AF_INET ? 4 : 16)) {
			c->piped = true;
			break;
		}
	}
	pthread_mutex_unlock(&g.mu);
}

/* One line per connection that ended before its handshake did, within
 * the rate; not under g.mu (stderr may block). */
static void handshake_failed(uint8_t family, const uint8_t addr[16], uint16_t port, int64_t ms)
{
	char ip[INET6_ADDRSTRLEN] = "?", more[64] = "";
	unsigned long suppressed;

	if (!rpc_ratelimit_take(&handshake_lines, sbx_mono_ms(), &suppressed))
		return;
	inet_ntop(family, addr, ip, sizeof(ip));
	if (suppressed)
		snprintf(more, sizeof(more), " (%lu more suppressed)", suppressed);
	fprintf(stderr,
		"sbxd: tls+tcp: connection from %s%s%s:%u closed %lld ms after accept before its "
		"TLS handshake completed: the handshake failed (no or a bad client certificate, "
		"not TLS) or the peer left%s\n",
		family == AF_INET6 ? "[" : "", ip, family == AF_INET6 ? "]" : "", (unsigned)port,
		(long long)ms, more);
}

/* Counts fd in, or false: refuse it. Under g.mu. */
static bool admit(int fd)
{
	struct sockaddr_storage local, remote = {0};
	struct conn_peer_key key;
	int64_t now = sbx_mono_ms();
	struct peer *p;
	int li;

	if (fd < 0 || (size_t)fd >= g.nfds || !key_of_fd(fd, &key, &local, &remote))
		return refused(SBX_REFUSED_UNKNOWN);
	if (is_http(&local))
		return admit_http(fd, now);
	li = listener_of(&local);
	if (li < 0)
		return refused(SBX_REFUSED_UNKNOWN);
	if (!(p = find_peer(&key, now)))
		return refused(SBX_REFUSED_PEERS_FULL);
	if (p->conns >= g.lim.per_peer)
		return refused(SBX_REFUSED_PEER_CONNS);
	if (!take_token(p, now))
		return refused(SBX_REFUSED_PEER_RATE);
	if (g.listeners[li].conns - g.listeners[li].evicting >= g.lim.per_listener &&
	    !evict_for(li))
		return refused(SBX_REFUSED_LISTENER_FULL);
	g.listeners[li].conns++;
	p->conns++;
	g.conns[fd] = (struct conn){
	    .used = true,
	    .accepted_ms = now,
	    .listener = (uint8_t)li,
	    .peer = (uint32_t)(p - g.peers),
	    .framing = g.listeners[li].scheme == SBX_SCHEME_IPC	  ? FRAMING_IPC
		       : g.listeners[li].scheme == SBX_SCHEME_TCP ? FRAMING_TCP
								  : FRAMING_NONE,
	};
	/* The SP header is the first message: a peer that sends nothing is
	 * timed from now (tls: nng's handshake timeout does it). */
	if (g.conns[fd].framing != FRAMING_NONE)
		g.conns[fd].started_ms = now;
	if (g.listeners[li].scheme == SBX_SCHEME_TLS_TCP)
		remember_remote(&g.conns[fd], &remote);
	if (g.listeners[li].revoke_next) {
		/* The accept nng armed before the client CA changed: it hands
		 * this connection the old config. Counted in, shut at once (nng
		 * closes it as a peer that hung up). */
		g.listeners[li].revoke_next = false;
		shutdown(fd, SHUT_RDWR);
		g.conns[fd].shut = g.conns[fd].revoked = true;
	}
	if ((size_t)fd >= g.high)
		g.high = (size_t)fd + 1;
	return true;
}

bool conn_guard_accepted(int fd)
{
	bool ok;

	pthread_mutex_lock(&g.mu);
	ok = !g.on || admit(fd);
	pthread_mutex_unlock(&g.mu);
	return ok;
}

/* ---- readv: where each message starts and ends ---- */

/* Messages up to this size are not charged to the pending budgets: what
 * they can hold is bounded by the connection caps (per_listener x 64 KiB),
 * and a full budget must not refuse a Health or a small call. */
#define PENDING_FREE_BYTES (64u << 10)

static void release(struct conn *c)
{
	g.peers[c->peer].pending -= c->charged;
	g.pending -= c->charged;
	c->charged = 0;
}

/* nng allocates a message's whole announced length as soon as it has the
 * length: charge it before nng sees it, or mark c to be reset. */
static bool charge(struct conn *c, uint64_t len)
{
	struct peer *p = &g.peers[c->peer];
	uint64_t per_peer = (uint64_t)g.lim.pending_bytes_per_peer_mb << 20;
	uint64_t all = (uint64_t)g.lim.pending_bytes_mb << 20;

	if (len <= PENDING_FREE_BYTES)
		return true;
	if (len > per_peer - p->pending || len > all - g.pending)
		return false;
	p->pending += len;
	g.pending += len;
	c->charged = len;
	return true;
}

static void feed(struct conn *c, const uint8_t *p, size_t n, int64_t now)
{
	while (n > 0) {
		size_t need = !c->sp_done ? 8 : c->framing == FRAMING_IPC ? 9 : 8;
		uint64_t len = 0;

		if (c->body_left) {
			size_t k = n < c->body_left ? n : (size_t)c->body_left;

			c->body_left -= k;
			p += k;
			n -= k;
			if (!c->body_left) {
				c->started_ms = 0;
				c->first_done = true;
				release(c);
			}
			continue;
		}
		if (!c->started_ms)
			c->started_ms = now;
		c->head[c->head_got++] = *p++;
		n--;
		if (c->head_got < need)
			continue;
		c->head_got = 0;
		if (!c->sp_done) {
			/* nng's own test (ipc_pipe_neg_cb, tcptran_pipe_nego_cb) */
			c->bad_header =
			    memcmp(c->head, "\0SP\0", 4) != 0 || c->head[6] || c->head[7];
			if (c->bad_header)
				sbx_metrics_add(SBX_M_CONN_REFUSED, SBX_REFUSED_BAD_HEADER, 1);
			c->sp_done = true;
			c->started_ms = 0;
			continue;
		}
		for (size_t i = need - 8; i < need; i++)
			len = len << 8 | c->head[i];
		if (!charge(c, len)) {
			sbx_metrics_add(SBX_M_CONN_REFUSED, SBX_REFUSED_PENDING_BYTES, 1);
			c->over = true;
			return;
		}
		c->body_left = len;
		if (!len) {
			c->started_ms = 0;
			c->first_done = true;
		}
	}
}

bool conn_guard_read(int fd, const struct iovec *iov, int iovcnt, ssize_t n)
{
	bool reset = false;

	if (n < 0 || fd < 0)
		return false;
	pthread_mutex_lock(&g.mu);
	if (g.on && (size_t)fd < g.nfds && g.conns[fd].used && !g.conns[fd].http) {
		struct conn *c = &g.conns[fd];
		int64_t now = sbx_mono_ms();
		size_t left = (size_t)n;

		for (int i = 0; c->framing && !c->over && i < iovcnt && left; i++) {
			size_t k = iov[i].iov_len < left ? iov[i].iov_len : left;

			feed(c, iov[i].iov_base, k, now);
			left -= k;
		}
		reset = c->bad_header || c->over || (n == 0 && (!c->sp_done || !c->framing));
	}
	pthread_mutex_unlock(&g.mu);
	return reset;
}

/* ---- close ---- */

static void untrack(int fd)
{
	struct conn *c = &g.conns[fd];

	if (!c->used)
		return;
	if (c->http) {
		g.http_conns--;
		memset(c, 0, sizeof(*c));
		return;
	}
	release(c);
	g.listeners[c->listener].evicting -= c->evicted;
	g.listeners[c->listener].conns--;
	g.peers[c->peer].conns--;
	memset(c, 0, sizeof(*c));
}

void conn_guard_closing(int fd)
{
	struct conn ended = {0};

	if (fd < 0)
		return;
	pthread_mutex_lock(&g.mu);
	if (g.conns && (size_t)fd < g.nfds) {
		ended = g.conns[fd];
		untrack(fd);
	}
	pthread_mutex_unlock(&g.mu);
	if (ended.used && ended.tls && !ended.piped && !ended.revoked)
		handshake_failed(ended.rfamily, ended.raddr, ended.rport,
				 sbx_mono_ms() - ended.accepted_ms);
}

/* ---- life cycle ---- */

size_t conn_guard_fds(const struct sbx_config_connections *lim, size_t nlisteners)
{
	/* Each listener may hold one more for the moment it takes to refuse
	 * it, and EVICTING_MAX shut down for newcomers until nng closes them. */
	return ((size_t)lim->per_listener + 1 + EVICTING_MAX) * nlisteners;
}

int conn_guard_arm(const struct sbx_config_connections *lim, size_t nlisteners, size_t reserve,
		   struct sbx_err *err)
{
	struct rlimit rl;
	size_t need;
	int rc = 0;

	if (nlisteners > sizeof(g.listeners) / sizeof(g.listeners[0]))
		return sbx_fail(err, "connection guard: at most %zu listeners",
				sizeof(g.listeners) / sizeof(g.listeners[0]));
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return sbx_fail_errno(err, "connection guard: RLIMIT_NOFILE");
	need = conn_guard_fds(lim, nlisteners) + reserve;
	/* Shrunk only to a cap of one connection at least: less would wrap. */
	if (need > rl.rlim_cur && !lim->per_listener_given &&
	    rl.rlim_cur >= reserve + (2 + EVICTING_MAX) * nlisteners) {
		/* The default is what shrinks to fit (a low hard limit, or
		 * valgrind's); a number the operator wrote is refused below. */
		struct sbx_config_connections fit = *lim;

		fit.per_listener =
		    (uint32_t)((rl.rlim_cur - reserve) / nlisteners - 1 - EVICTING_MAX);
		/* per_peer stays within a quarter of it: clamped to
		 * per_listener alone, one peer could fill a listener; shrunk in
		 * proportion (64 of 1024), a low limit (valgrind's 1024) left
		 * a caller with a few connections. */
		if (fit.per_peer > fit.per_listener / 4)
			fit.per_peer = fit.per_listener / 4;
		if (fit.per_peer < 1)
			fit.per_peer = 1;
		fprintf(stderr,
			"sbxd: connections.per_listener lowered from %u to %u and per_peer from %u "
			"to %u to fit RLIMIT_NOFILE %llu beside %zu descriptors kept for runs and "
			"workers\n",
			lim->per_listener, fit.per_listener, lim->per_peer, fit.per_peer,
			(unsigned long long)rl.rlim_cur, reserve);
		return conn_guard_arm(&fit, nlisteners, reserve, err);
	}
	if (need > rl.rlim_cur)
		return sbx_fail(
		    err,
		    "connections.per_listener %u on %zu listeners and %zu descriptors "
		    "kept for runs and workers need %zu descriptors, over RLIMIT_NOFILE "
		    "%llu: lower connections.per_listener (or runs_max, workers, "
		    "exec_fds_per_run), or raise the hard limit (ulimit -Hn)",
		    lim->per_listener, nlisteners, reserve, need, (unsigned long long)rl.rlim_cur);
	pthread_mutex_lock(&g.mu);
	g.lim = *lim;
	g.nfds = rl.rlim_cur < (1u << 20) ? (size_t)rl.rlim_cur : (1u << 20);
	/* Each live peer holds a connection; one more for the newcomer. */
	g.npeers = ((size_t)lim->per_listener + EVICTING_MAX) * nlisteners + 1;
	g.conns = calloc(g.nfds, sizeof(*g.conns));
	g.peers = calloc(g.npeers, sizeof(*g.peers));
	g.nlisteners = nlisteners;
	memset(g.listeners, 0, sizeof(g.listeners));
	g.high = 0;
	g.pending = 0;
	g.on = g.conns && g.peers;
	if (!g.on) {
		free(g.conns);
		free(g.peers);
		g.conns = NULL;
		g.peers = NULL;
		rc = sbx_fail_errnum(err, ENOMEM, "connection guard: %zu fds", g.nfds);
	}
	pthread_mutex_unlock(&g.mu);
	return rc;
}

int conn_guard_start(const struct sbx_config_connections *lim, size_t nlisteners, size_t reserve,
		     struct sbx_err *err)
{
	static const struct sbx_nngfix_hooks hooks = {
	    .accepted = conn_guard_accepted,
	    .read = conn_guard_read,
	    .closing = conn_guard_closing,
	};

	if (sbx_nngfix_check(err) < 0)
		return sbx_err_prefix(err, "connection guard");
	if (conn_guard_arm(lim, nlisteners, reserve, err) < 0)
		return -1;
	sbx_nngfix_set_hooks(&hooks);
	return 0;
}

void conn_guard_listener(size_t i, enum sbx_scheme scheme, const char *ipc_path, int port)
{
	pthread_mutex_lock(&g.mu);
	if (i < g.nlisteners) {
		struct guarded_listener *l = &g.listeners[i];

		l->scheme = scheme;
		snprintf(l->path, sizeof(l->path), "%s", ipc_path ? ipc_path : "");
		l->port = port;
	}
	pthread_mutex_unlock(&g.mu);
}

void conn_guard_sweep(int64_t now_ms)
{
	unsigned long untold = rpc_ratelimit_flush(&handshake_lines, now_ms);

	if (untold)
		fprintf(stderr,
			"sbxd: tls+tcp: %lu more connections closed before their TLS handshake "
			"completed (suppressed)\n",
			untold);
	int64_t limit_ms = (int64_t)g.lim.message_seconds * 1000;
	int64_t first_ms = (int64_t)g.lim.first_request_seconds * 1000;

	pthread_mutex_lock(&g.mu);
	for (size_t fd = 0; g.on && fd < g.high; fd++) {
		struct conn *c = &g.conns[fd];

		bool slow = c->started_ms && now_ms - c->started_ms > limit_ms;
		bool silent = c->framing && !c->first_done && now_ms - c->accepted_ms > first_ms;
		bool aged = c->http && now_ms - c->accepted_ms > CONN_GUARD_HTTP_SECONDS * 1000;

		if (c->used && !c->shut && (slow || silent || aged)) {
			if (!c->http)
				sbx_metrics_add(
				    SBX_M_CONN_REFUSED,
				    slow ? SBX_REFUSED_SLOW_MESSAGE : SBX_REFUSED_NO_REQUEST, 1);
			/* The fd is still nng's (its close would have cleared
			 * the entry first); shutdown leaves it open for nng to
			 * close. */
			shutdown((int)fd, SHUT_RDWR);
			c->shut = true;
		}
	}
	pthread_mutex_unlock(&g.mu);
}

void conn_guard_tls_revoke(void)
{
	pthread_mutex_lock(&g.mu);
	for (size_t i = 0; g.on && i < g.nlisteners; i++)
		if (g.listeners[i].scheme == SBX_SCHEME_TLS_TCP)
			g.listeners[i].revoke_next = true;
	for (size_t fd = 0; g.on && fd < g.high; fd++) {
		struct conn *c = &g.conns[fd];

		if (c->used && c->tls && !c->shut) {
			/* The fd is still nng's: shutdown leaves it for nng to close. */
			shutdown((int)fd, SHUT_RDWR);
			c->shut = c->revoked = true;
		}
	}
	pthread_mutex_unlock(&g.mu);
}

void conn_guard_stop(void)
{
	pthread_mutex_lock(&g.mu);
	g.on = false;
	free(g.conns);
	free(g.peers);
	g.conns = NULL;
	g.peers = NULL;
	g.nfds = g.npeers = g.high = 0;
	g.pending = 0;
	g.http_port = 0;
	g.http_conns = 0;
	pthread_mutex_unlock(&g.mu);
}

int conn_guard_http_listener(int port)
{
	int rc = 0;

	pthread_mutex_lock(&g.mu);
	/* Listeners are told apart by their port: one port on two addresses
	 * would hand RPC connections the metrics listener's bounds. */
	for (size_t i = 0; port && i < g.nlisteners; i++)
		if (g.listeners[i].scheme != SBX_SCHEME_IPC && g.listeners[i].port == port)
			rc = -1;
	if (rc == 0)
		g.http_port = port;
	pthread_mutex_unlock(&g.mu);
	return rc;
}
