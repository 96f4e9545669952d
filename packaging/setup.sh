#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# setup.sh — prepare a Debian 12 host for building and testing sbx.
#
# Idempotent: every step checks before it acts, and prints one line per action.
#   1. install the missing Debian packages (root), or print the command (not root)
#   2. configure and build with cmake (unless --no-build)
#   3. as root only: create the unprivileged user sbx-test, give it subordinate
#      ids (/etc/subuid, /etc/subgid), delegate a cgroup subtree (memory, pids,
#      cpu) to it, and record its path in /etc/sbx/cgroup-root
#   4. as root only: create a second local user sbx-test2 owning a directory
#      sbx-test may write (the other user of the clients' destination tests)
#   5. as root only: install packaging/sysctl.d/50-sbx.conf (fs.file-max as
#      systemd sets it) in /etc/sysctl.d and apply it
set -euo pipefail

PROG=setup
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TEST_USER=sbx-test
TEST_HOME=/var/lib/sbx-test
OTHER_USER=sbx-test2
OTHER_DROP=/var/lib/sbx-test2/drop
CGROUP_MNT=/sys/fs/cgroup
CGROUP_RECORD=/etc/sbx/cgroup-root
SYSCTL_FILE=/etc/sysctl.d/50-sbx.conf
SUBID_COUNT=65536   # ids per subordinate range (mmdebstrap --mode=unshare maps 65536)
CONTROLLERS=(memory pids cpu)
CTRL_LIST=$(IFS=,; printf '%s' "${CONTROLLERS[*]}")
PACKAGES=(build-essential cmake pkg-config gcc clang clang-format libseccomp-dev libcap-dev
          libnng-dev nng-utils libprotobuf-c-dev protobuf-c-compiler libjansson-dev
          libevent-dev libidn2-dev libc-ares-dev
          libarchive-dev libssl-dev openssl bubblewrap tinyproxy python3 iproute2
          curl valgrind ca-certificates python3-protobuf protobuf-compiler time
          umoci skopeo mmdebstrap busybox-static zstd uidmap libsystemd-dev apparmor
          qemu-system-x86 e2fsprogs go-md2man libmbedtls-dev
          debhelper dh-python dh-apparmor lintian fakeroot dpkg-dev
          dnsmasq-base python3-dnspython  # tests/integration/test_fleet.py: SRV discovery
          prometheus   # promtool: tests/integration/test_sbxd_metrics.py checks a scrape
          python3-yaml  # tests/packaging/deployment.py parses the Kubernetes manifests
          # packaging/build-python.sh (wheel, sdist); sbxd.sdk's venvs and wheelhouse
          python3-setuptools python3-wheel python3-venv python3-pip python3-setuptools-whl)

usage() {
    cat <<EOF
Usage: packaging/setup.sh [--build-dir DIR] [--no-build] [--no-tests] [--sanitize] [--help]

Prepares this host for building and testing sbx. Safe to run again.

  1. Installs the Debian packages the build and the tests need, if any is missing
     (apt-get update + install; not root: prints the command and exits 1).
  2. Builds: cmake -S $REPO -B DIR -DCMAKE_BUILD_TYPE=RelWithDebInfo
             cmake --build DIR -j2
  3. As root only: creates the system user $TEST_USER (home $TEST_HOME), gives it
     a range of $SUBID_COUNT ids in /etc/subuid and /etc/subgid (for mmdebstrap
     --mode=unshare, packaging/images/recon-runtime/build.sh), delegates a
     cgroup subtree (memory, pids, cpu) to it, and writes the subtree's path relative
     to the cgroup mount to $CGROUP_RECORD (read by sbx-helper when no
     --cgroup-root is given). Also creates the system user $OTHER_USER owning
     $OTHER_DROP (mode 0770, group $TEST_USER): the other local user of the
     clients' destination tests. Installs packaging/sysctl.d/50-sbx.conf as
     $SYSCTL_FILE and applies it: fs.file-max raised as systemd >= 240 raises
     it at boot, which sbxd needs to start where systemd is not PID 1.

Options:
  --build-dir DIR  build directory (default: <repo>/build, or <repo>/build-asan
                   with --sanitize)
  --no-build       skip step 2
  --no-tests       build sbx only, without its tests and benchmarks
                   (-DSBX_BUILD_TESTS=OFF): about a third of the build, enough
                   for sbxd, sbxctl, sbx-helper and the Python package
  --sanitize       build with AddressSanitizer+UBSan (-DSBX_SANITIZE=ON)
  -h, --help       this text
EOF
}

