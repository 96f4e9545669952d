/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of common/hostname.c: the one normal form of egress host names
 * (policy entries and proxy requests), and which entry covers which host. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "hostname.h"

enum { PLAIN = 0, WILD = 1, V6 = 2 };

struct norm_case {
	const char *in;
	size_t len;	  /* 0: strlen(in) */
	unsigned allow;	  /* WILD, V6 */
	const char *want; /* normal form, or NULL: refused */
	enum sbx_host_kind kind;
	const char *why; /* a piece of the error, when refused */
};

#define LONG_LABEL "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" /* 63 */

static const struct norm_case norm_cases[] = {
    {"example.com", 0, PLAIN, "example.com", SBX_HOST_NAME, NULL},
    {"API.Example.COM", 0, PLAIN, "api.example.com", SBX_HOST_NAME, NULL},
    {"a.b.", 0, PLAIN, "a.b", SBX_HOST_NAME, NULL},
    {"a.b..", 0, PLAIN, NULL, 0, "empty label"},
    {"a..b", 0, PLAIN, NULL, 0, "empty label"},
    {".a.b", 0, PLAIN, NULL, 0, "empty label"},
    {".", 0, PLAIN, NULL, 0, "empty label"},
    {"", 0, PLAIN, NULL, 0, "empty host name"},
    {"localhost", 0, PLAIN, "localhost", SBX_HOST_NAME, NULL},
    {"r3---sn-abc.googlevideo.com", 0, PLAIN, "r3---sn-abc.googlevideo.com", SBX_HOST_NAME, NULL},
    {"-a.example", 0, PLAIN, NULL, 0, "hyphen"},
    {"a-.example", 0, PLAIN, NULL, 0, "hyphen"},
    {"a_b.example", 0, PLAIN, NULL, 0, "letters, digits"},
    {"a b.example", 0, PLAIN, NULL, 0, "letters, digits"},
    {"a/b", 0, PLAIN, NULL, 0, "letters, digits"},
    {"a\nb.example", 0, PLAIN, NULL, 0, "control byte 0x0a"},
    {"a\x7f.example", 0, PLAIN, NULL, 0, "control byte 0x7f"},
    {"a\0b.example", 11, PLAIN, NULL, 0, "control byte 0x00"},
    {"bad\xff.example", 0, PLAIN, NULL, 0, "not UTF-8"},
    {"cut\xc3", 0, PLAIN, NULL, 0, "not UTF-8"},
    {"\xc0\xae.example", 0, PLAIN, NULL, 0, "not UTF-8"}, /* overlong "." */
    /* IDNA: UTS #46 mapping (case, NFC), non-transitional (ß stays). */
    {"B\xc3\x9c"
     "cher.example",
     0, PLAIN, "xn--bcher-kva.example", SBX_HOST_NAME, NULL},
    {"bu\xcc\x88"
     "cher.example",
     0, PLAIN, "xn--bcher-kva.example", SBX_HOST_NAME, NULL}, /* u + combining diaeresis */
    {"fa\xc3\x9f.de", 0, PLAIN, "xn--fa-hia.de", SBX_HOST_NAME, NULL},
    {"XN--BCHER-KVA.example", 0, PLAIN, "xn--bcher-kva.example", SBX_HOST_NAME, NULL},
    {"b\xc3\xbc"
     "cher.example.",
     0, PLAIN, "xn--bcher-kva.example", SBX_HOST_NAME, NULL},
    {"b\xc3\xbc"
     "cher..example",
     0, PLAIN, NULL, 0, "empty label"},
    {"a\xe3\x80\x82"
     "example",
     0, PLAIN, "a.example", SBX_HOST_NAME, NULL}, /* U+3002 ideographic full stop */
    {"\xf0\x9f\x99\x82.example", 0, PLAIN, NULL, 0, "invalid IDNA name"}, /* emoji */
    {"-b\xc3\xbc"
     "cher.example",
     0, PLAIN, NULL, 0, "invalid IDNA name"},
    {"a\xc2\x9b"
     "b.example",
     0, PLAIN, NULL, 0, "invalid IDNA name"}, /* C1 control */
    {"\xc3\xbc.1", 0, PLAIN, NULL, 0, "dotted-quad"},
    /* Lengths: labels of 63 bytes, names of 253. */
    {LONG_LABEL ".example", 0, PLAIN, LONG_LABEL ".example", SBX_HOST_NAME, NULL},
    {LONG_LABEL "a.example", 0, PLAIN, NULL, 0, "label longer than 63"},
    {LONG_LABEL "." LONG_LABEL "." LONG_LABEL "." LONG_LABEL, 0, PLAIN, NULL, 0,
     "longer than 253"}, /* 255 */
    {LONG_LABEL "." LONG_LABEL "." LONG_LABEL
		".aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
     0, PLAIN,
     LONG_LABEL "." LONG_LABEL "." LONG_LABEL
		".aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
     SBX_HOST_NAME, NULL}, /* 253 */
    /* Numbers: only a strict dotted quad. */
    {"127.0.0.1", 0, PLAIN, "127.0.0.1", SBX_HOST_IPV4, NULL},
    {"127.0.0.1.", 0, PLAIN, "127.0.0.1", SBX_HOST_IPV4, NULL},
    {"0.0.0.0", 0, PLAIN, "0.0.0.0", SBX_HOST_IPV4, NULL},
    {"255.255.255.255", 0, PLAIN, "255.255.255.255", SBX_HOST_IPV4, NULL},
    {"127.1", 0, PLAIN, NULL, 0, "dotted-quad"},
    {"2130706433", 0, PLAIN, NULL, 0, "dotted-quad"},
    {"0x7f.1", 0, PLAIN, NULL, 0, "dotted-quad"},
    {"127.0.0.0x1", 0, PLAIN, NULL, 0, "dotted-quad"},
    {"0x7f000001", 0, PLAIN, NULL, 0, "dotted-quad"},
    {"127.0.0.01", 0, PLAIN, NULL, 0, "dotted-quad"},
    {"256.0.0.1", 0, PLAIN, NULL, 0, "dotted-quad"},
    {"1.2.3.4.5", 0, PLAIN, NULL, 0, "dotted-quad"},
    {"1.2.3.4.example", 0, PLAIN, "1.2.3.4.example", SBX_HOST_NAME, NULL},
    {"0xcafe.example", 0, PLAIN, "0xcafe.example", SBX_HOST_NAME, NULL},
    /* Wildcards: a leading "*." only, and only where allowed. */
    {"*.Example.com", 0, WILD, "*.example.com", SBX_HOST_WILDCARD, NULL},
    {"*.example.com.", 0, WILD, "*.example.com", SBX_HOST_WILDCARD, NULL},
    {"*.b\xc3\xbc"
     "cher.example",
     0, WILD, "*.xn--bcher-kva.example", SBX_HOST_WILDCARD, NULL},
    {"*.example.com", 0, PLAIN, NULL, 0, "wildcard is not allowed"},
    {"a.*.example.com", 0, WILD, NULL, 0, "leading \"*.\""},
    {"*a.example.com", 0, WILD, NULL, 0, "leading \"*.\""},
    {"*.*.example.com", 0, WILD, NULL, 0, "leading \"*.\""},
    {"*", 0, WILD, NULL, 0, "leading \"*.\""},
    {"*.", 0, WILD, NULL, 0, "leading \"*.\""},
    {"*..", 0, WILD, NULL, 0, "empty label"},
    {"*.1.2.3.4", 0, WILD, NULL, 0, "not addresses"},
    {"*.\xef\xbc\x8a.example", 0, WILD, NULL, 0, "letters, digits"}, /* fullwidth '*' */
    /* IPv6: only where allowed, brackets or not, in inet_ntop's form. */
    {"[::1]", 0, V6, "::1", SBX_HOST_IPV6, NULL},
    {"::1", 0, V6, "::1", SBX_HOST_IPV6, NULL},
    {"[2001:DB8:0:0:0:0:0:1]", 0, V6, "2001:db8::1", SBX_HOST_IPV6, NULL},
    {"::ffff:127.0.0.1", 0, V6, "::ffff:127.0.0.1", SBX_HOST_IPV6, NULL},
    {"[::1]", 0, PLAIN, NULL, 0, "IPv6 literal is not allowed"},
    {"::1", 0, WILD, NULL, 0, "IPv6 literal is not allowed"},
    {"[::1", 0, V6, NULL, 0, "must end with ']'"},
    {"[]", 0, V6, NULL, 0, "not an IPv6 address"},
    {"[::1]:80", 0, V6, NULL, 0, "must end with ']'"},
    {"[fe80::1%eth0]", 0, V6, NULL, 0, "not an IPv6 address"},
    {"[127.0.0.1]", 0, V6, NULL, 0, "not an IPv6 address"},
    {"a:b", 0, V6, NULL, 0, "not an IPv6 address"},
};

