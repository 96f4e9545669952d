/* What the library's files share and callers never see. */
#ifndef SBX_CLIENT_INTERNAL_H
#define SBX_CLIENT_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>

#include "sbxclient.h"

#define SBX_METHOD_PREFIX "/sbx.v1.Sandbox/"

/* Fills st (code + formatted message); returns -1. */
int sbx_st_fail(struct sbx_call_status *st, Sbx__V1__Code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void sbx_st_ok(struct sbx_call_status *st);
/* Prefixes "context: " to st's message (the code stays); returns -1. */
int sbx_err_prefix_st(struct sbx_call_status *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Random request id: 16 random bytes as 32 hex digits + NUL. */
int sbx_request_id(char out[33]);

/* Bytes as lowercase hex; out holds 2*n+1. */
void sbx_hex(const unsigned char *in, size_t n, char *out);

#endif
