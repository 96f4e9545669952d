# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# check_perf.sh — informational, never a failure on time: a one-shot
# `sbx-helper run -- true` against `bwrap --unshare-all --die-with-parent
# --new-session` in this same VM (bench/helper_vs_bwrap.c, alternating), as
# the developer in a delegated scope. Prints the ratio; fails only when the
# benchmark could not run at all (which a failing helper causes).

PERF_RUNS=${PERF_RUNS:-10}

check_perf_ratio() {
    local bench=$BIN/bench/sbx-bench-helper out rc=0 line
    [ -x "$bench" ] || { echo "no $bench on the stage disk"; return 1; }
    out=$(mktemp)
    chmod 0644 "$out"
    as_dev_scope "$bench" -n "$PERF_RUNS" --warmup 2 > "$out" 2>&1 < /dev/null || rc=$?
    { echo "== sbx-bench-helper -n $PERF_RUNS: exit $rc"; cat "$out"; } >> "$LOG"
    if [ "$rc" != 0 ]; then
        printf 'sbx-bench-helper exit %s: %s' "$rc" "$(why "$out")"; rm -f "$out"; return 1
    fi
    line=$(awk '$1 == "true" { printf "true: sbx p50 %s ms, bwrap p50 %s ms, ratio sbx/bwrap %s", $3, $6, $NF }' "$out")
    printf '%s (%s runs each, TCG)' "${line:-$(tail -n 1 "$out")}" "$PERF_RUNS"
    rm -f "$out"
}
