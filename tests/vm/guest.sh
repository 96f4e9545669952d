#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# guest.sh — the VM stage inside the guest (started at boot by
# sbx-vm-checks.service, packaging/vm/customize.sh): runs the checks in
# order, each under a timeout, prints one line per check and then
# "SBXVM-DONE N passed, N failed" on the second serial port, which
# packaging/vm/run.sh reads; the unit then powers the VM off.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$HERE/lib.sh"

# Written by run.sh: CHECKS (an extended regex of names), CHECK_TIMEOUT.
CHECKS=.
CHECK_TIMEOUT=240
# shellcheck disable=SC1091
[ -f "$SBX/vm.conf" ] && . "$SBX/vm.conf"

# The order matters: the developer's checks before sbxd's unit exists, the
# stop after sbxd's, the packages after both (install to purge, in order),
# the benchmark last on a quiet system.
ALL=(env_guest side_oneway side_gc side_routes
     helper_check_scope helper_run_scope helper_scope_asked_once
     helper_cgroup_root_not_trusted helper_asks_for_itself helper_mark_is_the_owners
     helper_check_plain helper_run_plain
     helper_unit_refused egress_kernel exec_leaf_born exec_leaf_no_clone3
     limits_memory limits_pids limits_cpu limits_deadline_cpu limits_no_cgroup_left
     sbxctl_private_scope sbxctl_private_plain dev_clean
     sbxd_unit_reconcile sbxd_unit_memory sbxd_exec_leaf_prepared sbxd_unit_epoll sbxd_egress_deny
     image_pinned sbxd_stop_clean
     package_install package_reconcile package_metrics package_drain package_reload package_pool package_purge
     perf_ratio perf_ratio_no_clone3 perf_ratio_plain perf_sbxd)
# Booted with systemd's hybrid layout (run.sh --kernel-args
# systemd.unified_cgroup_hierarchy=0: cgroup v1 controllers, as a Debian 12
# host configured so runs them): the delegation packaging/setup.sh makes on
# such a host, then the developer's checks that hold on v1 (check_v1.sh).
V1=(v1_delegate v1_oneshot v1_exec_leaf
    limits_memory limits_pids limits_cpu limits_deadline_cpu limits_no_cgroup_left
    move_cost)
# Chosen by what the boot asked for, not by what came up: a systemd that
# ignored the option (v256 dropped v1) fails v1_delegate, saying so.
if grep -qw 'systemd.unified_cgroup_hierarchy=0' /proc/cmdline; then
    ALL=("${V1[@]}")
fi
# Informational: printed, never counted as passed or failed.
INFO=" perf_ratio perf_ratio_no_clone3 perf_ratio_plain perf_sbxd move_cost "

mkdir -p "$LOGS"
cgroup_tree > "$LOGS/cgroups.start"
# What the host needs to tell a guest that froze from a check that outran its
# timeout (packaging/vm/run.sh watches this port): a heartbeat every 15 s
# naming the running check and its seconds so far. A check still running 30 s
# past its timeout (the timeout could not end it: a process in the kernel for
# good) leaves the process table in the logs once, synced, for the host to
# keep. An NMI from the host (run.sh, when the heartbeat stops) panics the
# kernel with every CPU's backtrace on the console, where the bare "NMI
# received for unknown reason" would say nothing; the kernels that lack a
# knob keep their default.
sysctl -q -w kernel.unknown_nmi_panic=1 2>/dev/null || true
sysctl -q -w kernel.panic_print=64 2>/dev/null || true
# The kernel's text symbols where they are this boot (KASLR), synced before
# the first line: what run.sh names a frozen CPU's RIP by (Debian's
# System.map is a stub).
awk '$2 == "t" || $2 == "T" { print $1, $3 }' /proc/kallsyms > "$LOGS/kallsyms.txt" 2>/dev/null || true
sync
CURRENT=/run/sbxvm-current
heartbeat() {
    local cur name t0 dumped=
    while sleep 15; do
        cur=$(cat "$CURRENT" 2>/dev/null || true)
        name=${cur% *}
        t0=${cur##* }
        if [ -z "$cur" ]; then
            echo "SBXVM-ALIVE $(cut -d' ' -f1 /proc/uptime)"
            continue
        fi
        echo "SBXVM-ALIVE $(cut -d' ' -f1 /proc/uptime) $name $(( $(date +%s) - t0 ))"
        if [ "$dumped" != "$cur" ] && [ $(( $(date +%s) - t0 )) -gt $(( CHECK_TIMEOUT + 30 )) ]; then
            dumped=$cur
            ps -eo pid,ppid,stat,wchan:32,etimes,args > "$LOGS/stuck-$name.txt" 2>&1 || true
            sync
            echo "SBXVM-STUCK $name: still running $(( $(date +%s) - t0 )) s after its start (timeout $CHECK_TIMEOUT s); the process table is in logs/stuck-$name.txt"
        fi
    done
}
heartbeat &
HEARTBEAT=$!
echo "SBXVM-START $(uname -r), $(systemctl --version | head -n 1), uptime $(cut -d' ' -f1 /proc/uptime) s"

# The developer's user manager comes up with logind (linger); checks that
# use it would otherwise race it.
for _ in $(seq 1 60); do
    systemctl is-active --quiet "user@$DEV_UID.service" && break
    sleep 1
done


passed=0
failed=0
for name in "${ALL[@]}"; do
    [[ $name =~ $CHECKS ]] || continue
    t0=$(date +%s)
    echo "$name $t0" > "$CURRENT"
    rc=0
    line=$(timeout -k 10 "$CHECK_TIMEOUT" bash "$HERE/run-check.sh" "$name" 2>> "$LOGS/guest.err") || rc=$?
    if [ "$rc" = 124 ] || [ "$rc" = 137 ] || [ -z "$line" ]; then
        line="FAIL $name: timed out after $CHECK_TIMEOUT s (or died: status $rc)"
    fi
    line="$line [$(( $(date +%s) - t0 )) s]"
    if [[ $INFO == *" $name "* ]]; then
        line="INFO ${line#* }"
    elif [[ $line == PASS* ]]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
    printf '%s\n' "$line" | tee -a "$LOGS/results.txt"
done

rm -f "$CURRENT"
kill "$HEARTBEAT" 2>/dev/null || true
wait "$HEARTBEAT" 2>/dev/null || true
journalctl -b --no-pager > "$LOGS/journal.txt" 2>&1 || true
sync
echo "SBXVM-DONE $passed passed, $failed failed"
sync