say() { printf '%s: %s\n' "$PROG" "$*"; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

BUILD_DIR=
DO_BUILD=1
SANITIZE=0
BUILD_TESTS=ON
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir)   [ $# -ge 2 ] || die "--build-dir needs a directory"
                       BUILD_DIR=$2; shift 2 ;;
        --build-dir=*) BUILD_DIR=${1#--build-dir=}; shift ;;
        --no-build)    DO_BUILD=0; shift ;;
        --no-tests)    BUILD_TESTS=OFF; shift ;;
        --sanitize)    SANITIZE=1; shift ;;
        -h|--help)     usage; exit 0 ;;
        *)             usage >&2; die "unknown argument: $1" ;;
    esac
done
if [ -z "$BUILD_DIR" ]; then
    if [ "$SANITIZE" = 1 ]; then BUILD_DIR=$REPO/build-asan; else BUILD_DIR=$REPO/build; fi
fi

IS_ROOT=0
[ "$(id -u)" = 0 ] && IS_ROOT=1

SUMMARY=()
note() { SUMMARY+=("$*"); }

# ---------------------------------------------------------------- 1. packages
step_packages() {
    local missing=() p st
    for p in "${PACKAGES[@]}"; do
        st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
        [ "$st" = installed ] || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        say "packages: all ${#PACKAGES[@]} required packages are installed"
        note "packages: all installed"
        return
    fi
    say "packages missing: ${missing[*]}"
    if [ "$IS_ROOT" != 1 ]; then
        say "not root: run this as root, then run setup.sh again:"
        printf '  apt-get update && apt-get install -y --no-install-recommends %s\n' "${missing[*]}"
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
    say "installed packages: ${missing[*]}"
    note "packages: installed ${missing[*]}"
}

