# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# check_sbxctl.sh — a developer's `sbxctl run` without root: no sbxd is
# running for them, so sbxctl starts a private one. First inside a delegated
# scope, then plain (which needs sbx to get its scope from systemd itself);
# then nothing of theirs may be left.

sbxctl_dev() {   # sbxctl_dev scope|plain
    local log rc=0 run=(as_dev)
    [ "$1" = scope ] && run=(as_dev_scope)
    log=$(mktemp)
    chmod 0644 "$log"
    "${run[@]}" "$SBXCTL" run -- /bin/echo dev-run-ok > "$log" 2>&1 < /dev/null || rc=$?
    { echo "== sbxctl run ($1) -- echo: exit $rc"; cat "$log"; } >> "$LOG"
    if [ "$rc" != 0 ] || ! grep -q '^dev-run-ok$' "$log"; then
        printf 'sbxctl run (%s): exit %s: %s' "$1" "$rc" "$(why "$log")"; rm -f "$log"; return 1
    fi
    echo "exit 0 through a private sbxd"
    rm -f "$log"
}
check_sbxctl_private_scope() { sbxctl_dev scope; }
# Expected to fail until sbx creates its own delegated scope through sd-bus.
check_sbxctl_private_plain() { sbxctl_dev plain; }

# After every check of the developer's: only their user manager remains, and
# no cgroup appeared in their tree.
check_dev_clean() {
    local left new
    sleep 1
    left=$(procs_of "$DEV" | paste -sd ' ' | cut -c1-300)
    new=$(cgroup_new_since "$LOGS/cgroups.start" | grep "user-$DEV_UID" | paste -sd ' ' || true)
    { echo "processes of $DEV:"; ps -u "$DEV" -o pid,args; echo "new cgroups: $new"; } >> "$LOG"
    [ -z "$left" ] || { printf 'processes of %s left: %s' "$DEV" "$left"; return 1; }
    [ -z "$new" ] || { printf 'cgroups left in %s'"'"'s tree: %s' "$DEV" "$new"; return 1; }
    echo "only the user manager; no new cgroup"
}
