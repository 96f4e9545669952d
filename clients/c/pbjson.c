/* SPDX-License-Identifier: Apache-2.0 */
/* protobuf-c messages <-> jansson, by descriptor (proto3 JSON mapping; see
 * pbjson.h for the rules). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pbjson.h"

/* Messages of sbx are non-recursive; a generic reader still bounds depth. */
#define MAX_DEPTH    32
#define PATH_MAX_LEN 256

#define MEMBER(type, msg, off)	(*(type *)((char *)(msg) + (off)))
#define CMEMBER(type, msg, off) (*(const type *)((const char *)(msg) + (off)))

void sbx_pbjson_name(const char *field, char *out, size_t size)
{
	size_t n = 0;
	bool upper = false;

	if (!size)
		return;
	for (const char *p = field; *p && n + 1 < size; p++) {
		if (*p == '_') {
			upper = true;
			continue;
		}
		out[n++] = upper ? (char)toupper((unsigned char)*p) : *p;
		upper = false;
	}
	out[n] = '\0';
}

static size_t elem_size(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
	case PROTOBUF_C_TYPE_FLOAT:
	case PROTOBUF_C_TYPE_ENUM:
		return 4;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE:
		return 8;
	case PROTOBUF_C_TYPE_BOOL:
		return sizeof(protobuf_c_boolean);
	case PROTOBUF_C_TYPE_STRING:
		return sizeof(char *);
	case PROTOBUF_C_TYPE_BYTES:
		return sizeof(ProtobufCBinaryData);
	case PROTOBUF_C_TYPE_MESSAGE:
		return sizeof(ProtobufCMessage *);
	}
	return 0;
}

/* protoc names a map<K,V> field's entry type <CamelField>Entry, nested in
 * the message, with fields key = 1 and value = 2. */
static bool is_map(const ProtobufCFieldDescriptor *f)
{
	const ProtobufCMessageDescriptor *d = f->descriptor;
	char want[128];
	size_t n = 0;
	bool upper = true;

	if (f->label != PROTOBUF_C_LABEL_REPEATED || f->type != PROTOBUF_C_TYPE_MESSAGE ||
	    d->n_fields != 2 || d->fields[0].id != 1 || d->fields[1].id != 2 ||
	    strcmp(d->fields[0].name, "key") || strcmp(d->fields[1].name, "value"))
		return false;
	for (const char *p = f->name; *p && n + 6 < sizeof(want); p++) {
		if (*p == '_') {
			upper = true;
			continue;
		}
		want[n++] = upper ? (char)toupper((unsigned char)*p) : *p;
		upper = false;
	}
	memcpy(want + n, "Entry", 6);
	return !strcmp(d->short_name, want);
}

