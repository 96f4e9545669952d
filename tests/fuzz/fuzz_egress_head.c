/* SPDX-License-Identifier: Apache-2.0 */
/* The egress proxy's request-head parser (server/egress/egress_head.c):
 * what a sandbox writes to its proxy. Properties: the answer for the bytes
 * read so far never contradicts the answer for all of them (the input is
 * also read split at a point derived from it, as a slow writer sends it);
 * a refusal has a status and a reason; a parsed head ends in CRLF CRLF
 * within EGRESS_HEAD_MAX, and the head the destination gets is well formed:
 * CR and LF only as CRLF line ends, one empty line (the last), an
 * origin-form request line, exactly one Host, no Proxy-* header, and
 * "Connection: close" last. */
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "egress_head.h"
#include "fuzz.h"
#include "util.h"

struct answer {
	int rc, status;
	struct sbx_err err;
	struct egress_head h;
};

static void parse(const uint8_t *data, size_t len, struct answer *a)
{
	/* A copy of exactly len bytes, so that a read past the end is ASan's
	 * to see. */
	_cleanup_free_ char *copy = malloc(len ? len : 1);

	FUZZ_ASSERT(copy, "out of memory");
	if (len) /* data is NULL for the empty input */
		memcpy(copy, data, len);
	memset(a, 0, sizeof(*a));
	a->rc = egress_head_parse(copy, len, &a->h, &a->status, &a->err);
}

static bool same(const struct answer *a, const struct answer *b)
{
	if (a->rc != b->rc || a->status != b->status)
		return false;
	if (a->rc == -1)
		return strcmp(a->err.msg, b->err.msg) == 0;
	if (a->rc == 0)
		return true;
	return a->h.kind == b->h.kind && strcmp(a->h.method, b->h.method) == 0 &&
	       strcmp(a->h.host, b->h.host) == 0 && a->h.host_kind == b->h.host_kind &&
	       a->h.port == b->h.port && a->h.head_len == b->h.head_len &&
	       a->h.rewritten_len == b->h.rewritten_len && (!a->h.rewritten) == (!b->h.rewritten) &&
	       (!a->h.rewritten || memcmp(a->h.rewritten, b->h.rewritten, a->h.rewritten_len) == 0);
}

static bool starts_ci(const char *p, size_t n, const char *lit)
{
	size_t l = strlen(lit);

	return n >= l && strncasecmp(p, lit, l) == 0;
}

static void check_rewritten(const struct egress_head *h)
{
	const char *r = h->rewritten;
	size_t n = h->rewritten_len, start = 0, lines = 0, hosts = 0;
	const char *last = NULL;
	size_t last_n = 0;

	FUZZ_ASSERT(r && n >= 4 && memcmp(r + n - 4, "\r\n\r\n", 4) == 0,
		    "the rewritten head does not end in CRLF CRLF");
	for (size_t i = 0; i < n; i++) {
		FUZZ_ASSERT(r[i] != '\0', "a NUL in the rewritten head at %zu", i);
		if (r[i] == '\r')
			FUZZ_ASSERT(i + 1 < n && r[i + 1] == '\n', "a bare CR at %zu", i);
		if (r[i] != '\n')
			continue;
		FUZZ_ASSERT(i > start && r[i - 1] == '\r', "a bare LF at %zu", i);
		const char *line = r + start;
		size_t len = i - 1 - start;

		start = i + 1;
		if (len == 0) {
			FUZZ_ASSERT(i + 1 == n, "an empty line before the end, at %zu", i);
			break;
		}
		if (lines++ == 0) {
			const char *sp = memchr(line, ' ', len);

			FUZZ_ASSERT(sp && sp + 1 < line + len && sp[1] == '/',
				    "the request line is not in origin form");
			FUZZ_ASSERT((size_t)(sp - line) == strlen(h->method) &&
					memcmp(line, h->method, (size_t)(sp - line)) == 0,
				    "the request line's method is not the head's");
			continue;
		}
		FUZZ_ASSERT(!starts_ci(line, len, "proxy-"), "a Proxy-* header was kept");
		FUZZ_ASSERT(!starts_ci(line, len, "keep-alive:") && !starts_ci(line, len, "te:") &&
				!starts_ci(line, len, "upgrade:") &&
				!starts_ci(line, len, "trailer:"),
			    "a hop-by-hop header was kept");
		if (starts_ci(line, len, "host:"))
			hosts++;
		last = line;
		last_n = len;
	}
	FUZZ_ASSERT(hosts == 1, "%zu Host headers in the rewritten head", hosts);
	FUZZ_ASSERT(last && last_n == strlen("Connection: close") &&
			memcmp(last, "Connection: close", last_n) == 0,
		    "the last header is not Connection: close");
}

static void check_answer(const uint8_t *data, size_t size, const struct answer *a)
{
	switch (a->rc) {
	case 0:
		FUZZ_ASSERT(size < EGRESS_HEAD_MAX, "\"more\" at %zu bytes", size);
		FUZZ_ASSERT(!a->h.rewritten, "a partial head with a rewritten head");
		return;
	case -1:
		FUZZ_ASSERT(a->status == 400 || a->status == 431 || a->status == 501 ||
				a->status == 505,
			    "status %d", a->status);
		FUZZ_ASSERT(a->err.msg[0], "refused without a reason");
		FUZZ_ASSERT(!a->h.rewritten && !a->h.host[0], "a refused head keeps parts");
		return;
	case 1:
		break;
	default:
		FUZZ_ASSERT(false, "rc %d", a->rc);
	}
	const struct egress_head *h = &a->h;
	FUZZ_ASSERT(h->head_len >= 4 && h->head_len <= size && h->head_len <= EGRESS_HEAD_MAX,
		    "head_len %zu of %zu", h->head_len, size);
	FUZZ_ASSERT(memcmp(data + h->head_len - 4, "\r\n\r\n", 4) == 0,
		    "the head does not end in CRLF CRLF");
	FUZZ_ASSERT(!memmem(data, h->head_len - 2, "\r\n\r\n", 4), "the head ends before head_len");
	FUZZ_ASSERT(h->host[0] && h->port != 0 && h->method[0], "host, port or method missing");
	if (h->kind == EGRESS_HEAD_CONNECT) {
		FUZZ_ASSERT(!h->rewritten && strcmp(h->method, "CONNECT") == 0, "CONNECT");
		return;
	}
	FUZZ_ASSERT(h->kind == EGRESS_HEAD_HTTP, "kind %d", (int)h->kind);
	check_rewritten(h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct answer whole, part;
	/* A split point of the input's own: the same input splits the same
	 * way, so a finding reproduces. */
	size_t split = 0;

	for (size_t i = 0; i < size; i++)
		split = split * 31 + data[i];
	split = size ? split % (size + 1) : 0;

	parse(data, size, &whole);
	check_answer(data, size, &whole);
	parse(data, split, &part);
	check_answer(data, split, &part);
	if (part.rc != 0)
		FUZZ_ASSERT(same(&part, &whole),
			    "%zu of %zu bytes answer %d (%d \"%s\"), the whole %d (%d \"%s\")",
			    split, size, part.rc, part.status, part.err.msg, whole.rc, whole.status,
			    whole.err.msg);
	if (whole.rc == 1 && split >= whole.h.head_len)
		FUZZ_ASSERT(part.rc == 1, "a whole head in %zu bytes is not parsed", split);
	egress_head_free(&whole.h);
	egress_head_free(&part.h);
	return 0;
}
