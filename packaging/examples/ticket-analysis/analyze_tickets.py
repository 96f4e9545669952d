#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Summarize the support tickets and hand the summary to the run-record API.

Usage: analyze_tickets.py --api URL [TICKETS_CSV] [--out DIR] [--try URL]...
Defaults: /data/tickets.csv, --out /out, --try https://pypi.org/simple/
--try http://billing.internal/v1/customers.

Standard library only. It reads tickets (id, created, status, category,
priority, text) and writes OUT/summary.json: counts per category, priority
and status, open tickets per category, the oldest open ticket (its age in
days as of the newest ticket, so the same data gives the same summary), and
the most frequent keywords of open tickets. Then it POSTs the summary to the
API URL: inside an sbx sandbox whose egress allowlist holds the API alone,
through the egress proxy that sbx names in http_proxy (urllib honours it).

Then it tries every --try URL, which the allowlist does not hold, and records
how each one failed in OUT/egress-attempts.json: urllib's own error, and for
https (a CONNECT tunnel, whose refusal urllib reports without the reason) the
proxy's answer to the same CONNECT asked directly: its status line and its
X-Sbx-Egress-Reason header.

Exit 0 when the summary was stored and every other host was refused; 1 when
the summary was not stored; 3 when a --try URL answered (egress is open).
"""

import argparse
import csv
import http.client
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter, OrderedDict
from datetime import datetime, timezone

PRIORITIES = ("urgent", "high", "normal", "low")
STOPWORDS = set("""a an and are after at be been but by can cannot does for from has have in
    into is it its last let need needs not of on one or our please since some than that the
    their them then there they this to too two was we were when with without you your""".split())
TIMEOUT = 10


def parse_time(s):
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def read_tickets(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    tickets, skipped = [], []
    for n, r in enumerate(rows, start=2):  # line 1 is the header
        try:
            t = {k: (r[k] or "").strip() for k in
                 ("id", "created", "status", "category", "priority", "text")}
            t["created_at"] = parse_time(t["created"])
        except (KeyError, ValueError) as e:
            skipped.append({"line": n, "why": str(e)})
            continue
        tickets.append(t)
    return tickets, skipped


def keywords(texts, n=8):
    words = Counter()
    for text in texts:
        for w in re.findall(r"[a-z][a-z0-9'-]+", text.lower()):
            w = w.strip("'-")
            if len(w) >= 4 and w not in STOPWORDS:
                words[w] += 1
    return [{"word": w, "count": c} for w, c in
            sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


def summarize(tickets, skipped, source):
    def counts(key, order=None):
        c = Counter(t[key] for t in tickets)
        keys = list(order) + sorted(set(c) - set(order)) if order else sorted(c)
        return OrderedDict((k, c[k]) for k in keys if c[k])

    open_ = [t for t in tickets if t["status"] == "open"]
    as_of = max(t["created_at"] for t in tickets) if tickets else None
    oldest = min(open_, key=lambda t: (t["created_at"], t["id"])) if open_ else None
    s = OrderedDict()
    s["source"] = source
    s["tickets"] = len(tickets)
    s["skipped"] = skipped
    s["as_of"] = as_of.strftime("%Y-%m-%dT%H:%M:%SZ") if as_of else None
    s["by_category"] = counts("category")
    s["by_priority"] = counts("priority", PRIORITIES)
    s["by_status"] = counts("status")
    s["open_by_category"] = OrderedDict(
        sorted(Counter(t["category"] for t in open_).items()))
    s["open_urgent"] = sorted(t["id"] for t in open_ if t["priority"] == "urgent")
    s["oldest_open"] = None if not oldest else OrderedDict(
        [("id", oldest["id"]), ("created", oldest["created"]),
         ("category", oldest["category"]), ("priority", oldest["priority"]),
         ("age_days", (as_of - oldest["created_at"]).days)])
    s["open_keywords"] = keywords(t["text"] for t in open_)
    return s


def post(url, summary):
    """POST through whatever proxy the environment names (urllib's default)."""
    body = json.dumps(summary).encode()
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        return r.status, json.loads(r.read())


def proxy_address():
    p = os.environ.get("https_proxy") or os.environ.get("http_proxy") or ""
    u = urllib.parse.urlsplit(p)
    return (u.hostname, u.port or 3128) if u.hostname else None


def ask_proxy_connect(authority):
    """CONNECT authority at the proxy itself: (status, reason header, line)."""
    addr = proxy_address()
    if not addr:
        return None
    c = http.client.HTTPConnection(addr[0], addr[1], timeout=TIMEOUT)
    try:
        c.request("CONNECT", authority, headers={"Host": authority})
        r = c.getresponse()
        line = r.read(200).decode("utf-8", "replace").strip()
        return r.status, r.getheader("X-Sbx-Egress-Reason", ""), line
    finally:
        c.close()


def try_url(url):
    """Tries url as any client would; returns how it went."""
    out = OrderedDict([("url", url), ("reached", False)])
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as r:
            out["reached"] = True
            out["status"] = r.status
            return out
    except urllib.error.HTTPError as e:  # the proxy answered for a plain http:// URL
        out["status"] = e.code
        out["reason"] = e.headers.get("X-Sbx-Egress-Reason", "")
        out["error"] = "HTTP Error %d: %s" % (e.code, e.reason)
        return out
    except (urllib.error.URLError, OSError) as e:
        out["error"] = str(getattr(e, "reason", e))
    u = urllib.parse.urlsplit(url)
    if u.scheme == "https":
        asked = ask_proxy_connect("%s:%d" % (u.hostname, u.port or 443))
        if asked:
            out["status"], out["reason"], out["proxy_said"] = asked
    return out


def main():
    ap = argparse.ArgumentParser(usage=__doc__.split("\n\n")[1])
    ap.add_argument("tickets", nargs="?", default="/data/tickets.csv")
    ap.add_argument("--out", default="/out")
    ap.add_argument("--api", required=True, help="the run-record API's collection URL")
    ap.add_argument("--try", dest="tries", action="append")
    a = ap.parse_args()
    tries = a.tries or ["https://pypi.org/simple/", "http://billing.internal/v1/customers"]

    tickets, skipped = read_tickets(a.tickets)
    summary = summarize(tickets, skipped, os.path.basename(a.tickets))
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    print("analyzed %d tickets (%d open, %d skipped): %s" % (
        summary["tickets"], sum(summary["open_by_category"].values()), len(skipped),
        ", ".join("%s %d" % kv for kv in summary["by_category"].items())))
    if summary["oldest_open"]:
        o = summary["oldest_open"]
        print("oldest open: %s (%s, %s), %d days" % (o["id"], o["category"], o["priority"],
                                                     o["age_days"]))

    rc = 0
    try:
        status, answer = post(a.api, summary)
        print("posted the summary to %s: %d, id %s" % (a.api, status, answer.get("id")))
    except (urllib.error.URLError, OSError, ValueError) as e:
        print("could not post the summary to %s: %s" % (a.api, e), file=sys.stderr)
        rc = 1

    attempts = [try_url(u) for u in tries]
    for t in attempts:
        if t["reached"]:
            print("%s: reached (status %d): egress is open!" % (t["url"], t["status"]))
            rc = rc or 3
            continue
        if "status" in t:
            print("%s: refused by the egress proxy: %d %s (%s)" % (
                t["url"], t["status"], t["reason"] or "(no reason given)", t["error"]))
        else:
            print("%s: failed: %s" % (t["url"], t["error"]))
    with open(os.path.join(a.out, "egress-attempts.json"), "w") as f:
        json.dump(attempts, f, indent=1)
        f.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
