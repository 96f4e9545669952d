/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's network namespace under egress deny (helper/netns.c), made
 * for real in a user and network namespace of the test's own: every
 * address is routed to the namespace's loopback, a connect is refused at
 * once, and the connect watch's kernel filter passes the refusals of
 * attempts (a RST, a port unreachable) and nothing of the namespace's own
 * traffic; on a namespace whose lo has IPv6 disabled (a host booted with
 * disable_ipv6=1 copies that into every new one) the routes are still
 * made, IPv4 only, and IPv6 connects fail at once, unseen. The filter is
 * also run on packets made here, branch by branch. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>

#include "check.h"
#include "egress_port.h"
#include "netns.h"

static bool write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	bool ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);

	if (fd >= 0)
		close(fd);
	return ok;
}

/* A fresh network namespace with lo up and the per-namespace sysctls. */
static bool fresh_netns(bool ipv6_off)
{
	struct sbx_err err;
	int sys;
	bool ok;

	if (unshare(CLONE_NEWNET) < 0)
		return false;
	if (ipv6_off && !write_file("/proc/sys/net/ipv6/conf/lo/disable_ipv6", "1"))
		return false;
	sys = open("/proc/sys", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ok = sys >= 0 && sbx_netns_setup(sys, &err) == 0;
	if (sys >= 0)
		close(sys);
	return ok;
}

/* connect()'s errno to family's addr:port, 0 if it connected. */
static int connect_errno(int family, const char *addr, int port, int type)
{
	struct sockaddr_storage ss = {0};
	socklen_t len;
	int s = socket(family, type | SOCK_CLOEXEC, 0), e;

	if (family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		inet_pton(AF_INET, addr, &a->sin_addr);
		len = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		inet_pton(AF_INET6, addr, &a->sin6_addr);
		len = sizeof(*a);
	}
	e = connect(s, (struct sockaddr *)&ss, len) < 0 ? errno : 0;
	if (!e && type == SOCK_DGRAM) {
		char b[8];
		/* A datagram: its refusal comes back as a port unreachable. */
		e = send(s, "?", 1, 0) < 0 ? errno : 0;
		if (!e && recv(s, b, sizeof(b), MSG_DONTWAIT) < 0 && errno != EAGAIN)
			e = errno;
		else if (!e)
			e = EAGAIN;
	}
	close(s);
	return e;
}

/* What the watch holds now: packets, with the IP protocol of the last. */
static int drain(int watch, int *proto)
{
	unsigned char pkt[SBX_DENY_WATCH_SNAP];
	struct sockaddr_ll from;
	socklen_t flen;
	int n = 0;

	poll(&(struct pollfd){.fd = watch, .events = POLLIN}, 1, 200);
	for (;;) {
		flen = sizeof(from);
		ssize_t got = recvfrom(watch, pkt, sizeof(pkt), MSG_DONTWAIT,
				       (struct sockaddr *)&from, &flen);
		if (got < 0)
			return n;
		n++;
		if (got > 23)
			*proto = pkt[12] == 0x86 ? pkt[20] : pkt[23];
	}
}

/* A frame as lo carries it: 14 bytes of link header (type at 12), then
 * the IP packet of the test's own making. */
struct frame {
	unsigned char b[160];
	size_t len;
};

/* What follows an IP header. */
struct body {
	unsigned char b[64];
	size_t len;
};

static void put16(unsigned char *p, unsigned v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}

/* An IPv4 packet of protocol proto from src, its header ihl words long
 * (options zero), then body. */
static struct frame v4(unsigned ihl, unsigned char proto, const char *src, struct body body)
{
	struct frame f = {.len = 14 + ihl * 4 + body.len};

	put16(f.b + 12, ETH_P_IP);
	f.b[14] = (unsigned char)(0x40 | ihl);
	f.b[14 + 9] = proto;
	inet_pton(AF_INET, src, f.b + 14 + 12);
	memcpy(f.b + 14 + ihl * 4, body.b, body.len);
	return f;
}

/* An IPv6 packet of next header nh from src, then body. */
static struct frame v6(unsigned char nh, const char *src, struct body body)
{
	struct frame f = {.len = 14 + 40 + body.len};

	put16(f.b + 12, ETH_P_IPV6);
	f.b[14] = 0x60;
	f.b[14 + 6] = nh;
	inet_pton(AF_INET6, src, f.b + 14 + 8);
	memcpy(f.b + 14 + 40, body.b, body.len);
	return f;
}

/* A TCP header with these flags and sequence number. */
static struct body tcp(unsigned char flags, unsigned char seq)
{
	struct body t = {.len = 20};

	t.b[7] = seq;
	t.b[13] = flags;
	return t;
}

/* An ICMP error of type and code (ICMPv6 when v6) quoting a UDP datagram
 * to dst:123. */
static struct body refusal(bool is_v6, unsigned type, unsigned code, const char *dst)
{
	struct body e = {.b = {(unsigned char)type, (unsigned char)code}};

	if (is_v6) {
		e.b[8] = 0x60;
		e.b[8 + 6] = IPPROTO_UDP;
		inet_pton(AF_INET6, dst, e.b + 8 + 24);
		put16(e.b + 8 + 40 + 2, 123);
		e.len = 8 + 40 + 8;
	} else {
		e.b[8] = 0x45;
		e.b[8 + 9] = IPPROTO_UDP;
		inet_pton(AF_INET, dst, e.b + 8 + 16);
		put16(e.b + 8 + 20 + 2, 123);
		e.len = 8 + 20 + 8;
	}
	return e;
}

/* body cut to len bytes. */
static struct body cut(struct body body, size_t len)
{
	body.len = len;
	return body;
}

/* Whether the watch's filter keeps f: sent through a datagram socket pair
 * whose receiving end has the program attached (the kernel runs a socket
 * filter on a unix datagram as on a packet; what it drops never arrives). */
static bool kept(int pair[2], struct frame f)
{
	unsigned char got[sizeof(f.b)];

	if (send(pair[0], f.b, f.len, 0) != (ssize_t)f.len)
		return false;
	return recv(pair[1], got, sizeof(got), MSG_DONTWAIT) > 0;
}

/* The filter on packets made here, each of its branches: what a real
 * namespace cannot make on demand (IP options, cut packets, a v4-mapped
 * destination in an ICMPv6 quote, a later fragment). */
static void filter_on_made_packets(void)
{
	const struct sock_fprog *prog = sbx_netns_deny_watch_filter();
	struct frame f;
	int pair[2];

	if (!check(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair) == 0 &&
		       setsockopt(pair[1], SOL_SOCKET, SO_ATTACH_FILTER, prog, sizeof(*prog)) == 0,
		   "the watch's filter on a socket pair"))
		return;
	check(kept(pair, v4(5, IPPROTO_TCP, "192.0.2.1", tcp(0x14, 0))),
	      "kept: a RST|ACK with sequence 0 from an address");
	check(!kept(pair, v4(5, IPPROTO_TCP, "127.0.0.1", tcp(0x14, 0))),
	      "dropped: the same from 127.0.0.1");
	check(!kept(pair, v4(5, IPPROTO_TCP, "192.0.2.1", tcp(0x14, 7))),
	      "dropped: a RST|ACK of a connection (sequence not 0)");
	check(!kept(pair, v4(5, IPPROTO_TCP, "192.0.2.1", tcp(0x12, 0))), "dropped: a SYN|ACK");
	check(kept(pair, v4(5, IPPROTO_ICMP, "198.51.100.7", refusal(false, 3, 3, "198.51.100.7"))),
	      "kept: a port unreachable quoting a datagram to an address");
	check(kept(pair, v4(5, IPPROTO_ICMP, "198.51.100.7", refusal(false, 3, 2, "198.51.100.7"))),
	      "kept: a protocol unreachable quoting one to an address");
	check(!kept(pair, v4(5, IPPROTO_ICMP, "127.0.0.5", refusal(false, 3, 3, "127.0.0.5"))),
	      "dropped: a port unreachable quoting a datagram to 127.0.0.5");
	check(!kept(pair, v4(5, IPPROTO_ICMP, "198.51.100.7", refusal(false, 3, 2, "127.1.2.3"))),
	      "dropped: a protocol unreachable quoting one to 127.1.2.3, whatever its source");
	check(!kept(pair, v4(7, IPPROTO_ICMP, "127.0.0.1", refusal(false, 3, 3, "127.0.0.1"))),
	      "dropped: the quote to loopback behind 8 bytes of IP options");
	check(kept(pair, v4(7, IPPROTO_ICMP, "192.0.2.9", refusal(false, 3, 3, "192.0.2.9"))),
	      "kept: the quote to an address behind 8 bytes of IP options");
	check(!kept(pair, v4(5, IPPROTO_ICMP, "192.0.2.9",
			     cut(refusal(false, 3, 3, "192.0.2.9"), 8 + 18))),
	      "dropped: a port unreachable cut inside the quoted destination");
	check(!kept(pair, v4(5, IPPROTO_ICMP, "192.0.2.9", refusal(false, 0, 0, "192.0.2.9"))),
	      "dropped: an echo reply");
	f = v4(5, IPPROTO_TCP, "192.0.2.1", tcp(0x14, 0));
	f.b[14 + 7] = 1; /* fragment offset: 8 bytes */
	check(!kept(pair, f), "dropped: a later fragment");
	check(!kept(pair, v4(5, IPPROTO_UDP, "192.0.2.1", tcp(0, 0))), "dropped: UDP");

	check(kept(pair, v6(IPPROTO_TCP, "2001:db8::1", tcp(0x14, 0))),
	      "kept: an IPv6 RST|ACK from an address");
	check(!kept(pair, v6(IPPROTO_TCP, "::1", tcp(0x14, 0))), "dropped: the same from ::1");
	check(kept(pair, v6(IPPROTO_ICMPV6, "2001:db8::7", refusal(true, 1, 4, "2001:db8::7"))),
	      "kept: an ICMPv6 port unreachable quoting a datagram to an address");
	check(kept(pair, v6(IPPROTO_ICMPV6, "::2", refusal(true, 1, 4, "::2"))),
	      "kept: the same quoting one to ::2");
	check(
	    kept(pair, v6(IPPROTO_ICMPV6, "2001:db8::7", refusal(true, 1, 4, "::ffff:192.0.2.1"))),
	    "kept: the same quoting one to ::ffff:192.0.2.1");
	check(!kept(pair, v6(IPPROTO_ICMPV6, "::1", refusal(true, 1, 4, "::1"))),
	      "dropped: an ICMPv6 port unreachable quoting a datagram to ::1");
	check(
	    !kept(pair, v6(IPPROTO_ICMPV6, "2001:db8::7", refusal(true, 1, 4, "::ffff:127.0.0.9"))),
	    "dropped: the same quoting one to ::ffff:127.0.0.9");
	check(!kept(pair, v6(IPPROTO_ICMPV6, "::1", refusal(true, 4, 1, "::1"))),
	      "dropped: an unknown next header quoting a packet to ::1");
	check(kept(pair, v6(IPPROTO_ICMPV6, "2001:db8::7", refusal(true, 4, 1, "2001:db8::7"))),
	      "kept: an unknown next header quoting one to an address");
	check(!kept(pair, v6(IPPROTO_ICMPV6, "2001:db8::7",
			     cut(refusal(true, 1, 4, "2001:db8::7"), 8 + 26))),
	      "dropped: an ICMPv6 port unreachable cut inside the quoted destination");
	close(pair[0]);
	close(pair[1]);
}

