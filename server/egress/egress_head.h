/* SPDX-License-Identifier: Apache-2.0 */
/* The request head a sandbox sends its proxy: hostile input, read strictly.
 *
 * Two forms are accepted, HTTP/1.1 or HTTP/1.0 only:
 *   CONNECT host:port HTTP/1.1       (authority form: TLS or any TCP
 *                                     protocol, relayed untouched)
 *   GET http://host[:port]/path HTTP/1.1   (absolute form, plain HTTP;
 *                                     rewritten to origin form for the
 *                                     destination)
 * Anything else (origin-form requests, https:// in absolute form, other
 * schemes, obs-fold, bare LF in the request line, NUL or control bytes,
 * a header line without a colon, a second Host that disagrees, more than
 * EGRESS_HEADERS_MAX headers, more than EGRESS_HEAD_MAX bytes) is refused
 * with the HTTP status to answer and a reason. */
#ifndef SBX_EGRESS_HEAD_H
#define SBX_EGRESS_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "hostname.h"

#define EGRESS_HEAD_MAX	   8192 /* bytes, the final CRLF CRLF included */
#define EGRESS_HEADERS_MAX 100

enum egress_head_kind {
	EGRESS_HEAD_CONNECT,
	EGRESS_HEAD_HTTP,
};

struct egress_head {
	enum egress_head_kind kind;
	char method[16];
	/* The target, normalized (common/hostname.h); an IPv6 literal is
	 * parsed (kind SBX_HOST_IPV6) so that it can be refused by name. */
	char host[SBX_HOSTNAME_BUF];
	enum sbx_host_kind host_kind;
	uint16_t port;	 /* CONNECT: required; http://: default 80 */
	size_t head_len; /* bytes of the head in the buffer, CRLF CRLF included;
			  * what follows is the request's own bytes (a body, or
			  * a TLS ClientHello sent early), relayed as they are */
	/* EGRESS_HEAD_HTTP: what the destination gets instead of the head:
	 * the request line in origin form, the headers minus the hop-by-hop
	 * ones (Connection and what it names, Keep-Alive, Proxy-*, TE,
	 * Trailer, Upgrade), Host set to the target, "Connection: close"
	 * added. Transfer-Encoding and Content-Length stay: the body is
	 * relayed as it is. malloc'd; NULL for CONNECT. */
	char *rewritten;
	size_t rewritten_len;
};

/* Parses buf[0..len). 1: a whole head, *h filled (free with
 * egress_head_free); 0: not complete yet and len < EGRESS_HEAD_MAX (read
 * more); -1: refused, *http_status the answer (400 bad request, 431 too
 * large, 500 out of memory, 501 not implemented, 505 version) and err the
 * reason, which never quotes the input.
 * Each call reads from the start. Bytes that add no LF can only bring a
 * refusal earlier, never change the answer, so a caller may parse only when
 * a read brought a LF or len reached EGRESS_HEAD_MAX (a client that trickles
 * a byte at a time then costs a parse per line, not per byte). */
int egress_head_parse(const char *buf, size_t len, struct egress_head *h, int *http_status,
		      struct sbx_err *err);
void egress_head_free(struct egress_head *h);

#endif
