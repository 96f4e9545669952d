/* SPDX-License-Identifier: Apache-2.0 */
#include "err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 3, 0))) static void format_into(struct sbx_err *err, int errnum,
							      const char *fmt, va_list ap)
{
	int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	err->errnum = errnum;
	if (errnum && n >= 0 && (size_t)n < sizeof(err->msg))
		snprintf(err->msg + n, sizeof(err->msg) - (size_t)n, ": %s", strerror(errnum));
}

int sbx_failv(struct sbx_err *err, int errnum, const char *fmt, va_list ap)
{
	format_into(err, errnum, fmt, ap);
	return -1;
}

int sbx_fail(struct sbx_err *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	format_into(err, 0, fmt, ap);
	va_end(ap);
	return -1;
}

int sbx_fail_errno(struct sbx_err *err, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;
	va_start(ap, fmt);
	format_into(err, saved, fmt, ap);
	va_end(ap);
	errno = saved;
	return -1;
}

int sbx_fail_errnum(struct sbx_err *err, int errnum, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	format_into(err, errnum, fmt, ap);
	va_end(ap);
	return -1;
}

int sbx_err_prefix(struct sbx_err *err, const char *fmt, ...)
{
	char prefix[SBX_ERR_MAX];
	char old[SBX_ERR_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	/* Truncation keeps the outer context, which is the more useful end. */
	size_t n = strnlen(prefix, sizeof(err->msg) - 3);
	memcpy(err->msg, prefix, n);
	memcpy(err->msg + n, ": ", 2);
	size_t room = sizeof(err->msg) - n - 3;
	size_t m = strnlen(old, room);
	memcpy(err->msg + n + 2, old, m);
	err->msg[n + 2 + m] = '\0';
	return -1;
}

void sbx_err_clear(struct sbx_err *err)
{
	err->errnum = 0;
	err->msg[0] = '\0';
}
