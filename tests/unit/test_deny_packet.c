/* SPDX-License-Identifier: Apache-2.0 */
/* The connect watch's two readers held together: the kernel filter that
 * sbx-helper attaches (helper/netns.c) and sbxd's reading of what passes
 * (server/runs/deny_packet.c), run on the same packets, about 810000 of
 * them: every combination of the fields either looks at (IPv4 header
 * lengths, fragments, TCP flags and sequence numbers, ICMP and ICMPv6
 * types, the quoted datagram's header length, protocol, addresses, ports
 * and TCP flags; 9 IPv4 and 47 IPv6 address shapes), each cut short at every
 * length now and then, and random corruptions of them (a fixed seed).
 * Three properties:
 *   - what sbxd counts, the filter keeps: an attempt is never hidden by
 *     the kernel (review 23 tried one-instruction mutants of the filter
 *     that dropped real refusals and passed the checks of packets one by
 *     one);
 *   - what sbxd counts from a whole packet it counts, the same name, from
 *     the first SBX_DENY_WATCH_SNAP bytes the socket returns (at 128 a
 *     refusal of a datagram with 40 bytes of IP options was read cut and
 *     not counted);
 *   - what the filter keeps, sbxd counts: nothing an exec does without
 *     trying a way out takes its budget or a place in the watch's queue.
 *     Of every packet an exec can make (a datagram between its own
 *     addresses too), and more: later fragments, other link types and
 *     protocols. Not of what only a raw socket or a port below 1024
 *     makes, where the filter keeps a little more than sbxd counts: an
 *     IPv4 header shorter than 20 bytes, a quote cut short, an IPv6
 *     source in ::ffff:0:0/96, a datagram from port 53 of loopback but
 *     the IPv4 one of sbxd's resolver.
 * The filter runs in the kernel, attached to the receiving end of a unix
 * datagram pair: a packet it drops never arrives, one it keeps arrives cut
 * to SBX_DENY_WATCH_SNAP bytes (checked). A send that fails fails the
 * test. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "deny_packet.h"
#include "egress_port.h"
#include "netns.h"
#include "util.h"

#define FRAME_MAX	  256
#define NAME_SIZE	  256
#define SHOW_FIRST	  3 /* failures printed whole, per property */
#define TCP_RST_ACK_FLAGS 0x14
/* Bytes of the refused datagram's own after its UDP header, as the kernel
 * quotes them: a refusal longer than SBX_DENY_WATCH_SNAP, to be cut. */
#define QUOTED_PAYLOAD 64

struct frame {
	uint8_t b[FRAME_MAX];
	size_t len;
	bool agree; /* the third property applies (below) */
};

static int pair[2];
static unsigned long packets, hidden, read_cut, wasted, io_failed;

static const uint32_t v4_addrs[] = {0xc0000201, 0x7f000001, 0x7f010203, 0x7fffffff, 0x7effffff,
				    0x80000001, 0x00000000, 0xffffffff, 0x0a000001};
static const char *const v6_named[] = {
    "2001:db8::1",
    "::1",
    "::",
    "::2",
    "1::1",
    "0:0:1::1",
    "::1:0:0:1",
    "0:0:0:1::1",
    "::100:0:1",
    "fe80::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:127.255.0.1",
    "::ffff:192.0.2.1",
    "::ffff:126.255.255.255",
    "::fffe:127.0.0.1",
    "::1:ffff:127.0.0.1",
    "::127.0.0.1",
    "::ffff:0.0.0.1",
    "2001:db8::7",
    "0:1::2",
    "::ffff:127.0.0.4",
};
/* The named shapes, then ::1 with one more byte set (each of bytes 0-14)
 * and ::ffff:127.0.0.1 with one more byte set (each of bytes 0-9): a
 * filter that reads a word one byte off, or compares one word too few,
 * drops or keeps one of these where sbxd does otherwise. */
#define N_V4 (sizeof(v4_addrs) / sizeof(v4_addrs[0]))
#define N_V6 (sizeof(v6_named) / sizeof(v6_named[0]) + 15 + 10)
static uint8_t v6_addrs[N_V6][16];

