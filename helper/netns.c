/* SPDX-License-Identifier: Apache-2.0 */
#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egress_port.h"
#include "fds.h"
#include "util.h"

static int loopback_up(struct sbx_err *err)
{
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr = {0};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return sbx_fail_errno(err, "loopback");
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return sbx_fail_errno(err, "bring loopback up");
	return 0;
}

/* Looked up at open, from this namespace: /proc/sys/net shows the network
 * namespace of whoever walks it. */
static int write_sysctl(int dir, const char *name, const char *value, struct sbx_err *err)
{
	if (sbx_write_at(dir, name, value, err) < 0)
		return sbx_err_prefix(err, "/proc/sys");
	return 0;
}

int sbx_netns_setup(int sysctl_dir, struct sbx_err *err)
{
	if (loopback_up(err) < 0)
		return -1;
	/* Of the buffer sysctls only these are per network namespace on Linux
	 * 6.x (tried: net.core.rmem_max, wmem_max, rmem_default, wmem_default,
	 * tcp_mem and udp_mem are host-wide and refused here). They bound what
	 * autotuning gives a TCP socket; SO_RCVBUF/SO_SNDBUF still reach twice
	 * the host's net.core.rmem_max/wmem_max (docs/operator/known-limits.md). */
	char buf[64];
	snprintf(buf, sizeof(buf), "4096 131072 %d", SBX_TCP_BUF_MAX);
	if (write_sysctl(sysctl_dir, "net/ipv4/tcp_rmem", buf, err) < 0)
		return -1;
	snprintf(buf, sizeof(buf), "4096 16384 %d", SBX_TCP_BUF_MAX);
	return write_sysctl(sysctl_dir, "net/ipv4/tcp_wmem", buf, err);
}

int sbx_netns_egress_listener(struct sbx_err *err)
{
	_cleanup_close_ int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons(SBX_EGRESS_PORT),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	if (s < 0)
		return sbx_fail_errno(err, "egress listener");
	/* A fresh namespace: nothing else can hold the port yet. */
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0)
		return sbx_fail_errno(err, "egress listener: bind 127.0.0.1:%d", SBX_EGRESS_PORT);
	if (listen(s, SBX_EGRESS_BACKLOG) < 0)
		return sbx_fail_errno(err, "egress listener: listen");
	return sbx_steal_fd(s);
}

int sbx_netns_deny_dns(struct sbx_err *err)
{
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons(SBX_DENY_DNS_PORT),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	if (s < 0)
		return sbx_fail_errno(err, "deny resolver");
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0)
		return sbx_fail_errno(err, "deny resolver: bind 127.0.0.1:%d", SBX_DENY_DNS_PORT);
	return sbx_steal_fd(s);
}

/* One RTM_NEWROUTE: every address of family as a local one, on lo, in the
 * local table (what `ip route add local 0.0.0.0/0 dev lo table local`
 * does), and the kernel's answer to it. */
static int route_all_local(int family, struct sbx_err *err)
{
	_cleanup_close_ int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	struct {
		struct nlmsghdr h;
		struct rtmsg rt;
		struct rtattr oif_attr;
		int oif;
	} req = {
	    .h = {.nlmsg_len = sizeof(req),
		  .nlmsg_type = RTM_NEWROUTE,
		  .nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
		  .nlmsg_seq = 1},
	    .rt = {.rtm_family = (unsigned char)family,
		   .rtm_table = RT_TABLE_LOCAL,
		   .rtm_protocol = RTPROT_BOOT,
		   .rtm_scope = RT_SCOPE_HOST,
		   .rtm_type = RTN_LOCAL},
	    .oif_attr = {.rta_len = RTA_LENGTH(sizeof(int)), .rta_type = RTA_OIF},
	};
	struct {
		struct nlmsghdr h;
		struct nlmsgerr e;
	} ack;
	const char *what = family == AF_INET ? "0.0.0.0/0" : "::/0";
	ssize_t n;

	req.oif = (int)if_nametoindex("lo");
	if (nl < 0 || !req.oif)
		return sbx_fail_errno(err, "egress deny: route %s to loopback", what);
	if (send(nl, &req, sizeof(req), 0) != (ssize_t)sizeof(req))
		return sbx_fail_errno(err, "egress deny: route %s to loopback", what);
	do
		n = recv(nl, &ack, sizeof(ack), 0);
	while (n < 0 && errno == EINTR);
	if (n < (ssize_t)sizeof(ack.h) || ack.h.nlmsg_type != NLMSG_ERROR)
		return sbx_fail_errnum(err, EPROTO, "egress deny: route %s to loopback", what);
	if (ack.e.error)
		return sbx_fail_errnum(err, -ack.e.error, "egress deny: route %s to loopback",
				       what);
	return 0;
}

