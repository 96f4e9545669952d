/* SPDX-License-Identifier: Apache-2.0 */
/* `sbx-helper run --timings FILE`: when each step of a one-shot sandbox
 * happened, for sbx-bench-helper's per-phase breakdown.
 *
 * The marks live in one anonymous shared page made before pid 1 is cloned,
 * so pid 1, exec init and the command's child (before its execve, which
 * drops the page) write theirs where the helper reads them at the end.
 * Only sbx's own code ever holds the page: execve takes it from the
 * command. Without --timings there is no page and marking does nothing. */
#ifndef SBX_PHASES_H
#define SBX_PHASES_H

#include <stdint.h>

#include "err.h"

/* In the order they happen on the way of `run -- CMD`. */
enum sbx_phase {
	SBX_PHASE_MAIN,	    /* helper: main() entered */
	SBX_PHASE_PREPARED, /* helper: policy read, host ids taken */
	SBX_PHASE_CGROUP,   /* helper: the run's cgroup made, limits written */
	SBX_PHASE_CLONED,   /* helper: pid 1 cloned into its namespaces */
	SBX_PHASE_MAPPED,   /* helper: pid 1's uid and gid maps written (with newuidmap:
			     * and the seccomp filter compiled meanwhile) */
	SBX_PHASE_DIGEST,   /* helper: the policy's digest computed, for --result
			     * only (while pid 1 builds the root) */
	SBX_PHASE_MOUNTS,   /* pid 1: the root file system built */
	SBX_PHASE_READY,    /* pid 1: the seccomp filter read, Ready sent */
	SBX_PHASE_LEAF,	    /* pid 1: the exec's cgroup leaf made */
	SBX_PHASE_IN_LEAF,  /* pid 1: exec init cloned straight into it (v2's
			     * CLONE_INTO_CGROUP); unmarked when it joins later */
	SBX_PHASE_EXEC_NS,  /* pid 1: exec init cloned into its namespaces, mapped */
	SBX_PHASE_JOINED,   /* exec init: in its cgroup leaf */
	SBX_PHASE_CONFINED, /* exec init: network, privileges dropped, seccomp loaded */
	SBX_PHASE_EXECVE,   /* command's child: about to execve */
	SBX_PHASE_REAPED,   /* exec init: the command reaped */
	SBX_PHASE_ENDED,    /* helper: ExecEnded received */
	SBX_PHASE_DONE,	    /* helper: pid 1 reaped, cgroups removed */
	SBX_PHASE_COUNT
};

/* Makes the page (once, before pid 1 is cloned); -1 if it cannot. */
int sbx_phases_enable(struct sbx_err *err);

/* Records now as phase p's instant (CLOCK_MONOTONIC ns); nothing when
 * not enabled. Async-signal-safe. */
void sbx_phase_mark(enum sbx_phase p);

/* Writes "NAME NS\n" for each phase marked (absolute CLOCK_MONOTONIC ns). */
int sbx_phases_write(const char *path, struct sbx_err *err);

#endif
