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
/* Copies src into dst (always terminated, never cutting an escape or a
 * sequence in half): valid UTF-8 stays, a backslash becomes "\\", control
 * characters (C0, DEL, C1) and bytes that are not UTF-8 become "\xNN". The result is
 * printable, valid UTF-8 and tells the original bytes apart. */
void sbx_escape(char *dst, size_t dst_size, const char *src);

struct ProtobufCMessage;
/* The first string field of m (or of a message inside it, maps included)
 * that is not UTF-8, appended to `where` as a path (".policy.env[0].value");
 * false when there is none. protobuf-c does not check what proto3 demands. */
bool sbx_proto_bad_string(const struct ProtobufCMessage *m, char *where, size_t size);

#endif
