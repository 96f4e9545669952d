/* SPDX-License-Identifier: Apache-2.0 */
/* What each exec gives up before untrusted code runs. */
#ifndef SBX_PRIVS_H
#define SBX_PRIVS_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"
#include "sbx/v1/policy.pb-c.h"

/* Every capability out of every set (bounding, ambient, inheritable,
 * permitted, effective), securebits locked so none can come back through
 * execve, no_new_privs, and not dumpable (no /proc/PID peeking by the
 * exec's own children at the process that set them up). */
int sbx_privs_drop(struct sbx_err *err);
/* The bounding set's part, which sbx_privs_drop expects done (it fails
 * otherwise): every capability out of it. Alone it takes nothing the
 * process holds, only what an execve could give; exec init does it before
 * its claim, so that a prepared one has it done ahead. */
int sbx_privs_drop_bounding(struct sbx_err *err);

/* RLIMIT_CORE 0, bounded RLIMIT_NOFILE, and the per-user limits the host
 * shares, always; with `fallback` (no cgroup) also RLIMIT_CPU and
 * RLIMIT_NPROC from the policy. */
int sbx_rlimits_apply(const Sbx__V1__Limits *limits, uint64_t nofile, bool fallback,
		      struct sbx_err *err);
/* The fallback's RLIMIT_AS, applied right before execve. */
int sbx_rlimit_address_space(const Sbx__V1__Limits *limits, struct sbx_err *err);

#endif
