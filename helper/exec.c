/* SPDX-License-Identifier: Apache-2.0 */
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sched.h> /* struct clone_args, CLONE_INTO_CGROUP */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctlmsg.h"
#include "egress_port.h"
#include "fds.h"
#include "netns.h"
#include "phases.h"
#include "privs.h"
#include "rootfs.h"
#include "sanitized.h"
#include "stack.h"
#include "syscall_filter.h"
#include "util.h"

#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

static volatile sig_atomic_t command_pgid;

/* Exec init is pid 1 of its namespace: signals from the sandbox's pid 1
 * (SignalRequest) reach it only because it handles them; pass them on. */
static void forward_signal(int sig)
{
	/* What the interrupted call says stays its own (the loops that
	 * retry on EINTR read errno after it). */
	int saved = errno;
	if (command_pgid > 0)
		kill(-command_pgid, sig);
	errno = saved;
}

/* The signals a SignalRequest forwards (SBX_FORWARDED_SIGNALS) as a set. */
static void forwarded_set(sigset_t *set)
{
	static const int forwarded[] = {SBX_FORWARDED_SIGNALS};

	sigemptyset(set);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(forwarded); i++)
		sigaddset(set, forwarded[i]);
}

static const char *env_path(const SbxPolicy *p)
{
	for (size_t i = 0; i < p->n_env; i++)
		if (strcmp(p->env[i]->name, "PATH") == 0)
			return p->env[i]->value;
	return DEFAULT_PATH;
}

/* execvp's lookup with the policy's PATH, not ours, done before execve so
 * that nothing runs between the last rlimit and the exec. A name found on
 * the path runs with the full path as argv[0]: with an empty environment
 * there is no PATH for the program to find itself again (python3 would
 * report sys.executable as ""). Returns 0, or the errno that decides
 * between 126 and 127. */
static int resolve_command(const char *name, const char *path, char *full, size_t size)
{
	if (strchr(name, '/')) {
		snprintf(full, size, "%s", name);
		return 0;
	}
	int result = ENOENT;
	for (const char *p = path; *p;) {
		size_t len = strcspn(p, ":");
		if (snprintf(full, size, "%.*s/%s", (int)len, len ? p : ".", name) < (int)size) {
			struct stat st;
			if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
				if (access(full, X_OK) == 0)
					return 0;
				result = EACCES;
			}
		}
		p += len;
		if (*p == ':')
			p++;
	}
	return result;
}

static void report_and_exit(int fd, struct sbx_exec_report *r)
{
	ssize_t n;
	do
		n = write(fd, r, sizeof(*r));
	while (n < 0 && errno == EINTR);
	_exit(0);
}

static void setup_failed(int fd, struct sbx_err *err)
{
	struct sbx_exec_report r = {.kind = SBX_EXEC_SETUP_FAILED};
	snprintf(r.msg, sizeof(r.msg), "%.*s", (int)sizeof(r.msg) - 1, err->msg);
	report_and_exit(fd, &r);
}

/* Puts stdin, stdout, stderr at 0..2 and the error pipe at 3, whatever
 * numbers they had (they may overlap each other and 0..3), then closes the
 * rest. Returns an errno, or 0. */
static int arrange_fds(const int stdio[3], int errpipe)
{
	int high[4];
	for (int i = 0; i < 4; i++) {
		high[i] = fcntl(i < 3 ? stdio[i] : errpipe, F_DUPFD_CLOEXEC, 10);
		if (high[i] < 0)
			return errno;
	}
	for (int i = 0; i < 3; i++)
		if (dup2(high[i], i) < 0)
			return errno;
	if (dup3(high[3], 3, O_CLOEXEC) < 0)
		return errno;
	/* What is left above 3 is close-on-exec (the copies above, and
	 * exec init closed everything else), so a close_range that fails
	 * (Linux < 5.9) lets nothing into the command. */
	close_range(4, ~0U, 0);
	return 0;
}

/* What the command's child writes to fd 3 when it cannot start. */
struct setup_error {
	int errnum;  /* > 0: execve's errno (126/127); < 0: a setup failure */
	bool in_cwd; /* the setup failure was the chdir to the exec's cwd */
};

/* Every handler of the command's child back to the default, by the
 * system call itself: the child shares exec init's memory (CLONE_VM,
 * spawn_command), and a sanitizer's signal() records the handler in a
 * table in that memory, so exec init's own table would say SIG_DFL and
 * its forwarded signals would be dropped. The kernel's sigaction: handler,
 * flags, restorer, mask (8 bytes). */