int sbx_netns_deny_routes(struct sbx_err *err)
{
	struct sbx_err ignored;

	if (route_all_local(AF_INET, err) < 0)
		return -1;
	/* Without IPv6 (ipv6.disable=1: EAFNOSUPPORT; disabled on the
	 * namespace's lo, as disable_ipv6 copies it into every new one:
	 * EACCES) there is nothing to route: an IPv6 connect fails there at
	 * once all the same (no route), only unseen. */
	(void)route_all_local(AF_INET6, &ignored);
	return 0;
}

/* The connect watch's filter, run by the kernel on each packet lo
 * receives (the frame: lo's 14-byte Ethernet header, then IP). An attempt
 * is counted by the refusal the exec's own kernel sends back, not by what
 * the exec sent: a connect that the exec's own listener answers (every
 * address is local here) or a UDP "which address am I" connect is no
 * attempt. It keeps SBX_DENY_WATCH_SNAP bytes of a packet received (not
 * the copy lo sends) that is
 *   - a TCP RST|ACK with sequence number 0 from a non-loopback address:
 *     what a SYN to a port nobody listens on gets back (its source is the
 *     address and port that were tried), or
 *   - an ICMP port or protocol unreachable or parameter problem (what a
 *     datagram or SYN with IP options the exec's kernel will not take
 *     gets: review 24), an ICMPv6 port unreachable or unknown next
 *     header, quoting a datagram or a SYN sent to a non-loopback address:
 *     what a datagram to a closed port gets back (sbxd reads the
 *     destination there), unless the datagram is an answer of sbxd's own
 *     resolver (from 127/8, port SBX_DENY_DNS_PORT) to a client gone; a
 *     quoted TCP segment other than a SYN is a reply of the exec's own
 *     kernel (a RST or SYN|ACK echoing options it then refuses: review
 *     25), its destination the client's own port,
 * and drops everything else, IPv4 fragments after the first, and IPv6
 * packets with extension headers. A refusal from or of loopback, or of
 * the resolver's answers, is no attempt: dropped here, not only in sbxd,
 * as each packet sbxd reads costs the exec one of its DENY_RATE tokens
 * and a place in the watch's queue, which the attempts after it would
 * then wait for or miss. server/runs/deny_packet.c reads what passes, by
 * the same rules; tests/unit/test_deny_packet.c holds the two together. */
