/* SPDX-License-Identifier: Apache-2.0 */
/* Admission by capacity (runs_capacity.c) without a helper: the arithmetic
 * of what is allowed (overcommit, reserve, overflow, unknown capacity),
 * the refusals and what they name, and what registered runs commit, in a
 * manager made by hand: CPU while a sandbox lives, memory until the run is
 * unregistered; a run that does not fit is never registered. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "run.h"
#include "run_state.h"
#include "runs_capacity.h"
#include "runs_manager.h"
#include "runs_registry.h"

static const struct sbx_identity alice = {.name = "uid:1000"};

static SbxPolicy *policy(unsigned cpu_millis, unsigned memory_mb)
{
	char json[512];
	struct sbx_err err = {0};
	SbxPolicy *p;

	snprintf(json, sizeof(json),
		 "{\"image\": \"host\", \"mounts\": [{\"path\": \"/out\", \"mode\": \"rw\"}], "
		 "\"limits\": {\"cpu\": %u.%03u, \"memory_mb\": %u, \"out_mb\": 16, "
		 "\"tmp_mb\": 16}}",
		 cpu_millis / 1000, cpu_millis % 1000, memory_mb);
	p = sbx_policy_parse(json, strlen(json), &err);
	if (!p)
		printf("# policy: %s\n", err.msg);
	return p;
}

static void arithmetic(void)
{
	struct sbx_config_capacity cfg = {0, 0, 400, 100, 1024};
	struct runs_host host = {.cpu_millis = 2000, .memory_mb = 24000};
	struct capacity_view v;
	struct sbx_rpc_status st = {0};
	SbxPolicy *p = policy(1500, 256);
	struct run_cost c = capacity_cost(p);

	check(c.cpu_millis == 1500 && c.memory_mb == 256 + 16 + 2 * 16,
	      "a run costs its cpu_millis and memory_mb + out_mb + 2 x tmp_mb (%llu, %llu)",
	      (unsigned long long)c.cpu_millis, (unsigned long long)c.memory_mb);
	check(capacity_cost(NULL).cpu_millis == 0 && capacity_cost(NULL).memory_mb == 0,
	      "a run without a policy costs nothing");

	check(capacity_allowed(2000, 400, 0) == 8000, "capacity x overcommit");
	check(capacity_allowed(24000, 100, 1024) == 22976, "less the reserve");
	check(capacity_allowed(1000, 100, 2000) == 0, "never below 0");
	check(capacity_allowed(0, 400, 0) == 0, "unknown stays unknown");
	check(capacity_allowed(UINT64_MAX / 2, 1000, 0) == UINT64_MAX, "overflow saturates");

	v = capacity_view_of(&cfg, &host);
	check(v.capacity.cpu_millis == 2000 && v.allowed.cpu_millis == 8000 &&
		  v.capacity.memory_mb == 24000 && v.allowed.memory_mb == 22976,
	      "the view from the measured host");
	cfg.memory_mb = 4096;
	cfg.cpu_millis = 500;
	v = capacity_view_of(&cfg, &host);
	check(v.capacity.memory_mb == 4096 && v.capacity.cpu_millis == 500,
	      "the config's numbers win over the measured ones");
	cfg.memory_reserve_mb = 8192;
	v = capacity_view_of(&cfg, &host);
	check(v.allowed.memory_mb == 1, "a reserve above capacity leaves 1 MiB, not 'unknown'");
	cfg = (struct sbx_config_capacity){0, 0, 100, 100, SBX_MEMORY_RESERVE_AUTO};
	v = capacity_view_of(&cfg, &host);
	check(v.reserve_mb == 1024 && v.allowed.memory_mb == 22976,
	      "the unwritten reserve on a 24000 MiB host: 1024 MiB");
	host.memory_mb = 2000;
	v = capacity_view_of(&cfg, &host);
	check(v.reserve_mb == 250 && v.allowed.memory_mb == 1750,
	      "on a 2000 MiB host: an eighth, 250 MiB (a default run's 1040 MiB still fits)");
	host.memory_mb = 24000;

	cfg = (struct sbx_config_capacity){0, 0, 100, 100, 0};
	host = (struct runs_host){.cpu_millis = 2000, .memory_mb = 1000};
	v = capacity_view_of(&cfg, &host);
	check(capacity_check_ever(&v, &cfg, (struct run_cost){2000, 1000}, &st) == 0,
	      "exactly the allowed amount can be given");
	check(capacity_check_ever(&v, &cfg, (struct run_cost){2001, 10}, &st) < 0 &&
		  st.code == SBX__V1__CODE__INVALID_ARGUMENT &&
		  strstr(st.err.msg, "limits.cpu_millis 2001 exceeds this host's allowed CPU 2000"),
	      "more CPU than ever allowed is INVALID_ARGUMENT naming both: %s", st.err.msg);
	check(capacity_check_ever(&v, &cfg, (struct run_cost){10, 1001}, &st) < 0 &&
		  st.code == SBX__V1__CODE__INVALID_ARGUMENT &&
		  strstr(st.err.msg, "limits.memory_mb") && strstr(st.err.msg, "1001 MiB") &&
		  strstr(st.err.msg, "allowed memory 1000 MiB") &&
		  strstr(st.err.msg, "capacity.memory_overcommit_percent 100"),
	      "more memory than ever allowed is INVALID_ARGUMENT naming the key: %s", st.err.msg);
	check(capacity_check_now(&v, (struct run_cost){1500, 600}, (struct run_cost){500, 400},
				 &st) == 0,
	      "what fits exactly beside the committed runs is admitted");
	check(capacity_check_now(&v, (struct run_cost){1500, 600}, (struct run_cost){501, 10},
				 &st) < 0 &&
		  st.code == SBX__V1__CODE__RESOURCE_EXHAUSTED &&
		  strstr(st.err.msg, "committed 1500 of its allowed 2000 millis CPU"),
	      "what does not fit now is RESOURCE_EXHAUSTED naming the committed: %s", st.err.msg);
	check(capacity_check_now(&v, (struct run_cost){3000, 2000}, (struct run_cost){0, 0}, &st) <
		  0,
	      "committed past allowed (the config lowered) admits nothing");
	host = (struct runs_host){0};
	cfg = (struct sbx_config_capacity){0, 0, 100, 100, 0};
	v = capacity_view_of(&cfg, &host);
	check(capacity_check_ever(&v, &cfg, (struct run_cost){UINT64_MAX, UINT64_MAX}, &st) == 0 &&
		  capacity_check_now(&v, (struct run_cost){UINT64_MAX, UINT64_MAX},
				     (struct run_cost){1, 1}, &st) == 0,
	      "an unknown capacity refuses nothing");
	sbx_policy_free(p);
}

static struct sbx_run *registered(struct sbx_runs *runs, const char *id, SbxPolicy *p,
				  struct sbx_rpc_status *st)
{
	struct sbx_run *r = run_alloc(runs);

	snprintf(r->identity, sizeof(r->identity), "%s", alice.name);
	snprintf(r->id, sizeof(r->id), "%s", id);
	const struct runs_live live = runs_live(runs);

	r->policy = p;
	if (run_register(r, &live, st) < 0) {
		r->policy = NULL;
		run_unref(r);
		sbx_policy_free(p); /* refused: still ours */
		return NULL;
	}
	return r;
}

