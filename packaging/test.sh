#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test.sh — build sbx (through setup.sh) and run the whole test suite with ctest.
#
# As root (CI): setup.sh prepares packages, the user sbx-test and its delegated
# cgroups; then the build and ctest run as sbx-test, because sbxd and sbx-helper
# must run unprivileged. If sbx-test cannot read this checkout (e.g. under /root),
# the sources are copied to /var/lib/sbx-test/src and built there.
# Not root: setup.sh (which fails with instructions if packages are missing), then
# ctest in the build directory.
# A whole run (no -R) also checks the formatting first (clang-format, the tree's
# .clang-format), builds the tree with clang after ctest (its warnings as
# errors, -Wthread-safety among them), runs the fuzz targets (packaging/fuzz.sh) and the
# sbxd tests once more under ThreadSanitizer (this script with --sanitize=thread)
# and, as root, the fleet stage (tests/fleet/netns.sh: three sbxd hosts, a DNS
# server and a parent in network namespaces) and the VM stage
# (packaging/vm/run.sh: Debian 12's kernel, systemd and cgroup v2 under qemu,
# with this build's binaries).
# The exit status is the first failing stage's (0 when every stage passed).
set -euo pipefail

PROG="test"
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TEST_USER=sbx-test
TEST_HOME=/var/lib/sbx-test
CGROUP_MNT=/sys/fs/cgroup

usage() {
    cat <<EOF
Usage: packaging/test.sh [--sanitize[=address|thread]] [--no-clang|--clang] [--no-fuzz|--fuzz] [--no-tsan]
                         [--no-netns|--netns] [--no-vm|--vm] [--no-format] [-R REGEX]
                         [-j N] [--help]
                         [-- CTEST_ARGS...]

Checks the C sources' formatting (clang-format --dry-run against .clang-format),
builds sbx with packaging/setup.sh and runs ctest (--timeout 300 --output-on-failure),
then builds the tree again with clang (build-clang, -O0: clang's warnings are
errors too, its -Wthread-safety checks the lock annotations gcc ignores),
then the fuzz targets for a minute (packaging/fuzz.sh, build directory build-fuzz),
then the sbxd tests under ThreadSanitizer (build-tsan), then (as root) the
fleet stage: tests/fleet/netns.sh makes three sbxd hosts, dnsmasq and a parent
in network namespaces (issue 19's test, about a minute), then the VM
stage: packaging/vm/run.sh boots Debian 12 (kernel 6.1, systemd, cgroup v2)
under qemu and runs tests/vm there with this build, then boots it again with
cgroup v1 (systemd.unified_cgroup_hierarchy=0) for the checks that hold there. The later stages' builds
(fuzz, TSan, .debs) run at nice 19 beside ctest. With -R only ctest runs.
As root, the builds, the tests and the fuzzers run as the unprivileged user $TEST_USER.

  --sanitize, --sanitize=address
               ASan+UBSan build in a separate build directory (build-asan),
               run with ASAN_OPTIONS=detect_leaks=1
  --sanitize=thread
               ThreadSanitizer build (build-tsan); a data race fails the test
               whose process it is in (TSAN_OPTIONS halt_on_error=1)
  --no-clang   do not build the tree with clang after ctest
  --clang      build it even with -R (which otherwise skips it)
  --no-fuzz    do not run the fuzz targets after ctest
  --fuzz       run them even with -R (which otherwise skips them)
  --no-tsan    do not run the sbxd tests under ThreadSanitizer after the fuzzers
  --no-netns   do not run the fleet stage (network namespaces)
  --netns      run it even with -R (which otherwise skips it); needs root
  --no-vm      do not run the VM stage
  --vm         run it even with -R (which otherwise skips it); needs root
  --no-format  do not check the formatting
  -R REGEX     only the tests matching REGEX (passed to ctest)
  -j N         tests in parallel (default 3, 2 under a sanitizer: most sbxd
               tests wait on sandboxes and deadlines, so three at a time
               keep two CPUs about half busy; the TSan stage runs two)
  -- ARGS      more arguments for ctest
  -h, --help   this text
EOF
}

say() { printf '%s: %s\n' "$PROG" "$*"; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

SANITIZE=0
CLANG=auto
FUZZ=auto
TSAN=auto
VM=auto
NETNS=auto
FORMAT=auto
REGEX=
JOBS=
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --sanitize|--sanitize=address) SANITIZE=1; shift ;;
        --sanitize=thread) SANITIZE=thread; shift ;;
        --no-clang) CLANG=0; shift ;;
        --clang)    CLANG=1; shift ;;
        --no-fuzz)  FUZZ=0; shift ;;
        --fuzz)     FUZZ=1; shift ;;
        --no-tsan)  TSAN=0; shift ;;
        --no-netns) NETNS=0; shift ;;
        --netns)    NETNS=1; shift ;;
        --no-vm)    VM=0; shift ;;
        --vm)       VM=1; shift ;;
        --no-format) FORMAT=0; shift ;;
        -R)         [ $# -ge 2 ] || die "-R needs a regex"; REGEX=$2; shift 2 ;;
        -R*)        REGEX=${1#-R}; shift ;;
        -j)         [ $# -ge 2 ] || die "-j needs a number"; JOBS=$2; shift 2 ;;
        -j*)        JOBS=${1#-j}; shift ;;
        -h|--help)  usage; exit 0 ;;
        --)         shift; EXTRA=("$@"); break ;;
        *)          usage >&2; die "unknown argument: $1" ;;
    esac