static void make_v6_addrs(void)
{
	size_t n = 0;

	for (size_t i = 0; i < sizeof(v6_named) / sizeof(v6_named[0]); i++)
		inet_pton(AF_INET6, v6_named[i], v6_addrs[n++]);
	for (size_t i = 0; i < 15; i++, n++) {
		inet_pton(AF_INET6, "::1", v6_addrs[n]);
		v6_addrs[n][i] = 1;
	}
	for (size_t i = 0; i < 10; i++, n++) {
		inet_pton(AF_INET6, "::ffff:127.0.0.1", v6_addrs[n]);
		v6_addrs[n][i] = 1;
	}
}

static void put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, v >> 16);
	put16(p + 2, v & 0xffff);
}

static bool v4_mapped(const uint8_t *a)
{
	static const uint8_t prefix[12] = {[10] = 0xff, [11] = 0xff};

	return !memcmp(a, prefix, 12);
}

static void show(const char *what, const struct frame *f)
{
	fprintf(stderr, "# %s, %zu bytes:", what, f->len);
	for (size_t i = 0; i < f->len; i++)
		fprintf(stderr, "%s%02x", i % 4 ? "" : " ", f->b[i]);
	fprintf(stderr, "\n");
}

/* Whether the filter keeps f (and cuts it as it should). */
static bool filter_keeps(const struct frame *f)
{
	uint8_t got[FRAME_MAX + 1];
	size_t want = f->len < SBX_DENY_WATCH_SNAP ? f->len : SBX_DENY_WATCH_SNAP;
	ssize_t n;

	if (send(pair[0], f->b, f->len, 0) != (ssize_t)f->len) {
		io_failed++;
		return true;
	}
	n = recv(pair[1], got, sizeof(got), MSG_DONTWAIT);
	if (n < 0 && errno != EAGAIN)
		io_failed++;
	if (n >= 0 && (size_t)n != want && io_failed++ < SHOW_FIRST)
		show("kept, but not cut to the snap length", f);
	return n >= 0;
}

/* The three properties on f. */
static void both(const struct frame *f)
{
	char whole[NAME_SIZE], cut[NAME_SIZE];
	size_t snap = f->len < SBX_DENY_WATCH_SNAP ? f->len : SBX_DENY_WATCH_SNAP;
	/* Copies of exactly the bytes given, so that a read past them is the
	 * sanitizer's to see (review 24: one byte, in an ICMP error with
	 * nothing quoted). */
	uint8_t *exact = malloc(f->len ? f->len : 1), *exact_snap = malloc(snap ? snap : 1);
	bool counted_whole, counted, kept = filter_keeps(f);

	if (!exact || !exact_snap)
		abort();
	memcpy(exact, f->b, f->len);
	memcpy(exact_snap, f->b, snap);
	counted_whole = deny_packet_name(exact, f->len, whole, sizeof(whole));
	counted = deny_packet_name(exact_snap, snap, cut, sizeof(cut));
	free(exact);
	free(exact_snap);

	packets++;
	if (counted_whole && (!counted || strcmp(whole, cut)) && read_cut++ < SHOW_FIRST)
		show("counted whole, not from the snap length", f);
	if (counted && !kept && hidden++ < SHOW_FIRST)
		show("counted by sbxd, dropped by the filter", f);
	if (f->agree && kept && !counted && wasted++ < SHOW_FIRST)
		show("kept by the filter, not counted by sbxd", f);
}

/* Every cut of f, now and then (which ones: a fixed stride). */
static void both_and_cuts(struct frame *f, unsigned long i)
{
	both(f);
	if (i % 97)
		return;
	struct frame c = *f;
	c.agree = false;
	for (c.len = 0; c.len < f->len; c.len++)
		both(&c);
}

