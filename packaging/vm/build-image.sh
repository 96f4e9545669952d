#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build-image.sh — the VM stage's guest image: Debian 12 made by mmdebstrap from
# this host's apt sources, with its own linux-image-cloud-amd64, as an ext4 disk
# image plus the kernel and initrd taken out of it. Cached by the hash of its
# inputs; prints the cache directory on stdout.
set -euo pipefail

PROG=vm-image
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${SBX_VM_CACHE:-/var/cache/sbx-vm}
SUITE=bookworm
KEEP_OLD=2          # cached images kept besides the current one

usage() {
    cat <<EOF
Usage: packaging/vm/build-image.sh [--cache DIR] [--rebuild] [--key] [--help]

Builds (or finds in the cache) the VM stage's Debian 12 guest and prints its
directory, which holds rootfs.img (ext4, raw), vmlinuz, initrd.img and
packages.lst (every installed package and version). Needs root, mmdebstrap and
e2fsprogs, and this host's apt sources (Debian $SUITE).

The cache key is the sha256 of $HERE/packages.txt, this script,
$HERE/customize.sh and the Debian apt sources: a change to any of them builds a new
image (about 2.5 minutes); otherwise the cached one is reused. A build happens
in a temporary directory renamed into place at the end, under a lock, so an
interrupted build leaves no half image. The $KEEP_OLD newest older images are
kept, the rest removed.

  --cache DIR  the cache (default \$SBX_VM_CACHE, else /var/cache/sbx-vm)
  --rebuild    build even if the cache has the image
  --key        print the cache key and exit
  -h, --help   this text
EOF
}

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

REBUILD=0
KEY_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --cache)   [ $# -ge 2 ] || die "--cache needs a directory"; CACHE=$2; shift 2 ;;
        --rebuild) REBUILD=1; shift ;;
        --key)     KEY_ONLY=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *)         usage >&2; die "unknown argument: $1" ;;
    esac
done

# The host's Debian sources (only those naming the suite: other repositories
# the host has, e.g. a vendor's, are not Debian as people run it).
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    if grep -Eq "^[^#]*\b$SUITE\b" "$f"; then sources+=("$f"); fi
done
[ ${#sources[@]} -gt 0 ] || die "no apt sources for Debian $SUITE in /etc/apt (sources.list or sources.list.d)"

mapfile -t PKGS < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$HERE/packages.txt" | grep -v '^$')
KEY=$(cat "$HERE/packages.txt" "$HERE/build-image.sh" "$HERE/customize.sh" "${sources[@]}" \
      | sha256sum | cut -c1-16)
if [ "$KEY_ONLY" = 1 ]; then echo "$KEY"; exit 0; fi

[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap's root mode, and the image's file owners)"
for t in mmdebstrap mke2fs; do
    command -v "$t" >/dev/null || die "$t is missing (packaging/setup.sh installs it)"
done

DEST=$CACHE/$KEY
install -d -m 0755 "$CACHE"
# One builder at a time; a second waits and then finds the image made.
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
    say "another build holds $CACHE/.lock: waiting"
    flock 9
fi

if [ "$REBUILD" = 0 ] && [ -f "$DEST/complete" ]; then
    say "cached image $DEST (key $KEY)"
    echo "$DEST"
    exit 0
fi

TMP=$CACHE/tmp.$KEY.$$
rm -rf "$TMP"
# The cleanup of a killed build's leftovers: any tmp.* here is dead (we hold the lock).
rm -rf "$CACHE"/tmp.*
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$TMP/root"
t0=$(date +%s)
say "building the guest image (key $KEY): mmdebstrap $SUITE, ${#PKGS[@]} packages, from ${sources[*]}"
inc=$(IFS=,; printf '%s' "${PKGS[*]}")
# force-unsafe-io: no fsync per unpacked file (an interrupted build is thrown
# away whole anyway); it saves about a minute on a busy disk.
mmdebstrap --mode=root --variant=apt --include="$inc" --dpkgopt=force-unsafe-io \
    --customize-hook="bash '$HERE/customize.sh' \"\$1\"" \
    --customize-hook='chroot "$1" dpkg-query -W -f "\${Package} \${Version}\n" > "$1/../packages.lst"' \
    "$SUITE" "$TMP/root" "${sources[@]}" 2> >(sed -u 's/^/  /' >&2) \
    || die "mmdebstrap failed (its output is above)"
say "mmdebstrap done in $(( $(date +%s) - t0 )) s"

# Kernel and initrd out of the image: the modules in it are that kernel's.
vmlinuz=$(find "$TMP/root/boot" -maxdepth 1 -name 'vmlinuz-*-cloud-amd64' | sort -V | tail -n 1)
[ -n "$vmlinuz" ] || die "no /boot/vmlinuz-*-cloud-amd64 in the image (linux-image-cloud-amd64 not installed?)"
kver=${vmlinuz##*/vmlinuz-}
[ -f "$TMP/root/boot/initrd.img-$kver" ] || die "no /boot/initrd.img-$kver in the image (initramfs-tools did not run?)"
cp "$vmlinuz" "$TMP/vmlinuz"
cp "$TMP/root/boot/initrd.img-$kver" "$TMP/initrd.img"
echo "$kver" > "$TMP/kernel-version"

# An ext4 image with 1 GiB free: the guest writes the image store, the runs'
# state and the journal (to a copy-on-write snapshot: this file stays as made).
used_mb=$(du -sxm "$TMP/root" | cut -f1)
size_mb=$(( used_mb + 1024 ))
mke2fs -q -t ext4 -L sbxroot -d "$TMP/root" "$TMP/rootfs.img" "${size_mb}M" >&2 \
    || die "mke2fs -d of the root file system failed"
rm -rf "$TMP/root"
echo "$KEY" > "$TMP/complete"

rm -rf "$DEST"
mv "$TMP" "$DEST"
trap - EXIT
say "built $DEST in $(( $(date +%s) - t0 )) s: kernel $kver, rootfs ${used_mb} MiB used of ${size_mb} MiB"

# Older images: keep the newest few (another branch may want its own back).
mapfile -t old < <(cd "$CACHE" && ls -1dt -- */ 2>/dev/null | sed 's:/$::' | grep -vx "$KEY" || true)
for ((i = KEEP_OLD; i < ${#old[@]}; i++)); do
    rm -rf "${CACHE:?}/${old[$i]}"
    say "removed the old cached image ${old[$i]}"
done
echo "$DEST"
