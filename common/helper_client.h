/* SPDX-License-Identifier: Apache-2.0 */
/* The client end of the helper protocol (proto/sbx/v1/helper.proto): what
 * sbxd's run manager, `sbx-helper run` and the tests send to a sandbox's
 * pid 1 and what they make of its answers, behind types of its own. One
 * module with ctlmsg.h (the framing, the fd table, the version), under one
 * prefix: sbx_ctl_ (SBX_CTL_ for constants).
 * helper_client.c is the only client file that includes the protocol's
 * generated header, so sbxd's run manager sees only the public API's
 * messages (both .proto files live in package sbx.v1). */
#ifndef SBX_HELPER_CLIENT_H
#define SBX_HELPER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* How pid 1 says an exec ended (helper.proto ExecEnded.Reason). */
enum sbx_ctl_end {
	SBX_CTL_END_EXITED,
	SBX_CTL_END_SIGNALED,
	SBX_CTL_END_KILLED,
	SBX_CTL_END_TIMEOUT,
	SBX_CTL_END_OOM,
	SBX_CTL_END_RUN_EXPIRED,
	SBX_CTL_END_SETUP_FAILED,
};

enum sbx_ctl_kind {
	SBX_CTL_OTHER, /* a message sbxd has no use for (ignored) */
	SBX_CTL_READY,
	SBX_CTL_STARTED,
	SBX_CTL_ENDED,
	SBX_CTL_FAILURE,
	SBX_CTL_EOF, /* the control socket closed: pid 1 is gone */
};

struct sbx_ctl_event {
	enum sbx_ctl_kind kind;
	uint64_t exec_id;
	enum sbx_ctl_end end;
	int32_t exit_code;
	int32_t signal;
	uint64_t cpu_ms;
	uint64_t peak_memory_bytes;
	char message[SBX_ERR_MAX]; /* ENDED (setup failed) or FAILURE: why */
	int out_fd;		   /* READY: /out (O_DIRECTORY), or -1 without an /out mount */
	/* STARTED: the exec's egress listener (helper.proto ExecStarted,
	 * egress_listener), the receiver's to close or hand on; else -1. */
	int listen_fd;
	/* STARTED with egress deny: the exec's connect watch (ExecStarted
	 * deny_watch), likewise; else -1. */
	int watch_fd;
	char cgroup[8]; /* READY: "v2", "v1" or "none" */
};

/* Makes our end of a fresh control socket non-blocking (a helper that stops
 * reading must never stall a handler) with a send buffer that holds the
 * largest request. */
int sbx_ctl_prepare(int ctl, struct sbx_err *err);

/* One event from a non-blocking control socket: 1 with *ev filled, 0 when
 * nothing is pending, -1 on error. Fds that arrive with anything but Ready
 * (its /out) or an ExecStarted that says it carries the egress listener
 * (and the deny connect watch) are closed. On a blocking socket it waits for the next event. */
int sbx_ctl_recv_event(int ctl, struct sbx_ctl_event *ev, struct sbx_err *err);
/* Closes the fds an event holds (out_fd, listen_fd, watch_fd): for a receiver that
 * has no use for them. */
void sbx_ctl_event_close(struct sbx_ctl_event *ev);
/* The next event within timeout_ms (-1: no limit): 1 with *ev filled, 0
 * when none came in time, -1 on error. */
int sbx_ctl_next(int ctl, int timeout_ms, struct sbx_ctl_event *ev, struct sbx_err *err);
/* Waits (timeout_ms, -1: no limit) for Ready alone: 0 with *ready filled
 * (ready->out_fd is the caller's), or -1 with err saying why: pid 1's
 * Failure message, "the sandbox ended before it was ready", or the
 * timeout. */
int sbx_ctl_await_ready(int ctl, int timeout_ms, struct sbx_ctl_event *ready, struct sbx_err *err);

/* The exit status an ended exec stands for, as `sbx-helper run` exits with
 * it: 124 when a deadline (script_seconds or run_seconds) ended it, 125
 * when it could not be set up, else the exit code pid 1 reported (128+N
 * for signal N). */
int sbx_ctl_exit_status(const struct sbx_ctl_event *ended);

/* Whether an ExecRequest fits one control message (SBX_CTL_MAX_BYTES). An
 * ExecRequest passes the command's stdin, stdout and stderr (stdio[0..2])
 * along; the caller keeps its copies. cwd NULL: the policy's default. */
/* An exec's own options (NULL: none): env entries "NAME=value" set over
 * the policy's env by name, and its wall clock (0: script_seconds). */
struct sbx_ctl_exec_opts {
	char *const *env;
	size_t n_env;
	uint32_t timeout_seconds;
};
bool sbx_ctl_exec_fits(char *const *argv, size_t argc, const char *cwd,
		       const struct sbx_ctl_exec_opts *o);
int sbx_ctl_send_exec(int ctl, uint64_t exec_id, char *const *argv, size_t argc, const char *cwd,
		      const struct sbx_ctl_exec_opts *o, const int stdio[3], struct sbx_err *err);
int sbx_ctl_send_signal(int ctl, uint64_t exec_id, int sig, struct sbx_err *err);
int sbx_ctl_send_destroy(int ctl, struct sbx_err *err);
/* A sandbox built ahead (sbxd's warm pool) is now a run's: pid 1 restarts
 * its run_seconds clock (once, before any exec). */
int sbx_ctl_send_claim(int ctl, struct sbx_err *err);

/* sbxd's start of a run: waits (at most timeout_ms) for Ready on `ctl`
 * while collecting what the helper writes on `errfd` into errtext
 * (NUL-terminated, truncated to errsize). Returns 0 with *ready filled (ready->out_fd is the
 * caller's), or -1 with err saying why the sandbox could not be built: the helper's Failure
 * message, or its last stderr line when it exited first. */
int sbx_ctl_wait_ready(int ctl, int errfd, int timeout_ms, struct sbx_ctl_event *ready,
		       char *errtext, size_t errsize, struct sbx_err *err);

#endif
