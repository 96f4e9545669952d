/* SPDX-License-Identifier: Apache-2.0 */
/* What the benchmarks that start their own sbxd and call it over ipc share
 * beyond bench_util: a libsbxclient handle that stops on an interrupt, and
 * waiting until the new sbxd answers. Links libsbxclient. */
#ifndef SBX_BENCH_SBXD_H
#define SBX_BENCH_SBXD_H

#include <stdint.h>
#include <sys/types.h>

#include "sbxclient.h"

/* A client for endpoint whose calls end once bench_interrupted is set;
 * dies if the options are refused. */
sbx_client *bench_client_open(const char *endpoint, uint32_t timeout_ms, int retries);
/* Health on endpoint every 50 ms until sbxd answers (a note names its
 * version and pid); dies naming log's tail if *pid exits first (*pid
 * becomes -1), or after timeout_ms. */
void bench_sbxd_wait(const char *endpoint, pid_t *pid, const char *log, int timeout_ms);

#endif
