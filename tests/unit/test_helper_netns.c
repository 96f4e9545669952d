/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's network namespace under egress deny (helper/netns.c), made
 * for real in a user and network namespace of the test's own: every
 * address is routed to the namespace's loopback, a connect is refused at
 * once, and the connect watch's kernel filter passes the refusals of
 * attempts (a RST, a port unreachable) and nothing of the namespace's own
 * traffic; on a namespace whose lo has IPv6 disabled (a host booted with
 * disable_ipv6=1 copies that into every new one) the routes are still
 * made, IPv4 only, and IPv6 connects fail at once, unseen. */
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

int main(void)
{
	char map[64];
	struct sbx_err err;
	int uid = (int)getuid(), gid = (int)getgid(), watch, proto = -1, one = 1, srv;
	struct sockaddr_in any = {.sin_family = AF_INET, .sin_port = htons(8080)};

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
	check(drain(watch, &proto) == 0, "neither is an attempt to the watch");
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
