#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The fuzz targets the build makes (tests/fuzz/CMakeLists.txt,
SBX_FUZZ_TARGETS) are the ones packaging/fuzz.sh runs (TARGETS), each with
its source and a seed corpus: a target built but never run (elf_needed,
ci51) was a fuzzer nobody ran."""
import os
import re
import sys

ROOT = os.environ.get("SBX_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def words(pattern, path):
    with open(os.path.join(ROOT, path)) as f:
        m = re.search(pattern, f.read(), re.S)
    if not m:
        sys.exit("%s: no target list (pattern %s)" % (path, pattern))
    return m.group(1).split()


built = words(r"set\(SBX_FUZZ_TARGETS\s+([^)]*)\)", "tests/fuzz/CMakeLists.txt")
run = words(r"\nTARGETS=\(([^)]*)\)", "packaging/fuzz.sh")
problems = []
if sorted(built) != sorted(run):
    problems.append("built but not run by packaging/fuzz.sh: %s; run but not built: %s"
                    % (sorted(set(built) - set(run)) or "none",
                       sorted(set(run) - set(built)) or "none"))
for t in built:
    if not os.path.isfile(os.path.join(ROOT, "tests/fuzz", "fuzz_%s.c" % t)):
        problems.append("%s: no tests/fuzz/fuzz_%s.c" % (t, t))
    seeds = os.path.join(ROOT, "tests/fuzz/corpus", t)
    if not os.path.isdir(seeds) or not os.listdir(seeds):
        problems.append("%s: no seed corpus in tests/fuzz/corpus/%s/" % (t, t))
for p in problems:
    print("layout.fuzz_targets: " + p)
print("layout.fuzz_targets: %d targets, %s" % (len(built), "MISMATCH" if problems else "ok"))
sys.exit(1 if problems else 0)
