# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# check_helper.sh — `sbx-helper check` and `run` as the developer with no
# flags: first inside a scope the user manager delegated
# (systemd-run --user --scope -p Delegate=yes), then plain, where the helper
# has to get its delegated scope from systemd itself (issue 15, item 2).

TRUE_POLICY='{"image": "host", "limits": {"script_seconds": 60}}'

helper_check() {   # helper_check scope|plain
    local rc=0 out
    out=$(mktemp)
    if [ "$1" = scope ]; then
        as_dev_scope "$HELPER" check > "$out" 2>&1 < /dev/null || rc=$?
    else
        as_dev "$HELPER" check > "$out" 2>&1 < /dev/null || rc=$?
    fi
    { echo "== sbx-helper check ($1): exit $rc"; cat "$out"; } >> "$LOG"
    if [ "$rc" != 0 ]; then
        # the items check refused, and the optional ones it lacks
        printf 'exit %s: %s' "$rc" "$(awk '$2 == "MISSING" || $2 == "no"' "$out" \
            | tr -s ' ' | paste -sd '|' | cut -c1-400)"
        rm -f "$out"
        return 1
    fi
    printf '%s' "$(grep '^cgroup ' "$out" | tr -s ' ' | cut -c1-200)"
    rm -f "$out"
}

helper_true() {   # helper_true scope|plain
    local d rc=0
    d=$(dev_tmp)
    helper_run "$1" "$d" "$TRUE_POLICY" true || rc=$?
    if [ "$rc" != 0 ]; then fail_run "run -- true" "$d" "$rc"; rm -rf "$d"; return 1; fi
    printf 'exit 0, enforced %s' "$(json_get "$d/result.json" enforced)"
    rm -rf "$d"
}

check_helper_check_scope() { helper_check scope; }
check_helper_run_scope() { helper_true scope; }
check_helper_check_plain() { helper_check plain; }

# systemd 252 marks no delegated cgroup with user.delegate, so the helper
# asks the user manager whether its scope delegates, and remembers a yes on
# the scope (user.sbx.delegated); a later run there is not asked about
# again. Shown with the manager out of reach (XDG_RUNTIME_DIR and the
# session bus's address naming an empty directory of dev's): refused in a fresh scope, where the question
# is needed and fails; run in a prepared one, after a run that asked.
check_helper_scope_asked_once() {
    local d rc=0
    d=$(dev_tmp)
    put_policy "$d/policy.json" "$TRUE_POLICY"
    mkdir "$d/nomanager"
    chown "$DEV:$DEV" "$d/nomanager"
    as_dev_scope env XDG_RUNTIME_DIR="$d/nomanager" DBUS_SESSION_BUS_ADDRESS="unix:path=$d/nomanager/bus" \
        "$HELPER" run --policy "$d/policy.json" \
        -- true > "$d/stdout" 2> "$d/fresh.err" < /dev/null || rc=$?
    { echo "== a fresh scope, the manager out of reach: exit $rc"; cat "$d/fresh.err"; } >> "$LOG"
    if [ "$rc" = 0 ] || ! grep -q 'no delegated cgroup' "$d/fresh.err"; then
        printf 'a fresh scope with the manager out of reach: want a refusal naming "no delegated cgroup", got exit %s: %s' \
            "$rc" "$(why "$d/fresh.err")"
        rm -rf "$d"; return 1
    fi
    rc=0
    # shellcheck disable=SC2016 # expanded by the inner sh
    as_dev_scope /bin/sh -c '"$1" run --policy "$2" -- true || exit 90
        XDG_RUNTIME_DIR=$3 DBUS_SESSION_BUS_ADDRESS=unix:path=$3/bus exec "$1" run --policy "$2" -- true' sh \
        "$HELPER" "$d/policy.json" "$d/nomanager" > "$d/stdout" 2> "$d/prepared.err" < /dev/null || rc=$?
    { echo "== a run that asks, then one with the manager out of reach: exit $rc"; cat "$d/prepared.err"; } >> "$LOG"
    if [ "$rc" != 0 ]; then
        printf 'the run after a prepared one, the manager out of reach: exit %s (want 0): %s' \
            "$rc" "$(why "$d/prepared.err")"
        rm -rf "$d"; return 1
    fi
    echo "a fresh scope asks (refused with the manager out of reach); a prepared one is not asked again"
    rm -rf "$d"
}
check_helper_run_plain() { helper_true plain; }

