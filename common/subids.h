/* SPDX-License-Identifier: Apache-2.0 */
/* The subordinate ids /etc/subuid and /etc/subgid give a user: the host
 * uids and gids its sandboxes run as, one per live run (common/host_ids.h).
 * Read by the helper, which takes a slot, and by sbxd, which checks at
 * start that runs_max runs can each have one. */
#ifndef SBX_SUBIDS_H
#define SBX_SUBIDS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define SBX_SUBUID_FILE	      "/etc/subuid"
#define SBX_SUBGID_FILE	      "/etc/subgid"
#define SBX_SUBIDS_MAX_RANGES 16

struct sbx_subid_range {
	uint64_t start;
	uint64_t count;
};

struct sbx_subids {
	struct sbx_subid_range r[SBX_SUBIDS_MAX_RANGES];
	size_t n;
	uint64_t total; /* ids in all ranges */
};

/* The ranges `file` gives the user named `name` or numbered `id` (both
 * spellings are valid there), in file order, at most SBX_SUBIDS_MAX_RANGES.
 * No entry is n == 0, not an error; a missing file is n == 0 too, an
 * unreadable one an error. */
int sbx_subids_read(const char *file, const char *name, uint64_t id, struct sbx_subids *out,
		    struct sbx_err *err);

/* The idx-th id of all ranges together, or UINT64_MAX past them. */
uint64_t sbx_subids_nth(const struct sbx_subids *s, uint64_t idx);
/* Which idx gives id (its first place), or UINT64_MAX when none does. */
uint64_t sbx_subids_index(const struct sbx_subids *s, uint64_t id);

/* This euid's uids and gids (user: its name, from the password database,
 * cut to user_size). Safe from many threads at once (sbxd's). */
int sbx_subids_own(struct sbx_subids *uids, struct sbx_subids *gids, char *user, size_t user_size,
		   struct sbx_err *err);

/* How many runs can have a host uid of their own at once: the smaller of
 * the subordinate uids and gids this euid has (0: none). */
int sbx_subids_slots(uint64_t *slots, struct sbx_err *err);

#endif
