/* SPDX-License-Identifier: Apache-2.0 */
/* sha256, the one implementation (OpenSSL's EVP: SHA-NI where the CPU has
 * it). sha256.c is linked into sbxd, the clients and the tests; sbx-helper,
 * which needs only sbx_sha256_buf and only for a policy's digest, has its
 * own definition that loads libcrypto when first asked
 * (helper/sha256_dl.c): mapping libcrypto costs every helper exec about
 * 2 ms on a VM whose page faults are dear (docs/dev/benchmarks.md). */
#ifndef SBX_SHA256_H
#define SBX_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* sha256 of len bytes at buf into md. */
int sbx_sha256_buf(const void *buf, size_t len, unsigned char md[32], struct sbx_err *err);

/* sha256 (OpenSSL EVP) of everything read from fd's current offset to its
 * end, as 64 lowercase hex digits + NUL; *bytes (if non-NULL) gets the
 * length. */
int sbx_sha256_fd(int fd, char hex[65], uint64_t *bytes, struct sbx_err *err);
/* The same, reading at most `max` bytes: a file that holds more fails with
 * EFBIG (it grew while read); stop (if non-NULL) is asked before every
 * chunk of 256 KiB and ends the pass with ECANCELED when it says so. */
int sbx_sha256_fd_max(int fd, uint64_t max, bool (*stop)(void *arg), void *arg, char hex[65],
		      uint64_t *bytes, struct sbx_err *err);
/* 32 bytes of digest as 64 lowercase hex digits + NUL. */
void sbx_sha256_hex(const unsigned char md[32], char hex[65]);

#endif
