/* SPDX-License-Identifier: Apache-2.0 */
/* What sbx prints that a sandbox chose (clients/cli/print.c): names with a
 * newline, ESC, a bidi override or a backslash print as one escaped line;
 * JSON stays the same JSON value but shows no DEL, C1 or bidi control; the
 * notes a listing and a cut stream get. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "check.h"
#include "cli.h"

static void expect_put(void (*put)(FILE *, const char *), const char *in, const char *want,
		       const char *what)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	put(f, in);
	fclose(f);
	if (!check(strcmp(buf, want) == 0, "%s", what))
		printf("#   got: %s\n#  want: %s\n", buf, want);
	free(buf);
}

/* What fn wrote to stderr. */
static char *stderr_of(void (*fn)(void *), void *arg)
{
	FILE *tmp = tmpfile();
	int saved = dup(STDERR_FILENO);
	static char out[4096];
	size_t n;

	fflush(stderr);
	dup2(fileno(tmp), STDERR_FILENO);
	fn(arg);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	rewind(tmp);
	n = fread(out, 1, sizeof(out) - 1, tmp);
	out[n] = '\0';
	fclose(tmp);
	return out;
}

static void note_listing(void *arg)
{
	cli_note_listing(arg, 9, "artifacts");
}

static void note_cut(void *arg)
{
	cli_note_cut("stdout", arg, 1048576, true);
}

static int lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

int main(void)
{
	expect_put(cli_put_name, "a\nforged line", "a\\x0aforged line", "a newline: one line");
	expect_put(cli_put_name, "cr\rover", "cr\\x0dover", "a carriage return");
	expect_put(cli_put_name, "\x1b]0;pwned\x07\x1b[2J", "\\x1b]0;pwned\\x07\\x1b[2J",
		   "ESC sequences (title, clear screen)");
	expect_put(cli_put_name,
		   "report\xe2\x80\xae"
		   "fdp.exe",
		   "report\\xe2\\x80\\xaefdp.exe", "U+202E: the name cannot show as report.pdf");
	expect_put(cli_put_name, "\xe2\x81\xa6x\xe2\x81\xa9", "\\xe2\\x81\\xa6x\\xe2\\x81\\xa9",
		   "U+2066..U+2069 isolates");
	expect_put(cli_put_name, "a\\x0ab", "a\\\\x0ab",
		   "a literal backslash cannot pass for an escape");
	expect_put(cli_put_name,
		   "csi\xc2\x9b"
		   "31m",
		   "csi\\xc2\\x9b31m", "C1 CSI");
	expect_put(cli_put_name, "del\x7f", "del\\x7f", "DEL");
	expect_put(cli_put_name, "gr\xc3\xbc\xc3\x9f \xe2\x82\xac",
		   "gr\xc3\xbc\xc3\x9f \xe2\x82\xac", "other UTF-8 shows as itself");
	expect_put(cli_put_text, "artifact a\\x0ab: \xe2\x80\xae",
		   "artifact a\\x0ab: \\xe2\\x80\\xae",
		   "sbxd's text: its escapes kept, bidi escaped");

	/* JSON: the same value, nothing raw that reorders or controls a terminal. */
	const char *raw = "{\n  \"path\": \"a\\nb\xe2\x80\xae\x7f\xc2\x9b\xc3\xbc\"\n}";
	char *safe = cli_json_safe(raw);
	check(safe && !strstr(safe, "\xe2\x80\xae") && !strchr(safe, 0x7f) &&
		  !strstr(safe, "\xc2\x9b"),
	      "JSON: no raw bidi, DEL or C1");
	check(safe && strstr(safe, "\\u202e\\u007f\\u009b\xc3\xbc"),
	      "JSON: written as \\u, ü kept");
	json_t *a = json_loads(raw, 0, NULL), *b = safe ? json_loads(safe, 0, NULL) : NULL;
	check(a && b && json_equal(a, b), "JSON: the same value");
	check(safe && strchr(safe, '\n') && lines(safe) == lines(raw), "JSON: its indent kept");
	json_decref(a);
	json_decref(b);
	free(safe);

	/* A listing says what it left out; skipped counts those too. */
	Sbx__V1__ArtifactListing l = SBX__V1__ARTIFACT_LISTING__INIT;
	l.live = true;
	l.truncated = true;
	l.not_listed = 5;
	l.busy = 1;
	l.bad_names = 2;
	l.note = "entries: 10000 (RUN_LIST_MAX)\nforged";
	const char *n = stderr_of(note_listing, &l);
	check(strstr(n, "live: an exec is running; digests are not final\n") != NULL,
	      "live listing: digests not final");
	check(strstr(n, "truncated: 5 regular files not listed (entries: 10000 "
			"(RUN_LIST_MAX)\\x0aforged)\n") != NULL,
	      "truncated: count and note, escaped");
	check(strstr(n, "1 files busy") && strstr(n, "2 names are not UTF-8"), "busy, bad names");
	check(strstr(n, "1 entries are links or special files"), "skipped less those: 9-5-1-2");
	check(lines(n) == 5, "five notes, one line each");
	Sbx__V1__ArtifactListing quiet = SBX__V1__ARTIFACT_LISTING__INIT;
	n = stderr_of(note_listing, &quiet);
	check(strstr(n, "9 entries are links") && lines(n) == 1,
	      "a final, whole listing: skipped only");

	n = stderr_of(note_cut, "disk quota of token:bob (quotas.identity_mb)");
	check(strcmp(n, "sbx: the exec's stdout was cut after 1048576 bytes: disk quota of "
			"token:bob (quotas.identity_mb)\n") == 0,
	      "a cut stream says where and why");
	n = stderr_of(note_cut, "");
	check(strstr(n, "truncated (policy limits.output_kb)") != NULL, "no cut: truncated");
	return check_done();
}
