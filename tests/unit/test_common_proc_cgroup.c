/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of /proc/PID/cgroup parsing (common/proc_cgroup.c), with the
 * texts real hosts print: a cgroup v2 host (systemd, the empty controller
 * list that once made sbx-helper miss its own cgroup), a v1 hybrid host,
 * and paths that hold colons. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "proc_cgroup.h"

static void expect(const char *what, const char *text, const char *ctrl, const char *want)
{
	char out[256] = "";
	int rc = sbx_proc_cgroup_find(text, ctrl, out, sizeof(out));
	if (want)
		check(rc == 0 && strcmp(out, want) == 0, "%s: want \"%s\", got rc %d \"%s\"", what,
		      want, rc, out);
	else
		check(rc < 0, "%s: want no match, got \"%s\"", what, out);
}

int main(void)
{
	const char *v2 = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope\n";
	expect("v2 line", v2, NULL,
	       "/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope");
	expect("v2 line without newline", "0::/system.slice/sbxd.service", NULL,
	       "/system.slice/sbxd.service");
	expect("v2 root", "0::/\n", NULL, "/");
	expect("v2 host has no v1 memory", v2, "memory", NULL);

	const char *hybrid = "12:pids:/user.slice/a\n"
			     "9:cpu,cpuacct:/user.slice\n"
			     "7:memory:/user.slice/m\n"
			     "1:name=systemd:/user.slice/s\n"
			     "0::/user.slice/u\n";
	expect("hybrid memory", hybrid, "memory", "/user.slice/m");
	expect("hybrid pids", hybrid, "pids", "/user.slice/a");
	expect("hybrid cpu in a list", hybrid, "cpu", "/user.slice");
	expect("hybrid cpuacct in a list", hybrid, "cpuacct", "/user.slice");
	expect("hybrid unified line", hybrid, NULL, "/user.slice/u");
	expect("no prefix match (cpu vs cpuset)", "3:cpuset:/c\n", "cpu", NULL);
	expect("named hierarchy is not a controller", hybrid, "systemd", NULL);

	expect("a path with colons", "0::/a:b:c\n", NULL, "/a:b:c");
	expect("v1 path with colons", "5:memory:/x:y\n", "memory", "/x:y");
	expect("an id that is not 0 is no v2 line", "10::/odd\n", NULL, NULL);
	expect("a line with one colon", "garbage:line\n0::/ok\n", NULL, "/ok");
	expect("empty path", "0::\n", NULL, NULL);
	expect("empty text", "", NULL, NULL);

	/* Which named roots hold the helper's own cgroup (cgroup_root.c). */
	const char *own = "/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope";
	check(sbx_proc_cgroup_within(own, "user.slice/user-1000.slice"), "an ancestor holds it");
	check(sbx_proc_cgroup_within(own, "/user.slice/user-1000.slice/"), "written with slashes");
	check(sbx_proc_cgroup_within(own, own), "its own cgroup holds it");
	check(sbx_proc_cgroup_within(own, "/") && sbx_proc_cgroup_within(own, ""),
	      "the mount's root holds everything");
	check(!sbx_proc_cgroup_within(own, "sbx-test"), "a subtree beside it does not");
	check(!sbx_proc_cgroup_within("/sbx-testing/a", "sbx-test"), "whole components only");
	check(!sbx_proc_cgroup_within("/user.slice", "user.slice/user-1000.slice"),
	      "a child does not hold its parent");
	check(sbx_proc_cgroup_within("/sbx-test/sbx-self", "sbx-test"), "the root's own leaf");

	char small[4];
	check(sbx_proc_cgroup_find("0::/toolong\n", NULL, small, sizeof(small)) < 0,
	      "a path that does not fit is refused, not cut");
	return check_done();
}
