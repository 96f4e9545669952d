/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox's seccomp filter (DESIGN.md, Invariant 4).
 *
 * Default action ALLOW: the sandbox already has no capabilities and
 * no_new_privs, so most of what it could ask the kernel for is refused by the
 * kernel's own permission checks. The filter is the second wall: it removes
 * whole kernel interfaces that are reachable WITHOUT capabilities in a user
 * namespace (namespaces, io_uring, userfaultfd, keyrings, TIOCSTI, exotic
 * socket families...) or that would be catastrophic if a capability check
 * were ever bypassed (modules, kexec, mount). Each group says which escape
 * route it closes.
 *
 * Architectures: the filter holds only the native ABI (x86_64, or aarch64 on
 * arm64 hosts). Any syscall made through another ABI the kernel can run
 * (i386 via int 0x80 / sysenter, x32 = nr | 0x40000000, arm32 on arm64) hits
 * the bad-arch action, KILL_PROCESS: none of the rules below would apply to
 * those numbers, so the only safe answer is to refuse the whole ABI.
 * libseccomp's x86_64 filter sends x32 numbers to the bad-arch action as long
 * as SCMP_ARCH_X32 is not added (checked by `sbx-probe x32`). */
#include "syscall_filter.h"

#include "util.h"

#include <errno.h>
#include <linux/ioprio.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

/* Denied with EPERM whatever the arguments. The filter is built from this
 * list, so it is also the documentation tests iterate over. */
const char *const sbx_seccomp_denied[] = {
    /* Namespaces: joining another namespace (setns on an inherited or
     * /proc-reachable ns fd) is how a process walks out of its sandbox;
     * creating namespaces is handled by the clone/unshare rules below. */
    "setns",

    /* Mounts: rearranging the mount tree could uncover what the sandbox's
     * pivot_root hid, remount /data or the image writable, or stack a
     * filesystem over what sbx relies on. Includes the new mount API
     * (fsopen..mount_setattr), which reaches the same code by other doors. */
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",

    /* Other processes' memory: ptrace and its relatives read or write
     * another process's memory and registers (or compare its kernel
     * objects, kcmp; or steal its fds, pidfd_getfd), the classic way to
     * take over a more privileged neighbour. */
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",

    /* Kernel keyrings are not namespaced: keys (and a long history of
     * refcount bugs) are shared with the host user. */
    "keyctl",
    "add_key",
    "request_key",

    /* Large, frequently exploited kernel attack surface reachable without
     * capabilities (or with capabilities in a user namespace): eBPF
     * verifier, perf events (also a side channel), userfaultfd (turns
     * kernel races into reliable exploits), io_uring (bypasses seccomp for
     * the operations it performs, and is the top source of kernel LPEs). */
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",

    /* Native AIO: io_setup reserves slots of fs.aio-nr, one pool for the
     * whole host (fs.aio-max-nr, 65536 by default) kept until the context is
     * destroyed or the process exits: one call took half of it, two take all
     * that databases and qemu's aio=native need. No user namespace or cgroup
     * bounds it. EPERM like io_uring, for the same reason: a program with a
     * fallback (libaio users, glibc's POSIX AIO is threads anyway) takes it
     * on any error, and one answer for both async interfaces says "refused
     * by policy", not "this kernel lacks it". The rest of the family goes
     * too, so no context can be used however it was obtained. */
    "io_setup",
    "io_destroy",
    "io_submit",
    "io_cancel",
    "io_getevents",
    "io_pgetevents",

    /* Replacing the running kernel or loading code into it. */
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",

    /* Host-global state that is not namespaced: swap, power, the system
     * clock (time namespaces only offset monotonic/boottime), process
     * accounting, quotas, the kernel log. */
    "swapon",
    "swapoff",
    "reboot",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "acct",
    "quotactl",
    "quotactl_fd",
    "syslog",

    /* File handles: open_by_handle_at opens any inode of a filesystem by
     * its handle, bypassing the path walk, i.e. past the sandbox's root
     * ("shocker"); name_to_handle_at mints the handles. */
    "name_to_handle_at",
    "open_by_handle_at",

    /* Obsolete or host-level interfaces nothing in a sandbox needs: terminal
     * hangup of the controlling tty, a.out loading, filesystem
     * enumeration, raw I/O port access, the profiler cookie lookup, the
     * removed NFS server interface, and fanotify (watches whole mounts;
     * permission events can stall other processes). */
    "vhangup",
    "uselib",
    "ustat",
    "sysfs",
    "iopl",
    "ioperm",
    "lookup_dcookie",
    "nfsservctl",
    "fanotify_init",

    NULL,
};

