/* SPDX-License-Identifier: Apache-2.0 */
#include "bench_sbxd.h"

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
