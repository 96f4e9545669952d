/* SPDX-License-Identifier: Apache-2.0 */
/* Egress deny, said loudly. An exec of a run whose policy denies egress has
 * a network namespace with loopback only, so nothing leaves it; what this
 * adds is that a program which tries learns why at once. Exec init binds a
 * UDP socket on 127.0.0.1:53 in the exec's namespace and hands it to sbxd
 * in its listener's place (helper/netns.h, egress_port.h); the sandbox's
 * resolv.conf points there with one try. The run's monitor thread (never a
 * caller's) reads each query, answers REFUSED at once, records the name
 * (ExecStatus.network_denied_attempts/_names, the manifest, the audit
 * log's exec_ended) and, at the first, writes one notice line into the
 * exec's stderr naming the policy and the image-build advice.
 *
 * Connects to a literal address are counted too: exec init routes every
 * address to the namespace's own loopback, so a TCP connect is refused at
 * once (ECONNREFUSED) and a UDP datagram's sender gets port unreachable,
 * and hands sbxd beside the resolver the connect watch, an AF_PACKET
 * socket on lo whose filter (locked, made by exec init before the command
 * existed: helper/netns.c) passes only the first SBX_DENY_WATCH_SNAP bytes
 * of those refusals: a TCP RST answering a SYN, an ICMP port unreachable
 * quoting the datagram. A refusal, not the attempt, is what counts: every
 * address is the exec's own, so a server it runs on 0.0.0.0 answers a
 * connect to any address, and that is no attempt. Each is recorded as
 * "ADDRESS:PORT" (TCP), "ADDRESS:PORT/udp" or "/udplite", IPv6 addresses
 * in brackets. What is not counted: loopback (the exec's own servers and
 * closed ports, the answers of the resolver below), ICMP (no program of
 * the sandbox may open a raw or ping socket), IPv6 packets with extension
 * headers. An exec without a watch (the kernel refused it: exec.c) is
 * said once in the run's alerts.
 *
 * Bounds: a query is read into a fixed buffer and answered with at most
 * the bytes it came with; a name is parsed without following compression
 * pointers (a query's question has none: such a query gets FORMERR), at
 * most 255 bytes on the wire and RUN_DENIED_NAME bytes as recorded; an
 * exec reads DENY_RATE queries a second (a burst of as many), past that
 * its socket is not watched until the budget refills, so a flood waits
 * in the socket's receive queue (charged to the exec's memory cgroup,
 * where the kernel drops what does not fit) and costs sbxd nothing; the
 * connect watch shares the budget, and its queue holds at most
 * SBX_DENY_WATCH_RCVBUF bytes (helper/netns.h); at most RUN_DENIED_NAMES
 * distinct names are kept per exec. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "deny_packet.h"
#include "egress_port.h"
#include "runs_deny.h"
#include "runs_output.h"

#define DENY_RATE	 128 /* queries read per second per exec, and the burst */
#define DNS_HEADER	 12
#define DNS_NAME_MAX	 255 /* wire bytes of a name, RFC 1035 */
#define DNS_QUERY_MAX	 512 /* a bigger datagram is cut here (MSG_TRUNC) */
#define RCODE_FORMERR	 1
#define RCODE_REFUSED	 5
#define RUN_DENIED_NAME	 256 /* a recorded name's bytes, NUL included */
#define DENY_NOTICE_DOCS "docs/operator/images.md#a-program-that-needs-the-network"

/* Whether fd is a socket of this domain and type. */
static bool socket_is(int fd, int domain, int type)
{
	int d = 0, t = 0;
	socklen_t dlen = sizeof(d), tlen = sizeof(t);

	return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &d, &dlen) == 0 && d == domain &&
	       getsockopt(fd, SOL_SOCKET, SO_TYPE, &t, &tlen) == 0 && t == type;
}

bool deny_take(struct sbx_run *r, struct run_exec *e, int fd, int watch)
{
	struct sockaddr_in a;
	socklen_t alen = sizeof(a);

	/* Only what exec init makes: a UDP socket bound to 127.0.0.1:53 and
	 * a packet socket (a helper must not make sbxd read from anything
	 * else). */
	if (e->deny_fd >= 0 || !socket_is(fd, AF_INET, SOCK_DGRAM) ||
	    getsockname(fd, (struct sockaddr *)&a, &alen) < 0 || alen != sizeof(a) ||
	    a.sin_family != AF_INET || a.sin_addr.s_addr != htonl(INADDR_LOOPBACK) ||
	    ntohs(a.sin_port) != SBX_DENY_DNS_PORT ||
	    (watch >= 0 && !socket_is(watch, AF_PACKET, SOCK_RAW)))
		return false;
	/* Without a watch (the kernel refused exec init one: helper/exec.c)
	 * connects still fail at once, only unrecorded: said once a run. */
	if (watch < 0 && !r->deny_watch_missing) {
		r->deny_watch_missing = true;
		run_alert(r,
			  "sbxd: egress deny: exec-%llu has no connect watch (the kernel "
			  "refused exec init a packet socket on lo); connects to addresses "
			  "are refused but not recorded",
			  (unsigned long long)e->num);
	}
	e->deny_fd = fd;
	e->watch_fd = watch;
	e->deny_tokens = DENY_RATE;
	e->deny_refill_ms = sbx_mono_ms();
	return true;
}

