#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Reconcile the ledger against the payment provider's settlement export.

Usage: reconcile.py [LEDGER_CSV [SETTLEMENT_CSV]] [--out DIR]
Defaults: /data/ledger.csv, /data/settlement.csv, --out /out.

Standard library only. It needs no environment variable, no network and no
writable place but the output directory, so it runs as-is inside an sbx sandbox
(read-only /data, writable /out, empty environment, egress denied).

Entries are matched by reference (case and surrounding blanks ignored). The
ledger books gross amounts in cents; the provider reports gross, fee and net
in decimal units. Statuses:

  matched               one settlement, same currency, gross == ledger amount
  fee_difference        ledger amount == net: the ledger booked the amount after fees
  amount_mismatch       gross differs from the ledger amount
  currency_mismatch     the settlement is in another currency
  duplicate_settlement  more than one settlement carries the reference
  missing_settlement    no settlement for a ledger entry
  unmatched_settlement  a settlement whose reference is not in the ledger
  duplicate_ledger      a second ledger entry with an already seen reference
  invalid               a row that cannot be read (bad amount, no reference)

Writes OUT/report.csv (ref,status,ledger_amount,settled_amount,difference,note)
with one row per ledger entry and per unmatched settlement, and OUT/summary.json
(counts per status and totals per currency). Prints a short summary; exit 0.
"""

import csv
import json
import os
import sys
from collections import OrderedDict
from decimal import Decimal, InvalidOperation

STATUSES = ("matched", "fee_difference", "amount_mismatch", "currency_mismatch",
            "duplicate_settlement", "missing_settlement", "unmatched_settlement",
            "duplicate_ledger", "invalid")
CENT = Decimal("0.01")


def usage(code):
    out = sys.stdout if code == 0 else sys.stderr
    print(__doc__.split("\n\n")[1], file=out)
    sys.exit(code)


def parse_args(argv):
    files, out = [], "/out"
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            usage(0)
        elif a == "--out":
            if i + 1 >= len(argv):
                usage(2)
            out = argv[i + 1]
            i += 1
        elif a.startswith("--out="):
            out = a[len("--out="):]
        elif a.startswith("-"):
            usage(2)
        else:
            files.append(a)
        i += 1
    if len(files) > 2:
        usage(2)
    ledger = files[0] if len(files) > 0 else "/data/ledger.csv"
    settlement = files[1] if len(files) > 1 else "/data/settlement.csv"
    return ledger, settlement, out


def norm_ref(ref):
    return (ref or "").strip().upper()


def money(value):
    """A decimal string ("1250.00", "-3.5") -> Decimal with 2 places, or None."""
    try:
        d = Decimal((value or "").strip())
    except InvalidOperation:
        return None
    if not d.is_finite():
        return None
    return d.quantize(CENT)


def cents(value):
    """An integer count of cents ("125000") -> Decimal in units, or None."""
    v = (value or "").strip()
    if not v.lstrip("-").isdigit():
        return None
    return (Decimal(int(v)) / 100).quantize(CENT)


def fmt(d):
    return "" if d is None else "%.2f" % d


def read_csv(path):
    with open(path, newline="", encoding="utf-8-sig") as f:
        return list(csv.DictReader(f, skipinitialspace=False))


def reconcile(ledger_rows, settle_rows):
    report = []

    def row(ref, status, ledger_amount=None, settled=None, diff=None, note=""):
        # no commas in notes: the report stays readable with `column -t -s,`
        note = note.replace(",", ";")
        report.append(OrderedDict([("ref", ref), ("status", status),
                                   ("ledger_amount", fmt(ledger_amount)),
                                   ("settled_amount", fmt(settled)),
                                   ("difference", fmt(diff)), ("note", note)]))

    # index the settlements by normalized reference, keeping file order
    by_ref = OrderedDict()
    for n, s in enumerate(settle_rows, start=2):   # line 1 is the header
        s = dict(s)
        s["_line"] = n
        s["_gross"] = money(s.get("gross"))
        s["_fee"] = money(s.get("fee"))
        s["_net"] = money(s.get("net"))
        s["_ccy"] = (s.get("currency") or "").strip().upper()
        by_ref.setdefault(norm_ref(s.get("ref")), []).append(s)

    seen = set()
    for n, e in enumerate(ledger_rows, start=2):
        ref = norm_ref(e.get("reference"))
        amount = cents(e.get("amount_cents"))
        ccy = (e.get("currency") or "").strip().upper()
        lid = (e.get("id") or "").strip()
        if not ref or amount is None:
            row(ref, "invalid", amount,
                note="ledger line %d (%s): %s" % (n, lid or "no id",
                                                  "no reference" if not ref else
                                                  "bad amount_cents %r" % e.get("amount_cents")))
            continue
        if ref in seen:
            row(ref, "duplicate_ledger", amount,
                note="ledger %s repeats a reference already reconciled" % lid)
            continue
        seen.add(ref)
        ss = by_ref.get(ref, [])
        ids = " + ".join(s.get("settlement_id", "?") for s in ss)
        if not ss:
            row(ref, "missing_settlement", amount, None, -amount,
                note="ledger %s %s %s: no settlement" % (lid, fmt(amount), ccy))
            continue
        bad = [s for s in ss if s["_gross"] is None]
        if bad:
            row(ref, "invalid", amount,
                note="settlement %s: bad gross %r" % (bad[0].get("settlement_id", "?"),
                                                      bad[0].get("gross")))
            continue
        if len(ss) > 1:
            total = sum((s["_gross"] for s in ss), Decimal("0.00"))
            row(ref, "duplicate_settlement", amount, total,
                total - amount if all(s["_ccy"] == ccy for s in ss) else None,
                note="%d settlements for one ledger entry: %s" % (len(ss), ids))
            continue
        s = ss[0]
        if s["_ccy"] != ccy:
            row(ref, "currency_mismatch", amount, s["_gross"], None,
                note="ledger in %s but settlement %s in %s" % (ccy, ids, s["_ccy"] or "?"))
        elif s["_gross"] == amount:
            row(ref, "matched", amount, s["_gross"], Decimal("0.00"),
                note="%s fee %s" % (ids, fmt(s["_fee"])))
        elif s["_net"] is not None and s["_net"] == amount:
            row(ref, "fee_difference", amount, s["_gross"], s["_gross"] - amount,
                note="ledger booked net of fee %s (%s)" % (fmt(s["_fee"]), ids))
        else:
            row(ref, "amount_mismatch", amount, s["_gross"], s["_gross"] - amount,
                note="%s gross %s vs ledger %s" % (ids, fmt(s["_gross"]), fmt(amount)))

    for ref, ss in by_ref.items():
        if ref in seen:
            continue
        for s in ss:
            if s["_gross"] is None:
                row(ref, "invalid", note="settlement line %d (%s): bad gross %r" % (
                    s["_line"], s.get("settlement_id", "?"), s.get("gross")))
                continue
            row(ref, "unmatched_settlement", None, s["_gross"], s["_gross"],
                note="settlement %s from %s (%s): no ledger entry%s" % (
                    s.get("settlement_id", "?"), (s.get("payer") or "?").strip(),
                    s["_ccy"] or "?", "" if ref else " (no reference)"))
    return report


def totals(ledger_rows, settle_rows):
    t = {"ledger": {}, "settled_gross": {}, "fees": {}, "settled_net": {}}

    def add(kind, ccy, v):
        if v is not None:
            t[kind][ccy] = t[kind].get(ccy, Decimal("0.00")) + v

    for e in ledger_rows:
        add("ledger", (e.get("currency") or "").strip().upper(), cents(e.get("amount_cents")))
    for s in settle_rows:
        ccy = (s.get("currency") or "").strip().upper()
        add("settled_gross", ccy, money(s.get("gross")))
        add("fees", ccy, money(s.get("fee")))
        add("settled_net", ccy, money(s.get("net")))
    return {k: {c: fmt(v) for c, v in sorted(d.items())} for k, d in t.items()}


def main(argv):
    ledger_path, settle_path, out = parse_args(argv)
    try:
        ledger_rows = read_csv(ledger_path)
        settle_rows = read_csv(settle_path)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        print("reconcile: cannot read input: %s" % exc, file=sys.stderr)
        return 1
    report = reconcile(ledger_rows, settle_rows)

    counts = OrderedDict((s, 0) for s in STATUSES)
    for r in report:
        counts[r["status"]] += 1
    summary = OrderedDict([
        ("ledger_file", ledger_path),
        ("settlement_file", settle_path),
        ("ledger_entries", len(ledger_rows)),
        ("settlement_rows", len(settle_rows)),
        ("report_rows", len(report)),
        ("counts", counts),
        ("discrepancies", sum(v for k, v in counts.items() if k != "matched")),
        ("totals", totals(ledger_rows, settle_rows)),
    ])

    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "report.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(report[0].keys()) if report else
                           ["ref", "status", "ledger_amount", "settled_amount",
                            "difference", "note"], lineterminator="\n")
        w.writeheader()
        w.writerows(report)
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")

    print("reconciled %d ledger entries against %d settlements"
          % (len(ledger_rows), len(settle_rows)))
    for status, n in counts.items():
        if n:
            print("  %-22s %d" % (status, n))
    for r in report:
        if r["status"] != "matched":
            print("  ! %-14s %-21s %s" % (r["ref"], r["status"], r["note"]))
    print("wrote %s and %s" % (os.path.join(out, "report.csv"),
                               os.path.join(out, "summary.json")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
