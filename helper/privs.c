/* SPDX-License-Identifier: Apache-2.0 */
#include "privs.h"

#include <errno.h>
#include <linux/securebits.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#define SIGPENDING_LIMIT 256
#define MEMLOCK_LIMIT	 (64 * 1024)

int sbx_privs_drop_bounding(struct sbx_err *err)
{
	/* The running kernel's count, not the headers': a newer kernel's extra
	 * capabilities must go too. */
	cap_value_t last = (cap_value_t)cap_max_bits() - 1;
	if (last < CAP_LAST_CAP)
		last = CAP_LAST_CAP;
	for (cap_value_t c = 0; c <= last; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			return sbx_fail_errno(err, "dropping capability %d from the bounding set",
					      c);
	return 0;
}

int sbx_privs_drop(struct sbx_err *err)
{
	/* The bounding set is empty already (sbx_privs_drop_bounding, which
	 * needs the CAP_SETPCAP that cap_set_proc below takes away); the
	 * check costs one call and keeps this function's promise whole. */
	if (prctl(PR_CAPBSET_READ, CAP_SETPCAP, 0, 0, 0) != 0)
		return sbx_fail(err, "the bounding set was not dropped before the rest");
	if (prctl(PR_SET_SECUREBITS,
		  SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
		      SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
		      SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
		  0, 0, 0) < 0)
		return sbx_fail_errno(err, "locking securebits");
	/* One call (libcap's cap_reset_ambient asks for each capability
	 * first); EINVAL: a kernel without ambient capabilities has none. */
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return sbx_fail_errno(err, "clearing ambient capabilities");
	cap_t none = cap_init();
	if (!none)
		return sbx_fail_errno(err, "cap_init");
	int rc = cap_set_proc(none);
	cap_free(none);
	if (rc < 0)
		return sbx_fail_errno(err, "dropping all capabilities");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return sbx_fail_errno(err, "setting no_new_privs");
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return sbx_fail_errno(err, "clearing dumpable");
	return 0;
}

/* Lowering only: without CAP_SYS_RESOURCE a hard limit cannot be raised,
 * and a host that is stricter already is fine. */
static int set_limit(int resource, rlim_t value, const char *name, struct sbx_err *err)
{
	struct rlimit cur;
	if (getrlimit(resource, &cur) == 0 && cur.rlim_max < value)
		value = cur.rlim_max;
	struct rlimit rl = {value, value};
	if (setrlimit(resource, &rl) < 0)
		return sbx_fail_errno(err, "setrlimit %s", name);
	return 0;
}

int sbx_rlimits_apply(const Sbx__V1__Limits *l, uint64_t nofile, bool fallback, struct sbx_err *err)
{
	if (set_limit(RLIMIT_CORE, 0, "RLIMIT_CORE", err) < 0)
		return -1;
	/* The run's share of the host's file table over its pids (run_files.h):
	 * per process, so pids x nofile is what the run's descriptors hold. */
	if (set_limit(RLIMIT_NOFILE, (rlim_t)nofile, "RLIMIT_NOFILE", err) < 0)
		return -1;
	/* These are counted per user across user namespaces, so the sandbox
	 * shares them with every process of the caller on the host: a sandbox
	 * must not be able to use them up (POSIX message queues, queued
	 * signals, locked memory). */
	if (set_limit(RLIMIT_MSGQUEUE, 0, "RLIMIT_MSGQUEUE", err) < 0 ||
	    set_limit(RLIMIT_SIGPENDING, SIGPENDING_LIMIT, "RLIMIT_SIGPENDING", err) < 0 ||
	    set_limit(RLIMIT_MEMLOCK, MEMLOCK_LIMIT, "RLIMIT_MEMLOCK", err) < 0)
		return -1;
	if (!fallback)
		return 0;
	/* Weaker than a cgroup (per process, address space rather than memory,
	 * CPU time rather than quota), which is why it is opt-in and reported. */
	if (set_limit(RLIMIT_CPU, l->script_seconds, "RLIMIT_CPU", err) < 0 ||
	    set_limit(RLIMIT_NPROC, l->pids, "RLIMIT_NPROC", err) < 0)
		return -1;
	return 0;
}

int sbx_rlimit_address_space(const Sbx__V1__Limits *l, struct sbx_err *err)
{
	return set_limit(RLIMIT_AS, (rlim_t)l->memory_mb << 20, "RLIMIT_AS", err);
}
