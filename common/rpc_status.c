/* SPDX-License-Identifier: Apache-2.0 */
#include "rpc_status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int sbx_rpc_fail(struct sbx_rpc_status *st, Sbx__V1__Code code, const char *fmt, ...)
{
	va_list ap;

	st->code = code;
	st->in_progress = false;
	va_start(ap, fmt);
	sbx_failv(&st->err, 0, fmt, ap);
	va_end(ap);
	return -1;
}

int sbx_rpc_fail_errno(struct sbx_rpc_status *st, Sbx__V1__Code code, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	st->code = code;
	st->in_progress = false;
	va_start(ap, fmt);
	sbx_failv(&st->err, saved, fmt, ap);
	va_end(ap);
	errno = saved;
	return -1;
}

int sbx_rpc_fail_errnum(struct sbx_rpc_status *st, Sbx__V1__Code code, int errnum, const char *fmt,
			...)
{
	va_list ap;

	st->code = code;
	st->in_progress = false;
	va_start(ap, fmt);
	sbx_failv(&st->err, errnum, fmt, ap);
	va_end(ap);
	return -1;
}

int sbx_rpc_in_progress(struct sbx_rpc_status *st, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sbx_failv(&st->err, 0, fmt, ap);
	va_end(ap);
	st->code = SBX__V1__CODE__UNAVAILABLE;
	st->in_progress = true;
	return -1;
}

int sbx_rpc_code(struct sbx_rpc_status *st, Sbx__V1__Code code)
{
	st->code = code;
	st->in_progress = false;
	return -1;
}

int sbx_rpc_prefix(struct sbx_rpc_status *st, const char *fmt, ...)
{
	char prefix[SBX_ERR_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	return sbx_err_prefix(&st->err, "%s", prefix);
}

void sbx_rpc_ok(struct sbx_rpc_status *st)
{
	st->code = SBX__V1__CODE__OK;
	st->in_progress = false;
	sbx_err_clear(&st->err);
}

const char *sbx_errno_shortage(int errnum)
{
	switch (errnum) {
	case EMFILE:
		return "file descriptors (sbxd's limit)";
	case ENFILE:
		return "file descriptors (the host's limit)";
	case ENOMEM:
	case ENOBUFS:
		return "memory";
	case EAGAIN:
		return "a resource at its limit (processes, threads) or busy";
	default:
		return NULL;
	}
}

int sbx_rpc_code_unless_short(struct sbx_rpc_status *st, Sbx__V1__Code code)
{
	const char *what = sbx_errno_shortage(st->err.errnum);

	if (!what)
		return sbx_rpc_code(st, code);
	st->code = SBX__V1__CODE__UNAVAILABLE;
	st->in_progress = false;
	return sbx_rpc_prefix(st, "sbxd is short of %s for now; retry", what);
}
