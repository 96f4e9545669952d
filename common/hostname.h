/* SPDX-License-Identifier: Apache-2.0 */
/* One rule for egress host names, shared by the policy parser (allowlist
 * entries) and sbxd's egress proxy (what a sandbox asks to reach), so that
 * an entry and a request are compared in the same normal form.
 *
 * The normal form: lower case, the one trailing dot dropped, IDNA 2008
 * (UTS #46, non-transitional) A-labels for any non-ASCII label (libidn2),
 * labels of letters, digits and inner hyphens, at most 63 bytes each and 253
 * in all. A name whose last label is all digits must be a strict dotted-quad
 * IPv4 address: resolvers read "127.1", "0x7f.1" or "2130706433" as
 * addresses, and the allowlist must mean what it says. */
#ifndef SBX_HOSTNAME_H
#define SBX_HOSTNAME_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

#define SBX_HOSTNAME_BUF 256 /* 253 + NUL, rounded */

enum sbx_host_kind {
	SBX_HOST_NAME,	   /* a DNS name */
	SBX_HOST_WILDCARD, /* "*." + a DNS name (only where allowed) */
	SBX_HOST_IPV4,	   /* a strict dotted quad */
	SBX_HOST_IPV6,	   /* "[...]" or a bare IPv6 literal, as inet_pton reads it
			    * (normal form: inet_ntop's, without brackets) */
};

/* Normalizes in[0..len) (not NUL-terminated; may hold any bytes) into out.
 * Wildcards only with allow_wildcard; IPv6 literals only with allow_ipv6
 * (the policy has none; a request may write one, to be refused by name).
 * -1 with err saying what is wrong ("not a host name", "label longer than
 * 63 bytes", "invalid IDNA name: <libidn2's reason>", ...), without the
 * name itself: the caller decides how to quote hostile bytes. */
int sbx_hostname_normalize(const char *in, size_t len, bool allow_wildcard, bool allow_ipv6,
			   char out[SBX_HOSTNAME_BUF], enum sbx_host_kind *kind,
			   struct sbx_err *err);

/* Whether a normalized request host (NAME, IPV4 or IPV6) is covered by a
 * normalized allowlist host: NAME and IPV4 entries by equality, a WILDCARD
 * "*.s" by any name ending in ".s" with at least one label before it (never
 * "s" itself), and never an IP by a name entry or a name by an IP entry. */
bool sbx_hostname_covers(const char *entry, enum sbx_host_kind entry_kind, const char *host,
			 enum sbx_host_kind host_kind);

/* The kind of an already normalized allowlist host ("*.x" WILDCARD, a dotted
 * quad IPV4, else NAME). */
enum sbx_host_kind sbx_hostname_kind(const char *normalized);

#endif