/* The budget refilled to now; whether there is a query's worth. Only the
 * time the added tokens stand for is used up: the monitor wakes every few
 * ms, and a wake-up adding less than a token must not lose its time. */
static bool deny_budget(struct run_exec *e, int64_t now)
{
	int64_t add = (now - e->deny_refill_ms) * DENY_RATE / 1000;

	if (add <= 0)
		return e->deny_tokens > 0;
	if (add >= DENY_RATE - (int64_t)e->deny_tokens) {
		e->deny_tokens = DENY_RATE;
		e->deny_refill_ms = now;
	} else {
		e->deny_tokens += (uint32_t)add;
		e->deny_refill_ms += add * 1000 / DENY_RATE;
	}
	return e->deny_tokens > 0;
}

bool deny_watch(struct run_exec *e, int64_t now, int64_t *next)
{
	if (e->deny_fd < 0)
		return false;
	if (deny_budget(e, now))
		return true;
	if (e->deny_refill_ms + 1000 / DENY_RATE < *next)
		*next = e->deny_refill_ms + 1000 / DENY_RATE;
	return false;
}

/* The question's name in presentation form (RFC 1035 5.1: a byte other
 * than a letter, digit, '-' or '_' as \DDD, a '.' in a label as "\."),
 * cut at out_size before the first piece that does not fit (a prefix of
 * the whole: nothing skipped); *end is the byte after it on the wire. -1: not a name
 * (a pointer, an unknown label type, past the datagram or 255 bytes). */
static int parse_name(const uint8_t *q, size_t n, size_t *end, char *out, size_t out_size)
{
	size_t off = DNS_HEADER, o = 0;
	bool full = false; /* cut: a later piece that fits would not be what was asked */

	out[0] = '\0';
	for (;;) {
		uint8_t len;

		if (off >= n || off - DNS_HEADER >= DNS_NAME_MAX)
			return -1;
		len = q[off++];
		if (len == 0)
			break;
		if (len & 0xC0) /* a compression pointer or extended label: not in a question */
			return -1;
		if (off + len > n || off + len - DNS_HEADER > DNS_NAME_MAX)
			return -1;
		if (o && !(full = full || o + 1 >= out_size))
			out[o++] = '.';
		for (uint8_t i = 0; i < len; i++) {
			uint8_t c = q[off + i];
			char tmp[5];
			bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
				     (c >= '0' && c <= '9') || c == '-' || c == '_';

			if (plain)
				snprintf(tmp, sizeof(tmp), "%c", c);
			else if (c == '.' || c == '\\')
				snprintf(tmp, sizeof(tmp), "\\%c", c);
			else
				snprintf(tmp, sizeof(tmp), "\\%03u", c);
			if (!(full = full || o + strlen(tmp) >= out_size)) {
				memcpy(out + o, tmp, strlen(tmp));
				o += strlen(tmp);
			}
		}
		off += len;
		out[o] = '\0';
	}
	if (!o && out_size > 1) /* the root */
		snprintf(out, out_size, ".");
	*end = off;
	return 0;
}

/* mu held: one attempt, and its name among the first distinct ones.
 * Returns whether it was the exec's first. */
static bool deny_record(struct sbx_run *r, struct run_exec *e, const char *name) REQUIRES(r->mu)
{
	bool first = e->denied_attempts == 0;

	if (e->denied_attempts < UINT32_MAX)
		e->denied_attempts++;
	if (name[0] && e->n_denied_names < RUN_DENIED_NAMES) {
		bool seen = false;

		for (size_t i = 0; i < e->n_denied_names && !seen; i++)
			seen = !strcmp(e->denied_names[i], name);
		if (!seen && (e->denied_names[e->n_denied_names] = strdup(name)))
			e->n_denied_names++;
	}
	run_changed(r);
	return first;
}

/* The one line an exec's stderr gets at its first attempt; kept in one
 * function so the output room's append path is called from one place. */
static void deny_notice(struct sbx_run *r, struct run_exec *e, const char *name)
{
	char line[512];

	snprintf(line, sizeof(line),
		 "sbx: network egress is denied by this run's policy (egress: deny); the program "
		 "tried to reach %.200s. Install what it needs into the image when the image is "
		 "built (reviewed there): " DENY_NOTICE_DOCS,
		 name[0] ? name : "the network");
	stream_note(r, e, RUN_STDERR, line);
}

