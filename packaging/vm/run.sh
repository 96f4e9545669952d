#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh — the VM stage: boots Debian 12 as people run it (its cloud kernel
# 6.1, systemd, cgroup v2 with nsdelegate) under qemu with TCG, with this
# build's binaries and tests/vm on a second disk, runs the guest checks and
# exits non-zero on any failed check, a crash or the timeout.
set -euo pipefail

PROG=vm
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

usage() {
    cat <<EOF
Usage: packaging/vm/run.sh [--build-dir DIR] [--checks REGEX] [--keep DIR]
                           [--timeout S] [--check-timeout S] [--cache DIR]
                           [--rebuild-image] [--debs DIR] [--kernel-args ARGS]
                           [--list] [--help]

Boots the cached Debian 12 guest (packaging/vm/build-image.sh builds it when
its inputs changed) under qemu-system-x86_64 (TCG, -smp 2, -m 4G, no network),
with a second disk holding DIR's sbx-helper, sbxd (and sbxd-image), sbxctl and
sbx-bench-helper, tests/vm and the reconciliation example. The guest runs
tests/vm/guest.sh at boot; each check prints PASS or FAIL with its reason, the
guest prints "N passed, N failed" and powers off. Progress goes to stderr, the
results to stdout.

  --build-dir DIR    a build tree (DIR/helper/sbx-helper ...) or an install
                     prefix (DIR/libexec/sbx/sbx-helper, DIR/sbin/sbxd,
                     DIR/bin/sbxctl) (default: $REPO/build)
  --checks REGEX     only the checks whose names match (extended regex, e.g.
                     'helper_|limits_'); --list names them
  --keep DIR         copy the VM's logs there: console.log (kernel and
                     systemd), results.log (the checks' serial port) and
                     logs/ (each check's log, the journal); failed runs keep
                     them in the work directory anyway, which is printed
  --timeout S        hard limit on the VM, boot included (default 1080: the package_* checks add about 4 minutes)
  --check-timeout S  limit on one check inside the guest (default 240)
  --cache DIR        the image cache (default /var/cache/sbx-vm)
  --rebuild-image    build the guest image even if it is cached
  --debs DIR         put DIR's .deb files on the second disk (/opt/sbx/debs in
                     the guest) for the package_* checks; DIR "build"
                     builds them first with packaging/build-debs.sh into the
                     work directory (without it, the package_* checks fail saying so)
  --kernel-args ARGS added to the guest kernel's command line (default
                     \$SBX_VM_KERNEL_ARGS), e.g. 'systemd.unified_cgroup_hierarchy=0'
                     boots systemd's hybrid layout: cgroup v1 controllers;
                     the guest then runs its v1 list (v1_delegate first,
                     then the checks that hold on v1; --list shows both)
  --list             print the checks' names and exit
  -h, --help         this text

Exit status: 0 every check passed; 1 a check failed, the guest did not finish
(timeout, crash) or the setup failed; 2 usage. Needs root (the image build
and its files' owners), qemu-system-x86, e2fsprogs and mmdebstrap
(packaging/setup.sh installs them).
EOF
}

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

BUILD=$REPO/build
CHECKS=.
KEEP=
TIMEOUT=1080
CHECK_TIMEOUT=240
CACHE=${SBX_VM_CACHE:-/var/cache/sbx-vm}
REBUILD=()
DEBS=
KARGS=${SBX_VM_KERNEL_ARGS:-}
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir)     [ $# -ge 2 ] || die "--build-dir needs a directory"; BUILD=$2; shift 2 ;;
        --checks)        [ $# -ge 2 ] || die "--checks needs a regex"; CHECKS=$2; shift 2 ;;
        --keep)          [ $# -ge 2 ] || die "--keep needs a directory"; KEEP=$2; shift 2 ;;
        --timeout)       [ $# -ge 2 ] || die "--timeout needs seconds"; TIMEOUT=$2; shift 2 ;;
        --check-timeout) [ $# -ge 2 ] || die "--check-timeout needs seconds"; CHECK_TIMEOUT=$2; shift 2 ;;
        --cache)         [ $# -ge 2 ] || die "--cache needs a directory"; CACHE=$2; shift 2 ;;
        --rebuild-image) REBUILD=(--rebuild); shift ;;
        --debs)          [ $# -ge 2 ] || die "--debs needs a directory (or \"build\")"; DEBS=$2; shift 2 ;;
        --kernel-args)   [ $# -ge 2 ] || die "--kernel-args needs a string"; KARGS=$2; shift 2 ;;
        --list)          sed -n '/^\(ALL\|V1\)=(/,/)/p' "$REPO/tests/vm/guest.sh" | tr -d '()' \
                             | sed 's/^\(ALL\|V1\)=//' | tr -s ' ' '\n' | grep -v '^$' \
                             | awk '!seen[$0]++'; exit 0 ;;
        -h|--help)       usage; exit 0 ;;
        *)               usage >&2; printf '%s: error: unknown argument: %s\n' "$PROG" "$1" >&2; exit 2 ;;
    esac
