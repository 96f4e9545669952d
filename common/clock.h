/* SPDX-License-Identifier: Apache-2.0 */
/* The one clock idiom of the tree: deadlines and durations on CLOCK_MONOTONIC
 * (a clock step neither cuts a wait short nor stretches it), wall time only
 * for records a person reads. */
#ifndef SBX_CLOCK_H
#define SBX_CLOCK_H

#include <stdint.h>
#include <time.h>

int64_t sbx_mono_ns(void);
int64_t sbx_mono_ms(void);
int64_t sbx_unix_ms(void);
/* The CLOCK_MONOTONIC instant ms milliseconds from now, for
 * pthread_cond_timedwait on a condvar set to CLOCK_MONOTONIC. */
struct timespec sbx_mono_after_ms(int64_t ms);

#endif
