/* SPDX-License-Identifier: Apache-2.0 */
/* The closer (runs_closer.c): a close that waits is not its caller's wait,
 * what waits is bounded and closed by closer_stop, and past the bound (for
 * directories, their share of it) or without a closer the close is the
 * caller's.
 *
 * A close that waits, on demand: a TCP socket over loopback whose send
 * queue its peer has not read, with SO_LINGER set, blocks in close() until
 * the peer reads it all (or the linger runs out, LINGER_S: a caller that
 * waited for it would trip the ALARM_S watchdog first). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "runs_closer.h"

#define LINGER_S 120
#define ALARM_S	 30

struct lingering {
	int writer; /* closing it waits until reader has read everything */
	int reader;
	size_t sent;
};

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static struct lingering lingering(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	int small = 4096, lst = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct linger lg = {.l_onoff = 1, .l_linger = LINGER_S};
	struct lingering l = {.writer = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
	char buf[4096];

	if (lst < 0 || l.writer < 0 || bind(lst, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(lst, 1) < 0 || getsockname(lst, (struct sockaddr *)&a, &alen) < 0)
		die("listener");
	/* A small send buffer: a few pages beside the peer's window fill it. */
	if (setsockopt(l.writer, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) < 0 ||
	    connect(l.writer, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    (l.reader = accept4(lst, NULL, NULL, SOCK_CLOEXEC)) < 0)
		die("connect");
	close(lst);
	memset(buf, 'x', sizeof(buf));
	for (;;) {
		ssize_t n = send(l.writer, buf, sizeof(buf), MSG_DONTWAIT);
		struct pollfd room = {.fd = l.writer, .events = POLLOUT};
		/* Full once no room comes back: the peer's window is shut,
		 * and what it did not take waits in our send queue. */
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && poll(&room, 1, 200) == 0)
			break;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (n < 0)
			die("send");
		l.sent += (size_t)n;
	}
	if (setsockopt(l.writer, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		die("SO_LINGER");
	return l;
}

/* Reads the peer to its end: the bytes, or -1 if the stream did not end
 * cleanly (a reset). */
static ssize_t drain(int fd)
{
	char buf[65536];
	size_t got = 0;

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n == 0)
			return (ssize_t)got;
		if (n < 0)
			return -1;
		got += (size_t)n;
	}
}

static bool closed(int fd)
{
	return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

/* A pipe's write end handed over; its read end says when it is closed. */
static bool at_eof_now(int rd)
{
	struct pollfd p = {.fd = rd, .events = POLLIN};
	char c;
	return poll(&p, 1, 0) == 1 && read(rd, &c, 1) == 0;
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "not ok - a closer_close waited for the close (watchdog)\n";
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* exiting anyway */
	}
	_exit(1);
}

static void not_the_callers_wait(void)
{
	struct sbx_err err;
	struct runs_closer *c = closer_start(&err);
	struct lingering l = lingering();

	if (!check(c != NULL, "the closer starts"))
		return;
	alarm(ALARM_S);
	closer_close(c, l.writer);
	alarm(0);
	check(true, "closer_close returned while the close waits for its peer");
	check(drain(l.reader) == (ssize_t)l.sent,
	      "the peer reads all %zu bytes, then the end: the closer closed it", l.sent);
	close(l.reader);
	closer_stop(c);
}

static void bounded(void)
{
	struct sbx_err err;
	struct runs_closer *c = closer_start(&err);
	struct lingering busy[RUNS_CLOSER_THREADS];
	int queued[RUNS_CLOSER_QUEUED][2], over[2];
	bool all;

	if (!check(c != NULL, "the closer starts"))
		return;
	/* Every thread waits in a close. */
	alarm(ALARM_S);
	for (size_t i = 0; i < RUNS_CLOSER_THREADS; i++)
		busy[i] = lingering();
	for (size_t i = 0; i < RUNS_CLOSER_THREADS; i++)
		closer_close(c, busy[i].writer);
	/* Each thread has taken one once its descriptor is gone from our
	 * table (close() drops it before it waits; nothing is opened
	 * meanwhile that could take its number). */
	for (size_t i = 0; i < RUNS_CLOSER_THREADS; i++)
		while (!closed(busy[i].writer))
			usleep(1000);
	/* The rest wait their turn: none closed yet. Directories first, up
	 * to their share; one more of them is closed in place while sockets
	 * still find room. */
	for (size_t i = 0; i < RUNS_CLOSER_QUEUED; i++) {
		if (pipe2(queued[i], O_CLOEXEC) < 0)
			die("pipe");
		if (i == RUNS_CLOSER_DIRS_QUEUED) {
			int dir[2];
			if (pipe2(dir, O_CLOEXEC) < 0)
				die("pipe");
			closer_close_dir(c, dir[1]);
			check(closed(dir[1]) && at_eof_now(dir[0]),
			      "past %d waiting, a directory is closed in place",
			      RUNS_CLOSER_DIRS_QUEUED);
			close(dir[0]);
		}
		if (i < RUNS_CLOSER_DIRS_QUEUED)
			closer_close_dir(c, queued[i][1]);
		else
			closer_close(c, queued[i][1]);
	}
	all = true;
	for (size_t i = 0; i < RUNS_CLOSER_QUEUED; i++)
		all &= !at_eof_now(queued[i][0]);
	check(all, "%d waiting descriptors are held open, not closed", RUNS_CLOSER_QUEUED);
	/* One more than it holds: closed by the caller, now. */
	if (pipe2(over, O_CLOEXEC) < 0)
		die("pipe");
	closer_close(c, over[1]);
	check(closed(over[1]) && at_eof_now(over[0]), "past %d, the caller closes in place",
	      SBX_CLOSER_FDS);
	alarm(0);
	/* The peers read: the threads go on and close the rest. */
	all = true;
	for (size_t i = 0; i < RUNS_CLOSER_THREADS; i++) {
		all &= drain(busy[i].reader) == (ssize_t)busy[i].sent;
		close(busy[i].reader);
	}
	check(all, "each busy close ended once its peer read");
	closer_stop(c);
	all = true;
	for (size_t i = 0; i < RUNS_CLOSER_QUEUED; i++) {
		all &= at_eof_now(queued[i][0]);
		close(queued[i][0]);
	}
	check(all, "closer_stop returns with every waiting descriptor closed");
	close(over[0]);
}

static void without_a_closer(void)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		die("pipe");
	closer_close(NULL, p[1]);
	check(closed(p[1]) && at_eof_now(p[0]), "without a closer the caller closes in place");
	close(p[0]);
	closer_close(NULL, -1);
	closer_stop(NULL);
	check(true, "-1 and a NULL closer are nothing to do");
}

int main(void)
{
	signal(SIGALRM, on_alarm);
	signal(SIGPIPE, SIG_IGN);
	not_the_callers_wait();
	bounded();
	without_a_closer();
	return check_done();
}
