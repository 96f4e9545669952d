# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# check_sbxd.sh — sbxd as a host runs it: a system unit with Delegate=yes,
# User= a service user, no cgroup_root anywhere; the reconciliation example
# and a memory bomb through it; a pinned busybox image on this 6.1 kernel;
# and after stop, no process of the service user and no cgroup left.

# The unit and its config, written at first use (the image holds none: a new
# sbxd option needs no new image).
sbxd_unit_install() {
    [ -f /run/systemd/system/$UNIT ] && return 0
    mkdir -p /etc/sbx-vm
    cat > "$SBXD_CONF" <<JSON
{"listen": ["$SBXD_ENDPOINT"], "state_dir": "/var/lib/sbxd-vm",
 "helper": "$HELPER", "idle_seconds_default": 300, "drain_seconds": 5}
JSON
    chmod 0644 "$SBXD_CONF"
    cat > /run/systemd/system/$UNIT <<UNIT
[Unit]
Description=sbxd for the VM stage (Delegate=yes, no cgroup_root)

[Service]
User=$SVC
Group=$SVC
Delegate=yes
RuntimeDirectory=sbxd-vm
StateDirectory=sbxd-vm
ExecStart=$SBXD --config $SBXD_CONF
UNIT
    systemctl daemon-reload
}

# Starts the unit (if it is not running) and waits for Health; prints why not.
sbxd_unit_up() {
    sbxd_unit_install
    if ! systemctl is-active --quiet $UNIT; then
        systemctl start $UNIT || { echo "systemctl start $UNIT failed"; return 1; }
    fi
    for _ in $(seq 1 60); do
        if as_svc "$SBXCTL" --endpoint "$SBXD_ENDPOINT" health >> "$LOG" 2>&1; then return 0; fi
        if ! systemctl is-active --quiet $UNIT; then
            journalctl -u $UNIT --no-pager -n 50 >> "$LOG" 2>&1 || true
            printf '%s exited: %s' "$UNIT" "$(journalctl -u $UNIT --no-pager -o cat -n 20 2>/dev/null \
                | grep -m1 -E 'sbxd|error' | cut -c1-300)"
            return 1
        fi
        sleep 1
    done
    echo "sbxd did not answer Health at $SBXD_ENDPOINT within 60 s"
    return 1
}
sbxd_journal() { journalctl -u $UNIT --no-pager -o cat 2>/dev/null | tail -n 40 >> "$LOG" || true; }

check_sbxd_unit_reconcile() {
    local out rc=0 o
    sbxd_unit_up || return 1
    out=$(mktemp -d /tmp/sbxvm-recon.XXXXXX)
    chown "$SVC:$SVC" "$out"
    as_svc env SBX_ENDPOINT="$SBXD_ENDPOINT" bash "$EXAMPLE/run.sh" --build-dir "$BIN" "$out/out" \
        > "$out/log" 2>&1 < /dev/null || rc=$?
    cat "$out/log" >> "$LOG"
    sbxd_journal
    if [ "$rc" != 0 ] || [ ! -s "$out/out/report.csv" ] || [ ! -s "$out/out/summary.json" ]; then
        o=$(grep -m1 -E 'sbxctl: |error' "$out/log" | cut -c1-300)
        printf 'run.sh exit %s: %s' "$rc" "${o:-$(tail -n 1 "$out/log")}"
        rm -rf "$out"; return 1
    fi
    printf 'report.csv %s lines, summary %s' "$(wc -l < "$out/out/report.csv")" \
        "$(tr -d '\n ' < "$out/out/summary.json" | cut -c1-120)"
    rm -rf "$out"
}

