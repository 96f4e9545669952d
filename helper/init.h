/* SPDX-License-Identifier: Apache-2.0 */
/* pid 1 of the sandbox: starts execs on request, reports their ends,
 * enforces their deadlines and the run's, and takes everything down when
 * told or when the control socket closes. */
#ifndef SBX_INIT_H
#define SBX_INIT_H

#include <linux/filter.h>
#include <stdbool.h>
#include <stdint.h>

#include "cgroup.h"
#include "policy.h"

struct sbx_init_ctx {
	const SbxPolicy *policy;
	uint64_t nofile;		 /* each command process's RLIMIT_NOFILE */
	int ctl;			 /* SOCK_SEQPACKET to the server */
	struct sbx_cgroup *run;		 /* the run's cgroup; mode NONE: rlimit fallback */
	int out_fd;			 /* /out, passed to the server in Ready; -1 without /out */
	int sysctl_dir;			 /* /proc/sys, writable beneath its read-only bind */
	bool seccomp;			 /* for Ready: what is enforced */
	const struct sock_fprog *filter; /* loaded by every exec */
	bool prepare_execs;		 /* serve: the next exec init made ahead */
	/* serve, sbxd's warm pool: the first exec's init is made before
	 * Ready, so that a member counted ready has it (a claim right after
	 * Ready found none yet, and its first Exec made one: a cold exec). */
	bool prepare_first;
	/* serve: sbxd drives the execs, and with egress deny reads each one's
	 * deny resolver and connect watch. The one-shot driver has no reader
	 * for them, so its exec makes neither: a resolver nobody answers would
	 * hold every lookup to its timeout, and the watch's last close waits
	 * for an RCU grace period (packet_release), ~10 ms on the run's path. */
	bool served;
};

/* How long pid 1 stays quiet after Ready or an exec's start or end before
 * it makes the next exec's init ahead. The make takes pid 1 ~2 ms of CPU
 * (a network namespace is most of it) during which it answers nothing:
 * made at once, it competed with the command it had just started and held
 * up that command's end (a short command's report waited behind it), and
 * a run torn down right after Ready or its last exec made one for nothing
 * (an Exec sent right after Ready waited for it, too). A
 * caller that reads an answer before its next call (a person, an agent, a
 * script) finds it made; only a caller firing execs back to back, each
 * within a few ms of the last one's end, gets one made at its request.
 * 10, not 5: on a host where a spawn costs twice as much, a fresh exec
 * init's own setup and a short command's run outlast 5 ms, so the make
 * started beside them anyway (and was torn down unused in a cycle).
 * Measured: docs/dev/benchmarks.md, "The next init made once pid 1 is
 * quiet" and "Quiet for 10 ms". */
#define SBX_PREPARE_QUIET_MS 10

__attribute__((noreturn)) void sbx_init_main(struct sbx_init_ctx *ctx);

/* Sends a Failure message (best effort): the sandbox could not be built. */
void sbx_init_send_failure(int ctl, const char *message);

#endif