static void default_handler(int sig)
{
	struct {
		void (*handler)(int);
		unsigned long flags;
		void (*restorer)(void);
		uint64_t mask;
	} dfl = {.handler = SIG_DFL};
	syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof(dfl.mask));
}

static void default_handlers(void)
{
	for (int sig = 1; sig < NSIG; sig++)
		default_handler(sig);
}

/* The child that becomes the command. What goes wrong before execve is
 * written to fd 3 (close-on-exec): a positive errno decides 126 or 127, a
 * negative one is a setup failure. */
static void run_command(const struct sbx_exec_spec *s, char **envp, int errpipe)
{
	sigset_t none;
	sigemptyset(&none);
	default_handlers();
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* A new session: no controlling terminal, so no TIOCSTI into anyone's
	 * (which the seccomp filter refuses as well). setsid fails only for a
	 * process group leader, which a fresh child is not. */
	setsid();
	int e = arrange_fds(s->stdio, errpipe);
	if (e)
		_exit(125); /* no fd 3 to report on: exec init sees status 125 */
	struct sbx_err err;
	/* Here rather than in exec init: the limits must bind the command, not
	 * the process that waits for it. */
	bool fallback = s->cgroup->mode == SBX_CG_NONE;
	if (sbx_rlimits_apply(s->policy->limits, s->nofile, fallback, &err) < 0)
		e = -(err.errnum ? err.errnum : EINVAL);
	bool in_cwd = false;
	if (!e && chdir(s->cwd) < 0) {
		e = -errno;
		in_cwd = true;
	}
	char full[PATH_MAX];
	char **argv = (char **)s->argv;
	if (!e)
		e = resolve_command(argv[0], env_path(s->policy), full, sizeof(full));
	if (!e) {
		argv[0] = full;
		/* The address-space limit goes last, with nothing but execve
		 * after it: a sanitizer runtime cannot live under it. */
		if (fallback && sbx_rlimit_address_space(s->policy->limits, &err) < 0)
			e = -(err.errnum ? err.errnum : EINVAL);
		else {
			sbx_phase_mark(SBX_PHASE_EXECVE);
			execve(full, argv, envp);
		}
		if (!e)
			e = errno;
	}
	struct setup_error why = {.errnum = e, .in_cwd = in_cwd};
	ssize_t n = write(3, &why, sizeof(why));
	(void)n;
	_exit(127);
}

struct command_args {
	const struct sbx_exec_spec *spec;
	char **envp;
	int errpipe;
};

static int command_main(void *arg)
{
	const struct command_args *a = arg;
	run_command(a->spec, a->envp, a->errpipe);
	return 127;
}

/* Under a sanitizer the command is forked (sanitized.h says why: here
 * ThreadSanitizer lost a forwarded signal, and AddressSanitizer's state of
 * exec init broke, a SEGV in its waitpid). */
#define SPAWN_BY_FORK SBX_SANITIZED

/* The command's process shares exec init's memory until its execve
 * (CLONE_VM | CLONE_VFORK, as posix_spawn does), on a stack of its own over
 * a guard (stack.h): no copy of exec init's page tables and no
 * copy-on-write faults, which on a virtual machine cost more than the rest
 * of the spawn. Exec init is suspended meanwhile, with every signal blocked
 * so that none of its handlers runs in the child (run_command resets them
 * before it unblocks). The child has its own files, credentials, limits,
 * cwd and signal handlers (no CLONE_FILES, CLONE_FS, CLONE_SIGHAND,
 * CLONE_THREAD); what it writes to shared memory before execve is only
 * argv[0] (the resolved path), which exec init does not read again (its
 * signal handlers are reset by system call, default_handlers says why). The
 * seccomp filter allows clone without namespace flags, as it does fork. */
