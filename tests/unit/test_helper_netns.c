/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's network namespace under egress deny (helper/netns.c), made
 * for real in a user and network namespace of the test's own: every
 * address is routed to the namespace's loopback, a connect is refused at
 * once, and the connect watch's kernel filter passes the refusals of
 * attempts (a RST, a port unreachable), which sbxd's reading
 * (server/runs/deny_packet.c) names, and nothing of the namespace's own
 * traffic; on a namespace whose lo has IPv6 disabled (a host booted with
 * disable_ipv6=1 copies that into every new one) the routes are still
 * made, IPv4 only, and IPv6 connects fail at once, unseen. The filter
 * against sbxd's reading, packet by packet: test_deny_packet.c. */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>

#include "check.h"
#include "deny_packet.h"
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

/* 40 bytes of IPv4 options (record route, 9 slots): the kernel copies a
 * datagram's options into the port unreachable it gets, and quotes them. */
static const unsigned char record_route[40] = {7, 39, 4};
/* Record route with one slot and 5 bytes to spare: the kernel takes it
 * from the socket, the receiving side refuses it with a parameter problem
 * (review 24: uncounted before). */
static const unsigned char record_route_bad[8] = {7, 8, 4};
/* Record route, 3 slots: a SYN passes with it, the RST or SYN|ACK that
 * echoes it (the slots filled) is refused (review 25). */
static const unsigned char record_route_16[16] = {7, 16, 4};

/* connect()'s errno to family's addr:port, 0 if it connected, EAGAIN for a
 * datagram with no refusal and EINPROGRESS for a connect with no answer
 * in 50 ms; from a socket bound to from:from_port first when from is
 * given, with the IPv4 options opts[0..optlen) when given. */
static int connect_from(int family, const char *addr, int port, int type, const char *from,
			int from_port, const unsigned char *opts, size_t optlen)
{
	struct sockaddr_storage ss = {0};
	struct timeval wait = {.tv_usec = 50000};
	socklen_t len;
	int s = socket(family, type | SOCK_CLOEXEC, 0), e;

	if (s < 0)
		return errno;
	if (opts && setsockopt(s, IPPROTO_IP, IP_OPTIONS, opts, (socklen_t)optlen)) {
		e = errno;
		close(s);
		return e;
	}
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof(wait));
	if (from) {
		struct sockaddr_in b = {.sin_family = AF_INET,
					.sin_port = htons((uint16_t)from_port)};
		int one = 1;

		inet_pton(AF_INET, from, &b.sin_addr);
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(s, (struct sockaddr *)&b, sizeof(b)) < 0) {
			e = errno;
			close(s);
			return e;
		}
	}

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

static int connect_errno(int family, const char *addr, int port, int type)
{
	return connect_from(family, addr, port, type, NULL, 0, NULL, 0);
}

/* What the watch holds now: packets, each read as sbxd reads it, the
 * names of those it counts joined by spaces into names ("-" for a packet
 * it does not count). */
static int drain(int watch, int wait_ms, char *names, size_t size)
{
	unsigned char pkt[SBX_DENY_WATCH_SNAP];
	struct sockaddr_ll from;
	socklen_t flen;
	int n = 0;

	names[0] = 0;
	poll(&(struct pollfd){.fd = watch, .events = POLLIN}, 1, wait_ms);
	for (;;) {
		char name[256];
		flen = sizeof(from);
		ssize_t got = recvfrom(watch, pkt, sizeof(pkt), MSG_DONTWAIT,
				       (struct sockaddr *)&from, &flen);
		if (got < 0)
			return n;
		if (!deny_packet_name(pkt, (size_t)got, name, sizeof(name)))
			snprintf(name, sizeof(name), "-");
		snprintf(names + strlen(names), size - strlen(names), "%s%s", n ? " " : "", name);
		n++;
	}
}

/* Whether the watch holds exactly want (drain's names). */
static bool holds(int watch, const char *want)
{
	char names[1024];

	drain(watch, 200, names, sizeof(names));
	if (strcmp(names, want))
		fprintf(stderr, "# the watch held \"%s\", not \"%s\"\n", names, want);
	return !strcmp(names, want);
}

/* A nonblocking connect to 192.0.2.1:443 with options opts: errno of
 * the setsockopt (EINVAL, EPERM: not a layout the socket takes), else 0.
 * The SYN, the RST or parameter problem it gets and any parameter problem
 * of that RST come and go on lo before connect returns. */
