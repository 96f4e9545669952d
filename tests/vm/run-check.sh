#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run-check.sh NAME — runs one guest check (check_NAME from the check_*.sh
# files beside it) and prints its one result line: "PASS NAME: detail" or
# "FAIL NAME: why". Its detail log is $LOG ($LOGS/NAME.log). guest.sh runs
# each check in a process of its own, under a timeout.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
name=$1
# shellcheck source=tests/vm/lib.sh
. "$HERE/lib.sh"
for f in "$HERE"/check_*.sh; do
    # shellcheck disable=SC1090
    . "$f"
done
LOG=$LOGS/$name.log
: > "$LOG"
declare -F "check_$name" >/dev/null || { echo "FAIL $name: no such check"; exit 1; }
msg=$(mktemp)
# A check returns non-zero with its reason on stdout; set -e stays out of its
# way (it is called in a condition), so each check tests what it runs.
if "check_$name" > "$msg" 2>> "$LOG"; then
    printf 'PASS %s: %s\n' "$name" "$(tr -d '\r' < "$msg" | paste -sd ' ')"
    rm -f "$msg"
    exit 0
fi
printf 'FAIL %s: %s\n' "$name" "$(tr -d '\r' < "$msg" | paste -sd ' ')"
rm -f "$msg"
exit 1