const char *const sbx_seccomp_conditional[] = {
    "clone",
    "unshare",
    "clone3",
    "ioctl",
    "socket",
    "socketpair",
    "personality",
    "prlimit64",
    "sched_setaffinity",
    "sched_setscheduler",
    "sched_setparam",
    "sched_setattr",
    "setpriority",
    "ioprio_set",
    NULL,
};

/* Syscalls newer than the libseccomp this was written against (2.5.4), with
 * their number in the unified table (>= 424, identical on x86_64 and aarch64).
 * Used only when libseccomp cannot name them, so that an old libseccomp on a
 * new kernel does not leave them open. */
static const struct {
	const char *name;
	int nr;
} newer_denied[] = {
    /* open_tree with mount attributes (Linux 6.15): the mount API again. */
    {"open_tree_attr", 467},
};

/* The namespace-creating flags. */
static const uint64_t ns_flags[] = {
    CLONE_NEWNS,  CLONE_NEWUSER, CLONE_NEWPID,	  CLONE_NEWNET,
    CLONE_NEWIPC, CLONE_NEWUTS,	 CLONE_NEWCGROUP, CLONE_NEWTIME,
};

static void seccomp_releasep(scmp_filter_ctx *ctx)
{
	if (*ctx)
		seccomp_release(*ctx);
}

static int native_arch_uses_unified_table(void)
{
	uint32_t arch = seccomp_arch_native();
	return arch == SCMP_ARCH_X86_64 || arch == SCMP_ARCH_AARCH64;
}

/* Adds one rule for a syscall known by name. A name libseccomp cannot
 * resolve (__NR_SCMP_ERROR), or that does not exist on the native arch
 * (libseccomp then returns a negative pseudo-number), has nothing to deny:
 * it is skipped so the filter builds with every libseccomp version. */
static int add_rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned int n,
		    const struct scmp_arg_cmp *cmp, struct sbx_err *err)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR || nr < 0)
		return 0;
	int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
	if (rc < 0)
		return sbx_fail_errnum(err, -rc, "seccomp rule for %s", name);
	return 0;
}

/* Deny `name` with `action` whenever any namespace flag is set in arg0: one
 * rule per flag (rules for one syscall are OR-ed). MASKED_EQ compares only
 * the masked bits, so setting high bits in the 64-bit register changes
 * nothing. */
static int add_ns_flag_rules(scmp_filter_ctx ctx, const char *name, uint64_t skip,
			     struct sbx_err *err)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(ns_flags); i++) {
		if (ns_flags[i] & skip)
			continue;
		struct scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]);
		if (add_rule(ctx, SCMP_ACT_ERRNO(EPERM), name, 1, &cmp, err) < 0)
			return -1;
	}
	return 0;
}

/* Deny socket families other than AF_UNIX, AF_INET, AF_INET6 (arg0). */
static int add_family_rules(scmp_filter_ctx ctx, const char *name, struct sbx_err *err)
{
	const uint32_t action = SCMP_ACT_ERRNO(EAFNOSUPPORT);
	for (uint64_t family = 0; family < AF_INET6; family++) {
		if (family == AF_UNIX || family == AF_INET)
			continue;
		struct scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_EQ, family, 0);
		if (add_rule(ctx, action, name, 1, &cmp, err) < 0)
			return -1;
	}
	struct scmp_arg_cmp above = SCMP_A0(SCMP_CMP_GT, AF_INET6, 0);
	return add_rule(ctx, action, name, 1, &above, err);
}

/* Another process's limits and scheduling. The kernel lets a process change
 * them for any process of the same uid it can see, and in an exec the
 * command sees one such process that is not its own: exec init, pid 1 of
 * the exec's pid namespace, whose end is what reports the command's. A
 * command that lowered exec init's RLIMIT_CPU and made it busy (forwarded
 * signals) had the kernel kill it, and its exec end was forged as sbx's own
 * failure; scheduling and I/O priority would starve it.
 *   prlimit64: only on the caller itself (pid 0, what glibc's
 *   getrlimit/setrlimit and python's resource module send); a 64-bit
 *   compare, so any bit set is refused, including values the kernel would
 *   read as 0 (refusing those costs nothing).
 *   sched_set*, setpriority, ioprio_set: not on pid 1, which is exec init in
 *   every exec (a thread's own tid, what pthread_setaffinity_np and
 *   pthread_setschedparam send, stays allowed); setpriority and ioprio_set
 *   also not "every process of a user", which includes exec init. The kernel
 *   reads these arguments as 32-bit ints: only the low 32 bits are compared. */
