/* SPDX-License-Identifier: Apache-2.0 */
/* The raw nng peer of FetchArtifact (bench_nng_peer.h). */
#include "bench_nng_peer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "bench_util.h"

#define PEER_TIMEOUT_MS 60000
#define PEER_MAX	64

struct bench_nng_peer {
	nng_socket sock;
	nng_tls_config *tls;
	int fd;
	uint64_t size;
	size_t chunk;
	int n;
	pthread_t threads[PEER_MAX];
};

static void die_nng(int rv, const char *what, const char *url)
{
	bench_die("raw nng peer %s: %s: %s", url, what, nng_strerror(rv));
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf = calloc(1, 1 << 20);
	size_t n;

	if (!f || !buf)
		bench_die_errno("read %s", path);
	n = fread(buf, 1, (1 << 20) - 1, f);
	if (ferror(f) || n == 0)
		bench_die_errno("read %s", path);
	fclose(f);
	return buf;
}

static nng_tls_config *tls_config(const struct bench_nng_tls *t, bool server, const char *url)
{
	nng_tls_config *cfg;
	int rv;

	if ((rv = nng_tls_config_alloc(&cfg, server ? NNG_TLS_MODE_SERVER : NNG_TLS_MODE_CLIENT)))
		die_nng(rv, "TLS config", url);
	if ((rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) ||
	    (rv = nng_tls_config_ca_file(cfg, t->ca)) ||
	    (!server && (rv = nng_tls_config_server_name(cfg, t->server_name))))
		die_nng(rv, "TLS CA", url);
	char *cert = slurp(server ? t->server_cert : t->client_cert);
	char *key = slurp(server ? t->server_key : t->client_key);
	rv = nng_tls_config_own_cert(cfg, cert, key, NULL);
	free(cert);
	free(key);
	if (rv)
		die_nng(rv, "TLS certificate", url);
	return cfg;
}

/* One context: receive, answer with the chunk read into the reply. */
static void *serve(void *arg)
{
	struct bench_nng_peer *p = arg;
	nng_ctx ctx;
	nng_aio *aio;

	if (nng_ctx_open(&ctx, p->sock) || nng_aio_alloc(&aio, NULL, NULL))
		return NULL;
	for (;;) {
		nng_ctx_recv(ctx, aio);
		nng_aio_wait(aio);
		int rv = nng_aio_result(aio);
		if (rv == NNG_ECLOSED)
			break;
		if (rv)
			continue;
		nng_msg *m = nng_aio_get_msg(aio);
		uint64_t off = 0;
		if (nng_msg_len(m) == 8)
			memcpy(&off, nng_msg_body(m), 8);
		nng_msg_free(m);
		size_t n = off < p->size
			       ? (p->size - off < p->chunk ? (size_t)(p->size - off) : p->chunk)
			       : 0;
		if (nng_msg_alloc(&m, n))
			continue;
		for (size_t got = 0; got < n;) {
			ssize_t k = pread(p->fd, (char *)nng_msg_body(m) + got, n - got,
					  (off_t)(off + got));
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0) {
				nng_msg_realloc(m, got);
				break;
			}
			got += (size_t)k;
		}
		nng_aio_set_msg(aio, m);
		nng_ctx_send(ctx, aio);
		nng_aio_wait(aio);
		if (nng_aio_result(aio)) {
			nng_msg_free(nng_aio_get_msg(aio));
			if (nng_aio_result(aio) == NNG_ECLOSED)
				break;
		}
	}
	nng_aio_free(aio);
	return NULL;
}

struct bench_nng_peer *bench_nng_peer_start(const char *url, const struct bench_nng_tls *tls,
					    int fd, uint64_t size, size_t chunk, int contexts)
{
	struct bench_nng_peer *p = calloc(1, sizeof(*p));
	nng_listener l;
	int rv;

	if (!p)
		bench_die("out of memory");
	p->fd = fd;
	p->size = size;
	p->chunk = chunk;
	if ((rv = nng_rep0_open(&p->sock)))
		die_nng(rv, "nng_rep0_open", url);
	if ((rv = nng_listener_create(&l, p->sock, url)) ||
	    (rv = nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, 4096)))
		die_nng(rv, "listener", url);
	if (tls && tls->ca) {
		p->tls = tls_config(tls, true, url);
		if ((rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, p->tls)))
			die_nng(rv, "TLS", url);
	}
	if ((rv = nng_listener_start(l, 0)))
		die_nng(rv, "listen", url);
	for (int i = 0; i < contexts && i < PEER_MAX; i++) {
		if (pthread_create(&p->threads[i], NULL, serve, p))
			bench_die("raw nng peer: no thread");
		p->n++;
	}
	return p;
}

