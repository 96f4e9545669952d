#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# customize.sh ROOT — mmdebstrap's customize hook for the VM stage's guest
# (build-image.sh): the users, the mounts and the one unit that runs the
# checks. Everything that changes per run (sbx's binaries, the checks) is on
# the second disk, not here, so that a change to them needs no new image.
set -euo pipefail
ROOT=$1
[ -d "$ROOT/etc" ] || { echo "customize.sh: $ROOT is not a root file system" >&2; exit 1; }

echo sbx-vm > "$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 sbx-vm\n::1 localhost\n' > "$ROOT/etc/hosts"
# No fsck at boot: the root is a snapshot of a file made fresh.
echo '/dev/vda / ext4 rw,errors=remount-ro 0 0' > "$ROOT/etc/fstab"
mkdir -p "$ROOT/opt/sbx"

# A developer with a systemd user manager started at boot (linger), as
# `loginctl enable-linger dev` leaves it; and sbxd's service user.
chroot "$ROOT" useradd --create-home --uid 1000 --shell /bin/bash dev
chroot "$ROOT" useradd --system --create-home --home-dir /var/lib/sbxsvc \
    --shell /usr/sbin/nologin sbxsvc
# Each with a range of subordinate ids, as useradd gives a login user and
# the Debian package gives sbxd's: every sandbox runs as a host uid of its
# own (common/host_ids.h). Ranges no other user has.
for u in "dev 100000-165535" "sbxsvc 165536-231071"; do
    set -- $u
    grep -qs "^$1:" "$ROOT/etc/subuid" ||
        chroot "$ROOT" usermod --add-subuids "$2" --add-subgids "$2" "$1"
done
mkdir -p "$ROOT/var/lib/systemd/linger"
touch "$ROOT/var/lib/systemd/linger/dev"

# Boot to the point of the checks and nothing more: no login prompt, no timers.
for u in getty@tty1.service serial-getty@ttyS0.service apt-daily.timer \
         apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
         man-db.timer dpkg-db-backup.timer systemd-timesyncd.service; do
    ln -sf /dev/null "$ROOT/etc/systemd/system/$u"
done
mkdir -p "$ROOT/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' > "$ROOT/etc/systemd/journald.conf.d/sbx-vm.conf"

# Booted with systemd.unit=sbx-vm.target: the whole multi-user system first,
# then the checks, then power off whatever they did.
cat > "$ROOT/etc/systemd/system/sbx-vm.target" <<'EOF'
[Unit]
Description=sbx VM stage: multi-user, then the checks
Requires=multi-user.target
After=multi-user.target
Wants=sbx-vm-checks.service
AllowIsolate=yes
EOF
# The unit mounts the stage disk itself (not through fstab): a disk that is
# late on a loaded host, or missing, must still end in a line on the results
# port and a power-off, never in a dependency failure that leaves the VM up
# until the host's timeout.
cat > "$ROOT/usr/local/sbin/sbx-vm-entry" <<'EOF'
#!/bin/sh
# The results go to the second serial port, which the host captures alone.
out=/dev/ttyS1
i=0
while [ ! -b /dev/vdb ]; do
    i=$((i + 1))
    if [ "$i" -ge 300 ]; then echo "SBXVM-ERROR no stage disk /dev/vdb after 300 s" > "$out"; exit 1; fi
    sleep 1
done
if ! mountpoint -q /opt/sbx && ! mount -t ext4 -o rw /dev/vdb /opt/sbx; then
    echo "SBXVM-ERROR cannot mount the stage disk /dev/vdb on /opt/sbx" > "$out"
    exit 1
fi
exec /bin/bash /opt/sbx/tests/vm/guest.sh > "$out" 2>&1
EOF
chmod 0755 "$ROOT/usr/local/sbin/sbx-vm-entry"
cat > "$ROOT/etc/systemd/system/sbx-vm-checks.service" <<'EOF'
[Unit]
Description=sbx VM stage checks (/opt/sbx/tests/vm/guest.sh)
After=multi-user.target user@1000.service
SuccessAction=poweroff-force
FailureAction=poweroff-force

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/sbx-vm-entry
TimeoutStartSec=infinity
EOF
