/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the worker pools (server/rpc/rpc_pool.c), with real threads:
 * every job runs once, a full queue refuses at once instead of growing,
 * one owner's flood gets half the workers and half the queue while another
 * owner's job still runs at once, stopping lets running jobs finish and
 * hands queued ones to drop, and rpc_pool_pending_match finds a job while
 * it waits in the queue and while a worker has it until it is unlisted,
 * and only its owner's. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "clock.h"
#include "rpc_pool.h"

/* A gate the blocking jobs wait at, and what happened to the jobs. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t changed;
	bool open;
	int started, ran, dropped, quick;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void blocking(struct rpc_job *job)
{
	(void)job;
	pthread_mutex_lock(&g.lock);
	g.started++;
	pthread_cond_broadcast(&g.changed);
	while (!g.open)
		pthread_cond_wait(&g.changed, &g.lock);
	g.ran++;
	pthread_cond_broadcast(&g.changed);
	pthread_mutex_unlock(&g.lock);
}

/* A job that does not wait at the gate. */
static void quick(struct rpc_job *job)
{
	(void)job;
	pthread_mutex_lock(&g.lock);
	g.quick++;
	pthread_cond_broadcast(&g.changed);
	pthread_mutex_unlock(&g.lock);
}

static void dropped(struct rpc_job *job)
{
	(void)job;
	pthread_mutex_lock(&g.lock);
	g.dropped++;
	pthread_mutex_unlock(&g.lock);
}

static void reset(void)
{
	pthread_mutex_lock(&g.lock);
	g.open = false;
	g.started = g.ran = g.dropped = g.quick = 0;
	pthread_mutex_unlock(&g.lock);
}

static void set_open(void)
{
	pthread_mutex_lock(&g.lock);
	g.open = true;
	pthread_cond_broadcast(&g.changed);
	pthread_mutex_unlock(&g.lock);
}

/* *counter, read under the lock (workers may be writing it). */
static int count(const int *counter)
{
	int n;

	pthread_mutex_lock(&g.lock);
	n = *counter;
	pthread_mutex_unlock(&g.lock);
	return n;
}

/* Waits (at most 10 s) until *counter reaches n; false on timeout. */
static bool await(int *counter, int n)
{
	int64_t deadline = sbx_mono_ms() + 10000;
	bool reached;

	pthread_mutex_lock(&g.lock);
	while (*counter < n && sbx_mono_ms() < deadline) {
		struct timespec at = sbx_mono_after_ms(1000);

		pthread_cond_timedwait(&g.changed, &g.lock, &at);
	}
	reached = *counter >= n;
	pthread_mutex_unlock(&g.lock);
	return reached;
}

/* Waits (at most 10 s) until no worker of p runs a job: a job counts as
 * ran inside its run, a little before its worker is done with it. */
static bool await_idle(struct rpc_pool *p)
{
	int64_t deadline = sbx_mono_ms() + 10000;
	size_t busy = 1, queued = 1;

	while (busy + queued && sbx_mono_ms() < deadline) {
		rpc_pool_load(p, &busy, &queued);
		if (busy + queued)
			usleep(1000);
	}
	return busy + queued == 0;
}

static const char *const owners[] = {"a", "b", "c", "d", "e", "f", "g", "h"};

static bool submit(struct rpc_pool *p, struct rpc_job *job)
{
	return rpc_pool_submit(p, job) == RPC_POOL_TAKEN;
}

static void test_bounded_queue(void)
{
	struct rpc_pool p;
	struct rpc_job jobs[6];
	struct sbx_err err;
	bool taken = true;

	reset();
	/* One owner each: shares do not come into it here. */
	for (size_t i = 0; i < 6; i++)
		jobs[i] = (struct rpc_job){.run = blocking, .owner = owners[i]};
	if (!check(rpc_pool_start(&p, "test", 2, 3, &err) == 0, "a pool of 2 workers starts"))
		return;
	taken &= submit(&p, &jobs[0]) && submit(&p, &jobs[1]);
	check(taken && await(&g.started, 2), "both workers take a job");
	for (size_t i = 2; i < 5; i++)
		taken &= submit(&p, &jobs[i]);
	check(taken, "three more wait in the queue (queue_max 3)");
	check(!submit(&p, &jobs[5]), "a full queue refuses the next job at once");
	set_open();
	check(await(&g.ran, 5), "every job taken runs (%d ran)", count(&g.ran));
	check(submit(&p, &jobs[5]) && await(&g.ran, 6),
	      "with the queue drained, submitting works again");
	rpc_pool_stop(&p, dropped);
	check(g.ran == 6 && g.dropped == 0, "stopping an idle pool drops nothing");
	check(!submit(&p, &jobs[0]), "a stopped pool refuses jobs");
	rpc_pool_destroy(&p);
}

static void *stopper(void *arg)
{
	rpc_pool_stop(arg, dropped);
	return NULL;
}

