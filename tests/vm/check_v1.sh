# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# check_v1.sh — the guest booted with systemd.unified_cgroup_hierarchy=0
# (packaging/vm/run.sh --kernel-args): systemd's hybrid layout, cgroup v1
# controllers. v1_delegate does what packaging/setup.sh's step_cgroup_v1
# does on a v1 host (memory, pids and cpu subtrees owned by the developer,
# recorded in /etc/sbx/cgroup-root), so that the limits_* checks run on
# v1 (guest.sh's V1 list); v1_exec_leaf is exec_leaf_* for v1 (exec init
# joins its leaf through `tasks`, never born in it; the leaf is read from
# the memory, pids and cpu lines of /proc/PID/cgroup, not "0::").

V1_ROOT=sbx-$DEV

check_v1_delegate() {
    local c d mnt
    mnt=$(awk '$2 == "/sys/fs/cgroup" { print $3 }' /proc/mounts)
    {
        echo "cmdline: $(cat /proc/cmdline)"
        echo "/sys/fs/cgroup: $mnt"; grep -E ' cgroup2? ' /proc/mounts
        ls -l /sys/fs/cgroup
        echo "root's /proc/self/cgroup:"; cat /proc/self/cgroup
        echo "dev's:"; as_dev cat /proc/self/cgroup
        grep -E 'Swap(Total|Free)' /proc/meminfo
    } >> "$LOG" 2>&1
    [ "$mnt" = tmpfs ] || { echo "/sys/fs/cgroup is '$mnt', not v1's tmpfs (boot with --kernel-args systemd.unified_cgroup_hierarchy=0)"; return 1; }
    for c in memory pids cpu; do
        [ "$(stat -fc %T "/sys/fs/cgroup/$c/")" = cgroupfs ] || { echo "no v1 $c hierarchy"; return 1; }
        d=/sys/fs/cgroup/$c/$V1_ROOT
        mkdir -p "$d"
        chown -R "$DEV:$DEV" "$d"
        runuser -u "$DEV" -- mkdir "$d/probe" && runuser -u "$DEV" -- rmdir "$d/probe" \
            || { echo "$DEV cannot make a cgroup under $d"; return 1; }
    done
    install -d -m 0755 /etc/sbx
    printf '%s\n' "$V1_ROOT" > /etc/sbx/cgroup-root
    chmod 0644 /etc/sbx/cgroup-root
    {
        echo "memory files:"; ls "/sys/fs/cgroup/memory/$V1_ROOT" | grep -E 'memsw|kmem.tcp|use_hierarchy'
        echo "use_hierarchy: $(cat /sys/fs/cgroup/memory/$V1_ROOT/memory.use_hierarchy)"
        echo "== sbx-helper check (scope)"; as_dev_scope "$HELPER" check
    } >> "$LOG" 2>&1 < /dev/null
    printf 'kernel %s, %s; memory,pids,cpu at /%s owned by %s (%s)' "$(uname -r)" \
        "$(grep -o 'systemd.unified_cgroup_hierarchy=[^ ]*' /proc/cmdline)" "$V1_ROOT" "$DEV" \
        "$(ls -ld /sys/fs/cgroup/cpu | awk '{ print $NF }' | sed 's:.*/::')"
}

# v1_leaf_check DIR: leaf_run (check_exec_leaf.sh), then the command's
# memory, pids and cpu cgroups must be its exec leaf under V1_ROOT.
v1_leaf_check() {
    local d=$1 rc=0 c path first= marked=no seen=
    leaf_run "$d" || rc=$?
    if [ "$rc" != 0 ]; then fail_run "run -- sh (held)" "$d" "$rc"; return 1; fi
    for c in memory pids cpu; do
        path=$(awk -F: -v c="$c" '{ n = split($2, a, ",");
            for (i = 1; i <= n; i++) if (a[i] == c) { print $3; exit } }' "$d/cgroup" 2> /dev/null)
        if ! [[ $path =~ ^/$V1_ROOT/sbx-[0-9]+-[0-9a-f]{8}/exec-[0-9]+$ ]]; then
            printf 'the command is not in its %s exec leaf: "%s"' "$c" "${path:-never seen}"
            return 1
        fi
        # One leaf, the same in every hierarchy.
        if [ -n "$first" ] && [ "$path" != "$first" ]; then
            printf 'the command is in %s for memory but %s for %s' "$first" "$path" "$c"
            return 1
        fi
        first=$path
        seen="$seen $c"
    done
    leaf_confined "$d" || return 1
    grep -q '^in_leaf ' "$d/timings" && marked=yes
    if ! grep -q '^joined ' "$d/timings" || [ "$marked" != no ]; then
        printf 'want joined marked and in_leaf not, got in_leaf %s (marks: %s)' "$marked" \
            "$(cut -d' ' -f1 "$d/timings" 2> /dev/null | paste -sd ' ')"
        return 1
    fi
    printf 'in %s (%s), confined, joined; exec_ns to joined %s ms, leaf to joined %s ms' \
        "${path#/}" "${seen# }" "$(leaf_ms "$d" exec_ns joined)" "$(leaf_ms "$d" leaf joined)"
}

