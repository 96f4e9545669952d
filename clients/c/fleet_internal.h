/* SPDX-License-Identifier: Apache-2.0 */
/* What discovery.c and fleet.c share (callers see sbxclient.h's part). */
#ifndef SBX_FLEET_INTERNAL_H
#define SBX_FLEET_INTERNAL_H

#include "sbxclient.h"

/* One host as discovery found it. */
struct sbx_resolved {
	char name[SBX_HOST_MAX];     /* "target:port" (SRV), "host:port" (tls+tcp), the URL (ipc) */
	char url[SBX_HOST_MAX + 16]; /* what nng dials */
	char server_name[256];	     /* the name its certificate carries; "" = the URL's host */
};

/* The hosts behind a dns+srv:// endpoint (each SRV target's address looked
 * up too, so that nng dials an address and TLS checks the target's name);
 * *ttl: the least TTL of the records used. */
int sbx_srv_resolve(const char *endpoint, struct sbx_resolved *out, size_t max, size_t *n,
		    uint32_t *ttl, struct sbx_err *err);

#endif