# Review 27, finding 1: `--cgroup-root` takes a cgroup as named, delegated
# or not, and prepares it (sbx-self, memory, pids and cpu handed down); a
# later plain run there must still ask the manager, not take that state for
# its yes. A scope without Delegate= (a terminal's), a delegated sibling
# alive (systemd hands cpu to app.slice only while a child needs it):
# `check --cgroup-root` on it, then a plain `run` held until seen: its
# run cgroup is in a scope of its own, none in the terminal's.
UM_DIR=/sys/fs/cgroup/user.slice/user-$DEV_UID.slice/user@$DEV_UID.service
check_helper_cgroup_root_not_trusted() {
    local d rc=0 got
    d=$(dev_tmp)
    put_policy "$d/policy.json" "$TRUE_POLICY"
    mkdir "$d/data"
    chown "$DEV:$DEV" "$d/data"
    as_dev systemd-run --user --scope --quiet -p Delegate=yes -- \
        sh -c 'echo $$ > "$1/sib"; exec sleep 300' sh "$d" > /dev/null 2>&1 < /dev/null &
    for _ in $(seq 1 60); do [ -s "$d/sib" ] && break; sleep 0.5; done
    cat > "$d/t.sh" <<'EOS'
H=$1 P=$2 D=$3 UM=$4
own=$(sed -n 's/^0:://p' /proc/self/cgroup)
echo "terminal $own"
"$H" check --cgroup-root "$own" > "$D/check.out" 2>&1 || { echo "check --cgroup-root: exit $?"; exit 1; }
echo "prepared [$(cat "/sys/fs/cgroup$own/cgroup.subtree_control")]"
"$H" run --policy "$P" --data "$D/data" -- /bin/sh -c 'while [ ! -e /data/go ]; do sleep 0.05; done' \
    > /dev/null 2> "$D/run.err" &
pid=$!
for _ in $(seq 1 600); do
    run=$(find "$UM" -type d -name 'sbx-[0-9]*-*' 2> /dev/null | head -n 1)
    [ -n "$run" ] && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.05
done
echo "run cgroup ${run#/sys/fs/cgroup}"
touch "$D/data/go"
wait "$pid"
echo "run exit $?"
EOS
    as_dev systemd-run --user --scope --quiet -- bash "$d/t.sh" "$HELPER" "$d/policy.json" "$d" "$UM_DIR" \
        > "$d/out" 2>&1 < /dev/null || rc=$?
    kill "$(cat "$d/sib" 2> /dev/null)" 2> /dev/null || true
    { echo "== check --cgroup-root on a terminal's scope, then run: exit $rc"; cat "$d/out" "$d/run.err" 2> /dev/null; } >> "$LOG"
    local term run
    term=$(sed -n 's/^terminal //p' "$d/out")
    run=$(sed -n 's/^run cgroup //p' "$d/out")
    if [ "$rc" != 0 ] || ! grep -q '^run exit 0$' "$d/out" || [ -z "$term" ] || [ -z "$run" ]; then
        printf 'exit %s: %s' "$rc" "$(grep -v '^terminal\|^prepared' "$d/out" | paste -sd '|' | cut -c1-300)"
        rm -rf "$d"; return 1
    fi
    case $run in
        "$term"/*) printf 'the run went into the terminal'"'"'s scope %s (%s): the prepared state was taken for a yes' "$term" "$run"
                   rm -rf "$d"; return 1 ;;
        */sbx-helper-*.scope/*) ;;
        *) printf 'the run cgroup %s is in no scope of its own' "$run"; rm -rf "$d"; return 1 ;;
    esac
    got=$(sed -n 's/^prepared //p' "$d/out")
    printf 'after check --cgroup-root (%s) a plain run asked and went to %s' "$got" "${run%/sbx-[0-9]*}"
    rm -rf "$d"
}

# Review 27, finding 2: the helper asks the manager about itself (pid 0,
# named by the connection), not by its own pid, which in a nested pid
# namespace names another process of the manager's. In a scope without
# Delegate=, inside `unshare -Upfr`, the helper is made to get the pid a
# delegated scope's process has on the host: it must be told no (and so be
# refused: no scope of its own from there), not yes (and prepare the
# terminal's scope).
check_helper_asks_for_itself() {
    local d rc=0
    d=$(dev_tmp)
    put_policy "$d/policy.json" "$TRUE_POLICY"
    as_dev systemd-run --user --scope --quiet -p Delegate=yes -- \
        sh -c 'echo $$ > "$1/xpid"; exec sleep 300' sh "$d" > /dev/null 2>&1 < /dev/null &
    for _ in $(seq 1 60); do [ -s "$d/xpid" ] && break; sleep 0.5; done
    cat > "$d/p.sh" <<'EOS'
H=$1 P=$2 X=$3
own=$(sed -n 's/^0:://p' /proc/self/cgroup)
echo "terminal $own"
unshare -Upfr --mount-proc sh -c '
    echo $(($3 - 1)) > /proc/sys/kernel/ns_last_pid
    "$1" run --host-uids shared --policy "$2" -- true
    echo "run exit $? as pid $3"' sh "$H" "$P" "$X"
echo "sbx-self made: $([ -d "/sys/fs/cgroup$own/sbx-self" ] && echo yes || echo no)"
EOS
    as_dev systemd-run --user --scope --quiet -- bash "$d/p.sh" "$HELPER" "$d/policy.json" "$(cat "$d/xpid")" \
        > "$d/out" 2>&1 < /dev/null || rc=$?
    kill "$(cat "$d/xpid" 2> /dev/null)" 2> /dev/null || true
    { echo "== a nested pid namespace, the helper at a delegated scope's pid: exit $rc"; cat "$d/out"; } >> "$LOG"
    if ! grep -q '^run exit 125 ' "$d/out" || ! grep -q 'no delegated cgroup' "$d/out" ||
        ! grep -q '^sbx-self made: no$' "$d/out"; then
        printf 'want the run refused (125, "no delegated cgroup") and the scope untouched: %s' \
            "$(grep -v '^terminal' "$d/out" | paste -sd '|' | cut -c1-300)"
        rm -rf "$d"; return 1
    fi
    # The control (review 28): from the same nested namespaces in a
    # delegated scope the question reaches the manager and is told yes (the
    # mark is set); the helper then stops at the processes it cannot see,
    # having moved none of them.
    cat > "$d/c.sh" <<'EOS'
H=$1 P=$2
own=$(sed -n 's/^0:://p' /proc/self/cgroup)
unshare -Upfr --mount-proc sh -c '"$1" run --host-uids shared --policy "$2" -- true; echo "run exit $?"' sh "$H" "$P"
/usr/bin/python3 -c 'import os, sys
n = "user.sbx.delegated"
print("mark", os.getxattr(sys.argv[1], n).decode() if n in os.listxattr(sys.argv[1]) else "none")' "/sys/fs/cgroup$own"
echo "moved $(cat "/sys/fs/cgroup$own/sbx-self/cgroup.procs" 2> /dev/null | wc -l)"
EOS
    rc=0
    as_dev_scope bash "$d/c.sh" "$HELPER" "$d/policy.json" > "$d/control" 2>&1 < /dev/null || rc=$?
    { echo "== the control, a delegated scope: exit $rc"; cat "$d/control"; } >> "$LOG"
    if ! grep -q '^mark 1$' "$d/control" || ! grep -q '^run exit 125$' "$d/control" ||
        ! grep -q "outside this helper's pid namespace" "$d/control" || ! grep -q '^moved 0$' "$d/control"; then
        printf 'the control (a delegated scope, the same nested namespaces): want the mark set, then 125 naming the processes outside, none moved: %s' \
            "$(paste -sd '|' "$d/control" | cut -c1-300)"
        rm -rf "$d"; return 1
    fi
    printf '%s: told no, refused, the scope untouched; a delegated one from there: told yes (marked), none moved' \
        "$(grep '^run exit' "$d/out")"
    rm -rf "$d"
}

# Review 27, finding 3: the mark a helper leaves on a scope the manager
# said it delegates counts only for the uid that owns the scope. Root (with
# --allow-root), moved into dev's marked scope, is refused at once as
# before ("no delegated cgroup"), not let in to fail late writing a cgroup
# dev's processes cannot enter.
check_helper_mark_is_the_owners() {
    local d rc=0 cg
    d=$(dev_tmp)
    put_policy "$d/policy.json" "$TRUE_POLICY"
    as_dev_scope sh -c '"$1" run --policy "$2" -- true || exit 90
        sed -n "s/^0:://p" /proc/self/cgroup > "$3/cg"; exec sleep 300' sh \
        "$HELPER" "$d/policy.json" "$d" > /dev/null 2> "$d/dev.err" < /dev/null &
    for _ in $(seq 1 60); do [ -s "$d/cg" ] && break; sleep 0.5; done
    cg=$(cat "$d/cg" 2> /dev/null)
    case $cg in
        */sbx-self) ;;
        *) printf 'dev'"'"'s run did not prepare its scope (in %s): %s' "${cg:-?}" "$(why "$d/dev.err")"
           rm -rf "$d"; return 1 ;;
    esac
    env -i PATH=/usr/bin:/bin HOME=/root sh -c 'echo $$ > "$1/cgroup.procs" &&
        exec "$2" run --allow-root --host-uids shared --policy "$3" -- true' sh \
        "/sys/fs/cgroup$cg" "$HELPER" "$d/policy.json" > "$d/stdout" 2> "$d/root.err" < /dev/null || rc=$?
    echo 1 > "/sys/fs/cgroup${cg%/sbx-self}/cgroup.kill"
    { echo "== root in dev's marked scope $cg: exit $rc"; cat "$d/root.err"; } >> "$LOG"
    if [ "$rc" != 125 ] || ! grep -q 'no delegated cgroup' "$d/root.err"; then
        printf 'root in dev'"'"'s marked scope: want 125 naming "no delegated cgroup", got exit %s: %s' \
            "$rc" "$(why "$d/root.err")"
        rm -rf "$d"; return 1
    fi
    printf 'exit 125: %s' "$(why "$d/root.err" | cut -c1-120)"
    rm -rf "$d"
}

