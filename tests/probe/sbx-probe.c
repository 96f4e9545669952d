/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-probe: attempts one sandbox escape and says whether it worked.
 *
 *   sbx-probe ATTACK [PATH]
 *
 * prints exactly one line and exits:
 *   BLOCKED <ERRNAME>   0   the attempt failed with that errno
 *   KILLED SIGSYS       0   (i386, x32) the attempt killed the process
 *   ALLOWED <detail>    1   the attempt succeeded: the sandbox has a hole
 *   SKIPPED <why>       77  (i386, x32) the ABI cannot be tried on this kernel
 *   OK / BROKEN <what>  0/1 (allowed-baseline) things that must keep working
 *   usage on stderr     2
 *
 * The probe is copied into a sandbox's /data and run there against the
 * image's (the host's) libc, so it uses nothing but libc. It does not know
 * why an attempt failed: the tests compare the errno with the one the
 * seccomp filter returns (EPERM, ENOSYS for clone3, EAFNOSUPPORT for socket
 * families). Where success would change the machine (kexec, init-module,
 * pivot-root), the call is made with an argument the kernel rejects only
 * AFTER its permission check: a non-EPERM error then proves the syscall got
 * through (reported as ALLOWED), and nothing changes either way. Run it only
 * inside a sandbox or a throwaway namespace: mount, umount and remount-ro
 * really try. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/tiocl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef KEXEC_ARCH_386
#define KEXEC_ARCH_386 (3 << 16)
#endif
/* Syscall numbers of the unified table (same on x86_64 and aarch64), for
 * libc headers older than the syscall. */
#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif

extern char **environ;

/* ctest's and automake's "skipped" exit status (SKIP_RETURN_CODE 77). */
enum { EXIT_SKIPPED = 77 };

static const char *errname(int e)
{
	static char buf[32];
	const char *name = strerrorname_np(e);
	if (name)
		return name;
	snprintf(buf, sizeof(buf), "E%d", e);
	return buf;
}

static int blocked(int e)
{
	printf("BLOCKED %s\n", errname(e));
	return 0;
}

__attribute__((format(printf, 1, 2))) static int allowed(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("ALLOWED ", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	return 1;
}

/* For calls made with an argument the kernel rejects after its permission
 * check: EPERM/EACCES (refused) and ENOSYS (not there) are blocked, any other
 * outcome means the call got through. */
static int reached(const char *what, long rc)
{
	int e = errno;
	if (rc >= 0)
		return allowed("%s succeeded", what);
	if (e == EPERM || e == EACCES || e == ENOSYS)
		return blocked(e);
	return allowed("%s reached the kernel past its permission check (%s)", what, errname(e));
}

static void kill_and_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* A child that waits to be attacked; dies with its parent's test. */
static pid_t spawn_sleeper(void)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		for (;;)
			pause();
	}
	return pid;
}

