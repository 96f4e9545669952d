/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of common/text.c (UTF-8 checks and the escape of names that
 * sbxd logs) and common/inode_set.c (how walks meet hard links once). */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "inode_set.h"
#include "text.h"

static void expect_escape(const char *in, size_t size, const char *want)
{
	char out[64];

	sbx_escape(out, size, in);
	if (!check(strcmp(out, want) == 0, "escape to %zu bytes: %s", size, want))
		printf("#   got: %s\n", out);
	check(sbx_utf8_valid(out), "escaped is UTF-8: %s", want);
}

/* sbx_text_lines' lines, joined by '|' into a buffer. */
static void join_line(const char *line, size_t len, void *arg)
{
	char *out = arg;
	size_t have = strlen(out);

	snprintf(out + have, 128 - have, "%s%.*s", have ? "|" : "", (int)len, line);
}

static void expect_lines(const char *text, size_t len, size_t max_line, const char *want)
{
	char out[128] = "";

	sbx_text_lines(text, len, max_line, join_line, out);
	if (!check(strcmp(out, want) == 0, "lines of %zu bytes, at most %zu: %s", len, max_line,
		   want))
		printf("#   got: %s\n", out);
}

int main(void)
{
	struct sbx_inode_set s = {0};
	bool all = true;

	check(sbx_utf8_valid("plain ascii"), "ascii");
	check(sbx_utf8_valid("gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x98\x80"), "2, 3, 4 bytes");
	check(!sbx_utf8_valid("bad\xff"), "0xff");
	check(!sbx_utf8_valid("\xc0\xaf"), "overlong /");
	check(!sbx_utf8_valid("\xed\xa0\x80"), "a surrogate");
	check(!sbx_utf8_valid("\xf4\x90\x80\x80"), "past U+10FFFF");
	check(!sbx_utf8_valid("cut \xe2\x82"), "a cut sequence");

	expect_escape("a\nb", 64, "a\\x0ab");
	expect_escape("back\\slash", 64, "back\\\\slash");
	expect_escape("bad\xff", 64, "bad\\xff");
	expect_escape("\xe2\x82\xac ok", 64, "\xe2\x82\xac ok");
	expect_escape("csi\xc2\x9b", 64, "csi\\xc2\\x9b"); /* C1 */
	expect_escape("esc\x1b[31mred", 64, "esc\\x1b[31mred");
	expect_escape("del\x7f", 64, "del\\x7f");
	/* Bidi overrides and isolates: "exe.txt" shown for "txt.exe". */
	expect_escape("a\xe2\x80\xaetxt.exe", 64, "a\\xe2\\x80\\xaetxt.exe"); /* U+202E */
	expect_escape("\xe2\x80\xaa\xe2\x81\xa6\xe2\x81\xa9", 64,
		      "\\xe2\\x80\\xaa\\xe2\\x81\\xa6\\xe2\\x81\\xa9"); /* 202A 2066 2069 */
	expect_escape("\xe2\x80\xa9\xe2\x80\xaf\xe2\x81\xaa", 64,
		      "\xe2\x80\xa9\xe2\x80\xaf\xe2\x81\xaa"); /* 2029 202F 206A: shown */
	expect_escape("ab\xe2\x80\xae", 14, "ab");	       /* never half of its escape */
	expect_escape("ab\xe2\x80\xae", 15, "ab\\xe2\\x80\\xae");
	expect_escape("ab\ncd", 6, "ab");	  /* never half an escape */
	expect_escape("ab\xe2\x82\xac", 5, "ab"); /* never half a sequence */

	/* Text sbxd escaped already (an alert): a second pass keeps it. */
	char once[64], twice[64];
	sbx_escape(once, sizeof(once), "a\\b\nc\xe2\x80\xae");
	sbx_escape_flags(twice, sizeof(twice), once, SBX_ESCAPE_KEEP_BACKSLASH);
	check(strcmp(once, twice) == 0, "KEEP_BACKSLASH over escaped text changes nothing");
	sbx_escape_flags(twice, sizeof(twice), "x\\y\x1b", SBX_ESCAPE_KEEP_BACKSLASH);
	check(strcmp(twice, "x\\y\\x1b") == 0, "KEEP_BACKSLASH still escapes controls");
	/* The worst case fits SBX_ESCAPE_SIZE: 4 bytes out per byte in. */
	char worst[SBX_ESCAPE_SIZE(6)];
	sbx_escape(worst, sizeof(worst), "\xe2\x80\xae\xff\n\\");
	check(strlen(worst) == 4 * 3 + 4 + 4 + 2, "the worst case is whole: %s", worst);

	for (long i = 0; i < 70000; i++)
		all &= sbx_inode_put(&s, 1, (ino_t)(i * 7919), i);
	check(all && s.n == 70000, "70,000 inodes put");
	all = true;
	for (long i = 0; i < 70000; i++)
		all &= sbx_inode_get(&s, 1, (ino_t)(i * 7919)) == i;
	check(all, "every one found with its value");
	check(sbx_inode_get(&s, 2, 0) < 0 && sbx_inode_get(&s, 1, 1) < 0, "others are not");
	check(sbx_inode_put(&s, 1, 0, 5) && s.n == 70000 && sbx_inode_get(&s, 1, 0) == 5,
	      "a second put replaces the value");
	sbx_inode_set_free(&s);
	check(sbx_inode_get(&s, 1, 0) < 0, "empty after free");
	/* A newline or a NUL ends a line, empty ones are not said, a long one
	 * is split, and nothing past len is read. */
	expect_lines("one\ntwo\n", 8, 100, "one|two");
	expect_lines("a\0b\n\n\nc", 8, 100, "a|b|c");
	expect_lines("abcdefgh", 8, 3, "abc|def|gh");
	expect_lines("abc\ndefXYZ", 7, 100, "abc|def");
	expect_lines("", 0, 100, "");
	return check_done();
}
