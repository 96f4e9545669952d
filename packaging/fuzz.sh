#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# fuzz.sh — build the libFuzzer targets (tests/fuzz/) and run each for a
# bounded time on its seed corpus.
#
# The build is clang with ASan+UBSan and -DSBX_FUZZ=ON in its own build
# directory. Each target starts from tests/fuzz/corpus/<name>/ (read only)
# and keeps what it finds in <build>/fuzz/corpus/<name>/, so a later run goes
# on from there. A crash, leak, timeout or out-of-memory input is written to
# <build>/fuzz/crashes/<name>-<kind>-<sha1>; the exit status is then 1.
set -euo pipefail

PROG=fuzz
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGETS=(policy request pbjson ctlmsg config egress_head unpack nul_walk deny_packet elf_needed)

usage() {
    cat <<EOF
Usage: packaging/fuzz.sh [--seconds N] [--build-dir DIR] [--no-build] [TARGET...]

Builds the fuzz targets and runs each for N seconds (default 12: the ten
take about two minutes). Targets: ${TARGETS[*]} (default: all).

  --seconds N      time per target (longer on demand, e.g. --seconds 600)
  --build-dir DIR  build directory (default: <repo>/build-fuzz)
  --no-build       use the targets already built in DIR
  -h, --help       this text

Reproduce a crash: DIR/tests/fuzz/fuzz_<target> DIR/fuzz/crashes/<file>
EOF
}

say() { printf '%s: %s\n' "$PROG" "$*"; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 2; }

SECONDS_EACH=12
BUILD_DIR=$REPO/build-fuzz
DO_BUILD=1
WANT=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds)     [ $# -ge 2 ] || die "--seconds needs a number"; SECONDS_EACH=$2; shift 2 ;;
        --seconds=*)   SECONDS_EACH=${1#--seconds=}; shift ;;
        --build-dir)   [ $# -ge 2 ] || die "--build-dir needs a directory"; BUILD_DIR=$2; shift 2 ;;
        --build-dir=*) BUILD_DIR=${1#--build-dir=}; shift ;;
        --no-build)    DO_BUILD=0; shift ;;
        -h|--help)     usage; exit 0 ;;
        -*)            usage >&2; die "unknown argument: $1" ;;
        *)             WANT+=("$1"); shift ;;
    esac
done
[[ $SECONDS_EACH =~ ^[1-9][0-9]*$ ]] || die "--seconds wants a positive number, not '$SECONDS_EACH'"
if [ ${#WANT[@]} -gt 0 ]; then
    for t in "${WANT[@]}"; do
        [[ " ${TARGETS[*]} " == *" $t "* ]] || die "no fuzz target '$t' (have: ${TARGETS[*]})"
    done
    TARGETS=("${WANT[@]}")
fi

if [ "$DO_BUILD" = 1 ]; then
    command -v clang >/dev/null || die "clang is needed (apt-get install clang)"
    say "configuring $BUILD_DIR (clang, ASan+UBSan, libFuzzer)"
    cmake -S "$REPO" -B "$BUILD_DIR" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
          -DSBX_SANITIZE=address -DSBX_FUZZ=ON >/dev/null
    say "building: cmake --build $BUILD_DIR -j2 --target sbx_fuzz"
    cmake --build "$BUILD_DIR" -j2 --target sbx_fuzz
fi

WORK=$BUILD_DIR/fuzz
CRASHES=$WORK/crashes
mkdir -p "$CRASHES"
# Leaks are findings; a target that waits on a socket is a timeout, not a hang.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

failed=()
for t in "${TARGETS[@]}"; do
    bin=$BUILD_DIR/tests/fuzz/fuzz_$t
    [ -x "$bin" ] || die "$bin is not built"
    seeds=$REPO/tests/fuzz/corpus/$t
    corpus=$WORK/corpus/$t
    log=$WORK/$t.log
    mkdir -p "$corpus"
    args=(-max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
          -artifact_prefix="$CRASHES/$t-")
    [ -f "$REPO/tests/fuzz/$t.dict" ] && args+=(-dict="$REPO/tests/fuzz/$t.dict")
    before=$(find "$CRASHES" -maxdepth 1 -name "$t-*" | sort)
    rc=0
    # The outer timeout is for a fuzzer that stops answering altogether.
    timeout --kill-after=10 $((SECONDS_EACH + 120)) \
        "$bin" "${args[@]}" "$corpus" "$seeds" >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    inputs=$(find "$corpus" -type f | wc -l)
    if [ "$rc" = 0 ]; then
        say "$t: ok, ${execs:-?} executions in ${SECONDS_EACH}s, corpus $inputs inputs"
        continue
    fi
    failed+=("$t")
    found=$(comm -13 <(printf '%s\n' "$before") <(find "$CRASHES" -maxdepth 1 -name "$t-*" | sort) \
            | tr '\n' ' ')
    kind=crash
    grep -q 'ERROR: LeakSanitizer' "$log" && kind=leak
    grep -q 'ERROR: libFuzzer: timeout' "$log" && kind=timeout
    grep -q 'ERROR: libFuzzer: out-of-memory' "$log" && kind=out-of-memory
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then kind="hang (killed after $((SECONDS_EACH + 120))s)"; fi
    say "$t: FAILED ($kind, exit status $rc) after ${execs:-?} executions; input: ${found:-none written}"
    grep -E '^(==[0-9]+==ERROR|fuzz: |SUMMARY|    #[0-9]+ )' "$log" | head -14 | sed 's/^/    /'
    say "$t: the whole log is $log"
done

if [ ${#failed[@]} -gt 0 ]; then
    say "failed: ${failed[*]}"
    exit 1
fi
say "all ${#TARGETS[@]} targets ok"