done
JOBS_GIVEN=$JOBS
if [ -z "$JOBS" ]; then
    # Three tests at a time: measured 2026-12-04 on 2 CPUs, ctest took 731 s
    # with user+sys 751 s (the serial tail's ~340 s among them), against
    # 912 s two at a time. A sanitizer multiplies each test's CPU: two.
    if [ "$SANITIZE" = 0 ]; then JOBS=3; else JOBS=2; fi
fi
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "-j wants a positive number, not '$JOBS'"

SETUP_ARGS=()
BUILD_NAME=build
ENVV=()
if [ "$SANITIZE" = 1 ]; then
    SETUP_ARGS+=(--sanitize)
    BUILD_NAME=build-asan
    ENVV+=(ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1)
elif [ "$SANITIZE" = thread ]; then
    # setup.sh knows only the ASan build: its build directory is configured
    # for TSan first (preconfigure), and setup.sh's cmake keeps that cache.
    BUILD_NAME=build-tsan
    # exitcode 66: what TSan uses; sbxd's tests see a process that died.
fi
# A focused run (-R), or a sanitizer build, is for a quick loop: the other
# stages only when asked.
whole=1
if [ -n "$REGEX" ] || [ "$SANITIZE" != 0 ]; then whole=0; fi
[ "$CLANG" != auto ] || CLANG=$whole
[ "$FUZZ" != auto ] || FUZZ=$whole
[ "$TSAN" != auto ] || TSAN=$whole
[ "$VM" != auto ] || VM=$whole
[ "$NETNS" != auto ] || NETNS=$whole
[ "$FORMAT" != auto ] || FORMAT=$whole

# The C sources as clang-format would write them (generated code is not in
# git). Before the build: a formatting slip fails in seconds.
check_format() {
    local files bad
    command -v clang-format >/dev/null || die "clang-format is missing (packaging/setup.sh installs it)"
    if git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
        mapfile -t files < <(git -C "$REPO" ls-files '*.c' '*.h')
    else
        mapfile -t files < <(cd "$REPO" && find . -name 'build*' -prune -o \( -name '*.c' -o -name '*.h' \) -print)
    fi
    bad=$(cd "$REPO" && clang-format --dry-run "${files[@]}" 2>&1 | grep -c 'warning:' || true)
    if [ "$bad" != 0 ]; then
        (cd "$REPO" && clang-format --dry-run "${files[@]}" 2>&1 | grep 'warning:' | cut -d: -f1 | sort -u | sed 's/^/  /') >&2
        die "$bad lines are not formatted as .clang-format says: run clang-format -i on the files above"
    fi
    say "formatting: ${#files[@]} C files as .clang-format says"
}
# The tree under clang (RUNNER...: as_user when root) in build-clang beside
# BUILD_DIR, at -O0: the warnings that matter are the front end's (clang's
# own -Wthread-safety over the REQUIRES annotations, which gcc ignores, and
# those gcc does not have), and such a build takes seconds. Its output goes
# to build-clang/build.log; the errors are shown when it fails.
clang_build() {
    local src=$1 dir log
    shift
    dir=$(dirname "$BUILD_DIR")/build-clang
    log=$dir/build.log
    command -v clang >/dev/null || { say "clang is missing (packaging/setup.sh installs it)"; return 1; }
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown -R "$TEST_USER:$TEST_USER" "$dir"; fi
    if "$@" cmake -S "$src" -B "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug > "$log" 2>&1 &&
        "$@" cmake --build "$dir" -j "$JOBS" >> "$log" 2>&1; then
        return 0
    fi
    grep -E 'error|warning' "$log" | head -40 >&2 || tail -20 "$log" >&2
    say "the clang build failed: $log"
    return 1
}

