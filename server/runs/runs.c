/* SPDX-License-Identifier: Apache-2.0 */
/* The run manager's life cycle (runs.h): made from sbxd's config, draining,
 * tearing every run down, freed. */
#include "runs.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "metrics.h"
#include "runs_closer.h"
#include "runs_manager.h"
#include "runs_pool.h"
#include "runs_registry.h"
#include "runs_slots.h"
#include "runs_sweeper.h"
#include "runs_teardown.h"

#define DRAIN_WAIT_MS (RUN_READY_TIMEOUT_MS + 5000)

struct sbx_runs *runs_new(void)
{
	struct sbx_runs *runs = calloc(1, sizeof(*runs));
	struct sbx_config defaults;

	if (!runs)
		return NULL;
	/* The config's default ceilings; quotas stay 0 (off) without settings. */
	sbx_config_limits_defaults(&defaults);
	runs->live.limits_max = defaults.limits_max;
	runs->live.idle_seconds_default = SBX_IDLE_SECONDS_DEFAULT;
	runs->live.expired_keep_seconds = SBX_EXPIRED_KEEP_SECONDS_DEFAULT;
	runs->lock_fd = -1;
	snprintf(runs->host.cgroup, sizeof(runs->host.cgroup), "none");
	pthread_mutex_init(&runs->live_mu, NULL);
	pthread_mutex_init(&runs->tomb_mu, NULL);
	pthread_mutex_init(&runs->mu, NULL);
	cond_init_monotonic(&runs->cv);
	cond_init_monotonic(&runs->sweeper_cv);
	return runs;
}

void runs_free(struct sbx_runs *runs)
{
	if (!runs)
		return;
	sweeper_stop(runs);
	pool_free(runs);
	/* Every run is gone: nothing hands it another descriptor. */
	closer_stop(runs->closer);
	runs->closer = NULL; /* closer_close on NULL closes in place */
	runs_settings_free(runs);
	runs_slots_free(runs->slots);
	runs->slots = NULL;
	pthread_cond_destroy(&runs->sweeper_cv);
	pthread_cond_destroy(&runs->cv);
	pthread_mutex_destroy(&runs->mu);
	pthread_mutex_destroy(&runs->tomb_mu);
	pthread_mutex_destroy(&runs->live_mu);
	free(runs);
}

/* The metrics that are settings, and the store's images as found now
 * (Health counts them again). */
static void metrics_at_start(struct sbx_runs *runs)
{
	char **pins = NULL;
	size_t n = 0, total = 0;
	struct sbx_err ignored;

	sbx_metrics_set(SBX_M_RUNS_MAX, 0, runs->cfg.runs_max);
	sbx_metrics_set(SBX_M_DISK_QUOTA, 0, (int64_t)(runs_live(runs).quotas.host_mb << 20));
	sbx_metrics_set(SBX_M_HOST_UID_SLOTS, 0,
			runs->cfg.host_uids_shared ? 0 : (int64_t)runs->cfg.host_uid_slots);
	/* A store that cannot be read now leaves the gauge at 0; Health says why. */
	if (runs->images && img_store_pins(runs->images, 0, &pins, &n, &total, &ignored) == 0) {
		sbx_metrics_set(SBX_M_IMAGES, 0, (int64_t)total);
		img_pins_free(pins, n);
	}
}

struct sbx_runs *sbx_runs_init(const struct sbx_config *cfg, struct sbx_err *err)
{
	struct sbx_runs *runs = runs_new();

	if (!runs) {
		sbx_fail_errno(err, "runs");
		return NULL;
	}
	if (runs_startup(runs, cfg, err) < 0 || !(runs->closer = closer_start(err)) ||
	    pool_init(runs, cfg, err) < 0 || sweeper_start(runs, err) < 0) {
		runs_free(runs);
		return NULL;
	}
	metrics_at_start(runs);
	return runs;
}

void sbx_runs_set_egress(struct sbx_runs *runs, struct sbx_egress *eg, const char *why_not)
{
	runs->egress = eg;
	snprintf(runs->egress_down, sizeof(runs->egress_down), "%s", eg || !why_not ? "" : why_not);
	/* The last setting before handlers run: the warm pool may build now
	 * (a shape with an allowlist needs to know whether the proxy is up). */
	pool_start(runs);
}

void sbx_runs_stop_accepting(struct sbx_runs *runs)
{
	runs_stop_taking(runs);
	/* Members nobody will claim give their slots and memory back now. */
	pool_stop(runs);
}

unsigned sbx_runs_count(struct sbx_runs *runs)
{
	unsigned n;

	pthread_mutex_lock(&runs->mu);
	n = runs->count;
	pthread_mutex_unlock(&runs->mu);
	return n;
}

static void *teardown_thread(void *arg)
{
	struct sbx_run *r = arg;
	Sbx__V1__RunManifest *m = NULL;
	struct sbx_rpc_status st;

	/* [owner]: claimed by runs_claim_all, teardown_why set by it. A
	 * drain's teardown writes the manifest to the audit log (nobody is
	 * there to take it); a second signal's does not hash /out. */
	run_teardown(r, strcmp(r->teardown_why, "drain") == 0 ? &m : NULL, &st);
	sbx__v1__run_manifest__free_unpacked(m, NULL);
	return NULL;
}

/* Before their teardown starts: a caller of one of them hears from now on
 * that the drain took it (a tombstone each, runs_registry.h). */
static void remember_drained(struct sbx_run **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		runs_tombstone(v[i], "torn down by sbxd's drain (sbxd is stopping and its "
				     "drain_seconds passed)");
}

void sbx_runs_teardown_all(struct sbx_runs *runs, const char *why)
{
	struct sbx_run **v = NULL;
	pthread_t *tids;
	size_t n;

	/* Nothing is swept behind the drain's back from here on. */
	sweeper_stop(runs);
	pool_stop(runs);
	n = runs_claim_all(runs, sbx_mono_ms() + DRAIN_WAIT_MS, &v);
	if (v && strcmp(why, "drain") == 0)
		remember_drained(v, n);
	for (size_t i = 0; v && i < n; i++)
		v[i]->teardown_why = why; /* [owner]: claimed above */
	tids = calloc(n ? n : 1, sizeof(*tids));

	/* In parallel: each may wait seconds for its helper. */
	for (size_t i = 0; i < n; i++)
		if (!tids || pthread_create(&tids[i], NULL, teardown_thread, v[i]) != 0) {
			teardown_thread(v[i]);
			run_unref(v[i]);
			v[i] = NULL;
		}
	for (size_t i = 0; i < n; i++)
		if (v[i]) {
			pthread_join(tids[i], NULL);
			run_unref(v[i]);
		}
	free(v);
	free(tids);
	/* Teardowns that ran short get one more try; what still cannot
	 * finish is dropped, and the next start's sweep removes its files. */
	for (struct sbx_run *r; (r = run_take_unfinished(runs, NULL, NULL));) {
		struct sbx_rpc_status st;

		if (run_teardown_unfinished(r, NULL, &st) < 0)
			run_unregister(r);
		run_unref(r);
	}
}

void sbx_runs_shutdown(struct sbx_runs *runs)
{
	sbx_runs_teardown_all(runs, "shutdown");
	runs_free(runs);
}
