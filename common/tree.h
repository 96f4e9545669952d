/* SPDX-License-Identifier: Apache-2.0 */
/* Walking a directory tree that someone else controls (a sandbox's /out)
 * without ever following a link or leaving it: every open is openat2 with
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 * RESOLVE_NO_XDEV relative to a directory fd. */
#ifndef SBX_TREE_H
#define SBX_TREE_H

#include <dirent.h>
#include <stdbool.h>
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
/* What sbx_open_beneath does where openat2 is missing (ENOSYS): a
 * component-by-component walk with the same refusals. Exposed for tests. */
int sbx_open_beneath_walk(int dirfd, const char *path, int flags, mode_t mode, struct sbx_err *err);

/* path (absolute, or relative to the cwd) opened with no symlink or
 * magic link anywhere on the way (openat2 RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS). For a path
 * an operator names that may run through a directory another user can
 * write: a component there swapped for a link would redirect the open to
 * whatever the caller can read. A link on the way fails with ELOOP. */
int sbx_open_no_symlinks(const char *path, int flags, struct sbx_err *err);

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

/* Lists the source's tree the same way: `fn` gets every regular file (its
 * path relative to the top, an fd opened read-only and non-blocking on it, and its
 * fstat), directories are descended into, and everything else -- links,
 * FIFOs, sockets, devices, files or directories that cannot be opened,
 * anything deeper than SBX_TREE_MAX_DEPTH or with a path beyond PATH_MAX --
 * is counted in *skipped, by kind. Stops after max_entries entries and returns 1;
 * returns 0 when the whole tree was listed, -1 on an error (or when fn
 * returns -1, with err set by fn). */
struct stat;
struct sbx_tree_skips {
	uint64_t other;	    /* links, FIFOs, devices, unreadable, too deep or long */
	uint64_t busy;	    /* opens refused with EAGAIN: a lease is held on the file */
	uint64_t bad_names; /* names that are not UTF-8 (with all beneath them) */
};
/* Where a listing opens what it reads: beneath `top` in this process, or
 * (open non-NULL) through `open`, e.g. a run's /out reader (out_reader.h)
 * when the tree's files belong to a uid this process has no rights over. */
struct sbx_tree_src {
	int top;
	int (*open)(void *ctx, const char *rel, int flags, struct sbx_err *err);
	void *ctx;
};
/* `rel` beneath the source's top ("" is the top itself). */
int sbx_tree_src_open(const struct sbx_tree_src *src, const char *rel, int flags,
		      struct sbx_err *err);

typedef int (*sbx_tree_file_fn)(const char *relpath, int fd, const struct stat *st, void *arg,
				struct sbx_err *err);
int sbx_tree_list(const struct sbx_tree_src *src, uint64_t max_entries, sbx_tree_file_fn fn,
		  void *arg, struct sbx_tree_skips *skipped, struct sbx_err *err);

/* A listing of dirfd's directory through a new open of "." (a dup would
 * share the directory's offset with every other reader of dirfd), or NULL
 * with errno. closedir frees it. */
DIR *sbx_dir_list(int dirfd);

/* sbx_open_beneath, and where that fails with EACCES on a directory or
 * regular file the euid owns (a mode of 000, a directory without x) or
 * opens one that lacks bits of `need` (a directory of 0400), adds `need`
 * to its permission bits (opening it again if it must): *was gets the
 * mode it had (for the caller to put back with fchmod), else (mode_t)-1. */
int sbx_open_beneath_owned(int dirfd, const char *name, int flags, mode_t need, mode_t *was,
			   struct sbx_err *err);
/* Removes `name` under parent: a non-directory is unlinked, a directory
 * emptied first (never following a link, making read-only or unreadable
 * directories of ours writable as it goes). Nothing there is success.
 * Returns -1 with err on the first failure. */
int sbx_remove_tree_at(int parent, const char *name, struct sbx_err *err);

#endif
