#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Print one run's egress records from sbxd's audit log, one line per
connection: its decision record and its close record side by side.

Usage: egress_records.py AUDIT_LOG RUN_ID

Exit 0, or 1 when the log holds no egress record of the run, or a
connection's records are not exactly one decision and one close.
"""

import json
import sys


def main(argv):
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    decisions, closes, problems = {}, {}, []
    with open(argv[1], encoding="utf-8") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("run_id") != argv[2]:
                continue
            kind = {"egress_decision": decisions, "egress_close": closes}.get(e.get("event"))
            if kind is None:
                continue
            conn = e.get("connection")
            if conn in kind:
                problems.append("connection %s: a second %s record" % (conn, e["event"]))
            kind[conn] = e
    if not decisions and not closes:
        print("no egress records of %s in %s" % (argv[2], argv[1]), file=sys.stderr)
        return 1
    print("run %s" % argv[2])
    fmt = "%-4s %-8s %-7s %-28s %-6s %-16s %-17s %9s %9s  %s"
    print(fmt % ("conn", "decision", "method", "host:port", "status", "reason", "address",
                 "bytes_out", "bytes_in", "closed"))
    for conn in sorted(set(decisions) | set(closes), key=lambda c: (c is None, c)):
        d, c = decisions.get(conn), closes.get(conn)
        if not d or not c:
            problems.append("connection %s: no %s record" % (conn, "decision" if not d
                                                             else "close"))
        d, c = d or {}, c or {}
        host = d.get("host", c.get("host", "")) or "(no head)"
        print(fmt % (conn, d.get("decision", "?"), d.get("method", "") or "-",
                     "%s:%s" % (host, d.get("port", c.get("port", ""))), d.get("status") or "-",
                     d.get("reason", "?"), c.get("address", d.get("address", "")) or "-",
                     c.get("bytes_out", "?"), c.get("bytes_in", "?"),
                     "%s after %s ms" % (c["reason"], c.get("duration_ms", "?")) if c else "-"))
    for p in problems:
        print("egress_records: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
