#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh — run the reconciliation example in an sbx sandbox with sbx-helper:
# this directory is /data (read-only), OUTDIR is /out, the environment is empty and
# egress is denied (policy.json). Then show the report and the summary.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)

usage() {
    cat <<EOF
Usage: packaging/examples/reconcile/run.sh [--build-dir DIR] [--direct] [--helper PATH] [OUTDIR]

Runs: sbxctl run --policy $HERE/policy.json --data $HERE --out OUTDIR \\
          -- /usr/bin/python3 /data/reconcile.py
(through sbxd: the one at \$SBX_ENDPOINT or the default socket, else a private
one for this run) and prints OUTDIR/report.csv and OUTDIR/summary.json.

  --direct         run it with sbx-helper alone (no sbxd)

  --build-dir DIR  where sbx was built (default: $REPO/build); the helper is
                   DIR/helper/sbx-helper
  --helper PATH    the sbx-helper binary to use (default: \$SBX_HELPER, else the above)
  OUTDIR           where /out lands (default: a new directory under \${TMPDIR:-/tmp})

sbx-helper refuses to run as real root: as root, use packaging/run-example.sh.
EOF
}

BUILD_DIR=$REPO/build
HELPER=${SBX_HELPER:-}
DIRECT=0
OUT=
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) [ $# -ge 2 ] || { usage >&2; exit 2; }; BUILD_DIR=$2; shift 2 ;;
        --helper)    [ $# -ge 2 ] || { usage >&2; exit 2; }; HELPER=$2; shift 2 ;;
        --direct)    DIRECT=1; shift ;;
        -h|--help)   usage; exit 0 ;;
        -*)          usage >&2; exit 2 ;;
        *)           [ -z "$OUT" ] || { usage >&2; exit 2; }; OUT=$1; shift ;;
    esac
done
[ -n "$HELPER" ] || HELPER=$BUILD_DIR/helper/sbx-helper
if [ ! -x "$HELPER" ]; then
    echo "run.sh: no sbx-helper at $HELPER (build first: packaging/setup.sh)" >&2
    exit 1
fi
if [ -z "$OUT" ]; then
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/sbx-reconcile.XXXXXX")
else
    mkdir -p "$OUT"
fi

# Through the sbxctl CLI and sbxd (a private one when none is running), as a
# parent service would; --direct runs sbx-helper alone.
SBX=$BUILD_DIR/clients/sbxctl
if [ "$DIRECT" -eq 0 ] && [ -x "$SBX" ]; then
    cmd=("$SBX" run --policy "$HERE/policy.json" --data "$HERE" --out "$OUT"
         -- /usr/bin/python3 /data/reconcile.py)
else
    cmd=("$HELPER" run --policy "$HERE/policy.json" --data "$HERE" --out "$OUT"
         -- /usr/bin/python3 /data/reconcile.py)
fi
echo "run.sh: ${cmd[*]}"
rc=0
"${cmd[@]}" || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "run.sh: ${cmd[0]##*/} exited with status $rc" >&2
fi

if [ -f "$OUT/report.csv" ]; then
    echo
    echo "== $OUT/report.csv"
    if command -v column >/dev/null 2>&1; then
        column -t -s, "$OUT/report.csv"
    else
        cat "$OUT/report.csv"
    fi
fi
if [ -f "$OUT/summary.json" ]; then
    echo
    echo "== $OUT/summary.json"
    cat "$OUT/summary.json"
fi
if [ ! -f "$OUT/report.csv" ] && [ "$rc" -eq 0 ]; then
    echo "run.sh: the run wrote no $OUT/report.csv" >&2
    rc=1
fi
exit "$rc"
