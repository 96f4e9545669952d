/* SPDX-License-Identifier: Apache-2.0 */
/* Packing the side channel's messages (export_wire.h). */
#include "export_wire.h"

#include <string.h>

#include <openssl/crypto.h>

static const char hello_magic[8] = "sbxhel3";
static const char export_magic[8] = "sbxexp3";

size_t sbx_side_hello_pack(const uint8_t *nonce, size_t nonce_len, uint8_t *buf)
{
	size_t n = nonce_len <= SBX_EXPORT_NONCE_MAX ? nonce_len : SBX_EXPORT_NONCE_MAX;

	memcpy(buf, hello_magic, 8);
	buf[8] = (uint8_t)n;
	memcpy(buf + SBX_SIDE_HELLO_HEAD, nonce, n);
	return SBX_SIDE_HELLO_HEAD + n;
}

bool sbx_side_hello_check(const uint8_t *buf, size_t len, const uint8_t *nonce, size_t nonce_len)
{
	return len == SBX_SIDE_HELLO_HEAD + nonce_len && memcmp(buf, hello_magic, 8) == 0 &&
	       buf[8] == nonce_len &&
	       CRYPTO_memcmp(buf + SBX_SIDE_HELLO_HEAD, nonce, nonce_len) == 0;
}

void sbx_export_record_pack(const struct sbx_export_record *rec, uint8_t buf[SBX_EXPORT_RECORD_LEN])
{
	memcpy(buf, export_magic, 8);
	memcpy(buf + 8, &rec->index, 4);
	memcpy(buf + 12, &rec->mode, 4);
	memcpy(buf + 16, &rec->size, 8);
}

bool sbx_export_record_unpack(const uint8_t *buf, size_t len, struct sbx_export_record *rec)
{
	if (len != SBX_EXPORT_RECORD_LEN || memcmp(buf, export_magic, 8) != 0)
		return false;
	memcpy(&rec->index, buf + 8, 4);
	memcpy(&rec->mode, buf + 12, 4);
	memcpy(&rec->size, buf + 16, 8);
	return true;
}