static pid_t spawn_command(const struct sbx_exec_spec *s, char **envp, int errpipe)
{
	if (SPAWN_BY_FORK) {
		sigset_t all, old;
		sigfillset(&all);
		sigprocmask(SIG_SETMASK, &all, &old);
		pid_t pid = fork();
		if (pid == 0)
			run_command(s, envp, errpipe); /* does not return */
		int e = errno;
		sigprocmask(SIG_SETMASK, &old, NULL);
		errno = e;
		return pid;
	}
	struct sbx_stack stack;
	if (sbx_stack_map(256 << 10, &stack) < 0)
		return -1;
	struct command_args a = {.spec = s, .envp = envp, .errpipe = errpipe};
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid_t pid = clone(command_main, stack.top, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
	int e = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	/* The stack is left to exec init's exit: unmapping it now would
	 * shoot down the TLB of the core the command runs on, while it runs. */
	errno = e;
	return pid;
}

/* With an allowlist, where clients find the proxy; the NO_PROXY pair is
 * empty so that nothing is meant to go around it (nothing could). */
static const struct {
	const char *name, *value;
} proxy_env[] = {
    {"HTTP_PROXY", SBX_EGRESS_PROXY_URL},
    {"HTTPS_PROXY", SBX_EGRESS_PROXY_URL},
    {"http_proxy", SBX_EGRESS_PROXY_URL},
    {"https_proxy", SBX_EGRESS_PROXY_URL},
    {"ALL_PROXY", SBX_EGRESS_PROXY_URL},
    {"NO_PROXY", ""},
    {"no_proxy", ""},
};

/* Whether envp[0..n) sets `name`; its index, or -1. */
static ssize_t env_index(char *const *envp, size_t n, const char *name, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (strncmp(envp[i], name, len) == 0 && envp[i][len] == '=')
			return (ssize_t)i;
	return -1;
}

/* Adds "NAME=value" (entry) to envp[0..*n), over an entry of the same name. */
static int env_set(char **envp, size_t *n, const char *entry)
{
	const char *eq = strchr(entry, '=');
	size_t len = eq ? (size_t)(eq - entry) : strlen(entry);
	ssize_t at = env_index(envp, *n, entry, len);
	char *copy = eq ? strdup(entry) : NULL;

	if (!copy)
		return -1; /* sbxd sends only NAME=value: anything else is refused */
	if (at >= 0) {
		free(envp[at]);
		envp[at] = copy;
	} else {
		envp[(*n)++] = copy;
	}
	return 0;
}

/* The policy's env, the exec's own entries over it (by name), HOME=/tmp
 * when neither sets HOME, and with an allowlist the proxy variables
 * neither sets (a policy's own value is what its author asked for; the
 * variables are a convenience, never the enforcement). */
static char **build_env(const SbxPolicy *p, char *const *env, size_t n_env)
{
	bool proxy = sbx_exec_wants_listener(p);
	char **envp = calloc(p->n_env + n_env + 1 + (proxy ? SBX_ARRAY_SIZE(proxy_env) : 0) + 1,
			     sizeof(char *));
	char *entry = NULL;
	size_t n = 0;
	if (!envp)
		return NULL;
	for (size_t i = 0; i < p->n_env; i++)
		if (asprintf(&envp[n++], "%s=%s", p->env[i]->name, p->env[i]->value) < 0)
			return NULL;
	for (size_t i = 0; i < n_env; i++)
		if (env_set(envp, &n, env[i]) < 0)
			return NULL;
	if (env_index(envp, n, "HOME", 4) < 0 && !(envp[n++] = strdup("HOME=/tmp")))
		return NULL;
	for (size_t i = 0; proxy && i < SBX_ARRAY_SIZE(proxy_env); i++) {
		if (env_index(envp, n, proxy_env[i].name, strlen(proxy_env[i].name)) >= 0)
			continue;
		if (asprintf(&entry, "%s=%s", proxy_env[i].name, proxy_env[i].value) < 0)
			return NULL;
		envp[n++] = entry;
	}
	return envp;
}

/* Makes the egress listener and hands it to pid 1 as the first packet on
 * the report socket; exec init keeps no copy (its command must not be able
 * to accept the connections meant for sbxd's proxy). With egress deny the
 * packet carries the deny resolver and, when it could be made, the
 * connect watch, made after every address was routed to loopback
 * (netns.h): the watch only records attempts, which fail at once either
 * way, so a kernel that refuses it (no AF_PACKET, a security module) costs
 * the record, not the exec; sbxd says so in the run's alerts. Without
 * `watch` (a prepared exec init: pid 1 makes its watch at the claim,
 * exec.h) the packet carries the resolver only. */
static int send_listener(int rfd, bool deny, bool watch, struct sbx_err *err)
{
	_cleanup_close_ int lfd = -1, wfd = -1;
	struct sbx_exec_report r = {.kind = SBX_EXEC_LISTENER};
	struct sbx_err ignored;
	int fds[2];

	lfd = deny ? sbx_netns_deny_dns(err) : sbx_netns_egress_listener(err);
	if (lfd < 0)
		return -1;
	r.routed = deny && sbx_netns_deny_routes(&ignored) == 0;
	if (r.routed && watch)
		wfd = sbx_netns_deny_watch(&ignored);
	fds[0] = lfd;
	fds[1] = wfd;
	if (sbx_fd_sendmsg(rfd, &r, sizeof(r), fds, wfd >= 0 ? 2 : 1) != (ssize_t)sizeof(r))
		return sbx_fail_errno(err, "egress listener: handing it to pid 1");
	return 0;
}

/* What makes an exec's confinement and needs nothing of its request: the
 * fds, the cgroup leaf and namespace, the network, the listener, the
 * terminals. A prepared exec init does it before its claim. */
static void exec_init_confine(const struct sbx_exec_spec *s, bool born_in_leaf)
{
	struct sbx_err err;
	int rfd = s->report_fd;
	int keep[5 + SBX_CG_NCTRL] = {s->report_fd, s->stdio[0], s->stdio[1], s->stdio[2],
				      s->sysctl_dir};
	size_t nkeep = 5;
	for (int i = 0; i < SBX_CG_NCTRL; i++)
		if (s->cgroup->fd[i] >= 0)
			keep[nkeep++] = s->cgroup->fd[i];
	if (sbx_close_fds_except(keep, nkeep, &err) < 0)
		setup_failed(rfd, &err);
	if (s->cgroup->mode != SBX_CG_NONE) {
		/* Born there on cgroup v2 (clone_exec_init), else a move: exec
		 * init has one thread (cloned by pid 1, it has made none). */
		if (!born_in_leaf && sbx_cgroup_join_single_threaded(s->cgroup, &err) < 0)
			setup_failed(rfd, &err);
		/* Rooted at the exec's own cgroup: /proc/self/cgroup reads "/". */
		if (unshare(CLONE_NEWCGROUP) < 0) {
			sbx_fail_errno(&err, "cgroup namespace");
			setup_failed(rfd, &err);
		}
	}
	sbx_phase_mark(SBX_PHASE_JOINED);
	/* While exec init still has its capabilities over its own network
	 * namespace; then the fd goes, like the cgroup's. */
	if (sbx_netns_setup(s->sysctl_dir, &err) < 0)
		setup_failed(rfd, &err);
	close(s->sysctl_dir);
	/* Before anything of the command exists, so that the proxy is there
	 * from its first instruction on (a connection made before sbxd
	 * accepts waits in the listener's backlog). */
	if (sbx_exec_wants_listener(s->policy) && send_listener(rfd, false, false, &err) < 0)
		setup_failed(rfd, &err);
	/* With egress deny, the resolver sbxd refuses every name on: the same
	 * way to sbxd, and likewise kept by nobody inside. */
	if (s->deny_dns && send_listener(rfd, true, !s->prepared, &err) < 0)
		setup_failed(rfd, &err);
	/* The one-shot driver has no resolver or watch to read (init.h), but
	 * its exec is routed as a served one: every address refused at once. */
	if (!s->deny_dns && sbx_exec_wants_deny_dns(s->policy)) {
		struct sbx_err ignored;
		(void)sbx_netns_deny_routes(&ignored);
	}
	/* The exec's own terminals, over the sandbox's: with one devpts
	 * shared, another exec could open this one's /dev/pts/N (same uid),
	 * read what is typed into it and type into it. */
	if (sbx_rootfs_private_pts(&err) < 0)
		setup_failed(rfd, &err);
	/* Its job done, the cgroup is no business of the command's. */
	for (int i = 0; i < SBX_CG_NCTRL; i++)
		if (s->cgroup->fd[i] >= 0)
			close(s->cgroup->fd[i]);
	/* ~40 calls, ahead of a claim: the bounding set only limits what an
	 * execve gives, and nothing execs before the rest is dropped
	 * (exec_init_command), so the command starts with no capability in
	 * any set either way. */
	if (sbx_privs_drop_bounding(&err) < 0)
		setup_failed(rfd, &err);
}

/* Our stdio pipes were made by the caller (sbxd, the one-shot driver) and
 * are 0600 its: the command, another uid, could write to them but not open
 * them again through /dev/stdout or /proc/self/fd/N (`echo x > /dev/stderr`,
 * `curl -D /dev/stderr`, which crashes on it). Only pipes: their only way in
 * is a descriptor, and /proc/PID/fd/N only to whoever may read PID's fds,
 * so the mode opens nothing to anyone else. Done by their owner's uid, so
 * no capability is needed (a pipe of someone else's stays as it is: EPERM):
 * exec init before it becomes the sandbox user, or for a prepared one,
 * which is that user already, pid 1 at the claim. */
static int share_stdio_pipes(const int stdio[3], struct sbx_err *err)
{
	for (int i = 0; i < 3; i++) {
		struct stat st;
		if (fstat(stdio[i], &st) == 0 && S_ISFIFO(st.st_mode) &&
		    fchmod(stdio[i], 0666) < 0 && errno != EPERM)
			return sbx_fail_errno(err, "stdio pipe %d", i);
	}
	return 0;
}

/* Exec init becomes the sandbox user with no privilege and the seccomp
 * filter: all the command will have, none of what made the exec. A
 * prepared exec init does it before its claim, so that what it takes from
 * pid 1 (the claim's strings and descriptors) is read under the filter, and
 * the claim costs only the command's spawn. */
static void exec_init_lock(const struct sbx_exec_spec *s)
{
	struct sbx_err err;
	int rfd = s->report_fd;
	/* The sandbox user from here on: with a host uid of the run's own
	 * (host_ids.h) exec init was still its caller until now (the run's
	 * uid 0, which this namespace does not map), and every per-uid kernel
	 * counter of the command is charged to the run's uid alone. Where the
	 * sandbox user is the caller (shared) this changes nothing. gid
	 * first: after the uid changes, the right to change it may be gone. */
	if (setresgid(SBX_SANDBOX_GID, SBX_SANDBOX_GID, SBX_SANDBOX_GID) < 0 ||
	    setresuid(SBX_SANDBOX_UID, SBX_SANDBOX_UID, SBX_SANDBOX_UID) < 0) {
		sbx_fail_errno(&err, "becoming the sandbox user");
		setup_failed(rfd, &err);
	}
	/* A change of uid clears the death signal (commit_creds): armed again,
	 * as promised at the clone. (Were pid 1 gone already, its pid
	 * namespace, which holds this one, would take the exec with it.) */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) {
		sbx_fail_errno(&err, "death signal");
		setup_failed(rfd, &err);
	}
	if (sbx_privs_drop(&err) < 0 || sbx_seccomp_load_bpf(s->filter, &err) < 0)
		setup_failed(rfd, &err);
	sbx_phase_mark(SBX_PHASE_CONFINED);
}

