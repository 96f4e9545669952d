# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# check_exec_leaf.sh — how exec init gets into its cgroup leaf on cgroup v2:
# born in it (clone3 with CLONE_INTO_CGROUP; `run --timings` marks in_leaf),
# or, where clone3 is refused (no_clone3.py: ENOSYS, as kernels before 5.3
# and Docker's seccomp profile give), cloned as before and joining it. Either
# way the command is in its own leaf, confined, from its first instruction.

LEAF_POLICY='{"image": "host", "mounts": [{"path": "/data", "mode": "ro"}], "limits": {"script_seconds": 60}}'
LEAF_MARKER=sbx-vm-leaf-4242
# What confines the command, then a hold until the check has looked at it.
LEAF_HOLD="grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; while [ ! -e /data/go ]; do sleep 0.05; done"

# leaf_run DIR: runs LEAF_HOLD as the developer in a delegated scope (under
# DEV_WRAP when set) with --timings DIR/timings; while it holds, copies the
# command's /proc/PID/cgroup (the host's view) to DIR/cgroup. Returns the
# helper's status.
leaf_run() {
    local d=$1 rc=0 pid bg
    mkdir "$d/data"
    chown "$DEV:$DEV" "$d/data"
    put_policy "$d/policy.json" "$LEAF_POLICY"
    as_dev_scope "$HELPER" run --policy "$d/policy.json" --data "$d/data" \
        --result "$d/result.json" --timings "$d/timings" \
        -- /bin/sh -c "$LEAF_HOLD" "$LEAF_MARKER" > "$d/stdout" 2> "$d/stderr" < /dev/null &
    bg=$!
    for _ in $(seq 1 600); do
        # the held sh itself (its $0 the marker), not the helper or the login
        pid=$(ps -ww -eo pid=,args= | awk -v m="$LEAF_MARKER" \
            '$2 == "/bin/sh" && $3 == "-c" && $NF == m { print $1; exit }')
        [ -n "$pid" ] && cat "/proc/$pid/cgroup" > "$d/cgroup" 2> /dev/null && break
        kill -0 "$bg" 2> /dev/null || break
        sleep 0.1
    done
    touch "$d/data/go"
    wait "$bg" || rc=$?
    {
        echo "== sbx-helper run --timings (${DEV_WRAP[*]:-no wrapper}): exit $rc"
        echo "-- stdout"; cat "$d/stdout"
        echo "-- stderr"; head -c 4000 "$d/stderr"
        echo "-- the command's cgroup"; cat "$d/cgroup" 2> /dev/null || echo "(never seen)"
        echo "-- timings"; cat "$d/timings" 2> /dev/null || echo "(none)"
    } >> "$LOG"
    return "$rc"
}

# ms between two marks of DIR/timings ("?" when one is missing). Marks of
# different processes may cross (exec init born in its leaf marks joined
# before pid 1 marks exec_ns): leaf to joined always runs forward.
leaf_ms() {
    awk -v a="$2" -v b="$3" '$1 == a { x = $2 } $1 == b { y = $2 }
        END { if (x && y) printf "%.2f", (y - x) / 1e6; else printf "?" }' "$1/timings"
}

# leaf_confined DIR: the held command's status (leaf_run's stdout) says
# the filter, no_new_privs and no effective capability; else says what.
leaf_confined() {
    if ! grep -q '^Seccomp:[[:space:]]*2' "$1/stdout" ||
        ! grep -q '^NoNewPrivs:[[:space:]]*1' "$1/stdout" ||
        ! grep -q '^CapEff:[[:space:]]*0*$' "$1/stdout"; then
        printf 'the command is not confined: %s' "$(paste -sd ' ' "$1/stdout")"
        return 1
    fi
}

# leaf_check DIR WANT_IN_LEAF(yes|no): the run's status, its leaf, its
# confinement and whether in_leaf was marked; prints what it saw.
leaf_check() {
    local d=$1 want=$2 rc=0 path marked=no
    leaf_run "$d" || rc=$?
    if [ "$rc" != 0 ]; then fail_run "run -- sh (held)" "$d" "$rc"; return 1; fi
    path=$(awk -F: '$1 == "0" { print $3 }' "$d/cgroup" 2> /dev/null)
    if ! [[ $path =~ /sbx-[0-9]+-[0-9a-f]{8}/exec-[0-9]+$ ]]; then
        printf 'the command is not in its exec leaf: cgroup "%s"' "${path:-never seen}"
        return 1
    fi
    leaf_confined "$d" || return 1
    grep -q '^in_leaf ' "$d/timings" && marked=yes
    if ! grep -q '^joined ' "$d/timings" || [ "$marked" != "$want" ]; then
        printf 'want in_leaf marked: %s, got %s (marks: %s)' "$want" "$marked" \
            "$(cut -d' ' -f1 "$d/timings" 2> /dev/null | paste -sd ' ')"
        return 1
    fi
    printf 'in %s, confined, in_leaf marked: %s; leaf made to exec init in it %s ms' \
        "${path#/}" "$marked" "$(leaf_ms "$d" leaf joined)"
}

check_exec_leaf_born() {
    local d rc=0
    d=$(dev_tmp)
    leaf_check "$d" yes || rc=$?
    rm -rf "$d"
    return "$rc"
}

check_exec_leaf_no_clone3() {
    local d rc=0
    d=$(dev_tmp)
    # Loaded by root without no_new_privs, as a container runtime does:
    # newuidmap under it still works.
    DEV_WRAP=("$PY" "$SBX/tests/vm/no_clone3.py")
    leaf_check "$d" no || rc=$?
    DEV_WRAP=()
    rm -rf "$d"
    return "$rc"
}