/* One instruction a line, numbered for the jumps. */
/* clang-format off */
static const struct sock_filter watch_code[] = {
    /* 0 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, SKF_AD_OFF + SKF_AD_PKTTYPE),
    /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PACKET_HOST, 0, 83), /* else drop */
    /* 2 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),
    /* 3 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 0, 44), /* else 48 */
    /* IPv4 */
    /* 4 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 14 + 6),
    /* 5 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, 79, 0), /* a later fragment: drop */
    /* 6 */ BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 14), /* X: the IPv4 header's length */
    /* 7 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 14 + 9),
    /* 8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_ICMP, 0, 30), /* else 39 */
    /* 9 */ BPF_STMT(BPF_LD | BPF_H | BPF_IND, 14), /* type, code */
    /* 10 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0303, 4, 0), /* port unreachable */
    /* 11 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0302, 3, 0), /* protocol unreachable */
    /* 12 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0c00, 2, 0), /* parameter problem (IP options) */
    /* 13 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0c01, 1, 0),
    /* 14 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0c02, 0, 70), /* else drop */
    /* 15 */ BPF_STMT(BPF_LD | BPF_W | BPF_IND, 14 + 8 + 16), /* the quoted destination */
    /* 16 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xff000000),
    /* 17 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x7f000000, 67, 0), /* 127/8: drop */
    /* 18 */ BPF_STMT(BPF_LD | BPF_W | BPF_IND, 14 + 8 + 12), /* the quoted source */
    /* 19 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xff000000),
    /* 20 */ BPF_STMT(BPF_ST, 0), /* M[0]: its first byte */
    /* 21 */ BPF_STMT(BPF_LD | BPF_B | BPF_IND, 14 + 8 + 9), /* the quoted protocol */
    /* 22 */ BPF_STMT(BPF_ST, 1), /* M[1] */
    /* 23 */ BPF_STMT(BPF_LD | BPF_B | BPF_IND, 14 + 8), /* the quoted version and length */
    /* 24 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x0f),
    /* 25 */ BPF_STMT(BPF_ALU | BPF_LSH | BPF_K, 2),
    /* 26 */ BPF_STMT(BPF_ALU | BPF_ADD | BPF_X, 0),
    /* 27 */ BPF_STMT(BPF_MISC | BPF_TAX, 0), /* X: both headers' lengths */
    /* 28 */ BPF_STMT(BPF_LD | BPF_MEM, 1),
    /* 29 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 5, 0),
    /* 30 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDPLITE, 4, 0),
    /* 31 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_TCP, 0, 54), /* else keep */
    /* 32 */ BPF_STMT(BPF_LD | BPF_B | BPF_IND, 14 + 8 + 13), /* the quoted TCP flags */
    /* 33 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x17),
    /* 34 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x02, 0, 50), /* a SYN, else drop (a reply of the exec's own) */
    /* 35 */ BPF_STMT(BPF_LD | BPF_MEM, 0),
    /* 36 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x7f000000, 0, 49), /* from 127/8: the resolver's?, else keep */
    /* 37 */ BPF_STMT(BPF_LD | BPF_H | BPF_IND, 14 + 8), /* the quoted source port */
    /* 38 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SBX_DENY_DNS_PORT, 46, 47), /* sbxd's resolver: drop, else keep */
    /* 39 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_TCP, 0, 45), /* else drop */
    /* 40 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 14 + 12), /* source */
    /* 41 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xff000000),
    /* 42 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x7f000000, 42, 0), /* 127/8: drop */
    /* 43 */ BPF_STMT(BPF_LD | BPF_B | BPF_IND, 14 + 13), /* TCP flags */
    /* 44 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x17), /* FIN SYN RST ACK */
    /* 45 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x14, 0, 39), /* RST|ACK, else drop */
    /* 46 */ BPF_STMT(BPF_LD | BPF_W | BPF_IND, 14 + 4), /* sequence number */
    /* 47 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 38, 37), /* 0: keep */
    /* IPv6 */
    /* 48 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IPV6, 0, 36), /* else drop */
    /* 49 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 14 + 6), /* next header */
    /* 50 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_ICMPV6, 0, 20), /* else 71 */
    /* 51 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 14 + 40), /* type, code */
    /* 52 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0104, 1, 0), /* port unreachable */
    /* 53 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0401, 0, 31), /* unknown next header, else drop */
    /* 54 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 14 + 40 + 8 + 6), /* the quoted next header */
    /* 55 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_TCP, 0, 3), /* else 59 */
    /* 56 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 14 + 40 + 8 + 40 + 13), /* the quoted TCP flags */
    /* 57 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x17),
    /* 58 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x02, 0, 26), /* a SYN, else drop */
    /* 59 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 14 + 40 + 8 + 24), /* the quoted destination, 4 words */
    /* 60 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 25),
    /* 61 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 14 + 40 + 8 + 28),
    /* 62 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 23),
    /* 63 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 14 + 40 + 8 + 32),
    /* 64 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xffff, 3, 0), /* ::ffff:0:0/96 */
    /* 65 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 20),
    /* 66 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 14 + 40 + 8 + 36),
    /* 67 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 1, 17, 18), /* ::1: drop, else keep */
    /* 68 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 14 + 40 + 8 + 36),
    /* 69 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xff000000),
    /* 70 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x7f000000, 14, 15), /* ::ffff:127/104: drop, else keep */
    /* 71 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_TCP, 0, 13), /* else drop */
    /* 72 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 14 + 8), /* source, 4 words */
    /* 73 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 6),
    /* 74 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 14 + 12),
    /* 75 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 4),
    /* 76 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 14 + 16),
    /* 77 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 2),
    /* 78 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 14 + 20),
    /* 79 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 1, 5, 0), /* ::1: drop */
    /* 80 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 14 + 40 + 13), /* TCP flags */
    /* 81 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x17),
    /* 82 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x14, 0, 2), /* RST|ACK, else drop */
    /* 83 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 14 + 40 + 4), /* sequence number */
    /* 84 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0), /* 0: keep */
    /* 85 */ BPF_STMT(BPF_RET | BPF_K, 0),
    /* 86 */ BPF_STMT(BPF_RET | BPF_K, SBX_DENY_WATCH_SNAP),
};
/* clang-format on */