static int syn_with(const unsigned char *opts, size_t optlen)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(443)};
	int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), e = 0;

	if (s < 0)
		return errno;
	inet_pton(AF_INET, "192.0.2.1", &a.sin_addr);
	if (setsockopt(s, IPPROTO_IP, IP_OPTIONS, opts, (socklen_t)optlen))
		e = errno;
	else
		(void)connect(s, (struct sockaddr *)&a, sizeof(a));
	close(s);
	return e;
}

/* What every_option_layout found, sent back by the child that tried. */
struct layouts {
	unsigned udp, udp_refused, udp_unnamed, tcp, tcp_named, tcp_wrong, retried;
};

/* Layouts tried again in all, at most: a fault of the filter or of sbxd's
 * reading fails hundreds of layouts, each every time, and must fail the
 * test in seconds, not retry for minutes. */
#define RETRIES_MAX 20

/* Drains the watch until it stays empty for 300 ms (at most 5 s). */
static void flush(int watch)
{
	char names[1024];

	for (int i = 0; i < 16 && drain(watch, 300, names, sizeof(names)); i++)
		;
}

/* Whether to make try t of a layout whose last try was judged ok: the
 * first always; another, after the watch was quiet, while the last was
 * wrong, at most three in all and RETRIES_MAX in a run. */
static bool next_try(int watch, struct layouts *n, int t, bool ok)
{
	if (!t)
		return true;
	if (ok || t >= 3 || n->retried >= RETRIES_MAX)
		return false;
	n->retried++;
	flush(watch);
	return true;
}

/* One layout on a datagram to 203.0.113.5:443: false when a refusal came
 * back at once and the watch then held anything but its one name (*e: the
 * send's errno, EAGAIN when none came, EINVAL or EPERM when the socket did
 * not take the options). */
static bool udp_layout_named(int watch, const unsigned char *opts, size_t optlen, int *e,
			     char *names, size_t size)
{
	*e = connect_from(AF_INET, "203.0.113.5", 443, SOCK_DGRAM, NULL, 0, opts, optlen);
	names[0] = 0;
	if (*e == EINVAL || *e == EPERM)
		return true;
	drain(watch, 0, names, size);
	if (*e == EAGAIN) /* dropped unanswered */
		return true;
	if (!names[0])
		drain(watch, 50, names, size);
	return !strcmp(names, "203.0.113.5:443/udp");
}

/* What the watch holds after a connect to 192.0.2.1:443: false when a name
 * other than that (*named: it held one; names: what it held). */
static bool tcp_layout_named(int watch, bool *named, char *names, size_t size)
{
	char words[1024];
	bool right = true;

	drain(watch, 0, names, size);
	*named = names[0] != 0;
	snprintf(words, sizeof(words), "%s", names);
	for (char *w = strtok(words, " "); w; w = strtok(NULL, " "))
		right = right && !strcmp(w, "192.0.2.1:443");
	return right;
}

/* Every layout of the IPv4 options an exec's socket may set (record route
 * and timestamp: each length, pointer and flag; tried with no capability,
 * as an exec has none), on a datagram to 203.0.113.5:443 and a connect to
 * 192.0.2.1:443. A datagram that fails at once (a refusal came back: the
 * socket's error) is named by sbxd's reading, once, whatever refusal the
 * options made the kernel send (review 24: a parameter problem went
 * uncounted). A connect is named as 192.0.2.1:443 or not at all: the RST
 * of the exec's own kernel echoes the options, and a parameter problem of
 * that RST was counted under the client's own port (review 25). A layout
 * the receiving side drops unanswered is only counted.
 *
 * A layout judged wrong is tried again, up to twice, after the watch has
 * been quiet for 300 ms: under TCG the kernel sometimes leaves loopback's
 * packets to ksoftirqd for a while, so a refusal arrives after the next
 * layouts were sent (its sender saw none: counted unanswered) and a later
 * drain holds the names of twenty layouts (ci39, Debian 12's 6.1 in the
 * VM). A fault of the filter or of sbxd's reading repeats; a late packet
 * does not. RETRIES_MAX bounds the retries of a whole run. */
