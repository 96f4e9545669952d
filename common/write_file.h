/* SPDX-License-Identifier: Apache-2.0 */
/* Writing one short text to a /proc, cgroup or sysctl file, the way the
 * kernel wants it (one write): the helper's many such files, and the maps
 * of a user namespace, which sbxd writes too (host_ids.c). */
#ifndef SBX_WRITE_FILE_H
#define SBX_WRITE_FILE_H

#include <sys/types.h>

#include "err.h"

/* Writes text to dirfd/file (not following a last-component link). */
int sbx_write_at(int dirfd, const char *file, const char *text, struct sbx_err *err);

/* Writes text to /proc/PID/FILE (uid_map, setgroups, gid_map). */
int sbx_write_proc(pid_t pid, const char *file, const char *text, struct sbx_err *err);

#endif
