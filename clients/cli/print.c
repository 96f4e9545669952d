/* SPDX-License-Identifier: Apache-2.0 */
/* What sbxctl prints that a sandbox chose: names escaped (common/text.h's one
 * form, "\xNN" per byte and "\\"), JSON made safe for a terminal, what
 * sbxd says a listing or an output stream left out, and a run's egress
 * (the hosts in it are whatever the sandboxed code asked for). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "text.h"

static void put_escaped(FILE *f, const char *s, unsigned flags)
{
	size_t size = SBX_ESCAPE_SIZE(strlen(s));
	char *e = malloc(size);

	if (!e) {
		fputs("(out of memory)", f);
		return;
	}
	sbx_escape_flags(e, size, s, flags);
	fputs(e, f);
	free(e);
}

void cli_put_name(FILE *f, const char *s)
{
	put_escaped(f, s ? s : "", 0);
}

void cli_put_text(FILE *f, const char *s)
{
	put_escaped(f, s ? s : "", SBX_ESCAPE_KEEP_BACKSLASH);
}

char *cli_json_safe(const char *json)
{
	const unsigned char *s = (const unsigned char *)json;
	/* At most "\uNNNN" (6 bytes) for a byte in (DEL). */
	char *out = malloc(strlen(json) * 6 + 1), *o = out;

	if (!out)
		return NULL;
	while (*s) {
		size_t n = sbx_text_unsafe_len(s);
		unsigned cp;

		/* jansson writes C0 in strings as \n or \u001b already (a raw
		 * one is the indent); DEL, C1 and bidi controls it leaves raw
		 * can only be inside a string, valid UTF-8 (pbjson writes U+FFFD
		 * for anything else), so their \u form is the same value. */
		if (n == 0 || (n == 1 && *s != 0x7f)) {
			*o++ = (char)*s++;
			continue;
		}
		if (n == 1)
			cp = *s; /* DEL */
		else if (n == 2)
			cp = ((s[0] & 0x1fu) << 6) | (s[1] & 0x3fu);
		else
			cp = ((s[0] & 0x0fu) << 12) | ((s[1] & 0x3fu) << 6) | (s[2] & 0x3fu);
		o += sprintf(o, "\\u%04x", cp);
		s += n;
	}
	*o = '\0';
	return out;
}

void cli_note_listing(const Sbx__V1__ArtifactListing *l, uint32_t skipped, const char *what)
{
	uint32_t other = skipped;

	if (l && l->live)
		fprintf(stderr, "sbxctl: %s: live: an exec is running; digests are not final\n",
			what);
	if (l && (l->truncated || l->not_listed)) {
		if (l->not_listed)
			fprintf(stderr,
				"sbxctl: %s: truncated: %" PRIu32 " regular files not listed", what,
				l->not_listed);
		else
			fprintf(stderr, "sbxctl: %s: truncated: some files are not listed", what);
		if (l->note && *l->note) {
			fputs(" (", stderr);
			cli_put_text(stderr, l->note);
			fputc(')', stderr);
		}
		fputc('\n', stderr);
	}
	if (l && l->busy)
		fprintf(stderr,
			"sbxctl: %s: %" PRIu32 " files busy (a lease is held): not listed\n", what,
			l->busy);
	if (l && l->bad_names)
		fprintf(stderr,
			"sbxctl: %s: %" PRIu32 " names are not UTF-8: skipped, never served\n",
			what, l->bad_names);
	/* skipped counts those three too (sandbox.proto). */
	if (l) {
		uint64_t counted = (uint64_t)l->not_listed + l->busy + l->bad_names;
		other = counted >= skipped ? 0 : skipped - (uint32_t)counted;
	}
	if (other)
		fprintf(stderr,
			"sbxctl: %s: %" PRIu32
			" entries are links or special files: never served\n",
			what, other);
}

/* Whether a notice on stderr must start with a newline: the stream's
 * output went to fd, did not end with one, and lands where stderr does
 * (the same file, or both terminals). */