/* lo's link header and an IPv4 header of ihl words (options: NOPs). */
static uint8_t *v4(struct frame *f, unsigned ihl, unsigned frag, uint8_t proto, uint32_t src)
{
	memset(f, 0, sizeof(*f));
	put16(f->b + 12, ETH_P_IP);
	f->b[14] = (uint8_t)(0x40 | ihl);
	put16(f->b + 14 + 6, frag);
	f->b[14 + 8] = 64;
	f->b[14 + 9] = proto;
	put32(f->b + 14 + 12, src);
	put32(f->b + 14 + 16, 0xc0000209);
	for (unsigned i = 20; i < ihl * 4; i++)
		f->b[14 + i] = 1;
	return f->b + 14 + (ihl >= 5 ? ihl * 4 : 20);
}

static uint8_t *v6(struct frame *f, uint8_t nh, const uint8_t src[16])
{
	memset(f, 0, sizeof(*f));
	put16(f->b + 12, ETH_P_IPV6);
	f->b[14] = 0x60;
	f->b[14 + 6] = nh;
	f->b[14 + 7] = 64;
	memcpy(f->b + 14 + 8, src, 16);
	inet_pton(AF_INET6, "2001:db8::9", f->b + 14 + 24);
	return f->b + 14 + 40;
}

static uint8_t *tcp(uint8_t *t, uint8_t flags, uint32_t seq)
{
	put16(t, 443);
	put16(t + 2, 40000);
	put32(t + 4, seq);
	put32(t + 8, 0x01020304);
	t[12] = 0x50;
	t[13] = flags;
	return t + 20;
}

static const uint8_t flag_sets[] = {0x14, 0x04, 0x10, 0x02, 0x12, 0x01, 0x11, 0x15,
				    0x16, 0x1c, 0x34, 0x17, 0x00, 0x3f, 0xd4, 0x94};
static const uint32_t seqs[] = {0, 1, 0x01000000, 0x80000000};
static const unsigned frags[] = {0, 0x4000, 0x2000, 0x0001, 0x1fff, 0x8000};
static const unsigned ihls[] = {5, 6, 15, 4, 0};

static unsigned long tcp_v4(void)
{
	unsigned long i = 0;
	struct frame f;

	for (size_t a = 0; a < 5; a++)
		for (size_t b = 0; b < SBX_ARRAY_SIZE(frags); b++)
			for (size_t s = 0; s < N_V4; s++)
				for (size_t fl = 0; fl < SBX_ARRAY_SIZE(flag_sets); fl++)
					for (size_t q = 0; q < SBX_ARRAY_SIZE(seqs); q++, i++) {
						uint8_t *t = v4(&f, ihls[a], frags[b], IPPROTO_TCP,
								v4_addrs[s]);
						f.len =
						    (size_t)(tcp(t, flag_sets[fl], seqs[q]) - f.b);
						/* Fragments too: sbxd and the
						 * filter alike read only a first. */
						f.agree = ihls[a] >= 5;
						both_and_cuts(&f, i);
					}
	return i;
}

/* Datagrams between the exec's own addresses (every address is its own),
 * UDP and UDP-Lite, the payload zeros or shaped where a TCP header has
 * its flags and sequence number (RST|ACK, 0): never a refusal. */
static unsigned long datagrams(void)
{
	static const uint8_t protos[] = {IPPROTO_UDP, IPPROTO_UDPLITE};
	unsigned long i = 0;
	struct frame f;

	for (size_t p = 0; p < SBX_ARRAY_SIZE(protos); p++)
		for (size_t shaped = 0; shaped < 2; shaped++) {
			for (size_t s = 0; s < N_V4; s++, i++) {
				uint8_t *u = v4(&f, 5, 0x4000, protos[p], v4_addrs[s]);
				put16(u, 40000);
				put16(u + 2, 8080);
				u[13] = shaped ? 0x14 : 0;
				f.len = (size_t)(u + 24 - f.b);
				f.agree = true;
				both_and_cuts(&f, i);
			}
			for (size_t s = 0; s < N_V6; s++, i++) {
				uint8_t *u = v6(&f, protos[p], v6_addrs[s]);
				put16(u, 40000);
				put16(u + 2, 8080);
				u[13] = shaped ? 0x14 : 0;
				f.len = (size_t)(u + 24 - f.b);
				f.agree = !v4_mapped(f.b + 14 + 8);
				both_and_cuts(&f, i);
			}
		}
	return i;
}

