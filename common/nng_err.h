/* SPDX-License-Identifier: Apache-2.0 */
/* nng's errors in the one error idiom. Compiled into sbxd and libsbxclient
 * only (sbx-helper has no nng), like nng_close.c. */
#ifndef SBX_NNG_ERR_H
#define SBX_NNG_ERR_H

#include "err.h"
#include "rpc_status.h"

/* Like sbx_fail, appending ": nng_strerror(rv)"; returns -1. */
int sbx_fail_nng(struct sbx_err *err, int rv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int sbx_rpc_fail_nng(struct sbx_rpc_status *st, Sbx__V1__Code code, int rv, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
