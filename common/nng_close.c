/* SPDX-License-Identifier: Apache-2.0 */
#include "nng_close.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* nng 1.5.2 can hang in nng_close when connections are busy as it closes
 * (nanomsg/nng#1543, #1813: a pipe's reaper waits for a task that never
 * runs), even with every operation of ours stopped first. So the close runs
 * on a thread of its own and is waited for, bounded. */
struct closer {
	nng_socket sock;
	pthread_mutex_t lock;
	pthread_cond_t done_cv;
	bool done;
};

static void *close_socket(void *arg)
{
	struct closer *cl = arg;

	nng_close(cl->sock);
	pthread_mutex_lock(&cl->lock);
	cl->done = true;
	pthread_cond_signal(&cl->done_cv);
	pthread_mutex_unlock(&cl->lock);
	return NULL;
}

bool sbx_nng_close_bounded(nng_socket sock, int timeout_ms)
{
	struct closer *cl = calloc(1, sizeof(*cl));
	pthread_condattr_t attr;
	struct timespec until;
	pthread_t thread;
	bool done;

	if (!cl || pthread_condattr_init(&attr) != 0) {
		free(cl);
		nng_close(sock); /* unbounded, but nothing else is possible */
		return true;
	}
	cl->sock = sock;
	pthread_mutex_init(&cl->lock, NULL);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&cl->done_cv, &attr);
	pthread_condattr_destroy(&attr);
	if (pthread_create(&thread, NULL, close_socket, cl) != 0) {
		close_socket(cl);
		thread = pthread_self();
	}
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&cl->lock);
	while (!cl->done && pthread_cond_timedwait(&cl->done_cv, &cl->lock, &until) != ETIMEDOUT)
		;
	done = cl->done;
	pthread_mutex_unlock(&cl->lock);
	if (!done) {
		pthread_detach(thread);
		return false;
	}
	if (!pthread_equal(thread, pthread_self()))
		pthread_join(thread, NULL);
	pthread_cond_destroy(&cl->done_cv);
	pthread_mutex_destroy(&cl->lock);
	free(cl);
	return true;
}