static void check_norm(const struct norm_case *c)
{
	char out[SBX_HOSTNAME_BUF] = "unchanged";
	enum sbx_host_kind kind = (enum sbx_host_kind) - 1;
	struct sbx_err err = {0};
	size_t len = c->len ? c->len : strlen(c->in);
	int rc =
	    sbx_hostname_normalize(c->in, len, c->allow & WILD, c->allow & V6, out, &kind, &err);

	if (c->want) {
		if (!check(rc == 0 && strcmp(out, c->want) == 0 && kind == c->kind,
			   "normalize \"%s\" -> %s", c->in, c->want))
			printf("#   rc %d, out \"%s\", kind %d, err %s\n", rc, out, (int)kind,
			       err.msg);
		/* The normal form is a fixed point, and its kind is what
		 * sbx_hostname_kind reads back. */
		char again[SBX_HOSTNAME_BUF];
		enum sbx_host_kind kind2;
		check(rc == 0 &&
			  sbx_hostname_normalize(out, strlen(out), true, true, again, &kind2,
						 &err) == 0 &&
			  strcmp(again, out) == 0 && kind2 == kind &&
			  sbx_hostname_kind(out) == kind,
		      "normal form of \"%s\" is stable", c->in);
		return;
	}
	if (!check(rc < 0 && strstr(err.msg, c->why) != NULL, "refuse \"%s\": %s", c->in, c->why))
		printf("#   rc %d, out \"%s\", err \"%s\"\n", rc, out, err.msg);
}

