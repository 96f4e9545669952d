#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Where sbx's processes sleep in the kernel, and for how long: ftrace's
# sched_switch with a kernel stack for every task that blocks, while a
# command runs, summed by process name and stack. Found the RCU grace
# periods that a packet socket's close and a cgroup v1 move wait for
# (docs/dev/benchmarks.md, "Grace periods off the path").
set -euo pipefail

usage() {
	cat <<USAGE
usage: bench/trace-waits.sh [-o FILE] [-n TOP] [-m MS] [-a] -- COMMAND [ARG...]

Runs COMMAND (typically, as root:
  bench/trace-waits.sh -- runuser -u sbx-test -- build/bench/sbx-bench-sbxd \\
      --only cycle --cycles 15)
with sched_switch traced system-wide, a kernel stack taken for each task
that blocks, and prints the TOP (default 15) uninterruptible waits of at
least MS (default 0.3) milliseconds, summed by task name and stack:
count, total, median. -a counts interruptible sleeps too (poll, wait4);
kernel threads are left out. The raw trace goes to FILE (default
./waits-trace.txt). Needs root and tracefs (/sys/kernel/tracing).
USAGE
}

out=waits-trace.txt top=15 min_ms=0.3 all=0
while [ $# -gt 0 ]; do
	case "$1" in
	-o) out=$2; shift 2 ;;
	-n) top=$2; shift 2 ;;
	-m) min_ms=$2; shift 2 ;;
	-a) all=1; shift ;;
	-h | --help) usage; exit 0 ;;
	--) shift; break ;;
	*) usage >&2; exit 2 ;;
	esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
TRACEFS_WHO=trace-waits.sh
. "$(dirname "$0")/tracefs.sh"
tracefs_undo() {
	echo '!stacktrace if prev_state != 0' >"$T/events/sched/sched_switch/trigger" 2>/dev/null || true
}
tracefs_open 65536
# A stack only where the task leaves the CPU to wait (not when preempted).
echo 'stacktrace if prev_state != 0' >"$T/events/sched/sched_switch/trigger"
echo sched:sched_switch >>"$T/set_event"
rc=0
tracefs_run "$out" "$@" || rc=$?
tracefs_stop
trap - EXIT

python3 - "$out" "$top" "$min_ms" "$all" <<'PY'
import collections, re, sys

path, top, min_ms, all_states = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
switch = re.compile(r"(\d+\.\d+): sched_switch: prev_comm=(.*?) prev_pid=(\d+) prev_prio=\d+ "
                    r"prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)")
lines = open(path, errors="replace").read().split("\n")
asleep = {}  # pid -> (since, name, state, stack)
waits = collections.defaultdict(list)
i = 0
while i < len(lines):
    m = switch.search(lines[i])
    i += 1
    if not m:
        continue
    stack = []
    while i < len(lines) and (lines[i].startswith(" =>") or "<stack trace>" in lines[i]):
        if lines[i].startswith(" =>"):
            frame = lines[i][4:].strip()
            if "sched" not in frame:  # the scheduler's own frames say nothing
                stack.append(frame)
        i += 1
    t, name, pid, state, npid = float(m.group(1)), m.group(2), m.group(3), m.group(4), m.group(6)
    if npid in asleep:
        since, sname, sstate, sstack = asleep.pop(npid)
        ms = (t - since) * 1000
        if ms >= min_ms and (sstate.startswith("D") or all_states):
            waits[(sname, sstate[0], " < ".join(sstack[:6]))].append(ms)
    if not state.startswith("R"):
        asleep[pid] = (t, name, state, stack)
rows = [(k, v) for k, v in waits.items()
        if not k[0].startswith(("kworker", "rcu_", "ksoftirqd", "migration"))]
rows.sort(key=lambda kv: -sum(kv[1]))
print("%6s %10s %9s  %-16s %s" % ("count", "total ms", "p50 ms", "task", "state, stack (innermost first)"))
for (name, state, stack), v in rows[:top]:
    v.sort()
    print("%6d %10.2f %9.2f  %-16s %s %s" % (len(v), sum(v), v[len(v) // 2], name, state, stack))
PY
exit $rc
