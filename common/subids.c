/* SPDX-License-Identifier: Apache-2.0 */
#include "subids.h"

#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

static bool parse_u64(const char *s, uint64_t *v)
{
	char *end;
	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (errno || *end)
		return false;
	*v = x;
	return true;
}

int sbx_subids_read(const char *file, const char *name, uint64_t id, struct sbx_subids *out,
		    struct sbx_err *err)
{
	memset(out, 0, sizeof(*out));
	_cleanup_fclose_ FILE *f = fopen(file, "re");
	if (!f)
		return errno == ENOENT ? 0 : sbx_fail_errno(err, "%s", file);
	char line[512], idtext[24];
	snprintf(idtext, sizeof(idtext), "%" PRIu64, id);
	while (fgets(line, sizeof(line), f) && out->n < SBX_SUBIDS_MAX_RANGES) {
		line[strcspn(line, "\r\n")] = '\0';
		char *start = strchr(line, ':'), *count = start ? strchr(start + 1, ':') : NULL;
		if (!count || line[0] == '#')
			continue;
		*start++ = '\0';
		*count++ = '\0';
		struct sbx_subid_range r;
		if (strcmp(line, name) && strcmp(line, idtext))
			continue;
		/* A malformed line is skipped, as shadow's own tools do. */
		if (!parse_u64(start, &r.start) || !parse_u64(count, &r.count) || !r.count ||
		    r.start > UINT32_MAX || r.count > UINT32_MAX - r.start)
			continue;
		out->r[out->n++] = r;
		out->total += r.count;
	}
	return 0;
}

uint64_t sbx_subids_nth(const struct sbx_subids *s, uint64_t idx)
{
	for (size_t i = 0; i < s->n; i++) {
		if (idx < s->r[i].count)
			return s->r[i].start + idx;
		idx -= s->r[i].count;
	}
	return UINT64_MAX;
}

uint64_t sbx_subids_index(const struct sbx_subids *s, uint64_t id)
{
	uint64_t before = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (id >= s->r[i].start && id - s->r[i].start < s->r[i].count)
			return before + (id - s->r[i].start);
		before += s->r[i].count;
	}
	return UINT64_MAX;
}

int sbx_subids_own(struct sbx_subids *uids, struct sbx_subids *gids, char *user, size_t user_size,
		   struct sbx_err *err)
{
	/* getpwuid_r: sbxd's workers take slots at once, and getpwuid's one
	 * static entry would be another thread's name by the time it is read. */
	struct passwd pwbuf, *pw = NULL;
	char buf[4096];
	int rc = getpwuid_r(geteuid(), &pwbuf, buf, sizeof(buf), &pw);
	if (!pw)
		return rc ? sbx_fail_errnum(err, rc, "uid %u in the password database",
					    (unsigned)geteuid())
			  : sbx_fail(err,
				     "uid %u has no name in the password database, so no "
				     "subordinate ids",
				     (unsigned)geteuid());
	snprintf(user, user_size, "%s", pw->pw_name);
	if (sbx_subids_read(SBX_SUBUID_FILE, pw->pw_name, geteuid(), uids, err) < 0 ||
	    sbx_subids_read(SBX_SUBGID_FILE, pw->pw_name, geteuid(), gids, err) < 0)
		return -1;
	return 0;
}

int sbx_subids_slots(uint64_t *slots, struct sbx_err *err)
{
	struct sbx_subids uids, gids;
	char user[256];
	if (sbx_subids_own(&uids, &gids, user, sizeof(user), err) < 0)
		return -1;
	*slots = uids.total < gids.total ? uids.total : gids.total;
	return 0;
}
