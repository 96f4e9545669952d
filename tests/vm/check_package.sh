# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# check_package.sh — issue 18's "Done when", as an operator does it: the
# Debian packages built from this tree (packaging/build-debs.sh; run.sh
# --debs puts them in $SBX/debs) installed with dpkg, sbxd.service started
# by them, the reconciliation through the installed sbxctl and
# `python3 -m sbx_client` as a member of group sbx, the metrics scraped, a
# drain with a run in flight, a reload with a rotated token, and a purge
# that leaves nothing behind. The checks run in this order, each starting
# from where the one before left the host.

PKG_DEBS=$SBX/debs
PKG_UNIT=sbxd.service
PKG_CONF=/etc/sbx/sbxd.json
PKG_SOCK=ipc:///run/sbx/sbxd.sock
PKG_CTL=/usr/bin/sbxctl
# A local caller: a login user who is a member of group sbx, nothing more.
PKG_CALLER=sbxcaller
# What the checks keep between them (the guest's logs directory).
PKG_STATE=$LOGS/package.state
PKG_POLICY=/tmp/sbxvm-pkg-policy.json

as_caller() {
    runuser -u "$PKG_CALLER" -- env -i HOME=/home/$PKG_CALLER PATH=/usr/bin:/bin LANG=C.UTF-8 \
        TMPDIR=/tmp "$@"
}
pkg_journal() {
    journalctl -u $PKG_UNIT -u sbxd-check.service --no-pager -o cat 2>/dev/null | tail -n 60 >> "$LOG" || true
}
# The first line of sbxd's (or its check's) journal that says why it stopped or refused.
pkg_journal_why() {
    journalctl -u $PKG_UNIT -u sbxd-check.service --no-pager -o cat -n 40 2>/dev/null \
        | grep -m1 -E 'sbxd|sbx-helper|error|refus' | cut -c1-300
}

# pkg_health [CTL-ARGS...]: Health as the caller answers within 60 s; prints why not.
pkg_health() {
    local i
    for i in $(seq 1 60); do
        if as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" "$@" health >> "$LOG" 2>&1; then return 0; fi
        if ! systemctl is-active --quiet $PKG_UNIT && [ "$i" -gt 5 ]; then
            pkg_journal
            printf '%s is %s: %s' "$PKG_UNIT" "$(systemctl is-active $PKG_UNIT)" "$(pkg_journal_why)"
            return 1
        fi
        sleep 1
    done
    echo "sbxd.service did not answer Health at $PKG_SOCK within 60 s"
    return 1
}
# Starts the unit when it is not running and waits for Health.
pkg_up() {
    systemctl is-active --quiet $PKG_UNIT || systemctl start $PKG_UNIT \
        || { printf 'systemctl start %s failed: %s' "$PKG_UNIT" "$(pkg_journal_why)"; return 1; }
    pkg_health
}
pkg_installed() {
    dpkg-query -W -f='${db:Status-Status}' sbxd 2>/dev/null | grep -qx installed \
        || { echo "sbxd is not installed (package_install failed or did not run)"; return 1; }
}
pkg_policy() {
    cat > "$PKG_POLICY" <<'JSON'
{"image": "host", "mounts": [{"path": "/out", "mode": "rw"}], "env": {},
 "egress": {"policy": "deny", "allow": []},
 "limits": {"cpu": 1, "memory_mb": 256, "script_seconds": 120, "run_seconds": 600,
            "pids": 64, "out_mb": 16, "tmp_mb": 16, "output_kb": 64},
 "lifetime": "per_run"}
JSON
    chmod 0644 "$PKG_POLICY"
}
# pkg_set_config PYTHON-EXPR: edits /etc/sbx/sbxd.json (as `c`, a dict).
pkg_set_config() {
    "$PY" -c 'import json, sys
p = sys.argv[1]
c = json.load(open(p))
exec(sys.argv[2])
open(p + ".new", "w").write(json.dumps(c, indent=2) + "\n")' "$PKG_CONF" "$1" \
        && chmod 0644 "$PKG_CONF.new" && mv "$PKG_CONF.new" "$PKG_CONF"
}