/* ---------------------------------------------------------------- to JSON */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static json_t *base64_json(const ProtobufCBinaryData *bd)
{
	size_t out_len = 4 * ((bd->len + 2) / 3);
	char *out = malloc(out_len + 1);
	size_t o = 0;

	if (!out)
		return NULL;
	for (size_t i = 0; i < bd->len; i += 3) {
		uint32_t v = (uint32_t)bd->data[i] << 16;
		if (i + 1 < bd->len)
			v |= (uint32_t)bd->data[i + 1] << 8;
		if (i + 2 < bd->len)
			v |= bd->data[i + 2];
		out[o++] = b64[(v >> 18) & 63];
		out[o++] = b64[(v >> 12) & 63];
		out[o++] = i + 1 < bd->len ? b64[(v >> 6) & 63] : '=';
		out[o++] = i + 2 < bd->len ? b64[v & 63] : '=';
	}
	json_t *j = json_stringn(out, o);
	free(out);
	return j;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t left)
{
	size_t n;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if ((s[0] & 0xf0) == 0xe0) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if ((s[0] & 0xf8) == 0xf0) {
		n = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if (n > left)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates and beyond U+10FFFF are not UTF-8. */
	if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return n;
}

static json_t *string_json(const char *s)
{
	if (!s)
		return json_string("");
	json_t *j = json_string(s);
	if (j)
		return j;
	/* Not UTF-8 (protobuf-c does not check): keep what is, mark what is not. */
	size_t len = strlen(s), o = 0;
	char *fixed = malloc(3 * len + 1);
	if (!fixed)
		return NULL;
	for (size_t i = 0; i < len;) {
		size_t n = utf8_seq((const unsigned char *)s + i, len - i);
		if (n) {
			memcpy(fixed + o, s + i, n);
			o += n;
			i += n;
		} else {
			memcpy(fixed + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	j = json_stringn(fixed, o);
	free(fixed);
	return j;
}

static json_t *real_json(double v)
{
	if (isnan(v))
		return json_string("NaN");
	if (isinf(v))
		return json_string(v > 0 ? "Infinity" : "-Infinity");
	return json_real(v);
}

static json_t *int64_json(bool is_signed, uint64_t v, unsigned flags)
{
	char buf[24];

	if ((flags & SBX_PBJSON_POLICY_STYLE) && (is_signed || v <= (uint64_t)INT64_MAX))
		return json_integer((json_int_t)v);
	if (is_signed)
		snprintf(buf, sizeof(buf), "%" PRId64, (int64_t)v);
	else
		snprintf(buf, sizeof(buf), "%" PRIu64, v);
	return json_string(buf);
}

static json_t *object_json(const ProtobufCMessage *msg, unsigned flags);

/* An enum value's name as the policy file writes its own ("per_run"). */
static json_t *lower_json(const char *name)
{
	char buf[128];
	size_t n = 0;

	for (; name[n] && n + 1 < sizeof(buf); n++)
		buf[n] = (char)tolower((unsigned char)name[n]);
	buf[n] = '\0';
	return json_string(buf);
}

/* One value of field f stored at p. */
static json_t *value_json(const ProtobufCFieldDescriptor *f, const void *p, unsigned flags)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		return json_integer(*(const int32_t *)p);
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		return json_integer(*(const uint32_t *)p);
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		return int64_json(true, *(const uint64_t *)p, flags);
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return int64_json(false, *(const uint64_t *)p, flags);
	case PROTOBUF_C_TYPE_FLOAT:
		return real_json(*(const float *)p);
	case PROTOBUF_C_TYPE_DOUBLE:
		return real_json(*(const double *)p);
	case PROTOBUF_C_TYPE_BOOL:
		return json_boolean(*(const protobuf_c_boolean *)p);
	case PROTOBUF_C_TYPE_ENUM: {
		int v = *(const int *)p;
		const ProtobufCEnumValue *ev =
		    protobuf_c_enum_descriptor_get_value(f->descriptor, v);
		if (ev && (flags & SBX_PBJSON_POLICY_STYLE))
			return lower_json(ev->name);
		return ev ? json_string(ev->name) : json_integer(v);
	}
	case PROTOBUF_C_TYPE_STRING:
		return string_json(*(char *const *)p);
	case PROTOBUF_C_TYPE_BYTES:
		return base64_json(p);
	case PROTOBUF_C_TYPE_MESSAGE: {
		const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
		return m ? object_json(m, flags) : json_object();
	}
	}
	return NULL;
}

/* Is the single (non-repeated) value at p its type's default? */
static bool is_default(const ProtobufCFieldDescriptor *f, const void *p)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_STRING: {
		const char *s = *(char *const *)p;
		return !s || !*s;
	}
	case PROTOBUF_C_TYPE_BYTES:
		return ((const ProtobufCBinaryData *)p)->len == 0;
	case PROTOBUF_C_TYPE_MESSAGE:
		return *(ProtobufCMessage *const *)p == NULL;
	case PROTOBUF_C_TYPE_FLOAT:
		return *(const float *)p == 0 && !signbit(*(const float *)p);
	case PROTOBUF_C_TYPE_DOUBLE:
		return *(const double *)p == 0 && !signbit(*(const double *)p);
	default: {
		size_t n = elem_size(f->type);
		static const unsigned char zero[8];
		return !memcmp(p, zero, n);
	}
	}
}

