# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# check_env.sh — the guest is the host the stage claims: Debian 12's cloud
# kernel 6.1, systemd as pid 1, cgroup v2 alone with nsdelegate, the
# developer's user manager up, sbx's binaries loadable. A FAIL here is the
# stage's own fault, not sbx's.

check_env_guest() {
    local k pid1 mnt
    k=$(uname -r)
    pid1=$(cat /proc/1/comm)
    mnt=$(awk '$2 == "/sys/fs/cgroup" { print $3, $4 }' /proc/mounts)
    {
        echo "kernel $k; pid 1 $pid1; /sys/fs/cgroup: $mnt"
        systemctl --version | head -n 1
        echo "root controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
        echo "user@$DEV_UID delegated: $(cat /sys/fs/cgroup/user.slice/user-$DEV_UID.slice/user@$DEV_UID.service/cgroup.controllers 2>&1)"
    } >> "$LOG"
    [[ $k == 6.1.* && $k == *-cloud-amd64 ]] || { echo "kernel $k is not Debian 12's 6.1 cloud kernel"; return 1; }
    [ "$pid1" = systemd ] || { echo "pid 1 is $pid1, not systemd"; return 1; }
    [[ $mnt == cgroup2\ * ]] || { echo "/sys/fs/cgroup is '$mnt', not cgroup2"; return 1; }
    [[ $mnt == *nsdelegate* ]] || { echo "cgroup2 mounted without nsdelegate: $mnt"; return 1; }
    if grep -q ' cgroup ' /proc/mounts; then echo "a cgroup v1 hierarchy is mounted too"; return 1; fi
    systemctl is-active --quiet "user@$DEV_UID.service" \
        || { echo "user@$DEV_UID.service (the developer's user manager) is not active"; return 1; }
    [ -S /run/user/$DEV_UID/bus ] || { echo "no user bus at /run/user/$DEV_UID/bus"; return 1; }
    local b missing
    for b in "$HELPER" "$SBXD" "$SBXCTL"; do
        [ -x "$b" ] || { echo "$b is missing from the stage disk"; return 1; }
        missing=$(ldd "$b" 2>&1 | grep 'not found' | tr -s ' \t' ' ' || true)
        [ -z "$missing" ] || { echo "${b##*/} needs libraries the guest lacks (add them to packaging/vm/packages.txt):$missing"; return 1; }
    done
    echo "kernel $k, systemd pid 1, $mnt"
}

# The same-host export's one-way channel rests on the kernel: a unix socket
# shut down for reading before it connects refuses (EPIPE) whatever the
# peer sends, descriptors included, and the peer's close is seen as
# POLLHUP with what it left unread (server/runs/runs_side.c). Checked on
# this 6.1 with sbxd's own calls (tests/vm/side_oneway.py), as sbxd makes
# them here: no SO_PASSRIGHTS before 6.16.
check_side_oneway() {
    local out rc=0
    out=$(as_dev "$PY" "$SBX/tests/vm/side_oneway.py" 2>> "$LOG") || rc=$?
    echo "$out" >> "$LOG"
    [ "$rc" = 0 ] || { printf 'kernel %s: %s' "$(uname -r)" "$(printf '%s' "${out:-no output}" | cut -c1-600)"; return 1; }
    printf 'kernel %s: a socket shut for reading before connect refuses bytes and SCM_RIGHTS (EPIPE), nothing queued; the caller'"'"'s close is POLLHUP (ECONNRESET if it left some unread)' "$(uname -r)"
}

# The af_unix garbage collector: where it runs in the task that releases a
# unix socket (before Linux 6.8), another user's in-flight garbage -- a
# lingering TCP socket among it -- is closed in that task. The export's
# worker closes its side socket at the end of each call
# (tests/vm/side_gc.py plays that close).
check_side_gc() {
    local out rc=0
    out=$(as_dev "$PY" "$SBX/tests/vm/side_gc.py" 5 2>> "$LOG") || rc=$?
    echo "$out" >> "$LOG"
    [ "$rc" = 0 ] || { printf 'kernel %s: %s' "$(uname -r)" "$(printf '%s' "${out:-no output}" | cut -c1-600)"; return 1; }
    printf 'kernel %s: %s' "$(uname -r)" "$out"
}

# Every other route from the caller to sbxd's export socket (flags, control
# messages, an address, splice, sendfile, a forked holder; its name: none).
check_side_routes() {
    local out rc=0
    out=$(as_dev "$PY" "$SBX/tests/vm/side_routes.py" 2>> "$LOG") || rc=$?
    echo "$out" >> "$LOG"
    [ "$rc" = 0 ] || { printf 'kernel %s: %s' "$(uname -r)" "$(printf '%s' "${out:-no output}" | cut -c1-600)"; return 1; }
    printf '%s' "$out"
}
