/* SPDX-License-Identifier: Apache-2.0 */
/* The run life cycle (server/runs/run_state.h): the table of allowed moves
 * is the documented one, every allowed move works, any other aborts. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "run.h"

/* The life cycle as run_state.h draws it, written out once more. */
static bool documented(enum run_state from, enum run_state to)
{
	switch (from) {
	case RUN_STARTING:
		return to == RUN_CREATED;
	case RUN_CREATED:
		return to == RUN_ACTIVE || to == RUN_EXPIRED || to == RUN_FAILED ||
		       to == RUN_TEARING;
	case RUN_ACTIVE:
		return to == RUN_EXPIRED || to == RUN_FAILED || to == RUN_TEARING;
	case RUN_EXPIRED:
	case RUN_FAILED:
		return to == RUN_TEARING;
	case RUN_TEARING:
		return to == RUN_TORN;
	default:
		return false;
	}
}

/* A run in state s, reached by allowed moves only. */
static struct sbx_run *run_in(enum run_state s)
{
	static const enum run_state path[][4] = {
	    [RUN_STARTING] = {RUN_STARTING},
	    [RUN_CREATED] = {RUN_CREATED},
	    [RUN_ACTIVE] = {RUN_CREATED, RUN_ACTIVE},
	    [RUN_EXPIRED] = {RUN_CREATED, RUN_ACTIVE, RUN_EXPIRED},
	    [RUN_FAILED] = {RUN_CREATED, RUN_FAILED},
	    [RUN_TEARING] = {RUN_CREATED, RUN_ACTIVE, RUN_TEARING},
	    [RUN_TORN] = {RUN_CREATED, RUN_ACTIVE, RUN_TEARING, RUN_TORN},
	};
	struct sbx_run *r = run_alloc(NULL);

	if (!r)
		abort();
	snprintf(r->id, sizeof(r->id), "run-test");
	for (size_t i = 0; i < 4 && path[s][i] != RUN_STARTING; i++)
		run_state_move(r, path[s][i]);
	return r;
}

/* Whether the move from -> to kills the process with SIGABRT. */
static bool aborts(enum run_state from, enum run_state to)
{
	int status = 0;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return false;
	if (pid == 0) {
		struct sbx_run *r = run_in(from);

		/* The expected message is noise here. */
		if (!freopen("/dev/null", "w", stderr))
			_exit(3);
		run_state_move(r, to);
		_exit(0);
	}
	if (waitpid(pid, &status, 0) != pid)
		return false;
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

int main(void)
{
	for (int from = 0; from < RUN_STATES; from++) {
		struct sbx_run *r = run_in(from);

		check(r->state == (enum run_state)from, "a run reaches %s", run_state_name(from));
		run_unref(r);
		for (int to = 0; to < RUN_STATES; to++) {
			bool want = documented(from, to);

			check(run_state_allowed(from, to) == want, "%s -> %s is %s",
			      run_state_name(from), run_state_name(to),
			      want ? "allowed" : "refused");
			if (want) {
				r = run_in(from);
				run_state_move(r, to);
				check(r->state == (enum run_state)to, "%s -> %s moves",
				      run_state_name(from), run_state_name(to));
				run_unref(r);
			} else {
				check(aborts(from, to), "%s -> %s aborts", run_state_name(from),
				      run_state_name(to));
			}
		}
	}

	/* What callers see: the state a Teardown found, until TORN. */
	struct sbx_run *r = run_in(RUN_ACTIVE);
	check(run_is_listed(r) && !run_is_claimed(r) && run_sandbox_live(r),
	      "an active run is listed, unclaimed, live");
	run_state_move(r, RUN_TEARING);
	check(!run_is_listed(r) && run_is_claimed(r) && !run_sandbox_live(r),
	      "a tearing run is claimed and no longer listed");
	check(run_state_public(r) == SBX__V1__RUN_STATE__ACTIVE,
	      "Status still says active while it is torn down");
	run_state_move(r, RUN_TORN);
	check(run_state_public(r) == SBX__V1__RUN_STATE__TORN, "then torn");
	check(run_final_state(r) == SBX__V1__RUN_STATE__TORN,
	      "the manifest's final state of a live run torn down is torn, not active");
	run_unref(r);
	/* One that had ended before its Teardown ended as it had. */
	r = run_in(RUN_EXPIRED);
	run_state_move(r, RUN_TEARING);
	check(run_final_state(r) == SBX__V1__RUN_STATE__EXPIRED, "an expired run ended expired");
	run_unref(r);
	r = run_in(RUN_FAILED);
	run_state_move(r, RUN_TEARING);
	run_state_move(r, RUN_TORN);
	check(run_final_state(r) == SBX__V1__RUN_STATE__FAILED, "a failed run ended failed");
	run_unref(r);

	r = run_in(RUN_STARTING);
	check(!run_is_listed(r) && run_state_public(r) == SBX__V1__RUN_STATE__CREATED,
	      "a starting run is not listed");
	run_unref(r);
	return check_done();
}
