/* SPDX-License-Identifier: Apache-2.0 */
/* What an exec tried, read from one packet of its connect watch. The
 * watch's kernel filter (helper/netns.c) passes the refusals the exec's
 * own kernel sends back to an attempt: a TCP RST|ACK with sequence number
 * 0 from the address and port tried, an ICMP port or protocol unreachable
 * or parameter problem, an ICMPv6 port unreachable or unknown next header,
 * quoting the datagram or the SYN (a quoted TCP segment of another kind is
 * a reply of the exec's own kernel). These are the same rules, checked
 * again on every byte the filter let through (the filter
 * is the kernel's to run, this is what sbxd counts): a packet passes here
 * only if the filter passed it, and tests/unit/test_deny_packet.c runs
 * both on the same packets. Not attempts: loopback (the exec's own
 * servers and closed ports), the refusals of the answers of sbxd's own
 * resolver (from 127.0.0.1:53 to a client that left), IPv4 fragments
 * after the first, IPv6 packets with extension headers. */
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "deny_packet.h"
#include "egress_port.h"

#define ICMP_UNREACH		  3 /* and its codes: */
#define ICMP_UNREACH_PROTOCOL	  2
#define ICMP_UNREACH_PORT	  3
#define ICMP_PARAM_PROBLEM	  12 /* codes 0-2: IP options refused */
#define ICMP_PARAM_PROBLEM_MAX	  2
#define ICMP6_UNREACH		  1
#define ICMP6_UNREACH_PORT	  4
#define ICMP6_PARAM_PROBLEM	  4
#define ICMP6_PARAM_NEXT_HEADER	  1
#define TCP_FLAGS_SEEN		  0x17 /* FIN SYN RST ACK */
#define TCP_RST_ACK		  0x14
#define TCP_SYN			  0x02
#define IPV4_FRAGMENT_OFFSET_MASK 0x1fff

/* Whether a[0..len) is a loopback address (127/8, ::1, ::ffff:127/104). */
static bool loopback(const uint8_t *a, size_t len)
{
	static const uint8_t v6_loop[16] = {[15] = 1};
	static const uint8_t v4_mapped[12] = {[10] = 0xff, [11] = 0xff};

	if (len == 4)
		return a[0] == 127;
	return !memcmp(a, v6_loop, 16) || (!memcmp(a, v4_mapped, 12) && a[12] == 127);
}

/* The 16-bit number at p, network order. */
static unsigned be16(const uint8_t *p)
{
	return (unsigned)(p[0] << 8 | p[1]);
}

/* "ADDRESS:PORT" for TCP, "ADDRESS:PORT/udp" (or /udplite), IPv6 in
 * brackets; "ADDRESS (protocol N)" for another protocol (port < 0). */
static bool name_of(int family, const uint8_t *addr, uint8_t proto, int port, char *name,
		    size_t name_size)
{
	char a[INET6_ADDRSTRLEN];
	bool v6 = family == AF_INET6;

	if (!inet_ntop(family, addr, a, sizeof(a)))
		return false;
	if (port < 0)
		snprintf(name, name_size, "%s (protocol %u)", a, proto);
	else
		snprintf(name, name_size, "%s%s%s:%d%s", v6 ? "[" : "", a, v6 ? "]" : "", port,
			 proto == IPPROTO_UDP	    ? "/udp"
			 : proto == IPPROTO_UDPLITE ? "/udplite"
						    : "");
	return true;
}

/* The datagram an ICMP error quotes, q[0..n) from its IP header on: what
 * it was sent to. */
static bool quoted_name(int family, const uint8_t *q, size_t n, char *name, size_t name_size)
{
	size_t alen = family == AF_INET ? 4 : 16, hl;
	const uint8_t *src, *dst;
	uint8_t proto;
	bool ports;

	if (n < (family == AF_INET ? 20u : 40u))
		return false;
	hl = family == AF_INET ? (size_t)(q[0] & 0x0f) * 4 : 40;
	if (hl < (family == AF_INET ? 20u : 40u))
		return false;
	proto = family == AF_INET ? q[9] : q[6];
	src = q + (family == AF_INET ? 12 : 8);
	dst = q + (family == AF_INET ? 16 : 24);
	ports = proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE;
	if (loopback(dst, alen) || (ports && n < hl + 4))
		return false;
	/* A quoted TCP segment is an attempt only as a SYN: a RST or SYN|ACK
	 * of the exec's own kernel, echoing options it then refuses, is
	 * quoted with the client's own address and port (review 25). */
	if (proto == IPPROTO_TCP && (n < hl + 14 || (q[hl + 13] & TCP_FLAGS_SEEN) != TCP_SYN))
		return false;
	if (ports && loopback(src, alen) && be16(q + hl) == SBX_DENY_DNS_PORT)
		return false;
	return name_of(family, dst, proto, ports ? (int)be16(q + hl + 2) : -1, name, name_size);
}

/* Whether the ICMP(v6) message at m is one of the refusals. */
static bool refusal(int family, const uint8_t *m)
{
	if (family == AF_INET)
		return (m[0] == ICMP_UNREACH &&
			(m[1] == ICMP_UNREACH_PORT || m[1] == ICMP_UNREACH_PROTOCOL)) ||
		       (m[0] == ICMP_PARAM_PROBLEM && m[1] <= ICMP_PARAM_PROBLEM_MAX);
	return (m[0] == ICMP6_UNREACH && m[1] == ICMP6_UNREACH_PORT) ||
	       (m[0] == ICMP6_PARAM_PROBLEM && m[1] == ICMP6_PARAM_NEXT_HEADER);
}

bool deny_packet_name(const uint8_t *pkt, size_t n, char *name, size_t name_size)
{
	const uint8_t *ip = pkt + ETH_HLEN;
	size_t len = n > ETH_HLEN ? n - ETH_HLEN : 0, hl;
	int family;
	uint8_t proto;

	if (n < ETH_HLEN)
		return false;
	if (be16(pkt + 12) == ETH_P_IP && len >= 20) {
		family = AF_INET;
		hl = (size_t)(ip[0] & 0x0f) * 4;
		proto = ip[9];
		if (be16(ip + 6) & IPV4_FRAGMENT_OFFSET_MASK)
			return false; /* not a header: the middle of a packet */
	} else if (be16(pkt + 12) == ETH_P_IPV6 && len >= 40) {
		family = AF_INET6;
		hl = 40;
		proto = ip[6];
	} else {
		return false;
	}
	if (hl < (family == AF_INET ? 20u : 40u) || len < hl + 8)
		return false;
	/* A SYN to a closed port gets RST|ACK, sequence number 0, from the
	 * address and port tried. */
	if (proto == IPPROTO_TCP) {
		const uint8_t *src = ip + (family == AF_INET ? 12 : 8);
		const uint8_t *tcp = ip + hl;

		return len >= hl + 14 && (tcp[13] & TCP_FLAGS_SEEN) == TCP_RST_ACK &&
		       !(tcp[4] | tcp[5] | tcp[6] | tcp[7]) &&
		       !loopback(src, family == AF_INET ? 4 : 16) &&
		       name_of(family, src, proto, (int)be16(tcp), name, name_size);
	}
	/* An ICMP error: 8 bytes of its own, then the datagram it refuses. */
	if (proto == (family == AF_INET ? IPPROTO_ICMP : IPPROTO_ICMPV6))
		return refusal(family, ip + hl) &&
		       quoted_name(family, ip + hl + 8, len - hl - 8, name, name_size);
	return false;
}
