/* SPDX-License-Identifier: Apache-2.0 */
/* The egress proxy's records (egress.h, sbx_egress_run_report) on the wire:
 * Status's records, destinations and alerts, and the manifest's
 * destinations, each within a byte budget of the packed answer (hosts are
 * the sandbox's to choose, so their size is too). Called outside the run's
 * lock, as the proxy's functions are. */
#ifndef SBX_RUNS_EGRESS_H
#define SBX_RUNS_EGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "egress.h"
#include "err.h"
#include "sbx/v1/sandbox.pb-c.h"

/* What an "(other)" destination row takes packed at most (host, four
 * 64-bit counters, tag and length): a byte budget keeps room for it. */
#define EGRESS_OTHER_ROW_MAX 64

/* Status: fills resp->egress (the newest records, at most the config's
 * records_per_run), resp->egress_records_dropped, resp->egress_destinations
 * (and _folded), and appends the run's egress alerts to resp->alerts.
 * Records and destinations take at most max_bytes of the packed answer,
 * whatever the sandbox asked for: the destinations at most half of it (rows
 * past it folded into "(other)", as runs_egress_destinations does with that
 * half), the records what they leave (the oldest left out, counted in
 * egress_records_dropped). The alerts (two lines at most) are outside it.
 * Every member is malloc'd (the response is freed with free_unpacked). -1
 * only when out of memory (err says so; resp may hold part, which
 * free_unpacked frees). */
int runs_egress_status(struct sbx_egress_run *er, Sbx__V1__StatusResponse *resp, size_t max_bytes,
		       struct sbx_err *err);
/* The manifest: one EgressDestination per host:port the run asked for
 * (allowed or not), malloc'd into *out (n in *n), in at most max_bytes
 * packed (each element with its tag and length): when they do not fit,
 * the rows with allowed connections are kept before those only denied,
 * each in the order first asked, and the rest are summed into the
 * "(other)" row (host "(other)", port 0, last), their number in *folded.
 * A max_bytes below EGRESS_OTHER_ROW_MAX (64) still gives that one row.
 * -1 only when out of memory. */
int runs_egress_destinations(struct sbx_egress_run *er, size_t max_bytes,
			     Sbx__V1__EgressDestination ***out, size_t *n, uint32_t *folded,
			     struct sbx_err *err);

#endif