/* The rest, with the request: the environment, then the command; exec
 * init's report and end. Locked (exec_init_lock) already. */
__attribute__((noreturn)) static void exec_init_command(const struct sbx_exec_spec *s)
{
	struct sbx_err err;
	int rfd = s->report_fd;
	char **envp = build_env(s->policy, s->env, s->n_env);
	if (!envp) {
		sbx_fail_errno(&err, "environment");
		setup_failed(rfd, &err);
	}
	int errpipe[2];
	if (pipe2(errpipe, O_CLOEXEC) < 0) {
		sbx_fail_errno(&err, "pipe");
		setup_failed(rfd, &err);
	}

	/* The kernel drops a signal from inside the exec's pid namespace to
	 * its init unless init handles it: exec init handles the forwarded
	 * ones only, whatever a runtime installed before (a sanitizer's
	 * reporters of faults, which the command could otherwise raise in
	 * exec init with a kill of pid 1). Its own SIGPIPE stays ignored. */
	static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(faults); i++)
		default_handler(faults[i]);
	/* No SA_RESTART: every call that can block from here on retries on
	 * EINTR itself, and a sanitizer's runtime runs a handler only when
	 * the interrupted call returns (ThreadSanitizer defers it: restarted,
	 * the waitpid for a command that waits for the signal never did, and
	 * helper.serve's forwarded SIGTERM was lost). */
	struct sigaction sa = {.sa_handler = forward_signal};
	sigset_t none, held;
	sigfillset(&sa.sa_mask);
	forwarded_set(&held);
	for (int sig = 1; sig < NSIG; sig++)
		if (sigismember(&held, sig) == 1)
			sigaction(sig, &sa, NULL);
	/* The mask is inherited from whoever started the helper (and the
	 * helper blocks a few for its signalfd): nothing blocked but the
	 * forwarded signals, which stay blocked, as they were from this
	 * process's birth (sbx_exec_spawn), until the command's process group
	 * exists: one sent meanwhile waits pending instead of being lost (the
	 * kernel drops an unhandled, unblocked signal to a namespace's init,
	 * and forward_signal had no group to pass it to). */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &held, NULL);

	struct sbx_exec_report starting = {.kind = SBX_EXEC_STARTING};
	if (write(rfd, &starting, sizeof(starting)) != (ssize_t)sizeof(starting)) {
		sbx_fail_errno(&err, "report socket");
		setup_failed(rfd, &err);
	}
	pid_t cmd = spawn_command(s, envp, errpipe[1]);
	if (cmd < 0) {
		sbx_fail_errno(&err, "starting the command (its stack, or clone)");
		setup_failed(rfd, &err);
	}
	close(errpipe[1]);
	for (int i = 0; i < 3; i++)
		close(s->stdio[i]);

	struct sbx_exec_report r = {.kind = SBX_EXEC_RAN};
	struct setup_error why;
	ssize_t n;
	do
		n = read(errpipe[0], &why, sizeof(why));
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)sizeof(why) && why.errnum > 0) {
		r.kind = SBX_EXEC_NOT_STARTED;
		r.errnum = why.errnum;
	} else if (n == (ssize_t)sizeof(why) && why.in_cwd) {
		r.kind = SBX_EXEC_SETUP_FAILED;
		snprintf(r.msg, sizeof(r.msg), "cwd %.400s: %s", s->cwd, strerror(-why.errnum));
	} else if (n == (ssize_t)sizeof(why)) {
		r.kind = SBX_EXEC_SETUP_FAILED;
		snprintf(r.msg, sizeof(r.msg), "preparing the command (rlimits): %s",
			 strerror(-why.errnum));
	}
	close(errpipe[0]);
	/* errpipe closed at the command's execve (or told why there was
	 * none), so it is a session leader by now: what waited is passed on.
	 * Not before: a forked command (SPAWN_BY_FORK, under a sanitizer) may
	 * not have called setsid yet when fork returns, and kill(-pgid) of a
	 * group not yet made drops the signal (sbxd.calls lost SIGTERM so
	 * under ASan); under CLONE_VFORK the read returns at once. */
	command_pgid = cmd;
	sigprocmask(SIG_SETMASK, &none, NULL);

	/* Reap everything (we are this namespace's init) until the command
	 * itself is gone. */
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, __WALL);
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid < 0)
			break;
		if (pid == cmd) {
			sbx_phase_mark(SBX_PHASE_REAPED);
			r.status = status;
			break;
		}
	}
	/* Then whatever it left behind, killed and reaped here rather than
	 * by our exit: the report says that nothing of the exec runs any
	 * more, and pid 1 ends the exec on it (init.c, end_on_report), not on
	 * our reap, which waits for the teardown of the exec's namespaces and
	 * of our copy of pid 1's memory. kill(-1) reaches every process of
	 * this pid namespace (and those below) but its init: all are the
	 * sandbox user's, which we are, so none is out of reach, and SIGKILL
	 * is neither blocked nor handled; they are our children by now, so
	 * waitpid sees them all until ECHILD. */
	/* Nothing is left to forward to: blocked again, no handler runs
	 * and no call of ours returns EINTR from here to the report (review:
	 * a Signal request's handler, its kill failing ESRCH, once clobbered
	 * errno between a waitpid's EINTR and the test of it). */
	sigprocmask(SIG_SETMASK, &held, NULL);
	kill(-1, SIGKILL);
	while (waitpid(-1, NULL, __WALL) > 0 || errno == EINTR)
		;
	struct rusage ru;
	if (getrusage(RUSAGE_CHILDREN, &ru) == 0) {
		r.cpu_ms = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
			   (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
		r.maxrss_kb = (uint64_t)ru.ru_maxrss;
	}
	report_and_exit(rfd, &r);
	__builtin_unreachable();
}