/* Runs fn in a child; the child sends back an int (0 = success, else errno). */
static int in_child(int (*fn)(void), int *result)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		close(p[0]);
		int r = fn();
		if (write(p[1], &r, sizeof(r)) != sizeof(r))
			_exit(3);
		_exit(0);
	}
	close(p[1]);
	ssize_t n;
	while ((n = read(p[0], result, sizeof(*result))) < 0 && errno == EINTR)
		;
	close(p[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (n != sizeof(*result)) {
		errno = EPIPE;
		return -1;
	}
	return 0;
}

/* ---- mounts ---------------------------------------------------------- */

static int a_mount(const char *path)
{
	path = path ? path : "/tmp";
	if (mount("sbx-probe", path, "tmpfs", 0, "size=1m") < 0)
		return blocked(errno);
	umount2(path, MNT_DETACH);
	return allowed("mounted a tmpfs on %s", path);
}

static int a_umount(const char *path)
{
	path = path ? path : "/data";
	if (umount2(path, MNT_DETACH) < 0)
		return blocked(errno);
	return allowed("unmounted %s", path);
}

static int a_remount_ro(const char *path)
{
	path = path ? path : "/data";
	/* A bind remount without MS_RDONLY makes the mount read-write. */
	if (mount(NULL, path, NULL, MS_REMOUNT | MS_BIND, NULL) < 0)
		return blocked(errno);
	return allowed("remounted %s read-write", path);
}

static int a_chroot(const char *path)
{
	path = path ? path : "/";
	if (chroot(path) < 0)
		return blocked(errno);
	return allowed("chroot(%s) succeeded", path);
}

static int a_pivot_root(const char *path)
{
	/* new_root does not exist: ENOENT comes only after may_mount(). */
	long rc = syscall(SYS_pivot_root, "/nonexistent-sbx-probe", "/nonexistent-sbx-probe");
	return reached("pivot_root", rc);
}

static int a_open_by_handle(const char *path)
{
	path = path ? path : "/";
	union {
		struct file_handle fh;
		char buf[sizeof(struct file_handle) + MAX_HANDLE_SZ];
	} h;
	h.fh.handle_bytes = MAX_HANDLE_SZ;
	int mount_id;
	if (name_to_handle_at(AT_FDCWD, path, &h.fh, &mount_id, 0) < 0)
		return blocked(errno);
	int mfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int fd = mfd < 0 ? -1 : open_by_handle_at(mfd, &h.fh, O_RDONLY | O_CLOEXEC);
	int e = errno;
	if (fd >= 0)
		return allowed("name_to_handle_at and open_by_handle_at opened %s", path);
	return allowed("name_to_handle_at(%s) succeeded (open_by_handle_at: %s)", path, errname(e));
}

/* ---- namespaces ------------------------------------------------------ */

static int try_unshare(int flag, const char *name)
{
	if (unshare(flag) < 0)
		return blocked(errno);
	return allowed("unshare(%s) succeeded", name);
}

static int a_unshare_user(const char *path)
{
	return try_unshare(CLONE_NEWUSER, "CLONE_NEWUSER");
}
static int a_unshare_mnt(const char *path)
{
	return try_unshare(CLONE_NEWNS, "CLONE_NEWNS");
}
static int a_unshare_net(const char *path)
{
	return try_unshare(CLONE_NEWNET, "CLONE_NEWNET");
}

static int a_clone_newuser(const char *path)
{
	fflush(stdout);
	long pid = syscall(SYS_clone, (unsigned long)(CLONE_NEWUSER | SIGCHLD), 0, NULL, NULL, 0);
	if (pid < 0)
		return blocked(errno);
	if (pid == 0)
		_exit(0);
	waitpid((pid_t)pid, NULL, 0);
	return allowed("clone(CLONE_NEWUSER) created pid %ld", pid);
}

/* struct clone_args, version 0 (64 bytes), without <linux/sched.h>, whose
 * CLONE_ macros clash with glibc's. */
struct probe_clone_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

static int a_clone3(const char *path)
{
	struct probe_clone_args args = {.flags = CLONE_NEWUSER, .exit_signal = SIGCHLD};
	fflush(stdout);
	long pid = syscall(SYS_clone3, &args, sizeof(args));
	if (pid < 0)
		return blocked(errno);
	if (pid == 0)
		_exit(0);
	waitpid((pid_t)pid, NULL, 0);
	return allowed("clone3(CLONE_NEWUSER) created pid %ld", pid);
}

static int a_setns(const char *path)
{
	int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return blocked(errno);
	if (setns(fd, CLONE_NEWNS) < 0)
		return blocked(errno);
	return allowed("setns(/proc/self/ns/mnt) succeeded");
}

/* ---- other processes ------------------------------------------------- */

static int a_ptrace(const char *path)
{
	pid_t pid = spawn_sleeper();
	if (pid < 0)
		return blocked(errno);
	long rc = ptrace(PTRACE_ATTACH, pid, NULL, NULL);
	int e = errno;
	kill_and_reap(pid);
	if (rc < 0)
		return blocked(e);
	return allowed("PTRACE_ATTACH to child %d succeeded", (int)pid);
}

static int traceme(void)
{
	return ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0 ? errno : 0;
}

static int a_ptrace_traceme(const char *path)
{
	int r;
	if (in_child(traceme, &r) < 0)
		return blocked(errno);
	if (r)
		return blocked(r);
	return allowed("PTRACE_TRACEME succeeded");
}

static char probe_secret[] = "sbx-probe-secret";

static int a_process_vm_readv(const char *path)
{
	pid_t pid = spawn_sleeper();
	if (pid < 0)
		return blocked(errno);
	char buf[sizeof(probe_secret)];
	struct iovec local = {buf, sizeof(buf)};
	struct iovec remote = {probe_secret, sizeof(probe_secret)};
	ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
	int e = errno;
	kill_and_reap(pid);
	if (n < 0)
		return blocked(e);
	return allowed("process_vm_readv read %zd bytes of child %d", n, (int)pid);
}

/* ---- kernel interfaces ----------------------------------------------- */

static int a_keyctl(const char *path)
{
	long key = syscall(SYS_add_key, "user", "sbx-probe", "x", (size_t)1,
			   (long)KEY_SPEC_PROCESS_KEYRING);
	if (key < 0)
		return blocked(errno);
	return allowed("add_key created key %ld", key);
}

static int a_bpf(const char *path)
{
	struct bpf_insn insns[] = {
	    {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0},
	    {.code = BPF_JMP | BPF_EXIT},
	};
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
	attr.insn_cnt = sizeof(insns) / sizeof(insns[0]);
	attr.insns = (uint64_t)(uintptr_t)insns;
	attr.license = (uint64_t)(uintptr_t) "GPL";
	long fd = syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof(attr));
	if (fd < 0)
		return blocked(errno);
	return allowed("bpf(BPF_PROG_LOAD) returned fd %ld", fd);
}