static struct run_cost committed(struct sbx_runs *runs)
{
	struct run_cost c;

	pthread_mutex_lock(&runs->mu);
	c = capacity_committed(runs);
	pthread_mutex_unlock(&runs->mu);
	return c;
}

static void registry(void)
{
	struct sbx_runs *runs = runs_new();
	struct sbx_rpc_status st = {0};
	struct sbx_run *a, *b;
	struct run_cost c;

	runs->cfg.runs_max = 8;
	runs->live.runs_max_per_identity = 8;
	runs->live.capacity = (struct sbx_config_capacity){2000, 1000, 100, 100, 0};
	a = registered(runs, "run-a", policy(1000, 400), &st); /* 448 MiB */
	check(a != NULL, "a first run fits: %s", st.err.msg);
	c = committed(runs);
	check(c.cpu_millis == 1000 && c.memory_mb == 448, "a STARTING run commits both");
	b = registered(runs, "run-b", policy(1000, 400), &st);
	check(b != NULL, "a second fits exactly beside it: %s", st.err.msg);
	check(!registered(runs, "run-c", policy(10, 16), &st) &&
		  st.code == SBX__V1__CODE__RESOURCE_EXHAUSTED && runs->count == 2,
	      "a third does not fit and is not registered: %s", st.err.msg);
	check(!registered(runs, "run-d", policy(10, 2000), &st) &&
		  st.code == SBX__V1__CODE__INVALID_ARGUMENT,
	      "one that can never fit is INVALID_ARGUMENT, whatever runs: %s", st.err.msg);

	run_publish(a);
	run_publish(b);
	run_lock(b);
	run_state_move(b, RUN_EXPIRED);
	run_unlock(b);
	c = committed(runs);
	check(c.cpu_millis == 1000 && c.memory_mb == 896,
	      "a stopped run gives back its CPU, keeps its memory (%llu, %llu)",
	      (unsigned long long)c.cpu_millis, (unsigned long long)c.memory_mb);
	/* (A CreateRun refused now would have the sweeper tear b down to
	 * make room, as for runs_max: there is no directory to remove here.) */
	check(run_claim(b, &st) == 0, "b is claimed");
	run_unregister(b);
	c = committed(runs);
	check(c.cpu_millis == 1000 && c.memory_mb == 448, "a run unregistered commits nothing");
	b = registered(runs, "run-e", policy(500, 200), &st);
	check(b != NULL, "and the next fits: %s", st.err.msg);
	runs->operator_drain = true;
	check(!registered(runs, "run-f", policy(10, 16), &st) &&
		  st.code == SBX__V1__CODE__UNAVAILABLE &&
		  strstr(st.err.msg, "an operator's drain"),
	      "an operator's drain refuses with UNAVAILABLE: %s", st.err.msg);
	runs->operator_drain = false;
	runs->draining = true;
	check(!registered(runs, "run-f", policy(10, 16), &st) &&
		  st.code == SBX__V1__CODE__UNAVAILABLE,
	      "and so does SIGTERM's: %s", st.err.msg);

	run_unregister(a);
	run_unregister(b);
	runs_free(runs);
}

int main(void)
{
	arithmetic();
	registry();
	return check_done();
}
