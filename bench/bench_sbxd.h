/* SPDX-License-Identifier: Apache-2.0 */
/* What the benchmarks that start their own sbxd and call it over ipc share
 * beyond bench_util: a libsbxclient handle that stops on an interrupt, and
 * waiting until the new sbxd answers. Links libsbxclient. */
#ifndef SBX_BENCH_SBXD_H
#define SBX_BENCH_SBXD_H

#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "sbxclient.h"

/* A client for endpoint whose calls end once bench_interrupted is set;
 * dies if the options are refused. */
sbx_client *bench_client_open(const char *endpoint, uint32_t timeout_ms, int retries);
/* Health on endpoint every 50 ms until sbxd answers (a note names its
 * version and pid); dies naming log's tail if *pid exits first (*pid
 * becomes -1), or after timeout_ms. */
void bench_sbxd_wait(const char *endpoint, pid_t *pid, const char *log, int timeout_ms);

/* An option's value that is merged into a private sbxd's config (e.g.
 * --sbxd-config '{"capacity": {"memory_overcommit_percent": 300}}'): the
 * parsed object, NULL for NULL; dies naming opt when it is not JSON or not
 * an object. */
json_t *bench_config_object(const char *opt, const char *text);

/* ---- the warm pool (docs/operator/pool.md) ---- */

/* A policy sbx-bench-sbxd keeps a pool shape of, and the config entry for
 * it: {"name": "bench", "policy": BENCH_POOL_POLICY, "size": size}. Any
 * other policy (memory_mb 256: BENCH_COLD_POLICY) creates cold. */
#define BENCH_POOL_POLICY                                                                          \
	"{\"image\":\"host\",\"limits\":{\"script_seconds\":30,\"memory_mb\":255}}"
#define BENCH_COLD_POLICY                                                                          \
	"{\"image\":\"host\",\"limits\":{\"script_seconds\":30,\"memory_mb\":256}}"
json_t *bench_pool_config(size_t size);

/* Health every 5 ms until the pool's first shape has `ready` members;
 * dies naming the shape's error after timeout_ms. Untimed: call it before
 * a sample, so that a refill does not run under the next measure. */
void bench_pool_wait_ready(sbx_client *c, uint32_t ready, int timeout_ms);

/* One CreateRun + Exec(/bin/true) + Wait + Teardown of policy: the whole
 * cycle's ms, the CreateRun's alone into *create_ms and its launch into
 * *launch. Dies naming the call that failed. */
double bench_cycle_timed(sbx_client *c, const char *policy, double *create_ms,
			 Sbx__V1__Launch *launch);

#endif