/* A prepared exec init's claim (sbx_exec_claim): the header, then the
 * request's strings in the memfd that comes with it, cwd first, NUL after
 * each. */
#define CLAIM_MAGIC 0x5342584bu
struct claim_header {
	uint32_t magic;
	uint32_t argc, envc;
	uint32_t len; /* of the strings in the memfd */
};

/* Waits for the claim and fills the request's part of *c from it; exits
 * when pid 1 lets the prepared exec init go unclaimed. */
static void await_claim(struct sbx_exec_spec *c)
{
	struct sbx_err err = {0};
	struct claim_header h;
	int fds[SBX_CTL_MAX_FDS];
	size_t nfds = 0;
	int flags = 0;
	ssize_t n;
	do
		n = sbx_fd_recvmsg(c->report_fd, &h, sizeof(h), fds, &nfds, &flags);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		_exit(0); /* pid 1 closed its end: never claimed */
	if (n != (ssize_t)sizeof(h) || nfds != 4 || (flags & MSG_CTRUNC) ||
	    h.magic != CLAIM_MAGIC || h.argc == 0 || h.len > SBX_CLAIM_MAX_BYTES ||
	    /* each of cwd, the args and the entries takes a byte at least:
	     * counts past that are refused before anything is sized by them */
	    (uint64_t)h.argc + h.envc + 1 > h.len) {
		sbx_fail(&err, "prepared exec: a malformed claim from pid 1");
		setup_failed(c->report_fd, &err);
	}
	char *buf = malloc((size_t)h.len + 1);
	char **argv = calloc((size_t)h.argc + 1, sizeof(char *));
	char **env = calloc((size_t)h.envc + 1, sizeof(char *));
	if (!buf || !argv || !env || pread(fds[0], buf, h.len, 0) != (ssize_t)h.len) {
		sbx_fail_errno(&err, "prepared exec: reading the claim");
		setup_failed(c->report_fd, &err);
	}
	close(fds[0]);
	buf[h.len] = '\0';
	/* cwd, argc args, envc entries: each ends in a NUL within len. */
	char *p = buf, *end = buf + h.len;
	size_t want = 1 + (size_t)h.argc + h.envc;
	for (size_t i = 0; i < want; i++) {
		char *nul = p < end ? memchr(p, '\0', (size_t)(end - p)) : NULL;
		if (!nul) {
			sbx_fail(&err, "prepared exec: a truncated claim from pid 1");
			setup_failed(c->report_fd, &err);
		}
		if (i == 0)
			c->cwd = p;
		else if (i <= h.argc)
			argv[i - 1] = p;
		else
			env[i - 1 - h.argc] = p;
		p = nul + 1;
	}
	c->argv = argv;
	c->env = env;
	c->n_env = h.envc;
	for (int i = 0; i < 3; i++)
		c->stdio[i] = fds[1 + i];
}

