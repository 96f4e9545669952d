/* SPDX-License-Identifier: Apache-2.0 */
/* Sleeping a while, the one way: on CLOCK_MONOTONIC (see clock.h) and
 * through signals, so a caller that polls a flag set by a signal handler
 * looks at it again after at most ms. */
#ifndef SBX_SLEEP_H
#define SBX_SLEEP_H

#include <stdint.h>

void sbx_sleep_ms(int64_t ms);

#endif