check_sbxd_unit_memory() {
    local log rc=0
    sbxd_unit_up || return 1
    log=$(mktemp)
    as_svc "$SBXCTL" --endpoint "$SBXD_ENDPOINT" run --memory 64m --timeout 120 \
        -- "$PY" -c 'b = []
while True: b.append(bytearray(1 << 20)); b[-1][::4096] = b"\1" * 256' > "$log" 2>&1 < /dev/null || rc=$?
    { echo "== sbxctl run --memory 64m (memory bomb): exit $rc"; cat "$log"; } >> "$LOG"
    sbxd_journal
    if [ "$rc" != 137 ] || ! grep -qi '^sbxctl: oom' "$log"; then
        printf 'memory_mb 64 bomb through sbxd: exit %s (want 137 and "sbxctl: OOM"): %s' "$rc" "$(why "$log")"
        rm -f "$log"; return 1
    fi
    printf 'exit 137, %s' "$(grep -m1 -i '^sbxctl: oom' "$log" | cut -c1-200)"
    rm -f "$log"
}

# Issue 16, finding 1, as it was found: a sandbox registers epoll watches
# until its uid's fs.epoll.max_user_watches is spent (lowered here, a VM of
# our own, so that it takes seconds and little memory) and holds them. sbxd
# must still take a new connection (which it adds to its own epoll: the
# watches of sbxd's uid) and run another sandbox, and sbxd's user can still
# add watches: the sandbox's host uid is its own.
HOG_EPOLL='import errno, os, select, sys, time
fds = [os.pipe()[0] for _ in range(64)]
eps, n, why = [], 0, "none"
try:
    for _ in range(int(sys.argv[1])):
        ep = select.epoll()
        eps.append(ep)
        for fd in fds:
            ep.register(fd, select.EPOLLIN)
            n += 1
except OSError as e:
    why = errno.errorcode[e.errno]
print(n, why, flush=True)
time.sleep(90)'
SMALL_RUN=(--memory 256m --out-mb 64 --tmp-mb 64)
check_sbxd_unit_epoll() {
    local old log hog rc=0 line ok=yes detail=""
    sbxd_unit_up || return 1
    old=$(cat /proc/sys/fs/epoll/max_user_watches)
    log=$(mktemp); hog=$(mktemp)
    chmod 0644 "$log" "$hog"
    sysctl -qw fs.epoll.max_user_watches=20000
    # Small runs (a 448 MiB memory bound each): two of sbxctl's default
    # policy (2560 MiB each) do not fit this guest's memory together, and
    # capacity admission would refuse the second for that, not the watches.
    as_svc "$SBXCTL" --endpoint "$SBXD_ENDPOINT" run --timeout 120 "${SMALL_RUN[@]}" \
        -- "$PY" -c "$HOG_EPOLL" 1000 > "$hog" 2> "$hog.err" < /dev/null &
    local pid=$!
    # The hog's stdout only: sbxctl's own lines (the no --out warning) go
    # to its stderr.
    for _ in $(seq 1 60); do grep -q ' ' "$hog" && break; sleep 1; done
    line=$(head -n 1 "$hog")
    # The attack happened: the sandbox's uid has no watches left.
    [[ $line == *" ENOSPC" ]] || { ok=no; detail="sandbox: '$line' (want N ENOSPC)"; }
    # sbxd takes a new connection and runs a second sandbox meanwhile...
    if [ $ok = yes ] && ! as_svc timeout 60 "$SBXCTL" --endpoint "$SBXD_ENDPOINT" run \
            --timeout 30 "${SMALL_RUN[@]}" -- /bin/echo second-run-ok > "$log" 2>&1 < /dev/null; then
        ok=no; detail="a second run while the watches were held: $(why "$log")"
    fi
    [ $ok = no ] || grep -q '^second-run-ok$' "$log" || { ok=no; detail="second run: $(why "$log")"; }
    # ...and a process of sbxd's user can still add a watch.
    if [ $ok = yes ] && ! as_svc "$PY" -c 'import os, select
select.epoll().register(os.pipe()[0], select.EPOLLIN)' >> "$log" 2>&1; then
        ok=no; detail="sbxd's user cannot add an epoll watch: $(why "$log")"
    fi
    sysctl -qw fs.epoll.max_user_watches="$old"
    # The hog's sbxctl, not the runuser in front of it: on SIGTERM it tears
    # its run down and exits (a later check counts the service user's
    # processes).
    pkill -TERM -u "$SVC" -f 'import errno, os, select' 2>/dev/null || true
    for _ in $(seq 1 30); do
        pgrep -u "$SVC" -f 'import errno, os, select' > /dev/null || break
        sleep 1
    done
    wait "$pid" 2>/dev/null || rc=$?
    { echo "== epoll hog (max_user_watches 20000): $line; second run and sbxd's user: $ok"
      cat "$hog" "$hog.err" "$log"; } >> "$LOG"
    sbxd_journal
    rm -f "$log" "$hog" "$hog.err"
    [ $ok = yes ] || { printf '%s' "$detail"; return 1; }
    printf 'sandbox held %s watches (ENOSPC); sbxd ran a second sandbox and its uid added a watch' "${line%% *}"
}

