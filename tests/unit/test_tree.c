/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_open_beneath and its fallback walk refuse the same escapes: links at
 * the end or in the middle, "..", absolute paths; and open what is there. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tree.h"

int main(void)
{
	char dir[] = "/tmp/sbx-tree-test-XXXXXX";
	if (!mkdtemp(dir))
		return 2;
	char path[512];
	snprintf(path, sizeof(path), "%s/outside", dir);
	close(open(path, O_CREAT | O_WRONLY, 0600));
	snprintf(path, sizeof(path), "%s/root", dir);
	mkdir(path, 0700);
	int root = open(path, O_RDONLY | O_DIRECTORY);
	mkdirat(root, "sub", 0700);
	close(openat(root, "sub/file", O_CREAT | O_WRONLY, 0600));
	close(openat(root, "file", O_CREAT | O_WRONLY, 0600));
	if (symlinkat("../outside", root, "link") < 0 || symlinkat("sub", root, "dirlink") < 0 ||
	    symlinkat("/etc", root, "abslink") < 0) {
		perror("symlinkat");
		return 2;
	}

	static const struct {
		const char *path;
		int opens;
	} cases[] = {
	    {"file", 1},       {"sub/file", 1},		 {"sub", 1},
	    {"link", 0},       {"dirlink/file", 0},	 {"abslink/passwd", 0},
	    {"../outside", 0}, {"sub/../../outside", 0}, {"/etc/passwd", 0},
	    {"missing", 0},    {"sub/missing", 0},
	};
	int (*fns[2])(int, const char *, int, mode_t, struct sbx_err *) = {sbx_open_beneath,
									   sbx_open_beneath_walk};
	const char *names[2] = {"openat2", "walk"};
	for (int f = 0; f < 2; f++)
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			struct sbx_err err;
			int fd = fns[f](root, cases[i].path, O_RDONLY, 0, &err);
			char what[128];
			snprintf(what, sizeof(what), "%s %s", cases[i].opens ? "opens" : "refuses",
				 cases[i].path);
			check((fd >= 0) == cases[i].opens, "%s (%s)", what, names[f]);
			if (fd >= 0)
				close(fd);
		}
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return check_done();
}
