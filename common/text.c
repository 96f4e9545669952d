/* SPDX-License-Identifier: Apache-2.0 */
#include "text.h"

#include <stdio.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

size_t sbx_utf8_len(const unsigned char *s)
{
	unsigned char c = s[0];
	size_t n;
	unsigned char lo = 0x80, hi = 0xbf;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	/* Overlong forms, surrogates and code points past U+10FFFF. */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

bool sbx_utf8_valid(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	while (*p) {
		size_t n = sbx_utf8_len(p);

		if (!n)
			return false;
		p += n;
	}
	return true;
}

size_t sbx_text_unsafe_len(const unsigned char *s)
{
	size_t n = sbx_utf8_len(s);

	if (n == 0 || (n == 1 && (*s < 0x20 || *s == 0x7f)))
		return 1;
	if (n == 2 && s[0] == 0xc2 && s[1] < 0xa0) /* C1 */
		return 2;
	if (n == 3 && s[0] == 0xe2 &&
	    ((s[1] == 0x80 && s[2] >= 0xaa && s[2] <= 0xae) || /* U+202A..U+202E */
	     (s[1] == 0x81 && s[2] >= 0xa6 && s[2] <= 0xa9)))  /* U+2066..U+2069 */
		return 3;
	return 0;
}

void sbx_escape_flags(char *dst, size_t dst_size, const char *src, unsigned flags)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t o = 0;

	if (dst_size == 0)
		return;
	while (*s) {
		size_t bad = sbx_text_unsafe_len(s);
		size_t n = bad ? bad : sbx_utf8_len(s);
		char esc[13];
		const char *out = (const char *)s;
		size_t len = n;

		if (bad) {
			/* Byte by byte, so the original bytes can be read back. */
			for (size_t i = 0; i < bad; i++)
				snprintf(esc + 4 * i, sizeof(esc) - 4 * i, "\\x%02x", s[i]);
			out = esc;
			len = 4 * bad;
		} else if (*s == '\\' && !(flags & SBX_ESCAPE_KEEP_BACKSLASH)) {
			out = "\\\\";
			len = 2;
		}
		if (o + len >= dst_size)
			break;
		memcpy(dst + o, out, len);
		o += len;
		s += n;
	}
	dst[o] = '\0';
}

void sbx_escape(char *dst, size_t dst_size, const char *src)
{
	sbx_escape_flags(dst, dst_size, src, 0);
}

/* The first string field of m (or of a message inside it) that is not
 * UTF-8, as a path (".policy.env[0].value") in `where`; false when none:
 * proto3 strings must be UTF-8, and the policy's JSON form cannot hold one. */
bool sbx_proto_bad_string(const ProtobufCMessage *m, char *where, size_t size)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	size_t len = strlen(where);

	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *base = (const char *)m + f->offset;
		size_t n = 1;
		/* A singular field holds one pointer, a repeated one an array. */
		const void *const *items = (const void *const *)base;

		if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			n = *(const size_t *)((const char *)m + f->quantifier_offset);
			items = *(const void *const *const *)base;
		}
		for (size_t k = 0; k < n; k++) {
			const void *v = items ? items[k] : NULL;

			if (!v)
				continue;
			if (f->label == PROTOBUF_C_LABEL_REPEATED)
				snprintf(where + len, size - len, ".%s[%zu]", f->name, k);
			else
				snprintf(where + len, size - len, ".%s", f->name);
			if (f->type == PROTOBUF_C_TYPE_STRING
				? !sbx_utf8_valid(v)
				: sbx_proto_bad_string(v, where, size))
				return true;
		}
		where[len] = '\0';
	}
	return false;
}

void sbx_text_lines(const char *text, size_t len, size_t max_line,
		    void (*say)(const char *line, size_t len, void *arg), void *arg)
{
	const char *end = text + len;

	while (text < end) {
		size_t n = 0, most = (size_t)(end - text);

		if (most > max_line)
			most = max_line;
		while (n < most && text[n] != '\n' && text[n] != '\0')
			n++;
		if (n)
			say(text, n, arg);
		text += n;
		if (text < end && (*text == '\n' || *text == '\0'))
			text++;
	}
}
