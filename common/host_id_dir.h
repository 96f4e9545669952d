/* SPDX-License-Identifier: Apache-2.0 */
/* The directory the host-id slots' locks live in (common/host_ids.h): one
 * per user, the same for every helper of it (sbxd's and one-shot runs), so
 * that two live runs never hold one slot. sbx-helper takes slots in it;
 * sbxd opens it at start, so that a user with no usable home fails there,
 * naming the fix, rather than at every CreateRun. */
#ifndef SBX_HOST_ID_DIR_H
#define SBX_HOST_ID_DIR_H

#include <stddef.h>

#include "err.h"

/* DIR when given, else ~/.local/state/sbx/host-ids under the home the
 * password database names (not $HOME: every helper of a user must agree). */
int sbx_host_id_dir_path(const char *dir, char *out, size_t size, struct sbx_err *err);

/* Opens it, making what is missing (0700), without following a link:
 * every ancestor root's or this user's and writable by no one else unless
 * sticky, the directory itself this user's and writable by no one else.
 * An fd, or -1 with err naming what was wrong. */
int sbx_host_id_dir_open(const char *path, struct sbx_err *err);

#endif