int sbx_exec_claim(int report_fd, char *const *argv, size_t argc, const char *cwd, char *const *env,
		   size_t n_env, const int stdio[3], struct sbx_err *err)
{
	size_t len = strlen(cwd) + 1;
	for (size_t i = 0; i < argc; i++)
		len += strlen(argv[i]) + 1;
	for (size_t i = 0; i < n_env; i++)
		len += strlen(env[i]) + 1;
	if (len > SBX_CLAIM_MAX_BYTES)
		return sbx_fail(err, "exec request too large (%zu bytes of argv, env and cwd)",
				len);
	/* The prepared exec init is the sandbox user already: pid 1, the
	 * pipes' owner as exec init was, opens them to it. */
	if (share_stdio_pipes(stdio, err) < 0)
		return -1;
	_cleanup_free_ char *buf = malloc(len);
	if (!buf)
		return sbx_fail_errno(err, "claim");
	char *p = stpcpy(buf, cwd) + 1;
	for (size_t i = 0; i < argc; i++)
		p = stpcpy(p, argv[i]) + 1;
	for (size_t i = 0; i < n_env; i++)
		p = stpcpy(p, env[i]) + 1;
	_cleanup_close_ int mfd = memfd_create("sbx-claim", MFD_CLOEXEC);
	if (mfd < 0 || write(mfd, buf, len) != (ssize_t)len)
		return sbx_fail_errno(err, "claim: memfd");
	struct claim_header h = {.magic = CLAIM_MAGIC,
				 .argc = (uint32_t)argc,
				 .envc = (uint32_t)n_env,
				 .len = (uint32_t)len};
	int fds[4] = {mfd, stdio[0], stdio[1], stdio[2]};
	if (sbx_fd_sendmsg(report_fd, &h, sizeof(h), fds, 4) != (ssize_t)sizeof(h))
		return sbx_fail_errno(err, "claim: handing the request to the prepared exec init");
	return 0;
}

