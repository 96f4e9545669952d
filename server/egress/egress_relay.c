/* SPDX-License-Identifier: Apache-2.0 */
/* The relay: each direction moves src's bytes to dst through a pipe of
 * its own with splice(2), so no byte is copied through user space. Per
 * readiness event it moves until a side would block (EAGAIN), and takes
 * interest only in what it waits for: src readable while the pipe has
 * room, dst writable while the pipe holds bytes dst did not take.
 *
 * A pipe starts at the kernel's default size and grows to EGRESS_PIPE_MAX
 * (if fs.pipe-max-size and the user's pipe pages allow) the first time one
 * read fills it: bulk transfers get large splices, small requests do not
 * hold a megabyte of pipe each.
 *
 * splice from a socket into a pipe says EAGAIN both when the socket is
 * empty and when the pipe has no free slot; with bytes in the pipe the two
 * cannot be told apart, so src is then left alone until dst took some
 * (polling it would spin while its bytes wait).
 *
 * Limits: a read takes at most what every bucket of the connection (its
 * entry's, its host-wide destination's) and the run's max_bytes leave;
 * with a bucket empty, that direction stops reading until a timer says
 * tokens are back. EOF one way shuts the other side's writing once the
 * pipe is empty (half-close); both ways shut: the connection ends.
 *
 * One pump reads at most EGRESS_PUMP_BUDGET bytes: a bulk transfer with
 * two fast ends would otherwise keep the loop to itself. What is left is
 * still readable (or the pipe still holds bytes for a writable dst), and
 * the level-triggered events bring it back on the loop's next turn. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egress_internal.h"

static void on_throttle(evutil_socket_t fd, short what, void *arg)
{
	struct egress_conn *c = arg;

	c->dir[0].throttled = c->dir[1].throttled = false;
	if (egress_relay_pump(c, 0) == 0)
		egress_relay_pump(c, 1);
}

static bool flushed(const struct egress_dir *x)
{
	return x->pre_off == x->pre_len && x->pipe_len == 0;
}

static void interest(struct egress_conn *c, struct egress_dir *x)
{
	bool want_dst = !flushed(x);
	bool want_src = !x->src_eof && !x->throttled && !x->pipe_stalled && !c->finishing_max &&
			!c->run->maxed && x->pipe_len < x->pipe_cap;

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

int egress_relay_pump(struct egress_conn *c, int d)
{
	struct egress_dir *x = &c->dir[d];
	struct sbx_egress_run *run = c->run;
	int64_t now = egress_now_us();
	uint64_t before = x->bytes;
	const char *end = NULL;
	bool blocked = false, moved = false;
	uint64_t budget = EGRESS_PUMP_BUDGET;

	for (;;) {
		while (!blocked && x->pre_off < x->pre_len) {
			ssize_t n = send(x->dst, x->pre + x->pre_off, x->pre_len - x->pre_off,
					 MSG_NOSIGNAL | MSG_DONTWAIT);

			if (n > 0) {
				x->pre_off += (size_t)n;
				if (x->pre_counted)
					x->bytes += (uint64_t)n;
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
				x->pipe_stalled = false;
			} else if (n < 0 && errno == EINTR) {
				continue;
			} else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				blocked = true;
			} else {
				end = n == 0 ? "error" : error_reason(errno);
			}
		}
		if (end || x->src_eof || x->throttled || x->pipe_stalled || c->finishing_max ||
		    run->maxed)
			break;
		if (x->pipe_len >= x->pipe_cap || budget == 0)
			break;

		uint64_t want = x->pipe_cap - x->pipe_len;
		int64_t wait_us;
		uint64_t allow;
		ssize_t n;

		if (run->max_bytes && run->max_bytes - run->bytes < want)
			want = run->max_bytes - run->bytes;
		allow = egress_limits_bytes(c, want, now, &wait_us);
		if (allow == 0) {
			struct timeval tv = {.tv_sec = wait_us / 1000000,
					     .tv_usec = wait_us % 1000000};

			x->throttled = true;
			event_add(c->throttle, &tv);
			break;
		}
		n = splice(x->src, NULL, x->pipe_w, NULL, allow, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			moved = true;
			budget = (uint64_t)n < budget ? budget - (uint64_t)n : 0;
			x->pipe_len += (size_t)n;
			egress_limits_take(c, (uint64_t)n, now);
			if (x->pipe_len >= x->pipe_cap && !x->grown) {
				int size = fcntl(x->pipe_w, F_SETPIPE_SZ, EGRESS_PIPE_MAX);

				x->grown = true;
				if (size > 0 && (size_t)size > x->pipe_cap)
					x->pipe_cap = (size_t)size;
			}
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
			if (x->pipe_len > 0)
				x->pipe_stalled = true;
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

static int pipe_make(struct egress_dir *x)
{
	int p[2];
	int size;

	if (pipe2(p, O_NONBLOCK | O_CLOEXEC) < 0)
		return -1;
	x->pipe_r = p[0];
	x->pipe_w = p[1];
	size = fcntl(p[1], F_GETPIPE_SZ);
	x->pipe_cap = size > 0 ? (size_t)size : 65536;
	return 0;
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
	if (pipe_make(out) < 0 || pipe_make(in) < 0 ||
	    !(c->throttle = evtimer_new(c->eg->base, on_throttle, c))) {
		fprintf(stderr, "sbxd: egress: run %s: relay: %s\n", run->run_id,
			errno ? "out of descriptors or memory" : "out of memory");
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

		if (x->pipe_r >= 0)
			close(x->pipe_r);
		if (x->pipe_w >= 0)
			close(x->pipe_w);
		x->pipe_r = x->pipe_w = -1;
	}
	if (c->throttle)
		event_free(c->throttle);
	c->throttle = NULL;
}