static int a_perf(const char *path)
{
	struct perf_event_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.type = PERF_TYPE_SOFTWARE;
	attr.size = sizeof(attr);
	attr.config = PERF_COUNT_SW_CPU_CLOCK;
	attr.disabled = 1;
	attr.exclude_kernel = 1;
	attr.exclude_hv = 1;
	long fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return blocked(errno);
	return allowed("perf_event_open(cpu-clock) returned fd %ld", fd);
}

static int a_userfaultfd(const char *path)
{
	long fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (fd < 0)
		return blocked(errno);
	return allowed("userfaultfd returned fd %ld", fd);
}

static int a_io_uring(const char *path)
{
	/* struct io_uring_params is 120 bytes, zero = defaults; a zeroed
	 * buffer avoids <linux/io_uring.h> (which clashes with <sys/mount.h>
	 * on some libcs). */
	uint64_t params[16];
	memset(params, 0, sizeof(params));
	long fd = syscall(SYS_io_uring_setup, 1, params);
	if (fd < 0)
		return blocked(errno);
	return allowed("io_uring_setup returned fd %ld", fd);
}

static int a_io_setup(const char *path)
{
	/* Half of the default fs.aio-max-nr: allowed, the context holds that
	 * share of the host-wide pool until this process exits. */
	unsigned long ctx = 0;
	long rc = syscall(SYS_io_setup, 32768, &ctx);
	if (rc < 0)
		return blocked(errno);
	return allowed("io_setup(32768) returned context %#lx", ctx);
}

static int a_kexec(const char *path)
{
	/* A foreign architecture in flags: EINVAL only after the
	 * CAP_SYS_BOOT check, and nothing is loaded or unloaded. */
	long rc = syscall(SYS_kexec_load, 0UL, 0UL, NULL, (unsigned long)KEXEC_ARCH_386);
	return reached("kexec_load", rc);
}

static int a_init_module(const char *path)
{
	/* An empty image: ENOEXEC only after the CAP_SYS_MODULE check. */
	long rc = syscall(SYS_init_module, NULL, 0UL, "");
	return reached("init_module", rc);
}

static int a_personality(const char *path)
{
	int old = personality(ADDR_NO_RANDOMIZE);
	if (old < 0)
		return blocked(errno);
	personality((unsigned long)old);
	return allowed("personality(ADDR_NO_RANDOMIZE) succeeded");
}

static int a_socket_netlink(const char *path)
{
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0 /* NETLINK_ROUTE */);
	if (fd < 0)
		return blocked(errno);
	return allowed("socket(AF_NETLINK) returned fd %d", fd);
}

static int a_socket_packet(const char *path)
{
	int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
	if (fd < 0)
		return blocked(errno);
	return allowed("socket(AF_PACKET) returned fd %d", fd);
}

/* ---- terminals ------------------------------------------------------- */

static unsigned long tty_request;
static int tty_use_raw; /* request passed through syscall() with high bits */

