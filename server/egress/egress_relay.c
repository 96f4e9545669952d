/* SPDX-License-Identifier: Apache-2.0 */
/* The relay: each direction moves src's bytes to dst through a pipe of
 * its own with splice(2), so no byte is copied through user space. Per
 * readiness event it moves until a side would block (EAGAIN), and takes
 * interest only in what it waits for: src readable while the pipe has
 * room, dst writable while the pipe holds bytes dst did not take.
 *
 * Pipes: a direction's pipe is made when it first has a byte to move (a
 * quiet tunnel holds none). Pipe pages are charged to sbxd's uid, outside
 * any cgroup: past fs.pipe-user-pages-soft every new pipe of that uid (the
 * next run's relays, the helpers') is cut to two pages. So a pipe starts
 * at the kernel's default size and grows (towards EGRESS_PIPE_MAX) only
 * for bulk: when in one pump src filled it and dst took a whole pipe's
 * worth. Grown bytes come from one host-wide budget (a quarter of
 * pipe-user-pages-soft) of which a run may hold a quarter, and so do the
 * new pipes' default sizes (past that, a new pipe has a page); a grown pipe
 * that moved less than four pipes' worth in EGRESS_PIPE_REST_MS (idle or
 * slow), or that dst has not emptied for that long (stalled), goes back to
 * its default size (src waits until it is empty: a pipe holding more than
 * the new size cannot shrink) and gives its bytes back, as it does when
 * the connection ends.
 *
 * splice from a socket into a pipe says EAGAIN both when the socket is
 * empty and when the pipe has no free slot; with bytes in the pipe the two
 * cannot be told apart, so src is then left alone until dst took some
 * (polling it would spin while its bytes wait).
 *
 * TCP urgent data: splice never reads past the urgent mark (tcp_read_sock
 * stops there) and says EAGAIN while the socket stays readable. Both
 * sockets have SO_OOBINLINE, so at the mark (SIOCATMARK) with the pipe
 * empty the urgent byte is read with recv(2) into pre, counted and rate
 * limited like any byte, and splicing goes on after it. The urgent byte's
 * meaning is lost: it is relayed inline, as data, never as urgent data.
 * Whatever else makes a side say readable and give nothing, that side
 * never spins: after two such wakeups in a row it rests on a timer (10 ms,
 * doubling to 250 ms while it goes on), counted in eg->read_rests.
 *
 * Limits: a read takes at most what every bucket of the connection (its
 * entry's, its host-wide destination's) and the run's max_bytes leave;
 * with a bucket empty, that direction stops reading until a timer says
 * tokens are back. The sandbox's bytes sent before the relay (with its
 * head) and an urgent byte wait in pre: they pass the same buckets when
 * written (the proxy's own 200 line does not). EOF one way shuts the other
 * side's writing once the pipe is empty (half-close); both ways shut: the
 * connection ends.
 *
 * One pump reads at most EGRESS_PUMP_BUDGET bytes: a bulk transfer with
 * two fast ends would otherwise keep the loop to itself. What is left is
 * still readable (or the pipe still holds bytes for a writable dst), and
 * the level-triggered events bring it back on the loop's next turn. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egress_internal.h"

static void arm_ms(struct event *ev, int64_t ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};

	event_add(ev, &tv);
}

static void on_throttle(evutil_socket_t fd, short what, void *arg)
{
	struct egress_conn *c = arg;

	c->dir[0].throttled = c->dir[1].throttled = false;
	if (egress_relay_pump(c, 0) == 0)
		egress_relay_pump(c, 1);
}

static void throttle(struct egress_conn *c, struct egress_dir *x, int64_t wait_us)
{
	struct timeval tv = {.tv_sec = wait_us / 1000000, .tv_usec = wait_us % 1000000};

	x->throttled = true;
	event_add(c->throttle, &tv);
}

static bool flushed(const struct egress_dir *x)
{
	return x->pre_off == x->pre_len && x->pipe_len == 0;
}

/* Rate-limited bytes wait in pre while their buckets are empty: dst is not
 * polled for them (it would say writable again and again). */
static bool pre_waits_tokens(const struct egress_dir *x)
{
	return x->throttled && x->pre_counted && x->pre_off < x->pre_len;
}