# After ctest: the clang build, the fuzzers (RUNNER runs them: as_user when root), the sbxd
# tests again in a ThreadSanitizer build, and the VM stage with BUILD_DIR's
# binaries. Exits with the first failing stage's status.
# finish RC FUZZ_DIR SRC_DIR RUNNER...
finish() {
    local rc=$1 fuzz_dir=$2 src=$3 crc=0 frc=0 trc=0 nrc=0 vrc=0 t0 debs=build
    shift 3
    # The later stages' builds, started before ctest (prebuild), are done
    # before the first of those stages runs.
    if [ -n "${PREBUILD_PID:-}" ]; then
        wait "$PREBUILD_PID" || say "a background build failed ($PREBUILD_LOG): the stages build again and show why"
        PREBUILD_PID=
    fi
    if [ "$CLANG" = 1 ]; then
        t0=$(date +%s)
        clang_build "$src" "$@" || crc=$?
        say "clang build exit status $crc ($(( $(date +%s) - t0 )) s)"
        [ "$rc" != 0 ] || rc=$crc
    fi
    if [ "$FUZZ" = 1 ]; then
        (cd "$fuzz_dir" && "$@" bash "$src/packaging/fuzz.sh" --build-dir "$fuzz_dir") || frc=$?
        say "fuzz exit status $frc"
        [ "$rc" != 0 ] || rc=$frc
    fi
    if [ "$TSAN" = 1 ]; then
        bash "$REPO/packaging/test.sh" --sanitize=thread -R '^(sbxd\.(calls|lifecycle|egress_wire|lease|image_run|import)|unit\.(egress\.proxy|common\.sha256_pipe|rpc_pool|rpc_dedupe))$' ${JOBS_GIVEN:+-j "$JOBS"} || trc=$?
        say "thread sanitizer run exit status $trc"
        [ "$rc" != 0 ] || rc=$trc
    fi
    if [ "$NETNS" = 1 ]; then
        # ip netns needs root; the hosts and the clients run as $TEST_USER
        # in its delegated cgroup (netns.sh moves itself there).
        if [ "$(id -u)" = 0 ]; then
            t0=$(date +%s)
            bash "$src/tests/fleet/netns.sh" --build-dir "$BUILD_DIR" --time-limit 600 || nrc=$?
            say "fleet stage exit status $nrc ($(( $(date +%s) - t0 )) s)"
            [ "$rc" != 0 ] || rc=$nrc
        else
            say "fleet stage skipped: it needs root (sudo bash tests/fleet/netns.sh --build-dir $BUILD_DIR)"
        fi
    fi
    if [ "$VM" = 1 ]; then
        # qemu and the image need root (the image's owners, mmdebstrap); a
        # developer without root runs the rest and is told.
        if [ "$(id -u)" = 0 ]; then
            t0=$(date +%s)
            # The package_* checks install the .debs built from this tree
            # (packaging/build-debs.sh): those prebuild made, or (if that
            # failed) run.sh's own build, which shows why.
            if [ -n "${PREBUILD_DEBS:-}" ] && compgen -G "$PREBUILD_DEBS/*.deb" >/dev/null; then
                debs=$PREBUILD_DEBS
            fi
            bash "$REPO/packaging/vm/run.sh" --build-dir "$BUILD_DIR" --debs "$debs" || vrc=$?
            say "VM stage exit status $vrc ($(( $(date +%s) - t0 )) s)"
            [ "$rc" != 0 ] || rc=$vrc
            # The same kernel booted with systemd's hybrid layout: cgroup v1
            # controllers (cpu with cpuacct), as a Debian 12 host set up so
            # runs sbx; guest.sh runs its v1 list there (about 2.5 min).
            t0=$(date +%s)
            vrc=0
            bash "$REPO/packaging/vm/run.sh" --build-dir "$BUILD_DIR" \
                --kernel-args systemd.unified_cgroup_hierarchy=0 || vrc=$?
            say "VM stage on cgroup v1 exit status $vrc ($(( $(date +%s) - t0 )) s)"
            [ "$rc" != 0 ] || rc=$vrc
        else
            say "VM stage skipped: it needs root (sudo bash packaging/vm/run.sh --build-dir $BUILD_DIR)"
        fi
    fi
    exit "$rc"
}