static int add_other_process_rules(scmp_filter_ctx ctx, struct sbx_err *err)
{
	const uint32_t deny = SCMP_ACT_ERRNO(EPERM);
	struct scmp_arg_cmp not_self = SCMP_A0(SCMP_CMP_NE, 0, 0);
	if (add_rule(ctx, deny, "prlimit64", 1, &not_self, err) < 0)
		return -1;
	static const char *const sched[] = {"sched_setaffinity", "sched_setscheduler",
					    "sched_setparam", "sched_setattr"};
	struct scmp_arg_cmp pid1 = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, 1);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(sched); i++)
		if (add_rule(ctx, deny, sched[i], 1, &pid1, err) < 0)
			return -1;
	static const struct {
		const char *name;
		uint64_t by_user;
	} prio[] = {{"setpriority", PRIO_USER}, {"ioprio_set", IOPRIO_WHO_USER}};
	struct scmp_arg_cmp who1 = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, 1);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(prio); i++) {
		struct scmp_arg_cmp user =
		    SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, prio[i].by_user);
		if (add_rule(ctx, deny, prio[i].name, 1, &who1, err) < 0 ||
		    add_rule(ctx, deny, prio[i].name, 1, &user, err) < 0)
			return -1;
	}
	return 0;
}

static scmp_filter_ctx build(enum sbx_filter_shape shape, struct sbx_err *err)
{
	_cleanup_(seccomp_releasep) scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx) {
		sbx_fail(err, "seccomp_init failed");
		return NULL;
	}

	/* Foreign ABIs (i386, x32, arm32) kill the whole process. */
	int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (rc < 0) {
		sbx_fail_errnum(err, -rc, "seccomp bad-arch action KILL_PROCESS");
		return NULL;
	}
	/* Report the kernel's errno from seccomp_load, not a generic ECANCELED. */
	rc = seccomp_attr_set(ctx, SCMP_FLTATR_API_SYSRAWRC, 1);
	if (rc < 0) {
		sbx_fail_errnum(err, -rc, "seccomp attribute SYSRAWRC");
		return NULL;
	}

	/* Syscall numbers tested as a binary tree rather than in a list: the
	 * same decisions, and the kernel takes the filter in half the time
	 * (0.09 against 0.18 ms here, once per exec init) although it is 20
	 * instructions longer. Consistent with where a load's time goes: the
	 * kernel emulates the filter for every syscall number of both ABIs to
	 * cache the ones always allowed, and a walk down the tree is about
	 * ten tests where the list was up to a hundred. */
	if (shape == SBX_FILTER_TREE) {
		rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
		if (rc < 0) {
			sbx_fail_errnum(err, -rc, "seccomp attribute OPTIMIZE (binary tree)");
			return NULL;
		}
	}

	for (const char *const *name = sbx_seccomp_denied; *name; name++)
		if (add_rule(ctx, SCMP_ACT_ERRNO(EPERM), *name, 0, NULL, err) < 0)
			return NULL;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(newer_denied); i++) {
		if (seccomp_syscall_resolve_name(newer_denied[i].name) != __NR_SCMP_ERROR) {
			if (add_rule(ctx, SCMP_ACT_ERRNO(EPERM), newer_denied[i].name, 0, NULL,
				     err) < 0)
				return NULL;
			continue;
		}
		if (!native_arch_uses_unified_table())
			continue;
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), newer_denied[i].nr, 0);
		if (rc < 0) {
			sbx_fail_errnum(err, -rc, "seccomp rule for %s (%d)", newer_denied[i].name,
					newer_denied[i].nr);
			return NULL;
		}
	}

	/* New namespaces: a user namespace hands the sandbox a fresh full set
	 * of capabilities over new namespaces, which reopens every
	 * capability-gated attack surface (mount, netfilter, ...), and the
	 * sandbox's namespaces are what keep it apart from the host. Threads
	 * and fork (clone without namespace flags) stay allowed. clone() reads
	 * the low byte of its flags as the exit signal, so CLONE_NEWTIME
	 * (0x80) cannot be asked for through clone (only unshare/clone3):
	 * not matched there. */
	if (add_ns_flag_rules(ctx, "unshare", 0, err) < 0)
		return NULL;
	if (add_ns_flag_rules(ctx, "clone", CLONE_NEWTIME, err) < 0)
		return NULL;
	/* clone3 takes its flags in a struct in memory, which a filter cannot
	 * read: refuse it entirely with ENOSYS, which makes glibc (and other
	 * runtimes) fall back to clone, where the rules above apply. */
	if (add_rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL, err) < 0)
		return NULL;

	/* Terminal injection: TIOCSTI pushes characters into a terminal's input
	 * queue, i.e. types commands into the shell that started the sandbox
	 * if it shares a tty; TIOCLINUX can paste the console selection the
	 * same way. The kernel reads the request as 32 bits, so only the low 32
	 * bits are compared (TIOCSTI | 1 << 32 is still TIOCSTI). */
	static const uint64_t bad_ioctls[] = {TIOCSTI, TIOCLINUX};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad_ioctls); i++) {
		struct scmp_arg_cmp cmp = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, bad_ioctls[i]);
		if (add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", 1, &cmp, err) < 0)
			return NULL;
	}

	/* Socket families: only unix, IPv4 and IPv6. The others (netlink,
	 * packet, vsock, AF_ALG, bluetooth, ...) are either host-facing
	 * interfaces or rarely used protocol code with a history of kernel
	 * bugs, and creating one can autoload its module. libseccomp (2.5)
	 * refuses two comparisons of one argument in a rule, so "not one of
	 * the three" is spelled as the union of what lies outside them:
	 * == each value below AF_INET6 that is not allowed, and > AF_INET6
	 * (which also catches negative and high-bit values). */
	if (add_family_rules(ctx, "socket", err) < 0 ||
	    add_family_rules(ctx, "socketpair", err) < 0)
		return NULL;

	/* personality: ADDR_NO_RANDOMIZE turns off ASLR for what the sandbox
	 * execs next, other flags change how the kernel interprets the process
	 * (READ_IMPLIES_EXEC, compat layouts). Only setting the default (0,
	 * PER_LINUX) and querying (0xffffffff) are allowed. The kernel reads
	 * the argument as 32 bits. A 32-bit value other than all-zeros and
	 * all-ones has, somewhere, a set bit whose (cyclic) next bit is clear,
	 * so the denied set is the union over i of "bit i set, bit i+1 clear",
	 * one masked rule each (for the same one-comparison-per-argument
	 * reason as above). */
	for (unsigned int i = 0; i < 32; i++) {
		uint64_t bit = UINT64_C(1) << i, next = UINT64_C(1) << ((i + 1) % 32);
		struct scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, bit | next, bit);
		if (add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "personality", 1, &cmp, err) < 0)
			return NULL;
	}

	if (add_other_process_rules(ctx, err) < 0)
		return NULL;

	return sbx_steal_ptr(ctx);
}