check_package_install() {
    local d rc=0 f pid nnp score subs
    compgen -G "$PKG_DEBS/sbxd_*.deb" >/dev/null \
        || { echo "no sbxd .deb in $PKG_DEBS (packaging/vm/run.sh --debs DIR|build)"; return 1; }
    cgroup_tree > "$LOGS/cgroups.package"
    : > "$PKG_STATE"
    # The packages a host runs (the -dev package needs the build's -dev
    # packages, which a server does not have).
    d=()
    for f in sbxd sbxctl libsbxclient0 python3-sbx-client; do
        d+=("$(compgen -G "$PKG_DEBS/${f}_*.deb" | head -n 1)")
    done
    DEBIAN_FRONTEND=noninteractive dpkg -i "${d[@]}" >> "$LOG" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
        printf 'dpkg -i exit %s: %s' "$rc" "$(grep -m1 -E 'dpkg: |error' "$LOG" | cut -c1-300)"
        return 1
    fi
    systemctl is-enabled --quiet $PKG_UNIT || { echo "$PKG_UNIT is not enabled after dpkg -i"; return 1; }
    id -nG "$PKG_CALLER" 2>/dev/null | grep -qw sbx \
        || useradd --create-home --shell /bin/bash --groups sbx "$PKG_CALLER" >> "$LOG" 2>&1 \
        || { echo "useradd $PKG_CALLER failed"; return 1; }
    pkg_health || return 1
    # What postinst gave sbx: a system user, one range each, as the unit runs.
    subs="$(grep -c '^sbx:' /etc/subuid) $(grep -c '^sbx:' /etc/subgid)"
    [ "$subs" = "1 1" ] || { echo "sbx has '$subs' lines in /etc/subuid, /etc/subgid (want one each)"; return 1; }
    # Installed again (an upgrade to the same version): the range stays one,
    # the unit comes back.
    DEBIAN_FRONTEND=noninteractive dpkg -i "${d[0]}" >> "$LOG" 2>&1 \
        || { echo "dpkg -i of sbxd a second time failed: $(grep -m1 'dpkg: ' "$LOG")"; return 1; }
    subs="$(grep -c '^sbx:' /etc/subuid) $(grep -c '^sbx:' /etc/subgid)"
    [ "$subs" = "1 1" ] || { echo "a second install left '$subs' subuid/subgid lines (want 1 1)"; return 1; }
    pkg_health || return 1
    pid=$(systemctl show -p MainPID --value $PKG_UNIT)
    [ "$(ps -o user= -p "$pid")" = sbx ] \
        || { echo "sbxd (pid $pid) does not run as sbx: $(ps -o user= -p "$pid")"; return 1; }
    [ "$(stat -c '%G %a' /run/sbx/sbxd.sock)" = "sbx 660" ] \
        || { echo "/run/sbx/sbxd.sock is $(stat -c '%U:%G %a' /run/sbx/sbxd.sock) (want group sbx, 660)"; return 1; }
    nnp=$(awk '/^NoNewPrivs:/ {print $2}' /proc/"$pid"/status)
    [ "$nnp" = 0 ] || { echo "sbxd runs with NoNewPrivs=$nnp: newuidmap cannot gain its capabilities"; return 1; }
    # A caller outside group sbx cannot reach the socket at all.
    if runuser -u "$DEV" -- "$PKG_CTL" --endpoint "$PKG_SOCK" --call-timeout 5 health >> "$LOG" 2>&1; then
        echo "user $DEV (not in group sbx) reached /run/sbx/sbxd.sock"; return 1
    fi
    # An operator changes capacity as here: edit, reload, no restart (the
    # reserve the packaged config leaves unwritten is min(1024 MiB, an
    # eighth of the memory); 256 MiB on this small guest).
    pkg_set_config 'c.setdefault("capacity", {})["memory_reserve_mb"] = 256' \
        || { echo "editing $PKG_CONF failed"; return 1; }
    systemctl reload $PKG_UNIT >> "$LOG" 2>&1 || { echo "systemctl reload failed: $(pkg_journal_why)"; return 1; }
    for _ in $(seq 1 30); do
        journalctl -u $PKG_UNIT --no-pager 2>/dev/null | grep -q 'SIGHUP: reloaded .*capacity' && break
        sleep 1
    done
    journalctl -u $PKG_UNIT --no-pager 2>/dev/null | grep -q 'SIGHUP: reloaded .*capacity' \
        || { echo "a reload of capacity.memory_reserve_mb was not logged as applied: $(pkg_journal_why)"; return 1; }
    [ "$(systemctl show -p MainPID --value $PKG_UNIT)" = "$pid" ] \
        || { echo "the reload restarted sbxd (pid $pid before)"; return 1; }
    { echo "== systemd-analyze security $PKG_UNIT"; systemd-analyze security --no-pager $PKG_UNIT; } >> "$LOG" 2>&1
    score=$(systemd-analyze security --no-pager $PKG_UNIT 2>/dev/null | grep -m1 'Overall exposure level' \
        | sed -E 's/.*sbxd.service: *//; s/\x1b\[[0-9;]*m//g; s/ *:-?[|()]*$//')
    printf 'dpkg -i of 4 packages, sbxd.service active as sbx (NoNewPrivs 0), socket sbx 0660, subuid %s; INFO systemd-analyze security: %s' \
        "$(grep '^sbx:' /etc/subuid)" "${score:-?}"
}

