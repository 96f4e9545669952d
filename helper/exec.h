/* SPDX-License-Identifier: Apache-2.0 */
/* One exec: a process tree of its own inside the sandbox.
 *
 * The sandbox's pid 1 clones an "exec init" into new user, mount, pid,
 * network and System V IPC namespaces. It
 * joins the exec's cgroup, gives up every privilege, loads the seccomp
 * filter, then forks the command and reaps. When the command ends, exec init
 * kills and reaps whatever the command left behind, then reports (the
 * exec's end: nothing of it runs any more) and exits: files in
 * /out, /tmp and /dev/shm are shared between a run's execs (so are unix
 * sockets bound to a path there: they are files); processes, loopback and
 * abstract unix sockets, SysV IPC and terminals (a devpts instance per exec)
 * never are. */
#ifndef SBX_EXEC_H
#define SBX_EXEC_H

#include <linux/filter.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cgroup.h"
#include "ctlmsg.h"
#include "err.h"
#include "policy.h"

/* What a SignalRequest may carry besides SIGKILL: exec init passes these
 * on to the command's process group. SIGSTOP is not among them: it would
 * stop exec init itself. */
#define SBX_FORWARDED_SIGNALS                                                                      \
	SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGWINCH, SIGCONT, SIGTSTP

/* Written by exec init to its report socket (SOCK_SEQPACKET: one packet
 * each): with an allowlist first SBX_EXEC_LISTENER (the listener alongside
 * as SCM_RIGHTS), then SBX_EXEC_STARTING, then the report. */
struct sbx_exec_report {
	int kind;   /* enum sbx_exec_report_kind */
	int status; /* wait status of the command (SBX_EXEC_RAN) */
	int errnum; /* SBX_EXEC_NOT_STARTED: why execve failed */
	uint64_t cpu_ms;
	uint64_t maxrss_kb;
	/* SBX_EXEC_LISTENER with egress deny: every address was routed to the
	 * exec's loopback, so a connect watch sees attempts (pid 1 hands on
	 * the watch it made for a prepared exec only then, as exec init makes
	 * its own only then). */
	bool routed;
	char msg[512]; /* SBX_EXEC_SETUP_FAILED */
};

enum sbx_exec_report_kind {
	SBX_EXEC_RAN = 1,
	SBX_EXEC_NOT_STARTED, /* execve failed: 126/127 */
	SBX_EXEC_SETUP_FAILED,
	/* Written just before the command is forked, ahead of the report: an
	 * exec init that dies after it without a report died while the
	 * command could act, which is not a setup failure. */
	SBX_EXEC_STARTING,
	/* The egress listener (netns.h), the first packet of an exec whose
	 * policy has an allowlist, or with egress deny under sbxd the deny
	 * resolver; its fields are unused. */
	SBX_EXEC_LISTENER,
};

/* Whether an exec of this policy gets the egress listener and the proxy
 * variables (the proxy's convenience; the enforcement is that its network
 * namespace has no route out). */
static inline bool sbx_exec_wants_listener(const SbxPolicy *p)
{
	return p->egress->policy == SBX__V1__EGRESS__POLICY__ALLOWLIST;
}

/* Whether an exec of this policy, when sbxd drives it, hands sbxd the deny
 * resolver (netns.h) in the listener's place: egress deny. */
static inline bool sbx_exec_wants_deny_dns(const SbxPolicy *p)
{
	return p->egress->policy == SBX__V1__EGRESS__POLICY__DENY;
}

struct sbx_exec_spec {
	char *const *argv;
	const char *cwd;
	char *const *env; /* "NAME=value", set over the policy's env by name */
	size_t n_env;
	int stdio[3];
	const SbxPolicy *policy;
	uint64_t nofile;		 /* the command's RLIMIT_NOFILE (run_files.h) */
	const struct sbx_cgroup *cgroup; /* mode NONE: rlimits instead */
	int report_fd;			 /* exec init's end of the report socket */
	const struct sock_fprog *filter; /* the seccomp program, compiled once */
	int sysctl_dir;			 /* netns.h: closed before the command runs */
	/* sbxd drives the exec (not the one-shot driver): with egress deny
	 * exec init hands it the deny resolver (netns.h) as its listener. */
	bool deny_dns;
	/* Prepared ahead (argv, cwd, env and stdio unset): exec init makes
	 * everything of the exec that needs nothing of its request, then
	 * waits on report_fd for sbx_exec_claim. With deny_dns it makes the
	 * resolver and the routes but not the connect watch: pid 1 makes that
	 * at the claim, in the exec's network namespace (net_ns of
	 * sbx_exec_spawn; sbx_netns_deny_watch_in). The watch's last close
	 * waits for an RCU grace period (packet_release), and a prepared init
	 * nobody claims (one per run at its end) would have left that wait in
	 * pid 1's exit, i.e. in every Teardown. */
	bool prepared;
};

/* The most a claim's argv, env and cwd may come to: what one control
 * message can carry. */
#define SBX_CLAIM_MAX_BYTES SBX_CTL_MAX_BYTES

/* Hands a prepared exec init (its pid 1 end of the report socket) its
 * request: argv[0..argc), cwd, env[0..n_env) ("NAME=value"), stdio. It
 * then goes on as an exec spawned with them would. */
int sbx_exec_claim(int report_fd, char *const *argv, size_t argc, const char *cwd, char *const *env,
		   size_t n_env, const int stdio[3], struct sbx_err *err);

/* Returns exec init's pid, or -1. *mnt_ns: its mount namespace, opened
 * before it runs (-1 if that failed), for the caller to close; *net_ns
 * likewise its network namespace, unless net_ns is NULL. */
pid_t sbx_exec_spawn(const struct sbx_exec_spec *spec, int *mnt_ns, int *net_ns,
		     struct sbx_err *err);

#endif
