/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of server/egress/egress_head.c: heads that parse (with the
 * exact bytes the destination gets), heads that are refused (with the
 * status), and for every one of them the same answer when the head arrives
 * a byte at a time. Refusals never quote the input: every bad head below
 * that can carry it holds the marker "zqzq", which no message may show. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "egress_head.h"
#include "util.h"

#define MARK "zqzq"

struct answer {
	int rc, status;
	char msg[SBX_ERR_MAX];
	struct egress_head h;
};

static void answer_free(struct answer *a)
{
	egress_head_free(&a->h);
}

static void parse_into(const char *buf, size_t len, struct answer *a)
{
	struct sbx_err err = {0};

	memset(a, 0, sizeof(*a));
	a->rc = egress_head_parse(buf, len, &a->h, &a->status, &err);
	memcpy(a->msg, err.msg, sizeof(a->msg));
}

static bool same_answer(const struct answer *a, const struct answer *b)
{
	if (a->rc != b->rc || a->status != b->status)
		return false;
	if (a->rc == -1)
		return strcmp(a->msg, b->msg) == 0;
	if (a->rc == 0)
		return true;
	return a->h.kind == b->h.kind && strcmp(a->h.method, b->h.method) == 0 &&
	       strcmp(a->h.host, b->h.host) == 0 && a->h.host_kind == b->h.host_kind &&
	       a->h.port == b->h.port && a->h.head_len == b->h.head_len &&
	       a->h.rewritten_len == b->h.rewritten_len &&
	       (a->h.rewritten == NULL) == (b->h.rewritten == NULL) &&
	       (!a->h.rewritten || memcmp(a->h.rewritten, b->h.rewritten, a->h.rewritten_len) == 0);
}

/* Feeds buf a byte more at a time, as a slow sandbox would: every prefix
 * before the first answer must say "more", and the first answer must be
 * the one the whole gets. */
static bool incremental_agrees(const char *buf, size_t len, const struct answer *whole)
{
	/* A copy of exactly each prefix length, so that a read past len is
	 * ASan's to see. */
	for (size_t n = 0; n <= len; n++) {
		_cleanup_free_ char *prefix = malloc(n ? n : 1);
		struct answer a;

		memcpy(prefix, buf, n);
		parse_into(prefix, n, &a);
		if (a.rc == 0) {
			answer_free(&a);
			continue;
		}
		bool same = same_answer(&a, whole);
		if (!same)
			printf("#   at %zu bytes: rc %d status %d \"%s\"\n", n, a.rc, a.status,
			       a.msg);
		answer_free(&a);
		return same;
	}
	return whole->rc == 0;
}

static const char *kind_name(enum sbx_host_kind k)
{
	return k == SBX_HOST_NAME ? "name" : k == SBX_HOST_IPV4 ? "ipv4" : "ipv6";
}

/* A head that parses: CONNECT when rewritten is NULL. Bytes after the
 * head (a body) change nothing but what follows head_len. */
static void good(const char *what, const char *head, const char *host, enum sbx_host_kind host_kind,
		 unsigned port, const char *rewritten)
{
	size_t len = strlen(head);
	_cleanup_free_ char *with_body = NULL;
	struct answer a, b;

	parse_into(head, len, &a);
	bool ok = a.rc == 1 && a.h.head_len == len && strcmp(a.h.host, host) == 0 &&
		  a.h.host_kind == host_kind && a.h.port == port &&
		  a.h.kind == (rewritten ? EGRESS_HEAD_HTTP : EGRESS_HEAD_CONNECT);
	if (rewritten)
		ok = ok && a.h.rewritten && a.h.rewritten_len == strlen(rewritten) &&
		     memcmp(a.h.rewritten, rewritten, a.h.rewritten_len) == 0;
	else
		ok = ok && !a.h.rewritten;
	if (!check(ok, "good: %s", what)) {
		printf("#   rc %d status %d \"%s\" host \"%s\" %s port %u head_len %zu/%zu\n", a.rc,
		       a.status, a.msg, a.h.host, kind_name(a.h.host_kind), a.h.port, a.h.head_len,
		       len);
		if (a.h.rewritten)
			printf("#   rewritten: [%.*s]\n", (int)a.h.rewritten_len, a.h.rewritten);
	}
	check(incremental_agrees(head, len, &a), "good, byte by byte: %s", what);

	if (asprintf(&with_body, "%sBODY\x16\x03\x01 bytes\r\n\r\nGET / HTTP/1.1\r\n", head) < 0)
		abort();
	parse_into(with_body, strlen(with_body), &b);
	check(same_answer(&a, &b), "good, followed by its own bytes: %s", what);
	answer_free(&a);
	answer_free(&b);
}

