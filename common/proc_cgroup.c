/* SPDX-License-Identifier: Apache-2.0 */
#include "proc_cgroup.h"

#include <stdbool.h>
#include <string.h>

/* Whether the comma-separated list [list, end) names ctrl. */
static bool list_has(const char *list, const char *end, const char *ctrl)
{
	size_t clen = strlen(ctrl);
	while (list < end) {
		const char *comma = memchr(list, ',', (size_t)(end - list));
		const char *stop = comma ? comma : end;
		if ((size_t)(stop - list) == clen && memcmp(list, ctrl, clen) == 0)
			return true;
		list = stop + 1;
	}
	return false;
}

int sbx_proc_cgroup_find(const char *text, const char *ctrl, char *out, size_t size)
{
	for (const char *line = text; line && *line;) {
		const char *nl = strchr(line, '\n');
		const char *end = nl ? nl : line + strlen(line);
		const char *c1 = memchr(line, ':', (size_t)(end - line));
		const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
		bool match = false;
		if (c2 && !ctrl)
			match = c1 - line == 1 && line[0] == '0' && c2 == c1 + 1;
		else if (c2)
			match = list_has(c1 + 1, c2, ctrl);
		if (match) {
			size_t len = (size_t)(end - c2 - 1);
			if (len == 0 || len >= size)
				return -1;
			memcpy(out, c2 + 1, len);
			out[len] = '\0';
			return 0;
		}
		line = nl ? nl + 1 : NULL;
	}
	return -1;
}

bool sbx_proc_cgroup_within(const char *path, const char *root)
{
	while (*root == '/')
		root++;
	size_t rlen = strlen(root);
	while (rlen > 0 && root[rlen - 1] == '/')
		rlen--;
	while (*path == '/')
		path++;
	if (rlen == 0)
		return true;
	return strncmp(path, root, rlen) == 0 && (path[rlen] == '\0' || path[rlen] == '/');
}
