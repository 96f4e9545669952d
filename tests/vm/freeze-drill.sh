#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# freeze-drill.sh [--build-dir DIR] — run by hand, as root (about 4 minutes):
# packaging/vm/run.sh's answer to a guest that freezes, which CI cannot
# afford to rehearse on every run. It boots the VM stage with side_gc only (18 s)
# and --stall 30 and, once the guest has started its checks, stops the
# guest's CPUs through qemu's monitor (`stop`: a TCG that hung looks so from
# outside). Twice:
#   1. --freeze-retries 1: run.sh must say the guest froze, keep that boot's
#      logs (frozen-boot-1 with qemu's view of the CPUs) and pass on a second
#      boot, saying so;
#   2. --freeze-retries 0: it must fail (exit 1) saying the guest froze.
# Then a live guest gets the NMI run.sh sends a frozen one: its kernel must
# panic with every CPU's backtrace on the console (guest.sh's sysctls).
# ok and bad always return 0: "A && ok || bad" is an if-else here.
# shellcheck disable=SC2015
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=$REPO/build
case "${1:-}" in
    --build-dir) BUILD=$2 ;;
    -h|--help) sed -n '3,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    "") ;;
    *) echo "freeze-drill: unknown argument: $1" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "freeze-drill: needs root" >&2; exit 1; }

OUT=$(mktemp -d /tmp/sbx-test-freeze.XXXXXX)
failures=0
ok() { echo "freeze-drill: ok: $*"; }
bad() { echo "freeze-drill: FAIL: $*"; failures=$((failures + 1)); }

# The work directory run.sh made after MARK whose guest has said
# SBXVM-START: its monitor socket is the one to talk to.
new_workdir() {
    local mark=$1 d
    for _ in $(seq 1 300); do
        for d in /var/tmp/sbx-vm.*; do
            [ "$d" -nt "$mark" ] && [ -S "$d/monitor.sock" ] \
                && grep -q SBXVM-START "$d/results.log" 2>/dev/null \
                && { printf '%s\n' "$d"; return 0; }
        done
        sleep 1
    done
    return 1
}
monitor() {   # monitor SOCKET COMMAND
    /usr/bin/python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); time.sleep(0.5)
s.sendall(sys.argv[2].encode() + b"\n"); time.sleep(0.5)' "$1" "$2"
}

# drill N: run.sh with --freeze-retries N, the guest stopped once it starts.
drill() {
    local retries=$1 log=$OUT/run-$1.log mark=$OUT/mark-$1 rc=0 pid work
    touch "$mark"
    sleep 1
    bash "$REPO/packaging/vm/run.sh" --build-dir "$BUILD" --checks '^side_gc$' \
        --stall 30 --freeze-retries "$retries" > "$log" 2>&1 &
    pid=$!
    if ! work=$(new_workdir "$mark"); then
        kill "$pid" 2>/dev/null || true
        bad "retries $retries: the guest never started"
        return
    fi
    monitor "$work/monitor.sock" stop
    echo "freeze-drill: retries $retries: stopped the guest of $work"
    wait "$pid" || rc=$?
    sed 's/^/    /' "$log"
    if [ "$retries" = 1 ]; then
        [ "$rc" = 0 ] && ok "retries 1: passed on the second boot" || bad "retries 1: exit $rc"
        grep -q 'it froze' "$log" && ok "retries 1: said it froze" || bad "retries 1: no 'it froze'"
        grep -q 'passed on boot 2; boot 1 froze' "$log" && ok "retries 1: said the pass came after a freeze" \
            || bad "retries 1: no 'passed on boot 2; boot 1 froze'"
        if grep -q 'CPU #' "$work/frozen-boot-1/frozen.monitor.txt" 2>/dev/null; then
            ok "retries 1: kept qemu's view of the CPUs"
        else
            bad "retries 1: no $work/frozen-boot-1/frozen.monitor.txt naming the CPUs"
        fi
        # Each CPU's RIP named by the guest's own symbols (kallsyms.txt),
        # or as user space.
        if [ "$(grep -cE 'CPU [01]: RIP [0-9a-f]+ ([A-Za-z_.0-9]+\+0x|user space)' "$log")" = 2 ]; then
            ok "retries 1: both CPUs' RIPs named: $(grep -E 'CPU [01]: RIP' "$log" | tr -s ' ' | paste -sd '|')"
        else
            bad "retries 1: the CPUs' RIPs not named by symbol"
        fi
        rm -rf "$work"
    else
        [ "$rc" = 1 ] && ok "retries 0: exit 1" || bad "retries 0: exit $rc, want 1"
        grep -q 'the guest froze' "$log" && ok "retries 0: said the guest froze" || bad "retries 0: no 'the guest froze'"
        rm -rf "$work"
    fi
}

drill 1
drill 0

# A live guest and the NMI: a kernel panic with the backtraces.
mark=$OUT/mark-nmi
touch "$mark"
sleep 1
rc=0
bash "$REPO/packaging/vm/run.sh" --build-dir "$BUILD" --checks '^side_gc$' \
    --freeze-retries 0 > "$OUT/run-nmi.log" 2>&1 &
pid=$!
if work=$(new_workdir "$mark"); then
    # After the first heartbeat: guest.sh has set its sysctls by then.
    for _ in $(seq 1 60); do grep -q SBXVM-ALIVE "$work/results.log" && break; sleep 1; done
    monitor "$work/monitor.sock" nmi
    wait "$pid" || rc=$?
    if [ "$rc" = 1 ] && grep -q 'Kernel panic - not syncing: NMI' "$work/console.log" \
        && grep -q 'NMI backtrace for cpu 1' "$work/console.log"; then
        ok "an NMI panics the live guest with every CPU's backtrace"
    else
        bad "the NMI: exit $rc, console: $(tr -d '\r' < "$work/console.log" | grep -m3 -E 'NMI|panic' | paste -sd '|') (kept: $work)"
        work=
    fi
    [ -z "$work" ] || rm -rf "$work"
else
    kill "$pid" 2>/dev/null || true
    bad "nmi: the guest never started"
fi

rm -rf "$OUT"
if [ "$failures" = 0 ]; then echo "freeze-drill: passed"; else echo "freeze-drill: $failures failed"; exit 1; fi
