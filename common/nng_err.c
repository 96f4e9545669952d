/* SPDX-License-Identifier: Apache-2.0 */
#include "nng_err.h"

#include <stdarg.h>
#include <stdio.h>

#include <nng/nng.h>

__attribute__((format(printf, 3, 0))) static int fail_nngv(struct sbx_err *err, int rv,
							   const char *fmt, va_list ap)
{
	char what[SBX_ERR_MAX];

	vsnprintf(what, sizeof(what), fmt, ap);
	return sbx_fail(err, "%s: %s", what, nng_strerror(rv));
}

int sbx_fail_nng(struct sbx_err *err, int rv, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fail_nngv(err, rv, fmt, ap);
	va_end(ap);
	return -1;
}

int sbx_rpc_fail_nng(struct sbx_rpc_status *st, Sbx__V1__Code code, int rv, const char *fmt, ...)
{
	va_list ap;

	st->code = code;
	st->in_progress = false;
	va_start(ap, fmt);
	fail_nngv(&st->err, rv, fmt, ap);
	va_end(ap);
	return -1;
}
