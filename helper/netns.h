/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's own network namespace: loopback, and the socket buffer bounds
 * a network namespace may set for itself.
 *
 * Each exec gets a fresh network (and System V IPC) namespace, so nothing
 * of one exec's sockets, abstract unix names, loopback listeners or shared
 * memory is reachable from another exec or outlives it. On cgroup v1 the
 * kernel does not charge socket buffers to the exec's memory cgroup unless
 * memory.kmem.tcp.limit_in_bytes is set (cgroup.c sets it; then UDP too):
 * the per-namespace sysctls below also bound what TCP autotuning gives one
 * socket. docs/design/sandbox.md says what bound holds on v1 and v2. */
#ifndef SBX_NETNS_H
#define SBX_NETNS_H

#include <stdbool.h>

#include "err.h"

struct sock_fprog;

/* The most a TCP socket's autotuning may grow its receive or send buffer
 * to inside an exec (net.ipv4.tcp_rmem / tcp_wmem, third field). 4 MiB, not
 * 1: at 1 MiB a download through the egress proxy reached a median 0.72 of
 * direct loopback, at 4 MiB 0.78 (sbx-bench-egress, docs/dev/benchmarks.md). The exec's own
 * sockets are still charged to its memory cgroup (memory_mb in all); what
 * this also bounds is sbxd's end of each relayed connection, which lives in
 * this namespace but is charged to sbxd: its send queue, when the sandbox
 * stops reading, may hold up to 4 MiB rather than 1 (docs/operator/known-limits.md). */
#define SBX_TCP_BUF_MAX (4 << 20)

/* Run by exec init, with its capabilities, in the exec's fresh network
 * namespace: brings lo up and writes the per-namespace buffer sysctls
 * through sysctl_dir, an fd of the sandbox's /proc/sys opened before it was
 * made read-only. */
int sbx_netns_setup(int sysctl_dir, struct sbx_err *err);

/* With an egress allowlist, after sbx_netns_setup: the exec's one way out,
 * a TCP listener on 127.0.0.1:SBX_EGRESS_PORT (egress_port.h) for sbxd's
 * proxy to accept on. Close-on-exec and non-blocking (nothing that holds
 * it may stall on accept). Returns the fd, or -1. */
int sbx_netns_egress_listener(struct sbx_err *err);

/* With egress deny, after sbx_netns_setup: a UDP socket bound to
 * 127.0.0.1:SBX_DENY_DNS_PORT (egress_port.h) for sbxd to refuse the
 * command's DNS queries on (and record them), so a lookup fails at once
 * and says why. Close-on-exec and non-blocking. Returns the fd, or -1. */
int sbx_netns_deny_dns(struct sbx_err *err);

/* With egress deny, before anything of the command exists: routes every
 * IPv4 and IPv6 address to the namespace's own loopback, so that a
 * connect to a literal address is refused at once (ECONNREFUSED) and the
 * refusal is seen by the connect watch below. Nothing leaves either way:
 * the namespace has no other interface. IPv6 is routed where the
 * namespace has it (else an IPv6 connect fails at once with no route,
 * unseen); -1 only when the IPv4 route could not be made. */
int sbx_netns_deny_routes(struct sbx_err *err);

/* The receive buffer of the connect watch: what a flood of SYNs can queue
 * for sbxd (the rest the kernel drops; sbxd reads at its own pace). */
#define SBX_DENY_WATCH_RCVBUF (64 << 10)

/* With egress deny, after sbx_netns_deny_routes: the connect watch
 * (egress_port.h), an AF_PACKET socket on lo whose locked filter keeps
 * the first SBX_DENY_WATCH_SNAP bytes of each refusal of an attempt: a
 * TCP RST answering a SYN to a non-loopback address, an ICMP or ICMPv6
 * port unreachable of a datagram to one. Close-on-exec and non-blocking.
 * Returns the fd, or -1. */
int sbx_netns_deny_watch(struct sbx_err *err);

/* The program sbx_netns_deny_watch attaches, for a test to run on packets
 * of its own making (tests/unit/test_deny_packet.c, and the fuzz target
 * tests/fuzz/fuzz_deny_packet.c). */
const struct sock_fprog *sbx_netns_deny_watch_filter(void);

/* The connect watch of another network namespace, net_ns (an exec's,
 * routed by its exec init): made there by joining it, and back to own_ns.
 * Why pid 1 makes a prepared exec's watch at its claim: exec_spec's
 * prepared. Returns the fd, or -1; *stranded is set when the way back to
 * own_ns failed (the caller must not go on in another namespace). */
int sbx_netns_deny_watch_in(int net_ns, int own_ns, bool *stranded, struct sbx_err *err);

#endif
