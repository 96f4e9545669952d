/* SPDX-License-Identifier: Apache-2.0 */
#include "phases.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static const char *const phase_name[SBX_PHASE_COUNT] = {
    [SBX_PHASE_MAIN] = "main",	       [SBX_PHASE_PREPARED] = "prepared",
    [SBX_PHASE_CGROUP] = "cgroup",     [SBX_PHASE_CLONED] = "cloned",
    [SBX_PHASE_MAPPED] = "mapped",     [SBX_PHASE_MOUNTS] = "mounts",
    [SBX_PHASE_READY] = "ready",       [SBX_PHASE_LEAF] = "leaf",
    [SBX_PHASE_EXEC_NS] = "exec_ns",   [SBX_PHASE_JOINED] = "joined",
    [SBX_PHASE_CONFINED] = "confined", [SBX_PHASE_EXECVE] = "execve",
    [SBX_PHASE_REAPED] = "reaped",     [SBX_PHASE_ENDED] = "ended",
    [SBX_PHASE_DONE] = "done",	       [SBX_PHASE_IN_LEAF] = "in_leaf",
    [SBX_PHASE_DIGEST] = "digest",
};

static int64_t main_ns;		/* SBX_PHASE_MAIN, taken before the page exists */
static volatile int64_t *marks; /* the shared page, or NULL */

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int sbx_phases_enable(struct sbx_err *err)
{
	void *p = mmap(NULL, sizeof(int64_t) * SBX_PHASE_COUNT, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return sbx_fail_errno(err, "--timings: mmap");
	marks = p;
	marks[SBX_PHASE_MAIN] = main_ns;
	return 0;
}

void sbx_phase_mark(enum sbx_phase p)
{
	if (p == SBX_PHASE_MAIN)
		main_ns = now_ns();
	else if (marks)
		marks[p] = now_ns();
}

int sbx_phases_write(const char *path, struct sbx_err *err)
{
	_cleanup_fclose_ FILE *f = fopen(path, "we");
	if (!f)
		return sbx_fail_errno(err, "--timings %s", path);
	for (int i = 0; marks && i < SBX_PHASE_COUNT; i++)
		if (marks[i])
			fprintf(f, "%s %lld\n", phase_name[i], (long long)marks[i]);
	if (fflush(f) != 0 || ferror(f))
		return sbx_fail_errno(err, "--timings %s", path);
	return 0;
}