# ---------------------------------------------------------------- 2. build
step_build() {
    if [ "$DO_BUILD" != 1 ]; then
        say "build skipped (--no-build)"
        note "build: skipped"
        return
    fi
    local args=(-S "$REPO" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
    [ "$SANITIZE" = 1 ] && args+=(-DSBX_SANITIZE=ON)
    args+=(-DSBX_BUILD_TESTS="$BUILD_TESTS")
    say "configuring: cmake ${args[*]}"
    cmake "${args[@]}"
    say "building: cmake --build $BUILD_DIR -j2"
    cmake --build "$BUILD_DIR" -j2
    say "built $BUILD_DIR"
    if [ "$SANITIZE" = 1 ]; then note "build: $BUILD_DIR (ASan+UBSan)"; else note "build: $BUILD_DIR"; fi
}

# ---------------------------------------------------------------- 3. user
step_user() {
    if id -u "$TEST_USER" >/dev/null 2>&1; then
        say "user $TEST_USER exists"
    else
        useradd --system --user-group --home-dir "$TEST_HOME" --create-home \
                --shell /usr/sbin/nologin --comment "sbx test runner" "$TEST_USER"
        say "created system user $TEST_USER (home $TEST_HOME)"
    fi
    if [ ! -d "$TEST_HOME" ]; then
        install -d -m 0755 -o "$TEST_USER" -g "$TEST_USER" "$TEST_HOME"
        say "created home $TEST_HOME"
    elif [ "$(stat -c %U "$TEST_HOME")" != "$TEST_USER" ]; then
        chown "$TEST_USER:$TEST_USER" "$TEST_HOME"
        say "chowned $TEST_HOME to $TEST_USER"
    fi
    note "user: $TEST_USER (uid $(id -u "$TEST_USER"), home $TEST_HOME)"
}

# ---------------------------------------------------------------- 3. subordinate ids
# mmdebstrap --mode=unshare (packaging/images/recon-runtime/build.sh, run by the
# tests as this user) maps 65536 ids into its user namespace: it needs a range
# in /etc/subuid and /etc/subgid. A system user gets none from useradd.
step_subids() {
    local f start
    for f in /etc/subuid /etc/subgid; do
        if grep -q "^$TEST_USER:" "$f" 2>/dev/null; then
            say "$f has a range for $TEST_USER"
            continue
        fi
        # the first id past every range in the file, and never below 100000
        start=$(awk -F: 'BEGIN { m = 100000 } NF == 3 && $2 + $3 > m { m = $2 + $3 } END { print m }' \
                "$f" 2>/dev/null || echo 100000)
        if [ "$f" = /etc/subuid ]; then
            usermod --add-subuids "$start-$((start + SUBID_COUNT - 1))" "$TEST_USER"
        else
            usermod --add-subgids "$start-$((start + SUBID_COUNT - 1))" "$TEST_USER"
        fi
        say "gave $TEST_USER the ids $start..$((start + SUBID_COUNT - 1)) in $f"
    done
    note "subids: $TEST_USER has ranges in /etc/subuid and /etc/subgid (mmdebstrap --mode=unshare)"
}

# ---------------------------------------------------------------- 3. a second user
# The clients' destination tests (tests/integration/test_sbxd_cli_dest.py)
# play a second local user who pre-created the victim's results directory:
# $OTHER_DROP is owned by $OTHER_USER and writable by $TEST_USER's group, so
# the test can plant a link in it; a client must refuse to write there.
step_other_user() {
    if id -u "$OTHER_USER" >/dev/null 2>&1; then
        say "user $OTHER_USER exists"
    else
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
                --shell /usr/sbin/nologin --comment "sbx tests, another local user" "$OTHER_USER"
        say "created system user $OTHER_USER"
    fi
    install -d -m 0755 -o "$OTHER_USER" -g "$OTHER_USER" "$(dirname "$OTHER_DROP")"
    install -d -m 0770 -o "$OTHER_USER" -g "$TEST_USER" "$OTHER_DROP"
    say "$OTHER_DROP: owned by $OTHER_USER, writable by group $TEST_USER"
    note "other user: $OTHER_USER (uid $(id -u "$OTHER_USER")) owns $OTHER_DROP"
}

# sbxd refuses to start when runs_max runs at their ceilings would take more
# than half of fs.file-max (server/config/config_limits.c): a file pinned by a
# mapping is bounded by the run's memory, not by RLIMIT_NOFILE, and the
# kernel's default file-max (RAM / 10 KiB) holds few such runs. The value is
# the sysctl's maximum: applying it never lowers what a host set.
step_sysctl() {
    local want have
    if ! cmp -s "$REPO/packaging/sysctl.d/50-sbx.conf" "$SYSCTL_FILE"; then
        install -D -m 0644 "$REPO/packaging/sysctl.d/50-sbx.conf" "$SYSCTL_FILE"
        say "installed $SYSCTL_FILE"
    fi
    want=$(sed -n 's/^fs\.file-max *= *//p' "$SYSCTL_FILE")
    have=$(cat /proc/sys/fs/file-max)
    if [ "$have" = "$want" ]; then
        say "fs.file-max is $have"
    elif printf '%s\n' "$want" > /proc/sys/fs/file-max 2>/dev/null; then
        say "fs.file-max raised from $have to $want"
    else
        say "could not set fs.file-max (read-only /proc/sys?): it stays $have"
    fi
    note "fs.file-max: $(cat /proc/sys/fs/file-max) ($SYSCTL_FILE)"
}

# ---------------------------------------------------------------- 4. cgroups
# cg_write FILE VALUE: one write to a cgroup control file (errors go to the caller).
cg_write() { printf '%s\n' "$2" > "$1"; }

record_root() {
    local rel=$1 cur=
    install -d -m 0755 "$(dirname "$CGROUP_RECORD")"
    [ -f "$CGROUP_RECORD" ] && cur=$(cat "$CGROUP_RECORD")
    if [ "$cur" = "$rel" ]; then
        say "$CGROUP_RECORD already records $rel"
    else
        printf '%s\n' "$rel" > "$CGROUP_RECORD.tmp"
        chmod 0644 "$CGROUP_RECORD.tmp"
        mv -f "$CGROUP_RECORD.tmp" "$CGROUP_RECORD"
        say "recorded $rel in $CGROUP_RECORD${cur:+ (was $cur)}"
    fi
}

probe_as_user() {   # probe_as_user DIR...: the user can create and remove a child
    local d
    for d in "$@"; do
        runuser -u "$TEST_USER" -- mkdir "$d/probe" \
            || die "$TEST_USER cannot create a cgroup under $d"
        runuser -u "$TEST_USER" -- rmdir "$d/probe" \
            || die "$TEST_USER cannot remove $d/probe"
    done
}

step_cgroup_v2() {
    local dir=$CGROUP_MNT/$TEST_USER c have want=() f
    have=" $(cat "$CGROUP_MNT/cgroup.controllers") "
    for c in "${CONTROLLERS[@]}"; do
        [[ $have == *" $c "* ]] || die "cgroup v2 controller $c is not available at $CGROUP_MNT"
    done
    # the root's subtree_control
    have=" $(cat "$CGROUP_MNT/cgroup.subtree_control") "
    want=()
    for c in "${CONTROLLERS[@]}"; do [[ $have == *" $c "* ]] || want+=("+$c"); done
    if [ ${#want[@]} -gt 0 ]; then
        cg_write "$CGROUP_MNT/cgroup.subtree_control" "${want[*]}"
        say "enabled ${want[*]} in $CGROUP_MNT/cgroup.subtree_control"
    else
        say "$CGROUP_MNT/cgroup.subtree_control already has ${CONTROLLERS[*]}"
    fi
    if [ -d "$dir" ]; then
        say "cgroup $dir exists"
    else
        mkdir "$dir"
        say "created cgroup $dir"
    fi
    have=" $(cat "$dir/cgroup.subtree_control") "
    want=()
    for c in "${CONTROLLERS[@]}"; do [[ $have == *" $c "* ]] || want+=("+$c"); done
    if [ ${#want[@]} -gt 0 ]; then
        cg_write "$dir/cgroup.subtree_control" "${want[*]}" \
            || die "cannot enable ${want[*]} in $dir (does it hold processes itself?)"
        say "enabled ${want[*]} in $dir/cgroup.subtree_control"
    else
        say "$dir/cgroup.subtree_control already has ${CONTROLLERS[*]}"
    fi
    chown "$TEST_USER:$TEST_USER" "$dir"
    for f in cgroup.procs cgroup.subtree_control cgroup.threads; do
        chown "$TEST_USER:$TEST_USER" "$dir/$f"
    done
    record_root "$TEST_USER"
    probe_as_user "$dir"
    say "cgroup v2 $CTRL_LIST delegated at $TEST_USER to $TEST_USER"
    note "cgroup: v2, $dir delegated to $TEST_USER (recorded: $TEST_USER)"
}

step_cgroup_v1() {
    local p rel c d created=() existed=() dirs=()
    p=$(awk -F: '$2 == "memory" { sub(/^[^:]*:[^:]*:/, ""); print; exit }' /proc/self/cgroup)
    [ -n "$p" ] || die "no v1 memory cgroup in /proc/self/cgroup (neither cgroup2 nor a v1 memory hierarchy)"
    rel=$p/$TEST_USER
    # squeeze duplicate slashes, drop the leading one: "/" -> "sbx-test"
    rel=$(printf '%s' "$rel" | tr -s /)
    rel=${rel#/}
    for c in "${CONTROLLERS[@]}"; do
        [ "$(stat -fc %T "$CGROUP_MNT/$c/" 2>/dev/null || true)" = cgroupfs ] \
            || die "v1 controller $c is not mounted at $CGROUP_MNT/$c"
        d=$CGROUP_MNT/$c/$rel
        if [ -d "$d" ]; then existed+=("$c"); else mkdir -p "$d"; created+=("$c"); fi
        chown -R "$TEST_USER:$TEST_USER" "$d"
        dirs+=("$d")
    done
    if [ ${#created[@]} -gt 0 ]; then say "created cgroup $rel in ${created[*]}"; fi
    if [ ${#existed[@]} -gt 0 ]; then say "cgroup $rel exists in ${existed[*]}"; fi
    say "chowned $CGROUP_MNT/{$CTRL_LIST}/$rel (dirs and files) to $TEST_USER"
    local uh=$CGROUP_MNT/memory/$rel/memory.use_hierarchy
    if [ -w "$uh" ] && [ "$(cat "$uh" 2>/dev/null || true)" = 0 ]; then
        if cg_write "$uh" 1 2>/dev/null; then
            say "set memory.use_hierarchy=1 in $rel"
        else
            say "could not set memory.use_hierarchy in $rel (ignored)"
        fi
    fi
    record_root "$rel"
    probe_as_user "${dirs[@]}"
    say "cgroup v1 $CTRL_LIST delegated at $rel to $TEST_USER"
    note "cgroup: v1, $CTRL_LIST at $rel delegated to $TEST_USER (recorded in $CGROUP_RECORD)"
}

step_cgroup() {
    if [ "$(stat -fc %T "$CGROUP_MNT" 2>/dev/null || true)" = cgroup2fs ]; then
        step_cgroup_v2
    else
        step_cgroup_v1
    fi
}

# ---------------------------------------------------------------- main
say "repo $REPO"
step_packages
step_build
if [ "$IS_ROOT" = 1 ]; then
    step_user
    step_subids
    step_other_user
    step_sysctl
    step_cgroup
else
    say "not root: skipping user $TEST_USER and cgroup delegation"
    if [ -r "$CGROUP_RECORD" ]; then
        note "cgroup: $CGROUP_RECORD records $(cat "$CGROUP_RECORD")"
    else
        note "cgroup: no $CGROUP_RECORD (run setup.sh as root, or pass --cgroup-root)"
    fi
fi

say "summary:"
for line in "${SUMMARY[@]}"; do printf '  %s\n' "$line"; done
