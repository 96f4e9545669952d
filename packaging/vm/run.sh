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
                           [--freeze-retries N] [--stall S] [--list] [--help]

Boots the cached Debian 12 guest (packaging/vm/build-image.sh builds it when
its inputs changed) under qemu-system-x86_64 (TCG, -smp 2, -m 4G, no network),
with a second disk holding DIR's sbx-helper, sbxd (and sbxd-image), sbxctl,
sbx-bench-helper and sbx-bench-sbxd, the unit tests of egress deny's
connect watch, tests/vm and the reconciliation example. The guest runs
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
  --check-timeout S  limit on one check inside the guest (default 240); a
                     check the guest cannot end 30 s past it (SBXVM-STUCK:
                     its process table goes to logs/) ends the VM at once
  --freeze-retries N boots again from scratch, up to N times, when the guest
                     froze (below). qemu's view of the CPUs and the kernel's
                     backtraces (an NMI makes it panic) are kept (default 1;
                     0 fails at the first freeze)
  --stall S          a guest silent for S s (no heartbeat, which comes every
                     15 s, and no console line) froze (default 120; the boot,
                     before its first line, gets S+180)
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
FREEZE_RETRIES=1
STALL=120
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
        --stall)         [ $# -ge 2 ] || die "--stall needs seconds"; STALL=$2; shift 2 ;;
        --freeze-retries) [ $# -ge 2 ] || die "--freeze-retries needs a number"; FREEZE_RETRIES=$2; shift 2 ;;
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
[[ $FREEZE_RETRIES =~ ^[0-9]+$ ]] || die "--freeze-retries wants a count, not '$FREEZE_RETRIES'"
if ! [[ $STALL =~ ^[1-9][0-9]*$ ]] || [ "$STALL" -lt 30 ]; then
    die "--stall wants seconds, at least 30 (two heartbeats), not '$STALL'"
fi
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
          [clients/sbxctl]=clients/sbxctl [bench/sbx-bench-helper]=bench/sbx-bench-helper
          [bench/sbx-bench-sbxd]=bench/sbx-bench-sbxd
          [tests/unit/test_deny_packet]=tests/unit/test_deny_packet
          [tests/unit/test_helper_netns]=tests/unit/test_helper_netns)