void bench_nng_peer_stop(struct bench_nng_peer *p)
{
	if (!p)
		return;
	nng_close(p->sock);
	for (int i = 0; i < p->n; i++)
		pthread_join(p->threads[i], NULL);
	if (p->tls)
		nng_tls_config_free(p->tls);
	free(p);
}

struct caller {
	nng_socket sock;
	uint64_t size;
	size_t chunk;
	atomic_uint_fast64_t next; /* chunk index */
	atomic_int failed;
	const char *url;
};

static void *fetch_worker(void *arg)
{
	struct caller *c = arg;
	nng_ctx ctx;
	nng_aio *aio;
	uint64_t n = c->size / c->chunk + (c->size % c->chunk != 0);

	if (nng_ctx_open(&ctx, c->sock) || nng_aio_alloc(&aio, NULL, NULL)) {
		atomic_store(&c->failed, NNG_ENOMEM);
		return NULL;
	}
	for (uint64_t i; (i = atomic_fetch_add(&c->next, 1)) < n && !atomic_load(&c->failed);) {
		uint64_t off = i * c->chunk;
		size_t want = c->size - off < c->chunk ? (size_t)(c->size - off) : c->chunk;
		nng_msg *m;
		int rv;

		if ((rv = nng_msg_alloc(&m, 8))) {
			atomic_store(&c->failed, rv);
			break;
		}
		memcpy(nng_msg_body(m), &off, 8);
		nng_aio_set_msg(aio, m);
		nng_aio_set_timeout(aio, PEER_TIMEOUT_MS);
		nng_ctx_send(ctx, aio);
		nng_aio_wait(aio);
		if ((rv = nng_aio_result(aio))) {
			nng_msg_free(nng_aio_get_msg(aio));
			atomic_store(&c->failed, rv);
			break;
		}
		nng_aio_set_timeout(aio, PEER_TIMEOUT_MS);
		nng_ctx_recv(ctx, aio);
		nng_aio_wait(aio);
		if ((rv = nng_aio_result(aio))) {
			atomic_store(&c->failed, rv);
			break;
		}
		m = nng_aio_get_msg(aio);
		if (nng_msg_len(m) != want)
			atomic_store(&c->failed, NNG_EPROTO);
		nng_msg_free(m);
	}
	nng_ctx_close(ctx);
	nng_aio_free(aio);
	return NULL;
}

double bench_nng_peer_fetch(const char *url, const struct bench_nng_tls *tls, uint64_t size,
			    size_t chunk, int window)
{
	struct caller c = {.size = size, .chunk = chunk, .url = url};
	pthread_t threads[PEER_MAX];
	nng_tls_config *cfg = NULL;
	nng_dialer d;
	int rv, n = 0;

	if ((rv = nng_req0_open(&c.sock)))
		die_nng(rv, "nng_req0_open", url);
	if ((rv = nng_dialer_create(&d, c.sock, url)) ||
	    (rv = nng_dialer_set_size(d, NNG_OPT_RECVMAXSZ, chunk + 4096)))
		die_nng(rv, "dialer", url);
	if (tls && tls->ca) {
		cfg = tls_config(tls, false, url);
		if ((rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg)))
			die_nng(rv, "TLS", url);
	}
	if ((rv = nng_dialer_start(d, 0)))
		die_nng(rv, "dial", url);
	double t0 = bench_now_ms();
	for (int i = 0; i < window && i < PEER_MAX; i++) {
		if (pthread_create(&threads[i], NULL, fetch_worker, &c))
			bench_die("raw nng caller: no thread");
		n++;
	}
	for (int i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	double t1 = bench_now_ms();
	nng_close(c.sock);
	if (cfg)
		nng_tls_config_free(cfg);
	if (atomic_load(&c.failed))
		die_nng(atomic_load(&c.failed), "fetch", url);
	return (t1 - t0) / 1e3;
}
