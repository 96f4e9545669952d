/* SPDX-License-Identifier: Apache-2.0 */
/* Address vetting: one table of IPv4 ranges, and IPv6 ranges of their own
 * plus the forms that carry an IPv4 address, which are judged by that
 * address (a NAT64 or 6to4 path reaches it as surely as IPv4 does). */
#include "egress_addr.h"

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util.h"

/* How an IPv4 address reached us, for its name: the same range is
 * "loopback" bare and "NAT64 loopback" through a translator. */
enum v4_form {
	V4_BARE,
	V4_MAPPED,
	V4_COMPATIBLE,
	V4_TRANSLATED,
	V4_NAT64,
	V4_6TO4,
	V4_FORMS,
};

/* Static names for every (range, form) pair: *what must be static. */
#define V4_NAMES(s)                                                                                \
	{                                                                                          \
		s, "IPv4-mapped " s, "IPv4-compatible " s, "IPv4-translated " s, "NAT64 " s,       \
		    "6to4 " s                                                                      \
	}

struct v4_range {
	uint32_t net;
	unsigned prefix;
	enum egress_addr_class cls;
	const char *names[V4_FORMS];
};

/* Most specific first where ranges nest (0.0.0.0 in 0/8, 255.255.255.255
 * in 240/4). */
static const struct v4_range v4_ranges[] = {
    {0x00000000, 32, EGRESS_ADDR_NEVER, V4_NAMES("unspecified")},
    {0xffffffff, 32, EGRESS_ADDR_NEVER, V4_NAMES("broadcast")},
    {0x00000000, 8, EGRESS_ADDR_PRIVATE, V4_NAMES("this network")},
    {0x0a000000, 8, EGRESS_ADDR_PRIVATE, V4_NAMES("private")},
    {0x64400000, 10, EGRESS_ADDR_PRIVATE, V4_NAMES("CGNAT")},
    {0x7f000000, 8, EGRESS_ADDR_PRIVATE, V4_NAMES("loopback")},
    {0xa9fe0000, 16, EGRESS_ADDR_PRIVATE, V4_NAMES("link-local")},
    {0xac100000, 12, EGRESS_ADDR_PRIVATE, V4_NAMES("private")},
    {0xc0000000, 24, EGRESS_ADDR_PRIVATE, V4_NAMES("IETF protocol assignments")},
    {0xc0000200, 24, EGRESS_ADDR_PRIVATE, V4_NAMES("documentation")},
    {0xc0a80000, 16, EGRESS_ADDR_PRIVATE, V4_NAMES("private")},
    {0xc6120000, 15, EGRESS_ADDR_PRIVATE, V4_NAMES("benchmarking")},
    {0xc6336400, 24, EGRESS_ADDR_PRIVATE, V4_NAMES("documentation")},
    {0xcb007100, 24, EGRESS_ADDR_PRIVATE, V4_NAMES("documentation")},
    {0xe0000000, 4, EGRESS_ADDR_NEVER, V4_NAMES("multicast")},
    {0xf0000000, 4, EGRESS_ADDR_PRIVATE, V4_NAMES("reserved")},
};

static const char *const v4_public[V4_FORMS] = V4_NAMES("public");

static bool v4_in(uint32_t a, uint32_t net, unsigned prefix)
{
	uint32_t mask = prefix ? ~(uint32_t)0 << (32 - prefix) : 0;

	return (a & mask) == net;
}

static enum egress_addr_class classify_v4(uint32_t a, enum v4_form form, const char **what)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(v4_ranges); i++) {
		const struct v4_range *r = &v4_ranges[i];

		if (v4_in(a, r->net, r->prefix)) {
			*what = r->names[form];
			return r->cls;
		}
	}
	*what = v4_public[form];
	return EGRESS_ADDR_PUBLIC;
}

