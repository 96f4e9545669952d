/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of server/egress/egress_addr.c: every range of egress_addr.h at
 * its edges (the first and last address inside, the neighbours outside),
 * the IPv6 forms that carry an IPv4 address, and what allow_private opens. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "egress_addr.h"
#include "util.h"

#define PUB  EGRESS_ADDR_PUBLIC
#define PRIV EGRESS_ADDR_PRIVATE
#define NEV  EGRESS_ADDR_NEVER

struct addr_case {
	const char *addr;
	enum egress_addr_class cls;
	const char *what;
};

static const struct addr_case cases[] = {
    /* 0/8, 0.0.0.0 itself never (Linux connects it to the local host). */
    {"0.0.0.0", NEV, "unspecified"},
    {"0.0.0.1", PRIV, "this network"},
    {"0.255.255.255", PRIV, "this network"},
    {"1.0.0.0", PUB, "public"},
    /* 10/8 */
    {"9.255.255.255", PUB, "public"},
    {"10.0.0.0", PRIV, "private"},
    {"10.255.255.255", PRIV, "private"},
    {"11.0.0.0", PUB, "public"},
    /* 100.64/10 */
    {"100.63.255.255", PUB, "public"},
    {"100.64.0.0", PRIV, "CGNAT"},
    {"100.127.255.255", PRIV, "CGNAT"},
    {"100.128.0.0", PUB, "public"},
    /* 127/8 */
    {"126.255.255.255", PUB, "public"},
    {"127.0.0.0", PRIV, "loopback"},
    {"127.0.0.1", PRIV, "loopback"},
    {"127.255.255.255", PRIV, "loopback"},
    {"128.0.0.0", PUB, "public"},
    /* 169.254/16 */
    {"169.253.255.255", PUB, "public"},
    {"169.254.0.0", PRIV, "link-local"},
    {"169.254.169.254", PRIV, "link-local"},
    {"169.254.255.255", PRIV, "link-local"},
    {"169.255.0.0", PUB, "public"},
    /* 172.16/12 */
    {"172.15.255.255", PUB, "public"},
    {"172.16.0.0", PRIV, "private"},
    {"172.31.255.255", PRIV, "private"},
    {"172.32.0.0", PUB, "public"},
    /* 192.0.0/24 */
    {"191.255.255.255", PUB, "public"},
    {"192.0.0.0", PRIV, "IETF protocol assignments"},
    {"192.0.0.255", PRIV, "IETF protocol assignments"},
    {"192.0.1.0", PUB, "public"},
    /* 192.0.2/24 */
    {"192.0.1.255", PUB, "public"},
    {"192.0.2.0", PRIV, "documentation"},
    {"192.0.2.255", PRIV, "documentation"},
    {"192.0.3.0", PUB, "public"},
    /* 192.168/16 */
    {"192.167.255.255", PUB, "public"},
    {"192.168.0.0", PRIV, "private"},
    {"192.168.255.255", PRIV, "private"},
    {"192.169.0.0", PUB, "public"},
    /* 198.18/15 */
    {"198.17.255.255", PUB, "public"},
    {"198.18.0.0", PRIV, "benchmarking"},
    {"198.19.255.255", PRIV, "benchmarking"},
    {"198.20.0.0", PUB, "public"},
    /* 198.51.100/24 */
    {"198.51.99.255", PUB, "public"},
    {"198.51.100.0", PRIV, "documentation"},
    {"198.51.100.255", PRIV, "documentation"},
    {"198.51.101.0", PUB, "public"},
    /* 203.0.113/24 */
    {"203.0.112.255", PUB, "public"},
    {"203.0.113.0", PRIV, "documentation"},
    {"203.0.113.255", PRIV, "documentation"},
    {"203.0.114.0", PUB, "public"},
    /* 224/4, 240/4, broadcast */
    {"223.255.255.255", PUB, "public"},
    {"224.0.0.0", NEV, "multicast"},
    {"239.255.255.255", NEV, "multicast"},
    {"240.0.0.0", PRIV, "reserved"},
    {"255.255.255.254", PRIV, "reserved"},
    {"255.255.255.255", NEV, "broadcast"},
    /* Public ones. */
    {"8.8.8.8", PUB, "public"},
    {"1.1.1.1", PUB, "public"},
    {"192.88.99.1", PUB, "public"},

    /* IPv6 of its own. */
    {"::", NEV, "unspecified"},
    {"::1", PRIV, "loopback"},
    {"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", PUB, "public"},
    {"fc00::", PRIV, "unique local"},
    {"fd00::1", PRIV, "unique local"},
    {"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", PRIV, "unique local"},
    {"fe00::", PUB, "public"},
    {"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", PUB, "public"},
    {"fe80::", PRIV, "link-local"},
    {"fe80::1", PRIV, "link-local"},
    {"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", PRIV, "link-local"},
    {"fec0::", PRIV, "site-local"},
    {"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", PRIV, "site-local"},
    {"ff00::", NEV, "multicast"},
    {"ff02::1", NEV, "multicast"},
    {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", NEV, "multicast"},
    {"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", PUB, "public"},
    {"2001:db8::", PRIV, "documentation"},
    {"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", PRIV, "documentation"},
    {"2001:db9::", PUB, "public"},
    {"100::", PRIV, "discard-only"},
    {"100::ffff:ffff:ffff:ffff", PRIV, "discard-only"},
    {"100:0:0:1::", PUB, "public"},
    {"ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", PUB, "public"},
    /* Teredo: where it lands cannot be told. */
    {"2001::", NEV, "Teredo"},
    {"2001:0:4136:e378:8000:63bf:3fff:fdd2", NEV, "Teredo"},
    {"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", NEV, "Teredo"},
    {"2001:1::", PUB, "public"},
    {"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", PUB, "public"},
    {"2606:4700::1111", PUB, "public"},
    {"2a00:1450:4001:80b::200e", PUB, "public"},

    /* IPv4-mapped. */
    {"::ffff:127.0.0.1", PRIV, "IPv4-mapped loopback"},
    {"::ffff:8.8.8.8", PUB, "IPv4-mapped public"},
    {"::ffff:169.254.169.254", PRIV, "IPv4-mapped link-local"},
    {"::ffff:10.1.2.3", PRIV, "IPv4-mapped private"},
    {"::ffff:0.0.0.0", NEV, "IPv4-mapped unspecified"},
    {"::ffff:255.255.255.255", NEV, "IPv4-mapped broadcast"},
    {"::ffff:224.0.0.1", NEV, "IPv4-mapped multicast"},
    {"::fffe:7f00:1", PUB, "public"}, /* not the mapped prefix: ::/96 is 0s */
    {"::1:ffff:7f00:1", PUB, "public"},
    /* IPv4-translated (SIIT). */
    {"::ffff:0:127.0.0.1", PRIV, "IPv4-translated loopback"},
    {"::ffff:0:8.8.8.8", PUB, "IPv4-translated public"},
    /* IPv4-compatible. */
    {"::127.0.0.1", PRIV, "IPv4-compatible loopback"},
    {"::0.0.0.2", PRIV, "IPv4-compatible this network"},
    {"::8.8.8.8", PUB, "IPv4-compatible public"},
    {"::1:0:0", PUB, "public"},
    /* NAT64. */
    {"64:ff9b::a9fe:a9fe", PRIV, "NAT64 link-local"},
    {"64:ff9b::127.0.0.1", PRIV, "NAT64 loopback"},
    {"64:ff9b::8.8.8.8", PUB, "NAT64 public"},
    {"64:ff9b::ffff:ffff", NEV, "NAT64 broadcast"},
    {"64:ff9b:0:0:0:1::", PUB, "public"}, /* outside the /96 */
    {"64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", PUB, "public"},
    {"64:ff9b:1::", NEV, "local-use NAT64"},
    {"64:ff9b:1:ffff:ffff:ffff:7f00:1", NEV, "local-use NAT64"},
    {"64:ff9b:2::", PUB, "public"},
    /* 6to4: the IPv4 address is bits 16..47. */
    {"2002:7f00:1::", PRIV, "6to4 loopback"},
    {"2002:a9fe:a9fe::1", PRIV, "6to4 link-local"},
    {"2002:808:808::1", PUB, "6to4 public"},
    {"2002:c0a8:101:ffff:ffff:ffff:ffff:ffff", PRIV, "6to4 private"},
    {"2002::", NEV, "6to4 unspecified"},
    {"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", PUB, "public"},
    {"2003::", PUB, "public"},
};

static bool to_sockaddr(const char *text, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons(443);
		return true;
	}
	if (inet_pton(AF_INET6, text, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(443);
		return true;
	}
	return false;
}

static const char *class_name(enum egress_addr_class c)
{
	return c == PUB ? "public" : c == PRIV ? "private" : "never";
}

int main(void)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
		const struct addr_case *c = &cases[i];
		struct sockaddr_storage ss;
		const char *what = NULL;

		if (!check(to_sockaddr(c->addr, &ss), "%s parses", c->addr))
			continue;
		enum egress_addr_class got = egress_addr_classify((struct sockaddr *)&ss, &what);
		if (!check(got == c->cls && what && strcmp(what, c->what) == 0, "%s: %s \"%s\"",
			   c->addr, class_name(c->cls), c->what))
			printf("#   got: %s \"%s\"\n", class_name(got), what ? what : "(null)");

		/* allowed() follows the class: private opens with allow_private,
		 * never stays shut. */
		const char *w1 = NULL, *w2 = NULL;
		bool shut = egress_addr_allowed((struct sockaddr *)&ss, false, &w1);
		bool open = egress_addr_allowed((struct sockaddr *)&ss, true, &w2);
		check(shut == (c->cls == PUB) && open == (c->cls != NEV) && w1 && w2 &&
			  strcmp(w1, c->what) == 0 && strcmp(w2, c->what) == 0,
		      "%s: allowed %s without allow_private, %s with it", c->addr,
		      c->cls == PUB ? "yes" : "no", c->cls != NEV ? "yes" : "no");
	}

	/* Not IP: never. */
	struct sockaddr_storage ss = {.ss_family = AF_UNIX};
	const char *what = NULL;
	check(egress_addr_classify((struct sockaddr *)&ss, &what) == NEV && what,
	      "AF_UNIX is never");
	check(!egress_addr_allowed((struct sockaddr *)&ss, true, &what), "AF_UNIX not allowed");
	/* The port plays no part. */
	to_sockaddr("8.8.8.8", &ss);
	((struct sockaddr_in *)&ss)->sin_port = 0;
	check(egress_addr_classify((struct sockaddr *)&ss, &what) == PUB, "port 0 changes nothing");
	return check_done();
}
