/* SPDX-License-Identifier: Apache-2.0 */
/* What sbx prints that a sandbox chose: names escaped (common/text.h's one
 * form, "\xNN" per byte and "\\"), JSON made safe for a terminal, and what
 * sbxd says a listing or an output stream left out. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
		fprintf(stderr, "sbx: %s: live: an exec is running; digests are not final\n", what);
	if (l && (l->truncated || l->not_listed)) {
		if (l->not_listed)
			fprintf(stderr, "sbx: %s: truncated: %" PRIu32 " regular files not listed",
				what, l->not_listed);
		else
			fprintf(stderr, "sbx: %s: truncated: some files are not listed", what);
		if (l->note && *l->note) {
			fputs(" (", stderr);
			cli_put_text(stderr, l->note);
			fputc(')', stderr);
		}
		fputc('\n', stderr);
	}
	if (l && l->busy)
		fprintf(stderr, "sbx: %s: %" PRIu32 " files busy (a lease is held): not listed\n",
			what, l->busy);
	if (l && l->bad_names)
		fprintf(stderr, "sbx: %s: %" PRIu32 " names are not UTF-8: skipped, never served\n",
			what, l->bad_names);
	/* skipped counts those three too (sandbox.proto). */
	if (l) {
		uint64_t counted = (uint64_t)l->not_listed + l->busy + l->bad_names;
		other = counted >= skipped ? 0 : skipped - (uint32_t)counted;
	}
	if (other)
		fprintf(stderr,
			"sbx: %s: %" PRIu32 " entries are links or special files: never served\n",
			what, other);
}

void cli_note_cut(const char *stream, const char *cut, uint64_t kept_bytes, bool truncated)
{
	if (cut && *cut) {
		fprintf(stderr, "sbx: the exec's %s was cut after %" PRIu64 " bytes: ", stream,
			kept_bytes);
		cli_put_text(stderr, cut);
		fputc('\n', stderr);
	} else if (truncated) {
		fprintf(stderr, "sbx: the exec's %s was truncated (policy limits.output_kb)\n",
			stream);
	}
}
