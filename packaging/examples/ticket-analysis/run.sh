#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh — the ticket-analysis example: a job whose egress allowlist has exactly
# one entry, an internal "run-record API". It starts that API (a stand-in,
# run_records_api.py) on the host's 127.0.0.1, names it run-records.internal in
# a hosts file of its own, starts a private sbxd whose egress proxy resolves
# through that file, and runs analyze_tickets.py in a sandbox: it reads
# /data/tickets.csv, writes /out/summary.json, posts the summary to the API
# through the proxy, and tries two hosts the allowlist does not hold (refused:
# 403 not_allowed). Then it shows what the API stored and the run's egress
# records (run id, host, bytes) from `sbxctl status` and sbxd's audit log.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
PY=/usr/bin/python3
API_NAME=run-records.internal

usage() {
    cat <<EOF
Usage: packaging/examples/ticket-analysis/run.sh [--build-dir DIR] [--keep DIR] [OUTDIR]

Starts the run-record API on 127.0.0.1 (a free port P), a hosts file naming it
$API_NAME, and sbxd with that hosts file as its egress resolver (no
nameserver); then, through the sbxctl CLI:
  sbxctl create --policy <policy.json with the entry's port set to P> --data $HERE
  sbxctl exec RUN -- /usr/bin/python3 /data/analyze_tickets.py \\
                  --api http://$API_NAME:P/v1/run-records
  sbxctl status RUN; sbxctl fetch RUN --all OUTDIR; sbxctl teardown RUN
and prints what the API stored and the run's egress records.

  --build-dir DIR  where sbx was built (default: $REPO/build): DIR/clients/sbxctl,
                   DIR/server/sbxd, DIR/helper/sbx-helper
  --keep DIR       keep sbxd's directory (config, hosts, audit.log, manifest.json,
                   api-records.json, api-connections.jsonl) in DIR instead of
                   removing it; DIR must be short (its socket path must fit 108 bytes)
  OUTDIR           where /out lands (default: a new directory under \${TMPDIR:-/tmp})

sbxd and sbx-helper refuse to run as real root: as root, use
packaging/run-example.sh --example ticket-analysis.
EOF
}

say() { printf 'run.sh: %s\n' "$*"; }
die() { printf 'run.sh: error: %s\n' "$*" >&2; exit 1; }

BUILD_DIR=$REPO/build
KEEP=
OUT=
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) [ $# -ge 2 ] || { usage >&2; exit 2; }; BUILD_DIR=$2; shift 2 ;;
        --keep)      [ $# -ge 2 ] || { usage >&2; exit 2; }; KEEP=$2; shift 2 ;;
        -h|--help)   usage; exit 0 ;;
        -*)          usage >&2; exit 2 ;;
        *)           [ -z "$OUT" ] || { usage >&2; exit 2; }; OUT=$1; shift ;;
    esac
done
[ "$(id -u)" != 0 ] || die "sbxd and sbx-helper refuse root: run packaging/run-example.sh --example ticket-analysis"
SBX=$BUILD_DIR/clients/sbxctl
SBXD=$BUILD_DIR/server/sbxd
HELPER=$BUILD_DIR/helper/sbx-helper
for b in "$SBX" "$SBXD" "$HELPER"; do
    [ -x "$b" ] || die "no $b (build first: packaging/setup.sh)"
done
HELPER=$(realpath "$HELPER")   # sbxd's config wants an absolute path
[ -x "$PY" ] || die "no $PY"

if [ -z "$OUT" ]; then
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/sbx-tickets.XXXXXX")
else
    mkdir -p "$OUT"
fi
if [ -n "$KEEP" ]; then
    mkdir -p "$KEEP"
    WORK=$(realpath "$KEEP")
