/* SPDX-License-Identifier: Apache-2.0 */
/* One run's record: allocation, references, its lock and condvar, and the
 * alerts and audit lines it collects (run.h says who guards what). */
#include "run.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "audit.h"
#include "clock.h"
#include "egress.h"
#include "run_exec.h"
#include "runs_artifacts.h"
#include "runs_closer.h"
#include "runs_inputs.h"
#include "runs_manager.h"
#include "text.h"

void cond_init_monotonic(pthread_cond_t *cv)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

struct sbx_run *run_alloc(struct sbx_runs *runs)
{
	struct sbx_run *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	atomic_init(&r->refs, 1);
	atomic_init(&r->last_call, sbx_mono_ms());
	r->runs = runs;
	r->dir_fd = r->data_fd = r->staging_fd = r->spill_fd = -1;
	r->ctl = r->out_fd = r->err_pipe = r->wake = r->pidfd = -1;
	r->reader.sock = -1;
	r->pid = -1;
	r->image = (struct img_hold)IMG_HOLD_INIT;
	r->exec_tail = &r->execs;
	r->events_tail = &r->events;
	r->added_tail = &r->added;
	run_state_init(r);
	pthread_mutex_init(&r->mu, NULL);
	/* CLOCK_MONOTONIC, so a clock step neither cuts a long poll short nor
	 * stretches it. */
	cond_init_monotonic(&r->cv);
	return r;
}

void run_release_image(struct sbx_run *r)
{
	if (r->image.lock_fd < 0 && !r->image.rootfs)
		return;
	img_hold_release(&r->image);
	/* Whatever img_hold_release leaves, a second call finds nothing. */
	r->image = (struct img_hold)IMG_HOLD_INIT;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* The run's directories, removed by now as a rule (its teardown, or a
 * CreateRun that failed; not when that removal failed, or for a run the
 * drain dropped unfinished, whose directory stays for the next start):
 * the last close of a removed directory frees its inode, which on ext4
 * waits for the journal (0.3 ms p50 for the four, at times over 10 ms,
 * measured on a Teardown's path before its answer). Nothing of the run is
 * reached through them any more, so the closer may take that wait (in
 * place when its places for directories are taken). */
static void close_removed_dir(struct sbx_run *r, int *fd)
{
	closer_close_dir(r->runs ? r->runs->closer : NULL, *fd);
	*fd = -1;
}

static void run_free(struct sbx_run *r)
{
	struct run_exec *e, *next;

	run_state_count(r->state, -1);
	for (e = r->execs; e; e = next) {
		next = e->next;
		/* A watch its monitor did not hand over (an exec the run's end
		 * killed) is closed here, on the time of whoever ends the run,
		 * not through the closer the other runs' monitors share. */
		exec_free(e);
	}
	for (size_t i = 0; i < r->n_alerts; i++)
		free(r->alerts[i]);
	for (size_t i = 0; i < r->n_labels; i++) {
		free(r->label_keys[i]);
		free(r->label_values[i]);
	}
	free(r->label_keys);
	free(r->label_values);
	for (struct run_event *ev = r->events, *evn; ev; ev = evn) {
		evn = ev->next;
		json_decref(ev->fields);
		free(ev);
	}
	/* Closed by now but for a CreateRun that failed: then nothing of the
	 * run can be in the proxy but its empty place. */
	sbx_egress_run_free(r->egress);
	/* Released by its teardown; this is for a CreateRun that failed
	 * before the run was registered. */
	run_release_image(r);
	inputs_free(r);
	artifacts_forget(r);
	sbx_policy_free(r->policy);
	free(r->dir);
	free(r->data_path);
	close_removed_dir(r, &r->dir_fd);
	close_removed_dir(r, &r->data_fd);
	close_removed_dir(r, &r->staging_fd);
	close_removed_dir(r, &r->spill_fd);
	close_fd(&r->ctl);
	close_fd(&r->out_fd);
	if (r->reader.sock >= 0)
		sbx_out_reader_close(&r->reader);
	close_fd(&r->err_pipe);
	close_fd(&r->wake);
	close_fd(&r->pidfd);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

void run_ref(struct sbx_run *r)
{
	atomic_fetch_add(&r->refs, 1);
}

void run_unref(struct sbx_run *r)
{
	if (r && atomic_fetch_sub(&r->refs, 1) == 1)
		run_free(r);
}

/* The analysis does not know pthread_mutex_lock: run_lock and run_unlock
 * are where the capability is taken and given back (run.h's ACQUIRE and
 * RELEASE), so their bodies alone are not checked. */
void run_lock(struct sbx_run *r) NO_THREAD_SAFETY_ANALYSIS
{
	pthread_mutex_lock(&r->mu);
}

void run_unlock(struct sbx_run *r) NO_THREAD_SAFETY_ANALYSIS
{
	struct run_event *ev = r->events, *next;

	r->events = NULL;
	r->events_tail = &r->events;
	pthread_mutex_unlock(&r->mu);
	for (; ev; ev = next) {
		next = ev->next;
		run_audit(r, ev->event, ev->fields);
		free(ev);
	}
}

void run_wait(struct sbx_run *r)
{
	pthread_cond_wait(&r->cv, &r->mu);
}

bool run_wait_until(struct sbx_run *r, int64_t deadline)
{
	int64_t left = deadline - sbx_mono_ms();
	struct timespec ts;

	if (left <= 0)
		return false;
	ts = sbx_mono_after_ms(left);
	r->pollers++;
	pthread_cond_timedwait(&r->cv, &r->mu, &ts);
	r->pollers--;
	atomic_store(&r->last_call, sbx_mono_ms());
	return true;
}

void run_changed(struct sbx_run *r)
{
	pthread_cond_broadcast(&r->cv);
}

void run_wake(struct sbx_run *r)
{
	uint64_t one = 1;

	if (r->wake >= 0 && write(r->wake, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is full, so a wake-up is pending anyway. */
	}
}

void run_alert(struct sbx_run *r, const char *fmt, ...)
{
	char buf[RUN_ALERT_BYTES], esc[RUN_ALERT_BYTES];
	va_list ap;

	size_t cap = r->claim_marked ? r->alerts_at_teardown + RUN_TEARDOWN_ALERTS : RUN_ALERTS_MAX;
	if (r->n_alerts >= cap) {
		r->alerts_dropped++;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* It may quote a name from /out: Status sends it as a proto3 string
	 * and clients print it. */
	sbx_escape(esc, sizeof(esc), buf);
	r->alerts[r->n_alerts] = strdup(esc);
	if (r->alerts[r->n_alerts])
		r->n_alerts++;
	else
		r->alerts_dropped++;
}

/* Called by sbx_text_lines from run_alerts_from_bytes, which holds r->mu:
 * the analysis cannot follow the lock through the callback's void *. */
static void alert_line(const char *line, size_t len, void *r) NO_THREAD_SAFETY_ANALYSIS
{
	run_alert(r, "%.*s", (int)len, line);
}

void run_alerts_from_bytes(struct sbx_run *r, const char *text, size_t len)
{
	sbx_text_lines(text, len, RUN_ALERT_BYTES - 1, alert_line, r);
}

void run_audit(struct sbx_run *r, const char *event, void *fields)
{
	sbx_audit(event, r->id, r->identity, r->policy_digest, fields);
}

void run_queue_audit(struct sbx_run *r, const char *event, void *fields)
{
	struct run_event *ev = malloc(sizeof(*ev));

	if (!ev) {
		json_decref(fields);
		return;
	}
	*ev = (struct run_event){.event = event, .fields = fields};
	*r->events_tail = ev;
	r->events_tail = &ev->next;
}
