# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# check_limits.sh — the limits on cgroup v2, as tests/integration/test_limits.py
# asserts them on the v1 host: memory (oom, 137), pids (a fork bomb stops),
# cpu (a ceiling) and no cgroup left after the runs. The developer runs
# sbx-helper in a delegated scope.

# The bombs are test_limits.py's MEMORY_BOMB and FORK_BOMB, copied on purpose:
# the guest has no ctest tree, and the same script on v2 as on v1 is what
# makes the two results comparable. A change to one belongs in both.
MEMORY_BOMB='
chunks = []
for i in range(1, 4097):
    b = bytearray(1 << 20)
    for j in range(0, len(b), 4096):
        b[j] = 1
    chunks.append(b)
    print(i, flush=True)
print("SURVIVED")
'
FORK_BOMB='
import errno, os, time
made = 0
try:
    while made < 1000:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        made += 1
    print("NOFAIL", made)
except OSError as e:
    print("FAILED", made, type(e).__name__, errno.errorcode.get(e.errno, e.errno), flush=True)
'
# N processes spinning for T seconds; prints their CPU time in ms.
BUSY='
import os, sys, time
n, t = int(sys.argv[1]), float(sys.argv[2])
for _ in range(n):
    if os.fork() == 0:
        end = time.monotonic() + t
        while time.monotonic() < end:
            pass
        os._exit(0)
for _ in range(n):
    os.wait()
c = os.times()
print(int((c.children_user + c.children_system) * 1000))
'

check_limits_memory() {
    local d rc=0 reason
    d=$(dev_tmp)
    helper_run scope "$d" '{"image": "host", "limits": {"memory_mb": 64, "script_seconds": 120}}' \
        "$PY" -c "$MEMORY_BOMB" || rc=$?
    reason=$(json_get "$d/result.json" exit_reason)
    if [ "$rc" != 137 ] || [ "$reason" != oom ]; then
        printf 'memory_mb 64 bomb: exit %s (want 137), exit_reason "%s" (want oom); %s' \
            "$rc" "$reason" "$(why "$d/stderr")"
        rm -rf "$d"; return 1
    fi
    if grep -q SURVIVED "$d/stdout"; then echo "the bomb survived"; rm -rf "$d"; return 1; fi
    printf 'exit 137, oom after %s MiB, peak %s bytes' "$(tail -n 1 "$d/stdout")" \
        "$(json_get "$d/result.json" peak_memory_bytes)"
    rm -rf "$d"
}

check_limits_pids() {
    local d rc=0 words left
    d=$(dev_tmp)
    helper_run scope "$d" '{"image": "host", "limits": {"pids": 32, "script_seconds": 120}}' \
        "$PY" -c "$FORK_BOMB" || rc=$?
    read -r -a words < "$d/stdout" || true
    left=$(pgrep -a -u "$DEV" -f 'made = 0' | paste -sd ' ' || true)
    if [ "$rc" != 0 ] || [ "${words[0]:-}" != FAILED ]; then
        printf 'pids 32 fork bomb: exit %s, printed "%s"; %s' "$rc" "${words[*]:-}" "$(why "$d/stderr")"
        rm -rf "$d"; return 1
    fi
    if [ "${words[1]}" -ge 32 ] || [ "${words[1]}" -lt 16 ]; then
        printf 'the fork bomb made %s processes under pids 32' "${words[1]}"; rm -rf "$d"; return 1
    fi
    if [ -n "$left" ]; then printf 'processes left after the run: %s' "$left"; rm -rf "$d"; return 1; fi
    printf 'stopped after %s forks (%s), nothing left' "${words[1]}" "${words[*]:2}"
    rm -rf "$d"
}

