/* SPDX-License-Identifier: Apache-2.0 */
/* The fix for nng 1.5.2's bug #1518 (a peer that closes during the SP
 * handshake stops the listener, or the dialer, for good), made from outside
 * libnng: see nng_epipe.c. Compiled into sbxd and libsbxclient (the dialer
 * side has the twin of the bug) when nng is older than 1.6, which fixed it
 * (SBX_NNG_EPIPE_FIX, set by CMakeLists.txt). */
#ifndef SBX_NNG_EPIPE_H
#define SBX_NNG_EPIPE_H

#include "err.h"

#ifdef SBX_NNG_EPIPE_FIX
/* 0 when libnng's sendmsg calls land in nng_epipe.c's sendmsg (libnng is
 * loaded dynamically and the program's definition is the one its PLT binds
 * to); -1 with the reason otherwise. A program that relies on the fix
 * refuses to start without it. */
int sbx_nng_epipe_check(struct sbx_err *err);
#else
/* nng >= 1.6: nothing to fix. */
static inline int sbx_nng_epipe_check(struct sbx_err *err)
{
	(void)err;
	return 0;
}
#endif

#endif