static bool pipe_room(const struct egress_dir *x)
{
	return x->pipe_r < 0 || x->pipe_len < x->pipe_cap;
}

static void interest(struct egress_conn *c, struct egress_dir *x)
{
	bool want_dst = !flushed(x) && !pre_waits_tokens(x);
	bool want_src = !x->src_eof && !x->throttled && !x->pipe_stalled && !x->resting &&
			!x->shrinking && !c->finishing_max && !c->run->maxed && pipe_room(x);

	if (want_dst != x->dst_on) {
		if (want_dst)
			event_add(x->dst_ev, NULL);
		else
			event_del(x->dst_ev);
		x->dst_on = want_dst;
	}
	if (want_src != x->src_on) {
		if (want_src)
			event_add(x->src_ev, NULL);
		else
			event_del(x->src_ev);
		x->src_on = want_src;
	}
}

/* max_bytes reached by cur's bytes: every other connection of the run is
 * stopped too (relays end once flushed, lookups and connects are refused;
 * heads are refused when they are whole). */
static void run_max_reached(struct egress_conn *cur)
{
	struct sbx_egress_run *run = cur->run;
	struct egress_conn *c = run->conns, *next;

	run->maxed = true;
	egress_record_max(run);
	cur->finishing_max = true;
	for (; c; c = next) {
		next = c->next;
		if (c == cur)
			continue;
		if (c->state == EGRESS_RELAY)
			egress_relay_max(c);
		else if (c->state == EGRESS_RESOLVE || c->state == EGRESS_CONNECT)
			egress_conn_refuse(c, 403, "max_bytes", 0);
	}
}

/* n more bytes of the run's moved: alert_bytes, max_bytes. */
static void run_add(struct egress_conn *c, uint64_t n)
{
	struct sbx_egress_run *run = c->run;

	run->bytes += n;
	if (run->alert_bytes && !run->alerted && run->bytes > run->alert_bytes)
		egress_record_alert(run);
	if (run->max_bytes && !run->maxed && run->bytes >= run->max_bytes)
		run_max_reached(c);
}

static const char *error_reason(int e)
{
	/* The peer went away: an ending, not the proxy's failure. */
	return e == EPIPE || e == ECONNRESET ? "closed" : "error";
}

/* ---- pipes and their budget ---- */

/* A quarter of the uid's soft pipe pages: what is left is the base pipes'
 * (every relaying direction holds one) and everything else sbxd's uid
 * runs. Read once, on the loop, at the first relay. */
static void pipe_budget_read(struct sbx_egress *eg)
{
	FILE *f = fopen("/proc/sys/fs/pipe-user-pages-soft", "re");
	unsigned long long pages = 0;
	long page = sysconf(_SC_PAGESIZE);

	eg->pipe_budget_known = true;
	eg->pipe_budget = EGRESS_PIPE_BUDGET_DEFAULT;
	if (f) {
		/* 0 means no soft limit: the fixed budget still bounds us. */
		if (fscanf(f, "%llu", &pages) == 1 && pages > 0 && page > 0)
			eg->pipe_budget = pages * (unsigned long long)page / 4;
		fclose(f);
	}
}

static int pipe_make(struct egress_conn *c, struct egress_dir *x)
{
	struct sbx_egress *eg = c->eg;
	int p[2];
	int size;

	if (!eg->pipe_budget_known)
		pipe_budget_read(eg);
	if (pipe2(p, O_NONBLOCK | O_CLOEXEC) < 0)
		return -1;
	x->pipe_r = p[0];
	x->pipe_w = p[1];
	size = fcntl(p[1], F_GETPIPE_SZ);
	if (size <= 0)
		size = 65536;
	/* Every relaying direction holds a pipe: past the budget (or the
	 * run's share) of default-size ones, a new one has a page, which
	 * still moves every byte, a page a splice (bulk may grow it). */
	if (size > EGRESS_PIPE_SMALL &&
	    (eg->pipe_made + (uint64_t)size > eg->pipe_budget ||
	     c->run->pipe_made + (uint64_t)size > eg->pipe_budget / 4)) {
		int small = fcntl(p[1], F_SETPIPE_SZ, EGRESS_PIPE_SMALL);

		if (small > 0)
			size = small;
	}
	x->pipe_cap = x->pipe_base = (size_t)size;
	eg->pipe_made += x->pipe_base;
	c->run->pipe_made += x->pipe_base;
	x->drained_us = egress_now_us();
	return 0;
}

