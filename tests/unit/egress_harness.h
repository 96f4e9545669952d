/* SPDX-License-Identifier: Apache-2.0 */
/* What the egress proxy's unit tests (test_egress_proxy.c,
 * test_egress_bounded.c, test_egress_share.c) share: a scratch directory
 * with a hosts file and the audit log, destination servers on 127.0.0.1,
 * the proxy and its runs, the sandbox's side of a connection and the
 * run's Status. Every helper that cannot do its part exits 2: the test's
 * setup failed, not one of its checks. */
#ifndef SBX_TESTS_EGRESS_HARNESS_H
#define SBX_TESTS_EGRESS_HARNESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress.h"
#include "runs_egress.h" /* Status as the run manager answers it */

/* ---- the scratch directory ---- */

struct scratch {
	char dir[64];
	char hosts[128];
	char audit_path[128];
};

/* mkdtemp(dir_template) (at most 63 bytes), a hosts file there holding
 * hosts_line, and the audit log (audit.log) opened in it. */
void scratch_open(struct scratch *s, const char *dir_template, const char *hosts_line);
/* Removes the hosts file, the audit log and the directory (the caller has
 * closed the audit log). */
void scratch_remove(struct scratch *s);

/* ---- destination servers ---- */

#define SERVER_KEEP 256

/* A server on 127.0.0.1 with a thread per connection: it first sends
 * blast_bytes (0: nothing, SIZE_MAX: until the peer stops reading), then
 * reads until EOF, counting. */
struct server {
	int fd;
	uint16_t port;
	size_t blast_bytes;
	pthread_t thread;
	atomic_ullong received;
	atomic_uint accepted;
	pthread_mutex_t mu;
	char keep[SERVER_KEEP]; /* [mu] the first bytes of the newest connection */
	size_t kept;		/* [mu] */
};

void server_start(struct server *s, size_t blast_bytes);

/* ---- sockets ---- */

/* A listening TCP socket on 127.0.0.1, its port in *port. */
int listen_loopback(uint16_t *port);
/* A connection to the proxy's listener on 127.0.0.1:port whose reads time
 * out after recv_seconds (a proxy that never answers fails the test rather
 * than hanging it); -1 when the listener refuses it. */
int proxy_dial(uint16_t port, int recv_seconds);
/* proxy_dial with a 5 s timeout; a refusal exits. */
int proxy_connect(uint16_t port);
/* Sends n bytes (until an error); how many were sent. */
size_t write_all(int fd, const void *p, size_t n);
void write_str(int fd, const char *s);
/* The proxy's answer head, read a byte at a time (nothing past it) into
 * out; its status or -1. */
int read_head(int fd, char *out, size_t size);
/* Sends CONNECT host:port on fd and reads the answer's head into head:
 * its status. */
int connect_on(int fd, const char *host, uint16_t port, char *head, size_t size);
/* CONNECT host:port through the proxy listening on proxy: the status (the
 * connection in *fdp; -1 in both when the listener refused it). */
int connect_via(uint16_t proxy, const char *host, uint16_t port, int *fdp);

/* ---- the proxy and its runs ---- */

/* The config's defaults but for the scratch hosts file, no resolv.conf,
 * lookup_seconds and connect_seconds 2, idle_seconds 30 and
 * accepts_per_run_per_second 1000. */
struct sbx_config_egress base_config(char *hosts);
struct sbx_egress *proxy_start(struct sbx_config_egress *cfg);

/* An entry for host:port that allows the loopback addresses of the
 * test's servers, with room to spare: 6000 connections a minute, 256 at
 * once. */
Sbx__V1__EgressRule rule(const char *host, uint16_t port);
/* A policy allowing rules[0..n) (n <= 16; rules outlive it), from a pool
 * of 64 for the process. */
Sbx__V1__Egress *allowlist(Sbx__V1__EgressRule *rules, size_t n);
/* A run of identity who with policy, its audit lines saying digest; not
 * yet listening. */
struct sbx_egress_run *run_new(struct sbx_egress *eg, const char *id, const char *who,
			       const char *digest, Sbx__V1__Egress *policy);
/* Exec exec_id of run listens on a port of its own (*port). */
void run_listen(struct sbx_egress_run *run, uint64_t exec_id, uint16_t *port);
/* run_new, and exec 1 listening on *port. */
struct sbx_egress_run *run_open(struct sbx_egress *eg, const char *id, const char *who,
				const char *digest, Sbx__V1__Egress *policy, uint16_t *port);

/* ---- Status ---- */

/* Status with its egress in at most max_bytes (free it with
 * sbx__v1__status_response__free_unpacked). */
Sbx__V1__StatusResponse *status_fit(struct sbx_egress_run *run, size_t max_bytes);
Sbx__V1__StatusResponse *status_of(struct sbx_egress_run *run);
/* The record of connection n once it is closed (waits up to 3 s for the
 * close); its strings are copies, freed by record_free. */
bool closed_record(struct sbx_egress_run *run, uint64_t n, Sbx__V1__EgressRecord *out);
void record_free(Sbx__V1__EgressRecord *r);

#endif
