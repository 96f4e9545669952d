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