elif [ -x "$BUILD/libexec/sbx/sbx-helper" ]; then
    BINS=([helper/sbx-helper]=libexec/sbx/sbx-helper [server/sbxd]=sbin/sbxd
          [server/sbxd-image]=sbin/sbxd-image
          [clients/sbxctl]=bin/sbxctl [bench/sbx-bench-helper]=bench/sbx-bench-helper
          [bench/sbx-bench-sbxd]=bench/sbx-bench-sbxd)
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
    # A pass after a frozen boot keeps that boot's logs too.
    if [ "$rc" = 0 ] && [ -z "${frozen_before:-}" ]; then rm -rf "$WORK"; else say "the VM's logs stay in $WORK"; fi
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
        case $dst in bench/*) say "no $src: the perf_ checks will say so"; continue ;; esac
        case $dst in tests/unit/*) say "no $src: egress_kernel will say so"; continue ;; esac
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
# Made afresh for each boot: one that froze leaves its disk half written.
make_stage_disk() {
    rm -f "$WORK/stage.img"
    # The guest mounts it as /dev/vdb: the second -drive below.
    mke2fs -q -t ext4 -L sbxstage -d "$STAGE" "$WORK/stage.img" "${stage_mb}M" >&2 \
        || die "mke2fs -d of the stage disk failed"
}

# monitor COMMAND...: qemu's human monitor (a Unix socket in the work
# directory), one command after the other; prints their answers.
monitor() {
    /usr/bin/python3 - "$WORK/monitor.sock" "$@" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.settimeout(0.5)
s.connect(sys.argv[1])
def answer(seconds):
    got, end = b"", time.time() + seconds
    while time.time() < end:
        try:
            b = s.recv(65536)
        except socket.timeout:
            if got:
                break
            continue
        if not b:
            break
        got += b
    return got.decode(errors="replace")
answer(2)                        # the banner
for command in sys.argv[2:]:
    s.sendall(command.encode() + b"\n")
    sys.stdout.write(answer(5))
PY
}

# where_cpus MONITOR_TEXT KALLSYMS: where each CPU of a frozen guest was,
# from qemu's `info registers -a`: its RIP as symbol+offset (the guest's
# text symbols, which guest.sh saves at its start: Debian's System.map is
# a stub, and the kernel's addresses move with KASLR) and HLT=1 when idle.
where_cpus() {
    /usr/bin/python3 - "$1" "$2" <<'PY' >&2 || true
import bisect, re, sys
syms = []
try:
    for line in open(sys.argv[2]):
        a, name = line.split()
        syms.append((int(a, 16), name))
except (OSError, ValueError):
    pass
syms.sort()
addrs = [a for a, _ in syms]
cpu = None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"CPU#(\d+)", line)
    if m:
        cpu = m.group(1)
    m = re.match(r"RIP=([0-9a-f]+) .*HLT=(\d)", line)
    if m and cpu is not None:
        rip = int(m.group(1), 16)
        i = bisect.bisect_right(addrs, rip) - 1
        if rip < 1 << 63:
            where = "user space"
        elif i >= 0:
            where = "%s+0x%x" % (syms[i][1], rip - syms[i][0])
        else:
            where = "(no symbols)"
        print("  CPU %s: RIP %s %s%s" % (cpu, m.group(1), where, ", halted" if m.group(2) == "1" else ""))
PY
}

# A frozen guest (TCG or its kernel stopped: no heartbeat, no console line)
# is told from a check that outran its timeout (the guest says SBXVM-STUCK)
# long before --timeout: the guest's heartbeat comes every 15 s
# (tests/vm/guest.sh), so --stall's 120 s of silence is eight missed; the
# boot, with no heartbeat yet, gets three minutes more.
STALL_BOOT=$(( STALL + 180 ))

# ---- boot
APPEND="root=/dev/vda rw console=ttyS0,115200 systemd.unit=sbx-vm.target panic=-1 loglevel=4 systemd.show_status=auto${KARGS:+ $KARGS}"
attempt=1
frozen_before=
while :; do
    make_stage_disk
    say "booting $(cat "$IMAGE/kernel-version")${KARGS:+ ($KARGS)} under TCG (-smp 2 -m 4G, no network), timeout ${TIMEOUT} s; checks '$CHECKS'${frozen_before:+ (boot $attempt: the last one froze)}"
    : > "$WORK/console.log"
    : > "$WORK/results.log"
    rm -f "$WORK/monitor.sock"
    t_boot=$(date +%s)
    timeout -k 10 "$TIMEOUT" qemu-system-x86_64 \
        -nodefaults -display none -no-reboot \
        -machine pc -accel tcg,thread=multi -cpu max -smp 2 -m 4096 \
        -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" \
        -append "$APPEND" \
        -drive "file=$IMAGE/rootfs.img,format=raw,if=virtio,snapshot=on" \
        -drive "file=$WORK/stage.img,format=raw,if=virtio" \
        -nic none \
        -monitor "unix:$WORK/monitor.sock,server=on,wait=off" \
        -serial "file:$WORK/console.log" -serial "file:$WORK/results.log" &
    QEMU_PID=$!

    # Relay the results as they come, so a long run shows its progress, and
    # watch for a guest that froze or a check that would not end.
    seen=0
    qrc=0
    ended=            # frozen or stuck, when run.sh ended the VM
    current=          # the check the last heartbeat named
    last_size=0
    last_change=$t_boot
    while :; do
        if ! kill -0 "$QEMU_PID" 2>/dev/null; then
            wait "$QEMU_PID" || qrc=$?
            QEMU_PID=
        fi
        mapfile -t lines < <(tr -d '\r' < "$WORK/results.log")
        while [ "$seen" -lt "${#lines[@]}" ]; do
            line=${lines[$seen]}
            case "$line" in
                SBXVM-ALIVE*)
                    read -r _ _ current _ <<< "$line" || true ;;
                SBXVM-STUCK*)
                    say "$(( $(date +%s) - t_boot )) s: $line"
                    ended=stuck ;;
                PASS*|FAIL*|INFO*|SBXVM-*)
                    say "$(( $(date +%s) - t_boot )) s: $line" ;;
            esac
            seen=$((seen + 1))
        done
        [ -n "$QEMU_PID" ] || break
        now=$(date +%s)
        size=$(( $(stat -c %s "$WORK/console.log") + $(stat -c %s "$WORK/results.log") ))
        if [ "$size" != "$last_size" ]; then
            last_size=$size
            last_change=$now
        fi
        allowed=$STALL
        [ "$seen" -gt 0 ] || allowed=$STALL_BOOT
        if [ -z "$ended" ] && [ $(( now - last_change )) -gt "$allowed" ]; then
            ended=frozen
            say "$(( now - t_boot )) s: no word from the guest for $(( now - last_change )) s (no heartbeat, nothing on the console)${current:+, last in check $current}: it froze; asking qemu where its CPUs are, then an NMI for the kernel's backtraces"
            monitor "info cpus" "info registers -a" > "$WORK/frozen.monitor.txt" 2>&1 || true
            monitor nmi > /dev/null 2>&1 || true
            # A kernel that still runs panics with every CPU's backtrace and
            # qemu exits (-no-reboot); one that does not is killed below.
            for _ in $(seq 1 10); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 2; done
        fi
        if [ -n "$ended" ]; then
            # A stuck guest synced its process table before saying so.
            [ "$ended" = frozen ] || sleep 5
            kill "$QEMU_PID" 2>/dev/null || true
            wait "$QEMU_PID" 2>/dev/null || true
            QEMU_PID=
            break
        fi
        sleep 2
    done
    t_end=$(date +%s)
    if [ "$ended" != frozen ] || [ "$attempt" -gt "$FREEZE_RETRIES" ]; then break; fi
    # What the frozen boot left is kept beside the next one's.
    keep=$WORK/frozen-boot-$attempt
    mkdir -p "$keep"
    mv "$WORK/console.log" "$WORK/results.log" "$WORK/frozen.monitor.txt" "$keep/" 2>/dev/null || true
    debugfs -R "rdump /logs $keep" "$WORK/stage.img" >/dev/null 2>&1 || true
    say "where the frozen boot's CPUs were (qemu's monitor):"
    where_cpus "$keep/frozen.monitor.txt" "$keep/logs/kallsyms.txt"
    say "the frozen boot's console, last lines (all in $keep):"
    tr -d '\r' < "$keep/console.log" | tail -n 60 | sed 's/^/  /' >&2
    say "booting once more from scratch (--freeze-retries $FREEZE_RETRIES): a guest that froze says nothing about sbx; a second freeze fails the stage"
    frozen_before="boot $attempt froze${current:+ in check $current}"
    attempt=$((attempt + 1))
done

# ---- the guest's logs, from the stage disk
if ! debugfs -R "rdump /logs $WORK" "$WORK/stage.img" >/dev/null 2>&1; then
    say "could not read the guest's logs from the stage disk"
fi
if [ -n "$KEEP" ]; then
    mkdir -p "$KEEP"
    cp -r "$WORK/console.log" "$WORK/results.log" "$WORK/logs" "$KEEP/"
    for d in "$WORK"/frozen-boot-*; do [ ! -d "$d" ] || cp -r "$d" "$KEEP/"; done
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
    elif [ "$ended" = stuck ]; then
        say "a check outran its timeout and could not be ended (its process table: $WORK/logs/stuck-*.txt); the console's last lines:"
    elif [ "$ended" = frozen ]; then
        say "the guest froze${current:+ in check $current} (boot $attempt of $(( FREEZE_RETRIES + 1 ))); where its CPUs were (qemu's monitor, all in $WORK/frozen.monitor.txt):"
        where_cpus "$WORK/frozen.monitor.txt" "$WORK/logs/kallsyms.txt"
        say "the console's last lines:"
    elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
        say "the VM did not finish within $TIMEOUT s (qemu killed); the console's last lines:"
    else
        say "the guest stopped before its summary (qemu exit status $qrc); the console's last lines:"
    fi
    tail_lines=25
    [ "$ended" != frozen ] || tail_lines=60   # the NMI's panic: every CPU's backtrace
    tr -d '\r' < "$WORK/console.log" | tail -n "$tail_lines" | sed 's/^/  /' >&2
    exit 1
fi
[ -z "$frozen_before" ] || say "passed on boot $attempt; $frozen_before (its logs: $WORK/frozen-boot-*, kept)"
echo "${done_line#SBXVM-DONE }"
failed=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<< "$done_line")
passed=$(sed -E 's/^SBXVM-DONE ([0-9]+) passed.*/\1/' <<< "$done_line")
# An informational check alone (--checks perf_ratio) passes and fails nothing.
infos=$(tr -d '\r' < "$WORK/results.log" | grep -c '^INFO ' || true)
[ "$passed" != 0 ] || [ "$failed" != 0 ] || [ "$infos" != 0 ] ||
    die "no check matched '$CHECKS' (--list names them)"
[ "$failed" = 0 ] || exit 1
