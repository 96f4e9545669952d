/* SPDX-License-Identifier: Apache-2.0 */
/* The operator's view: an identity named in the config's `operators`
 * (rpc_auth.c marks it on the caller) may list every run (ListRuns.all),
 * read any run's Status, tear any run down (its owner is then told who did,
 * runs_tombstone, rather than NOT_FOUND), drain and undrain (Drain), and
 * sees how the host's capacity is configured in Health (every caller sees
 * the host-wide capacity, committed and allowed numbers: placement). Every such call on another
 * identity's run, and every Drain, is written to the audit log naming the
 * operator and the run's owner. A caller that is not an operator gets
 * PERMISSION_DENIED for the operator's calls, and never learns another
 * identity's run ids.
 *
 * The operator's drain is its own flag (operator_drain): SIGTERM's drain
 * (`draining`) is never lifted by an undrain. */
#include "runs_operator.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "audit.h"
#include "runs_capacity.h"
#include "runs_manager.h"
#include "runs_registry.h"

void operator_audit(const struct sbx_identity *who, struct sbx_run *r, const char *call,
		    bool never_dropped)
{
	char event[64];
	json_t *fields;

	if (!strcmp(who->name, r->identity))
		return;
	snprintf(event, sizeof(event), "operator_%s", call);
	fields = json_pack("{s:s, s:s}", "operator", who->name, "owner", r->identity);
	/* The line's identity is the operator's (whose rate it counts
	 * against); the run's owner is named in it. */
	if (never_dropped)
		(void)sbx_audit_exempt(event, r->id, who->name, r->policy_digest, fields);
	else
		sbx_audit(event, r->id, who->name, r->policy_digest, fields);
}

int operator_health(struct sbx_runs *runs, const struct sbx_identity *who,
		    Sbx__V1__HealthResponse *h)
{
	/* One copy of what a reload may change. */
	struct sbx_config_capacity cfg = runs_live(runs).capacity;
	const struct sbx_config_capacity *c = &cfg;
	struct capacity_view v;
	struct run_cost committed;
	unsigned host_slots, own_slots;
	char source[256];

	runs_slots(runs, who->name, &host_slots, &own_slots);
	h->identity_run_slots_free = own_slots;
	pthread_mutex_lock(&runs->mu);
	h->state = runs->draining || runs->operator_drain ? SBX__V1__SERVING_STATE__DRAINING
							  : SBX__V1__SERVING_STATE__SERVING;
	h->operator_ = who->operator;
	h->run_slots_free = host_slots;
	if (who->operator) {
		h->operator_drain = runs->operator_drain;
		h->shutdown_drain = runs->draining;
	}
	v = capacity_view_of(c, &runs->host);
	committed = capacity_committed(runs);
	pthread_mutex_unlock(&runs->mu);
	/* Every caller: clients place runs across hosts from these (issue 19).
	 * They are host-wide sums (what the host has, what all runs together
	 * commit, what they may commit, free slots): no other identity's run,
	 * id, owner or count can be told from them beyond what a refused
	 * CreateRun says anyway. */
	h->capacity_cpu_millis = v.capacity.cpu_millis;
	h->capacity_memory_mb = v.capacity.memory_mb;
	h->committed_cpu_millis = committed.cpu_millis;
	h->committed_memory_mb = committed.memory_mb;
	h->allowed_cpu_millis = v.allowed.cpu_millis;
	h->allowed_memory_mb = v.allowed.memory_mb;
	if (!who->operator)
		return 0;
	/* Operators only: how the host is configured. */
	h->cpu_overcommit_percent = c->cpu_overcommit_percent;
	h->memory_overcommit_percent = c->memory_overcommit_percent;
	h->memory_reserve_mb = v.reserve_mb;
	snprintf(source, sizeof(source), "%s%s%s",
		 c->cpu_millis ? "cpu: config capacity.cpu_millis; " : "",
		 c->memory_mb ? "memory: config capacity.memory_mb; " : "",
		 c->cpu_millis && c->memory_mb ? "" : runs->host.capacity_source);
	h->capacity_source = strdup(source);
	return h->capacity_source ? 0 : -1;
}

SBX_HANDLER(drain, Sbx__V1__DrainRequest, Sbx__V1__DrainResponse)
{
	Sbx__V1__DrainResponse *d;
	bool was;

	if (!who->operator)
		return sbx_rpc_fail(st, SBX__V1__CODE__PERMISSION_DENIED,
				    "Drain: %s is not an operator (config operators)", who->name);
	if (!(d = malloc(sizeof(*d))))
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	sbx__v1__drain_response__init(d);
	pthread_mutex_lock(&runs->mu);
	was = runs->operator_drain;
	runs->operator_drain = !req->undrain;
	d->operator_drain = runs->operator_drain;
	d->shutdown_drain = runs->draining;
	d->state = runs->draining || runs->operator_drain ? SBX__V1__SERVING_STATE__DRAINING
							  : SBX__V1__SERVING_STATE__SERVING;
	pthread_mutex_unlock(&runs->mu);
	d->runs_active = runs_listed(runs);
	(void)sbx_audit_exempt(
	    req->undrain ? "operator_undrain" : "operator_drain", NULL, who->name, NULL,
	    json_pack("{s:s, s:b, s:b, s:b, s:i}", "operator", who->name, "was_draining", was,
		      "operator_drain", d->operator_drain, "shutdown_drain", d->shutdown_drain,
		      "runs_active", (int)d->runs_active));
	*resp = d;
	return 0;
}