/* Neither TCP nor a refusal: other link types, other IP protocols (0
 * among them: a jump that lands on a test for 0 must not keep it). No
 * exec makes most of these (lo carries IP; a raw socket is refused), but
 * the filter and sbxd must agree on them all the same. */
static unsigned long others(void)
{
	static const unsigned types[] = {0x0806, 0x0801, 0x07ff, 0x86dc, 0x86de, 0x0000, 0xffff};
	static const uint8_t protos[] = {0, 2, 4, 41, 47, 50, 58, 132, 255};
	unsigned long i = 0;
	struct frame f;

	for (size_t t = 0; t < SBX_ARRAY_SIZE(types); t++)
		for (size_t six = 0; six < 2; six++, i++) {
			uint8_t *b = six ? v6(&f, IPPROTO_TCP, v6_addrs[0])
					 : v4(&f, 5, 0, IPPROTO_TCP, v4_addrs[0]);
			b = tcp(b, TCP_RST_ACK_FLAGS, 0);
			put16(f.b + 12, types[t]); /* an IPv4 or IPv6 refusal inside */
			f.len = (size_t)(b - f.b);
			f.agree = true;
			both_and_cuts(&f, i);
		}
	for (size_t p = 0; p < SBX_ARRAY_SIZE(protos); p++)
		for (size_t s = 0; s < N_V4; s++, i++) {
			uint8_t *b =
			    tcp(v4(&f, 5, 0, protos[p], v4_addrs[s]), TCP_RST_ACK_FLAGS, 0);
			f.len = (size_t)(b - f.b);
			f.agree = true;
			both_and_cuts(&f, i);
		}
	for (size_t p = 0; p < SBX_ARRAY_SIZE(protos); p++, i++) {
		uint8_t *b = tcp(v6(&f, protos[p], v6_addrs[0]), TCP_RST_ACK_FLAGS, 0);
		f.len = (size_t)(b - f.b);
		f.agree = true;
		both_and_cuts(&f, i);
	}
	return i;
}

/* An ICMP(v6) error of type and code, quoting a datagram of protocol
 * proto from src:sport to dst:123 (IPv4: a quoted header of qihl words). */
static uint8_t *quote_v4(uint8_t *m, unsigned type, unsigned code, unsigned qihl, uint8_t proto,
			 uint32_t src, uint32_t dst, unsigned sport, uint8_t tcp_flags)
{
	m[0] = (uint8_t)type;
	m[1] = (uint8_t)code;
	uint8_t *q = m + 8;
	q[0] = (uint8_t)(0x40 | qihl);
	q[8] = 64;
	q[9] = proto;
	put32(q + 12, src);
	put32(q + 16, dst);
	size_t hl = qihl >= 5 ? qihl * 4 : 20;
	for (size_t i = 20; i < hl; i++)
		q[i] = 1;
	put16(q + hl, sport);
	put16(q + hl + 2, 123);
	q[hl + 13] = tcp_flags;
	return q + hl + 8 + QUOTED_PAYLOAD;
}

static const unsigned v4_types[][2] = {{3, 3},	{3, 2}, {3, 1}, {3, 0},	 {3, 4},  {3, 13}, {0, 0},
				       {11, 0}, {4, 3}, {5, 1}, {12, 0}, {12, 1}, {12, 2}, {12, 3}};
static const uint8_t quoted_protos[] = {IPPROTO_UDP, IPPROTO_UDPLITE, IPPROTO_TCP, 47, 0};
/* The quote's tail: its source port and what its byte 13 past its header
 * says, a TCP segment's flags: a SYN (an attempt), or a SYN|ACK or
 * RST|ACK of the exec's own kernel (review 25: counted under the client's
 * own port), or none, SYN|FIN, SYN|RST (a flag test that misses one), or
 * an ECN SYN (ECE|CWR|SYN: a flag test that looks at them drops it). */
