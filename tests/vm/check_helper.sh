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
# asks the user manager whether its scope delegates. The first run told yes
# prepares the scope (its processes move to sbx-self, the scope hands
# memory, pids and cpu down); a later run in that state is not asked about
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
