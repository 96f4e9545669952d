/* SPDX-License-Identifier: Apache-2.0 */
/* What the library's files share and callers never see. */
#ifndef SBX_CLIENT_INTERNAL_H
#define SBX_CLIENT_INTERNAL_H

#include <stddef.h>

#include "err.h"
#include "sbxclient.h"

#define SBX_METHOD_PREFIX "/sbx.v1.Sandbox/"

/* Random request id: 16 random bytes as 32 hex digits + NUL. */
int sbx_request_id(char out[33], struct sbx_err *err);

/* Bytes as lowercase hex; out holds 2*n+1. */
void sbx_hex(const unsigned char *in, size_t n, char *out);

#endif