static const struct sock_fprog watch_prog = {.len = SBX_ARRAY_SIZE(watch_code),
					     .filter = (struct sock_filter *)watch_code};

const struct sock_fprog *sbx_netns_deny_watch_filter(void)
{
	return &watch_prog;
}

int sbx_netns_deny_watch(struct sbx_err *err)
{
	/* Protocol 0: nothing is queued before the filter is on; bind then
	 * starts the capture, filtered from its first packet. */
	_cleanup_close_ int s = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct sockaddr_ll lo = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL)};
	int one = 1, rcvbuf = SBX_DENY_WATCH_RCVBUF;

	if (s < 0)
		return sbx_fail_errno(err, "egress deny: connect watch");
	lo.sll_ifindex = (int)if_nametoindex("lo");
	/* Locked: nobody who ever holds the socket may widen what it sees. */
	if (setsockopt(s, SOL_SOCKET, SO_ATTACH_FILTER, sbx_netns_deny_watch_filter(),
		       sizeof(watch_prog)) < 0 ||
	    setsockopt(s, SOL_SOCKET, SO_LOCK_FILTER, &one, sizeof(one)) < 0 ||
	    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) < 0)
		return sbx_fail_errno(err, "egress deny: connect watch: filter");
	if (!lo.sll_ifindex || bind(s, (struct sockaddr *)&lo, sizeof(lo)) < 0)
		return sbx_fail_errno(err, "egress deny: connect watch: bind to lo");
	return sbx_steal_fd(s);
}

int sbx_netns_deny_watch_in(int net_ns, int own_ns, bool *stranded, struct sbx_err *err)
{
	*stranded = false;
	if (setns(net_ns, CLONE_NEWNET) < 0)
		return sbx_fail_errno(err,
				      "egress deny: connect watch: joining the exec's network");
	int s = sbx_netns_deny_watch(err);
	if (setns(own_ns, CLONE_NEWNET) < 0) {
		*stranded = true;
		if (s >= 0)
			close(s);
		return sbx_fail_errno(err, "egress deny: connect watch: back to our own network");
	}
	return s;
}
