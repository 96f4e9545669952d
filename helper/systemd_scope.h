/* SPDX-License-Identifier: Apache-2.0 */
/* A delegated cgroup the way a systemd host hands one to an unprivileged
 * user: a transient scope with Delegate=yes, started on the user's own
 * systemd manager (StartTransientUnit over D-Bus, as podman does) with
 * this process in it. systemd removes the scope, and every cgroup sbx made
 * under it, once its last process is gone. */
#ifndef SBX_SYSTEMD_SCOPE_H
#define SBX_SYSTEMD_SCOPE_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

/* Starts scope "sbx-helper-PID-RANDOM.scope" holding this process and waits
 * (at most SBX_SCOPE_WAIT_MS) until /proc/self/cgroup shows it. The unit's
 * name goes to unit. Fails naming the manager it tried and why: no user
 * manager (libsystemd absent, no socket), or one that refused. */
int sbx_systemd_scope_start(char *unit, size_t size, struct sbx_err *err);

/* Whether the user manager says the unit holding this process has
 * Delegate=yes (false when none answers or the process is no unit of its).
 * systemd 252's user manager marks no cgroup it delegates (user.delegate
 * came later; trusted.delegate is root's to read), so asking is the one
 * way to tell `systemd-run --user --scope -p Delegate=yes` from a
 * terminal's scope there. */
bool sbx_systemd_unit_delegates(void);

#define SBX_SCOPE_WAIT_MS 10000

#endif
