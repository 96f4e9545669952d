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
# Expected to fail until sbx-helper creates its own scope through sd-bus.
check_helper_check_plain() { helper_check plain; }
check_helper_run_plain() { helper_true plain; }
