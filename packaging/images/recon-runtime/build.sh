#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build.sh — the recon-runtime image: a minimal Debian 12 rootfs made by
# mmdebstrap from packages.txt, imported into sbxd's image store; prints the pin.
set -euo pipefail

PROG=build.sh
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
SUITE=bookworm
NAME=recon-runtime

usage() {
    cat <<EOF
Usage: packaging/images/recon-runtime/build.sh [--state-dir DIR] [--config FILE]
           [--sbxd PATH] [--tag TAG] [--mirror URL] [--keep-tar FILE]
           [--cache-dir DIR] [--help]

Builds a minimal Debian 12 ($SUITE) rootfs with mmdebstrap --variant=essential
from $HERE/packages.txt, imports it with
  sbxd image [--config FILE] [--state-dir DIR] import $NAME:TAG --rootfs-tar TAR
and prints the pinned reference ($NAME:TAG@sha256:...) alone on stdout.
Progress goes to stderr.

mmdebstrap runs --mode=unshare when this user can (an /etc/subuid and
/etc/subgid range, newuidmap/newgidmap, unprivileged user namespaces), and
--mode=root as root. What it leaves out of the image, and why, is in REVIEW.md.

  --state-dir DIR   sbxd's state directory (the store is DIR/images unless the
                    config says otherwise)
  --config FILE     sbxd's config file
  --sbxd PATH       the sbxd binary (default: \$SBX_SBXD, else
                    $REPO/build/server/sbxd, else sbxd on PATH)
  --tag TAG         the image's tag (default: today in UTC, YYYY.MM.DD)
  --mirror URL      the Debian archive for $SUITE and $SUITE-updates (default:
                    the host's apt sources for $SUITE*, else http://deb.debian.org/debian);
                    $SUITE-security still comes from the host's source when it has one
  --keep-tar FILE   keep the rootfs tar as FILE, and its package list
                    (dpkg -l) as FILE.dpkg-l; without it both are temporary and
                    the list goes to stderr
  --cache-dir DIR   keep the tar and its list in DIR, named by the sha256 of
                    packages.txt and this script, and import that tar instead of
                    building when it is there (the tests' cache; not with --keep-tar)
  -h, --help        this text
EOF
}

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
usage_die() { usage >&2; printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 2; }

STATE_DIR='' CONFIG='' SBXD=${SBX_SBXD:-} TAG='' MIRROR='' KEEP_TAR='' CACHE_DIR=''
need() { [ $# -ge 2 ] && [ -n "$2" ] || usage_die "$1 needs a value"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --state-dir) need "$@"; STATE_DIR=$2; shift 2 ;;
        --config)    need "$@"; CONFIG=$2; shift 2 ;;
        --sbxd)      need "$@"; SBXD=$2; shift 2 ;;
        --tag)       need "$@"; TAG=$2; shift 2 ;;
        --mirror)    need "$@"; MIRROR=$2; shift 2 ;;
        --keep-tar)  need "$@"; KEEP_TAR=$2; shift 2 ;;
        --cache-dir) need "$@"; CACHE_DIR=$2; shift 2 ;;
        -h|--help)   usage; exit 0 ;;
        *)           usage_die "unknown argument: $1" ;;
    esac
done

[ -z "$KEEP_TAR" ] || [ -z "$CACHE_DIR" ] || usage_die "--keep-tar and --cache-dir exclude each other"
TAG=${TAG:-$(date -u +%Y.%m.%d)}
if [ -z "$SBXD" ]; then
    if [ -x "$REPO/build/server/sbxd" ]; then SBXD=$REPO/build/server/sbxd
    else SBXD=$(command -v sbxd || true); fi
fi
[ -n "$SBXD" ] && [ -x "$SBXD" ] || die "no sbxd (build it, or pass --sbxd PATH)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed (packaging/setup.sh installs it)"