int main(void)
{
	char map[64];
	struct sbx_err err;
	int uid = (int)getuid(), gid = (int)getgid(), watch, proto = -1, one = 1, srv;
	struct sockaddr_in any = {.sin_family = AF_INET, .sin_port = htons(8080)};

	filter_on_made_packets();
	if (!check(unshare(CLONE_NEWUSER) == 0, "a user namespace of our own"))
		return check_done();
	snprintf(map, sizeof(map), "0 %d 1", uid);
	write_file("/proc/self/setgroups", "deny");
	check(write_file("/proc/self/uid_map", map), "uid map");
	snprintf(map, sizeof(map), "0 %d 1", gid);
	check(write_file("/proc/self/gid_map", map), "gid map");

	check(fresh_netns(false), "a network namespace with lo up");
	check(sbx_netns_deny_routes(&err) == 0, "every address routed to lo");
	watch = sbx_netns_deny_watch(&err);
	check(watch >= 0, "the connect watch: %s", watch < 0 ? err.msg : "made");
	check(connect_errno(AF_INET, "192.0.2.1", 443, SOCK_STREAM) == ECONNREFUSED,
	      "a TCP connect to an address is refused at once");
	check(drain(watch, &proto) == 1 && proto == IPPROTO_TCP, "the watch saw its RST");
	check(connect_errno(AF_INET, "198.51.100.7", 123, SOCK_DGRAM) != EAGAIN,
	      "a datagram to an address is refused");
	check(drain(watch, &proto) == 1 && proto == IPPROTO_ICMP,
	      "the watch saw its port unreachable");
	check(connect_errno(AF_INET6, "2001:db8::1", 80, SOCK_STREAM) == ECONNREFUSED,
	      "an IPv6 connect is refused at once");
	check(drain(watch, &proto) == 1 && proto == IPPROTO_TCP, "the watch saw its RST");
	/* The namespace's own: a listener answers every address, unseen. */
	srv = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	check(bind(srv, (struct sockaddr *)&any, sizeof(any)) == 0 && listen(srv, 4) == 0,
	      "a listener of the namespace's own on 0.0.0.0:8080");
	check(connect_errno(AF_INET, "192.0.2.1", 8080, SOCK_STREAM) == 0,
	      "answers a connect to 192.0.2.1:8080");
	check(connect_errno(AF_INET, "127.0.0.1", 9, SOCK_STREAM) == ECONNREFUSED,
	      "a closed loopback port refuses");
	check(connect_errno(AF_INET, "127.0.0.1", 9, SOCK_DGRAM) != EAGAIN,
	      "a datagram to a closed loopback port is refused");
	check(connect_errno(AF_INET6, "::1", 9, SOCK_DGRAM) != EAGAIN,
	      "a datagram to a closed port of ::1 is refused");
	check(drain(watch, &proto) == 0, "none of them is an attempt to the watch");
	check(connect_errno(AF_INET6, "2001:db8::7", 123, SOCK_DGRAM) != EAGAIN,
	      "an IPv6 datagram to an address is refused");
	check(drain(watch, &proto) == 1 && proto == IPPROTO_ICMPV6,
	      "the watch saw its ICMPv6 port unreachable");
	close(srv);
	close(watch);

	check(fresh_netns(true), "a network namespace whose lo has IPv6 disabled");
	check(sbx_netns_deny_routes(&err) == 0, "routes made all the same (IPv4 only)");
	check(connect_errno(AF_INET, "192.0.2.1", 443, SOCK_STREAM) == ECONNREFUSED,
	      "an IPv4 connect is refused at once");
	{
		int e = connect_errno(AF_INET6, "2001:db8::1", 80, SOCK_STREAM);
		check(e == ENETUNREACH || e == EADDRNOTAVAIL || e == EACCES,
		      "an IPv6 connect fails at once: %s", strerror(e));
	}
	return check_done();
}