static void pipe_charge(struct egress_conn *c, struct egress_dir *x, size_t cap)
{
	size_t charged = cap > x->pipe_base ? cap - x->pipe_base : 0;

	c->eg->pipe_grown = c->eg->pipe_grown - x->pipe_charged + charged;
	c->run->pipe_grown = c->run->pipe_grown - x->pipe_charged + charged;
	x->pipe_charged = charged;
	x->pipe_cap = cap;
}

static void on_pipe_check(struct egress_conn *c, int d);

static void on_pipe_ev0(evutil_socket_t fd, short what, void *arg)
{
	on_pipe_check(arg, 0);
}

static void on_pipe_ev1(evutil_socket_t fd, short what, void *arg)
{
	on_pipe_check(arg, 1);
}

/* Bulk: grows x's (empty) pipe as far as the budgets let it. */
static void pipe_grow(struct egress_conn *c, int d, int64_t now)
{
	struct egress_dir *x = &c->dir[d];
	struct sbx_egress *eg = c->eg;
	uint64_t host_left =
	    eg->pipe_budget > eg->pipe_grown ? eg->pipe_budget - eg->pipe_grown : 0;
	uint64_t run_share = eg->pipe_budget / 4;
	uint64_t run_left = run_share > c->run->pipe_grown ? run_share - c->run->pipe_grown : 0;
	uint64_t most =
	    x->pipe_base + (host_left < run_left ? host_left : run_left) + x->pipe_charged;
	size_t want = x->pipe_cap;
	int size;

	if (most > EGRESS_PIPE_MAX)
		most = EGRESS_PIPE_MAX;
	/* Pipe sizes are powers of two pages: the largest one within most. */
	while ((uint64_t)want * 2 <= most)
		want *= 2;
	if (want <= x->pipe_cap)
		return;
	if (!x->pipe_ev &&
	    !(x->pipe_ev = evtimer_new(eg->base, d == 0 ? on_pipe_ev0 : on_pipe_ev1, c)))
		return;
	size = fcntl(x->pipe_w, F_SETPIPE_SZ, (int)want);
	if (size <= 0 || (size_t)size <= x->pipe_cap) {
		/* fs.pipe-max-size, or the uid is past its soft pages: not
		 * again for a while. */
		x->grow_after_us = now + (int64_t)EGRESS_PIPE_REST_MS * 1000 * 5;
		return;
	}
	pipe_charge(c, x, (size_t)size);
	x->drained_us = now;
	x->checked_bytes = x->bytes;
	arm_ms(x->pipe_ev, EGRESS_PIPE_REST_MS);
}

/* x's pipe back to its default size (it is empty): its bytes returned. */
static void pipe_shrink(struct egress_conn *c, struct egress_dir *x, int64_t now)
{
	int size = fcntl(x->pipe_w, F_SETPIPE_SZ, (int)x->pipe_base);

	x->shrinking = false;
	if (size > 0)
		pipe_charge(c, x, (size_t)size);
	/* Not grown again at once: it was idle or dst was slow. */
	x->grow_after_us = now + (int64_t)EGRESS_PIPE_REST_MS * 1000 * 5;
	if (x->pipe_ev)
		event_del(x->pipe_ev);
}

/* A grown pipe's check, every EGRESS_PIPE_REST_MS: back to the default
 * size when the direction no longer needs it (it moved less than four
 * pipes' worth since the last check: idle, or slow enough for a small
 * one) or dst did not empty it all that time (stalled). */