static int tty_ioctl(int fd)
{
	char c = ' ';
	if (tty_request == TIOCLINUX)
		c = TIOCL_GETSHIFTSTATE; /* harmless subcode: any success is a hole */
	long rc = tty_use_raw ? syscall(SYS_ioctl, fd, tty_request | 0x100000000UL, &c)
			      : ioctl(fd, tty_request, &c);
	return rc < 0 ? errno : 0;
}

/* In a child: a new session whose controlling terminal is a fresh pty, so
 * TIOCSTI is tried even where the probe has no terminal. */
static int tty_private_pty(void)
{
	if (setsid() < 0)
		return errno;
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0)
		return errno;
	const char *name = ptsname(m);
	if (!name)
		return errno;
	int s = open(name, O_RDWR | O_CLOEXEC); /* becomes the controlling tty */
	if (s < 0)
		return errno;
	return tty_ioctl(s);
}

static int tty_attack(unsigned long request, int raw, int try_pty)
{
	tty_request = request;
	tty_use_raw = raw;
	int last = ENOTTY;
	/* 1: the controlling terminal (the real attack: type into the shell
	 * that started us), 2: stdin, 3: a virtual console (TIOCLINUX only
	 * works there), 4: a private pty. The first success is a hole. */
	int fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (fd >= 0) {
		last = tty_ioctl(fd);
		close(fd);
		if (!last)
			return allowed("ioctl on /dev/tty succeeded");
	}
	last = tty_ioctl(0);
	if (!last)
		return allowed("ioctl on stdin succeeded");
	if (request == TIOCLINUX) {
		fd = open("/dev/tty0", O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (fd >= 0) {
			last = tty_ioctl(fd);
			close(fd);
			if (!last)
				return allowed("ioctl on /dev/tty0 succeeded");
		}
	}
	if (try_pty) {
		int r;
		if (in_child(tty_private_pty, &r) == 0) {
			if (!r)
				return allowed("ioctl on a private pty succeeded");
			last = r;
		}
	}
	return blocked(last);
}

static int a_tiocsti(const char *path)
{
	return tty_attack(TIOCSTI, 0, 1);
}
static int a_tiocsti_highbits(const char *path)
{
	return tty_attack(TIOCSTI, 1, 1);
}
static int a_tioclinux(const char *path)
{
	return tty_attack(TIOCLINUX, 0, 0);
}

/* ---- foreign syscall ABIs -------------------------------------------- */

#ifdef __x86_64__
static int foreign_abi(long (*fn)(void), const char *what, int skip_on_segv)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return blocked(errno);
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return blocked(errno);
	if (pid == 0) {
		/* No core file from the expected SIGSYS. */
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
		prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
		close(p[0]);
		long r[2];
		errno = 0;
		r[0] = fn();
		r[1] = errno;
		if (write(p[1], r, sizeof(r)) != sizeof(r))
			_exit(3);
		_exit(0);
	}
	close(p[1]);
	long r[2];
	ssize_t n;
	while ((n = read(p[0], r, sizeof(r))) < 0 && errno == EINTR)
		;
	close(p[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) {
		puts("KILLED SIGSYS");
		return 0;
	}
	if (skip_on_segv && WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) {
		/* The kernel refused the entry itself (ia32 emulation off, or a
		 * paravirtualized kernel without int $0x80): no syscall ran, and
		 * the filter cannot be tested here. */
		printf("SKIPPED %s: the kernel raised SIGSEGV (ABI unavailable)\n", what);
		return EXIT_SKIPPED;
	}
	if (WIFSIGNALED(status)) {
		const char *sig = sigabbrev_np(WTERMSIG(status));
		return allowed("%s: child died by SIG%s, not by seccomp", what, sig ? sig : "?");
	}
	if (n != sizeof(r))
		return allowed("%s: child exited with status %d", what, WEXITSTATUS(status));
	if (r[0] == -1)
		return allowed("%s returned -1 %s (not killed)", what, errname((int)r[1]));
	return allowed("%s returned %ld (child pid %d)", what, r[0], (int)pid);
}

static long int80_getpid(void)
{
	long ret;
	/* eax = 20: getpid in the i386 table. */
	__asm__ volatile("int $0x80"
			 : "=a"(ret)
			 : "a"(20L)
			 : "r8", "r9", "r10", "r11", "memory", "cc");
	if (ret < 0 && ret > -4096) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}

static long x32_getpid(void)
{
	return syscall(39 | 0x40000000L); /* __X32_SYSCALL_BIT | getpid */
}

static int a_i386(const char *path)
{
	return foreign_abi(int80_getpid, "int $0x80 getpid", 1);
}
static int a_x32(const char *path)
{
	return foreign_abi(x32_getpid, "x32 getpid", 0);
}
#else
static int a_i386(const char *path)
{
	puts("SKIPPED not x86_64");
	return EXIT_SKIPPED;
}
static int a_x32(const char *path)
{
	puts("SKIPPED not x86_64");
	return EXIT_SKIPPED;
}
#endif

/* ---- state ----------------------------------------------------------- */

static int a_caps(const char *path)
{
	static const char *const keys[] = {
	    "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp",
	};
	enum { NKEYS = sizeof(keys) / sizeof(keys[0]) };
	char lines[NKEYS][256];
	int found[NKEYS] = {0};
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return blocked(errno);
	char line[256];
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		for (size_t i = 0; i < NKEYS; i++) {
			size_t kl = strlen(keys[i]);
			if (!strncmp(line, keys[i], kl) && line[kl] == ':') {
				snprintf(lines[i], sizeof(lines[i]), "%s", line);
				found[i] = 1;
			}
		}
	}
	fclose(f);
	int ok = 1;
	for (size_t i = 0; i < NKEYS; i++) {
		if (!found[i]) {
			ok = 0;
			snprintf(lines[i], sizeof(lines[i]), "%s: missing", keys[i]);
			continue;
		}
		const char *v = lines[i] + strlen(keys[i]) + 1;
		char *end;
		unsigned long long n = strtoull(v, &end, i < 5 ? 16 : 10);
		unsigned long long want = i < 5 ? 0 : i == 5 ? 1 : 2;
		if (end == v || n != want)
			ok = 0;
	}
	if (ok) {
		puts("BLOCKED CAPS_ZERO");
		return 0;
	}
	fputs("ALLOWED", stdout);
	for (size_t i = 0; i < NKEYS; i++) {
		/* "CapEff:\t0000..." -> "CapEff: 0000..." */
		for (char *c = lines[i]; *c; c++)
			if (*c == '\t')
				*c = ' ';
		printf(" %s%s", lines[i], i + 1 < NKEYS ? ";" : "");
	}
	putchar('\n');
	return 1;
}