# The audit log's artifacts_exported lines for the caller's uid (the
# packaged config's "log").
pkg_exported() {
    local uid
    uid=$(id -u "$PKG_CALLER")
    "$PY" -c 'import json, sys
n = 0
try:
    for line in open(sys.argv[1]):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        n += e.get("event") == "artifacts_exported" and e.get("uid") == int(sys.argv[2])
except OSError:
    pass
print(n)' /var/log/sbx/audit.log "$uid"
}

check_package_reconcile() {
    local out rc=0 o exported
    pkg_installed || return 1
    pkg_up || return 1
    out=$(mktemp -d /tmp/sbxvm-pkgrecon.XXXXXX)
    chown "$PKG_CALLER" "$out"
    exported=$(pkg_exported)
    as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" run --policy "$EXAMPLE/policy.json" --data "$EXAMPLE" \
        --out "$out/ctl" -- /usr/bin/python3 /data/reconcile.py > "$out/ctl.log" 2>&1 < /dev/null || rc=$?
    exported=$(( $(pkg_exported) - exported ))
    { echo "== /usr/bin/sbxctl run (reconcile): exit $rc"; cat "$out/ctl.log"; } >> "$LOG"
    if [ "$rc" != 0 ] || [ ! -s "$out/ctl/report.csv" ] || [ ! -s "$out/ctl/summary.json" ]; then
        o=$(why "$out/ctl.log"); pkg_journal; rm -rf "$out"
        printf 'sbxctl run exit %s: %s' "$rc" "$o"; return 1
    fi
    rc=0
    as_caller env SBX_ENDPOINT="$PKG_SOCK" "$PY" -m sbx_client run --policy "$EXAMPLE/policy.json" \
        --data "$EXAMPLE" --out "$out/py" -- /usr/bin/python3 /data/reconcile.py \
        > "$out/py.log" 2>&1 < /dev/null || rc=$?
    { echo "== python3 -m sbx_client run (reconcile): exit $rc"; cat "$out/py.log"; } >> "$LOG"
    if [ "$rc" != 0 ] || [ ! -s "$out/py/report.csv" ]; then
        o=$(tail -n 1 "$out/py.log" | cut -c1-300); pkg_journal; rm -rf "$out"
        printf 'python3 -m sbx_client run exit %s: %s' "$rc" "$o"; return 1
    fi
    if ! cmp -s "$out/ctl/report.csv" "$out/py/report.csv" || ! cmp -s "$out/ctl/summary.json" "$out/py/summary.json"; then
        rm -rf "$out"; echo "sbxctl's and sbx_client's report.csv or summary.json differ"; return 1
    fi
    # The same-host export is one way (the caller can send sbxd nothing), so
    # it needs no SO_PASSRIGHTS and is on here too, before Linux 6.16:
    # sbxctl's --out above was exported, not fetched in chunks.
    if journalctl -u $PKG_UNIT --no-pager -o cat 2>/dev/null | grep -q 'same_host_export is off'; then
        rm -rf "$out"; echo "kernel $(uname -r): sbxd turned the same-host export off"; return 1
    fi
    if [ "$exported" != 1 ]; then
        rm -rf "$out"
        echo "kernel $(uname -r): sbxctl run --out made $exported artifacts_exported lines for $PKG_CALLER, not 1 (fetched in chunks?)"
        return 1
    fi
    printf 'sbxctl and python3 -m sbx_client as %s (group sbx): report.csv %s lines, the same both ways; sbxctl'"'"'s --out exported on %s (audited), not chunked' \
        "$PKG_CALLER" "$(wc -l < "$out/ctl/report.csv")" "$(uname -r)"
    rm -rf "$out"
}

