/* SPDX-License-Identifier: Apache-2.0 */
/* The proxy's request-head parser (egress_head.h).
 *
 * One pass over the bytes, a line at a time, in order: each byte is judged
 * when it is read and each line when its CRLF is, and what needs the whole
 * head (Host against the target, the framing headers, what Connection
 * names) is judged at the empty line. So a prefix of a stream is refused
 * only for what the whole would be refused for, with the same status and
 * reason: a sandbox that writes its head a byte at a time gets the answer
 * it would have got at once. Nothing past EGRESS_HEAD_MAX is read.
 *
 * The Host header, when there is one, must agree with the target (host and
 * port) or the request is refused: a proxy may replace it (RFC 9112 3.2.2),
 * but a disagreement is what a request-routing confusion looks like, and
 * the destination gets the Host the record names either way. A missing
 * Host is no fault (HTTP/1.0 has none; the rewritten head has one). A
 * forwarded request keeps the client's HTTP version: the relay passes the
 * answer through untouched, so the server must answer what the client
 * reads. */
#include "egress_head.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

struct span {
	const char *p;
	size_t n;
};

struct head_parse {
	struct egress_head *h;
	int *status;
	struct sbx_err *err;
	struct span method, version;
	struct span path;  /* absolute form: path-abempty, possibly empty */
	struct span query; /* absolute form: "?" and the query, or empty */
	struct span lines[EGRESS_HEADERS_MAX];
	size_t nlines;
};

__attribute__((format(printf, 3, 4))) static int refuse(struct head_parse *hp, int status,
							const char *fmt, ...)
{
	va_list ap;

	*hp->status = status;
	va_start(ap, fmt);
	sbx_failv(hp->err, 0, fmt, ap);
	va_end(ap);
	return -1;
}

static bool span_is(struct span s, const char *lit)
{
	return s.n == strlen(lit) && memcmp(s.p, lit, s.n) == 0;
}

