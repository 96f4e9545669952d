/* SPDX-License-Identifier: Apache-2.0 */
/* What sbxctl prints that a sandbox chose (clients/cli/print.c): names with a
 * newline, ESC, a bidi override or a backslash print as one escaped line;
 * JSON stays the same JSON value but shows no DEL, C1 or bidi control; the
 * notes a listing and a cut stream get; a run's egress records and
 * destinations, whose hosts the sandboxed code chose. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "check.h"
#include "cli.h"
#include "pbjson.h"

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
	cli_note_cut("stdout", arg, 1048576, true, true, NULL);
}

static void note_cut_unshown(void *arg)
{
	(void)arg;
	cli_note_cut("stdout", "", 1048576, true, false, NULL);
}

/* A gap in output that went where stderr goes and ended mid-line. */
static void note_gap_mid_line(void *arg)
{
	struct cli_out_tail t = {.fd = STDERR_FILENO};

	cli_out_wrote(&t, (const uint8_t *)arg, strlen(arg));
	cli_note_gap("stdout", 123, &t);
}

static int lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* What fn printed to a memory stream. */
static char *printed(void (*fn)(FILE *, void *), void *arg)
{
	static char out[8192];
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	fn(f, arg);
	fclose(f);
	snprintf(out, sizeof(out), "%s", buf ? buf : "");
	free(buf);
	return out;
}

struct egress_status {
	Sbx__V1__EgressRecord **records;
	size_t n_records;
	uint64_t dropped;
	Sbx__V1__EgressDestination **dests;
	size_t n_dests;
};

static void print_records(FILE *f, void *arg)
{
	const struct egress_status *s = arg;

	cli_print_egress(f, s->records, s->n_records, s->dropped);
}

static void print_dests(FILE *f, void *arg)
{
	const struct egress_status *s = arg;

	cli_print_egress_destinations(f, s->dests, s->n_dests);
}