static json_t *map_json(const ProtobufCFieldDescriptor *f, const ProtobufCMessage *const *entries,
			size_t n, unsigned flags)
{
	const ProtobufCMessageDescriptor *d = f->descriptor;
	const ProtobufCFieldDescriptor *kf = &d->fields[0], *vf = &d->fields[1];
	json_t *obj = json_object();

	for (size_t i = 0; obj && i < n; i++) {
		const char *e = (const char *)entries[i];
		json_t *k = value_json(kf, e + kf->offset, flags);
		json_t *v = value_json(vf, e + vf->offset, flags);
		const char *key = NULL;
		char buf[32];

		/* JSON keys are strings whatever the key type (64-bit ones already are). */
		if (k && json_is_string(k)) {
			key = json_string_value(k);
		} else if (k && json_is_integer(k)) {
			snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(k));
			key = buf;
		} else if (k && json_is_boolean(k)) {
			key = json_is_true(k) ? "true" : "false";
		}
		int rc = key && v ? json_object_set_new(obj, key, v) : -1;
		if (!key || !v)
			json_decref(v);
		json_decref(k);
		if (rc < 0) {
			json_decref(obj);
			obj = NULL;
		}
	}
	return obj;
}

static json_t *repeated_json(const ProtobufCFieldDescriptor *f, const ProtobufCMessage *msg,
			     unsigned flags)
{
	size_t n = CMEMBER(size_t, msg, f->quantifier_offset);
	const char *arr = CMEMBER(char *, msg, f->offset);
	size_t sz = elem_size(f->type);

	if (is_map(f))
		return map_json(f, (const ProtobufCMessage *const *)arr, n, flags);
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++) {
		if (json_array_append_new(a, value_json(f, arr + i * sz, flags)) < 0) {
			json_decref(a);
			a = NULL;
		}
	}
	return a;
}

static json_t *object_json(const ProtobufCMessage *msg, unsigned flags)
{
	const ProtobufCMessageDescriptor *d = msg->descriptor;
	json_t *obj = json_object();
	char name[128];

	for (unsigned i = 0; obj && i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const void *p = (const char *)msg + f->offset;
		json_t *v = NULL;

		if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
			if (CMEMBER(uint32_t, msg, f->quantifier_offset) != f->id)
				continue;
			v = value_json(f, p, flags);
		} else if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			if (!CMEMBER(size_t, msg, f->quantifier_offset) &&
			    !(flags & SBX_PBJSON_EMIT_DEFAULTS))
				continue;
			v = repeated_json(f, msg, flags);
		} else if (f->label == PROTOBUF_C_LABEL_OPTIONAL &&
			   f->type != PROTOBUF_C_TYPE_STRING &&
			   f->type != PROTOBUF_C_TYPE_MESSAGE) {
			/* Explicit presence: has_<field>. */
			if (!CMEMBER(protobuf_c_boolean, msg, f->quantifier_offset))
				continue;
			v = value_json(f, p, flags);
		} else {
			if (f->type == PROTOBUF_C_TYPE_MESSAGE
				? *(ProtobufCMessage *const *)p == NULL
				: f->label != PROTOBUF_C_LABEL_REQUIRED && is_default(f, p) &&
				      !(flags & SBX_PBJSON_EMIT_DEFAULTS))
				continue;
			v = value_json(f, p, flags);
		}
		if (flags & SBX_PBJSON_POLICY_STYLE)
			snprintf(name, sizeof(name), "%s", f->name);
		else
			sbx_pbjson_name(f->name, name, sizeof(name));
		if (!v || json_object_set_new(obj, name, v) < 0) {
			json_decref(obj);
			obj = NULL;
		}
	}
	return obj;
}

json_t *sbx_pbjson_from_message(const ProtobufCMessage *msg, unsigned flags)
{
	return object_json(msg, flags);
}

char *sbx_pbjson_dumps(const ProtobufCMessage *msg, unsigned flags)
{
	json_t *j = object_json(msg, flags);
	char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;

	json_decref(j);
	return s;
}

/* -------------------------------------------------------------- from JSON */

struct reader {
	struct sbx_err *err;
	char path[PATH_MAX_LEN];
};

__attribute__((format(printf, 2, 3))) static int bad(struct reader *r, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return sbx_fail(r->err, "%s: %s", r->path[0] ? r->path : "(top)", what);
}

