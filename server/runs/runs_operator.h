/* SPDX-License-Identifier: Apache-2.0 */
/* What operators (config `operators`; service.h's sbx_identity.operator)
 * may do beyond a caller's own runs, and its audit lines
 * (runs_operator.c). Drain's handler is there too. */
#ifndef SBX_RUNS_OPERATOR_H
#define SBX_RUNS_OPERATOR_H

#include <stdbool.h>

#include "run.h"
#include "service.h"

/* An operator's call on someone else's run: writes an audit line
 * ("operator_<call>") naming the operator and the run's owner; nothing
 * for a caller's own run. never_dropped: a change (teardown), which the
 * operator's audit rate never drops. */
void operator_audit(const struct sbx_identity *who, struct sbx_run *r, const char *call,
		    bool never_dropped);
/* Health's state for every caller, and for operators the drains, the
 * capacity, what runs commit and the free slots. */
int operator_health(struct sbx_runs *runs, const struct sbx_identity *who,
		    Sbx__V1__HealthResponse *h);

#endif
