#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.sh — issue 19's fleet test with real network namespaces (as root).
# Three sbxd hosts, a dnsmasq and a parent in their own namespaces joined by
# veth pairs to a bridge in a sixth; the root namespace's network is never
# touched. The sbxd processes and the clients run as the unprivileged test
# user (setpriv), inside its delegated cgroup as ctest's do. Everything this
# made (namespaces and the processes in them, /etc/netns/PREFIX-par, the
# directory) is removed on exit, also on failure or a signal.
set -euo pipefail

PROG=netns-fleet
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TEST_USER=sbx-test
CGROUP_MNT=/sys/fs/cgroup
BUILD_DIR=$REPO/build
TIME_LIMIT=600
KEEP=0

usage() {
    cat <<EOF
Usage: sudo bash tests/fleet/netns.sh [--build-dir DIR] [--time-limit S] [--keep]

Issue 19's "Done when" with ip netns: three hosts (an sbxd each, its own
server certificate from packaging/certs/sbx-certs, tls+tcp on a veth), dnsmasq
serving _sbx._tcp.sbx.test SRV records in a fourth namespace, sbxctl and
sbx_client in a fifth (the parent), a bridge in a sixth. Asserts spread over
the hosts, identities apart, drain, a SIGKILLed host, a dropped CreateRun
reply retried into exactly one run, a lease ending an orphaned run and a
restarted host coming back clean (tests/fleet/netns_fleet.py says how).

Needs root (ip netns), dnsmasq, setpriv, and packaging/setup.sh's user
$TEST_USER with its delegated cgroup. Exit status 0 when every check passed.

  --build-dir DIR  the build with sbxd, sbxctl, sbx-helper (default: build)
  --time-limit S   stop everything after S seconds (default $TIME_LIMIT)
  --keep           keep the directory with the hosts' logs and audit logs
  -h, --help       this text
EOF
}

say() { printf '%s: %s\n' "$PROG" "$*"; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) [ $# -ge 2 ] || die "--build-dir needs a directory"; BUILD_DIR=$2; shift 2 ;;
        --time-limit) [ $# -ge 2 ] || die "--time-limit needs seconds"; TIME_LIMIT=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[[ $TIME_LIMIT =~ ^[1-9][0-9]*$ ]] || die "--time-limit wants seconds, not '$TIME_LIMIT'"
[ "$(id -u)" = 0 ] || die "needs root for ip netns (try: sudo bash $0 --build-dir $BUILD_DIR)"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd) || die "no build directory"
for f in server/sbxd clients/sbxctl helper/sbx-helper; do
    [ -x "$BUILD_DIR/$f" ] || die "$BUILD_DIR/$f is missing: build first"
done
for t in ip nsenter dnsmasq setpriv openssl python3; do
    command -v "$t" >/dev/null || die "$t is missing (Debian: iproute2, dnsmasq, util-linux, openssl, python3)"
done
id "$TEST_USER" >/dev/null 2>&1 || die "no user $TEST_USER: run packaging/setup.sh as root first"
runuser -u "$TEST_USER" -- test -x "$BUILD_DIR/server/sbxd" \
    || die "$TEST_USER cannot run $BUILD_DIR/server/sbxd (a build it can read, e.g. packaging/test.sh's)"

PREFIX=sbxf$$
DIR=$(mktemp -d /tmp/sbx-netns-fleet.XXXXXX)
chmod 0755 "$DIR"

cleanup() {
    local rc=$? ns pid
    trap - EXIT INT TERM
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX-" || true); do
        # Only what this run started lives in these namespaces.
        for pid in $(ip netns pids "$ns" 2>/dev/null || true); do
            kill -TERM "$pid" 2>/dev/null || true
        done
    done
    sleep 1
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX-" || true); do
        for pid in $(ip netns pids "$ns" 2>/dev/null || true); do
            kill -KILL "$pid" 2>/dev/null || true
        done
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "/etc/netns/$PREFIX-par"
    rmdir /etc/netns 2>/dev/null || true
    # sbx-helper cleanup removes the run cgroups of helpers that are gone
    # (a host killed by the time limit leaves them).
    runuser -u "$TEST_USER" -- "$BUILD_DIR/helper/sbx-helper" cleanup >/dev/null 2>&1 || true
    if [ "$KEEP" = 1 ] || [ "$rc" != 0 ]; then
        say "kept $DIR (logs: h*/sbxd.stderr, h*/audit.log, dnsmasq.log)"
        chmod -R go-rwx "$DIR"
    else
        rm -rf "$DIR"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The hosts' sbxd start sandboxes in cgroups under the test user's delegated
# subtree: on cgroup v2 this shell (and so every child) moves into its leaf
# sbx-test/runner first, as packaging/test.sh does for ctest; on v1 the
# helper writes the delegated subtree's tasks itself.
if [ "$(stat -fc %T "$CGROUP_MNT" 2>/dev/null || true)" = cgroup2fs ]; then
    RUNNER=$CGROUP_MNT/$TEST_USER/runner
    [ -d "$CGROUP_MNT/$TEST_USER" ] || die "no delegated cgroup $CGROUP_MNT/$TEST_USER: run packaging/setup.sh"
    [ -d "$RUNNER" ] || mkdir "$RUNNER"
    chown "$TEST_USER:$TEST_USER" "$RUNNER" "$RUNNER/cgroup.procs"
    echo $$ > "$RUNNER/cgroup.procs"
fi

say "namespaces $PREFIX-{sw,h1,h2,h3,dns,par}, files in $DIR, at most $TIME_LIMIT s"
rc=0
timeout --kill-after=10 "$TIME_LIMIT" python3 "$HERE/netns_fleet.py" --build-dir "$BUILD_DIR" \
    --prefix "$PREFIX" --dir "$DIR" || rc=$?
[ "$rc" != 124 ] || say "stopped after $TIME_LIMIT s"
exit "$rc"