/* Appends ".key" or "[i]" to the path; returns the old length to restore. */
static size_t path_push(struct reader *r, const char *key, size_t index)
{
	size_t old = strlen(r->path);

	if (key)
		snprintf(r->path + old, sizeof(r->path) - old, "%s%s", old ? "." : "", key);
	else
		snprintf(r->path + old, sizeof(r->path) - old, "[%zu]", index);
	return old;
}

static int b64_value(int ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	if (ch == '+' || ch == '-')
		return 62;
	if (ch == '/' || ch == '_')
		return 63;
	return -1;
}

static int read_bytes(struct reader *r, const json_t *j, ProtobufCBinaryData *bd)
{
	if (!json_is_string(j))
		return bad(r, "must be a base64 string");
	const char *s = json_string_value(j);
	size_t len = json_string_length(j);
	while (len && s[len - 1] == '=')
		len--;
	if (len % 4 == 1)
		return bad(r, "not valid base64");
	uint8_t *out = malloc(len * 3 / 4 + 1);
	size_t o = 0;
	uint32_t acc = 0;
	int bits = 0;
	if (!out)
		return bad(r, "out of memory");
	for (size_t i = 0; i < len; i++) {
		int v = b64_value((unsigned char)s[i]);
		if (v < 0) {
			free(out);
			return bad(r, "not valid base64");
		}
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (uint8_t)(acc >> bits);
		}
	}
	bd->data = o ? out : NULL;
	bd->len = o;
	if (!o)
		free(out);
	return 0;
}

/* An integer from a JSON number or a decimal string, within [min, max]
 * (signed) or [0, umax] (unsigned). */
static int read_int(struct reader *r, const json_t *j, bool is_signed, int64_t min, int64_t max,
		    uint64_t umax, uint64_t *out)
{
	if (json_is_integer(j)) {
		json_int_t v = json_integer_value(j);
		if (is_signed ? (v < min || v > max) : (v < 0 || (uint64_t)v > umax))
			return bad(r, "out of range");
		*out = (uint64_t)v;
		return 0;
	}
	if (json_is_real(j)) {
		double v = json_real_value(j);
		if (v != floor(v))
			return bad(r, "must be an integer");
		if (is_signed ? (v < (double)min || v > (double)max) : (v < 0 || v > (double)umax))
			return bad(r, "out of range");
		*out = is_signed ? (uint64_t)(int64_t)v : (uint64_t)v;
		return 0;
	}
	if (!json_is_string(j))
		return bad(r, "must be an integer");
	const char *s = json_string_value(j);
	char *end;
	errno = 0;
	if (is_signed) {
		long long v = strtoll(s, &end, 10);
		if (!*s || *end || errno || v < min || v > max)
			return bad(r, "must be an integer in range");
		*out = (uint64_t)v;
	} else {
		unsigned long long v = strtoull(s, &end, 10);
		if (!*s || *s == '-' || *end || errno || v > umax)
			return bad(r, "must be an integer in range");
		*out = v;
	}
	return 0;
}

static int read_real(struct reader *r, const json_t *j, double *out)
{
	if (json_is_number(j)) {
		*out = json_number_value(j);
		return 0;
	}
	const char *s = json_string_value(j);
	if (s && !strcmp(s, "NaN"))
		*out = NAN;
	else if (s && !strcmp(s, "Infinity"))
		*out = INFINITY;
	else if (s && !strcmp(s, "-Infinity"))
		*out = -INFINITY;
	else
		return bad(r, "must be a number");
	return 0;
}

static int read_message(struct reader *r, const ProtobufCMessageDescriptor *d, const json_t *j,
			int depth, ProtobufCMessage **out);

