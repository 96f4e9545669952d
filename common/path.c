/* SPDX-License-Identifier: Apache-2.0 */
#include "path.h"

#include <string.h>

/* What the components of a path (between slashes) hold. A leading or
 * trailing slash, or "//", makes an empty component. */
struct components {
	bool dotdot, dot, empty;
};

static struct components scan(const char *path)
{
	struct components c = {0};

	for (const char *p = path;; p++) {
		size_t n = strcspn(p, "/");

		c.empty |= n == 0;
		c.dot |= n == 1 && p[0] == '.';
		c.dotdot |= n == 2 && p[0] == '.' && p[1] == '.';
		p += n;
		if (!*p)
			return c;
	}
}

bool sbx_path_has_dotdot(const char *path)
{
	return scan(path).dotdot;
}

const char *sbx_path_problem(const char *path, size_t max, enum sbx_path_kind kind)
{
	size_t len = path ? strlen(path) : 0;
	struct components c;

	if (len == 0)
		return "must not be empty";
	if (len > max)
		return "too long";
	switch (kind) {
	case SBX_PATH_RELATIVE:
		if (path[0] == '/')
			return "must be relative (no leading '/')";
		c = scan(path);
		if (c.dot || c.dotdot)
			return "must not contain \".\" or \"..\" components";
		return c.empty ? "has an empty component" : NULL;
	case SBX_PATH_ABSOLUTE:
		if (path[0] != '/')
			return "must be an absolute path";
		if (len == 1)
			return NULL;
		c = scan(path + 1);
		if (c.dot || c.dotdot || c.empty)
			return "must be an absolute path without \".\", \"..\", \"//\" or a "
			       "trailing \"/\"";
		return NULL;
	case SBX_PATH_NO_DOTDOT:
		return scan(path).dotdot ? "must not contain \"..\"" : NULL;
	}
	return "unknown path rule";
}
