/* SPDX-License-Identifier: Apache-2.0 */
/* The one bubblewrap command both benchmarks measure sbx against: the
 * isolation closest to a sandbox of sbx's host image. */
#ifndef SBX_BWRAP_BASELINE_H
#define SBX_BWRAP_BASELINE_H

/* Fills argv[BENCH_MAX_ARGS] with `bwrap --unshare-all --die-with-parent
 * --new-session`, /usr bound read-only, the host's top-level links into it
 * recreated (a real directory bound read-only instead), /proc, /dev, a
 * tmpfs /tmp, then cmd (NULL-terminated). The strings stay valid until the
 * next call. */
void bwrap_baseline_argv(char **argv, const char *bwrap, const char *const *cmd);

#endif