static void test_egress(void)
{
	Sbx__V1__EgressRecord r1 = SBX__V1__EGRESS_RECORD__INIT, r2 = r1, r3 = r1, r4 = r1;
	Sbx__V1__EgressDestination d1 = SBX__V1__EGRESS_DESTINATION__INIT, d2 = d1, d3 = d1;
	Sbx__V1__EgressRecord *records[] = {&r1, &r2, &r3, &r4};
	Sbx__V1__EgressDestination *dests[] = {&d1, &d2, &d3};
	struct egress_status s = {records, 4, 17, dests, 3};
	const char *out;

	r1.connection = 1;
	r1.time_unix_ms = 1764588153000; /* 2025-12-01T11:22:33Z */
	r1.allowed = true;
	r1.host = "api.example";
	r1.port = 443;
	r1.address = "192.0.2.7:443";
	r1.reason = "closed";
	r1.bytes_out = 1234;
	r1.bytes_in = 56789;
	r2.connection = 2;
	r2.host = "evil\n\x1b[2Jexample"; /* what a sandbox may ask for */
	r2.port = 80;
	r2.address = "";
	r2.reason = "not_allowed";
	r3.connection = 3;
	r3.allowed = true;
	r3.host = "big.example";
	r3.port = 8443;
	r3.address = "[2001:db8::1]:8443";
	r3.reason = "allowed";
	r3.bytes_out = 10;
	r3.bytes_in = 20;
	r3.open = true;
	r4.connection = 4;
	r4.host = "";
	r4.reason = "head_timeout";

	out = printed(print_records, &s);
	check(strncmp(out, "egress: 17 older records summarized", 35) == 0,
	      "egress: the dropped records counted first");
	check(strstr(out, "egress 1 2025-12-01T11:22:33Z allowed api.example:443 address "
			  "192.0.2.7:443 reason closed out 1234 in 56789\n") != NULL,
	      "egress: a closed record, every field");
	check(strstr(out, "egress 2 - denied evil\\x0a\\x1b[2Jexample:80 address - reason "
			  "not_allowed out 0 in 0\n") != NULL,
	      "egress: a denied record, the host escaped to one line");
	check(strstr(out, "reason allowed out 10 in 20 open\n") != NULL,
	      "egress: an open connection says so");
	check(strstr(out, "egress 4 - denied - address - reason head_timeout") != NULL,
	      "egress: no host (an unreadable head) prints as -");
	check(lines(out) == 5 && !strchr(out, 0x1b), "egress: one line per record, no raw ESC");
	if (lines(out) != 5)
		printf("%s", out);
	s.dropped = 0;
	out = printed(print_records, &s);
	check(!strstr(out, "summarized") && lines(out) == 4, "egress: nothing dropped, no note");

	d1.host = "api.example";
	d1.port = 443;
	d1.connections = 10;
	d1.denied = 1;
	d1.bytes_out = 1234;
	d1.bytes_in = 56789;
	d2.host = "a\xe2\x80\xae.example"; /* a bidi override */
	d2.port = 80;
	d2.denied = 3;
	d3.host = "::1";
	d3.port = 8080;
	d3.denied = 1;
	out = printed(print_dests, &s);
	check(strstr(out, "egress destinations\n  host:port                 connections  denied  "
			  "   bytes out      bytes in\n") == out,
	      "destinations: a header, columns as wide as the widest name");
	check(strstr(out, "\n  api.example:443                    10       1          1234"
			  "         56789\n") != NULL,
	      "destinations: a row, numbers right-aligned");
	check(strstr(out, "\n  a\\xe2\\x80\\xae.example:80            0       3") != NULL,
	      "destinations: the name escaped");
	check(strstr(out, "\n  [::1]:8080 ") != NULL, "destinations: IPv6 in brackets");
	check(lines(out) == 5, "destinations: header lines and one per destination");
	if (lines(out) != 5)
		printf("%s", out);
	s.n_dests = 0;
	check(printed(print_dests, &s)[0] == '\0', "destinations: none, nothing printed");

	/* status --json (cli_print_json's flags): the new fields by their
	 * proto3 JSON names, defaults included. */
	Sbx__V1__StatusResponse st = SBX__V1__STATUS_RESPONSE__INIT;
	st.egress = records;
	st.n_egress = 1;
	st.egress_records_dropped = 17;
	st.egress_destinations = dests;
	st.n_egress_destinations = 1;
	char *json = sbx_pbjson_dumps(&st.base, SBX_PBJSON_EMIT_DEFAULTS);
	check(json && strstr(json, "\"egressRecordsDropped\": \"17\"") &&
		  strstr(json, "\"egressDestinations\"") && strstr(json, "\"denied\": \"1\"") &&
		  strstr(json, "\"address\": \"192.0.2.7:443\"") && strstr(json, "\"open\": false"),
	      "status --json: records, destinations and the dropped count");
	if (json && !strstr(json, "egressRecordsDropped"))
		printf("%s\n", json);
	free(json);
}

int main(void)
{
	test_egress();
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
	check(strcmp(n, "sbxctl: the exec's stdout was cut after 1048576 bytes: disk quota of "
			"token:bob (quotas.identity_mb)\n") == 0,
	      "a cut stream says where and why");
	n = stderr_of(note_cut, "");
	check(strcmp(n, "sbxctl: all of the exec's stdout was shown here; sbxd's record of it "
			"keeps its head and its tail (policy limits.output_kb)\n") == 0,
	      "no cut, no gap: every byte shown, the record truncated");
	n = stderr_of(note_cut_unshown, NULL);
	check(strcmp(n, "") == 0, "no cut, not all shown (a gap said, a reader gone): no note");
	n = stderr_of(note_gap_mid_line, "progres");
	check(strcmp(n, "\nsbxctl: 123 bytes of the exec's stdout dropped here (policy "
			"limits.output_kb keeps its head and its tail)\n") == 0,
	      "a gap after a partial line starts a line of its own and counts the bytes");
	n = stderr_of(note_gap_mid_line, "line\n");
	check(n[0] == 's', "after a whole line: no empty line");
	return check_done();
}
