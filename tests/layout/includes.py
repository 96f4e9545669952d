#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The arrows between rooms (HACKING.md, "The rooms, and what each may use"),
checked from the sources: each `#include "x.h"` of every C file is resolved
to the directory that holds x.h, and a file fails when its room may not use
that directory. The build's include paths say the same for what compiles;
this also catches a header reached by a relative path or through a room
that happens to be linked, and it names the file and the header.

    includes.py            (SBX_SOURCE_DIR names the source tree)

Before the tree, it checks a small tree built to break each rule, so that a
checker which silently finds nothing fails too. Fails naming every file,
header and rule broken.
"""
import os
import re
import sys
import tempfile

ROOT = os.environ.get("SBX_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (a file under, may not include a header under, why). Paths are relative
# to the source tree; a directory ends in "/"; a header protobuf-c
# generates from proto/<x>.proto is proto/<x>.pb-c.h (resolve).
ABOVE_FLOOR = ("server/rpc/", "server/runs/", "server/egress/", "server/images/")
RULES = [
    ("common/", ("server/",), "common/ serves sbx-helper and the clients too, not only sbxd"),
    ("clients/", ("server/",), "the clients speak only the wire (proto/) and common/"),
    ("server/config/", ABOVE_FLOOR,
     "config is floor: the rooms above read it, it reads none of them"),
    ("server/audit/", ABOVE_FLOOR,
     "the audit log is floor: the rooms above write it, it sees none of them"),
    ("server/metrics/", ABOVE_FLOOR,
     "metrics are floor: the rooms above bump them, they see none of them "
     "(main.c hands in the collectors)"),
    ("server/service/", ABOVE_FLOOR,
     "service.h is the seam between rpc/ and runs/: it may see neither side"),
    ("server/egress/",
     ("server/rpc/", "server/runs/", "server/images/", "proto/sbx/v1/sandbox.pb-c.h"),
     "egress is below runs/: it keeps its own records (egress.h), "
     "runs/runs_egress.c puts them on the wire"),
    ("server/images/", ("server/rpc/", "server/runs/", "server/egress/"),
     "the image store is below runs/, which holds its images"),
    ("server/runs/", ("server/rpc/",),
     "the run manager meets the RPC layer only at server/service/"),
    ("helper/", ("server/", "clients/"), "sbx-helper shares only common/ and the wire with sbxd"),
]

# Where C files (and the .proto files of generated headers) live; build
# directories (anything holding CMakeCache.txt) and dot-directories are
# skipped.
SOURCE_DIRS = ("common", "clients", "helper", "server", "tests", "bench", "proto")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def c_files(root):
    for top in SOURCE_DIRS:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [x for x in dirs if not x.startswith(".")
                       and not os.path.exists(os.path.join(d, x, "CMakeCache.txt"))]
            for f in files:
                if f.endswith((".c", ".h", ".proto")):
                    yield os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")


def resolve(path, name, headers, protos):
    """The headers `#include "name"` in path may mean: the one beside the file
    if it exists (as the compiler looks first), else every header of the tree
    whose path ends in name; a protobuf-c header generated from
    proto/<dir>/<x>.proto counts as proto/<dir>/<x>.pb-c.h. None found: a
    system header."""
    here = os.path.normpath(os.path.join(os.path.dirname(path), name)).replace(os.sep, "/")
    if here in headers:
        return [here]
    if name.endswith(".pb-c.h") and "proto/" + name[:-len(".pb-c.h")] + ".proto" in protos:
        return ["proto/" + name]
    return sorted(h for h in headers if h == name or h.endswith("/" + name))


def check(root):
    found = sorted(c_files(root))
    protos = {f for f in found if f.endswith(".proto")}
    files = [f for f in found if not f.endswith(".proto")]
    headers = {f for f in files if f.endswith(".h")}
    broken = []
    for path in files:
        rules = [r for r in RULES if path.startswith(r[0])]
        if not rules:
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name in INCLUDE.findall(text):
            for header in resolve(path, name, headers, protos):
                for room, banned, why in rules:
                    hit = [b for b in banned if header.startswith(b)]
                    if hit:
                        broken.append('%s: #include "%s" is %s, and %s may not include %s: %s'
                                      % (path, name, header, room, hit[0], why))
    return len(files), broken


def self_test():
    """A tree that breaks each rule once must give one complaint per rule."""
    with tempfile.TemporaryDirectory() as t:
        def put(rel, text=""):
            os.makedirs(os.path.dirname(os.path.join(t, rel)), exist_ok=True)
            with open(os.path.join(t, rel), "w", encoding="utf-8") as f:
                f.write(text)
        put("server/config/config.h")
        put("server/runs/runs.h")
        put("server/rpc/rpc.h")
        put("common/err.h")
        put("common/bad.c", '#include "err.h"\n#include "config.h"\n')
        put("clients/c/bad.c", '#include "../../server/rpc/rpc.h"\n')
        put("server/config/bad.c", '#include "config.h"\n#include "runs.h"\n')
        put("server/audit/bad.c", '#include "rpc.h"\n')
        put("server/metrics/bad.c", '#include "runs.h"\n')
        put("server/service/bad.h", '  #  include "runs.h"\n')
        put("proto/sbx/v1/sandbox.proto")
        put("proto/sbx/v1/policy.proto")
        put("server/egress/bad.h",
            '#include "sbx/v1/policy.pb-c.h"\n#include "sbx/v1/sandbox.pb-c.h"\n')
        put("server/images/bad.c", '#include "runs.h"\n')
        put("server/runs/bad.c", '#include "runs.h"\n#include "rpc.h"\n')
        put("helper/bad.c", '#include "config.h"\n')
        _, broken = check(t)
        want = ["common/bad.c", "clients/c/bad.c", "server/config/bad.c",
                "server/audit/bad.c", "server/metrics/bad.c", "server/service/bad.h", "server/egress/bad.h",
                "server/images/bad.c", "server/runs/bad.c", "helper/bad.c"]
        got = sorted(b.split(":")[0] for b in broken)
        if got != sorted(want):
            return "the checker's own test: expected one complaint from each of %s, got:\n  %s" % (
                want, "\n  ".join(broken) or "nothing")
    return None


def main():
    err = self_test()
    if err:
        print(err)
        return 1
    n, broken = check(ROOT)
    print("%d C files, %d rules" % (n, len(RULES)))
    for b in broken:
        print(b)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
