/* SPDX-License-Identifier: Apache-2.0 */
#ifndef SBX_CLEANUP_H
#define SBX_CLEANUP_H

/* `sbx-helper cleanup`: removes the run cgroups that helpers killed before
 * they could clean up left under the delegated root (named
 * sbx-<helper pid>-<hex>, whose helper is gone), killing anything still in
 * them. Prints one line per removed cgroup. */
int sbx_cleanup_main(const char *cgroup_root);

#endif
