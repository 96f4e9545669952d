#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run-reconcile.sh — the reconciliation example (packaging/examples/reconcile)
# in the pinned recon-runtime image: a private sbxd (state in a temporary
# directory), build.sh into its store, then sbxctl run with the design's policy
# naming the pin, and the report. packaging/run-example.sh --image runtime runs this.
set -euo pipefail

PROG=run-reconcile.sh
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
EXAMPLE=$REPO/packaging/examples/reconcile

usage() {
    cat <<EOF
Usage: packaging/images/recon-runtime/run-reconcile.sh [--build-dir DIR] [OUTDIR]

Starts a private sbxd, builds and imports recon-runtime with build.sh (the rootfs
tar is cached in DIR/recon-runtime-cache), and runs
  sbxctl run --policy POLICY --data $EXAMPLE --out OUTDIR \\
      -- /usr/bin/python3 /data/reconcile.py
with POLICY the design's: {"image": "<the pin>", /data ro, /out rw, "env": {},
egress deny, cpu 2, memory_mb 4096, script_seconds 120, run_seconds 3600}.
Prints the policy, the report and the summary.

  --build-dir DIR  where sbx was built (default: $REPO/build)
  OUTDIR           where /out lands (default: a new directory under \${TMPDIR:-/tmp})
EOF
}

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

BUILD_DIR=$REPO/build
OUT=
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) [ $# -ge 2 ] || { usage >&2; exit 2; }; BUILD_DIR=$2; shift 2 ;;
        -h|--help)   usage; exit 0 ;;
        -*)          usage >&2; exit 2 ;;
        *)           [ -z "$OUT" ] || { usage >&2; exit 2; }; OUT=$1; shift ;;
    esac
done
SBXD=$BUILD_DIR/server/sbxd
SBXCTL=$BUILD_DIR/clients/sbxctl
[ -x "$SBXD" ] && [ -x "$SBXCTL" ] || die "no sbxd/sbxctl in $BUILD_DIR (build first: packaging/setup.sh)"
if [ -z "$OUT" ]; then OUT=$(mktemp -d "${TMPDIR:-/tmp}/sbx-reconcile.XXXXXX"); else mkdir -p "$OUT"; fi

D=$(mktemp -d /tmp/sbx-rt.XXXXXX)    # short: the socket's path must fit in sun_path
PID=
cleanup() {
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    rm -rf "$D"
}
trap cleanup EXIT
mkdir -m 0700 "$D/state"
EP=ipc://$D/sbxd.sock

PIN=$(bash "$HERE/build.sh" --state-dir "$D/state" --sbxd "$SBXD" \
      --cache-dir "$BUILD_DIR/recon-runtime-cache")
say "pinned: $PIN"

"$SBXD" --listen "$EP" --state-dir "$D/state" --log "$D/audit.log" </dev/null >"$D/sbxd.stderr" 2>&1 &
PID=$!
for _ in $(seq 100); do
    "$SBXCTL" --endpoint "$EP" health >/dev/null 2>&1 && break
    kill -0 "$PID" 2>/dev/null || die "sbxd exited: $(tail -5 "$D/sbxd.stderr")"
    sleep 0.1
done

cat >"$D/policy.json" <<EOF
{
  "image":   "$PIN",
  "mounts":  [{"path": "/data", "mode": "ro"}, {"path": "/out", "mode": "rw"}],
  "env":     {},
  "egress":  {"policy": "deny", "allow": []},
  "limits":  {"cpu": 2, "memory_mb": 4096, "script_seconds": 120, "run_seconds": 3600},
  "lifetime": "per_run"
}
EOF
echo "== policy"
cat "$D/policy.json"
cmd=("$SBXCTL" --endpoint "$EP" run --policy "$D/policy.json" --data "$EXAMPLE" --out "$OUT"
     -- /usr/bin/python3 /data/reconcile.py)
echo "$PROG: ${cmd[*]}"
rc=0
"${cmd[@]}" || rc=$?
[ "$rc" -eq 0 ] || say "sbxctl exited with status $rc"
if [ -f "$OUT/report.csv" ]; then
    echo
    echo "== $OUT/report.csv"
    if command -v column >/dev/null 2>&1; then column -t -s, "$OUT/report.csv"; else cat "$OUT/report.csv"; fi
fi
if [ -f "$OUT/summary.json" ]; then
    echo
    echo "== $OUT/summary.json"
    cat "$OUT/summary.json"
fi
[ -f "$OUT/report.csv" ] || [ "$rc" -ne 0 ] || { say "the run wrote no $OUT/report.csv"; rc=1; }
exit "$rc"
