/* SPDX-License-Identifier: Apache-2.0 */
/* The one check() of the unit tests: a TAP-like line per check, and a
 * closing "N passed, N failed" line; the exit status is the verdict. */
#ifndef SBX_TEST_CHECK_H
#define SBX_TEST_CHECK_H

#include <stdbool.h>

/* Prints "ok N - what" or "not ok N - what"; returns ok. */
bool check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the closing line; 0 when every check passed, else 1. */
int check_done(void);

#endif