# tsan_env SRC: TSAN_OPTIONS, with the suppressions of races in nng or libc
# (packaging/tsan.supp says why each is there) as the tests' user reads them.
# The caller's TSAN_OPTIONS come last and win (e.g. log_path=DIR/tsan to keep
# every report, halt_on_error=0 to see them all).
tsan_env() {
    local opts="halt_on_error=1 exitcode=66 second_deadlock_stack=1"
    if [ -f "$1/packaging/tsan.supp" ]; then opts+=" suppressions=$1/packaging/tsan.supp"; fi
    ENVV+=("TSAN_OPTIONS=$opts${TSAN_OPTIONS:+ $TSAN_OPTIONS}")
}

ctest_args() {   # ctest_args BUILDDIR: prints one argument per line
    printf '%s\n' --test-dir "$1" --output-on-failure --timeout 300 -j "$JOBS"
    if [ -n "$REGEX" ]; then printf '%s\n' -R "$REGEX"; fi
    if [ ${#EXTRA[@]} -gt 0 ]; then printf '%s\n' "${EXTRA[@]}"; fi
}

# ------------------------------------------------------------ not root
if [ "$(id -u)" != 0 ]; then
    BUILD_DIR=$REPO/$BUILD_NAME
    if [ "$FORMAT" = 1 ]; then check_format; fi
    if [ "$SANITIZE" = thread ]; then
        bash "$REPO/packaging/setup.sh" --no-build
        cmake -S "$REPO" -B "$BUILD_DIR" -DSBX_SANITIZE=thread
        tsan_env "$REPO"
    fi
    bash "$REPO/packaging/setup.sh" --build-dir "$BUILD_DIR" "${SETUP_ARGS[@]}"
    mapfile -t CARGS < <(ctest_args "$BUILD_DIR")
    say "ctest ${CARGS[*]}"
    rc=0
    env "${ENVV[@]}" ctest "${CARGS[@]}" || rc=$?
    say "ctest exit status $rc"
    mkdir -p "$REPO/build-fuzz"
    finish "$rc" "$REPO/build-fuzz" "$REPO" env
fi

# ------------------------------------------------------------ root
# Packages, the user sbx-test and the delegated cgroups; no build as root.
cd /    # root's working directory may be unreadable for sbx-test
bash "$REPO/packaging/setup.sh" --no-build "${SETUP_ARGS[@]}"
if [ "$FORMAT" = 1 ]; then check_format; fi

as_user() { runuser -u "$TEST_USER" -- env HOME="$TEST_HOME" TMPDIR=/tmp "${ENVV[@]}" "$@"; }

if as_user test -r "$REPO/CMakeLists.txt" -a -x "$REPO" && as_user test -x "$REPO/packaging"; then
    SRC=$REPO
    BUILD_DIR=$REPO/$BUILD_NAME
    mkdir -p "$BUILD_DIR"
    chown -R "$TEST_USER:$TEST_USER" "$BUILD_DIR"
    say "$TEST_USER can read $REPO: building in place in $BUILD_DIR (owned by $TEST_USER)"
else
    SRC=$TEST_HOME/src
    BUILD_DIR=$TEST_HOME/$BUILD_NAME
    say "$TEST_USER cannot read $REPO: copying it to $SRC"
    rm -rf "$SRC"
    install -d -m 0755 -o "$TEST_USER" -g "$TEST_USER" "$SRC"
    tar -C "$REPO" --exclude='./build*' --exclude='__pycache__' -cf - . \
        | as_user tar -C "$SRC" -xf -
    chown -R "$TEST_USER:$TEST_USER" "$SRC"
    mkdir -p "$BUILD_DIR"
    chown -R "$TEST_USER:$TEST_USER" "$BUILD_DIR"
    say "copied $REPO to $SRC; building in $BUILD_DIR as $TEST_USER"
fi

# cgroup v2: a process may only move processes between cgroups if it can write
# cgroup.procs of their common ancestor, so the runner lives inside the delegated
# subtree: move this shell (and so every child) into sbx-test/runner first.
if [ "$(stat -fc %T "$CGROUP_MNT" 2>/dev/null || true)" = cgroup2fs ]; then
    RUNNER=$CGROUP_MNT/$TEST_USER/runner
    [ -d "$RUNNER" ] || mkdir "$RUNNER"
    chown "$TEST_USER:$TEST_USER" "$RUNNER" "$RUNNER/cgroup.procs"
    echo $$ > "$RUNNER/cgroup.procs"
    say "moved this shell into cgroup ${RUNNER#"$CGROUP_MNT"/}"
fi

if [ "$SANITIZE" = thread ]; then
    as_user cmake -S "$SRC" -B "$BUILD_DIR" -DSBX_SANITIZE=thread
    tsan_env "$SRC"
fi
as_user bash "$SRC/packaging/setup.sh" --build-dir "$BUILD_DIR" "${SETUP_ARGS[@]}"
FUZZ_DIR=$(dirname "$BUILD_DIR")/build-fuzz
mkdir -p "$FUZZ_DIR"
chown -R "$TEST_USER:$TEST_USER" "$FUZZ_DIR"

# prebuild: the builds of the stages after ctest (the fuzz targets, the TSan
# tree, the VM stage's .debs), one after the other at nice 19 while ctest
# runs: the tests leave most of a core idle and the builds take that, not
# the tests' time. Each is the command its stage runs (fuzz.sh's cmake
# lines, test.sh --sanitize=thread's, run.sh's build-debs.sh), so the stage
# then finds its build done; if one failed, the stage builds again and
# shows why. finish waits for it first. Its own process group (set -m),
# which an interrupted test.sh ends.
PREBUILD_PID=
PREBUILD_DEBS=
PREBUILD_LOG=
prebuild() {
    local tsan_dir
    renice -n 19 -p "$BASHPID" >/dev/null
    if [ "$FUZZ" = 1 ]; then
        as_user cmake -S "$SRC" -B "$FUZZ_DIR" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
            -DSBX_SANITIZE=address -DSBX_FUZZ=ON >/dev/null
        as_user cmake --build "$FUZZ_DIR" -j2 --target sbx_fuzz
    fi
    if [ "$TSAN" = 1 ]; then
        tsan_dir=$(dirname "$BUILD_DIR")/build-tsan
        mkdir -p "$tsan_dir"
        chown -R "$TEST_USER:$TEST_USER" "$tsan_dir"
        as_user cmake -S "$SRC" -B "$tsan_dir" -DSBX_SANITIZE=thread
        as_user bash "$SRC/packaging/setup.sh" --build-dir "$tsan_dir"
    fi
    if [ -n "$PREBUILD_DEBS" ]; then
        bash "$REPO/packaging/build-debs.sh" --no-lintian "$PREBUILD_DEBS"
    fi
}
if [ -z "$REGEX" ] && [ "$SANITIZE" = 0 ] && { [ "$FUZZ" = 1 ] || [ "$TSAN" = 1 ] || [ "$VM" = 1 ]; }; then
    PREBUILD_LOG=$(mktemp /var/tmp/sbx-prebuild.XXXXXX.log)
    if [ "$VM" = 1 ]; then PREBUILD_DEBS=$(mktemp -d /var/tmp/sbx-debs-ci.XXXXXX); fi
    set -m
    prebuild > "$PREBUILD_LOG" 2>&1 &
    PREBUILD_PID=$!
    set +m
    # shellcheck disable=SC2064 # the values now
    trap "kill -- -$PREBUILD_PID 2>/dev/null || true; rm -rf '$PREBUILD_DEBS' '$PREBUILD_LOG'" EXIT
    say "building the later stages' trees at nice 19 beside ctest (log $PREBUILD_LOG)"
fi

mapfile -t CARGS < <(ctest_args "$BUILD_DIR")
say "as $TEST_USER: ctest ${CARGS[*]}"
rc=0
(cd "$BUILD_DIR" && as_user ctest "${CARGS[@]}") || rc=$?
say "ctest exit status $rc"
finish "$rc" "$FUZZ_DIR" "$SRC" as_user
