# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# check_perf.sh — informational, never a failure on time: a one-shot
# `sbx-helper run -- true` against `bwrap --unshare-all --die-with-parent
# --new-session` in this same VM (bench/helper_vs_bwrap.c, alternating), as
# the developer in a delegated scope. Prints the ratio and sbx's six largest
# phases (the benchmark's per-phase breakdown, whole in the log) and its exec
# cgroup phase; fails only when the benchmark could not run at all (which a
# failing helper causes). perf_ratio_no_clone3 runs it under no_clone3.py
# (clone3 refused, as Docker's seccomp profile does): exec init then joins
# its leaf after birth instead of being born in it (check_exec_leaf.sh);
# perf_ratio_plain outside any scope (below).

PERF_RUNS=${PERF_RUNS:-10}

check_perf_ratio_no_clone3() {
    local rc=0
    DEV_WRAP=("$PY" "$SBX/tests/vm/no_clone3.py")
    check_perf_ratio || rc=$?
    DEV_WRAP=()
    return "$rc"
}

# perf_ratio_plain: the same from dev's login with no scope around it, as
# after an ssh login: each one-shot asks the user manager for a scope of its
# own (StartTransientUnit) and waits for it.
check_perf_ratio_plain() { PERF_RUNNER=as_dev check_perf_ratio; }

check_perf_ratio() {
    local exec_cg bench=$BIN/bench/sbx-bench-helper out rc=0 line phases
    [ -x "$bench" ] || { echo "no $bench on the stage disk"; return 1; }
    out=$(mktemp)
    chmod 0644 "$out"
    "${PERF_RUNNER:-as_dev_scope}" "$bench" -n "$PERF_RUNS" --warmup 2 > "$out" 2>&1 < /dev/null || rc=$?
    { echo "== sbx-bench-helper -n $PERF_RUNS: exit $rc"; cat "$out"; } >> "$LOG"
    if [ "$rc" != 0 ]; then
        printf 'sbx-bench-helper exit %s: %s' "$rc" "$(why "$out")"; rm -f "$out"; return 1
    fi
    line=$(awk '$1 == "true" { printf "true: sbx p50 %s ms, bwrap p50 %s ms, ratio sbx/bwrap %s", $3, $6, $NF }' "$out")
    # sbx's phases of `true` (the benchmark's breakdown), largest first:
    # where a one-shot's time goes on cgroup v2.
    phases=$(awk '/^sbx phases of .true./ { on = 1; next }
                  on && /^$/ { on = 0 }
                  on && $1 != "phase" && $1 != "sbx" && $1 != "bwrap" && NF > 3 {
                      name = $1; if ($2 !~ /^[0-9.]+$/) { name = $1 " " $2; $2 = $3 }
                      printf "%s %s\n", $2, name }' "$out" |
             sort -rn | head -n 6 | awk '{ v = $1; $1 = ""; printf "%s%s %s", (NR > 1 ? ", " : ""), substr($0, 2), v }')
    exec_cg=$(awk '/^sbx phases of .true./ { on = 1; next }
                   on && $1 == "exec" && $2 == "cgroup" { print $3; exit }' "$out")
    printf '%s (%s runs each, TCG)%s%s' "${line:-$(tail -n 1 "$out")}" "$PERF_RUNS" \
        "${phases:+; sbx phases p50 ms: $phases}" "${exec_cg:+; exec cgroup $exec_cg}"
    rm -f "$out"
}

# perf_sbxd: informational too: sbxd's own figures on cgroup v2 (issue 21's
# cold cycle, Exec+Wait and warm pool rows), sbx-bench-sbxd as dev in a
# delegated scope (its private sbxd, ipc, and TLS with certificates from the
# openssl CLI), each stage in its own run: the ipc lines of its table.
check_perf_sbxd() {
    local bench=$BIN/bench/sbx-bench-sbxd out rc stage n lines=""
    [ -x "$bench" ] || { echo "no $bench on the stage disk"; return 1; }
    out=$(mktemp)
    chmod 0644 "$out"
    for stage in cycle:--cycles exec:--execs warm:--warm; do
        n=6
        [ "${stage%%:*}" = exec ] && n=20
        rc=0
        # The guest's 4 GiB hold one of the benchmark's runs beside its pool
        # member only with the memory committed past the host's.
        as_dev_scope "$bench" --only "${stage%%:*}" "${stage#*:}" "$n" \
            --sbxd-config '{"capacity": {"memory_overcommit_percent": 300}}' \
            > "$out" 2>&1 < /dev/null || rc=$?
        { echo "== sbx-bench-sbxd --only ${stage%%:*} ${stage#*:} $n: exit $rc"; cat "$out"; } >> "$LOG"
        if [ "$rc" != 0 ]; then
            printf 'sbx-bench-sbxd --only %s: exit %s: %s' "${stage%%:*}" "$rc" "$(why "$out")"
            rm -f "$out"; return 1
        fi
        # "ipc  MEASURE  P50 ms  P90 ms  PEER P50 ms  P90 ms  RATIO"
        lines+=$(awk '$1 == "ipc" && $(NF-4) ~ /^[0-9.]+$/ {
                          m = ""; for (i = 2; i <= NF - 10; i++) m = m (m ? " " : "") $i
                          printf "%s p50 %s ms (%s %s ms, ratio %s); ", m, $(NF-9), $(NF-5), $(NF-4), $NF }' "$out")
    done
    printf '%s(TCG)' "$lines"
    rm -f "$out"
}