static void on_pipe_check(struct egress_conn *c, int d)
{
	struct egress_dir *x = &c->dir[d];
	int64_t now = egress_now_us();
	bool slow = x->bytes - x->checked_bytes < 4 * (uint64_t)x->pipe_cap;
	bool stalled =
	    x->pipe_len > 0 && now - x->drained_us >= (int64_t)EGRESS_PIPE_REST_MS * 1000;

	x->checked_bytes = x->bytes;
	if (!x->pipe_charged)
		return;
	if ((slow || stalled) && x->pipe_len == 0) {
		pipe_shrink(c, x, now);
		interest(c, x);
		return;
	}
	if (slow || stalled)
		/* Stop filling it: the pump shrinks it once dst emptied it. */
		x->shrinking = true;
	arm_ms(x->pipe_ev, EGRESS_PIPE_REST_MS);
	interest(c, x);
}

/* ---- a side that says readable and gives nothing ---- */

static void rest_over(struct egress_conn *c, int d)
{
	c->dir[d].resting = false;
	egress_relay_pump(c, d);
}

static void on_rest0(evutil_socket_t fd, short what, void *arg)
{
	rest_over(arg, 0);
}

static void on_rest1(evutil_socket_t fd, short what, void *arg)
{
	rest_over(arg, 1);
}

/* -1: out of memory (c must end). */
static int rest(struct egress_conn *c, int d)
{
	struct egress_dir *x = &c->dir[d];

	if (!x->rest_ev &&
	    !(x->rest_ev = evtimer_new(c->eg->base, d == 0 ? on_rest0 : on_rest1, c)))
		return -1;
	if (x->rests++ == 0)
		fprintf(stderr,
			"sbxd: egress: run %s: connection %llu: the %s side says readable and "
			"gives nothing: polled less often\n",
			c->run->run_id, (unsigned long long)c->rec.connection,
			d == 0 ? "sandbox's" : "destination's");
	c->eg->read_rests++;
	x->rest_ms = x->rest_ms ? x->rest_ms * 2 : EGRESS_READ_REST_MS;
	if (x->rest_ms > EGRESS_READ_REST_MAX_MS)
		x->rest_ms = EGRESS_READ_REST_MAX_MS;
	x->resting = true;
	arm_ms(x->rest_ev, x->rest_ms);
	return 0;
}

/* ---- urgent data ---- */

/* src said EAGAIN with the pipe empty: at the urgent mark, its byte is
 * read into pre (empty, so the stream keeps its order). 1: read; 0: not at
 * the mark; -1 with errno: c must end. */
static int urgent_read(struct egress_dir *x)
{
	int mark = 0;
	char *b;
	ssize_t n;

	if (ioctl(x->src, SIOCATMARK, &mark) < 0 || !mark)
		return 0;
	if (!(b = malloc(1))) {
		errno = ENOMEM;
		return -1;
	}
	do
		n = recv(x->src, b, 1, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		free(b);
		/* EOF or nothing after all: splice says so next time. */
		return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK ? -1 : 0;
	}
	free(x->pre);
	x->pre = b;
	x->pre_off = 0;
	x->pre_len = 1;
	x->pre_counted = true;
	return 1;
}

int egress_relay_readable(struct egress_conn *c, int d)
{
	c->dir[d].readable = true;
	return egress_relay_pump(c, d);
}

