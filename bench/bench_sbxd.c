/* SPDX-License-Identifier: Apache-2.0 */
#include "bench_sbxd.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "bench_scratch.h"
#include "bench_util.h"
#include "sleep.h"

sbx_client *bench_client_open(const char *endpoint, uint32_t timeout_ms, int retries)
{
	struct sbx_client_opts o = {
	    .endpoint = endpoint, .timeout_ms = timeout_ms, .retries = retries};
	struct sbx_err err;
	sbx_client *c = sbx_client_open(&o, &err);

	if (!c)
		bench_die("libsbxclient for %s: %s", endpoint, err.msg);
	sbx_client_set_interrupt(c, &bench_interrupted);
	return c;
}

void bench_sbxd_wait(const char *endpoint, pid_t *pid, const char *log, int timeout_ms)
{
	sbx_client *c = bench_client_open(endpoint, 1000, -1);
	struct sbx_rpc_status st = {0};

	for (int waited = 0;; waited += 50) {
		Sbx__V1__HealthResponse *h = sbx_health(c, &st);
		int status;

		if (h) {
			bench_note("sbxd %s answers (pid %d)", h->version, (int)*pid);
			sbx__v1__health_response__free_unpacked(h, NULL);
			break;
		}
		if (waitpid(*pid, &status, WNOHANG) == *pid) {
			*pid = -1;
			bench_die("sbxd exited (%s): %s", bench_status_str(status),
				  bench_tail_of(log));
		}
		bench_check_interrupt();
		if (waited >= timeout_ms)
			bench_die("sbxd did not answer Health within %d s (%s: %s): %s",
				  timeout_ms / 1000, sbx_code_name(st.code), st.err.msg,
				  bench_tail_of(log));
		sbx_sleep_ms(50);
	}
	sbx_client_close(c);
}

json_t *bench_config_object(const char *opt, const char *text)
{
	json_error_t je;

	if (!text)
		return NULL;
	json_t *x = json_loads(text, 0, &je);
	if (!x)
		bench_die("%s: not JSON: %s (column %d)", opt, je.text, je.column);
	if (!json_is_object(x))
		bench_die("%s: must be a JSON object of sbxd config keys", opt);
	return x;
}

json_t *bench_pool_config(size_t size)
{
	json_t *policy = json_loads(BENCH_POOL_POLICY, 0, NULL);
	json_t *cfg = policy ? json_pack("[{s:s, s:o, s:I}]", "name", "bench", "policy", policy,
					 "size", (json_int_t)size)
			     : NULL;

	if (!cfg)
		bench_die("building the pool's config failed");
	return cfg;
}

void bench_pool_wait_ready(sbx_client *c, uint32_t ready, int timeout_ms)
{
	struct sbx_rpc_status st = {0};

	for (int waited = 0;; waited += 5) {
		Sbx__V1__HealthResponse *h = sbx_health(c, &st);
		bool done;

		if (!h)
			bench_die("Health: %s: %s", sbx_code_name(st.code), st.err.msg);
		if (h->n_pool == 0)
			bench_die("sbxd has no pool (config pool)");
		done = h->pool[0]->ready >= ready;
		if (!done && waited >= timeout_ms)
			bench_die("the pool's shape %s has %u of %u members ready after %d ms%s%s",
				  h->pool[0]->name, h->pool[0]->ready, ready, timeout_ms,
				  h->pool[0]->error[0] ? ": " : "", h->pool[0]->error);
		sbx__v1__health_response__free_unpacked(h, NULL);
		if (done)
			return;
		bench_check_interrupt();
		sbx_sleep_ms(5);
	}
}

static void died(const char *call, const struct sbx_rpc_status *st) __attribute__((noreturn));
static void died(const char *call, const struct sbx_rpc_status *st)
{
	if (bench_interrupted)
		bench_die("interrupted (during %s)", call);
	bench_die("%s failed: %s: %s", call, sbx_code_name(st->code), st->err.msg);
}

double bench_cycle_timed(sbx_client *c, const char *policy, double *create_ms,
			 Sbx__V1__Launch *launch)
{
	static char *argv_true[] = {"/bin/true", NULL};
	Sbx__V1__CreateRunRequest req = SBX__V1__CREATE_RUN_REQUEST__INIT;
	Sbx__V1__ExecRequest ex = SBX__V1__EXEC_REQUEST__INIT;
	struct sbx_rpc_status st;
	double t0 = bench_now_ms(), t1;

	req.policy_json = (char *)policy;
	Sbx__V1__CreateRunResponse *r = sbx_create_run(c, &req, &st);
	t1 = bench_now_ms();
	if (!r)
		died("CreateRun", &st);
	*create_ms = t1 - t0;
	*launch = r->launch;
	ex.run_id = r->run_id;
	ex.argv = argv_true;
	ex.n_argv = 1;
	Sbx__V1__ExecResponse *e = sbx_exec(c, &ex, &st);
	if (!e)
		died("Exec", &st);
	Sbx__V1__WaitResponse *w = sbx_wait_end(c, r->run_id, e->exec_id, &st);
	if (!w)
		died("Wait", &st);
	if (w->status->reason != SBX__V1__EXIT_REASON__EXITED || w->status->exit_code != 0)
		bench_die("Exec /bin/true in run %s ended %s (exit code %d)", r->run_id,
			  sbx_exit_reason_name(w->status->reason), w->status->exit_code);
	Sbx__V1__TeardownResponse *td = sbx_teardown(c, r->run_id, &st);
	if (!td)
		died("Teardown", &st);
	t1 = bench_now_ms();
	sbx__v1__teardown_response__free_unpacked(td, NULL);
	sbx__v1__wait_response__free_unpacked(w, NULL);
	sbx__v1__exec_response__free_unpacked(e, NULL);
	sbx__v1__create_run_response__free_unpacked(r, NULL);
	return t1 - t0;
}