# A helper a system unit started (as dev, dev's manager lingering) belongs to
# that unit: it must not leave the unit's TasksMax and stop for a scope of
# dev's own (the review's 101 processes under TasksMax=40), and says so.
check_helper_unit_refused() {
    local d rc=0 scopes_before scopes_after
    d=$(dev_tmp)
    put_policy "$d/policy.json" "$TRUE_POLICY"
    scopes_before=$(cgroup_tree | grep -c 'sbx-helper-' || true)
    systemd-run --quiet --wait --pipe --uid="$DEV" -p TasksMax=40 \
        --setenv=XDG_RUNTIME_DIR=/run/user/$DEV_UID \
        "$HELPER" run --policy "$d/policy.json" -- true \
        > "$d/stdout" 2> "$d/stderr" < /dev/null || rc=$?
    scopes_after=$(cgroup_tree | grep -c 'sbx-helper-' || true)
    { echo "== run from a system unit: exit $rc"; cat "$d/stderr"; } >> "$LOG"
    if [ "$rc" != 125 ] || ! grep -q 'Delegate=yes' "$d/stderr"; then
        printf 'want exit 125 naming Delegate=yes, got exit %s: %s' "$rc" "$(why "$d/stderr")"
        rm -rf "$d"; return 1
    fi
    if [ "$scopes_after" != "$scopes_before" ]; then
        printf 'refused, but a scope was made (%s before, %s after)' "$scopes_before" "$scopes_after"
        rm -rf "$d"; return 1
    fi
    printf 'exit 125: %s' "$(why "$d/stderr")"
    rm -rf "$d"
}