static void every_option_layout(int watch, struct layouts *n)
{
	char names[1024];

	for (unsigned type = 7; type <= 68; type += 61)
		for (unsigned len = 3; len <= 40; len++)
			for (unsigned ptr = 1; ptr <= len + 2; ptr++)
				for (unsigned flags = 0; flags < (type == 68 ? 16u : 1u); flags++) {
					unsigned char opts[40] = {
					    (unsigned char)type, (unsigned char)len,
					    (unsigned char)ptr, (unsigned char)flags};
					size_t optlen = (len + 3) & ~3u;
					bool ok = false, named = false;
					int e = 0;

					for (int t = 0; next_try(watch, n, t, ok); t++)
						ok = udp_layout_named(watch, opts, optlen, &e,
								      names, sizeof(names));
					if (e != EINVAL && e != EPERM) {
						n->udp++;
						if (e != EAGAIN)
							n->udp_refused++;
						if (!ok && n->udp_unnamed++ < 3)
							fprintf(stderr,
								"# options %u/%u/%u/%u: %s, the "
								"watch held \"%s\"\n",
								type, len, ptr, flags, strerror(e),
								names);
					}
					int se = 0;

					ok = false;
					for (int t = 0; next_try(watch, n, t, ok); t++) {
						/* A layout the socket does not take. */
						if ((se = syn_with(opts, optlen)))
							break;
						ok = tcp_layout_named(watch, &named, names,
								      sizeof(names));
					}
					if (se)
						continue;
					n->tcp++;
					if (named)
						n->tcp_named++;
					if (!ok && n->tcp_wrong++ < 3)
						fprintf(stderr,
							"# options %u/%u/%u/%u on a connect: the "
							"watch held %s\n",
							type, len, ptr, flags, names);
				}
}

/* every_option_layout in a child with no capability left (the test has
 * them all in its own user namespace, and CAP_NET_RAW lets a socket take
 * layouts an exec's may not); its counts come back through a pipe. */
static void option_layouts_as_an_exec(int watch)
{
	struct layouts n = {0};
	int p[2];
	pid_t pid;

	if (!check(pipe(p) == 0, "a pipe for the option layouts' counts"))
		return;
	pid = fork();
	if (pid == 0) {
		struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
		struct __user_cap_data_struct none[2] = {0};

		if (syscall(SYS_capset, &h, none) < 0)
			_exit(1);
		every_option_layout(watch, &n);
		_exit(write(p[1], &n, sizeof(n)) == (ssize_t)sizeof(n) ? 0 : 1);
	}
	close(p[1]);
	check(pid > 0 && read(p[0], &n, sizeof(n)) == (ssize_t)sizeof(n),
	      "the counts of a child with no capability");
	close(p[0]);
	waitpid(pid, NULL, 0);
	check(n.udp > 1000 && n.udp_refused > 1000,
	      "%u option layouts on a datagram, %u refused at once", n.udp, n.udp_refused);
	check(n.udp_unnamed == 0, "every one refused is named once (%u not)", n.udp_unnamed);
	check(n.tcp > 1000 && n.tcp_named > 1000, "%u on a connect, %u named", n.tcp, n.tcp_named);
	check(n.tcp_wrong == 0, "each as the address and port tried, nothing else (%u not)",
	      n.tcp_wrong);
	printf("# %u layouts tried again after the watch held names of earlier ones\n", n.retried);
}