int egress_relay_pump(struct egress_conn *c, int d)
{
	struct egress_dir *x = &c->dir[d];
	struct sbx_egress_run *run = c->run;
	int64_t now = egress_now_us();
	uint64_t before = x->bytes;
	const char *end = NULL;
	bool blocked = false, moved = false, filled = false, nothing = false;
	bool woken_readable = x->readable;
	uint64_t budget = EGRESS_PUMP_BUDGET, out = 0;

	x->readable = false;
	for (;;) {
		while (!blocked && x->pre_off < x->pre_len) {
			size_t len = x->pre_len - x->pre_off;
			ssize_t n;

			if (x->pre_counted) {
				/* The sandbox's (or destination's) own bytes:
				 * through the buckets like spliced ones. */
				int64_t wait_us;
				uint64_t allow = egress_limits_bytes(c, len, now, &wait_us);

				if (allow == 0) {
					throttle(c, x, wait_us);
					break;
				}
				len = (size_t)allow;
			}
			n = send(x->dst, x->pre + x->pre_off, len, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n > 0) {
				x->pre_off += (size_t)n;
				x->pipe_stalled = false;
				if (x->pre_counted) {
					x->bytes += (uint64_t)n;
					egress_limits_take(c, (uint64_t)n, now);
				}
			} else if (n < 0 && errno == EINTR) {
				continue;
			} else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				blocked = true;
			} else {
				end = error_reason(errno);
				break;
			}
		}
		while (!end && !blocked && x->pre_off == x->pre_len && x->pipe_len > 0) {
			ssize_t n = splice(x->pipe_r, NULL, x->dst, NULL, x->pipe_len,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);

			if (n > 0) {
				x->pipe_len -= (size_t)n;
				x->bytes += (uint64_t)n;
				out += (uint64_t)n;
				x->pipe_stalled = false;
				if (x->pipe_len == 0)
					x->drained_us = now;
			} else if (n < 0 && errno == EINTR) {
				continue;
			} else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				blocked = true;
			} else {
				end = n == 0 ? "error" : error_reason(errno);
			}
		}
		if (end)
			break;
		if (x->pipe_len == 0 && x->pipe_r >= 0) {
			if (x->shrinking)
				pipe_shrink(c, x, now);
			else if (filled && out >= x->pipe_cap && x->pipe_cap < EGRESS_PIPE_MAX &&
				 now >= x->grow_after_us)
				/* Bulk: src filled the pipe and dst took a
				 * whole one in this pump. */
				pipe_grow(c, d, now);
		}
		if (x->src_eof || x->throttled || x->pipe_stalled || x->resting || x->shrinking ||
		    c->finishing_max || run->maxed)
			break;
		if (!pipe_room(x) || budget == 0)
			break;
		if (x->pipe_r < 0) {
			/* No pipe before src has a byte (or its end): a
			 * quiet direction holds none. */
			char byte;
			ssize_t k = recv(x->src, &byte, 1, MSG_PEEK | MSG_DONTWAIT);

			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				nothing = true;
				break;
			}
			if (k < 0) {
				end = error_reason(errno);
				break;
			}
			if (k == 0) {
				x->src_eof = true;
				moved = true;
				continue;
			}
		}
		if (x->pipe_r < 0 && pipe_make(c, x) < 0) {
			fprintf(stderr, "sbxd: egress: run %s: relay: no pipe: %s\n", run->run_id,
				errno == EMFILE || errno == ENFILE ? "out of descriptors"
								   : "out of memory");
			end = "error";
			break;
		}

		uint64_t want = x->pipe_cap - x->pipe_len;
		int64_t wait_us;
		uint64_t allow;
		ssize_t n;

		if (run->max_bytes && run->max_bytes - run->bytes < want)
			want = run->max_bytes - run->bytes;
		allow = egress_limits_bytes(c, want, now, &wait_us);
		if (allow == 0) {
			throttle(c, x, wait_us);
			break;
		}
		n = splice(x->src, NULL, x->pipe_w, NULL, allow, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			moved = true;
			budget = (uint64_t)n < budget ? budget - (uint64_t)n : 0;
			x->pipe_len += (size_t)n;
			if (x->pipe_len >= x->pipe_cap)
				filled = true;
			egress_limits_take(c, (uint64_t)n, now);
			run_add(c, (uint64_t)n);
			continue;
		}
		if (n == 0) {
			x->src_eof = true;
			moved = true;
			if (blocked)
				break;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			int r;

			if (x->pipe_len > 0) {
				x->pipe_stalled = true;
				break;
			}
			if (x->pre_off < x->pre_len) {
				/* Pending pre: an urgent byte waits for it
				 * (the stream keeps its order); else src is
				 * empty and its event says when it is not. */
				int mark = 0;

				if (ioctl(x->src, SIOCATMARK, &mark) == 0 && mark)
					x->pipe_stalled = true;
				break;
			}
			r = urgent_read(x);
			if (r < 0) {
				end = error_reason(errno);
				break;
			}
			if (r > 0) {
				/* allow >= 1: its tokens are taken as it is
				 * written (pre_counted). */
				moved = true;
				run_add(c, 1);
				continue;
			}
			nothing = true;
			break;
		}
		end = error_reason(errno);
		break;
	}
	if (x->bytes != before || moved) {
		c->last_us = now;
		if (x->bytes != before)
			egress_record_bytes(c);
	}
	if (end) {
		egress_conn_end(c, end);
		return -1;
	}
	if (x->bytes != before || moved) {
		x->empty_wakes = 0;
		x->rest_ms = 0;
	} else if (woken_readable && nothing && ++x->empty_wakes >= 2 && rest(c, d) < 0) {
		/* Readable twice in a row and nothing to read (one such wakeup
		 * is normal: another pump may have read it first). */
		egress_conn_end(c, "error");
		return -1;
	}
	if (x->src_eof && flushed(x) && !x->dst_shut) {
		shutdown(x->dst, SHUT_WR);
		x->dst_shut = true;
	}
	if (c->dir[0].dst_shut && c->dir[1].dst_shut) {
		egress_conn_end(c, "closed");
		return -1;
	}
	if (c->finishing_max && flushed(&c->dir[0]) && flushed(&c->dir[1])) {
		egress_conn_end(c, "max_bytes");
		return -1;
	}
	interest(c, x);
	return 0;
}

