/* SPDX-License-Identifier: Apache-2.0 */
/* The raw nng peer of FetchArtifact: a bare nng_rep0 server answering
 * each request (the 8-byte offset, little-endian) with the chunk of a
 * memfd at that offset, read straight into the reply message, and a bare
 * nng_req0 caller that keeps `window` requests in flight (one context
 * each) and drops what arrives. Over ipc:// or tls+tcp:// (mutual TLS
 * with the same certificates as sbxd's). No envelope, no hashing, no
 * file: what nng itself carries at that chunk size. For sbx-bench-sbxd
 * and the top-level benchmark command. */
#ifndef SBX_BENCH_NNG_PEER_H
#define SBX_BENCH_NNG_PEER_H

#include <stddef.h>
#include <stdint.h>

/* PEM files; NULL members (or a NULL struct) for ipc://. */
struct bench_nng_tls {
	const char *server_cert, *server_key; /* the server's pair */
	const char *client_cert, *client_key; /* the caller's pair */
	const char *ca;			      /* signed both */
	const char *server_name;	      /* the server certificate names it */
};

struct bench_nng_peer;

/* Listens on url, serving fd (size bytes) in chunks of at most chunk bytes
 * from `contexts` contexts; dies (bench_die) on failure. */
struct bench_nng_peer *bench_nng_peer_start(const char *url, const struct bench_nng_tls *tls,
					    int fd, uint64_t size, size_t chunk, int contexts);
void bench_nng_peer_stop(struct bench_nng_peer *p);

/* Fetches all size bytes from the peer at url, chunk by chunk with window
 * requests in flight; returns the seconds it took (dies on failure). */
double bench_nng_peer_fetch(const char *url, const struct bench_nng_tls *tls, uint64_t size,
			    size_t chunk, int window);

#endif
