/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's reading of a connect watch's packet (server/runs/deny_packet.c),
 * against the kernel filter that lets packets through to it
 * (helper/netns.c). The input is a packet as lo carries it, from the link
 * header on; sbxd reads it from a copy of exactly the bytes the socket
 * would return (its first SBX_DENY_WATCH_SNAP), so that a read past them
 * is the sanitizer's to see. Properties: a name is a NUL-terminated
 * string; what sbxd counts, the filter (run by the kernel on a unix
 * datagram pair) keeps, and what it counts from the whole packet it
 * counts, the same name, from the cut one. unit.deny_packet holds the two
 * together on packets made field by field. */
#include <linux/filter.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "deny_packet.h"
#include "egress_port.h"
#include "fuzz.h"
#include "netns.h"

#define NAME_SIZE 256

static int pair[2] = {-1, -1};

static bool filter_keeps(const uint8_t *data, size_t size)
{
	uint8_t got[SBX_DENY_WATCH_SNAP + 1];

	if (pair[0] < 0) {
		const struct sock_fprog *prog = sbx_netns_deny_watch_filter();

		FUZZ_ASSERT(
		    socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair) == 0 &&
			setsockopt(pair[1], SOL_SOCKET, SO_ATTACH_FILTER, prog, sizeof(*prog)) == 0,
		    "the filter on a socket pair");
	}
	FUZZ_ASSERT(send(pair[0], data, size, 0) == (ssize_t)size, "send %zu bytes", size);
	return recv(pair[1], got, sizeof(got), MSG_DONTWAIT) >= 0;
}

/* deny_packet_name on a copy of exactly data[0..n). */
static bool counted(const uint8_t *data, size_t n, char name[NAME_SIZE])
{
	uint8_t *exact = malloc(n ? n : 1);
	bool yes;

	FUZZ_ASSERT(exact, "malloc");
	memcpy(exact, data, n);
	memset(name, 'x', NAME_SIZE);
	yes = deny_packet_name(exact, n, name, NAME_SIZE);
	free(exact);
	FUZZ_ASSERT(!yes || memchr(name, 0, NAME_SIZE), "a name without its NUL");
	return yes;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char whole[NAME_SIZE], cut[NAME_SIZE];
	size_t snap = size < SBX_DENY_WATCH_SNAP ? size : SBX_DENY_WATCH_SNAP;
	bool by_whole, by_cut;

	if (size > 65000)
		return 0; /* more than a unix datagram takes by default */
	by_whole = counted(data, size, whole);
	by_cut = counted(data, snap, cut);
	FUZZ_ASSERT(!by_whole || (by_cut && !strcmp(whole, cut)),
		    "counted whole (%s), not the same from the first %d bytes", whole,
		    SBX_DENY_WATCH_SNAP);
	FUZZ_ASSERT(!by_cut || filter_keeps(data, size), "counted (%s), dropped by the filter",
		    cut);
	return 0;
}
