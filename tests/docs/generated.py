#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A generated reference page is what its generator prints now: the page is
committed (readable without a build), its source is the code, and this
fails on drift naming each key, field or call whose row differs, with the
command that brings the page back in line.

    generated.py NAME BUILD_DIR           compare (docs.NAME_reference)
    generated.py --write NAME BUILD_DIR   rewrite the page from its source

NAME is one of:
    config  docs/reference/config.md  from sbxd-config-reference (server/config/config_keys.h)
    policy  docs/reference/policy-ranges.md  from sbx-policy-reference (common/policy_ranges.h)
    api     docs/reference/api.md  from proto/sbx/v1/sandbox.proto (docs/gen/api_reference.py)
"""
import os
import re
import subprocess
import sys

ROOT = os.environ.get("SBX_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pages(build):
    return {
        "config": ("docs/reference/config.md",
                   [os.path.join(build, "server", "sbxd-config-reference")]),
        "policy": ("docs/reference/policy-ranges.md",
                   [os.path.join(build, "common", "sbx-policy-reference")]),
        "api": ("docs/reference/api.md",
                [sys.executable, os.path.join(ROOT, "docs", "gen", "api_reference.py"),
                 os.path.join(ROOT, "proto", "sbx", "v1", "sandbox.proto")]),
    }


def rows(text):
    """{(heading, first cell): line} of every table row, and the other
    lines in order: a row names its key, a heading its section."""
    out, other, heading = {}, [], ""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        header = i + 1 < len(lines) and lines[i + 1].startswith("|---")
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            other.append(line)
        elif line.startswith("| ") and not header:
            cell = line.split("|")[1].strip().strip("`")
            out[(heading, cell)] = line
        else:
            other.append(line)
    return out, other


def path(k):
    """A row's name: its section's JSON path and its key ("limits_max.pids"),
    the key alone at the root (a heading with words)."""
    return k[1] if not k[0] or " " in k[0] else "%s.%s" % k


def drift(page, want, have):
    """Lines naming what differs between the page (have) and the source (want)."""
    wrows, wother = rows(want)
    hrows, hother = rows(have)
    out = []
    for k in wrows:
        name = path(k)
        if k not in hrows:
            out.append("%s: `%s` is in the source but not on the page" % (page, name))
        elif hrows[k] != wrows[k]:
            out.append("%s: `%s` differs:\n    page:   %s\n    source: %s" %
                       (page, name, hrows[k], wrows[k]))
    for k in hrows:
        if k not in wrows:
            name = path(k)
            out.append("%s: `%s` is on the page but no longer in the source" % (page, name))
    if not out and wother != hother:
        for w, h in zip(wother + [""] * len(hother), hother + [""] * len(wother)):
            if w != h:
                out.append("%s: text differs:\n    page:   %s\n    source: %s" % (page, h, w))
                break
    return out


def main():
    args = sys.argv[1:]
    write = bool(args) and args[0] == "--write"
    if write:
        args = args[1:]
    if len(args) != 2 or args[0] not in pages(args[1] if len(args) > 1 else ""):
        sys.stderr.write(__doc__)
        return 2
    name, build = args
    page, cmd = pages(build)[name]
    run = subprocess.run(cmd, stdout=subprocess.PIPE)
    if run.returncode != 0:
        # The generator said why on stderr (an rpc without its comment).
        print("%s: its generator failed (exit %d): %s" % (page, run.returncode, " ".join(cmd)))
        return 1
    want = run.stdout.decode("utf-8")
    path = os.path.join(ROOT, page)
    if write:
        with open(path, "w", encoding="utf-8") as f:
            f.write(want)
        print("wrote %s" % page)
        return 0
    try:
        with open(path, encoding="utf-8") as f:
            have = f.read()
    except FileNotFoundError:
        have = ""
    if have == want:
        print("%s: as its source says" % page)
        return 0
    for line in drift(page, want, have) or ["%s: differs from its source" % page]:
        print(line)
    print("regenerate: tests/docs/generated.py --write %s BUILD_DIR" % name)
    return 1


if __name__ == "__main__":
    sys.exit(main())