# A busybox-static tree imported into the unit's store as its user, run by
# pin: a per-run read-only overlay of a store image on Linux 6.1.
check_image_pinned() {
    local src=/var/lib/$SVC/bbroot pin log rc=0
    sbxd_unit_up || return 1
    rm -rf "$src"
    install -d -o "$SVC" -g "$SVC" "$src" "$src/bin"
    install -o "$SVC" -g "$SVC" -m 0755 /bin/busybox "$src/bin/busybox"
    ln -s busybox "$src/bin/sh"
    chown -h "$SVC:$SVC" "$src/bin/sh"
    log=$(mktemp)
    pin=$(as_svc "$SBXD" image --config "$SBXD_CONF" import vmbox:1 --rootfs "$src" 2> "$log") || rc=$?
    { echo "== sbxd image import vmbox:1: exit $rc, pin $pin"; cat "$log"; } >> "$LOG"
    if [ "$rc" != 0 ] || [ -z "$pin" ]; then
        printf 'sbxd image import: exit %s: %s' "$rc" "$(why "$log")"; rm -f "$log"; return 1
    fi
    as_svc "$SBXCTL" --endpoint "$SBXD_ENDPOINT" run --image "$pin" \
        -- /bin/busybox sh -c 'echo pinned-ok; cat /proc/version' > "$log" 2>&1 < /dev/null || rc=$?
    { echo "== sbxctl run --image $pin: exit $rc"; cat "$log"; } >> "$LOG"
    sbxd_journal
    if [ "$rc" != 0 ] || ! grep -q '^pinned-ok$' "$log"; then
        printf 'run of %s: exit %s: %s' "${pin%%@*}" "$rc" "$(why "$log")"; rm -f "$log"; return 1
    fi
    printf '%s ran on %s' "${pin:0:30}…" "$(uname -r)"
    rm -f "$log"
}

# A run live in sbxd (an exec sleeping), then systemctl stop: nothing of the
# service user and no cgroup of the unit may remain.
check_sbxd_stop_clean() {
    local run live=no rc=0 log left cg new
    sbxd_unit_up || return 1
    log=$(mktemp)
    if run=$(as_svc "$SBXCTL" --endpoint "$SBXD_ENDPOINT" create 2>> "$log") && [ -n "$run" ] &&
        as_svc "$SBXCTL" --endpoint "$SBXD_ENDPOINT" exec --no-wait "$run" -- /bin/sleep 300 >> "$log" 2>&1; then
        live=yes
        sleep 2
    fi
    { echo "== live run before stop: $live ($run)"; cat "$log"; ps -u "$SVC" -o pid,args; } >> "$LOG"
    systemctl stop $UNIT || rc=$?
    sleep 1
    left=$(procs_of "$SVC" | paste -sd ' ' | cut -c1-300)
    cg=""
    [ -d /sys/fs/cgroup/system.slice/$UNIT ] && cg=system.slice/$UNIT
    new=$(cgroup_new_since "$LOGS/cgroups.start" | paste -sd ' ')
    { echo "== after stop (exit $rc): processes: $left; cgroup: $cg; new cgroups: $new"; } >> "$LOG"
    sbxd_journal
    if [ -n "$left" ] || [ -n "$cg" ] || [ -n "$new" ] || [ "$rc" != 0 ]; then
        printf 'after stop (exit %s): processes [%s], unit cgroup [%s], new cgroups [%s]' "$rc" "$left" "$cg" "$new"
        rm -f "$log"; return 1
    fi
    if [ "$live" != yes ]; then
        printf 'nothing left, but no run was live to end (create/exec: %s)' "$(why "$log")"
        rm -f "$log"; return 1
    fi
    echo "a live run ended by stop, no process of $SVC, no cgroup left"
    rm -f "$log"
}