void egress_relay_max(struct egress_conn *c)
{
	c->finishing_max = true;
	if (flushed(&c->dir[0]) && flushed(&c->dir[1])) {
		egress_conn_end(c, "max_bytes");
		return;
	}
	interest(c, &c->dir[0]);
	interest(c, &c->dir[1]);
}

void egress_relay_exec_ended(struct egress_conn *c)
{
	/* The sandbox's last bytes (in its socket or the pipe) go on if the
	 * destination takes them now; then c ends, whatever is left. */
	if (egress_relay_pump(c, 0) < 0)
		return;
	egress_conn_end(c, "exec_ended");
}

int egress_relay_start(struct egress_conn *c)
{
	struct egress_dir *out = &c->dir[0], *in = &c->dir[1];
	struct sbx_egress_run *run = c->run;

	out->src = c->cfd;
	out->dst = c->ufd;
	out->src_ev = c->cread;
	out->dst_ev = c->uwrite;
	in->src = c->ufd;
	in->dst = c->cfd;
	in->src_ev = c->uread;
	in->dst_ev = c->cwrite;
	/* cread and cwrite served the head: start from a known state. */
	event_del(c->cread);
	event_del(c->cwrite);
	event_del(c->uwrite);
	/* The pipes are made when a direction first has a byte to move. */
	if (!(c->throttle = evtimer_new(c->eg->base, on_throttle, c))) {
		fprintf(stderr, "sbxd: egress: run %s: relay: out of memory\n", run->run_id);
		egress_conn_end(c, "error");
		return -1;
	}
	/* The bytes the client sent past its head are its own: they count
	 * toward max_bytes (and are cut to it). */
	if (out->pre_len) {
		if (run->max_bytes && run->max_bytes - run->bytes < out->pre_len)
			out->pre_len = run->max_bytes - run->bytes;
		if (out->pre_len)
			run_add(c, out->pre_len);
	}
	c->last_us = egress_now_us();
	egress_conn_arm_timer(c, (int64_t)c->eg->idle_seconds * 1000000);
	if (c->finishing_max && flushed(out) && flushed(in)) {
		egress_conn_end(c, "max_bytes");
		return -1;
	}
	/* No interest yet: the caller pumps both ways at once, and each
	 * pump takes the interest it needs. */
	return 0;
}

void egress_relay_free(struct egress_conn *c)
{
	for (int d = 0; d < 2; d++) {
		struct egress_dir *x = &c->dir[d];

		if (x->pipe_charged)
			pipe_charge(c, x, x->pipe_base);
		if (x->pipe_r >= 0) {
			c->eg->pipe_made -= x->pipe_base;
			c->run->pipe_made -= x->pipe_base;
			close(x->pipe_r);
		}
		if (x->pipe_w >= 0)
			close(x->pipe_w);
		x->pipe_r = x->pipe_w = -1;
		if (x->pipe_ev)
			event_free(x->pipe_ev);
		if (x->rest_ev)
			event_free(x->rest_ev);
		x->pipe_ev = x->rest_ev = NULL;
	}
	if (c->throttle)
		event_free(c->throttle);
	c->throttle = NULL;
}