/* ---- what must keep working ------------------------------------------ */

static void *thread_fn(void *arg)
{
	return arg;
}

static int broken(const char *what, int e)
{
	printf("BROKEN %s: %s\n", what, errname(e));
	return 1;
}

static int a_allowed_baseline(const char *path)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return broken("fork", errno);
	if (pid == 0)
		_exit(42);
	int status;
	if (waitpid(pid, &status, 0) < 0)
		return broken("waitpid", errno);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 42)
		return broken("fork child status", 0);

	pid = vfork();
	if (pid < 0)
		return broken("vfork", errno);
	if (pid == 0)
		_exit(43);
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 43)
		return broken("vfork child status", errno);

	/* posix_spawn: clone3 first, clone(CLONE_VM|CLONE_VFORK) on ENOSYS. */
	char *spawn_argv[] = {"sbx-probe", "--noop", NULL};
	int e = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, spawn_argv, environ);
	if (e)
		return broken("posix_spawn", e);
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return broken("posix_spawn child status", errno);

	/* pthread_create: clone3 first, clone(CLONE_VM|CLONE_THREAD|...) on
	 * ENOSYS. */
	pthread_t t;
	void *ret = NULL;
	int token = 7;
	e = pthread_create(&t, NULL, thread_fn, &token);
	if (e)
		return broken("pthread_create", e);
	e = pthread_join(t, &ret);
	if (e || ret != &token)
		return broken("pthread_join", e);

	static const struct {
		int domain, type;
		const char *name;
	} socks[] = {
	    {AF_INET, SOCK_STREAM, "socket(AF_INET)"},
	    {AF_UNIX, SOCK_STREAM, "socket(AF_UNIX)"},
	};
	for (size_t i = 0; i < sizeof(socks) / sizeof(socks[0]); i++) {
		int fd = socket(socks[i].domain, socks[i].type | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return broken(socks[i].name, errno);
		close(fd);
	}
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return broken("socketpair(AF_UNIX)", errno);

	/* ioctl in general (FIONREAD on a socket) and unshare without
	 * namespace flags stay allowed. */
	int avail = -1;
	if (ioctl(sv[0], FIONREAD, &avail) < 0)
		return broken("ioctl(FIONREAD)", errno);
	close(sv[0]);
	close(sv[1]);
	if (unshare(CLONE_FILES) < 0)
		return broken("unshare(CLONE_FILES)", errno);

	if (personality(0xffffffff) < 0)
		return broken("personality(0xffffffff)", errno);

	/* A process's own limits and scheduling: getrlimit/setrlimit are
	 * prlimit64(0, ...) in glibc; pthread_setaffinity_np names the
	 * thread by its tid. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || setrlimit(RLIMIT_NOFILE, &rl) < 0)
		return broken("getrlimit/setrlimit", errno);
	if (prlimit(0, RLIMIT_CORE, NULL, &rl) < 0)
		return broken("prlimit(0)", errno);
	cpu_set_t cpus;
	if (sched_getaffinity(0, sizeof(cpus), &cpus) < 0 ||
	    sched_setaffinity(0, sizeof(cpus), &cpus) < 0)
		return broken("sched_setaffinity(0)", errno);
	e = pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);
	if (e)
		return broken("pthread_setaffinity_np", e);
	/* Its own nice value, made no lower: a test run under `nice` starts
	 * above 1, and lowering it is EACCES without CAP_SYS_NICE. */
	errno = 0;
	int nice_now = getpriority(PRIO_PROCESS, 0);
	if (nice_now == -1 && errno)
		return broken("getpriority(self)", errno);
	if (setpriority(PRIO_PROCESS, 0, nice_now > 1 ? nice_now : 1) < 0)
		return broken("setpriority(self)", errno);

	puts("OK");
	return 0;
}

