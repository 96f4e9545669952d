#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run-example.sh — from a fresh Debian 12 host to a first sandboxed run:
# setup.sh (packages, build; as root also the user sbx-test and its cgroups), then
# the reconciliation example (packaging/examples/reconcile) through sbx-helper,
# and its report. sbx-helper refuses real root, so as root the example runs as
# sbx-test (and, if sbx-test cannot read this checkout, from a copy built in
# /var/lib/sbx-test, as packaging/test.sh does).
set -euo pipefail

PROG=run-example
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TEST_USER=sbx-test
TEST_HOME=/var/lib/sbx-test
CGROUP_MNT=/sys/fs/cgroup
EXAMPLE=packaging/examples/reconcile
EXAMPLES="reconcile ticket-analysis"
RUNNER=run.sh   # in the example's directory; --image runtime: the runtime's script

usage() {
    cat <<EOF
Usage: packaging/run-example.sh [--example NAME] [--image host|runtime] [--build-dir DIR] [--help]

Runs packaging/setup.sh, then packaging/examples/NAME/run.sh. reconcile (the
default): reconcile.py in a sandbox with read-only /data, writable /out, an
empty environment and no network; prints the report and the summary, and where
they were written. ticket-analysis: a job whose egress allowlist holds one
internal API (a stand-in on 127.0.0.1); prints what the API stored and the
run's egress records.

  --example NAME   one of: $EXAMPLES
  --image IMAGE    host (the default: the host's /usr), or runtime: build the
                   pinned recon-runtime image (packaging/images/recon-runtime/
                   build.sh, mmdebstrap) into a private sbxd's store and run
                   reconcile in it with the design's policy (run-reconcile.sh)
  --build-dir DIR  build directory when not root (default: <repo>/build)
  -h, --help       this text
EOF
}

say() { printf '%s: %s\n' "$PROG" "$*"; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

BUILD_DIR=
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) [ $# -ge 2 ] || die "--build-dir needs a directory"; BUILD_DIR=$2; shift 2 ;;
        --example)   [ $# -ge 2 ] || die "--example needs a name"
                     case " $EXAMPLES " in *" $2 "*) ;; *) die "no example $2 (one of: $EXAMPLES)" ;; esac
                     EXAMPLE=packaging/examples/$2; shift 2 ;;
        --image)     [ $# -ge 2 ] || die "--image needs host or runtime"
                     case "$2" in
                         host)    RUNNER=run.sh ;;
                         runtime) RUNNER=runtime ;;
                         *)       die "no image $2 (host or runtime)" ;;
                     esac
                     shift 2 ;;
        -h|--help)   usage; exit 0 ;;
        *)           usage >&2; die "unknown argument: $1" ;;
    esac
done

if [ "$RUNNER" = runtime ]; then
    [ "$EXAMPLE" = packaging/examples/reconcile ] || die "--image runtime runs the reconcile example only"
    RUNNER=../../images/recon-runtime/run-reconcile.sh
fi

# ------------------------------------------------------------ not root
if [ "$(id -u)" != 0 ]; then
    BUILD_DIR=${BUILD_DIR:-$REPO/build}
    bash "$REPO/packaging/setup.sh" --build-dir "$BUILD_DIR"
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/sbx-example.XXXXXX")
    say "running the example; /out is $OUT"
    exec bash "$REPO/$EXAMPLE/$RUNNER" --build-dir "$BUILD_DIR" "$OUT"
fi

# ------------------------------------------------------------ root
bash "$REPO/packaging/setup.sh" --no-build
cd /    # root's working directory may be unreadable for sbx-test

as_user() { runuser -u "$TEST_USER" -- env HOME="$TEST_HOME" TMPDIR=/tmp "$@"; }

if as_user test -r "$REPO/CMakeLists.txt" -a -x "$REPO" && as_user test -x "$REPO/packaging"; then
    SRC=$REPO
    BUILD_DIR=${BUILD_DIR:-$REPO/build}
    say "$TEST_USER can read $REPO: building in place in $BUILD_DIR (owned by $TEST_USER)"
else
    SRC=$TEST_HOME/src
    BUILD_DIR=$TEST_HOME/build
    say "$TEST_USER cannot read $REPO: copying it to $SRC"
    rm -rf "$SRC"
    install -d -m 0755 -o "$TEST_USER" -g "$TEST_USER" "$SRC"
    tar -C "$REPO" --exclude='./build*' --exclude='__pycache__' -cf - . \
        | as_user tar -C "$SRC" -xf -
    chown -R "$TEST_USER:$TEST_USER" "$SRC"
    say "copied $REPO to $SRC; building in $BUILD_DIR as $TEST_USER"
fi
mkdir -p "$BUILD_DIR"
chown -R "$TEST_USER:$TEST_USER" "$BUILD_DIR"

# cgroup v2: the helper moves processes between cgroups, which needs write access
# to cgroup.procs of their common ancestor: start from inside the delegated subtree.
if [ "$(stat -fc %T "$CGROUP_MNT" 2>/dev/null || true)" = cgroup2fs ]; then
    RUNNER=$CGROUP_MNT/$TEST_USER/runner
    [ -d "$RUNNER" ] || mkdir "$RUNNER"
    chown "$TEST_USER:$TEST_USER" "$RUNNER" "$RUNNER/cgroup.procs"
    echo $$ > "$RUNNER/cgroup.procs"
    say "moved this shell into cgroup ${RUNNER#"$CGROUP_MNT"/}"
fi

as_user bash "$SRC/packaging/setup.sh" --build-dir "$BUILD_DIR"

OUT=$(mktemp -d /tmp/sbx-example.XXXXXX)
chown "$TEST_USER:$TEST_USER" "$OUT"
say "running the example as $TEST_USER; /out is $OUT"
rc=0
as_user bash "$SRC/$EXAMPLE/$RUNNER" --build-dir "$BUILD_DIR" "$OUT" || rc=$?
say "report and summary are in $OUT"
exit "$rc"