static const struct {
	unsigned sport;
	uint8_t flags;
} tails[] = {{SBX_DENY_DNS_PORT, 0x02},
	     {40000, 0x02},
	     {40000, 0x12},
	     {SBX_DENY_DNS_PORT, 0x14},
	     {40000, 0x00},
	     {40000, 0x03},
	     {40000, 0x06},
	     {40000, 0xc2}};
#define QUOTE_TAILS SBX_ARRAY_SIZE(tails)

/* One ICMP error of icmp_v4's, the quote's tail picked by tail. */
static void one_v4(struct frame *f, unsigned outer, const unsigned type[2], unsigned qihl,
		   uint8_t proto, uint32_t src, uint32_t dst, size_t tail)
{
	uint8_t *m = v4(f, outer, 0x4000, IPPROTO_ICMP, dst);

	f->len = (size_t)(quote_v4(m, type[0], type[1], qihl, proto, src, dst, tails[tail].sport,
				   tails[tail].flags) -
			  f->b);
	f->agree = qihl >= 5;
}

static unsigned long icmp_v4(void)
{
	static const unsigned outer[] = {5, 15};
	static const unsigned quoted[] = {5, 15, 4};
	unsigned long i = 0;
	struct frame f;

	for (size_t o = 0; o < SBX_ARRAY_SIZE(outer); o++)
		for (size_t t = 0; t < SBX_ARRAY_SIZE(v4_types); t++)
			for (size_t qi = 0; qi < SBX_ARRAY_SIZE(quoted); qi++)
				for (size_t p = 0; p < SBX_ARRAY_SIZE(quoted_protos); p++)
					for (size_t s = 0; s < N_V4; s++)
						for (size_t d = 0; d < N_V4; d++)
							for (size_t tl = 0; tl < QUOTE_TAILS;
							     tl++, i++) {
								one_v4(&f, outer[o], v4_types[t],
								       quoted[qi], quoted_protos[p],
								       v4_addrs[s], v4_addrs[d],
								       tl);
								both_and_cuts(&f, i);
							}
	return i;
}

static unsigned long tcp_v6(void)
{
	unsigned long i = 0;
	struct frame f;

	for (size_t s = 0; s < N_V6; s++)
		for (size_t fl = 0; fl < SBX_ARRAY_SIZE(flag_sets); fl++)
			for (size_t q = 0; q < SBX_ARRAY_SIZE(seqs); q++, i++) {
				uint8_t *t = v6(&f, IPPROTO_TCP, v6_addrs[s]);
				f.len = (size_t)(tcp(t, flag_sets[fl], seqs[q]) - f.b);
				f.agree = !v4_mapped(f.b + 14 + 8);
				both_and_cuts(&f, i);
			}
	return i;
}

static const unsigned v6_types[][2] = {{1, 4},	 {4, 1},   {1, 0}, {1, 3}, {4, 0}, {4, 2},
				       {128, 0}, {129, 0}, {3, 0}, {2, 0}, {0, 0}};

static unsigned long icmp_v6(void)
{
	/* The quoted source matters to sbxd only as loopback with port 53
	 * (its resolver's answers); the destination is what is read. */
	static const char *const sources[] = {"2001:db8::1", "::1", "::ffff:127.0.0.1", "::"};
	static const uint8_t loop[16] = {[15] = 1};
	unsigned long i = 0;
	struct frame f;

	for (size_t t = 0; t < SBX_ARRAY_SIZE(v6_types); t++)
		for (size_t p = 0; p < SBX_ARRAY_SIZE(quoted_protos); p++)
			for (size_t s = 0; s < SBX_ARRAY_SIZE(sources); s++)
				for (size_t d = 0; d < N_V6; d++)
					for (size_t tl = 0; tl < QUOTE_TAILS; tl++, i++) {
						uint8_t *m = v6(&f, IPPROTO_ICMPV6, v6_addrs[d]);
						uint8_t *q = m + 8;
						m[0] = (uint8_t)v6_types[t][0];
						m[1] = (uint8_t)v6_types[t][1];
						q[0] = 0x60;
						q[6] = quoted_protos[p];
						inet_pton(AF_INET6, sources[s], q + 8);
						memcpy(q + 24, v6_addrs[d], 16);
						put16(q + 40, tails[tl].sport);
						put16(q + 42, 123);
						q[40 + 13] = tails[tl].flags;
						f.len = (size_t)(q + 48 + QUOTED_PAYLOAD - f.b);
						/* From port 53 only sbxd's resolver sends, on
						 * IPv4: an exec may not bind below 1024. */
						f.agree = !v4_mapped(q + 8) &&
							  !(tails[tl].sport == SBX_DENY_DNS_PORT &&
							    !memcmp(q + 8, loop, 16));
						both_and_cuts(&f, i);
					}
	return i;
}

