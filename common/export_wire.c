/* SPDX-License-Identifier: Apache-2.0 */
/* Packing the export side channel's records (export_wire.h). Both ends are
 * on one host, so integers go in its own byte order. */
#include "export_wire.h"

#include <string.h>

static const char magic[8] = "sbxexp1";

size_t sbx_export_record_pack(const struct sbx_export_record *rec, uint8_t *buf)
{
	uint32_t pad = 0;
	size_t n = rec->nonce_len <= SBX_EXPORT_NONCE_MAX ? rec->nonce_len : SBX_EXPORT_NONCE_MAX;

	memcpy(buf, magic, 8);
	memcpy(buf + 8, &rec->index, 4);
	memcpy(buf + 12, &pad, 4);
	memcpy(buf + 16, &rec->size, 8);
	buf[24] = (uint8_t)n;
	memcpy(buf + SBX_EXPORT_RECORD_HEAD, rec->nonce, n);
	return SBX_EXPORT_RECORD_HEAD + n;
}

bool sbx_export_record_unpack(const uint8_t *buf, size_t len, struct sbx_export_record *rec)
{
	if (len < SBX_EXPORT_RECORD_HEAD || memcmp(buf, magic, 8) != 0 ||
	    buf[24] > SBX_EXPORT_NONCE_MAX || len != SBX_EXPORT_RECORD_HEAD + (size_t)buf[24])
		return false;
	memcpy(&rec->index, buf + 8, 4);
	memcpy(&rec->size, buf + 16, 8);
	rec->nonce_len = buf[24];
	memcpy(rec->nonce, buf + SBX_EXPORT_RECORD_HEAD, rec->nonce_len);
	return true;
}