# The exec init pid 1 makes ahead (prepare_exec) on cgroup v2: born in its
# own leaf (prep-N, clone3 CLONE_INTO_CGROUP) with the exec's limits, and
# the exec that claims it runs there, not in pid 1's cgroup or another's.
check_sbxd_exec_leaf_prepared() {
    local run log pid path dir i mem pids leaves=""
    sbxd_unit_up || return 1
    log=$(mktemp)
    run=$(as_svc "$SBXCTL" --endpoint "$SBXD_ENDPOINT" create "${SMALL_RUN[@]}" 2>> "$log") || true
    if [ -z "$run" ]; then printf 'create: %s' "$(why "$log")"; rm -f "$log"; return 1; fi
    for i in 1 2 3; do
        as_svc "$SBXCTL" --endpoint "$SBXD_ENDPOINT" exec --no-wait "$run" -- /bin/sleep "30.42$i" \
            >> "$log" 2>&1
        pid=""
        for _ in $(seq 1 100); do
            pid=$(pgrep -x -f "/bin/sleep 30.42$i" | head -n 1) || true
            [ -n "$pid" ] && break
            sleep 0.1
        done
        path=$(awk -F: '$1 == "0" { print $3 }' "/proc/$pid/cgroup" 2> /dev/null)
        dir=/sys/fs/cgroup$path
        mem=$(cat "$dir/memory.max" 2> /dev/null)
        pids=$(cat "$dir/pids.max" 2> /dev/null)
        { echo "== exec $i: pid $pid cgroup $path memory.max $mem pids.max $pids procs:"
          cat "$dir/cgroup.procs" 2> /dev/null; } >> "$LOG"
        leaves="$leaves ${path##*/}"
        if ! [[ $path =~ /sbx-[0-9]+-[0-9a-f]{8}/(prep|exec)-[0-9]+$ ]] || [ -z "$mem" ] ||
            [ "$mem" = max ]; then
            printf 'exec %s: not in a leaf of its own with limits: cgroup "%s" memory.max "%s"' \
                "$i" "${path:-never seen}" "$mem"
            as_svc "$SBXCTL" --endpoint "$SBXD_ENDPOINT" teardown "$run" >> "$log" 2>&1 || true
            cat "$log" >> "$LOG"; rm -f "$log"; return 1
        fi
        sleep 1
    done
    as_svc "$SBXCTL" --endpoint "$SBXD_ENDPOINT" teardown "$run" >> "$log" 2>&1 || true
    cat "$log" >> "$LOG"
    rm -f "$log"
    # distinct leaves, and at least one claimed from a prepared init
    if [ "$(tr ' ' '\n' <<< "$leaves" | sed '/^$/d' | sort -u | wc -l)" != 3 ] ||
        [[ $leaves != *prep-* ]]; then
        printf 'leaves not distinct or none prepared:%s' "$leaves"; return 1
    fi
    printf 'leaves:%s, each with memory.max set' "$leaves"
}