/* A refused head: the status, and (when want is not NULL) words of the
 * reason, so that a check refused for some other reason does not pass. */
static void bad_why(const char *what, const char *head, size_t len, int status, const char *want)
{
	struct answer a;

	parse_into(head, len, &a);
	if (!check(a.rc == -1 && a.status == status && a.msg[0] && !a.h.rewritten && !a.h.host[0] &&
		       (!want || strstr(a.msg, want)),
		   "bad (%d%s%s): %s", status, want ? ", " : "", want ? want : "", what))
		printf("#   rc %d status %d \"%s\"\n", a.rc, a.status, a.msg);
	if (a.rc == -1 && strstr(a.msg, MARK))
		check(false, "bad: %s: the message quotes the input: %s", what, a.msg);
	check(incremental_agrees(head, len, &a), "bad, byte by byte: %s", what);
	answer_free(&a);
}

static void bad_len(const char *what, const char *head, size_t len, int status)
{
	bad_why(what, head, len, status, NULL);
}

static void bad(const char *what, const char *head, int status)
{
	bad_len(what, head, strlen(head), status);
}

static void bad_msg(const char *what, const char *head, int status, const char *want)
{
	bad_why(what, head, strlen(head), status, want);
}

/* A literal that holds a NUL. */
#define BAD_LIT(what, lit, status, want) bad_why(what, lit, sizeof(lit) - 1, status, want)

#define GET_HOST(target, host) "GET " target " HTTP/1.1\r\nHost: " host "\r\n"

