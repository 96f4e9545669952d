/* SPDX-License-Identifier: Apache-2.0 */
/* What a reload (SIGHUP) changes in the run manager: the settings in
 * runs->live, swapped whole under a leaf lock. Each reader takes a copy
 * (runs_live), so a CreateRun racing a reload decides by the old values or
 * by the new ones, never by a mix; runs already there keep what they were
 * created with (their policy's limits and lease are fixed at CreateRun). */
#include "runs.h"

#include <stdio.h>
#include <string.h>

#include "metrics.h"
#include "runs_manager.h"
#include "runs_pool.h"

void runs_live_from(struct runs_live *live, const struct sbx_config *cfg)
{
	live->runs_max_per_identity = cfg->runs_max_per_identity ? cfg->runs_max_per_identity : 16;
	live->idle_seconds_default = cfg->idle_seconds_default;
	live->expired_keep_seconds = cfg->expired_keep_seconds;
	live->limits_max = cfg->limits_max;
	live->quotas = cfg->quotas;
	live->capacity = cfg->capacity;
}

struct runs_live runs_live(struct sbx_runs *runs)
{
	struct runs_live copy;

	pthread_mutex_lock(&runs->live_mu);
	copy = runs->live;
	pthread_mutex_unlock(&runs->live_mu);
	return copy;
}

static void note(char *changed, size_t size, const char *what)
{
	size_t len = strlen(changed);

	if (len < size)
		snprintf(changed + len, size - len, "%s%s", len ? ", " : "", what);
}

void sbx_runs_reload(struct sbx_runs *runs, const struct sbx_config *cfg, char *changed,
		     size_t size)
{
	struct runs_live next, old = runs_live(runs);

	runs_live_from(&next, cfg);
	/* limits_max.files and .pinned_files were fitted to the file's
	 * runs_max; with another runs_max than the one in force they could
	 * be more than the host's file table holds for it: kept, until the
	 * restart that changes runs_max. */
	if (cfg->runs_max != runs->cfg.runs_max &&
	    memcmp(&next.limits_max, &old.limits_max, sizeof(old.limits_max)) != 0) {
		next.limits_max = old.limits_max;
		note(changed, size, "limits_max kept (runs_max changed: both need a restart)");
	}
	if (next.runs_max_per_identity != old.runs_max_per_identity)
		note(changed, size, "runs_max_per_identity");
	if (next.idle_seconds_default != old.idle_seconds_default)
		note(changed, size, "idle_seconds_default");
	if (next.expired_keep_seconds != old.expired_keep_seconds)
		note(changed, size, "expired_keep_seconds");
	if (memcmp(&next.limits_max, &old.limits_max, sizeof(old.limits_max)) != 0)
		note(changed, size, "limits_max");
	if (memcmp(&next.quotas, &old.quotas, sizeof(old.quotas)) != 0)
		note(changed, size, "quotas");
	if (memcmp(&next.capacity, &old.capacity, sizeof(old.capacity)) != 0)
		note(changed, size, "capacity");
	pthread_mutex_lock(&runs->live_mu);
	runs->live = next;
	pthread_mutex_unlock(&runs->live_mu);
	if (pool_reload(runs, cfg))
		note(changed, size, "pool");
	sbx_metrics_set(SBX_M_DISK_QUOTA, 0, (int64_t)(next.quotas.host_mb << 20));
	/* A shorter expired_keep_seconds or cap applies at the next sweep. */
	pthread_mutex_lock(&runs->mu);
	pthread_cond_broadcast(&runs->sweeper_cv);
	pthread_mutex_unlock(&runs->mu);
}
