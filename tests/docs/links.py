#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The docs hang together: every relative link in README.md, HACKING.md and
docs/**/*.md leads to a file that exists (and an #anchor to a heading of
it), and every page under docs/ is reachable from README.md by following
links. Fails naming each broken link and each page nothing leads to.

    links.py            (SBX_SOURCE_DIR names the source tree)
"""
import os
import re
import sys

ROOT = os.environ.get("SBX_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README_MAX = 12 * 1024
LINK = re.compile(r"\]\(([^)\s]+)\)")


def strip_code(text):
    """The text without fenced code blocks and code spans."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path):
    """GitHub's anchors of the headings of a markdown file."""
    out = set()
    with open(path, encoding="utf-8") as f:
        for line in strip_code(f.read()).splitlines():
            m = re.match(r"^#+\s+(.*)", line)
            if m:
                a = m.group(1).strip().lower()
                a = re.sub(r"[^\w\- ]", "", a).replace(" ", "-")
                out.add(a)
    return out


def links(path):
    with open(path, encoding="utf-8") as f:
        text = strip_code(f.read())
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        yield target


def main():
    pages = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "HACKING.md")]
    for d, _, files in os.walk(os.path.join(ROOT, "docs")):
        pages += [os.path.join(d, f) for f in sorted(files) if f.endswith(".md")]
    broken, graph = [], {}
    for page in pages:
        graph[page] = set()
        for target in links(page):
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), file)) if file else page
            rel = os.path.relpath(page, ROOT)
            if not os.path.exists(dest):
                broken.append("%s: %s: no such file" % (rel, target))
                continue
            if anchor and dest.endswith(".md") and anchor not in anchors(dest):
                broken.append("%s: %s: no heading with that anchor" % (rel, target))
            graph[page].add(dest)
    seen, todo = set(), [os.path.join(ROOT, "README.md")]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo += [q for q in graph.get(p, ()) if q.endswith(".md")]
    unreachable = [os.path.relpath(p, ROOT) for p in pages
                   if p not in seen and "/docs/" in p]
    print("%d pages, %d reachable from README.md" % (len(pages), len(seen & set(pages))))
    size = os.path.getsize(os.path.join(ROOT, "README.md"))
    too_big = size > README_MAX
    if too_big:
        print("README.md is %d bytes, over %d: move the detail to docs/" % (size, README_MAX))
    for b in broken:
        print("broken link: " + b)
    for u in unreachable:
        print("not reachable from README.md: " + u)
    return 1 if broken or unreachable or too_big else 0


if __name__ == "__main__":
    sys.exit(main())