int main(void)
{
	char map[64];
	struct sbx_err err;
	int uid = (int)getuid(), gid = (int)getgid(), watch, one = 1, srv, srv6;
	struct sockaddr_in any = {.sin_family = AF_INET, .sin_port = htons(8080)};
	struct sockaddr_in6 any6 = {.sin6_family = AF_INET6, .sin6_port = htons(8080)};

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
	check(holds(watch, "192.0.2.1:443"), "the watch saw its RST, sbxd names it");
	check(connect_errno(AF_INET, "198.51.100.7", 123, SOCK_DGRAM) != EAGAIN,
	      "a datagram to an address is refused");
	check(holds(watch, "198.51.100.7:123/udp"), "the watch saw its port unreachable");
	check(connect_from(AF_INET, "203.0.113.5", 443, SOCK_DGRAM, NULL, 0, record_route,
			   sizeof(record_route)) != EAGAIN,
	      "a datagram with 40 bytes of IP options is refused");
	check(holds(watch, "203.0.113.5:443/udp"),
	      "its refusal, options twice over, is read whole (review 23: cut at 128 bytes)");
	check(connect_from(AF_INET, "192.0.2.1", 444, SOCK_STREAM, NULL, 0, record_route,
			   sizeof(record_route)) == ECONNREFUSED,
	      "a TCP connect with IP options is refused");
	check(holds(watch, "192.0.2.1:444"), "and named");
	/* The SYN's parameter problem comes while connect holds the socket:
	 * a soft error, and connect waits for the next SYN's (1 s on). */
	check(connect_from(AF_INET, "192.0.2.1", 445, SOCK_STREAM, NULL, 0, record_route_bad,
			   sizeof(record_route_bad)) == EINPROGRESS,
	      "a connect with IP options the receiver refuses gets no answer in 50 ms");
	check(holds(watch, "192.0.2.1:445"), "its parameter problem is named");
	/* Options a SYN passes with, but the RST echoing them does not: the
	 * RST is named, its parameter problem (quoting the client's own
	 * port) is not (review 25). */
	check(connect_from(AF_INET, "192.0.2.1", 9999, SOCK_STREAM, NULL, 0, record_route_16,
			   sizeof(record_route_16)) == EINPROGRESS,
	      "a connect whose RST the kernel refuses is not answered in 50 ms");
	check(holds(watch, "192.0.2.1:9999"), "the RST is named, nothing else");
	check(connect_from(AF_INET, "203.0.113.6", 443, SOCK_DGRAM, NULL, 0, record_route_bad,
			   sizeof(record_route_bad)) == EPROTO,
	      "a datagram with them too");
	check(holds(watch, "203.0.113.6:443/udp"), "and named");
	option_layouts_as_an_exec(watch);
	check(connect_errno(AF_INET6, "2001:db8::1", 80, SOCK_STREAM) == ECONNREFUSED,
	      "an IPv6 connect is refused at once");
	check(holds(watch, "[2001:db8::1]:80"), "the watch saw its RST");
	check(connect_errno(AF_INET6, "2001:db8::7", 123, SOCK_DGRAM) != EAGAIN,
	      "an IPv6 datagram to an address is refused");
	check(holds(watch, "[2001:db8::7]:123/udp"), "the watch saw its ICMPv6 port unreachable");
	/* The namespace's own: a listener answers every address, unseen. */
	srv = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	check(bind(srv, (struct sockaddr *)&any, sizeof(any)) == 0 && listen(srv, 4) == 0,
	      "a listener of the namespace's own on 0.0.0.0:8080");
	check(connect_errno(AF_INET, "192.0.2.1", 8080, SOCK_STREAM) == 0,
	      "answers a connect to 192.0.2.1:8080");
	srv6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(srv6, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	check(bind(srv6, (struct sockaddr *)&any6, sizeof(any6)) == 0 && listen(srv6, 4) == 0,
	      "one on [::]:8080");
	check(connect_errno(AF_INET6, "2001:db8::1", 8080, SOCK_STREAM) == 0,
	      "answers a connect to [2001:db8::1]:8080");
	connect_from(AF_INET, "192.0.2.1", 8080, SOCK_STREAM, NULL, 0, record_route_16,
		     sizeof(record_route_16));
	check(holds(watch, ""),
	      "and one whose SYN|ACK the kernel refuses is no attempt (review 25)");
	check(connect_errno(AF_INET, "127.0.0.1", 9, SOCK_STREAM) == ECONNREFUSED &&
		  connect_errno(AF_INET, "127.1.2.3", 9, SOCK_STREAM) == ECONNREFUSED &&
		  connect_errno(AF_INET6, "::1", 9, SOCK_STREAM) == ECONNREFUSED,
	      "closed ports of 127.0.0.1, 127.1.2.3 and ::1 refuse a connect");
	check(connect_errno(AF_INET, "127.0.0.1", 9, SOCK_DGRAM) != EAGAIN &&
		  connect_errno(AF_INET, "127.1.2.3", 9, SOCK_DGRAM) != EAGAIN &&
		  connect_errno(AF_INET6, "::1", 9, SOCK_DGRAM) != EAGAIN,
	      "and a datagram");
	/* What sbxd's resolver sends: from 127.0.0.1:53, here to a client
	 * at an address of the namespace's own that has gone. */
	check(connect_from(AF_INET, "192.0.2.5", 40000, SOCK_DGRAM, "127.0.0.1", 53, NULL, 0) !=
		  EAGAIN,
	      "an answer from 127.0.0.1:53 to a client gone is refused");
	check(holds(watch, ""), "none of them is an attempt to the watch");
	check(connect_from(AF_INET, "192.0.2.5", 40000, SOCK_DGRAM, "127.0.0.1", 5353, NULL, 0) !=
		  EAGAIN,
	      "from 127.0.0.1:5353 too");
	check(holds(watch, "192.0.2.5:40000/udp"), "that one is (only port 53 is the resolver's)");
	close(srv6);
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
