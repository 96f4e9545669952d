#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every --long-option a program prints in its --help (and in each
subcommand's --help) appears in its man page's source, docs/man/PAGE.md.

    man_options.py PAGE            e.g. sbxctl.1, sbx-helper.1, sbxd.8, sbxd-image.8

The programs come from the test environment (SBX_CLI, SBX_HELPER, SBX_SBXD),
the sources from SBX_SOURCE_DIR. Subcommands are read from the top-level
help itself, so a new subcommand is checked without touching this file.
Fails naming each option missing from the page, and the help it came from.
"""
import os
import re
import subprocess
import sys

OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)")


def run_help(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, timeout=30)
    text = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        sys.exit("%s exited %d (want 0):\n%s" % (" ".join(argv), p.returncode, text))
    return text


def subcommands(text, after, until, pattern):
    """Names matched by pattern on the lines of text between a line
    containing `after` and the next line matching `until`."""
    names, inside = [], False
    for line in text.splitlines():
        if not inside:
            inside = after in line
            continue
        if re.match(until, line):
            break
        m = re.match(pattern, line)
        if m and m.group(1) not in names:
            names.append(m.group(1))
    return names


def helps(page):
    """[(argv, text)] for every help the page must cover."""
    env = os.environ
    if page == "sbxctl.1":
        prog = [env["SBX_CLI"]]
        top = run_help(prog + ["--help"])
        cmds = subcommands(top, "Commands:", r"^\S|^$", r"^  ([a-z]+) ")
        assert "run" in cmds and "policy" in cmds, cmds
        subs = [[c, "--help"] for c in cmds]
    elif page == "sbx-helper.1":
        prog = [env["SBX_HELPER"]]
        top = run_help(prog + ["--help"])
        cmds = sorted(set(re.findall(r"^(?:usage:)?\s+sbx-helper ([\w-]+)", top, re.M)))
        assert "run" in cmds and "serve" in cmds, cmds
        # `policy` takes a FILE and no options: its --help is not a help.
        subs = [[c, "--help"] for c in cmds if c != "policy"]
    elif page == "sbxd.8":
        prog = [env["SBX_SBXD"]]
        top = run_help(prog + ["--help"])
        subs = []
    elif page == "sbxd-image.8":
        prog = [env["SBX_SBXD"], "image"]
        top = run_help(prog + ["--help"])
        cmds = subcommands(top, "The image store", r"^  --", r"^  ([a-z]+) ")
        assert "import" in cmds and "rm" in cmds, cmds
        subs = [[c, "--help"] for c in cmds]
    else:
        sys.exit("unknown page %s" % page)
    out = [(prog + ["--help"], top)]
    for s in subs:
        out.append((prog + s, run_help(prog + s)))
    return out


def main():
    page = sys.argv[1]
    src = os.path.join(os.environ["SBX_SOURCE_DIR"], "docs", "man", page + ".md")
    with open(src, encoding="utf-8") as f:
        doc = f.read()
    missing, seen = [], set()
    for argv, text in helps(page):
        for opt in OPTION.findall(text):
            if opt in seen:
                continue
            seen.add(opt)
            if not re.search(r"(?<![\w-])" + re.escape(opt) + r"(?![\w-])", doc):
                missing.append("%s (printed by `%s`)" % (opt, " ".join(
                    [os.path.basename(argv[0])] + argv[1:])))
    print("%s: %d options checked against %s" % (page, len(seen), src))
    if missing:
        print("missing from docs/man/%s.md:" % page)
        for m in missing:
            print("  " + m)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