static bool span_is_ci(struct span s, const char *lit)
{
	return s.n == strlen(lit) && strncasecmp(s.p, lit, s.n) == 0;
}

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static bool is_alpha(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* tchar (RFC 9110 5.6.2). */
static bool is_tchar(unsigned char c)
{
	return is_alpha(c) || is_digit(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_token(struct span s)
{
	if (s.n == 0)
		return false;
	for (size_t i = 0; i < s.n; i++)
		if (!is_tchar((unsigned char)s.p[i]))
			return false;
	return true;
}

static struct span trim_ows(struct span s)
{
	while (s.n && (s.p[0] == ' ' || s.p[0] == '\t')) {
		s.p++;
		s.n--;
	}
	while (s.n && (s.p[s.n - 1] == ' ' || s.p[s.n - 1] == '\t'))
		s.n--;
	return s;
}

/* A header line's name (before the colon) and trimmed value. */
static void header_split(struct span line, struct span *name, struct span *value)
{
	const char *colon = memchr(line.p, ':', line.n);
	size_t at = (size_t)(colon - line.p);

	*name = (struct span){line.p, at};
	*value = trim_ows((struct span){colon + 1, line.n - at - 1});
}

/* "1".."65535", at most five digits. */
static bool parse_port(struct span s, uint16_t *port)
{
	unsigned v = 0;

	if (s.n == 0 || s.n > 5)
		return false;
	for (size_t i = 0; i < s.n; i++) {
		if (!is_digit((unsigned char)s.p[i]))
			return false;
		v = v * 10 + (unsigned)(s.p[i] - '0');
	}
	if (v == 0 || v > 65535)
		return false;
	*port = (uint16_t)v;
	return true;
}

/* host [":" port], host a name, a dotted quad or "[" IPv6 "]"; no
 * userinfo. *has_port says whether a port was written. */
static int parse_authority(struct head_parse *hp, struct span a, const char *what,
			   char host[SBX_HOSTNAME_BUF], enum sbx_host_kind *kind, uint16_t *port,
			   bool *has_port)
{
	struct span name = a, rest = {a.p + a.n, 0};
	const char *colon;

	*has_port = false;
	/* "allowed.example@evil.example": which one is the host depends on
	 * who reads it. */
	if (memchr(a.p, '@', a.n))
		return refuse(hp, 400, "%s: userinfo (\"@\") is not allowed", what);
	if (a.n && a.p[0] == '[') {
		const char *close = memchr(a.p, ']', a.n);

		if (!close)
			return refuse(hp, 400, "%s: an IPv6 literal without its \"]\"", what);
		name.n = (size_t)(close - a.p) + 1;
		rest = (struct span){close + 1, a.n - name.n};
		if (rest.n && rest.p[0] != ':')
			return refuse(hp, 400, "%s: bytes after the IPv6 literal", what);
	} else if ((colon = memchr(a.p, ':', a.n))) {
		if (memchr(colon + 1, ':', a.n - (size_t)(colon + 1 - a.p)))
			return refuse(hp, 400, "%s: an IPv6 literal must be in brackets", what);
		name.n = (size_t)(colon - a.p);
		rest = (struct span){colon, a.n - name.n};
	}
	if (rest.n) {
		if (!parse_port((struct span){rest.p + 1, rest.n - 1}, port))
			return refuse(hp, 400, "%s: the port must be a number 1..65535", what);
		*has_port = true;
	}
	if (name.n == 0)
		return refuse(hp, 400, "%s: no host", what);
	if (sbx_hostname_normalize(name.p, name.n, false, true, host, kind, hp->err) < 0) {
		*hp->status = 400;
		return sbx_err_prefix(hp->err, "%s", what);
	}
	return 0;
}

/* The bytes of a path or query: visible ASCII but "#" (no fragment: it is
 * never sent, and what follows it would be read differently by different
 * servers). */
static bool is_path_bytes(struct span s)
{
	for (size_t i = 0; i < s.n; i++) {
		unsigned char c = (unsigned char)s.p[i];

		if (c <= 0x20 || c >= 0x7f || c == '#')
			return false;
	}
	return true;
}

static int parse_connect_target(struct head_parse *hp, struct span t)
{
	struct egress_head *h = hp->h;
	bool has_port;

	if (parse_authority(hp, t, "CONNECT target", h->host, &h->host_kind, &h->port, &has_port) <
	    0)
		return -1;
	if (!has_port)
		return refuse(hp, 400, "CONNECT target: the port is required");
	h->kind = EGRESS_HEAD_CONNECT;
	return 0;
}

/* "http://" authority path-abempty ["?" query]. */
static int parse_absolute_target(struct head_parse *hp, struct span t)
{
	struct egress_head *h = hp->h;
	size_t scheme = 0, end;
	bool has_port;

	while (scheme < t.n && (is_alpha((unsigned char)t.p[scheme]) ||
				(scheme > 0 && (is_digit((unsigned char)t.p[scheme]) ||
						strchr("+-.", t.p[scheme])))))
		scheme++;
	if (scheme == 0 || scheme == t.n || t.p[scheme] != ':') {
		if (t.p[0] == '/' || span_is(t, "*"))
			return refuse(hp, 501,
				      "only absolute-form requests (\"http://...\") and "
				      "CONNECT: this is a proxy");
		return refuse(hp, 400, "the request target is not a URI");
	}
	if (!span_is_ci((struct span){t.p, scheme}, "http"))
		return refuse(hp, 501,
			      "only the http scheme in absolute form (https goes "
			      "through CONNECT)");
	if (t.n < scheme + 3 || memcmp(t.p + scheme, "://", 3) != 0)
		return refuse(hp, 400, "an http URI must have \"//\" and a host");
	if (memchr(t.p, '#', t.n))
		return refuse(hp, 400, "a fragment (\"#\") in the request target");
	t.p += scheme + 3;
	t.n -= scheme + 3;
	for (end = 0; end < t.n && t.p[end] != '/' && t.p[end] != '?'; end++)
		;
	if (parse_authority(hp, (struct span){t.p, end}, "request target", h->host, &h->host_kind,
			    &h->port, &has_port) < 0)
		return -1;
	if (!has_port)
		h->port = 80;
	t.p += end;
	t.n -= end;
	const char *q = memchr(t.p, '?', t.n);
	hp->path = (struct span){t.p, q ? (size_t)(q - t.p) : t.n};
	hp->query = (struct span){t.p + hp->path.n, t.n - hp->path.n};
	if (!is_path_bytes(hp->path) || !is_path_bytes(hp->query))
		return refuse(hp, 400, "the path and query must be visible ASCII");
	h->kind = EGRESS_HEAD_HTTP;
	return 0;
}

/* METHOD SP target SP HTTP-version. */
static int parse_request_line(struct head_parse *hp, struct span line)
{
	const char *sp1 = memchr(line.p, ' ', line.n);
	const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', line.n - (size_t)(sp1 + 1 - line.p)) : NULL;

	if (!sp1 || !sp2)
		return refuse(hp, 400, "the request line is not METHOD SP target SP version");
	hp->method = (struct span){line.p, (size_t)(sp1 - line.p)};
	struct span target = {sp1 + 1, (size_t)(sp2 - sp1 - 1)};
	hp->version = (struct span){sp2 + 1, line.n - (size_t)(sp2 + 1 - line.p)};
	if (!is_token(hp->method))
		return refuse(hp, 400, "the method is not a token");
	const char *v = hp->version.p;
	if (hp->version.n != 8 || memcmp(v, "HTTP/", 5) != 0 || !is_digit((unsigned char)v[5]) ||
	    v[6] != '.' || !is_digit((unsigned char)v[7]))
		return refuse(hp, 400, "the request line does not end in an HTTP version");
	if (!span_is(hp->version, "HTTP/1.1") && !span_is(hp->version, "HTTP/1.0"))
		return refuse(hp, 505, "only HTTP/1.1 and HTTP/1.0");
	if (hp->method.n >= sizeof(hp->h->method))
		return refuse(hp, 501, "the method is longer than %zu bytes",
			      sizeof(hp->h->method) - 1);
	memcpy(hp->h->method, hp->method.p, hp->method.n);
	hp->h->method[hp->method.n] = '\0';
	if (target.n == 0)
		return refuse(hp, 400, "an empty request target");
	for (size_t i = 0; i < target.n; i++)
		if ((unsigned char)target.p[i] <= 0x20)
			return refuse(hp, 400, "whitespace in the request target");
	if (span_is(hp->method, "CONNECT"))
		return parse_connect_target(hp, target);
	return parse_absolute_target(hp, target);
}

static int parse_header_line(struct head_parse *hp, struct span line, size_t lineno)
{
	if (line.p[0] == ' ' || line.p[0] == '\t')
		return refuse(hp, 400, "line %zu: a header line begins with whitespace (obs-fold)",
			      lineno);
	const char *colon = memchr(line.p, ':', line.n);
	if (!colon)
		return refuse(hp, 400, "line %zu: a header line without a colon", lineno);
	if (!is_token((struct span){line.p, (size_t)(colon - line.p)}))
		return refuse(hp, 400, "line %zu: the header name is not a token", lineno);
	if (hp->nlines == EGRESS_HEADERS_MAX)
		return refuse(hp, 431, "more than %d header lines", EGRESS_HEADERS_MAX);
	hp->lines[hp->nlines++] = line;
	return 0;
}

/* Calls fn for each element of a comma-separated list (RFC 9110 5.6.1:
 * empty elements are skipped); stops at the first non-zero. */
static int list_each(struct span value, int (*fn)(struct span elem, void *arg), void *arg)
{
	while (value.n) {
		const char *comma = memchr(value.p, ',', value.n);
		size_t n = comma ? (size_t)(comma - value.p) : value.n;
		struct span elem = trim_ows((struct span){value.p, n});
		int rc;

		if (elem.n && (rc = fn(elem, arg)) != 0)
			return rc;
		value.p += comma ? n + 1 : n;
		value.n -= comma ? n + 1 : n;
	}
	return 0;
}

static int connection_option_bad(struct span elem, void *arg)
{
	(void)arg;
	if (!is_token(elem))
		return 1;
	/* Dropping a framing header would relay the body as a second
	 * request. */
	if (span_is_ci(elem, "content-length") || span_is_ci(elem, "transfer-encoding"))
		return 2;
	return 0;
}

static int names_header(struct span elem, void *arg)
{
	struct span *name = arg;

	return elem.n == name->n && strncasecmp(elem.p, name->p, elem.n) == 0;
}

/* Hop-by-hop (RFC 9110 7.6.1), what Connection names, and Host (set to
 * the target's). */
static bool header_dropped(const struct head_parse *hp, struct span name)
{
	static const char *const hop[] = {"connection", "keep-alive", "te",
					  "trailer",	"upgrade",    "host"};

	if (name.n >= 6 && strncasecmp(name.p, "proxy-", 6) == 0)
		return true;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(hop); i++)
		if (span_is_ci(name, hop[i]))
			return true;
	for (size_t i = 0; i < hp->nlines; i++) {
		struct span n, v;

		header_split(hp->lines[i], &n, &v);
		if (span_is_ci(n, "connection") && list_each(v, names_header, &name))
			return true;
	}
	return false;
}

static int check_host_header(struct head_parse *hp, struct span value)
{
	char host[SBX_HOSTNAME_BUF];
	enum sbx_host_kind kind;
	uint16_t port = 0;
	bool has_port;

	if (parse_authority(hp, value, "Host header", host, &kind, &port, &has_port) < 0)
		return -1;
	/* Without a port Host means the scheme's default: 80 for http. A
	 * CONNECT has no scheme, so there the host alone must agree. */
	if (!has_port && hp->h->kind == EGRESS_HEAD_HTTP)
		port = 80;
	if (kind != hp->h->host_kind || strcmp(host, hp->h->host) != 0 ||
	    ((has_port || hp->h->kind == EGRESS_HEAD_HTTP) && port != hp->h->port))
		return refuse(hp, 400, "the Host header does not agree with the request target");
	return 0;
}

/* Content-Length: 1*DIGIT, below 2^63. */
static bool parse_length(struct span v, uint64_t *out)
{
	uint64_t n = 0;

	if (v.n == 0 || v.n > 18)
		return false;
	for (size_t i = 0; i < v.n; i++) {
		if (!is_digit((unsigned char)v.p[i]))
			return false;
		n = n * 10 + (uint64_t)(v.p[i] - '0');
	}
	*out = n;
	return true;
}

/* What needs the whole head: one Host that agrees, one framing of the
 * body (RFC 9112 6.1 and 6.3: both, or two lengths, is how requests are
 * smuggled past a proxy), and a Connection that names no framing header. */
static int check_headers(struct head_parse *hp)
{
	bool host = false, te = false, cl = false;
	uint64_t length = 0;

	for (size_t i = 0; i < hp->nlines; i++) {
		struct span name, value;
		uint64_t n;

		header_split(hp->lines[i], &name, &value);
		if (span_is_ci(name, "host")) {
			if (host)
				return refuse(hp, 400, "more than one Host header");
			host = true;
			if (check_host_header(hp, value) < 0)
				return -1;
		} else if (span_is_ci(name, "content-length")) {
			if (!parse_length(value, &n))
				return refuse(hp, 400, "Content-Length is not a number");
			if (cl && n != length)
				return refuse(hp, 400, "two different Content-Length values");
			cl = true;
			length = n;
		} else if (span_is_ci(name, "transfer-encoding")) {
			if (te)
				return refuse(hp, 400, "more than one Transfer-Encoding header");
			if (!span_is_ci(value, "chunked"))
				return refuse(hp, 400, "a Transfer-Encoding other than chunked");
			te = true;
		} else if (span_is_ci(name, "connection")) {
			int bad = list_each(value, connection_option_bad, NULL);

			if (bad == 1)
				return refuse(hp, 400, "a Connection option is not a token");
			if (bad == 2)
				return refuse(hp, 400,
					      "Connection names a header that frames "
					      "the body");
		}
	}
	if (te && cl)
		return refuse(hp, 400, "both Transfer-Encoding and Content-Length");
	if (te && span_is(hp->version, "HTTP/1.0"))
		return refuse(hp, 400, "Transfer-Encoding in an HTTP/1.0 request");
	return 0;
}

struct out {
	char *p;
	size_t n, cap;
};

static void put(struct out *o, const char *s, size_t n)
{
	/* The capacity is computed to hold the most a head can become;
	 * should it not, the result is refused rather than cut. */
	if (o->n + n > o->cap) {
		o->cap = 0;
		return;
	}
	memcpy(o->p + o->n, s, n);
	o->n += n;
}

static void puts_lit(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

static int rewrite(struct head_parse *hp)
{
	struct egress_head *h = hp->h;
	/* At most the head itself (the origin-form line is shorter than the
	 * absolute one, "/" included), a Host line and "Connection: close". */
	struct out o = {.cap = h->head_len + SBX_HOSTNAME_BUF + 64};
	char port[8];

	o.p = malloc(o.cap);
	if (!o.p)
		return refuse(hp, 500, "out of memory");
	put(&o, hp->method.p, hp->method.n);
	puts_lit(&o, " ");
	if (hp->path.n == 0)
		puts_lit(&o, "/");
	put(&o, hp->path.p, hp->path.n);
	put(&o, hp->query.p, hp->query.n);
	puts_lit(&o, " ");
	put(&o, hp->version.p, hp->version.n);
	puts_lit(&o, "\r\nHost: ");
	if (h->host_kind == SBX_HOST_IPV6)
		puts_lit(&o, "[");
	puts_lit(&o, h->host);
	if (h->host_kind == SBX_HOST_IPV6)
		puts_lit(&o, "]");
	if (h->port != 80) {
		snprintf(port, sizeof(port), ":%u", (unsigned)h->port);
		puts_lit(&o, port);
	}
	puts_lit(&o, "\r\n");
	for (size_t i = 0; i < hp->nlines; i++) {
		struct span name, value;

		header_split(hp->lines[i], &name, &value);
		if (header_dropped(hp, name))
			continue;
		put(&o, hp->lines[i].p, hp->lines[i].n);
		puts_lit(&o, "\r\n");
	}
	puts_lit(&o, "Connection: close\r\n\r\n");
	if (o.cap == 0) {
		free(o.p);
		return refuse(hp, 500, "the rewritten head did not fit");
	}
	h->rewritten = o.p;
	h->rewritten_len = o.n;
	return 0;
}

static int head_end(struct head_parse *hp, size_t head_len)
{
	hp->h->head_len = head_len;
	if (check_headers(hp) < 0)
		return -1;
	if (hp->h->kind == EGRESS_HEAD_HTTP && rewrite(hp) < 0)
		return -1;
	return 1;
}

static int parse(const char *buf, size_t len, struct head_parse *hp)
{
	size_t window = len < EGRESS_HEAD_MAX ? len : EGRESS_HEAD_MAX;
	size_t start = 0, lineno = 0;

	for (size_t i = 0; i < window; i++) {
		unsigned char c = (unsigned char)buf[i];

		if (c == '\r') {
			if (i + 1 < window && buf[i + 1] != '\n')
				return refuse(hp, 400, "line %zu: a CR not followed by LF",
					      lineno + 1);
			continue;
		}
		if (c == '\0')
			return refuse(hp, 400, "line %zu: a NUL byte", lineno + 1);
		if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f)
			return refuse(hp, 400, "line %zu: a control byte", lineno + 1);
		if (c != '\n')
			continue;
		if (i == start || buf[i - 1] != '\r')
			return refuse(hp, 400, "line %zu: a bare LF (lines end with CRLF)",
				      lineno + 1);
		struct span line = {buf + start, i - 1 - start};

		lineno++;
		start = i + 1;
		if (lineno == 1) {
			if (line.n == 0)
				return refuse(hp, 400, "an empty line before the request line");
			if (memchr(line.p, '\t', line.n))
				return refuse(hp, 400, "a tab in the request line");
			if (parse_request_line(hp, line) < 0)
				return -1;
		} else if (line.n == 0) {
			return head_end(hp, i + 1);
		} else if (parse_header_line(hp, line, lineno) < 0) {
			return -1;
		}
	}
	if (len >= EGRESS_HEAD_MAX)
		return refuse(hp, 431, "no end of the head in %d bytes", EGRESS_HEAD_MAX);
	return 0;
}

int egress_head_parse(const char *buf, size_t len, struct egress_head *h, int *http_status,
		      struct sbx_err *err)
{
	struct head_parse hp = {.h = h, .status = http_status, .err = err};
	int rc;

	memset(h, 0, sizeof(*h));
	*http_status = 0;
	rc = parse(buf, len, &hp);
	if (rc != 1) {
		/* Nothing of a refused or partial head is kept. */
		free(h->rewritten);
		memset(h, 0, sizeof(*h));
	}
	return rc;
}

void egress_head_free(struct egress_head *h)
{
	if (!h)
		return;
	free(h->rewritten);
	h->rewritten = NULL;
	h->rewritten_len = 0;
}