static void exec_init(const struct sbx_exec_spec *s, bool born_in_leaf)
{
	exec_init_confine(s, born_in_leaf);
	if (s->prepared) {
		struct sbx_exec_spec c = *s;
		exec_init_lock(s);
		await_claim(&c);
		exec_init_command(&c);
	}
	struct sbx_err err;
	if (share_stdio_pipes(s->stdio, &err) < 0)
		setup_failed(s->report_fd, &err);
	exec_init_lock(s);
	exec_init_command(s);
}

/* The exec's user namespace maps the sandbox user to itself: same uid, but
 * a different namespace makes every exec's processes unreachable from every
 * other exec's (ptrace access checks, so /proc/PID/mem, environ, fd), and
 * the mount namespace copied into it locks every mount flag. */
static int map_exec_ids(pid_t pid, struct sbx_err *err)
{
	char map[32];
	snprintf(map, sizeof(map), "%d %d 1\n", SBX_SANDBOX_UID, SBX_SANDBOX_UID);
	if (sbx_write_proc(pid, "uid_map", map, err) < 0 ||
	    sbx_write_proc(pid, "setgroups", "deny", err) < 0)
		return -1;
	snprintf(map, sizeof(map), "%d %d 1\n", SBX_SANDBOX_GID, SBX_SANDBOX_GID);
	return sbx_write_proc(pid, "gid_map", map, err);
}