else
    base=${TMPDIR:-/tmp}
    [ ${#base} -le 60 ] || base=/tmp   # the ipc socket's path must fit sun_path
    WORK=$(mktemp -d "$base/sbx-tickets-work.XXXXXX")
fi
SOCK=$WORK/sbxd.sock
[ ${#SOCK} -lt 100 ] || die "$SOCK: too long for a unix socket (choose a shorter --keep)"
EP=ipc://$SOCK

API_PID=
SBXD_PID=
stop() {   # stop PID: SIGTERM, then SIGKILL after 30 s
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 600; i++)); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    # sbxd first: its SIGTERM tears down a run still alive (its relays end).
    [ -z "$SBXD_PID" ] || stop "$SBXD_PID"
    [ -z "$API_PID" ] || stop "$API_PID"
    if [ -z "$KEEP" ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- the API
# Port 0: the API takes a free port itself and writes it down, so nothing
# else can take it between choosing and listening.
"$PY" "$HERE/run_records_api.py" --port 0 --port-file "$WORK/api-port" \
    --log "$WORK/api-connections.jsonl" 2>"$WORK/api.stderr" &
API_PID=$!
for ((i = 0; i < 200; i++)); do
    [ ! -s "$WORK/api-port" ] || break
    kill -0 "$API_PID" 2>/dev/null || die "the API exited: $(cat "$WORK/api.stderr")"
    sleep 0.05
done
[ -s "$WORK/api-port" ] || die "the API did not start within 10 s"
PORT=$(cat "$WORK/api-port")
printf '127.0.0.1 %s\n' "$API_NAME" >"$WORK/hosts"
say "the run-record API listens on 127.0.0.1:$PORT; $WORK/hosts names it $API_NAME"

# The allowlist entry's port is the API's, known only now: the policy run is
# policy.json with that one number changed (and nothing else).
"$PY" - "$HERE/policy.json" "$WORK/policy.json" "$API_NAME" "$PORT" <<'EOF'
import json, sys
src, dst, name, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with open(src) as f:
    p = json.load(f)
allow = p["egress"]["allow"]
if len(allow) != 1 or allow[0].get("host") != name:
    sys.exit("%s: expected one allowlist entry for %s" % (src, name))
allow[0]["port"] = port
with open(dst, "w") as f:
    json.dump(p, f, indent=2)
    f.write("\n")
EOF
say "policy: $HERE/policy.json with the entry's port set to $PORT ($WORK/policy.json)"

# ---------------------------------------------------------------- sbxd
# A private sbxd, as `sbxctl run` would start, but with a config: its egress
# resolver reads our hosts file and no nameserver (a name not in the file
# fails at once with 502 lookup_failed; an unlisted one never gets that far).
"$PY" - "$WORK" "$EP" "$HELPER" <<'EOF'
import json, os, sys
work, ep, helper = sys.argv[1:4]
cfg = {"listen": [ep], "state_dir": os.path.join(work, "state"), "helper": helper,
       "log": os.path.join(work, "audit.log"),
       "egress": {"hosts_file": os.path.join(work, "hosts"), "resolv_conf": ""}}
with open(os.path.join(work, "sbxd.json"), "w") as f:
    json.dump(cfg, f, indent=2)
    f.write("\n")
EOF
say "$SBXD --config $WORK/sbxd.json"
"$SBXD" --config "$WORK/sbxd.json" </dev/null >"$WORK/sbxd.stderr" 2>&1 &
SBXD_PID=$!
for ((i = 0; i < 300; i++)); do
    ! "$SBX" --endpoint "$EP" health >/dev/null 2>&1 || break
    kill -0 "$SBXD_PID" 2>/dev/null || { SBXD_PID=; die "sbxd exited: $(tail -c 1500 "$WORK/sbxd.stderr")"; }
    sleep 0.05
done
"$SBX" --endpoint "$EP" health >/dev/null || die "sbxd did not answer within 15 s: $(tail -c 1500 "$WORK/sbxd.stderr")"
sbxctl() { "$SBX" --endpoint "$EP" "$@"; }
rc=0
failed() { [ "$rc" -ne 0 ] || rc=1; }   # a later step failed: exit 1 unless the script did

# ---------------------------------------------------------------- the run
RUN=$(sbxctl create --policy "$WORK/policy.json" --data "$HERE")
say "created $RUN (inputs: every file of $HERE, as /data)"
API_URL=http://$API_NAME:$PORT/v1/run-records
cmd=(/usr/bin/python3 /data/analyze_tickets.py --api "$API_URL")
echo
echo "== sbxctl exec $RUN -- ${cmd[*]}"
sbxctl exec "$RUN" -- "${cmd[@]}" || rc=$?
[ "$rc" -eq 0 ] || say "the script exited with status $rc" >&2

echo
echo "== sbxctl status $RUN"
sbxctl status "$RUN" || failed
sbxctl fetch "$RUN" --all "$OUT" || failed
sbxctl teardown "$RUN" >"$WORK/manifest.json" || failed

if [ -f "$OUT/summary.json" ]; then
    echo
    echo "== $OUT/summary.json (written in the sandbox; one line per key here)"
    "$PY" -c 'import json,sys
for k, v in json.load(open(sys.argv[1])).items():
    print("%-17s %s" % (k, json.dumps(v)))' "$OUT/summary.json" || failed
else
    say "the run wrote no $OUT/summary.json" >&2
    failed
fi

echo
echo "== what the run-record API stored (GET http://127.0.0.1:$PORT/v1/run-records, from the host)"
"$PY" - "http://127.0.0.1:$PORT/v1/run-records" "$WORK/api-records.json" <<'EOF' || failed
import json, sys, time, urllib.request
# From the host, straight to the API: no proxy, whatever the environment says.
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
with opener.open(sys.argv[1], timeout=10) as r:
    records = json.load(r)["records"]
with open(sys.argv[2], "w") as f:
    json.dump(records, f, indent=1)
for r in records:
    s = r["record"]
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r["received_unix_ms"] / 1000))
    print("%s received %s: %s tickets from %s, by category %s, oldest open %s" % (
        r["id"], at, s.get("tickets"), s.get("source"),
        json.dumps(s.get("by_category")), (s.get("oldest_open") or {}).get("id")))
if not records:
    sys.exit("the API stored nothing")
EOF

echo
echo "== the run's egress records ($WORK/audit.log: egress_decision + egress_close)"
"$PY" "$HERE/egress_records.py" "$WORK/audit.log" "$RUN" || failed
echo
echo "== the manifest's egress destinations (sbxctl teardown)"
"$PY" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get("egress", []), indent=1))' \
    "$WORK/manifest.json" || failed
[ -z "$KEEP" ] || say "sbxd's directory is kept in $WORK"
exit "$rc"
