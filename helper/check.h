/* SPDX-License-Identifier: Apache-2.0 */
#ifndef SBX_CHECK_H
#define SBX_CHECK_H

#include <stdbool.h>

/* `sbx-helper check`: exit 0 only if user namespaces, seccomp, a delegated
 * cgroup and openat2 are all available; every missing piece names its fix. */
int sbx_check_main(const char *cgroup_root, bool json);

#endif
