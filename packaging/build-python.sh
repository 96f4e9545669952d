#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build-python.sh OUT: the sbx-client Python package as an sdist and a wheel
# in OUT, for `pip install` on a machine with protobuf and without protoc.
#
# The sdist carries the protos (proto/sbx/v1) and the classes protoc made of
# them (sbx_client/_pb); the wheel is built from that sdist (as `python -m
# build` does), with protoc off PATH, so an sdist that would need protoc
# fails here, not on a user's machine. Generated code is made in a staging
# copy, never in the tree.
set -euo pipefail

PROG=build-python
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-/usr/bin/python3}

usage() {
    cat <<USAGE
Usage: packaging/build-python.sh [--protoc PATH] OUT

Writes OUT/sbx_client-VERSION.tar.gz (sdist: the package, its protos and
the generated sbx_client/_pb) and OUT/sbx_client-VERSION-py3-none-any.whl
(built from that sdist without protoc). Needs protoc (protobuf-compiler),
python3-setuptools and python3-wheel; install either file with
'pip install FILE' where protobuf (>=3.20) is installed or reachable.

  --protoc PATH   the protoc to generate with (default: \$PROTOC, else PATH)
USAGE
}

die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

PROTOC=${PROTOC:-}
OUT=
while [ $# -gt 0 ]; do
    case "$1" in
        --protoc) [ $# -ge 2 ] || die "--protoc needs a path"; PROTOC=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) usage >&2; die "unknown option $1" ;;
        *) [ -z "$OUT" ] || die "one OUT directory"; OUT=$1; shift ;;
    esac
done
[ -n "$OUT" ] || { usage >&2; exit 2; }
PROTOC=${PROTOC:-$(command -v protoc || true)}
[ -n "$PROTOC" ] && [ -x "$PROTOC" ] || die "no protoc (Debian: apt-get install protobuf-compiler)"
"$PY" -c 'import setuptools, wheel' 2>/dev/null ||
    die "$PY lacks setuptools or wheel (Debian: python3-setuptools python3-wheel)"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/sbx-build-python.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT

# The package as it is in git (no build leftovers), its protos beside it,
# and the generated classes.
SRC=$STAGE/src
mkdir -p "$SRC/proto/sbx/v1"
tar -C "$REPO/clients/python" --exclude='__pycache__' --exclude='build' --exclude='*.egg-info' \
    --exclude='sbx_client/_pb' -cf - README.md pyproject.toml setup.py gen_proto.py MANIFEST.in \
    sbx_client | tar -C "$SRC" -xf -
cp "$REPO/proto/sbx/v1/policy.proto" "$REPO/proto/sbx/v1/sandbox.proto" "$SRC/proto/sbx/v1/"
"$PY" "$SRC/gen_proto.py" --out "$SRC/sbx_client" --proto-dir "$SRC/proto" --protoc "$PROTOC"

# PEP 517 by hand (setuptools' backend is what pip would call): no build
# frontend is needed, and nothing is fetched.
backend() { # DIR HOOK OUTDIR
    (cd "$1" && env -u SBX_PROTO_DIR PATH=/usr/bin:/bin PROTOC=/nonexistent \
        "$PY" -c 'import sys; from setuptools import build_meta as b
print(getattr(b, sys.argv[1])(sys.argv[2]))' "$2" "$3")
}
SDIST=$(backend "$SRC" build_sdist "$STAGE/dist" | tail -n1)
rm -f "$OUT"/sbx_client-*.tar.gz "$OUT"/sbx_client-*.whl
cp "$STAGE/dist/$SDIST" "$OUT/"

# The wheel from the unpacked sdist, protoc out of reach.
mkdir "$STAGE/unpacked"
tar -C "$STAGE/unpacked" -xzf "$STAGE/dist/$SDIST"
UNPACKED=$(echo "$STAGE"/unpacked/*)
[ -f "$UNPACKED/sbx_client/_pb/sandbox_pb2.py" ] || die "the sdist lacks sbx_client/_pb"
[ -f "$UNPACKED/proto/sbx/v1/sandbox.proto" ] || die "the sdist lacks its protos"
# Only python3 on the backend's PATH: Debian's protoc is in /usr/bin.
mkdir -p "$STAGE/bin"
ln -s "$PY" "$STAGE/bin/python3"
WHEEL=$(cd "$UNPACKED" && env -u SBX_PROTO_DIR PATH="$STAGE/bin" PROTOC=/nonexistent \
    "$PY" -c 'import sys; from setuptools import build_meta as b
print(b.build_wheel(sys.argv[1]))' "$STAGE/wheel" | tail -n1)
cp "$STAGE/wheel/$WHEEL" "$OUT/"
"$PY" - "$OUT/$WHEEL" <<'PYCHECK'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = {"sbx_client/__init__.py", "sbx_client/py.typed", "sbx_client/_pb/sandbox_pb2.py",
        "sbx_client/_pb/policy_pb2.py", "sbx_client/sandbox.py"}
missing = sorted(need - names)
if missing:
    sys.exit("build-python: the wheel lacks " + ", ".join(missing))
PYCHECK
printf '%s: %s\n%s: %s\n' "$PROG" "$OUT/$SDIST" "$PROG" "$OUT/$WHEEL"
