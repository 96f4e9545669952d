/* SPDX-License-Identifier: Apache-2.0 */
#include "bwrap_baseline.h"

#include <limits.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"
#include "util.h"

/* One top-level entry of the host mirrored the way sbx's host image does:
 * a link is recreated with the same target, a real directory is bound
 * read-only, a missing one is left out. */
struct toplink {
	char path[16];
	char target[PATH_MAX];
	enum { TOP_ABSENT, TOP_LINK, TOP_DIR } kind;
};

static struct toplink tops[] = {
    {.path = "/bin"},	{.path = "/sbin"},  {.path = "/lib"},
    {.path = "/lib32"}, {.path = "/lib64"}, {.path = "/libx32"},
};

static void scan_toplinks(void)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(tops); i++) {
		struct toplink *t = &tops[i];
		struct stat st;
		ssize_t n = readlink(t->path, t->target, sizeof(t->target) - 1);

		if (n >= 0) {
			t->target[n] = '\0';
			t->kind = TOP_LINK;
		} else if (stat(t->path, &st) == 0 && S_ISDIR(st.st_mode)) {
			t->kind = TOP_DIR;
		} else {
			t->kind = TOP_ABSENT;
		}
	}
}

void bwrap_baseline_argv(char **argv, const char *bwrap, const char *const *cmd)
{
	static const char *const head[] = {
	    "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"};
	static const char *const tail[] = {"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"};
	size_t n = 0;

	scan_toplinks();
	bench_add_arg(argv, &n, bwrap);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(head); i++)
		bench_add_arg(argv, &n, head[i]);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(tops); i++) {
		if (tops[i].kind == TOP_LINK) {
			bench_add_arg(argv, &n, "--symlink");
			bench_add_arg(argv, &n, tops[i].target);
			bench_add_arg(argv, &n, tops[i].path);
		} else if (tops[i].kind == TOP_DIR) {
			bench_add_arg(argv, &n, "--ro-bind");
			bench_add_arg(argv, &n, tops[i].path);
			bench_add_arg(argv, &n, tops[i].path);
		}
	}
	for (size_t i = 0; i < SBX_ARRAY_SIZE(tail); i++)
		bench_add_arg(argv, &n, tail[i]);
	for (size_t i = 0; cmd[i]; i++)
		bench_add_arg(argv, &n, cmd[i]);
}