done
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--timeout wants seconds, not '$TIMEOUT'"
[[ $CHECK_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--check-timeout wants seconds, not '$CHECK_TIMEOUT'"
[ "$(id -u)" = 0 ] || die "needs root (try: sudo bash packaging/vm/run.sh ...)"
for t in qemu-system-x86_64 mke2fs debugfs timeout; do
    command -v "$t" >/dev/null || die "$t is missing (packaging/setup.sh installs qemu-system-x86 and e2fsprogs)"
done

# The binaries: a build tree or an install prefix, laid out as a build tree
# in the guest (sbxctl finds its private sbxd at ../server/sbxd there).
declare -A BINS
if [ -x "$BUILD/helper/sbx-helper" ]; then
    BINS=([helper/sbx-helper]=helper/sbx-helper [server/sbxd]=server/sbxd
          [server/sbxd-image]=server/sbxd-image
          [clients/sbxctl]=clients/sbxctl [bench/sbx-bench-helper]=bench/sbx-bench-helper)
elif [ -x "$BUILD/libexec/sbx/sbx-helper" ]; then
    BINS=([helper/sbx-helper]=libexec/sbx/sbx-helper [server/sbxd]=sbin/sbxd
          [server/sbxd-image]=sbin/sbxd-image
          [clients/sbxctl]=bin/sbxctl [bench/sbx-bench-helper]=bench/sbx-bench-helper)
else
    die "no sbx-helper in $BUILD (neither a build tree's helper/sbx-helper nor a prefix's libexec/sbx/sbx-helper): build first, or pass --build-dir"
fi

t_start=$(date +%s)
IMAGE=$(bash "$HERE/build-image.sh" --cache "$CACHE" "${REBUILD[@]}") || die "the guest image could not be built (see above)"
t_image=$(date +%s)

WORK=$(mktemp -d /var/tmp/sbx-vm.XXXXXX)
QEMU_PID=
cleanup() {
    local rc=$?
    if [ -n "$QEMU_PID" ]; then kill "$QEMU_PID" 2>/dev/null || true; fi
    rm -rf "$WORK/stage.img" "$WORK/stage"   # the build's copy: only the logs are worth keeping
    if [ "$rc" = 0 ]; then rm -rf "$WORK"; else say "the VM's logs stay in $WORK"; fi
}
trap cleanup EXIT
# A signal ends the script through exit, so cleanup stops qemu too.
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- the stage disk: /opt/sbx in the guest
STAGE=$WORK/stage
mkdir -p "$STAGE/build" "$STAGE/tests" "$STAGE/packaging/examples" "$STAGE/logs"
for dst in "${!BINS[@]}"; do
    src=$BUILD/${BINS[$dst]}
    if [ ! -x "$src" ]; then
        [ "$dst" = bench/sbx-bench-helper ] && { say "no $src: perf_ratio will say so"; continue; }
        die "no $src (a build of sbx-helper, sbxd and sbxctl is needed)"
    fi
    install -D -m 0755 "$src" "$STAGE/build/$dst"
done
cp -r "$REPO/tests/vm" "$STAGE/tests/vm"
cp -r "$REPO/packaging/examples/reconcile" "$STAGE/packaging/examples/reconcile"
if [ -n "$DEBS" ]; then
    if [ "$DEBS" = build ]; then
        DEBS=$WORK/debs
        say "building the Debian packages (packaging/build-debs.sh $DEBS)"
        bash "$REPO/packaging/build-debs.sh" --no-lintian "$DEBS" >&2 || die "the Debian packages could not be built"
    fi
    compgen -G "$DEBS/*.deb" >/dev/null || die "--debs $DEBS: no .deb files there"
    mkdir -p "$STAGE/debs"
    cp "$DEBS"/*.deb "$STAGE/debs/"
fi
printf 'CHECKS=%q\nCHECK_TIMEOUT=%q\n' "$CHECKS" "$CHECK_TIMEOUT" > "$STAGE/vm.conf"
chmod -R a+rX "$STAGE"
chmod 0755 "$STAGE/logs"
stage_mb=$(( $(du -sm "$STAGE" | cut -f1) + 256 ))
# The guest mounts it as /dev/vdb: the second -drive below.
mke2fs -q -t ext4 -L sbxstage -d "$STAGE" "$WORK/stage.img" "${stage_mb}M" >&2 \
    || die "mke2fs -d of the stage disk failed"

# ---- boot
APPEND="root=/dev/vda rw console=ttyS0,115200 systemd.unit=sbx-vm.target panic=-1 loglevel=4 systemd.show_status=auto${KARGS:+ $KARGS}"
say "booting $(cat "$IMAGE/kernel-version")${KARGS:+ ($KARGS)} under TCG (-smp 2 -m 4G, no network), timeout ${TIMEOUT} s; checks '$CHECKS'"
: > "$WORK/console.log"
: > "$WORK/results.log"
t_boot=$(date +%s)
timeout -k 10 "$TIMEOUT" qemu-system-x86_64 \
    -nodefaults -display none -no-reboot \
    -machine pc -accel tcg,thread=multi -cpu max -smp 2 -m 4096 \
    -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" \
    -append "$APPEND" \
    -drive "file=$IMAGE/rootfs.img,format=raw,if=virtio,snapshot=on" \
    -drive "file=$WORK/stage.img,format=raw,if=virtio" \
    -nic none \
    -serial "file:$WORK/console.log" -serial "file:$WORK/results.log" &
QEMU_PID=$!

# Relay the results as they come, so a long run shows its progress.
seen=0
qrc=0
while :; do
    if ! kill -0 "$QEMU_PID" 2>/dev/null; then
        wait "$QEMU_PID" || qrc=$?
        QEMU_PID=
    fi
    mapfile -t lines < <(tr -d '\r' < "$WORK/results.log")
    while [ "$seen" -lt "${#lines[@]}" ]; do
        case "${lines[$seen]}" in
            PASS*|FAIL*|INFO*|SBXVM-*) say "$(( $(date +%s) - t_boot )) s: ${lines[$seen]}" ;;
        esac
        seen=$((seen + 1))
    done
    [ -n "$QEMU_PID" ] || break
    sleep 2
done
t_end=$(date +%s)

# ---- the guest's logs, from the stage disk
if ! debugfs -R "rdump /logs $WORK" "$WORK/stage.img" >/dev/null 2>&1; then
    say "could not read the guest's logs from the stage disk"
fi
if [ -n "$KEEP" ]; then
    mkdir -p "$KEEP"
    cp -r "$WORK/console.log" "$WORK/results.log" "$WORK/logs" "$KEEP/"
    say "logs kept in $KEEP"
fi

# ---- verdict
tr -d '\r' < "$WORK/results.log" | grep -E '^(PASS|FAIL|INFO) ' || true
done_line=$(tr -d '\r' < "$WORK/results.log" | grep -m1 '^SBXVM-DONE ' || true)
say "times: image $(( t_image - t_start )) s, VM $(( t_end - t_boot )) s, total $(( t_end - t_start )) s"
if [ -z "$done_line" ]; then
    err=$(tr -d '\r' < "$WORK/results.log" | grep -m1 '^SBXVM-ERROR ' || true)
    if [ -n "$err" ]; then
        say "the guest could not run the checks: ${err#SBXVM-ERROR }; the console's last lines:"
    elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
        say "the VM did not finish within $TIMEOUT s (qemu killed); the console's last lines:"
    else
        say "the guest stopped before its summary (qemu exit status $qrc); the console's last lines:"
    fi
    tr -d '\r' < "$WORK/console.log" | tail -n 25 | sed 's/^/  /' >&2
    exit 1
fi
echo "${done_line#SBXVM-DONE }"
failed=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<< "$done_line")
passed=$(sed -E 's/^SBXVM-DONE ([0-9]+) passed.*/\1/' <<< "$done_line")
# An informational check alone (--checks perf_ratio) passes and fails nothing.
infos=$(tr -d '\r' < "$WORK/results.log" | grep -c '^INFO ' || true)
[ "$passed" != 0 ] || [ "$failed" != 0 ] || [ "$infos" != 0 ] ||
    die "no check matched '$CHECKS' (--list names them)"
[ "$failed" = 0 ] || exit 1