# ------------------------------------------------------------ the package list
# One name a line; '#' starts a comment. The names are checked here so that
# nothing but package names reaches mmdebstrap's --include.
PACKAGES=()
while IFS= read -r line || [ -n "$line" ]; do
    line=${line%%#*}
    read -r pkg rest <<<"$line" || true
    [ -n "${pkg:-}" ] || continue
    [ -z "${rest:-}" ] || die "packages.txt: one package a line: $line"
    [[ $pkg =~ ^[a-z0-9][a-z0-9+.-]+$ ]] || die "packages.txt: not a package name: $pkg"
    PACKAGES+=("$pkg")
done <"$HERE/packages.txt"
[ ${#PACKAGES[@]} -gt 0 ] || die "packages.txt names no package"
INCLUDE=$(IFS=,; printf '%s' "${PACKAGES[*]}")

# ------------------------------------------------------------ mode
# unshare needs a subordinate id range for this user (mmdebstrap maps 65536
# ids into its namespace), the setuid newuidmap/newgidmap, and user namespaces.
if [ "$(id -u)" = 0 ]; then
    MODE=root
else
    me=$(id -un)
    why=
    grep -qE "^($me|$(id -u)):" /etc/subuid 2>/dev/null || why="no /etc/subuid range for $me"
    [ -n "$why" ] || grep -qE "^($me|$(id -u)):" /etc/subgid 2>/dev/null || why="no /etc/subgid range for $me"
    [ -n "$why" ] || { command -v newuidmap >/dev/null && command -v newgidmap >/dev/null; } \
        || why="no newuidmap/newgidmap (package uidmap)"
    [ -n "$why" ] || unshare --user --map-root-user true 2>/dev/null \
        || why="unprivileged user namespaces are not allowed"
    [ -z "$why" ] || die "cannot build unprivileged: $why; run as root, or run packaging/setup.sh as root (it gives sbx-test a range)"
    MODE=unshare
    # mmdebstrap's temporary root is entered by the namespace's root, which is
    # a subordinate id: every directory down to it must let others search it.
    d=$(realpath "${TMPDIR:-/tmp}")
    while :; do
        [ "$(( 0$(stat -c %a "$d") & 01 ))" -ne 0 ] \
            || die "--mode=unshare needs TMPDIR (${TMPDIR:-/tmp}) searchable by others; $d is $(stat -c %a "$d")"
        [ "$d" = / ] && break
        d=$(dirname "$d")
    done
fi

# ------------------------------------------------------------ sources
# The host's own apt sources for this suite (deb822 .sources and one-line
# .list), so the image comes from where the host's packages come from.
host_sources() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        awk -v s="$SUITE" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
             if ($(i+1) ~ "^" s "(-updates|-security)?$") print "deb " $i " " $(i+1) " main" }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk -v s="$SUITE" 'BEGIN { RS = ""; FS = "\n" }
            { t = u = su = ""
              for (k = 1; k <= NF; k++) {
                  if ($k ~ /^Types:/) t = substr($k, 7)
                  else if ($k ~ /^URIs:/) u = substr($k, 6)
                  else if ($k ~ /^Suites:/) su = substr($k, 8)
              }
              if (t !~ /(^| )deb( |$)/) next
              nu = split(u, us, " "); ns = split(su, ss, " ")
              for (a = 1; a <= nu; a++) for (b = 1; b <= ns; b++)
                  if (ss[b] ~ "^" s "(-updates|-security)?$") print "deb " us[a] " " ss[b] " main" }' "$f"
    done
}
mapfile -t SOURCES < <(host_sources | awk '!seen[$0]++')
if [ -n "$MIRROR" ]; then
    mapfile -t SOURCES < <(printf '%s\n' "${SOURCES[@]}" | awk -v s="$SUITE-security" '$3 == s')
    SOURCES=("deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "${SOURCES[@]}")
fi
if [ ${#SOURCES[@]} -eq 0 ] || ! printf '%s\n' "${SOURCES[@]}" | awk -v s="$SUITE" '$3 == s { f = 1 } END { exit !f }'; then
    SOURCES=("deb http://deb.debian.org/debian $SUITE main" "${SOURCES[@]}")
fi

# ------------------------------------------------------------ build
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sbx-recon-runtime.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
TAR=${KEEP_TAR:-$WORK/rootfs.tar}
LIST=${KEEP_TAR:+$KEEP_TAR.dpkg-l}
LIST=${LIST:-$WORK/rootfs.dpkg-l}
CACHED=
if [ -n "$CACHE_DIR" ]; then
    # What decides the tar's content: the list and the way it is built.
    key=$(cat "$HERE/packages.txt" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
    mkdir -p "$CACHE_DIR"
    CACHED=$CACHE_DIR/$NAME-$key.tar
    KEEP_TAR=$CACHED
    LIST=$CACHED.dpkg-l
fi

# What the image leaves out (REVIEW.md says why): documentation and message
# translations (dpkg never unpacks them; the copyright files stay), the
# builder's hostname and resolv.conf (sbx writes its own; kept, they would make
# the pin depend on the build host), backups and caches a sandbox never reads,
# and every setuid/setgid bit (the import clears them anyway; cleared here so
# the tar and its review say the same).
DPKGOPTS=(
    'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright'
    'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*'
    'path-exclude=/usr/share/locale/*' 'path-include=/usr/share/locale/locale.alias'
)
# shellcheck disable=SC2016 # expanded by mmdebstrap's shell, $1 = the chroot
CLEAN='set -e; r=$1
rm -f "$r/etc/hostname" "$r/etc/resolv.conf" "$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old \
      "$r/var/cache/ldconfig/aux-cache"
rm -rf "$r/var/cache/apt" "$r/var/lib/apt"
find "$r/usr/share/doc" -mindepth 1 -depth ! -name copyright ! -type d -delete 2>/dev/null || true
find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf "$r"/usr/share/man/* "$r"/usr/share/info/*
find "$r/usr/share/locale" -mindepth 1 ! -name locale.alias -delete 2>/dev/null || true
find "$r" -xdev \( -type f -o -type d \) -perm /6000 -printf "clearing set-id bits: /%P\n" -exec chmod ug-s {} + >&2'

args=(--variant=essential --mode="$MODE" --format=tar --include="$INCLUDE"
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
for o in "${DPKGOPTS[@]}"; do args+=(--dpkgopt="$o"); done
args+=(--customize-hook="$CLEAN")
if [ -n "$CACHED" ] && [ -f "$CACHED" ] && [ -f "$LIST" ]; then
    TAR=$CACHED
    say "reusing $CACHED (built from this packages.txt and build.sh)"
else
    say "mmdebstrap --mode=$MODE --variant=essential: ${PACKAGES[*]} from:"
    for s in "${SOURCES[@]}"; do say "  $s"; done
    t0=$(date +%s.%N)
    mmdebstrap "${args[@]}" "$SUITE" "$TAR" "${SOURCES[@]}" >&2 \
        || die "mmdebstrap failed (its messages are above)"
    t1=$(date +%s.%N)
    say "mmdebstrap took $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s; $TAR is $(du -m "$TAR" | cut -f1) MiB"

    # The package list a reviewer reads (dpkg -l of the image, from its own status file).
    mkdir -p "$WORK/adm"
    tar -C "$WORK/adm" -xf "$TAR" ./var/lib/dpkg/status
    COLUMNS=200 dpkg-query --admindir="$WORK/adm/var/lib/dpkg" -l >"$LIST"
    if [ -n "$CACHED" ]; then
        # into the cache whole or not at all (a rename in its directory): a
        # tar cut short is never reused
        mv -f "$TAR" "$CACHED.part"
        mv -f "$CACHED.part" "$CACHED"
        TAR=$CACHED
        # older keys' tars are never read again
        for old in "$CACHE_DIR/$NAME"-*.tar; do
            [ "$old" = "$CACHED" ] || rm -f "$old" "$old.dpkg-l"
        done
    fi
fi
if [ -n "$KEEP_TAR" ]; then
    say "$(grep -c '^ii' "$LIST") packages installed; their dpkg -l is in $LIST"
else
    say "$(grep -c '^ii' "$LIST") packages installed:"
    cat "$LIST" >&2
fi

# ------------------------------------------------------------ import
imp=("$SBXD" image)
[ -z "$CONFIG" ] || imp+=(--config "$CONFIG")
[ -z "$STATE_DIR" ] || imp+=(--state-dir "$STATE_DIR")
imp+=(import "$NAME:$TAG" --rootfs-tar "$TAR")
say "${imp[*]}"
pin=$("${imp[@]}") || die "sbxd image import failed"
[[ $pin =~ ^$NAME:[^@[:space:]]+@sha256:[0-9a-f]{64}$ ]] || die "sbxd image import printed no pin: $pin"
printf '%s\n' "$pin"