static bool notice_needs_newline(const struct cli_out_tail *t)
{
	struct stat a, b;

	if (!t || !t->written || t->last == '\n')
		return false;
	if (t->fd == STDERR_FILENO || (isatty(t->fd) && isatty(STDERR_FILENO)))
		return true;
	return fstat(t->fd, &a) == 0 && fstat(STDERR_FILENO, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

void cli_out_wrote(struct cli_out_tail *t, const uint8_t *p, size_t n)
{
	if (n) {
		t->written = true;
		t->last = p[n - 1];
	}
}

void cli_note_gap(const char *stream, uint64_t dropped, const struct cli_out_tail *t)
{
	fprintf(stderr,
		"%ssbxctl: %" PRIu64 " bytes of the exec's %s dropped here (policy "
		"limits.output_kb keeps its head and its tail)\n",
		notice_needs_newline(t) ? "\n" : "", dropped, stream);
}

void cli_note_cut(const char *stream, const char *cut, uint64_t kept_bytes, bool truncated,
		  bool all_shown, const struct cli_out_tail *t)
{
	const char *nl = notice_needs_newline(t) ? "\n" : "";

	if (cut && *cut) {
		fprintf(stderr, "%ssbxctl: the exec's %s was cut after %" PRIu64 " bytes: ", nl,
			stream, kept_bytes);
		cli_put_text(stderr, cut);
		fputc('\n', stderr);
	} else if (truncated && all_shown) {
		/* Every byte came and was written (no gap, our reader stayed): a
		 * follower kept up while sbxd's record lost its middle. Said as
		 * it is, so nobody goes looking for output they already saw. A
		 * gap was said where it was; a reader that went away is gone. */
		fprintf(stderr,
			"%ssbxctl: all of the exec's %s was shown here; sbxd's record of it keeps "
			"its head and its tail (policy limits.output_kb)\n",
			nl, stream);
	}
}

const char *cli_time(int64_t ms, char *buf, size_t size)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (ms <= 0 || !gmtime_r(&t, &tm))
		return "-";
	strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return buf;
}

/* Room for any escaped normalized name (253 bytes) and a port; a longer
 * host (sbxd never sends one) is cut short by sbx_escape, which never cuts
 * an escape or a character in half. */
#define HOST_PORT_MAX (SBX_ESCAPE_SIZE(253) + 16)
#define PORT_ROOM     8 /* "]:65535" and the NUL */

/* "host:port" escaped into buf ("[v6]:port" for an IPv6 literal, so that
 * the port stays readable; "-" for a head that never named a host). */
static const char *host_port(char buf[HOST_PORT_MAX], const char *host, uint32_t port)
{
	bool v6 = host && strchr(host, ':');
	size_t off = 0;

	if (!host || !*host)
		return "-";
	if (v6)
		buf[off++] = '[';
	sbx_escape(buf + off, HOST_PORT_MAX - off - PORT_ROOM, host);
	off += strlen(buf + off);
	snprintf(buf + off, HOST_PORT_MAX - off, "%s:%" PRIu32, v6 ? "]" : "", port);
	return buf;
}

void cli_print_egress(FILE *f, Sbx__V1__EgressRecord *const *records, size_t n_records,
		      uint64_t dropped)
{
	char hp[HOST_PORT_MAX], t[32];

	if (dropped)
		fprintf(f,
			"egress: %" PRIu64 " older records summarized (counted in the "
			"destinations)\n",
			dropped);
	for (size_t i = 0; i < n_records; i++) {
		const Sbx__V1__EgressRecord *e = records[i];

		fprintf(f, "egress %" PRIu64 " %s %s %s", e->connection,
			cli_time(e->time_unix_ms, t, sizeof(t)), e->allowed ? "allowed" : "denied",
			host_port(hp, e->host, e->port));
		fputs(" address ", f);
		cli_put_name(f, e->address && *e->address ? e->address : "-");
		fputs(" reason ", f);
		cli_put_text(f, e->reason && *e->reason ? e->reason : "-");
		fprintf(f, " out %" PRIu64 " in %" PRIu64 "%s\n", e->bytes_out, e->bytes_in,
			e->open ? " open" : "");
	}
}

void cli_print_egress_destinations(FILE *f, Sbx__V1__EgressDestination *const *d, size_t n)
{
	char hp[HOST_PORT_MAX];
	int width = (int)strlen("host:port");

	if (n == 0)
		return;
	/* Column width by the widest name, as it prints (escaped). */
	for (size_t i = 0; i < n; i++) {
		int w = (int)strlen(host_port(hp, d[i]->host, d[i]->port));
		width = w > width ? w : width;
	}
	fprintf(f, "egress destinations\n  %-*s  %11s  %6s  %12s  %12s\n", width, "host:port",
		"connections", "denied", "bytes out", "bytes in");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "  %-*s  %11" PRIu64 "  %6" PRIu64 "  %12" PRIu64 "  %12" PRIu64 "\n",
			width, host_port(hp, d[i]->host, d[i]->port), d[i]->connections,
			d[i]->denied, d[i]->bytes_out, d[i]->bytes_in);
}
