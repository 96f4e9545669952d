#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build-debs.sh OUTDIR — builds the Debian packages (packaging/debian) from
# this tree with `dpkg-buildpackage -us -uc -b` and puts the .debs, the
# .buildinfo and .changes and lintian's report (lintian.txt) in OUTDIR.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
usage() {
    cat <<USAGE
Usage: packaging/build-debs.sh [--no-lintian] OUTDIR

Copies the tree's tracked and new files (git ls-files: no build directory)
to a scratch directory with packaging/debian as debian/, runs
dpkg-buildpackage -us -uc -b there (debhelper, dh-python, dh-apparmor:
packaging/setup.sh installs them), then lintian on the .changes, and moves
the results to OUTDIR. Uses ccache when it is installed.
USAGE
}
LINTIAN=1
OUT=
while [ $# -gt 0 ]; do
    case "$1" in
        --no-lintian) LINTIAN=0; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) usage >&2; exit 2 ;;
        *) [ -z "$OUT" ] || { usage >&2; exit 2; }; OUT=$1; shift ;;
    esac
done
[ -n "$OUT" ] || { usage >&2; exit 2; }
command -v dpkg-buildpackage >/dev/null || { echo "build-debs: dpkg-buildpackage is missing (packaging/setup.sh)" >&2; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d /var/tmp/sbx-debs.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/sbx"
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard) \
    | (cd "$REPO" && { xargs -0 cp --parents -P -t "$WORK/sbx" 2>/dev/null || true; })
rm -rf "$WORK/sbx/debian"
cp -r "$REPO/packaging/debian" "$WORK/sbx/debian"
if [ -d /usr/lib/ccache ]; then
    export PATH=/usr/lib/ccache:$PATH CCACHE_BASEDIR=$WORK
fi
(cd "$WORK/sbx" && DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:-} parallel=2" dpkg-buildpackage -us -uc -b) \
    > "$OUT/build.log" 2>&1 || { tail -n 40 "$OUT/build.log" >&2; echo "build-debs: dpkg-buildpackage failed (whole log: $OUT/build.log)" >&2; exit 1; }
mv "$WORK"/*.deb "$WORK"/*.buildinfo "$WORK"/*.changes "$OUT/"
if [ "$LINTIAN" = 1 ] && command -v lintian >/dev/null; then
    lintian --info --display-info --pedantic "$OUT"/*.changes > "$OUT/lintian.txt" 2>&1 || true
    echo "build-debs: lintian: $(grep -c '^[EW]:' "$OUT/lintian.txt" || true) errors and warnings ($OUT/lintian.txt)" >&2
fi
ls "$OUT"/*.deb