/* One value of f from j into p. */
static int read_value(struct reader *r, const ProtobufCFieldDescriptor *f, const json_t *j, void *p,
		      int depth)
{
	uint64_t u;
	double dv;

	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		if (read_int(r, j, true, INT32_MIN, INT32_MAX, 0, &u) < 0)
			return -1;
		*(int32_t *)p = (int32_t)(int64_t)u;
		return 0;
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		if (read_int(r, j, false, 0, 0, UINT32_MAX, &u) < 0)
			return -1;
		*(uint32_t *)p = (uint32_t)u;
		return 0;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		if (read_int(r, j, true, INT64_MIN, INT64_MAX, 0, &u) < 0)
			return -1;
		*(int64_t *)p = (int64_t)u;
		return 0;
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		if (read_int(r, j, false, 0, 0, UINT64_MAX, &u) < 0)
			return -1;
		*(uint64_t *)p = u;
		return 0;
	case PROTOBUF_C_TYPE_FLOAT:
		if (read_real(r, j, &dv) < 0)
			return -1;
		*(float *)p = (float)dv;
		return 0;
	case PROTOBUF_C_TYPE_DOUBLE:
		return read_real(r, j, (double *)p);
	case PROTOBUF_C_TYPE_BOOL:
		if (!json_is_boolean(j))
			return bad(r, "must be true or false");
		*(protobuf_c_boolean *)p = json_is_true(j);
		return 0;
	case PROTOBUF_C_TYPE_ENUM: {
		const ProtobufCEnumDescriptor *ed = f->descriptor;
		if (json_is_string(j)) {
			const ProtobufCEnumValue *ev =
			    protobuf_c_enum_descriptor_get_value_by_name(ed, json_string_value(j));
			if (!ev)
				return bad(r, "no %s named %s", ed->name, json_string_value(j));
			*(int *)p = ev->value;
			return 0;
		}
		if (read_int(r, j, true, INT32_MIN, INT32_MAX, 0, &u) < 0)
			return -1;
		*(int *)p = (int)(int64_t)u;
		return 0;
	}
	case PROTOBUF_C_TYPE_STRING: {
		if (!json_is_string(j))
			return bad(r, "must be a string");
		if (strlen(json_string_value(j)) != json_string_length(j))
			return bad(r, "must not contain NUL");
		char *s = strdup(json_string_value(j));
		if (!s)
			return bad(r, "out of memory");
		*(char **)p = s;
		return 0;
	}
	case PROTOBUF_C_TYPE_BYTES:
		return read_bytes(r, j, p);
	case PROTOBUF_C_TYPE_MESSAGE:
		return read_message(r, f->descriptor, j, depth + 1, (ProtobufCMessage **)p);
	}
	return bad(r, "unsupported field type");
}

static int read_map(struct reader *r, const ProtobufCFieldDescriptor *f, const json_t *j,
		    ProtobufCMessage *m, int depth)
{
	const ProtobufCMessageDescriptor *d = f->descriptor;
	size_t *n = &MEMBER(size_t, m, f->quantifier_offset);
	const char *key;
	json_t *v;

	if (!json_is_object(j))
		return bad(r, "must be an object");
	ProtobufCMessage **arr = calloc(json_object_size(j) + 1, sizeof(*arr));
	if (!arr)
		return bad(r, "out of memory");
	MEMBER(ProtobufCMessage **, m, f->offset) = arr;
	json_object_foreach((json_t *)j, key, v)
	{
		size_t old = path_push(r, key, 0);
		ProtobufCMessage *e = calloc(1, d->sizeof_message);
		if (!e)
			return bad(r, "out of memory");
		d->message_init(e);
		arr[(*n)++] = e;
		json_t *k = json_string(key);
		int rc = 0;
		/* The key is a string in JSON whatever its type in the .proto. */
		if (d->fields[0].type == PROTOBUF_C_TYPE_STRING) {
			rc =
			    read_value(r, &d->fields[0], k, (char *)e + d->fields[0].offset, depth);
		} else if (d->fields[0].type == PROTOBUF_C_TYPE_BOOL) {
			if (strcmp(key, "true") && strcmp(key, "false"))
				rc = bad(r, "map key must be true or false");
			else
				MEMBER(protobuf_c_boolean, e, d->fields[0].offset) =
				    !strcmp(key, "true");
		} else {
			rc =
			    read_value(r, &d->fields[0], k, (char *)e + d->fields[0].offset, depth);
		}
		json_decref(k);
		if (rc < 0 ||
		    read_value(r, &d->fields[1], v, (char *)e + d->fields[1].offset, depth) < 0)
			return -1;
		r->path[old] = '\0';
	}
	return 0;
}

