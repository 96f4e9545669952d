#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Where an exec's time goes, from the kernel's side: ftrace of the process
# and hand-off events only (fork, exec, exit, wait, SIGCHLD, sendmsg,
# recvmsg, clone, seccomp, execve, the poll/wait returns), few enough that
# the times stay close to untraced ones, while a command runs.
set -euo pipefail

usage() {
	cat <<USAGE
usage: bench/trace-exec.sh [-o FILE] -- COMMAND [ARG...]

Runs COMMAND (typically, as root:
  bench/trace-exec.sh -- runuser -u sbx-test -- build/bench/sbx-bench-sbxd \\
      --only exec --execs 10 --exec-gap-ms 300 -n)
with those events traced system-wide and writes the trace to FILE
(default ./exec-trace.txt). Needs root and tracefs (/sys/kernel/tracing).
Read it by the command's process (grep 'sched_process_exec.*true') and the
lines around it: docs/dev/benchmarks.md shows one exec taken apart.
USAGE
}

out=exec-trace.txt
while [ $# -gt 0 ]; do
	case "$1" in
	-o) out=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	--) shift; break ;;
	*) usage >&2; exit 2 ;;
	esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
TRACEFS_WHO=trace-exec.sh
. "$(dirname "$0")/tracefs.sh"

events=(sched:sched_process_fork sched:sched_process_exec sched:sched_process_exit
	sched:sched_process_wait signal:signal_generate syscalls:sys_enter_sendmsg
	syscalls:sys_exit_recvmsg syscalls:sys_enter_exit_group syscalls:sys_enter_clone
	syscalls:sys_exit_clone syscalls:sys_enter_clone3 syscalls:sys_exit_clone3
	syscalls:sys_enter_seccomp syscalls:sys_exit_seccomp syscalls:sys_enter_execve
	syscalls:sys_exit_wait4 syscalls:sys_exit_poll syscalls:sys_exit_ppoll
	syscalls:sys_exit_epoll_wait)
tracefs_open 32768
for e in "${events[@]}"; do echo "$e" >>"$T/set_event"; done
rc=0
tracefs_run "$out" "$@" || rc=$?
echo "trace-exec.sh: $(grep -vc '^#' "$out") events in $out" >&2
exit $rc
