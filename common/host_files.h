/* SPDX-License-Identifier: Apache-2.0 */
/* The host's file-table settings, read from /proc/sys: sbxd sizes its runs'
 * file budgets by them at start (server/config/config_limits.c) and Health reports
 * them live. */
#ifndef SBX_HOST_FILES_H
#define SBX_HOST_FILES_H

#include <stdint.h>

/* fs.file-max (the one file table of the whole host), 0 when unreadable. */
uint64_t sbx_host_file_max(void);
/* vm.max_map_count (mappings per process), 0 when unreadable. */
uint64_t sbx_host_max_map_count(void);

#endif