static int read_repeated(struct reader *r, const ProtobufCFieldDescriptor *f, const json_t *j,
			 ProtobufCMessage *m, int depth)
{
	size_t sz = elem_size(f->type);

	if (is_map(f))
		return read_map(r, f, j, m, depth);
	if (!json_is_array(j))
		return bad(r, "must be an array");
	size_t count = json_array_size(j);
	char *arr = calloc(count + 1, sz);
	if (!arr)
		return bad(r, "out of memory");
	MEMBER(char *, m, f->offset) = arr;
	/* Counted at once: elements not read yet are NULL or zero, which
	 * protobuf-c frees as nothing if reading stops half-way. */
	MEMBER(size_t, m, f->quantifier_offset) = count;
	for (size_t i = 0; i < count; i++) {
		size_t old = path_push(r, NULL, i);
		if (json_is_null(json_array_get(j, i)))
			return bad(r, "null is not allowed in an array");
		if (read_value(r, f, json_array_get(j, i), arr + i * sz, depth) < 0)
			return -1;
		r->path[old] = '\0';
	}
	return 0;
}

static const ProtobufCFieldDescriptor *find_field(const ProtobufCMessageDescriptor *d,
						  const char *key)
{
	char name[128];

	for (unsigned i = 0; i < d->n_fields; i++) {
		sbx_pbjson_name(d->fields[i].name, name, sizeof(name));
		if (!strcmp(key, name) || !strcmp(key, d->fields[i].name))
			return &d->fields[i];
	}
	return NULL;
}

static int read_fields(struct reader *r, const ProtobufCMessageDescriptor *d, const json_t *j,
		       ProtobufCMessage *m, int depth)
{
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)j, key, v)
	{
		size_t old = path_push(r, key, 0);
		const ProtobufCFieldDescriptor *f = find_field(d, key);
		if (!f)
			return bad(r, "unknown field of %s", d->name);
		if (json_is_null(v)) {
			r->path[old] = '\0';
			continue;
		}
		void *p = (char *)m + f->offset;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			if (MEMBER(size_t, m, f->quantifier_offset) || MEMBER(void *, m, f->offset))
				return bad(r, "given twice");
			if (read_repeated(r, f, v, m, depth) < 0)
				return -1;
		} else {
			if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
				uint32_t *which = &MEMBER(uint32_t, m, f->quantifier_offset);
				if (*which)
					return bad(r, "another member of its oneof is set");
			}
			if ((f->type == PROTOBUF_C_TYPE_MESSAGE && *(void **)p) ||
			    (f->type == PROTOBUF_C_TYPE_STRING && *(char **)p &&
			     *(char **)p != f->default_value) ||
			    (f->type == PROTOBUF_C_TYPE_BYTES && ((ProtobufCBinaryData *)p)->data))
				return bad(r, "given twice");
			if (read_value(r, f, v, p, depth) < 0)
				return -1;
			if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
				MEMBER(uint32_t, m, f->quantifier_offset) = f->id;
			else if (f->label == PROTOBUF_C_LABEL_OPTIONAL &&
				 f->type != PROTOBUF_C_TYPE_STRING &&
				 f->type != PROTOBUF_C_TYPE_MESSAGE)
				MEMBER(protobuf_c_boolean, m, f->quantifier_offset) = 1;
		}
		r->path[old] = '\0';
	}
	return 0;
}

static int read_message(struct reader *r, const ProtobufCMessageDescriptor *d, const json_t *j,
			int depth, ProtobufCMessage **out)
{
	if (depth > MAX_DEPTH)
		return bad(r, "nested deeper than %d", MAX_DEPTH);
	if (!json_is_object(j))
		return bad(r, "must be an object");
	ProtobufCMessage *m = calloc(1, d->sizeof_message);
	if (!m)
		return bad(r, "out of memory");
	d->message_init(m);
	/* Hung in place first, so that a failure below is freed with the parent. */
	*out = m;
	return read_fields(r, d, j, m, depth);
}

ProtobufCMessage *sbx_pbjson_to_message(const ProtobufCMessageDescriptor *desc, const json_t *json,
					struct sbx_err *err)
{
	struct reader r = {.err = err};
	ProtobufCMessage *m = NULL;

	if (read_message(&r, desc, json, 0, &m) < 0) {
		if (m)
			protobuf_c_message_free_unpacked(m, NULL);
		return NULL;
	}
	return m;
}