check_limits_cpu() {
    local d rc=0 ms wall
    d=$(dev_tmp)
    # Two spinners for 3 s under half a CPU: at most 1.5 s of CPU, plus a
    # period of slack. Only the ceiling is asserted (a busy host gives less).
    helper_run scope "$d" '{"image": "host", "limits": {"cpu": 0.5, "script_seconds": 120}}' \
        "$PY" -c "$BUSY" 2 3 || rc=$?
    ms=$(head -n 1 "$d/stdout" 2>/dev/null || true)
    wall=$(json_get "$d/result.json" wall_ms)
    if [ "$rc" != 0 ] || ! [[ $ms =~ ^[0-9]+$ ]]; then
        fail_run "cpu 0.5, two spinners" "$d" "$rc"; rm -rf "$d"; return 1
    fi
    if [ "$ms" -gt 1800 ] || [ "$ms" -lt 50 ]; then
        printf 'two spinners for 3 s under cpu 0.5 used %s ms of CPU (want 50..1800)' "$ms"
        rm -rf "$d"; return 1
    fi
    printf '%s ms of CPU in %s ms under cpu 0.5 (two spinners)' "$ms" "$wall"
    rm -rf "$d"
}

# An exec killed at its deadline loses its init's report (and with it its
# rusage); cpu_ms is then the leaf's own count, which still has the killed
# spinner: cpu.stat on v2, cpuacct.usage on v1 where cpuacct is mounted
# with cpu (systemd's hybrid layout; the V1 list runs this check there).
check_limits_deadline_cpu() {
    local d rc=0 ms wall
    d=$(dev_tmp)
    helper_run scope "$d" '{"image": "host", "limits": {"script_seconds": 2}}' \
        "$PY" -c "$BUSY" 1 600 || rc=$?
    ms=$(json_get "$d/result.json" cpu_ms)
    if [ "$rc" != 124 ] || ! [[ $ms =~ ^[0-9]+$ ]]; then
        fail_run "a spinner past script_seconds 2 (want 124)" "$d" "$rc"; rm -rf "$d"; return 1
    fi
    wall=$(json_get "$d/result.json" wall_ms)
    # One spinner for ~2 s: at least a quarter of its wall time, at most
    # all of it (a count in the wrong unit, or of nothing, does not fit).
    if ! [[ $wall =~ ^[0-9]+$ ]] || [ "$ms" -lt $((wall / 4)) ] || [ "$ms" -gt $((wall + 500)) ]; then
        printf 'a spinner killed at its 2 s deadline reported cpu_ms %s in wall_ms %s (want between a quarter of it and all of it)' "$ms" "$wall"
        rm -rf "$d"; return 1
    fi
    printf 'timeout 124 at script_seconds 2, cpu_ms %s from the leaf' "$ms"
    rm -rf "$d"
}

check_limits_no_cgroup_left() {
    local d before new rc
    d=$(dev_tmp)
    before=$(mktemp)
    cgroup_tree > "$before"
    local runs=0 bad=0
    for pol in '{"image":"host"}' '{"image":"host","limits":{"memory_mb":32,"script_seconds":60}}'; do
        rc=0
        helper_run scope "$d" "$pol" "$PY" -c 'x = bytearray(64 << 20); print(len(x))' || rc=$?
        runs=$((runs + 1))
        [ "$rc" = 0 ] || [ "$rc" = 137 ] || bad=$((bad + 1))
    done
    sleep 1   # systemd removes an ended scope's cgroup asynchronously
    new=$(cgroup_new_since "$before" | paste -sd ' ')
    { echo "cgroups before:"; cat "$before"; echo "cgroups after:"; cgroup_tree; } >> "$LOG"
    rm -f "$before"
    if [ "$bad" != 0 ]; then
        printf '%s of %s runs failed to run at all: %s' "$bad" "$runs" "$(fail_run run "$d" "$rc")"
        rm -rf "$d"; return 1
    fi
    rm -rf "$d"
    [ -z "$new" ] || { printf 'cgroups left after %s runs: %s' "$runs" "$new"; return 1; }
    printf '%s runs (one oom), no cgroup left' "$runs"
}
