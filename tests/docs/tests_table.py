#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""docs/dev/testing.md's table names every ctest test, so a new test comes
with a line saying what it attacks or checks. A name in the table's first
column may end in `*` (`sbxd.valgrind.*`) or hold a `<placeholder>`
(`docs.man_options.<page>`), which stand for any text.

    tests_table.py BUILD_DIR      (SBX_SOURCE_DIR names the source tree)

Fails naming every test `ctest -N` lists that no row covers.
"""
import os
import re
import subprocess
import sys


def table_patterns(path):
    pats = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("| `"):
                continue
            first = line.split("|")[1]
            for name in re.findall(r"`([^`]+)`", first):
                rx = re.escape(name).replace(r"\*", ".*")
                rx = re.sub(r"<[^>]*>", ".+", rx.replace(r"\<", "<").replace(r"\>", ">"))
                pats.append(re.compile("^" + rx + "$"))
    return pats


def main():
    build = sys.argv[1]
    doc = os.path.join(os.environ["SBX_SOURCE_DIR"], "docs", "dev", "testing.md")
    out = subprocess.run(["ctest", "--test-dir", build, "-N"], stdout=subprocess.PIPE,
                         check=True, timeout=60).stdout.decode()
    tests = re.findall(r"^\s*Test\s+#\d+: (\S+)", out, re.M)
    if not tests:
        sys.exit("ctest -N listed no tests:\n" + out)
    pats = table_patterns(doc)
    missing = [t for t in tests if not any(p.match(t) for p in pats)]
    print("%d tests, %d table patterns" % (len(tests), len(pats)))
    for t in missing:
        print("not in docs/dev/testing.md's table: " + t)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
