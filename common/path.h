/* SPDX-License-Identifier: Apache-2.0 */
/* One rule for the paths sbx takes from callers, policies, the config file
 * and command-line flags: what a component may be, checked once, here. */
#ifndef SBX_PATH_H
#define SBX_PATH_H

#include <stdbool.h>
#include <stddef.h>

enum sbx_path_kind {
	/* Beneath a directory (/data, /out): no leading '/', no empty, "."
	 * or ".." component, no trailing '/'. */
	SBX_PATH_RELATIVE,
	/* Absolute and spelled one way: no "//", no "." or ".." components,
	 * no trailing '/' ("/" itself is fine). Compared by prefix. */
	SBX_PATH_ABSOLUTE,
	/* Anything without a ".." component (joined under a fixed root). */
	SBX_PATH_NO_DOTDOT,
};

/* NULL when path is 1..max bytes and follows the rule, else what is wrong
 * ("must be relative (no leading '/')"), to follow "<field>: ". */
const char *sbx_path_problem(const char *path, size_t max, enum sbx_path_kind kind);
bool sbx_path_has_dotdot(const char *path);

#endif
