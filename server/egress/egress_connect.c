/* SPDX-License-Identifier: Apache-2.0 */
/* The TCP connect to a connection's vetted addresses, in the order the
 * lookup gave them, each non-blocking, all within connect_seconds (the
 * timer armed once, in egress_conn_connect). The destination's socket
 * events are made here and serve the relay afterwards. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "egress_internal.h"

static void address_text(const struct sockaddr_storage *ss, char *out, size_t size)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;

		inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
		snprintf(out, size, "%s:%u", ip, ntohs(sin->sin_port));
	} else {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;

		inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof(ip));
		snprintf(out, size, "[%s]:%u", ip, ntohs(sin6->sin6_port));
	}
}

static void try_next(struct egress_conn *c);

static void connected(struct egress_conn *c)
{
	int one = 1;

	event_del(c->uwrite);
	/* Small requests are the common case: no Nagle delay on either leg
	 * (bulk transfers write whole pipes anyway). */
	setsockopt(c->ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(c->cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->rec.connect_ms = (uint32_t)((egress_now_us() - c->connect_start_us) / 1000);
	address_text(&c->addrs[c->next_addr - 1], c->rec.address, sizeof(c->rec.address));
	egress_conn_connected(c);
}

static void on_uread(evutil_socket_t fd, short what, void *arg)
{
	struct egress_conn *c = arg;

	if (c->state == EGRESS_RELAY)
		egress_relay_pump(c, 1);
}

/* The connect in progress ended: connected, or the next address. */
static void connect_done(struct egress_conn *c)
{
	int soerr = 0;
	socklen_t len = sizeof(soerr);

	if (getsockopt(c->ufd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
		soerr = errno;
	if (soerr == 0)
		connected(c);
	else
		try_next(c);
}

static void on_uwrite(evutil_socket_t fd, short what, void *arg)
{
	struct egress_conn *c = arg;

	if (c->state == EGRESS_RELAY)
		egress_relay_pump(c, 0);
	else if (c->state == EGRESS_CONNECT)
		connect_done(c);
}

static void drop_socket(struct egress_conn *c)
{
	if (c->uread)
		event_free(c->uread);
	if (c->uwrite)
		event_free(c->uwrite);
	c->uread = c->uwrite = NULL;
	if (c->ufd >= 0)
		close(c->ufd);
	c->ufd = -1;
}

static void try_next(struct egress_conn *c)
{
	drop_socket(c);
	while (c->next_addr < c->n_addrs) {
		const struct sockaddr_storage *sa = &c->addrs[c->next_addr++];
		socklen_t len = sa->ss_family == AF_INET ? sizeof(struct sockaddr_in)
							 : sizeof(struct sockaddr_in6);
		int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

		if (fd < 0)
			continue;
		c->ufd = fd;
		c->uread = event_new(c->eg->base, fd, EV_READ | EV_PERSIST, on_uread, c);
		c->uwrite = event_new(c->eg->base, fd, EV_WRITE | EV_PERSIST, on_uwrite, c);
		if (!c->uread || !c->uwrite) {
			drop_socket(c);
			break;
		}
		if (connect(fd, (const struct sockaddr *)sa, len) == 0) {
			connected(c);
			return;
		}
		if (errno == EINPROGRESS) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};

			/* On loopback (and a near destination) the handshake
			 * is often done already: no wakeup to wait for. */
			if (poll(&p, 1, 0) == 1)
				connect_done(c);
			else
				event_add(c->uwrite, NULL);
			return;
		}
		drop_socket(c);
	}
	egress_conn_refuse(c, 502, "connect_failed", 0);
}

void egress_conn_connect(struct egress_conn *c)
{
	c->state = EGRESS_CONNECT;
	c->connect_start_us = egress_now_us();
	egress_conn_arm_timer(c, (int64_t)c->eg->connect_seconds * 1000000);
	try_next(c);
}
