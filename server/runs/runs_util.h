/* SPDX-License-Identifier: Apache-2.0 */
/* Small pieces the run manager's files share (runs_util.c): names, and
 * directories made without following links. */
#ifndef SBX_RUNS_UTIL_H
#define SBX_RUNS_UTIL_H

#include <stdbool.h>

#include "err.h"

bool is_sha256_hex(const char *s);
/* Makes the parent directories of `path` (at most RUN_PATH_MAX bytes)
 * beneath dirfd; returns an fd of the last one (or a dup of dirfd) and the
 * final name in *base. */
int mkdirs_beneath(int dirfd, const char *path, const char **base, struct sbx_err *err);

#endif