static uint32_t be32_at(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Whether the first `bits` bits of a equal those of prefix (bits % 8 == 0
 * or the rest masked). */
static bool v6_in(const uint8_t a[16], const uint8_t prefix[16], unsigned bits)
{
	unsigned whole = bits / 8, rest = bits % 8;

	if (memcmp(a, prefix, whole) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (a[whole] & mask) == (prefix[whole] & mask);
}

struct v6_range {
	uint8_t net[16];
	unsigned prefix;
	enum egress_addr_class cls;
	const char *what;
};

/* The IPv6 ranges that carry no IPv4 address. Teredo (2001::/32) carries
 * two, the server's and the client's (obfuscated), and the packet goes
 * wherever the relay takes it: which network it reaches cannot be told, so
 * never. Local-use NAT64 (64:ff9b:1::/48, RFC 8215) may embed its IPv4
 * address at any of six prefix lengths: where it lands cannot be told
 * either, so never. */
static const struct v6_range v6_ranges[] = {
    {{0}, 128, EGRESS_ADDR_NEVER, "unspecified"},
    {{[15] = 1}, 128, EGRESS_ADDR_PRIVATE, "loopback"},
    {{0x01, 0x00}, 64, EGRESS_ADDR_PRIVATE, "discard-only"},
    {{0x20, 0x01, 0x0d, 0xb8}, 32, EGRESS_ADDR_PRIVATE, "documentation"},
    {{0x20, 0x01, 0x00, 0x00}, 32, EGRESS_ADDR_NEVER, "Teredo"},
    {{0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48, EGRESS_ADDR_NEVER, "local-use NAT64"},
    {{0xfc}, 7, EGRESS_ADDR_PRIVATE, "unique local"},
    {{0xfe, 0x80}, 10, EGRESS_ADDR_PRIVATE, "link-local"},
    {{0xfe, 0xc0}, 10, EGRESS_ADDR_PRIVATE, "site-local"},
    {{0xff}, 8, EGRESS_ADDR_NEVER, "multicast"},
};

/* The forms that carry an IPv4 address at a known place. */
struct v6_embed {
	uint8_t net[16];
	unsigned prefix;
	size_t v4_at; /* byte offset of the IPv4 address */
	enum v4_form form;
};

static const struct v6_embed v6_embeds[] = {
    /* ::ffff:a.b.c.d: the kernel connects such an AF_INET6 address over IPv4. */
    {{[10] = 0xff, [11] = 0xff}, 96, 12, V4_MAPPED},
    /* ::ffff:0:a.b.c.d (SIIT, RFC 2765). */
    {{[8] = 0xff, [9] = 0xff}, 96, 12, V4_TRANSLATED},
    /* ::a.b.c.d, deprecated; :: and ::1 are matched before. */
    {{0}, 96, 12, V4_COMPATIBLE},
    /* The well-known NAT64 prefix (RFC 6052). */
    {{0x00, 0x64, 0xff, 0x9b}, 96, 12, V4_NAT64},
    /* 2002:AABB:CCDD::/48 (RFC 3056). */
    {{0x20, 0x02}, 16, 2, V4_6TO4},
};

static enum egress_addr_class classify_v6(const uint8_t a[16], const char **what)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(v6_ranges); i++) {
		const struct v6_range *r = &v6_ranges[i];

		if (v6_in(a, r->net, r->prefix)) {
			*what = r->what;
			return r->cls;
		}
	}
	for (size_t i = 0; i < SBX_ARRAY_SIZE(v6_embeds); i++) {
		const struct v6_embed *e = &v6_embeds[i];

		if (v6_in(a, e->net, e->prefix))
			return classify_v4(be32_at(a + e->v4_at), e->form, what);
	}
	*what = "public";
	return EGRESS_ADDR_PUBLIC;
}

enum egress_addr_class egress_addr_classify(const struct sockaddr *sa, const char **what)
{
	const char *ignored;

	if (!what)
		what = &ignored;
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		return classify_v4(ntohl(in->sin_addr.s_addr), V4_BARE, what);
	}
	if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		return classify_v6(in6->sin6_addr.s6_addr, what);
	}
	*what = "not an IP address";
	return EGRESS_ADDR_NEVER;
}

bool egress_addr_allowed(const struct sockaddr *sa, bool allow_private, const char **what)
{
	switch (egress_addr_classify(sa, what)) {
	case EGRESS_ADDR_PUBLIC:
		return true;
	case EGRESS_ADDR_PRIVATE:
		return allow_private;
	case EGRESS_ADDR_NEVER:
		break;
	}
	return false;
}
