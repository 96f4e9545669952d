/* SPDX-License-Identifier: Apache-2.0 */
/* The one error idiom of the tree: a function that can fail returns -1 (or
 * NULL) and fills a caller-owned struct sbx_err, innermost cause first; each
 * caller that adds context prefixes it. No allocation, so it works in a
 * forked child and after a failed malloc. */
#ifndef SBX_ERR_H
#define SBX_ERR_H

#include <stdarg.h>

#define SBX_ERR_MAX 1024

struct sbx_err {
	int errnum; /* errno of the innermost cause, 0 when not a system error */
	char msg[SBX_ERR_MAX];
};

/* Sets err to the formatted message; returns -1. */
int sbx_fail(struct sbx_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like sbx_fail, appending ": strerror(errno)" and recording errno. */
int sbx_fail_errno(struct sbx_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same with an explicit errno value. */
int sbx_fail_errnum(struct sbx_err *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes "context: " to an error already set; returns -1. */
int sbx_err_prefix(struct sbx_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbx_err_clear(struct sbx_err *err);
/* The va_list form under all of the above (errnum 0: no ": strerror"). */
int sbx_failv(struct sbx_err *err, int errnum, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