check_v1_exec_leaf() {
    local d rc=0
    d=$(dev_tmp)
    v1_leaf_check "$d" || rc=$?
    rm -rf "$d"
    return "$rc"
}

# The one-shot, plain (no scope, as a developer's shell runs it).
check_v1_oneshot() {
    local d rc=0
    d=$(dev_tmp)
    helper_run plain "$d" '{"image": "host", "limits": {"script_seconds": 60}}' true || rc=$?
    if [ "$rc" != 0 ]; then fail_run "run -- true" "$d" "$rc"; rm -rf "$d"; return 1; fi
    if [[ $(json_get "$d/result.json" enforced) != *'"cgroup": "v1"'* ]]; then
        printf 'not enforced through v1 cgroups: %s' "$(json_get "$d/result.json" enforced)"
        rm -rf "$d"; return 1
    fi
    printf 'exit 0, enforced %s, cgroup-root %s' "$(json_get "$d/result.json" enforced)" \
        "$(cat /etc/sbx/cgroup-root)"
    rm -rf "$d"
}

# What a self-move costs on this kernel, as the developer: on v1 in the
# memory hierarchy, "0" to `tasks` (the single-thread path: no
# cgroup_threadgroup_rwsem when 9a3284fad42f is in) against the own pid to
# cgroup.procs and to `tasks` (both take it: percpu_down_write, which waits
# for an RCU grace period unless another writer's is still fresh); on v2, in
# children of its own delegated scope, cgroup.procs "0" and pid (both take
# it). Back to back ("tight") and 150 ms apart ("spaced", as one exec per
# run is: rcu_sync back to idle between writers).
MOVE_COST='
import os, sys, time, statistics
base = sys.argv[1]
if base == "v2":
    own = [l.split(":", 2)[2].strip() for l in open("/proc/self/cgroup") if l.startswith("0::")][0]
    base = "/sys/fs/cgroup" + own
    kinds = (("cgroup.procs", "0"), ("cgroup.procs", "pid"))
else:
    kinds = (("tasks", "0"), ("cgroup.procs", "pid"), ("tasks", "pid"))
a, b = base + "/mv-a", base + "/mv-b"
for d in (a, b):
    os.makedirs(d, exist_ok=True)
def move(d, f, what):
    t = time.perf_counter_ns()
    fd = os.open(d + "/" + f, os.O_WRONLY)
    os.write(fd, (str(os.getpid()) if what == "pid" else "0").encode())
    os.close(fd)
    return (time.perf_counter_ns() - t) / 1e6
out = []
for mode, gap, n in (("tight", 0, 30), ("spaced", 0.15, 15)):
    ts = {k: [] for k in kinds}
    for i in range(n):
        for k in kinds:
            if gap:
                time.sleep(gap)
            ts[k].append(move(a if len(ts[k]) % 2 == 0 else b, *k))
    out.append(mode + ": " + ", ".join("%s<-%s p50 %.2f max %.2f" % (k[0], k[1], statistics.median(v), max(v)) for k, v in ts.items()))
fd = os.open(base + "/cgroup.procs", os.O_WRONLY)
os.write(fd, str(os.getpid()).encode())
os.close(fd)
for d in (a, b):
    os.rmdir(d)
print("; ".join(out))
'
check_move_cost() {
    local out rc=0
    if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
        out=$(as_dev_scope "$PY" -c "$MOVE_COST" v2 2>> "$LOG") || rc=$?
    else
        out=$(as_dev "$PY" -c "$MOVE_COST" "/sys/fs/cgroup/memory/$V1_ROOT" 2>> "$LOG") || rc=$?
    fi
    echo "$out" >> "$LOG"
    [ "$rc" = 0 ] || { printf 'exit %s: %s' "$rc" "${out:-no output}"; return 1; }
    printf 'kernel %s, %s' "$(uname -r)" "$out"
}