/* xorshift64: the corruptions below are the same every run. */
static uint64_t rnd(void)
{
	static uint64_t x = 0x9e3779b97f4a7c15u;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return x;
}

/* Refusals of attempts, each with 1-4 bytes of its first 150 set at
 * random, cut at random one time in four: the first two properties. */
static unsigned long corrupted(unsigned long count)
{
	struct frame seed[4], f;
	unsigned long i;

	f.len = (size_t)(tcp(v4(&seed[0], 5, 0, IPPROTO_TCP, 0xc0000201), 0x14, 0) - seed[0].b);
	seed[0].len = f.len;
	seed[1].len = (size_t)(quote_v4(v4(&seed[1], 15, 0, IPPROTO_ICMP, 0xc0000201), 3, 3, 15,
					IPPROTO_UDP, 0x0a000001, 0xc0000201, 40000, 0) -
			       seed[1].b);
	seed[2].len = (size_t)(tcp(v6(&seed[2], IPPROTO_TCP, v6_addrs[0]), 0x14, 0) - seed[2].b);
	{
		uint8_t *q = v6(&seed[3], IPPROTO_ICMPV6, v6_addrs[19]) + 8;
		q[-8] = 1;
		q[-7] = 4;
		q[0] = 0x60;
		q[6] = IPPROTO_UDP;
		inet_pton(AF_INET6, "2001:db8::1", q + 8);
		inet_pton(AF_INET6, "2001:db8::7", q + 24);
		put16(q + 42, 123);
		seed[3].len = (size_t)(q + 48 - seed[3].b);
	}
	for (i = 0; i < count; i++) {
		f = seed[i % 4];
		f.agree = false;
		for (uint64_t k = rnd() % 4 + 1; k; k--) {
			uint64_t r = rnd();
			f.b[r % 150] = (uint8_t)(r >> 32);
		}
		if (rnd() % 4 == 0)
			f.len = rnd() % (f.len + 1);
		both(&f);
	}
	return i;
}

int main(void)
{
	const struct sock_fprog *prog = sbx_netns_deny_watch_filter();
	unsigned long made;

	if (!check(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair) == 0 &&
		       setsockopt(pair[1], SOL_SOCKET, SO_ATTACH_FILTER, prog, sizeof(*prog)) == 0,
		   "the watch's filter on a unix datagram pair"))
		return check_done();
	make_v6_addrs();
	made = tcp_v4();
	made += icmp_v4();
	made += tcp_v6();
	made += icmp_v6();
	made += datagrams();
	made += others();
	check(made > 80000, "%lu packets made field by field", made);
	check(corrupted(100000) == 100000, "100000 corrupted");
	check(packets > 300000, "%lu packets with their cuts", packets);
	check(io_failed == 0, "every packet sent and read back as sent or not at all (%lu not)",
	      io_failed);
	check(hidden == 0, "nothing sbxd counts is dropped by the filter (%lu were)", hidden);
	check(read_cut == 0, "what sbxd counts whole it counts from the snap length (%lu not)",
	      read_cut);
	check(wasted == 0, "what the filter keeps of what it must agree on, sbxd counts (%lu not)",
	      wasted);
	close(pair[0]);
	close(pair[1]);
	return check_done();
}
