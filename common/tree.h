/* Walking a directory tree that someone else controls (a sandbox's /out)
 * without ever following a link or leaving it: every open is openat2 with
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 * RESOLVE_NO_XDEV relative to a directory fd. */
#ifndef SBX_TREE_H
#define SBX_TREE_H

#include <stdint.h>
#include <sys/types.h>

#include "err.h"

struct sbx_tree_stats {
	uint64_t files;
	uint64_t dirs;
	uint64_t bytes;
	uint64_t skipped; /* symlinks, fifos, sockets, devices: never copied */
};

#define SBX_TREE_MAX_DEPTH 64

/* openat2 beneath dirfd, refusing links anywhere in `path`. */
int sbx_open_beneath(int dirfd, const char *path, int flags, mode_t mode, struct sbx_err *err);

/* Copies regular files and directories from src_dirfd into dst_dirfd
 * (which must exist). Never fails on one entry: links, special files,
 * unreadable entries, hard links to a file already copied and files past
 * `max_bytes` in total (0: no limit) are counted as skipped and reported by
 * `on_skip`. A destination file is written under a temporary name and
 * renamed into place, so nothing that was planted there (a link, a FIFO, a
 * hard link) is written through. Fails only when the top directory cannot
 * be read. */
int sbx_tree_copy(int src_dirfd, int dst_dirfd, uint64_t max_bytes, struct sbx_tree_stats *stats,
		  void (*on_skip)(const char *relpath, const char *why), struct sbx_err *err);

#endif