static void good_heads(void)
{
	good("CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
	     "example.com", SBX_HOST_NAME, 443, NULL);
	good("CONNECT, curl's head",
	     "CONNECT api.example.org:8443 HTTP/1.1\r\nHost: api.example.org:8443\r\n"
	     "User-Agent: curl/7.88.1\r\nProxy-Connection: Keep-Alive\r\n\r\n",
	     "api.example.org", SBX_HOST_NAME, 8443, NULL);
	good("CONNECT, no headers", "CONNECT example.com:1 HTTP/1.1\r\n\r\n", "example.com",
	     SBX_HOST_NAME, 1, NULL);
	good("CONNECT, port 65535", "CONNECT example.com:65535 HTTP/1.0\r\n\r\n", "example.com",
	     SBX_HOST_NAME, 65535, NULL);
	good("CONNECT, normalized", "CONNECT ExAmple.COM.:443 HTTP/1.1\r\n\r\n", "example.com",
	     SBX_HOST_NAME, 443, NULL);
	good("CONNECT, IDN",
	     "CONNECT b\xc3\xbc"
	     "cher.example:443 HTTP/1.1\r\n\r\n",
	     "xn--bcher-kva.example", SBX_HOST_NAME, 443, NULL);
	good("CONNECT IPv4", "CONNECT 127.0.0.1:8080 HTTP/1.1\r\n\r\n", "127.0.0.1", SBX_HOST_IPV4,
	     8080, NULL);
	good("CONNECT IPv6", "CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n", "::1",
	     SBX_HOST_IPV6, 443, NULL);
	good("CONNECT IPv6, normalized", "CONNECT [2001:DB8:0::1]:443 HTTP/1.1\r\n\r\n",
	     "2001:db8::1", SBX_HOST_IPV6, 443, NULL);
	good("CONNECT, Host without a port",
	     "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example\r\n\r\n", "a.example",
	     SBX_HOST_NAME, 443, NULL);
	good("CONNECT, leading zeros in the port", "CONNECT a.example:0443 HTTP/1.1\r\n\r\n",
	     "a.example", SBX_HOST_NAME, 443, NULL);

	good("GET, curl's head",
	     "GET http://example.com/path?q=1&r=%20 HTTP/1.1\r\nHost: example.com\r\n"
	     "User-Agent: curl/7.88.1\r\nAccept: */*\r\nProxy-Connection: Keep-Alive\r\n\r\n",
	     "example.com", SBX_HOST_NAME, 80,
	     "GET /path?q=1&r=%20 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/7.88.1\r\n"
	     "Accept: */*\r\nConnection: close\r\n\r\n");
	good("GET, a port, no path", "GET http://example.com:8080 HTTP/1.1\r\n\r\n", "example.com",
	     SBX_HOST_NAME, 8080,
	     "GET / HTTP/1.1\r\nHost: example.com:8080\r\nConnection: close\r\n\r\n");
	good("GET, port 80 written", GET_HOST("http://example.com:80/", "example.com:80") "\r\n",
	     "example.com", SBX_HOST_NAME, 80,
	     "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
	good("GET, Host without :80 for a :80 target",
	     GET_HOST("http://example.com:80/x", "example.com") "\r\n", "example.com",
	     SBX_HOST_NAME, 80,
	     "GET /x HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
	good("GET, a query without a path", "GET http://example.com?x=1 HTTP/1.1\r\n\r\n",
	     "example.com", SBX_HOST_NAME, 80,
	     "GET /?x=1 HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
	good("GET, the scheme and host in upper case",
	     GET_HOST("HTTP://EXAMPLE.com/A", "Example.COM.") "\r\n", "example.com", SBX_HOST_NAME,
	     80, "GET /A HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
	good(
	    "GET, Host on a later line, the rest kept in order",
	    "GET http://example.com/ HTTP/1.1\r\nA: 1\r\nhost: example.com\r\nB: 2\r\nA: 3\r\n\r\n",
	    "example.com", SBX_HOST_NAME, 80,
	    "GET / HTTP/1.1\r\nHost: example.com\r\nA: 1\r\nB: 2\r\nA: 3\r\nConnection: "
	    "close\r\n\r\n");
	good("GET, every hop-by-hop header dropped",
	     "GET http://example.com/ HTTP/1.1\r\nConnection: keep-alive, X-Secret ,,Upgrade\r\n"
	     "Keep-Alive: timeout=5\r\nX-Secret: s\r\nTE: trailers\r\nTrailer: X-T\r\n"
	     "Upgrade: websocket\r\nProxy-Authorization: Basic eDp5\r\nProxy-Authenticate: x\r\n"
	     "Proxy-Connection: keep-alive\r\nPROXY-Foo: 1\r\nx-secret: again\r\n"
	     "Connection: X-Also\r\nX-Also: a\r\nX-Kept: k\r\nProxyish: stays\r\n\r\n",
	     "example.com", SBX_HOST_NAME, 80,
	     "GET / HTTP/1.1\r\nHost: example.com\r\nX-Kept: k\r\nProxyish: stays\r\n"
	     "Connection: close\r\n\r\n");
	good("POST with Content-Length",
	     "POST http://example.com/api HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n"
	     "Content-Type: text/plain\r\n\r\n",
	     "example.com", SBX_HOST_NAME, 80,
	     "POST /api HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n"
	     "Content-Type: text/plain\r\nConnection: close\r\n\r\n");
	good("POST chunked",
	     "POST http://example.com/api HTTP/1.1\r\nTransfer-Encoding:  Chunked \r\n\r\n",
	     "example.com", SBX_HOST_NAME, 80,
	     "POST /api HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding:  Chunked \r\n"
	     "Connection: close\r\n\r\n");
	good("two equal Content-Length values",
	     "PUT http://example.com/ HTTP/1.1\r\nContent-Length: 07\r\nContent-Length: 7\r\n\r\n",
	     "example.com", SBX_HOST_NAME, 80,
	     "PUT / HTTP/1.1\r\nHost: example.com\r\nContent-Length: 07\r\nContent-Length: 7\r\n"
	     "Connection: close\r\n\r\n");
	good("HTTP/1.0 stays 1.0", "GET http://example.com/ HTTP/1.0\r\n\r\n", "example.com",
	     SBX_HOST_NAME, 80, "GET / HTTP/1.0\r\nHost: example.com\r\nConnection: close\r\n\r\n");
	good("GET IPv6", GET_HOST("http://[::1]:8080/a", "[::1]:8080") "\r\n", "::1", SBX_HOST_IPV6,
	     8080, "GET /a HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: close\r\n\r\n");
	good("GET IPv4", "GET http://10.0.0.1/ HTTP/1.1\r\n\r\n", "10.0.0.1", SBX_HOST_IPV4, 80,
	     "GET / HTTP/1.1\r\nHost: 10.0.0.1\r\nConnection: close\r\n\r\n");
	good("GET IDN, Host in U-labels",
	     GET_HOST("http://b\xc3\xbc"
		      "cher.example/",
		      "B\xc3\x9c"
		      "CHER.example") "\r\n",
	     "xn--bcher-kva.example", SBX_HOST_NAME, 80,
	     "GET / HTTP/1.1\r\nHost: xn--bcher-kva.example\r\nConnection: close\r\n\r\n");
	good("an @ in the path is not userinfo", "GET http://example.com/a@b HTTP/1.1\r\n\r\n",
	     "example.com", SBX_HOST_NAME, 80,
	     "GET /a@b HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
	good("values with tabs and obs-text, empty values",
	     "GET http://example.com/ HTTP/1.1\r\nX-A:\tv\tw\t\r\nX-B: caf\xc3\xa9 "
	     "\xff\r\nX-C:\r\n\r\n",
	     "example.com", SBX_HOST_NAME, 80,
	     "GET / HTTP/1.1\r\nHost: example.com\r\nX-A:\tv\tw\t\r\nX-B: caf\xc3\xa9 \xff\r\n"
	     "X-C:\r\nConnection: close\r\n\r\n");
	good("any token method, 15 bytes", "M-SEARCH.1234_! http://example.com/ HTTP/1.1\r\n\r\n",
	     "example.com", SBX_HOST_NAME, 80,
	     "M-SEARCH.1234_! / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
	good("Connection: close only",
	     "DELETE http://example.com/x HTTP/1.1\r\nConnection: close\r\n\r\n", "example.com",
	     SBX_HOST_NAME, 80,
	     "DELETE /x HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
}

static void bad_heads(void)
{
	/* Forms that are not a proxy's. */
	bad("origin form", "GET /" MARK " HTTP/1.1\r\nHost: example.com\r\n\r\n", 501);
	bad("asterisk form", "OPTIONS * HTTP/1.1\r\n\r\n", 501);
	bad("https in absolute form", "GET https://" MARK ".com/ HTTP/1.1\r\n\r\n", 501);
	bad("another scheme", "GET ftp://" MARK ".com/ HTTP/1.1\r\n\r\n", 501);
	bad("authority form without CONNECT", "GET " MARK ".com:443 HTTP/1.1\r\n\r\n", 501);
	bad("no scheme", "GET " MARK ".com HTTP/1.1\r\n\r\n", 400);
	bad("http: without //", "GET http:" MARK ".com/ HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT in absolute form", "CONNECT http://" MARK ".com:443/ HTTP/1.1\r\n\r\n", 400);
	bad("method 16 bytes", "M-SEARCH.1234_!! http://example.com/ HTTP/1.1\r\n\r\n", 501);
	bad("connect is not CONNECT", "connect " MARK ".com:443 HTTP/1.1\r\n\r\n", 501);

	/* The request line. */
	bad("HTTP/2.0", "GET http://example.com/ HTTP/2.0\r\n\r\n", 505);
	bad("HTTP/1.2", "CONNECT example.com:443 HTTP/1.2\r\n\r\n", 505);
	bad("HTTP/0.9", "GET http://example.com/ HTTP/0.9\r\n\r\n", 505);
	bad("http/1.1", "GET http://example.com/ http/1.1\r\n\r\n", 400);
	bad("HTTP/1.10", "GET http://example.com/ HTTP/1.10\r\n\r\n", 400);
	bad("no version", "GET http://" MARK ".com/\r\n\r\n", 400);
	bad("a space after the version", "GET http://example.com/ HTTP/1.1 \r\n\r\n", 400);
	bad("two spaces", "GET  http://example.com/ HTTP/1.1\r\n\r\n", 400);
	bad("a space in the target", "GET http://example.com/a b HTTP/1.1\r\n\r\n", 400);
	bad("a tab for a space", "GET\thttp://example.com/ HTTP/1.1\r\n\r\n", 400);
	bad("a tab in the target", "GET http://example.com/\t HTTP/1.1\r\n\r\n", 400);
	bad("method not a token", "G(T http://example.com/ HTTP/1.1\r\n\r\n", 400);
	bad("empty line first", "\r\nGET http://example.com/ HTTP/1.1\r\n\r\n", 400);
	bad("only an empty line", "\r\n\r\n", 400);
	bad("non-ASCII in the path", "GET http://example.com/caf\xc3\xa9 HTTP/1.1\r\n\r\n", 400);
	bad("DEL in the path", "GET http://example.com/\x7f HTTP/1.1\r\n\r\n", 400);

	/* Targets. */
	bad_msg("userinfo", "GET http://user@" MARK ".com/ HTTP/1.1\r\n\r\n", 400, "userinfo");
	bad_msg("userinfo that names an allowed host",
		"GET http://allowed.example@" MARK ".com/ HTTP/1.1\r\n\r\n", 400, "userinfo");
	bad("userinfo with a password", "GET http://u:p@" MARK ".com/ HTTP/1.1\r\n\r\n", 400);
	bad_msg("userinfo in CONNECT", "CONNECT u@" MARK ".com:443 HTTP/1.1\r\n\r\n", 400,
		"userinfo");
	bad_msg("a fragment", "GET http://example.com/" MARK "#x HTTP/1.1\r\n\r\n", 400,
		"fragment");
	bad_msg("a fragment before an @",
		"GET http://" MARK ".com#@allowed.example/ HTTP/1.1\r\n\r\n", 400, "fragment");
	bad("a backslash before an @",
	    "GET http://" MARK ".com\\@allowed.example/ HTTP/1.1\r\n\r\n", 400);
	bad("an empty port", "GET http://" MARK ".com:/ HTTP/1.1\r\n\r\n", 400);
	bad("port 0", "GET http://" MARK ".com:0/ HTTP/1.1\r\n\r\n", 400);
	bad("port 65536", "GET http://" MARK ".com:65536/ HTTP/1.1\r\n\r\n", 400);
	bad("port of six digits", "GET http://" MARK ".com:000080/ HTTP/1.1\r\n\r\n", 400);
	bad("no host", "GET http:///x HTTP/1.1\r\n\r\n", 400);
	bad("no host, a port", "GET http://:80/x HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT without a port", "CONNECT " MARK ".com HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT port 0", "CONNECT " MARK ".com:0 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT port 65536", "CONNECT " MARK ".com:65536 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT port +443", "CONNECT " MARK ".com:+443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT port 443x", "CONNECT " MARK ".com:443x HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT two ports", "CONNECT " MARK ".com:443:443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT with a path", "CONNECT " MARK ".com:443/ HTTP/1.1\r\n\r\n", 400);
	bad_msg("CONNECT a bare IPv6 literal", "CONNECT ::1:443 HTTP/1.1\r\n\r\n", 400, "brackets");
	bad_msg("CONNECT a bare IPv6 literal 2", "CONNECT fe80::1:443 HTTP/1.1\r\n\r\n", 400,
		"brackets");
	bad("CONNECT IPv6 without ]", "CONNECT [::1:443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT bytes after ]", "CONNECT [::1]x:443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT IPv6 without a port", "CONNECT [::1] HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT not IPv6 in brackets", "CONNECT [" MARK "]:443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT an IPv6 zone", "CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT a wildcard", "CONNECT *." MARK ".com:443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT 127.1", "CONNECT 127.1:443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT 0x7f.1", "CONNECT 0x7f.0.0.1:443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT 2130706433", "CONNECT 2130706433:443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT an underscore", "CONNECT " MARK "_x.com:443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT percent-encoded", "CONNECT " MARK "%2ecom:443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT an empty label", "CONNECT " MARK "..com:443 HTTP/1.1\r\n\r\n", 400);
	bad("CONNECT a label of 64",
	    "CONNECT "
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com:443 "
	    "HTTP/1.1\r\n\r\n",
	    400);
	bad("CONNECT not UTF-8", "CONNECT " MARK "\xff.com:443 HTTP/1.1\r\n\r\n", 400);

	/* Bytes and lines. */
	bad_msg("bare LF after the request line", "GET http://example.com/ HTTP/1.1\n\r\n", 400,
		"bare LF");
	bad("bare LF in the headers", GET_HOST("http://example.com/", "example.com") "A: b\n\r\n",
	    400);
	bad_msg("bare LF at the end", "GET http://example.com/ HTTP/1.1\r\n\n", 400, "bare LF");
	bad("LF only", "GET http://example.com/ HTTP/1.1\n\n", 400);
	bad_msg("bare CR in a value", "GET http://example.com/ HTTP/1.1\r\nA: b\rc\r\n\r\n", 400,
		"CR not followed");
	bad("CR CR LF", "GET http://example.com/ HTTP/1.1\r\r\n\r\n", 400);
	BAD_LIT("NUL in the request line", "GET http://example.com/\0 HTTP/1.1\r\n\r\n", 400,
		"NUL");
	BAD_LIT("NUL in a value", "GET http://example.com/ HTTP/1.1\r\nA: \0\r\n\r\n", 400,
		"line 2: a NUL");
	BAD_LIT("NUL first", "\0", 400, "NUL");
	bad_msg("a control byte in a value", "GET http://example.com/ HTTP/1.1\r\nA: \x01\r\n\r\n",
		400, "control");
	bad("ESC in a value", "GET http://example.com/ HTTP/1.1\r\nA: \x1b[31m\r\n\r\n", 400);
	bad("DEL in a value", "GET http://example.com/ HTTP/1.1\r\nA: \x7f\r\n\r\n", 400);
	bad("a control byte in a name", "GET http://example.com/ HTTP/1.1\r\nA\x01: b\r\n\r\n",
	    400);
	bad_msg("obs-fold", "GET http://example.com/ HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400,
		"obs-fold");
	bad_msg("obs-fold with a tab", "GET http://example.com/ HTTP/1.1\r\nA: b\r\n\tc\r\n\r\n",
		400, "obs-fold");
	bad_msg("whitespace before the first header",
		"GET http://example.com/ HTTP/1.1\r\n A: b\r\n\r\n", 400, "whitespace");
	bad("a header without a colon", "GET http://example.com/ HTTP/1.1\r\n" MARK "\r\n\r\n",
	    400);
	bad("a space before the colon", "GET http://example.com/ HTTP/1.1\r\nHost : x\r\n\r\n",
	    400);
	bad("an empty name", "GET http://example.com/ HTTP/1.1\r\n: " MARK "\r\n\r\n", 400);
	bad("a name not a token", "GET http://example.com/ HTTP/1.1\r\nA(b): c\r\n\r\n", 400);
	bad("a name in UTF-8", "GET http://example.com/ HTTP/1.1\r\nCaf\xc3\xa9: c\r\n\r\n", 400);

	/* Host. */
	bad_msg("Host disagrees", GET_HOST("http://example.com/", MARK ".com") "\r\n", 400,
		"agree");
	bad("Host on another port", GET_HOST("http://example.com/", "example.com:81") "\r\n", 400);
	bad("Host :80 for a :8080 target",
	    GET_HOST("http://example.com:8080/", "example.com") "\r\n", 400);
	bad_msg("two Hosts",
		GET_HOST("http://example.com/", "example.com") "Host: example.com\r\n\r\n", 400,
		"more than one Host");
	bad("two Hosts, the second disagrees",
	    GET_HOST("http://example.com/", "example.com") "Host: " MARK ".com\r\n\r\n", 400);
	bad("an empty Host", GET_HOST("http://example.com/", "") "\r\n", 400);
	bad("Host with userinfo", GET_HOST("http://example.com/", "u@example.com") "\r\n", 400);
	bad("Host a list", GET_HOST("http://example.com/", "example.com, example.com") "\r\n", 400);
	bad("Host an IP for a name", GET_HOST("http://localhost/", "127.0.0.1") "\r\n", 400);
	bad("CONNECT, Host disagrees",
	    "CONNECT example.com:443 HTTP/1.1\r\nHost: " MARK ".com:443\r\n\r\n", 400);
	bad("CONNECT, Host on another port",
	    "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:444\r\n\r\n", 400);

	/* Smuggling. */
	bad_msg("Content-Length and Transfer-Encoding",
		"POST http://example.com/ HTTP/1.1\r\nContent-Length: 5\r\n"
		"Transfer-Encoding: chunked\r\n\r\n",
		400, "both");
	bad_msg("Transfer-Encoding and Content-Length",
		"POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
		"Content-Length: 5\r\n\r\n",
		400, "both");
	bad_msg(
	    "two Content-Length values",
	    "POST http://example.com/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
	    400, "different Content-Length");
	bad("a Content-Length list",
	    "POST http://example.com/ HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", 400);
	bad("Content-Length -1", "POST http://example.com/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
	    400);
	bad("Content-Length +5", "POST http://example.com/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
	    400);
	bad("an empty Content-Length",
	    "POST http://example.com/ HTTP/1.1\r\nContent-Length:\r\n\r\n", 400);
	bad("Content-Length of 19 digits",
	    "POST http://example.com/ HTTP/1.1\r\nContent-Length: 1000000000000000000\r\n\r\n",
	    400);
	bad("Transfer-Encoding gzip, chunked",
	    "POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400);
	bad("Transfer-Encoding chunked, chunked",
	    "POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
	    400);
	bad("Transfer-Encoding xchunked",
	    "POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n", 400);
	bad("two Transfer-Encoding headers",
	    "POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n",
	    400);
	bad_msg("Transfer-Encoding in HTTP/1.0",
		"POST http://example.com/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
		"HTTP/1.0");
	bad("Transfer-Encoding with a space before the colon",
	    "POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n", 400);
	bad_msg("Connection names Content-Length",
		"POST http://example.com/ HTTP/1.1\r\nContent-Length: 5\r\n"
		"Connection: close, content-length\r\n\r\n",
		400, "Connection names");
	bad("Connection names Transfer-Encoding",
	    "POST http://example.com/ HTTP/1.1\r\nConnection: Transfer-Encoding\r\n\r\n", 400);
	bad("a Connection option not a token",
	    "GET http://example.com/ HTTP/1.1\r\nConnection: a b\r\n\r\n", 400);
	bad("CONNECT with CL and TE",
	    "CONNECT example.com:443 HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: "
	    "chunked\r\n\r\n",
	    400);
}

static void sizes(void)
{
	char *buf = malloc(200000);
	size_t n;

	/* Exactly EGRESS_HEADERS_MAX header lines: fine; one more: 431. */
	n = (size_t)sprintf(buf, "GET http://example.com/ HTTP/1.1\r\n");
	for (int i = 0; i < EGRESS_HEADERS_MAX; i++)
		n += (size_t)sprintf(buf + n, "X-%d: v\r\n", i);
	memcpy(buf + n, "\r\n", 3);
	struct answer a;
	parse_into(buf, n + 2, &a);
	check(a.rc == 1 && a.h.rewritten, "%d header lines parse", EGRESS_HEADERS_MAX);
	answer_free(&a);
	n += (size_t)sprintf(buf + n, "X-last: v\r\n\r\n");
	bad_len("one header line too many", buf, n, 431);

	/* 10,000 header lines. */
	n = (size_t)sprintf(buf, "GET http://example.com/ HTTP/1.1\r\n");
	for (int i = 0; i < 10000; i++)
		n += (size_t)sprintf(buf + n, "A: b\r\n");
	n += (size_t)sprintf(buf + n, "\r\n");
	parse_into(buf, n, &a);
	check(a.rc == -1 && a.status == 431, "10,000 header lines: 431");
	/* ... and short ones, all in the first 8 KiB. */
	n = (size_t)sprintf(buf, "GET http://example.com/ HTTP/1.1\r\n");
	for (int i = 0; i < 10000; i++)
		n += (size_t)sprintf(buf + n, "A:\r\n");
	parse_into(buf, n, &a);
	check(a.rc == -1 && a.status == 431, "10,000 empty-valued header lines: 431");

	/* A head of exactly EGRESS_HEAD_MAX bytes parses; one byte more
	 * does not; without an end, 8 KiB is 431 and less is "more". */
	const char *start = "GET http://example.com/ HTTP/1.1\r\nX: ";
	n = strlen(start);
	memcpy(buf, start, n);
	memset(buf + n, 'a', EGRESS_HEAD_MAX - n - 4);
	memcpy(buf + EGRESS_HEAD_MAX - 4, "\r\n\r\n", 4);
	parse_into(buf, EGRESS_HEAD_MAX, &a);
	check(a.rc == 1 && a.h.head_len == EGRESS_HEAD_MAX, "a head of exactly %d bytes parses",
	      EGRESS_HEAD_MAX);
	answer_free(&a);
	memset(buf + n, 'a', EGRESS_HEAD_MAX + 1 - n - 4);
	memcpy(buf + EGRESS_HEAD_MAX + 1 - 4, "\r\n\r\n", 4);
	parse_into(buf, EGRESS_HEAD_MAX + 1, &a);
	check(a.rc == -1 && a.status == 431, "a head of %d bytes: 431", EGRESS_HEAD_MAX + 1);
	memset(buf + n, 'a', 20000);
	parse_into(buf, EGRESS_HEAD_MAX - 1, &a);
	check(a.rc == 0, "%d bytes without an end: more", EGRESS_HEAD_MAX - 1);
	parse_into(buf, EGRESS_HEAD_MAX, &a);
	check(a.rc == -1 && a.status == 431, "%d bytes without an end: 431", EGRESS_HEAD_MAX);
	parse_into(buf, 20000, &a);
	check(a.rc == -1 && a.status == 431, "20000 bytes without an end: 431");
	bad_len("8 KiB without an end, byte by byte", buf, EGRESS_HEAD_MAX + 10, 431);
	/* A bad byte inside the first 8 KiB of a head with no end is still
	 * what is wrong with it. */
	buf[5000] = '\0';
	bad_len("a NUL at 5000 of a head with no end", buf, 20000, 400);
	free(buf);
}

int main(void)
{
	struct answer a;

	parse_into("", 0, &a);
	check(a.rc == 0, "nothing yet: more");
	parse_into("CONNECT example.com:443 HTTP/1.1\r\n\r", 35, &a);
	check(a.rc == 0, "a head but its last LF: more");
	good_heads();
	bad_heads();
	sizes();
	egress_head_free(NULL);
	return check_done();
}
