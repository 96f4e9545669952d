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

/* Beneath the destination top (sbx_dest_open), the directories of the
 * relative path rel made (0755 less the umask) or opened, each without
 * following a link and held to the destination's rule (ours, not writable
 * by others); returns the last one's fd, *base pointing into rel at the
 * file's name. "", "." and ".." components are refused. */
int sbx_dest_subdir(int top, const char *rel, const char **base, struct sbx_err *err);
/* dir and every directory above it, up to the root: each owned by root or
 * the caller and writable by no one else unless sticky (OpenSSH's rule), or
 * refused naming the first that is not; dest names the destination. */
int sbx_dest_check_ancestors(int dir, const char *dest, struct sbx_err *err);
/* Whether name in dir may be replaced by a rename: nothing there or a
 * regular file; anything else (a link, a directory, a FIFO) is refused,
 * named as rel. */
int sbx_dest_check_slot(int dir, const char *name, const char *rel, struct sbx_err *err);

#endif
