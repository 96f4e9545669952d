/* SPDX-License-Identifier: Apache-2.0 */
/* Reading /proc/PID/cgroup: one line per hierarchy, "ID:CONTROLLERS:PATH".
 * cgroup v2's line is "0::PATH" (no controllers, so two adjacent colons);
 * a v1 line lists its controllers with commas ("4:cpu,cpuacct:/a"); a path
 * may itself hold colons. */
#ifndef SBX_PROC_CGROUP_H
#define SBX_PROC_CGROUP_H

#include <stdbool.h>
#include <stddef.h>

/* Copies into out the path of the hierarchy that has controller ctrl (v1),
 * or of the v2 hierarchy when ctrl is NULL. -1 when the text has no such
 * line or the path does not fit. */
int sbx_proc_cgroup_find(const char *text, const char *ctrl, char *out, size_t size);

/* Whether cgroup path `path` ("/a/b", as /proc/PID/cgroup prints it) is
 * `root` or lies under it, `root` written either way ("a/b", "/a/b/"); an
 * empty root or "/" holds every path. Whole components only: "/a/bc" is
 * not under "/a/b". */
bool sbx_proc_cgroup_within(const char *path, const char *root);

#endif
