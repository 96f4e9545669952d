/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the one path rule (common/path.c): each kind's accepted and
 * refused spellings, and the message each refusal gets. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "path.h"

static const char *kind_name(enum sbx_path_kind kind)
{
	switch (kind) {
	case SBX_PATH_RELATIVE:
		return "relative";
	case SBX_PATH_ABSOLUTE:
		return "absolute";
	case SBX_PATH_NO_DOTDOT:
		return "no-dotdot";
	}
	return "?";
}

/* want NULL: accepted; else the message must be exactly want. */
static void expect(enum sbx_path_kind kind, const char *path, size_t max, const char *want)
{
	const char *got = sbx_path_problem(path, max, kind);
	bool ok = want ? got && strcmp(got, want) == 0 : got == NULL;

	if (!check(ok, "%s \"%s\": %s", kind_name(kind), path ? path : "(null)",
		   want ? want : "accepted"))
		printf("#   got: %s\n", got ? got : "(accepted)");
}

#define DOTS "must not contain \".\" or \"..\" components"
#define ABS  "must be an absolute path without \".\", \"..\", \"//\" or a trailing \"/\""
#define DD   "must not contain \"..\""

static const struct {
	enum sbx_path_kind kind;
	const char *path;
	size_t max;
	const char *want; /* NULL: accepted */
} cases[] = {
    {SBX_PATH_RELATIVE, "a", 64, NULL},
    {SBX_PATH_RELATIVE, "a/b.c/..d/d..", 64, NULL},
    {SBX_PATH_RELATIVE, "...", 64, NULL},
    {SBX_PATH_RELATIVE, "", 64, "must not be empty"},
    {SBX_PATH_RELATIVE, NULL, 64, "must not be empty"},
    {SBX_PATH_RELATIVE, "abcd", 3, "too long"},
    {SBX_PATH_RELATIVE, "abc", 3, NULL},
    {SBX_PATH_RELATIVE, "/a", 64, "must be relative (no leading '/')"},
    {SBX_PATH_RELATIVE, "..", 64, DOTS},
    {SBX_PATH_RELATIVE, "a/../b", 64, DOTS},
    {SBX_PATH_RELATIVE, "a/..", 64, DOTS},
    {SBX_PATH_RELATIVE, "./a", 64, DOTS},
    {SBX_PATH_RELATIVE, "a/.", 64, DOTS},
    {SBX_PATH_RELATIVE, "a//b", 64, "has an empty component"},
    {SBX_PATH_RELATIVE, "a/", 64, "has an empty component"},

    {SBX_PATH_ABSOLUTE, "/", 64, NULL},
    {SBX_PATH_ABSOLUTE, "/var/lib/sbx", 64, NULL},
    {SBX_PATH_ABSOLUTE, "/a..b/.c", 64, NULL},
    {SBX_PATH_ABSOLUTE, "var", 64, "must be an absolute path"},
    {SBX_PATH_ABSOLUTE, "/var/", 64, ABS},
    {SBX_PATH_ABSOLUTE, "//var", 64, ABS},
    {SBX_PATH_ABSOLUTE, "/var//lib", 64, ABS},
    {SBX_PATH_ABSOLUTE, "/var/./lib", 64, ABS},
    {SBX_PATH_ABSOLUTE, "/var/..", 64, ABS},
    {SBX_PATH_ABSOLUTE, "/var/lib", 7, "too long"},

    /* Joined under a fixed root: only ".." components matter. */
    {SBX_PATH_NO_DOTDOT, "sbx.slice/sbx", 64, NULL},
    {SBX_PATH_NO_DOTDOT, "/a//b/./c/", 64, NULL},
    {SBX_PATH_NO_DOTDOT, "a..b/..c/c..", 64, NULL},
    {SBX_PATH_NO_DOTDOT, "..", 64, DD},
    {SBX_PATH_NO_DOTDOT, "a/../b", 64, DD},
    {SBX_PATH_NO_DOTDOT, "/..", 64, DD},
    {SBX_PATH_NO_DOTDOT, "", 64, "must not be empty"},
};

int main(void)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect(cases[i].kind, cases[i].path, cases[i].max, cases[i].want);

	check(sbx_path_has_dotdot("a/.."), "has_dotdot: trailing ..");
	check(sbx_path_has_dotdot("../a"), "has_dotdot: leading ..");
	check(sbx_path_has_dotdot("/x/../y"), "has_dotdot: inner ..");
	check(!sbx_path_has_dotdot("a..b"), "has_dotdot: .. inside a name is a name");
	check(!sbx_path_has_dotdot("..."), "has_dotdot: ... is a name");
	check(!sbx_path_has_dotdot(""), "has_dotdot: empty path");
	return check_done();
}
