#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""sbx-helper makes no thread and switches to no stack it did not map.

The helper's own code probes its stack every 64 KiB, not every page
(helper/CMakeLists.txt, sbx_helper_stack_probes): that keeps
-fstack-clash-protection's promise only on stacks with a guard at least
that large (helper/stack.h), and glibc gives a thread's stack a guard of one
page. So the binary must import none of the calls that would start a thread
or run code on a stack of someone else's making (review 41). Read from its
dynamic symbol table (nm -D); argv[1] is the binary."""
import subprocess
import sys

FORBIDDEN = {
    "pthread_create": "starts a thread (a guard of one page)",
    "thrd_create": "starts a thread (a guard of one page)",
    "sigaltstack": "runs signal handlers on a stack of the caller's choosing",
    "makecontext": "runs a function on a stack of the caller's choosing",
    "swapcontext": "switches to a stack of the caller's choosing",
}


def imports(path):
    out = subprocess.run(["nm", "-D", "--undefined-only", path], check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.split()}


def main():
    if len(sys.argv) != 2:
        print("usage: helper_single_threaded.py SBX_HELPER", file=sys.stderr)
        return 2
    found = sorted(imports(sys.argv[1]) & FORBIDDEN.keys())
    for name in found:
        print(f"not ok - {sys.argv[1]} imports {name}, which {FORBIDDEN[name]}")
    if not found:
        print(f"ok - {sys.argv[1]} imports none of {', '.join(sorted(FORBIDDEN))}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
