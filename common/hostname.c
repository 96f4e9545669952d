/* SPDX-License-Identifier: Apache-2.0 */
/* Host names in one normal form (see hostname.h): the allowlist entry and
 * the request are both passed through here, and then compared as strings.
 *
 * Order of the checks: the raw bytes first (UTF-8, no controls), IPv6
 * literals, the one trailing dot, the wildcard prefix, then IDNA for a name
 * with any non-ASCII byte, and last the label rules over the ASCII result
 * (UTS #46 maps "。" to "." and may make new empty labels, so the structure
 * is checked after the mapping, never before it only). */
#include "hostname.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idna.h"
#include "text.h"
#include "util.h"

#define HOST_MAX       253
#define HOST_LABEL_MAX 63
/* A U-label of 63 A-label bytes is at most 63 code points of 4 bytes: a
 * longer input cannot be a name, and libidn2 need not see it. */
#define HOST_INPUT_MAX (4 * (HOST_MAX + 1))

static bool is_ascii_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_ascii_alnum(char c)
{
	return is_ascii_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_hex_digit(char c)
{
	return is_ascii_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A strict dotted quad: four decimal octets 0..255, no leading zeros (an
 * octet "010" is octal to inet_aton), nothing else. */
static bool is_dotted_quad(const char *s, size_t len)
{
	size_t i = 0;

	for (int part = 0; part < 4; part++) {
		size_t start = i;
		unsigned v = 0;

		if (part > 0) {
			if (i >= len || s[i] != '.')
				return false;
			start = ++i;
		}
		while (i < len && is_ascii_digit(s[i]) && i - start < 3)
			v = v * 10 + (unsigned)(s[i++] - '0');
		if (i == start || v > 255 || (s[start] == '0' && i - start > 1))
			return false;
		if (i < len && is_ascii_digit(s[i]))
			return false;
	}
	return i == len;
}

/* The last label reads as a number to a resolver: all decimal digits, or
 * "0x" and hex digits (inet_aton's forms; the WHATWG URL parser's "ends in
 * a number" rule). Such a name must be a strict dotted quad. */
static bool ends_in_number(const char *s, size_t len)
{
	const char *dot = memrchr(s, '.', len);
	const char *last = dot ? dot + 1 : s;
	size_t n = len - (size_t)(last - s);
	size_t i = 0;

	if (n == 0)
		return false;
	if (n >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X')) {
		for (i = 2; i < n; i++)
			if (!is_hex_digit(last[i]))
				return false;
		return true;
	}
	for (; i < n; i++)
		if (!is_ascii_digit(last[i]))
			return false;
	return true;
}

/* Letters, digits and inner hyphens, 1..63 bytes each, lowered in place. */
static int check_labels(char *s, size_t len, struct sbx_err *err)
{
	size_t start = 0;

	for (size_t i = 0; i <= len; i++) {
		if (i < len && s[i] != '.') {
			if (s[i] >= 'A' && s[i] <= 'Z')
				s[i] = (char)(s[i] - 'A' + 'a');
			else if (!is_ascii_alnum(s[i]) && s[i] != '-')
				return sbx_fail(err, "a label may hold only letters, digits and "
						     "hyphens");
			continue;
		}
		if (i == start)
			return sbx_fail(err, "empty label");
		if (i - start > HOST_LABEL_MAX)
			return sbx_fail(err, "label longer than %d bytes", HOST_LABEL_MAX);
		if (s[start] == '-' || s[i - 1] == '-')
			return sbx_fail(err, "a label must not begin or end with a hyphen");
		start = i + 1;
	}
	return 0;
}

static int normalize_ipv6(const char *in, size_t len, char out[SBX_HOSTNAME_BUF],
			  struct sbx_err *err)
{
	char buf[INET6_ADDRSTRLEN];
	struct in6_addr a;

	if (len > 0 && in[0] == '[') {
		if (len < 2 || in[len - 1] != ']')
			return sbx_fail(err, "an IPv6 literal in brackets must end with ']'");
		in++;
		len -= 2;
	}
	if (len == 0 || len >= sizeof(buf))
		return sbx_fail(err, "not an IPv6 address");
	memcpy(buf, in, len);
	buf[len] = '\0';
	if (inet_pton(AF_INET6, buf, &a) != 1)
		return sbx_fail(err, "not an IPv6 address");
	/* INET6_ADDRSTRLEN < SBX_HOSTNAME_BUF: inet_ntop cannot fail here. */
	if (!inet_ntop(AF_INET6, &a, out, SBX_HOSTNAME_BUF))
		return sbx_fail_errno(err, "inet_ntop");
	return 0;
}

/* The raw bytes: UTF-8 and no control byte (NUL, C0, DEL), so neither
 * libidn2 nor a log ever sees one. */
static int check_bytes(const char *in, size_t len, bool *ascii, struct sbx_err *err)
{
	*ascii = true;
	for (size_t i = 0; i < len;) {
		unsigned char c = (unsigned char)in[i];
		size_t n;

		if (c < 0x20 || c == 0x7f)
			return sbx_fail(err, "control byte 0x%02x in a host name", c);
		if (c < 0x80) {
			i++;
			continue;
		}
		*ascii = false;
		/* sbx_utf8_len reads at most 4 bytes and stops at a byte that
		 * does not continue the sequence; a copy keeps it inside in. */
		unsigned char seq[5] = {0};
		memcpy(seq, in + i, len - i < 4 ? len - i : 4);
		n = sbx_utf8_len(seq);
		if (n == 0)
			return sbx_fail(err, "not UTF-8");
		i += n;
	}
	return 0;
}

/* A name (no wildcard prefix, no trailing dot) into out + off. */
static int normalize_name(const char *in, size_t len, bool ascii, char out[SBX_HOSTNAME_BUF],
			  size_t off, struct sbx_err *err)
{
	_cleanup_free_ char *copy = NULL, *alabels = NULL;
	const char *name = in;
	size_t n = len;

	if (len == 0)
		return sbx_fail(err, "empty label");
	if (memchr(in, '*', len))
		return sbx_fail(err, "a wildcard is allowed only as a leading \"*.\"");
	if (!ascii) {
		copy = strndup(in, len);
		if (!copy)
			return sbx_fail_errno(err, "strndup");
		if (sbx_idna_to_ascii(copy, &alabels, err) < 0)
			return -1;
		name = alabels;
		n = strlen(alabels);
	}
	if (off + n > HOST_MAX)
		return sbx_fail(err, "name longer than %d bytes", HOST_MAX);
	memcpy(out + off, name, n);
	out[off + n] = '\0';
	return check_labels(out + off, n, err);
}

static int normalize(const char *in, size_t len, bool allow_wildcard, bool allow_ipv6,
		     char out[SBX_HOSTNAME_BUF], enum sbx_host_kind *kind, struct sbx_err *err)
{
	bool ascii, wild;
	size_t off = 0;

	if (len == 0)
		return sbx_fail(err, "empty host name");
	if (len > HOST_INPUT_MAX)
		return sbx_fail(err, "name longer than %d bytes", HOST_MAX);
	if (check_bytes(in, len, &ascii, err) < 0)
		return -1;
	/* ':' is in no name and in every IPv6 literal. */
	if (in[0] == '[' || memchr(in, ':', len)) {
		if (!allow_ipv6)
			return sbx_fail(err, "an IPv6 literal is not allowed here");
		if (normalize_ipv6(in, len, out, err) < 0)
			return -1;
		*kind = SBX_HOST_IPV6;
		return 0;
	}
	/* The root's dot, once: "a.b." is "a.b", "a.b.." has an empty label. */
	if (in[len - 1] == '.')
		len--;
	wild = len >= 2 && in[0] == '*' && in[1] == '.';
	if (wild && !allow_wildcard)
		return sbx_fail(err, "a wildcard is not allowed here");
	if (wild) {
		memcpy(out, "*.", 2);
		off = 2;
	}
	if (normalize_name(in + off, len - off, ascii, out, off, err) < 0)
		return -1;
	len = strlen(out);
	if (ends_in_number(out, len)) {
		if (wild)
			return sbx_fail(err, "a wildcard covers names, not addresses");
		if (!is_dotted_quad(out, len))
			return sbx_fail(err, "a numeric name must be a dotted-quad IPv4 address");
		*kind = SBX_HOST_IPV4;
		return 0;
	}
	*kind = wild ? SBX_HOST_WILDCARD : SBX_HOST_NAME;
	return 0;
}

int sbx_hostname_normalize(const char *in, size_t len, bool allow_wildcard, bool allow_ipv6,
			   char out[SBX_HOSTNAME_BUF], enum sbx_host_kind *kind,
			   struct sbx_err *err)
{
	out[0] = '\0';
	if (normalize(in, len, allow_wildcard, allow_ipv6, out, kind, err) == 0)
		return 0;
	/* Never half a name to a caller that ignores the result. */
	out[0] = '\0';
	return -1;
}

bool sbx_hostname_covers(const char *entry, enum sbx_host_kind entry_kind, const char *host,
			 enum sbx_host_kind host_kind)
{
	size_t elen, hlen;

	if (entry_kind != SBX_HOST_WILDCARD)
		return entry_kind == host_kind && strcmp(entry, host) == 0;
	if (host_kind != SBX_HOST_NAME)
		return false;
	/* "*.s" covers "x.s": the entry without its '*' (".s") ends the
	 * host, and at least one byte (a label) comes before it. */
	elen = strlen(entry + 1);
	hlen = strlen(host);
	return hlen > elen && strcmp(host + hlen - elen, entry + 1) == 0;
}

enum sbx_host_kind sbx_hostname_kind(const char *normalized)
{
	if (normalized[0] == '*' && normalized[1] == '.')
		return SBX_HOST_WILDCARD;
	/* Never in a normalized name: only an IPv6 literal has a ':'. */
	if (strchr(normalized, ':'))
		return SBX_HOST_IPV6;
	if (is_dotted_quad(normalized, strlen(normalized)))
		return SBX_HOST_IPV4;
	return SBX_HOST_NAME;
}