# Part D's listener (metrics.listen, 127.0.0.1:9464 in the packaged config).
check_package_metrics() {
    local body
    pkg_installed || return 1
    pkg_up || return 1
    body=$(mktemp)
    if ! "$PY" -c 'import sys, urllib.request
r = urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=30)
sys.stdout.write(r.headers.get("Content-Type", "") + "\n" + r.read().decode())' > "$body" 2>> "$LOG"; then
        rm -f "$body"; echo "GET http://127.0.0.1:9464/metrics failed: $(tail -n 1 "$LOG" | cut -c1-200)"; return 1
    fi
    head -c 20000 "$body" >> "$LOG"
    if ! grep -q '^sbx_build_info' "$body"; then
        rm -f "$body"; echo "the scrape has no sbx_build_info"; return 1
    fi
    printf '%s lines, %s' "$(wc -l < "$body")" "$(grep -m1 '^sbx_build_info' "$body" | cut -c1-160)"
    rm -f "$body"
}

# Part B's drain (drain_seconds; the unit's TimeoutStopSec=330): a run in
# flight when `systemctl stop` comes goes on, its result is fetched, and
# only then does sbxd stop; meanwhile Health says DRAINING and CreateRun is
# UNAVAILABLE "draining".
check_package_drain() {
    local out rc=0 run_pid stop_pid i seen=no refused=no o stop_rc=0
    pkg_installed || return 1
    pkg_up || return 1
    pkg_policy
    out=$(mktemp -d /tmp/sbxvm-pkgdrain.XXXXXX)
    chown "$PKG_CALLER" "$out"
    as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" run --policy "$PKG_POLICY" --out "$out/out" \
        -- /bin/sh -c 'echo started; sleep 20; echo drained-ok > /out/result; echo finished' \
        > "$out/run.log" 2>&1 < /dev/null &
    run_pid=$!
    for i in $(seq 1 90); do grep -q '^started' "$out/run.log" && break; sleep 1; done
    grep -q '^started' "$out/run.log" || { kill "$run_pid" 2>/dev/null; o=$(why "$out/run.log"); rm -rf "$out"
        echo "the run did not start: $o"; return 1; }
    systemctl stop $PKG_UNIT >> "$LOG" 2>&1 &
    stop_pid=$!
    for i in $(seq 1 30); do
        if as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" health > "$out/health" 2>&1; then
            grep -qi 'draining' "$out/health" && { seen=yes; break; }
        fi
        sleep 0.5
    done
    cat "$out/health" >> "$LOG"
    if as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" run --policy "$PKG_POLICY" -- /bin/true \
        > "$out/refused" 2>&1 < /dev/null; then
        refused="accepted"
    elif grep -q 'UNAVAILABLE' "$out/refused" && grep -qi 'draining' "$out/refused"; then
        refused=yes
    else
        refused="$(why "$out/refused")"
    fi
    cat "$out/refused" >> "$LOG"
    wait "$run_pid" || rc=$?
    wait "$stop_pid" || stop_rc=$?
    { echo "== the run in flight: exit $rc"; cat "$out/run.log"; } >> "$LOG"
    pkg_journal
    o=
    [ "$seen" = yes ] || o="Health never said DRAINING while stopping: $(head -c 200 "$out/health")"
    [ -n "$o" ] || [ "$refused" = yes ] || o="CreateRun while draining: $refused (want UNAVAILABLE draining)"
    [ -n "$o" ] || [ "$rc" = 0 ] || o="the run in flight: exit $rc: $(why "$out/run.log")"
    [ -n "$o" ] || grep -qx 'drained-ok' "$out/out/result" 2>/dev/null || o="the run's /out/result was not fetched"
    [ -n "$o" ] || [ "$stop_rc" = 0 ] || o="systemctl stop exit $stop_rc"
    [ -n "$o" ] || ! systemctl is-active --quiet $PKG_UNIT || o="sbxd.service still active after the stop"
    [ -n "$o" ] || [ -z "$(procs_of sbx)" ] || o="processes of sbx after the stop: $(procs_of sbx | head -n 3 | tr '\n' ';')"
    rm -rf "$out"
    [ -z "$o" ] || { echo "$o"; return 1; }
    echo "Health DRAINING, CreateRun UNAVAILABLE draining, the run's result fetched, then the stop completed"
}

