/* SPDX-License-Identifier: Apache-2.0 */
#include "sha256.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

int sbx_sha256_buf(const void *buf, size_t len, unsigned char md[32], struct sbx_err *err)
{
	unsigned char out[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	/* Reading openssl.cnf costs milliseconds and configures nothing a
	 * sha256 needs. */
	OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, NULL);
	if (!EVP_Digest(buf, len, out, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		return sbx_fail(err, "sha256 failed");
	memcpy(md, out, 32);
	return 0;
}

void sbx_sha256_hex(const unsigned char md[32], char hex[65])
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 0; i < 32; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[64] = '\0';
}

int sbx_sha256_fd(int fd, char hex[65], uint64_t *bytes, struct sbx_err *err)
{
	return sbx_sha256_fd_max(fd, UINT64_MAX, NULL, NULL, hex, bytes, err);
}

int sbx_sha256_fd_max(int fd, uint64_t max, bool (*stop)(void *arg), void *arg, char hex[65],
		      uint64_t *bytes, struct sbx_err *err)
{
	enum { CHUNK = 256 * 1024 };
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	uint64_t total = 0;
	EVP_MD_CTX *ctx;
	unsigned char *buf;
	int rc = 0;

	/* As in sbx_sha256_buf: no openssl.cnf. */
	OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, NULL);
	ctx = EVP_MD_CTX_new();
	buf = malloc(CHUNK);
	if (!ctx || !buf || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
		rc = sbx_fail(err, "sha256: out of memory");
		goto out;
	}
	for (;;) {
		/* One byte past max tells a file that grew from one that ended. */
		size_t want = max - total < CHUNK ? (size_t)(max - total) + 1 : CHUNK;
		ssize_t n;

		if (stop && stop(arg)) {
			rc = sbx_fail_errnum(err, ECANCELED, "sha256: stopped");
			goto out;
		}
		n = read(fd, buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = sbx_fail_errno(err, "read");
			goto out;
		}
		if (n == 0)
			break;
		if ((uint64_t)n > max - total) {
			rc = sbx_fail_errnum(err, EFBIG, "grew past %llu bytes while read",
					     (unsigned long long)max);
			goto out;
		}
		if (!EVP_DigestUpdate(ctx, buf, (size_t)n)) {
			rc = sbx_fail(err, "sha256 failed");
			goto out;
		}
		total += (uint64_t)n;
	}
	if (!EVP_DigestFinal_ex(ctx, md, &mdlen) || mdlen != 32) {
		rc = sbx_fail(err, "sha256 failed");
		goto out;
	}
	sbx_sha256_hex(md, hex);
	if (bytes)
		*bytes = total;
out:
	free(buf);
	EVP_MD_CTX_free(ctx);
	return rc;
}
