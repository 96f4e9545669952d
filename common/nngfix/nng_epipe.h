/* SPDX-License-Identifier: Apache-2.0 */
/* The fix for nng 1.5.2's bug #1518 (a peer that closes during the SP
 * handshake stops the listener, or the dialer, for good), made from outside
 * libnng: see nng_epipe.c. Compiled into sbxd and libsbxclient (the dialer
 * side has the twin of the bug). */
#ifndef SBX_NNG_EPIPE_H
#define SBX_NNG_EPIPE_H

#include <stdbool.h>

#include "err.h"

/* 0 when libnng's sendmsg calls land in nng_epipe.c's sendmsg (libnng is
 * loaded dynamically and the program's definition is the one its PLT binds
 * to); -1 with the reason otherwise. A program that relies on the fix
 * refuses to start without it. */
int sbx_nng_epipe_check(struct sbx_err *err);

/* Whether a return address lies in libnng's code: the interposed libc
 * calls act only on libnng's own calls. */
bool sbx_nng_is_caller(const void *return_address);

/* The next definition of a libc function after the program's own (the
 * real one, or a sanitizer's interceptor in front of it); NULL if none. */
void *sbx_nng_next_symbol(const char *name);

#endif