/* ---- dispatch -------------------------------------------------------- */

static const struct {
	const char *name;
	int (*fn)(const char *path);
} attacks[] = {
    {"mount", a_mount},
    {"umount", a_umount},
    {"remount-ro", a_remount_ro},
    {"unshare-user", a_unshare_user},
    {"unshare-mnt", a_unshare_mnt},
    {"unshare-net", a_unshare_net},
    {"clone-newuser", a_clone_newuser},
    {"clone3", a_clone3},
    {"setns", a_setns},
    {"ptrace", a_ptrace},
    {"ptrace-traceme", a_ptrace_traceme},
    {"process-vm-readv", a_process_vm_readv},
    {"keyctl", a_keyctl},
    {"bpf", a_bpf},
    {"perf", a_perf},
    {"userfaultfd", a_userfaultfd},
    {"io-uring", a_io_uring},
    {"io-setup", a_io_setup},
    {"tiocsti", a_tiocsti},
    {"tiocsti-highbits", a_tiocsti_highbits},
    {"tioclinux", a_tioclinux},
    {"chroot", a_chroot},
    {"pivot-root", a_pivot_root},
    {"open-by-handle", a_open_by_handle},
    {"kexec", a_kexec},
    {"init-module", a_init_module},
    {"personality", a_personality},
    {"socket-netlink", a_socket_netlink},
    {"socket-packet", a_socket_packet},
    {"i386", a_i386},
    {"x32", a_x32},
    {"caps", a_caps},
    {"allowed-baseline", a_allowed_baseline},
};

static int usage(void)
{
	fputs("usage: sbx-probe ATTACK [PATH]\n       sbx-probe list\nattacks:", stderr);
	for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++)
		fprintf(stderr, " %s", attacks[i].name);
	fputc('\n', stderr);
	return 2;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--noop"))
		return 0;
	if (argc == 2 && !strcmp(argv[1], "list")) {
		for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++)
			puts(attacks[i].name);
		return 0;
	}
	if (argc < 2 || argc > 3)
		return usage();
	for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++) {
		if (!strcmp(argv[1], attacks[i].name)) {
			int rc = attacks[i].fn(argc == 3 ? argv[2] : NULL);
			fflush(stdout);
			return rc;
		}
	}
	return usage();
}