/* One query in q[0..n): its answer into a (same size or less), or 0 for
 * none (not a query). name gets the question's name, "" if none. */
static size_t answer(const uint8_t *q, size_t n, uint8_t *a, char *name, size_t name_size)
{
	size_t end = 0;
	bool ok;

	name[0] = '\0';
	if (n < DNS_HEADER || (q[2] & 0x80)) /* short, or an answer */
		return 0;
	/* QUERY with one question, and the question whole. */
	ok = ((q[2] >> 3) & 0x0F) == 0 && q[4] == 0 && q[5] == 1 &&
	     parse_name(q, n, &end, name, name_size) == 0 && end + 4 <= n;
	if (!ok) {
		name[0] = '\0';
		end = DNS_HEADER;
	} else {
		end += 4; /* QTYPE, QCLASS */
	}
	memcpy(a, q, end);
	a[2] = (uint8_t)(0x80 | (q[2] & 0x79)); /* QR, the opcode and RD as asked */
	a[3] = ok ? RCODE_REFUSED : RCODE_FORMERR;
	memset(a + 4, 0, 8);
	a[5] = ok ? 1 : 0;
	return end;
}

void deny_pump(struct sbx_run *r, struct run_exec *e)
{
	int64_t now = sbx_mono_ms();

	while (deny_budget(e, now)) {
		uint8_t q[DNS_QUERY_MAX], a[DNS_QUERY_MAX];
		char name[RUN_DENIED_NAME];
		struct sockaddr_storage from;
		socklen_t flen = sizeof(from);
		ssize_t n = recvfrom(e->deny_fd, q, sizeof(q), MSG_DONTWAIT | MSG_TRUNC,
				     (struct sockaddr *)&from, &flen);
		size_t alen;
		bool first;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return; /* EAGAIN: all read */
		e->deny_tokens--;
		alen =
		    answer(q, (size_t)n < sizeof(q) ? (size_t)n : sizeof(q), a, name, sizeof(name));
		/* The namespace has loopback only: an answer can go nowhere else. */
		if (alen &&
		    sendto(e->deny_fd, a, alen, MSG_DONTWAIT, (struct sockaddr *)&from, flen) < 0) {
			/* the asker is gone or its queue full: its loss */
		}
		run_lock(r);
		first = deny_record(r, e, name);
		run_unlock(r);
		if (first)
			deny_notice(r, e, name);
	}
}

void watch_pump(struct sbx_run *r, struct run_exec *e)
{
	int64_t now = sbx_mono_ms();
	bool error_read = false;

	while (deny_budget(e, now)) {
		uint8_t pkt[SBX_DENY_WATCH_SNAP];
		char name[RUN_DENIED_NAME];
		struct sockaddr_ll from;
		socklen_t flen = sizeof(from);
		ssize_t n = recvfrom(e->watch_fd, pkt, sizeof(pkt), MSG_DONTWAIT,
				     (struct sockaddr *)&from, &flen);
		bool first;

		if (n < 0 && errno == EINTR)
			continue;
		/* The socket's pending error comes before its queue, and is
		 * cleared by the read that returns it: the exec's lo going
		 * with its namespace (ENETDOWN) is one when its end came
		 * before this read, and the refusals it recorded are still
		 * there. One such error a pump. */
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && !error_read) {
			error_read = true;
			continue;
		}
		if (n < 0)
			return; /* EAGAIN: all read */
		e->deny_tokens--;
		/* The filter passed only packets lo received; what is not one
		 * of those is not an attempt. */
		if (flen < sizeof(from) || from.sll_pkttype != PACKET_HOST ||
		    !deny_packet_name(pkt, (size_t)n, name, sizeof(name)))
			continue;
		run_lock(r);
		first = deny_record(r, e, name);
		run_unlock(r);
		if (first)
			deny_notice(r, e, name);
	}
}

void deny_release(struct run_exec *e, int fds[2])
{
	fds[0] = e->deny_fd;
	fds[1] = e->watch_fd;
	e->deny_fd = e->watch_fd = -1;
}

void *deny_audit(const struct run_exec *e)
{
	json_t *names;

	if (!e->denied_attempts)
		return NULL;
	names = json_array();
	for (size_t i = 0; names && i < e->n_denied_names; i++)
		json_array_append_new(names, json_string(e->denied_names[i]));
	return json_pack("{s:I, s:o*}", "network_denied_attempts", (json_int_t)e->denied_attempts,
			 "network_denied_names", names);
}

void deny_drain(struct sbx_run *r, struct run_exec *e)
{
	if (e->deny_fd >= 0)
		deny_pump(r, e);
	if (e->watch_fd >= 0)
		watch_pump(r, e);
}