int sbx_seccomp_install(struct sbx_err *err)
{
	_cleanup_(seccomp_releasep) scmp_filter_ctx ctx = build(SBX_FILTER_TREE, err);
	if (!ctx)
		return sbx_err_prefix(err, "seccomp filter");
	int rc = seccomp_load(ctx);
	if (rc < 0)
		return sbx_fail_errnum(err, -rc, "seccomp_load");
	return 0;
}

int sbx_seccomp_export_bpf(int fd, struct sbx_err *err)
{
	return sbx_seccomp_export_bpf_shaped(fd, SBX_FILTER_TREE, err);
}

int sbx_seccomp_export_bpf_shaped(int fd, enum sbx_filter_shape shape, struct sbx_err *err)
{
	_cleanup_(seccomp_releasep) scmp_filter_ctx ctx = build(shape, err);
	if (!ctx)
		return sbx_err_prefix(err, "seccomp filter");
	int rc = seccomp_export_bpf(ctx, fd);
	if (rc < 0)
		return sbx_fail_errnum(err, -rc, "seccomp_export_bpf");
	return 0;
}

int sbx_seccomp_export_pfc(int fd, struct sbx_err *err)
{
	_cleanup_(seccomp_releasep) scmp_filter_ctx ctx = build(SBX_FILTER_TREE, err);
	if (!ctx)
		return sbx_err_prefix(err, "seccomp filter");
	int rc = seccomp_export_pfc(ctx, fd);
	if (rc < 0)
		return sbx_fail_errnum(err, -rc, "seccomp_export_pfc");
	return 0;
}

int sbx_seccomp_read_bpf(int fd, struct sock_fprog *prog, struct sbx_err *err)
{
	/* Bounded: the filter is a few hundred instructions; BPF allows 4096. */
	size_t cap = 4096 * sizeof(struct sock_filter), len = 0;
	_cleanup_free_ struct sock_filter *insns = malloc(cap);
	if (!insns)
		return sbx_fail_errno(err, "seccomp filter");
	for (;;) {
		ssize_t n = read(fd, (char *)insns + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_fail_errno(err, "reading the seccomp filter");
		if (n == 0)
			break;
		len += (size_t)n;
		if (len == cap)
			return sbx_fail(err, "seccomp filter larger than BPF allows");
	}
	if (len == 0 || len % sizeof(struct sock_filter))
		return sbx_fail(err, "seccomp filter: got %zu bytes, not a whole program", len);
	prog->len = (unsigned short)(len / sizeof(struct sock_filter));
	prog->filter = sbx_steal_ptr(insns);
	return 0;
}

int sbx_seccomp_load_bpf(const struct sock_fprog *prog, struct sbx_err *err)
{
	/* What seccomp_load does for this filter: no flags (no TSYNC, no
	 * log), and no_new_privs is already set by the caller. */
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog) < 0)
		return sbx_fail_errno(err, "loading the seccomp filter");
	return 0;
}
