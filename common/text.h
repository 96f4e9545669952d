/* SPDX-License-Identifier: Apache-2.0 */
/* Text that someone else chose (a sandbox's file names, a caller's
 * strings) checked and escaped before sbxd sends or logs it: proto3
 * `string` fields must be UTF-8, and a raw newline in a log forges a line. */
#ifndef SBX_TEXT_H
#define SBX_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Length of the UTF-8 sequence at s (1..4), or 0 if it is not one
 * (overlong forms, surrogates and code points past U+10FFFF are not). */
size_t sbx_utf8_len(const unsigned char *s);
/* The whole NUL-terminated string is valid UTF-8. */
bool sbx_utf8_valid(const char *s);
/* Bytes of the character at s that must never reach a terminal or a log
 * raw: a C0 control, DEL, a C1 control (U+0080..U+009F, which terminals may
 * take as escape sequences), a bidi override or isolate (U+202A..U+202E,
 * U+2066..U+2069: they reorder what is shown after them, so a name can
 * show as another), or a byte that is not UTF-8 (1). 0: it may be shown. */
size_t sbx_text_unsafe_len(const unsigned char *s);
/* Copies src into dst (always terminated, never cutting an escape or a
 * sequence in half): valid UTF-8 stays, a backslash becomes "\\", and each
 * byte of what sbx_text_unsafe_len finds becomes "\xNN" (one form for all:
 * "a\x0ab", "csi\xc2\x9b", "\xe2\x80\xaegnp.exe"). The result is
 * printable, valid UTF-8 and tells the original bytes apart. */
void sbx_escape(char *dst, size_t dst_size, const char *src);
/* SBX_ESCAPE_KEEP_BACKSLASH: for text that quotes names already escaped
 * (sbxd's alerts and messages): the same escapes, but a backslash stays,
 * so a second pass over escaped text changes nothing. */
#define SBX_ESCAPE_KEEP_BACKSLASH 1u
void sbx_escape_flags(char *dst, size_t dst_size, const char *src, unsigned flags);
/* The dst_size that never truncates an escape of len bytes. */
#define SBX_ESCAPE_SIZE(len) ((len)*4 + 1)

/* Each line of text[0..len) to say(line, length, arg): a newline or a NUL
 * ends one (a C string cannot hold a NUL), one longer than max_line is
 * split; empty lines are not said. */
void sbx_text_lines(const char *text, size_t len, size_t max_line,
		    void (*say)(const char *line, size_t len, void *arg), void *arg);

struct ProtobufCMessage;
/* The first string field of m (or of a message inside it, maps included)
 * that is not UTF-8, appended to `where` as a path (".policy.env[0].value");
 * false when there is none. protobuf-c does not check what proto3 demands. */
bool sbx_proto_bad_string(const struct ProtobufCMessage *m, char *where, size_t size);

#endif