#define EXEC_NS_FLAGS (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC)

/* Set once clone3 said ENOSYS (a kernel before 5.3, or a seccomp profile
 * such as Docker's): pid 1 does not ask again. */
static bool clone3_missing;

/* Exec init, fork-like (no stack, SIGCHLD), in the exec's namespaces. On
 * cgroup v2 it is born in its leaf (clone3's CLONE_INTO_CGROUP, Linux
 * 5.7+), *born_in_leaf true: joining after birth (a write to cgroup.procs)
 * takes cgroup_threadgroup_rwsem for writing, which waits for an RCU grace
 * period on every exec; a birth there takes it for reading only. clone3
 * refused in any way (ENOSYS, EPERM, E2BIG, EINVAL, no right to the leaf)
 * falls back to clone, and exec init joins its leaf itself, as on v1. */
static pid_t clone_exec_init(const struct sbx_cgroup *cg, bool *born_in_leaf)
{
	*born_in_leaf = false;
	if (cg->mode == SBX_CG_V2 && !clone3_missing) {
		struct clone_args args = {
		    .flags = EXEC_NS_FLAGS | CLONE_INTO_CGROUP,
		    .exit_signal = SIGCHLD,
		    .cgroup = (uint64_t)cg->fd[0],
		};
		pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
		if (pid >= 0) {
			*born_in_leaf = true;
			return pid;
		}
		clone3_missing = errno == ENOSYS;
	}
	return (pid_t)syscall(SYS_clone, EXEC_NS_FLAGS | SIGCHLD, NULL, NULL, NULL, NULL);
}

pid_t sbx_exec_spawn(const struct sbx_exec_spec *s, int *mnt_ns, int *net_ns, struct sbx_err *err)
{
	*mnt_ns = -1;
	if (net_ns)
		*net_ns = -1;
	_cleanup_close_pair_ int sync[2] = SBX_PAIR_INIT;
	sigset_t held, old;
	if (pipe2(sync, O_CLOEXEC) < 0)
		return sbx_fail_errno(err, "pipe");
	/* Exec init is born with the forwarded signals blocked (exec_init
	 * says until when): a SignalRequest right after the exec's request
	 * must wait for the command, not vanish. */
	forwarded_set(&held);
	sigprocmask(SIG_BLOCK, &held, &old);
	bool born_in_leaf;
	_cleanup_kill_reap_ pid_t pid = clone_exec_init(s->cgroup, &born_in_leaf);
	if (pid != 0)
		sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid < 0)
		return sbx_fail_errno(err, "clone exec namespaces");
	if (pid > 0 && born_in_leaf)
		sbx_phase_mark(SBX_PHASE_IN_LEAF);
	if (pid == 0) {
		char byte;
		close(sync[1]);
		/* An exec that outlived pid 1 would escape every deadline:
		 * without the death signal it does not start. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
			_exit(1);
		if (read(sync[0], &byte, 1) != 1)
			_exit(1);
		close(sync[0]);
		exec_init(s, born_in_leaf);
	}
	close(sbx_steal_fd(sync[0]));
	if (map_exec_ids(pid, err) < 0)
		return -1;
	/* While exec init waits for the byte: still our uid and dumpable. A
	 * prepared one soon is neither (exec_init_lock), and then its
	 * namespaces are no longer ours to open. */
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
	*mnt_ns = open(path, O_RDONLY | O_CLOEXEC);
	if (net_ns) {
		snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
		*net_ns = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (write(sync[1], "g", 1) != 1) {
		sbx_fail_errno(err, "start exec");
		if (*mnt_ns >= 0)
			close(sbx_steal_fd(*mnt_ns));
		if (net_ns && *net_ns >= 0)
			close(sbx_steal_fd(*net_ns));
		return -1;
	}
	return sbx_steal_pid(pid);
}
