/* SPDX-License-Identifier: Apache-2.0 */
/* Protobuf fields read where they lie (client_internal.h): a reply's bytes
 * field is used in place, in the nng message that carried it, instead of
 * being copied out by an unpack of the envelope and another of the body. */
#include "client_internal.h"

static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t x = 0;

	for (unsigned shift = 0; shift < 64; shift += 7) {
		if (*p >= end)
			return -1;
		uint8_t b = *(*p)++;
		x |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return -1;
}

int sbx_pb_next(const uint8_t **p, const uint8_t *end, struct sbx_pb_field *f)
{
	uint64_t key;

	if (*p >= end)
		return 0;
	if (varint(p, end, &key) < 0 || key >> 3 == 0 || key >> 3 > UINT32_MAX)
		return -1;
	f->num = (uint32_t)(key >> 3);
	f->wt = (int)(key & 7);
	f->v = 0;
	f->data = NULL;
	f->len = 0;
	switch (f->wt) {
	case 0: /* varint */
		return varint(p, end, &f->v) < 0 ? -1 : 1;
	case 1: /* 64-bit */
	case 5: /* 32-bit */ {
		size_t n = f->wt == 1 ? 8 : 4;
		if ((size_t)(end - *p) < n)
			return -1;
		f->data = *p;
		f->len = n;
		*p += n;
		return 1;
	}
	case 2: { /* length-delimited */
		uint64_t n;
		if (varint(p, end, &n) < 0 || n > (uint64_t)(end - *p))
			return -1;
		f->data = *p;
		f->len = (size_t)n;
		*p += n;
		return 1;
	}
	default: /* groups are not proto3 */
		return -1;
	}
}
