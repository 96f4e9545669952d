/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_pb_next (clients/c/pbwire.c), which reads a server's reply where it
 * lies: a packed FetchArtifactResponse read field by field gives what
 * protobuf-c packed, every truncation of it and hostile bytes (a length
 * past the end, an endless varint, field 0, groups) end in -1 without
 * reading past the buffer, and no field points outside it. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "client_internal.h"

/* Every field of buf[0..n) lies inside it; the scan's end result. */
static int scan(const uint8_t *buf, size_t n, int *fields)
{
	const uint8_t *p = buf, *end = buf + n;
	struct sbx_pb_field f;
	int rc;

	*fields = 0;
	while ((rc = sbx_pb_next(&p, end, &f)) == 1) {
		if (f.data && (f.data < buf || f.data + f.len > end))
			return -2;
		if (p > end)
			return -2;
		(*fields)++;
	}
	return rc;
}

int main(void)
{
	Sbx__V1__FetchArtifactResponse r = SBX__V1__FETCH_ARTIFACT_RESPONSE__INIT;
	uint8_t data[300];
	int fields;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)i;
	r.data.data = data;
	r.data.len = sizeof(data);
	r.size = 1ull << 40;
	r.eof = true;
	r.sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	r.live = true;
	size_t n = sbx__v1__fetch_artifact_response__get_packed_size(&r);
	uint8_t *buf = malloc(n);
	check(buf != NULL, "malloc");
	sbx__v1__fetch_artifact_response__pack(&r, buf);

	const uint8_t *p = buf, *end = buf + n;
	struct sbx_pb_field f;
	bool seen[6] = {false};
	while (sbx_pb_next(&p, end, &f) == 1) {
		if (f.num < 6)
			seen[f.num] = true;
		if (f.num == 1)
			check(f.wt == 2 && f.len == sizeof(data) && !memcmp(f.data, data, f.len),
			      "data in place");
		if (f.num == 2)
			check(f.wt == 0 && f.v == 1ull << 40, "size");
		if (f.num == 3)
			check(f.wt == 0 && f.v == 1, "eof");
		if (f.num == 4)
			check(f.wt == 2 && f.len == 64 && !memcmp(f.data, r.sha256, 64), "sha256");
		if (f.num == 5)
			check(f.wt == 0 && f.v == 1, "live");
	}
	check(p == end, "read to the end");
	check(seen[1] && seen[2] && seen[3] && seen[4] && seen[5], "every field seen");
	check(scan(buf, n, &fields) == 0 && fields == 5, "five fields, then the end");

	/* Every truncation: never a field outside, and -1 where a field is cut. */
	bool all_inside = true, cut_refused = true;
	for (size_t k = 0; k < n; k++) {
		int rc = scan(buf, k, &fields);
		if (rc == -2)
			all_inside = false;
		if (rc == 0 && fields == 5)
			cut_refused = false;
	}
	check(all_inside, "truncated: no field outside the buffer");
	check(cut_refused, "truncated: never the whole message");

	/* A length past the end. */
	uint8_t longer[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3};
	check(scan(longer, sizeof(longer), &fields) == -1 && fields == 0, "length past the end");
	/* A varint of eleven bytes. */
	uint8_t endless[] = {0x10, 0xff, 0xff, 0xff, 0xff, 0xff,
			     0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
	check(scan(endless, sizeof(endless), &fields) == -1, "varint longer than 64 bits");
	/* Field number 0, and a group (wire type 3). */
	uint8_t zero[] = {0x00, 0x01};
	check(scan(zero, sizeof(zero), &fields) == -1, "field 0");
	uint8_t group[] = {0x0b, 0x0c};
	check(scan(group, sizeof(group), &fields) == -1, "group");
	/* Fixed 64-bit cut short. */
	uint8_t fixed[] = {0x09, 1, 2, 3};
	check(scan(fixed, sizeof(fixed), &fields) == -1, "fixed64 cut short");
	free(buf);
	return check_done();
}
