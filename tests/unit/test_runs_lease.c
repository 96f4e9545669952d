/* SPDX-License-Identifier: Apache-2.0 */
/* A run's lease and keep (server/runs/runs_lease.h): when idle_seconds
 * ends it, that a long poll holds it, when a stopped run is swept, and the
 * default CreateRun writes into the effective policy. */
#include <stdint.h>

#include "check.h"
#include "runs_lease.h"

int main(void)
{
	Sbx__V1__Limits limits = SBX__V1__LIMITS__INIT;
	SbxPolicy p = SBX__V1__POLICY__INIT;

	check(lease_ends_at(1000, 0, 3) == 4000, "the lease ends idle_seconds after the call");
	check(!lease_ran_out(3999, 1000, 0, 3), "not a millisecond early");
	check(lease_ran_out(4000, 1000, 0, 3), "and at idle_seconds it ran out");
	check(!lease_ran_out(1000000, 1000, 1, 3), "a long poll waiting holds it however long");
	check(lease_ends_at(1000, 2, 3) == INT64_MAX, "while any poll waits it has no end");
	check(!lease_ran_out(INT64_MAX - 1, 0, 0, 0), "idle_seconds 0 is no lease");
	check(lease_ends_at(0, 0, 604800) == 604800000LL, "the largest idle_seconds does not wrap");
	check(keep_ends_at(5000, 600) == 605000, "a stopped run is kept expired_keep_seconds");
	check(keep_ends_at(5000, 0) == 5000, "expired_keep_seconds 0 sweeps it at once");

	p.limits = &limits;
	lease_fill_default(&p, 600);
	check(limits.idle_seconds == 600, "0 (left out) becomes sbxd's default");
	limits.idle_seconds = 5;
	lease_fill_default(&p, 600);
	check(limits.idle_seconds == 5, "a policy's own idle_seconds stays");
	lease_fill_default(NULL, 600);
	check(true, "no policy (a CreateRun that failed to parse one) is no crash");
	return check_done();
}
