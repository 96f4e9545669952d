/* SPDX-License-Identifier: Apache-2.0 */
/* The outcome of an RPC, on both sides of the wire: a gRPC status code and
 * the one error idiom's struct sbx_err saying why. sbxd's handlers fill it
 * and the RPC layer answers with it; libsbxclient returns it to callers.
 *
 * A function that fills a struct sbx_err can be handed &st->err directly,
 * and the caller then only picks the code:
 *
 *	if (sbx_remove_tree_at(..., &st->err) < 0)
 *		return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
 *
 * No allocation, like struct sbx_err. */
#ifndef SBX_RPC_STATUS_H
#define SBX_RPC_STATUS_H

#include <stdbool.h>

#include <sbx/v1/sandbox.pb-c.h>

#include "err.h"

struct sbx_rpc_status {
	Sbx__V1__Code code; /* SBX__V1__CODE__OK on success */
	struct sbx_err err; /* err.msg is empty on success */
	/* With UNAVAILABLE only: an earlier attempt of this request is still
	 * running where it was sent (Response.in_progress), so only that
	 * host may be asked again. Every setter below clears it. */
	bool in_progress;
};

/* Each sets code and message and returns -1, for `return sbx_rpc_fail(...)`. */
int sbx_rpc_fail(struct sbx_rpc_status *st, Sbx__V1__Code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* ... appending ": strerror(errno)". */
int sbx_rpc_fail_errno(struct sbx_rpc_status *st, Sbx__V1__Code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* ... appending ": strerror(errnum)". */
int sbx_rpc_fail_errnum(struct sbx_rpc_status *st, Sbx__V1__Code code, int errnum, const char *fmt,
			...) __attribute__((format(printf, 4, 5)));
/* UNAVAILABLE with in_progress: the request's earlier attempt still runs
 * here ("retry this host, never another"); returns -1. */
int sbx_rpc_in_progress(struct sbx_rpc_status *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Sets only the code of an error already in st->err; returns -1. */
int sbx_rpc_code(struct sbx_rpc_status *st, Sbx__V1__Code code);
/* Prefixes "context: " to st's message (the code stays); returns -1. */
int sbx_rpc_prefix(struct sbx_rpc_status *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void sbx_rpc_ok(struct sbx_rpc_status *st);

/* What ran short when errnum is a short-lived shortage of sbxd's or the
 * host's (EMFILE, ENFILE: descriptors; ENOMEM, ENOBUFS: memory; EAGAIN:
 * processes, threads or a busy resource), which a later retry may well not
 * meet again; NULL for any other errno. */
const char *sbx_errno_shortage(int errnum);
/* Sets the code of the error in st->err: UNAVAILABLE, with the message
 * prefixed by what ran short and "retry", when its errnum is a shortage
 * (never a NOT_FOUND or OK that the shortage made up); otherwise code.
 * Returns -1. */
int sbx_rpc_code_unless_short(struct sbx_rpc_status *st, Sbx__V1__Code code);

#endif