# Part B's reload: a token rotated in /etc/sbx/sbxd.json and `systemctl
# reload` while a run lives: the old token refused, the new one accepted,
# the run untouched; an invalid config refused and the old one kept.
check_package_reload() {
    local d old new sha_old sha_new run ex rc=0 o pid
    pkg_installed || return 1
    pkg_policy
    d=$(mktemp -d /tmp/sbxvm-pkgreload.XXXXXX)
    chown "$PKG_CALLER" "$d"
    old=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    new=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    printf %s "$old" > "$d/old"; printf %s "$new" > "$d/new"
    chown "$PKG_CALLER" "$d/old" "$d/new"; chmod 0600 "$d/old" "$d/new"
    sha_old=$(printf %s "$old" | sha256sum | cut -d' ' -f1)
    sha_new=$(printf %s "$new" | sha256sum | cut -d' ' -f1)
    cp "$PKG_CONF" "$d/conf.orig"
    pkg_set_config "c['tokens'] = [{'name': 'ci', 'sha256': '$sha_old'}]" || { echo "cannot edit $PKG_CONF"; return 1; }
    systemctl restart $PKG_UNIT >> "$LOG" 2>&1 || { echo "restart with a token failed: $(pkg_journal_why)"; return 1; }
    pkg_health --token-file "$d/old" || return 1
    run=$(as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" --token-file "$d/old" create --policy "$PKG_POLICY" 2>> "$LOG")
    ex=$(as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" --token-file "$d/old" exec "$run" --no-wait \
        -- /bin/sh -c 'sleep 15; echo reload-ok > /out/result' 2>> "$LOG")
    { [ -n "$run" ] && [ -n "$ex" ]; } || { echo "create/exec with the old token failed: $(tail -n 1 "$LOG")"; return 1; }
    pid=$(systemctl show -p MainPID --value $PKG_UNIT)
    pkg_set_config "c['tokens'] = [{'name': 'ci', 'sha256': '$sha_new'}]"
    systemctl reload $PKG_UNIT >> "$LOG" 2>&1 || { echo "systemctl reload failed: $(pkg_journal_why)"; return 1; }
    o=
    # The reload is asynchronous: the old token is refused within 30 s.
    for _ in $(seq 1 30); do
        if ! as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" --token-file "$d/old" health > "$d/oldh" 2>&1 \
            && grep -q 'UNAUTHENTICATED' "$d/oldh"; then
            break
        fi
        sleep 1
    done
    grep -q 'UNAUTHENTICATED' "$d/oldh" \
        || o="the old token after the reload: want UNAUTHENTICATED, got: $(why "$d/oldh")"
    [ -n "$o" ] || as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" --token-file "$d/new" status "$run" > "$d/st" 2>&1 \
        || o="the new token: $(why "$d/st")"
    [ -n "$o" ] || [ "$(systemctl show -p MainPID --value $PKG_UNIT)" = "$pid" ] || o="sbxd restarted instead of reloading"
    [ -n "$o" ] || as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" --token-file "$d/new" wait "$run" "$ex" >> "$LOG" 2>&1 \
        || o="the run's exec after the reload did not end well (exit $?)"
    [ -n "$o" ] || [ "$(as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" --token-file "$d/new" fetch "$run" result - 2>> "$LOG")" = reload-ok ] \
        || o="the run's /out/result after the reload is not reload-ok"
    # An invalid config: refused, logged, the old one (the new token) kept.
    if [ -z "$o" ]; then
        cp "$PKG_CONF" "$d/conf.good"
        printf '{"listen": ["%s"], "no_such_key": 1}\n' "$PKG_SOCK" > "$PKG_CONF"
        systemctl reload $PKG_UNIT >> "$LOG" 2>&1 || true
        sleep 2
        systemctl is-active --quiet $PKG_UNIT || o="an invalid config on reload stopped sbxd: $(pkg_journal_why)"
        [ -n "$o" ] || as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" --token-file "$d/new" health >> "$LOG" 2>&1 \
            || o="after an invalid config's reload the new token is refused"
        [ -n "$o" ] || journalctl -u $PKG_UNIT --no-pager -o cat | grep -q 'no_such_key' \
            || o="the invalid config's refusal is not in the journal (naming no_such_key)"
        cp "$d/conf.good" "$PKG_CONF"
    fi
    as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" --token-file "$d/new" teardown "$run" >> "$LOG" 2>&1 || true
    pkg_journal
    # The packaged config again, for the purge.
    cp "$d/conf.orig" "$PKG_CONF"; chmod 0644 "$PKG_CONF"
    systemctl restart $PKG_UNIT >> "$LOG" 2>&1 || true
    rm -rf "$d"
    [ -z "$o" ] || { echo "$o"; return 1; }
    echo "old token UNAUTHENTICATED, new token sees the run, its exec ended and its result fetched, same pid; an invalid config refused and the old one kept"
}

# The warm pool under the packaged unit (systemd, cgroup v2): a reload that
# adds a pool of 2 fills it, a CreateRun of its policy is warm and runs, and
# a reload back to the packaged config (no pool) leaves no row.
check_package_pool() {
    local d run o= i
    pkg_installed || return 1
    pkg_up || return 1
    pkg_policy
    d=$(mktemp -d /tmp/sbxvm-pkgpool.XXXXXX)
    cp "$PKG_CONF" "$d/conf.orig"
    pkg_set_config "c['pool'] = [{'name': 'vm', 'policy': json.load(open('$PKG_POLICY')), 'size': 2}]" \
        || { rm -rf "$d"; echo "cannot edit $PKG_CONF"; return 1; }
    systemctl reload $PKG_UNIT >> "$LOG" 2>&1 || { rm -rf "$d"; echo "systemctl reload failed: $(pkg_journal_why)"; return 1; }
    for i in $(seq 1 60); do
        as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" health > "$d/h" 2>&1 && grep -q '^pool vm: 2 of 2 ready' "$d/h" && break
        sleep 1
    done
    cat "$d/h" >> "$LOG"
    grep -q '^pool vm: 2 of 2 ready' "$d/h" || o="the pool did not fill after the reload: $(grep -m1 '^pool' "$d/h" || why "$d/h")"
    if [ -z "$o" ]; then
        run=$(as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" create --policy "$PKG_POLICY" 2>> "$LOG")
        as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" status "$run" > "$d/st" 2>&1
        cat "$d/st" >> "$LOG"
        grep -q '^launch warm' "$d/st" || o="a CreateRun of the pool's policy is not warm: $(why "$d/st")"
        [ -n "$o" ] || [ "$(as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" exec "$run" -- /bin/sh -c 'echo warm-ok' 2>> "$LOG")" = warm-ok ] \
            || o="an exec in the warm run did not print warm-ok"
        as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" teardown "$run" >> "$LOG" 2>&1 || true
    fi
    cp "$d/conf.orig" "$PKG_CONF"; chmod 0644 "$PKG_CONF"
    systemctl reload $PKG_UNIT >> "$LOG" 2>&1 || true
    if [ -z "$o" ]; then
        for i in $(seq 1 30); do
            as_caller "$PKG_CTL" --endpoint "$PKG_SOCK" health > "$d/h" 2>&1 && ! grep -q '^pool ' "$d/h" && break
            sleep 1
        done
        grep -q '^pool ' "$d/h" && o="a reload to no pool left its row: $(grep -m1 '^pool' "$d/h")"
    fi
    pkg_journal
    rm -rf "$d"
    [ -z "$o" ] || { echo "$o"; return 1; }
    printf 'a reload filled a pool of 2; a CreateRun of its policy was warm and ran; the next reload emptied it'
}

check_package_purge() {
    local left="" p ranges
    pkg_installed || return 1
    ranges=$(grep '^sbx:' /etc/subuid || true)
    DEBIAN_FRONTEND=noninteractive dpkg --purge python3-sbx-client sbxctl libsbxclient0 sbxd >> "$LOG" 2>&1 \
        || { echo "dpkg --purge failed: $(grep -m1 -E 'dpkg: |error' "$LOG" | cut -c1-300)"; return 1; }
    for p in /etc/sbx /var/lib/sbx /var/log/sbx /run/sbx /usr/sbin/sbxd /usr/libexec/sbx \
             /lib/systemd/system/sbxd.service /lib/systemd/system/sbxd-check.service \
             /etc/systemd/system/multi-user.target.wants/sbxd.service; do
        [ ! -e "$p" ] || left="$left $p"
    done
    [ -z "$left" ] || { echo "left after purge:$left"; return 1; }
    ! grep -q '^sbx:' /etc/subuid /etc/subgid || { echo "sbx's subordinate ids still in /etc/subuid or /etc/subgid"; return 1; }
    [ -z "$(ps -u sbx -o pid= 2>/dev/null)" ] || { echo "processes of sbx after purge: $(ps -u sbx -o args= | head -n 2 | tr '\n' ';')"; return 1; }
    if [ -n "$ranges" ]; then
        local start count
        start=$(cut -d: -f2 <<< "$ranges"); count=$(cut -d: -f3 <<< "$ranges")
        [ -z "$(ps -e -o uid=,args= | awk -v s="$start" -v n="$count" '$1 >= s && $1 < s + n')" ] \
            || { echo "processes of sbx's sandbox uids after purge"; return 1; }
    fi
    left=$(cgroup_new_since "$LOGS/cgroups.package" | grep -E 'sbx' || true)
    [ -z "$left" ] || { echo "cgroups left: $(head -n 3 <<< "$left" | tr '\n' ' ')"; return 1; }
    systemctl is-active --quiet $PKG_UNIT && { echo "sbxd.service still active"; return 1; }
    echo "no /etc/sbx, /var/lib/sbx, /var/log/sbx, /run/sbx, no unit, no subuid lines, no process or cgroup of sbx (user sbx kept: $(getent passwd sbx | cut -d: -f1,3 || echo none))"
}
