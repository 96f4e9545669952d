# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# lib.sh — what every guest check uses (sourced by run-check.sh, inside the
# VM): where sbx is, running as the developer or the service user, and the
# one way a check reports. A check is a function check_NAME that prints why it
# failed on stdout and returns non-zero, or returns 0; its detail goes to
# $LOG (the VM's logs directory, kept by packaging/vm/run.sh --keep).

SBX=/opt/sbx
BIN=$SBX/build
HELPER=$BIN/helper/sbx-helper
SBXD=$BIN/server/sbxd
SBXCTL=$BIN/clients/sbxctl
EXAMPLE=$SBX/packaging/examples/reconcile
LOGS=$SBX/logs
DEV=dev
DEV_UID=1000
SVC=sbxsvc
UNIT=sbxd-vm.service
SBXD_ENDPOINT=ipc:///run/sbxd-vm/sbxd.sock
SBXD_CONF=/etc/sbx-vm/sbxd.json
PY=/usr/bin/python3

# A developer's login: `runuser -l` goes through PAM's runuser-l, whose
# pam_systemd registers a logind session, so the command runs in a
# session-*.scope under user-UID.slice as after an ssh login (the only place
# from which sbx-helper asks the user manager for a scope: a process of a
# system unit, such as the one running these checks, belongs to that unit).
# The environment is the login's own (pam_systemd's XDG_RUNTIME_DIR, the user
# bus) and nothing of root's; the caller's directory is kept. DEV_WRAP, when
# set, is what the login runs under (no_clone3.py: a seccomp filter, as a
# container runtime's).
DEV_WRAP=()
as_dev() {
    local cmd
    cmd=$(printf '%q ' "$@")
    "${DEV_WRAP[@]}" runuser -l "$DEV" -c "cd $(printf '%q' "$PWD") 2>/dev/null; exec env -i \
        HOME=/home/$DEV USER=$DEV LOGNAME=$DEV SHELL=/bin/bash \
        PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 TMPDIR=/tmp \
        XDG_RUNTIME_DIR=/run/user/$DEV_UID \
        DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$DEV_UID/bus $cmd"
}
# The same inside a transient scope of the developer's user manager with
# Delegate=yes: what a user does by hand before sbx creates its own scope.
as_dev_scope() {
    as_dev systemd-run --user --scope --quiet -p Delegate=yes -- "$@"
}
as_svc() {
    runuser -u "$SVC" -- env -i HOME=/var/lib/$SVC PATH=/usr/bin:/bin LANG=C.UTF-8 "$@"
}

# A scratch directory the developer owns (removed by the caller's trap).
dev_tmp() {
    local d
    d=$(mktemp -d /tmp/sbxvm.XXXXXX)
    chown "$DEV:$DEV" "$d"
    chmod 0755 "$d"
    printf '%s\n' "$d"
}
# put_policy FILE JSON: a policy file the developer can read.
put_policy() {
    printf '%s\n' "$2" > "$1"
    chmod 0644 "$1"
}

# json_get FILE KEY: one top-level value of a JSON file ('' when absent).
json_get() {
    "$PY" -c 'import json,sys
try: v = json.load(open(sys.argv[1])).get(sys.argv[2], "")
except Exception: v = ""
print("" if v is None else (json.dumps(v) if isinstance(v, (dict, list)) else v))' "$1" "$2"
}

# The first line of a file that says why sbx refused ("sbx-helper: ...",
# "sbxctl: ...", "error: ..."), else its last line: what a FAIL quotes.
why() {
    local line
    line=$(grep -m1 -E '(sbx-helper|sbxctl|sbxd)[^:]*: |error|MISSING|refus' "$1" 2>/dev/null || true)
    [ -n "$line" ] || line=$(tail -n 1 "$1" 2>/dev/null || true)
    printf '%s' "${line:-<no output>}" | tr -d '\r' | cut -c1-300
}

# Every cgroup directory, relative to the mount, sorted.
cgroup_tree() {
    (cd /sys/fs/cgroup && find . -mindepth 1 -type d | sed 's:^\./::' | sort)
}
# New cgroups since a snapshot FILE, leaving out the units systemd itself
# starts meanwhile (a service, socket or slice, the user manager's
# init.scope): what is left is a scope or a leaf someone made, and every one
# whose path names sbx.
cgroup_new_since() {
    cgroup_tree | comm -13 "$1" - \
        | awk -F/ '$0 ~ /sbx/ || $NF !~ /(\.service|\.socket|\.slice|^init\.scope)$/' || true
}

# Processes of a user other than its systemd user manager, and of the host
# uids its sandboxes run as (its ranges in /etc/subuid).
procs_of() {
    local uids
    uids=$(awk -F: -v u="$1" -v id="$(id -u "$1")" '($1 == u || $1 == id) && NF == 3 {
        for (i = $2; i < $2 + $3 && i < $2 + 4096; i++) printf ",%d", i }' /etc/subuid)
    ps -u "$1" -o pid=,args= 2>/dev/null | grep -v -E 'systemd --user|\(sd-pam\)|dbus-daemon' || true
    [ -z "$uids" ] || ps -u "${uids#,}" -o pid=,args= 2>/dev/null || true
}

# helper_run WHERE DIR POLICY_JSON CMD...: `sbx-helper run` as the developer,
# WHERE scope (in a delegated scope) or plain (no flags, no scope). Leaves
# DIR/{stdout,stderr,result.json}, appends them to $LOG, returns its status.
helper_run() {
    local where=$1 dir=$2 pol=$3 rc=0
    shift 3
    put_policy "$dir/policy.json" "$pol"
    local run=(as_dev)
    [ "$where" = scope ] && run=(as_dev_scope)
    "${run[@]}" "$HELPER" run --policy "$dir/policy.json" --result "$dir/result.json" \
        -- "$@" > "$dir/stdout" 2> "$dir/stderr" < /dev/null || rc=$?
    {
        echo "== sbx-helper run ($where) -- $* : exit $rc"
        echo "-- stdout"; head -c 4000 "$dir/stdout"
        echo "-- stderr"; head -c 4000 "$dir/stderr"
        echo "-- result"; cat "$dir/result.json" 2>/dev/null || echo "(none)"
    } >> "$LOG"
    return "$rc"
}
# fail_run WHAT DIR RC: the FAIL text for a run that went wrong, with the
# helper's own words.
fail_run() {
    printf '%s: exit %s, %s' "$1" "$3" "$(why "$2/stderr")"
}
