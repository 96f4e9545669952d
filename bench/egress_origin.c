/* SPDX-License-Identifier: Apache-2.0 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "egress_origin.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "bench_util.h"
#include "util.h"

#define HEAD_MAX     8192
#define PEER_SECONDS 30
#define FILL_CHUNK   (1 << 20)

static struct {
	int listen_fd, stop_fd, body_fd; /* body_fd: the memfd holding /big */
	int port;
	uint64_t big;
	char *small; /* the whole answer to /small, head included */
	size_t small_len;
	pthread_t thread;
	bool running;
	atomic_uint_fast64_t served, refused;
} o = {.listen_fd = -1, .stop_fd = -1, .body_fd = -1};

/* The body of /big, made once: its pages stay in the page cache (shmem),
 * where sendfile reads them from. The bytes are not all alike, so nothing
 * on the way can compress them away. */
static void make_body(uint64_t size)
{
	_cleanup_free_ unsigned char *buf = malloc(FILL_CHUNK);

	if (!buf)
		bench_die("out of memory");
	for (size_t i = 0; i < FILL_CHUNK; i++)
		buf[i] = (unsigned char)(i * 2654435761u >> 13);
	o.body_fd = memfd_create("sbx-bench-egress-big", MFD_CLOEXEC);
	if (o.body_fd < 0)
		bench_die_errno("memfd_create");
	for (uint64_t done = 0; done < size;) {
		size_t n = size - done < FILL_CHUNK ? (size_t)(size - done) : FILL_CHUNK;
		ssize_t k = write(o.body_fd, buf, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			bench_die_errno("filling the %llu-byte body", (unsigned long long)size);
		done += (uint64_t)k;
	}
}

static bool write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		p += k;
		n -= (size_t)k;
	}
	return true;
}

/* Reads up to the end of the head; its request line into line. */
static bool read_head(int fd, char *line, size_t size)
{
	char buf[HEAD_MAX + 1];
	size_t len = 0;

	while (len < HEAD_MAX) {
		ssize_t k = recv(fd, buf + len, HEAD_MAX - len, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		len += (size_t)k;
		buf[len] = '\0';
		if (strstr(buf, "\r\n\r\n")) {
			size_t n = strcspn(buf, "\r\n");
			snprintf(line, size, "%.*s", (int)n, buf);
			return true;
		}
	}
	return false;
}

static void answer_big(int fd)
{
	char head[160];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
			 "Content-Length: %llu\r\nConnection: close\r\n\r\n",
			 (unsigned long long)o.big);
	off_t off = 0;

	if (!write_all(fd, head, (size_t)n))
		return;
	while ((uint64_t)off < o.big) {
		ssize_t k = sendfile(fd, o.body_fd, &off, (size_t)(o.big - (uint64_t)off));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return; /* the client went away: counted as not served */
	}
	atomic_fetch_add(&o.served, 1);
}

static void serve_one(int fd)
{
	static const char not_found[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n"
					"Connection: close\r\n\r\nnot found\n";
	struct timeval tv = {.tv_sec = PEER_SECONDS};
	char line[256];

	/* A peer that stalls cannot hold the one serving thread for long. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
	    !read_head(fd, line, sizeof(line))) {
		atomic_fetch_add(&o.refused, 1);
		return;
	}
	/* Origin form, as a proxy rewrites it (and as a direct client sends). */
	if (!strncmp(line, "GET /big ", 9)) {
		answer_big(fd);
	} else if (!strncmp(line, "GET /small ", 11)) {
		if (write_all(fd, o.small, o.small_len))
			atomic_fetch_add(&o.served, 1);
	} else {
		(void)!write_all(fd, not_found, sizeof(not_found) - 1); /* refused either way */
		atomic_fetch_add(&o.refused, 1);
	}
	/* Our side is done: FIN first, so the client reads every byte before
	 * the close (nothing of its is left unread to turn the close into RST). */
	shutdown(fd, SHUT_WR);
}

static void *serve(void *arg)
{
	(void)arg;
	for (;;) {
		struct pollfd p[2] = {{.fd = o.listen_fd, .events = POLLIN},
				      {.fd = o.stop_fd, .events = POLLIN}};

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			bench_die_errno("origin: poll");
		}
		if (p[1].revents)
			return NULL;
		if (!p[0].revents)
			continue;
		_cleanup_close_ int fd = accept4(o.listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN)
				continue;
			bench_die_errno("origin: accept");
		}
		serve_one(fd);
	}
}

void origin_start(uint64_t big_bytes, size_t small_bytes)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	int one = 1;

	o.big = big_bytes;
	make_body(big_bytes);
	char head[128];
	int hn = snprintf(head, sizeof(head),
			  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
			  "Connection: close\r\n\r\n",
			  small_bytes);
	o.small_len = (size_t)hn + small_bytes;
	o.small = malloc(o.small_len);
	if (!o.small)
		bench_die("out of memory");
	memcpy(o.small, head, (size_t)hn);
	memset(o.small + hn, 'x', small_bytes);

	o.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	o.stop_fd = eventfd(0, EFD_CLOEXEC);
	if (o.listen_fd < 0 || o.stop_fd < 0)
		bench_die_errno("origin: socket");
	if (setsockopt(o.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(o.listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(o.listen_fd, 512) < 0 ||
	    getsockname(o.listen_fd, (struct sockaddr *)&a, &alen) < 0)
		bench_die_errno("origin: listening on 127.0.0.1");
	o.port = ntohs(a.sin_port);
	int rv = pthread_create(&o.thread, NULL, serve, NULL);
	if (rv) {
		errno = rv;
		bench_die_errno("origin: pthread_create");
	}
	o.running = true;
}

int origin_port(void)
{
	return o.port;
}

/* Closes and forgets, so that a second stop closes nothing. */
static void close_fd(int *fd)
{
	sbx_closep(fd);
	*fd = -1;
}

void origin_stop(void)
{
	uint64_t one = 1;

	if (o.running) {
		if (write(o.stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
			bench_die_errno("origin: stopping");
		pthread_join(o.thread, NULL);
		o.running = false;
	}
	close_fd(&o.listen_fd);
	close_fd(&o.stop_fd);
	close_fd(&o.body_fd);
	free(o.small);
	o.small = NULL;
}

struct origin_stats origin_stats(void)
{
	return (struct origin_stats){.served = atomic_load(&o.served),
				     .refused = atomic_load(&o.refused)};
}
