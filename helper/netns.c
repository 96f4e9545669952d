/* SPDX-License-Identifier: Apache-2.0 */
#include "netns.h"

#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
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