static void test_stop_drops_queued(void)
{
	struct rpc_pool p;
	struct rpc_job jobs[3];
	struct sbx_err err;
	pthread_t t;
	bool stopping = false;

	reset();
	for (size_t i = 0; i < 3; i++)
		jobs[i] = (struct rpc_job){.run = blocking, .owner = owners[i]};
	if (!check(rpc_pool_start(&p, "stop", 1, 2, &err) == 0, "a pool of 1 worker starts"))
		return;
	submit(&p, &jobs[0]);
	await(&g.started, 1);
	check(submit(&p, &jobs[1]) && submit(&p, &jobs[2]),
	      "two jobs queue behind the running one");
	pthread_create(&t, NULL, stopper, &p);
	/* The running job finishes only once the pool is stopping, so that
	 * the queued ones cannot start. */
	for (int i = 0; i < 10000 && !stopping; i++) {
		pthread_mutex_lock(&p.lock);
		stopping = p.stopping;
		pthread_mutex_unlock(&p.lock);
		if (!stopping)
			nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	}
	check(stopping, "stop marks the pool stopping while a job still runs");
	set_open();
	pthread_join(t, NULL);
	check(g.ran == 1, "stop lets the running job finish (%d ran)", g.ran);
	check(g.dropped == 2, "and hands both queued jobs to drop (%d dropped)", g.dropped);
	check(!submit(&p, &jobs[0]), "submitting after stop fails");
	rpc_pool_destroy(&p);
}

static void test_shares(void)
{
	struct rpc_pool p;
	struct rpc_job flood[16], other[2];
	struct sbx_err err;
	int taken = 0;
	enum rpc_pool_verdict v = RPC_POOL_TAKEN;

	reset();
	if (!check(rpc_pool_start(&p, "share", 8, 8, &err) == 0, "a pool of 8 workers starts"))
		return;
	/* Issue 7: 16 long polls of one identity took every worker and every
	 * queue slot, and everyone else got RESOURCE_EXHAUSTED. */
	for (size_t i = 0; i < 16; i++) {
		flood[i] = (struct rpc_job){.run = blocking, .owner = "uid:1000"};
		if ((v = rpc_pool_submit(&p, &flood[i])) != RPC_POOL_TAKEN)
			break;
		taken++;
	}
	check(taken == 8 && v == RPC_POOL_SHARE,
	      "one owner gets half the workers and half the queue (%d taken), then SHARE", taken);
	check(await(&g.started, 4), "four of its jobs run");
	nanosleep(&(struct timespec){.tv_nsec = 50000000}, NULL);
	check(count(&g.started) == 4,
	      "and no more: the other four wait though workers are idle (%d)", count(&g.started));
	for (size_t i = 0; i < 2; i++)
		other[i] = (struct rpc_job){.run = quick, .owner = i ? "token:bob" : "token:alice"};
	check(submit(&p, &other[0]) && submit(&p, &other[1]) && await(&g.quick, 2),
	      "other owners' jobs run at once, past the queued flood");
	set_open();
	check(await(&g.ran, 8), "the flood's queued jobs run as its running ones end (%d)",
	      count(&g.ran));
	check(submit(&p, &flood[8]) && await(&g.ran, 9),
	      "with its jobs done, the owner submits again");
	rpc_pool_stop(&p, dropped);
	rpc_pool_destroy(&p);
}

static bool is_job(const struct rpc_job *job, const void *arg)
{
	return job == arg;
}

static void test_pending_match(void)
{
	struct sbx_err err = {0};
	struct rpc_pool p;
	struct rpc_job a1 = {.run = blocking, .owner = "a"}, a2 = {.run = blocking, .owner = "a"};
	struct rpc_job b1 = {.run = blocking, .owner = "b"}, never = {.owner = "a"};

	reset();
	check(rpc_pool_start(&p, "test", 1, 4, &err) == 0, "pool started (%s)", err.msg);
	check(submit(&p, &a1) && await(&g.started, 1), "a's first job runs");
	check(submit(&p, &a2) && submit(&p, &b1), "a's second and b's first wait");
	check(rpc_pool_pending_match(&p, "a", is_job, &a1),
	      "a running job not yet unlisted is found (taken off the queue, still pending)");
	check(rpc_pool_pending_match(&p, "a", is_job, &a2), "a waiting job is found");
	check(!rpc_pool_pending_match(&p, "b", is_job, &a2), "... by its own owner only");
	check(!rpc_pool_pending_match(&p, "b", is_job, &a1), "... running or waiting");
	check(rpc_pool_pending_match(&p, "b", is_job, &b1), "b's waiting job is found");
	rpc_pool_unlist(&a1);
	check(!rpc_pool_pending_match(&p, "a", is_job, &a1),
	      "a running job is no longer found once unlisted (its answer about to go)");
	rpc_pool_unlist(&a1);
	rpc_pool_unlist(&never);
	check(rpc_pool_pending_match(&p, "a", is_job, &a2) &&
		  rpc_pool_pending_match(&p, "b", is_job, &b1),
	      "unlisting again, or a job never taken, changes nothing else");
	set_open();
	check(await(&g.ran, 3) && await_idle(&p), "all three ran");
	check(!rpc_pool_pending_match(&p, "a", is_job, &a2) &&
		  !rpc_pool_pending_match(&p, "b", is_job, &b1),
	      "jobs that ran are not pending, unlisted by their workers");
	rpc_pool_stop(&p, dropped);
	rpc_pool_destroy(&p);
}

int main(void)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&g.changed, &attr);
	pthread_condattr_destroy(&attr);
	test_bounded_queue();
	test_stop_drops_queued();
	test_shares();
	test_pending_match();
	return check_done();
}
