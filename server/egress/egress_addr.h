/* SPDX-License-Identifier: Apache-2.0 */
/* Which resolved addresses a connection may go to. Refused unless the entry
 * says allow_private: 0/8, loopback 127/8, RFC 1918 (10/8, 172.16/12,
 * 192.168/16), link-local 169.254/16 (the cloud metadata address), CGNAT
 * 100.64/10, 192.0.0/24, the documentation and benchmark nets, multicast
 * 224/4, reserved 240/4, broadcast; IPv6 ::, ::1, fc00::/7, fe80::/10,
 * fec0::/10, ff00::/8, 2001:db8::/32, 100::/64, and every form that carries
 * an IPv4 address (IPv4-mapped ::ffff:0:0/96, IPv4-compatible ::/96,
 * IPv4-translated ::ffff:0:0:0/96, NAT64 64:ff9b::/96 and 64:ff9b:1::/48,
 * 6to4 2002::/16, Teredo 2001::/32) by the address it carries or, where that
 * cannot be told (Teredo, local-use NAT64), never. Never allowed, whatever
 * the entry says: unspecified, multicast, broadcast (TCP cannot reach
 * them). */
#ifndef SBX_EGRESS_ADDR_H
#define SBX_EGRESS_ADDR_H

#include <stdbool.h>
#include <sys/socket.h>

enum egress_addr_class {
	EGRESS_ADDR_PUBLIC,
	EGRESS_ADDR_PRIVATE, /* allowed with allow_private */
	EGRESS_ADDR_NEVER,   /* never */
};

/* sa is AF_INET or AF_INET6 (anything else: NEVER). *what names the range
 * ("loopback", "link-local", "IPv4-mapped loopback", ...), a static string. */
enum egress_addr_class egress_addr_classify(const struct sockaddr *sa, const char **what);
bool egress_addr_allowed(const struct sockaddr *sa, bool allow_private, const char **what);

#endif
