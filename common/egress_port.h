/* SPDX-License-Identifier: Apache-2.0 */
/* Where a sandbox with an egress allowlist finds sbxd's proxy: a listening
 * socket that exec init makes in the exec's own network namespace
 * (helper/exec.c) and hands to sbxd (server/egress/egress.h). Here, in
 * common/, because both ends must agree on it and sbx-helper includes no
 * server header. */
#ifndef SBX_EGRESS_PORT_H
#define SBX_EGRESS_PORT_H

#define SBX_EGRESS_PORT	   3128 /* inside the sandbox, on 127.0.0.1 */
#define SBX_EGRESS_BACKLOG 128	/* connections that wait while sbxd is not accepting */
#define SBX_EGRESS_STR_(x) #x
#define SBX_EGRESS_STR(x)  SBX_EGRESS_STR_(x)
/* What the command's proxy variables say (exec.c build_env). */
#define SBX_EGRESS_PROXY_URL "http://127.0.0.1:" SBX_EGRESS_STR(SBX_EGRESS_PORT)
/* With egress deny: the exec's resolver, a UDP socket on 127.0.0.1:53 that
 * exec init makes in the exec's network namespace and hands to sbxd like
 * the listener above; sbxd refuses every query on it at once and records
 * the name (server/runs/runs_deny.c). The sandbox's /etc/resolv.conf
 * points there with one try and a 1 s timeout (helper/rootfs.c). */
#define SBX_DENY_DNS_PORT 53
/* With egress deny, also the exec's connect watch: every address is
 * routed to the namespace's own loopback (so a connect to a literal
 * address is refused at once, ECONNREFUSED, instead of failing unseen with
 * ENETUNREACH), and a packet socket on lo, filtered in the kernel to the
 * refusals (a TCP RST answering a SYN, an ICMP port unreachable), is
 * handed to sbxd beside the resolver; sbxd reads each such packet's first
 * SBX_DENY_WATCH_SNAP bytes (the link and IP headers, and the ports or the
 * quoted datagram's headers) and records what was tried
 * (helper/netns.c, server/runs/deny_packet.c). The most those take: 14
 * bytes of link header, an IPv4 header of 60 (options: the kernel copies
 * a datagram's own into its refusal), 8 of ICMP, the quoted header of 60
 * and 14 of its TCP header (to the flags), 156 bytes (at 128 a refusal of
 * a datagram sent with 40 bytes of options passed the filter and was not
 * counted: review 23). */
#define SBX_DENY_WATCH_SNAP 160

#endif