struct cover_case {
	const char *entry, *host;
	bool covered;
};

static const struct cover_case cover_cases[] = {
    {"api.example.com", "api.example.com", true},
    {"api.example.com", "x.api.example.com", false},
    {"api.example.com", "example.com", false},
    {"*.example.com", "api.example.com", true},
    {"*.example.com", "a.b.example.com", true},
    {"*.example.com", "example.com", false}, /* the bare suffix is not covered */
    {"*.example.com", "badexample.com", false},
    {"*.example.com", "example.com.evil", false},
    {"*.com", "example.com", true},
    {"127.0.0.1", "127.0.0.1", true},
    {"127.0.0.1", "127.0.0.2", false},
    /* An IP and a name never cover each other. */
    {"*.0.0.1", "127.0.0.1", false},
    {"localhost", "127.0.0.1", false},
    {"127.0.0.1", "localhost", false},
    {"*.example.com", "::1", false},
    {"127.0.0.1", "::ffff:127.0.0.1", false},
};

static void check_cover(const struct cover_case *c)
{
	/* The entry kind as the policy stores it: by sbx_hostname_kind; the
	 * host's as the proxy gets it: by normalizing it. "*.0.0.1" is no
	 * valid entry, but covers must still not match it against an IP. */
	enum sbx_host_kind ek = sbx_hostname_kind(c->entry), hk;
	char host[SBX_HOSTNAME_BUF];
	struct sbx_err err;

	if (!check(sbx_hostname_normalize(c->host, strlen(c->host), false, true, host, &hk, &err) ==
		       0,
		   "host %s normalizes", c->host))
		return;
	check(sbx_hostname_covers(c->entry, ek, host, hk) == c->covered, "%s %s %s", c->entry,
	      c->covered ? "covers" : "does not cover", c->host);
}

int main(void)
{
	for (size_t i = 0; i < sizeof(norm_cases) / sizeof(norm_cases[0]); i++)
		check_norm(&norm_cases[i]);
	for (size_t i = 0; i < sizeof(cover_cases) / sizeof(cover_cases[0]); i++)
		check_cover(&cover_cases[i]);

	check(sbx_hostname_kind("*.a.example") == SBX_HOST_WILDCARD, "kind: wildcard");
	check(sbx_hostname_kind("10.0.0.1") == SBX_HOST_IPV4, "kind: IPv4");
	check(sbx_hostname_kind("10.0.0.01.example") == SBX_HOST_NAME, "kind: name");
	check(sbx_hostname_kind("2001:db8::1") == SBX_HOST_IPV6, "kind: IPv6");

	/* An input far past any name is refused without reaching libidn2. */
	char big[4096];
	memset(big, 'a', sizeof(big));
	char out[SBX_HOSTNAME_BUF];
	enum sbx_host_kind kind;
	struct sbx_err err;
	check(sbx_hostname_normalize(big, sizeof(big), true, true, out, &kind, &err) < 0 &&
		  strstr(err.msg, "longer than 253"),
	      "4096 bytes refused");
	/* A failed normalization leaves no half name in out. */
	check(sbx_hostname_normalize("ok.example..", 12, false, false, out, &kind, &err) < 0 &&
		  out[0] == '\0',
	      "out is empty after a refusal");
	return check_done();
}
