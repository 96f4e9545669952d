/* SPDX-License-Identifier: Apache-2.0 */
/* The host uid slots of sbxd's runs, each with a user namespace mapped once.
 *
 * Every run's sandbox user is a host uid of its own (common/host_ids.h),
 * which only the setuid newuidmap and newgidmap may map: two program
 * starts per run, the largest part of a cold CreateRun. sbxd takes the
 * slot itself, and the first time it takes a slot it has `sbx-helper
 * slot-userns` make a user namespace holding no process, mapped by those
 * tools once (0 to sbxd's uid, the sandbox user to the slot's uid and
 * gid), and keeps it for the slot's later runs. The helper makes the run's own user namespace
 * inside it and maps that without the tools (helper/supervisor.c). A run's namespaces are still its
 * own, made at its start and gone with it; what is kept is a namespace with two maps and nothing in
 * it, which no sandbox process can enter (it has no capability there: its own namespace is a child)
 * and of which sbxd alone holds a descriptor (the run namespaces made in it keep it alive too, as
 * their parent). */
#ifndef SBX_RUNS_SLOTS_H
#define SBX_RUNS_SLOTS_H

#include <stddef.h>
#include <sys/types.h>

#include "err.h"
#include "host_ids.h"

struct runs_slots;

/* Keeps at most `keep` slots' namespaces (the least recently taken goes
 * first). NULL without memory. */
struct runs_slots *runs_slots_new(size_t keep);
void runs_slots_free(struct runs_slots *slots);

/* Takes a free slot (its flock, in lock_dir: NULL the default) and its
 * namespace, made now by `helper slot-userns` (environment env) if this
 * sbxd has none for it yet: ids gets the lock and a descriptor of the
 * namespace, both the caller's (to hand to the helper and close;
 * sbx_host_ids_release closes both). -1 with err naming what was wrong,
 * and nothing taken. */
int runs_slots_take(struct runs_slots *slots, const char *helper, char *const *env,
		    const char *lock_dir, struct sbx_host_ids *ids, struct sbx_err *err);

/* Drops the slot's kept namespace (none: nothing), for a helper that
 * failed before Ready with it: the next run of the slot gets one made
 * afresh rather than the same again. */
void runs_slots_forget(struct runs_slots *slots, uid_t uid, gid_t gid);

#endif
