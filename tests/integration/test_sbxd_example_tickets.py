# SPDX-License-Identifier: Apache-2.0
"""The ticket-analysis example end to end (packaging/examples/ticket-analysis/
run.sh, against this build): its one allowlisted host gets the summary
through sbxd's egress proxy, byte for byte as the audit log counts it, and
every other host it tries is refused with 403 not_allowed, each connection on
record once with its decision and once with its close."""
import collections
import csv
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from sbxdfix import CLI, HELPER, SBXD, processes_with

SOURCE_DIR = os.environ.get("SBX_SOURCE_DIR", "")
EXAMPLE = os.path.join(SOURCE_DIR, "packaging", "examples", "ticket-analysis")
API = "run-records.internal"


def read_json(path):
    with open(path) as f:
        return json.load(f)


def count(n):
    """A uint64 in protobuf JSON is a string; absent is 0."""
    return int(n or 0)


class TicketExample(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for what, path in (("SBX_CLI", CLI), ("SBX_SBXD", SBXD), ("SBX_HELPER", HELPER)):
            if not path or not os.path.exists(path):
                raise RuntimeError("%s is not set to the built binary (run through ctest)" % what)
        cls.build = os.path.dirname(os.path.dirname(os.path.realpath(CLI)))
        # run.sh finds the binaries by the build tree's layout: the ones
        # ctest names must be those.
        for rel, path in (("server/sbxd", SBXD), ("helper/sbx-helper", HELPER)):
            assert os.path.realpath(os.path.join(cls.build, rel)) == os.path.realpath(path), \
                (rel, path)
        cls.tmp = tempfile.mkdtemp(prefix="sbx-test-tickets-test-", dir="/tmp")
        cls.keep = os.path.join(cls.tmp, "k")
        cls.out = os.path.join(cls.tmp, "out")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("SBX_") and k.lower() not in ("http_proxy", "https_proxy",
                                                                 "all_proxy", "no_proxy")}
        cls.r = subprocess.run(["bash", os.path.join(EXAMPLE, "run.sh"), "--build-dir",
                                cls.build, "--keep", cls.keep, cls.out],
                               capture_output=True, text=True, timeout=240, env=env)
        cls.left = processes_with(cls.keep)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertEqual(self.r.returncode, 0, "run.sh failed:\n%s\n%s" % (self.r.stdout,
                                                                          self.r.stderr))

    def k(self, name):
        return os.path.join(self.keep, name)

    def port(self):
        with open(self.k("api-port")) as f:
            return int(f.read())

    def run_id(self):
        m = read_json(self.k("manifest.json"))
        return m.get("runId", m.get("run_id"))

    def egress_events(self):
        ev = collections.defaultdict(list)
        with open(self.k("audit.log")) as f:
            for line in f:
                e = json.loads(line)
                if e.get("run_id") == self.run_id() and e["event"].startswith("egress_"):
                    ev[e["event"]].append(e)
        return ev

    def test_summary_is_right(self):
        # Counted here from the CSV, independently of the script.
        with open(os.path.join(EXAMPLE, "tickets.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        s = read_json(os.path.join(self.out, "summary.json"))
        self.assertEqual(s["tickets"], len(rows))
        self.assertEqual(len(rows), 50)
        self.assertEqual(s["skipped"], [])
        for key, field in (("by_category", "category"), ("by_priority", "priority"),
                           ("by_status", "status")):
            self.assertEqual(s[key], dict(collections.Counter(r[field] for r in rows)), key)
        open_ = [r for r in rows if r["status"] == "open"]
        self.assertEqual(s["open_by_category"],
                         dict(collections.Counter(r["category"] for r in open_)))
        oldest = min(open_, key=lambda r: r["created"])
        self.assertEqual(s["oldest_open"]["id"], oldest["id"])
        self.assertEqual(s["open_urgent"],
                         sorted(r["id"] for r in open_ if r["priority"] == "urgent"))
        words = " ".join(r["text"].lower() for r in open_)
        for k in s["open_keywords"]:
            self.assertGreaterEqual(words.count(k["word"]), k["count"], k)
        self.assertIn("analyzed 50 tickets", self.r.stdout)

    def test_api_stored_the_summary(self):
        records = read_json(self.k("api-records.json"))
        self.assertEqual(len(records), 1, records)
        self.assertEqual(records[0]["record"], read_json(os.path.join(self.out, "summary.json")))
        self.assertIn("posted the summary to http://%s:%d/v1/run-records: 201, id rr-1"
                      % (API, self.port()), self.r.stdout)
        self.assertIn("rr-1 received ", self.r.stdout)

    def test_other_hosts_refused_cleanly(self):
        attempts = read_json(os.path.join(self.out, "egress-attempts.json"))
        self.assertEqual([a["url"] for a in attempts],
                         ["https://pypi.org/simple/", "http://billing.internal/v1/customers"])
        for a in attempts:
            self.assertFalse(a["reached"], a)
            self.assertEqual((a["status"], a["reason"]), (403, "not_allowed"), a)
        # urllib's own words for a refused tunnel, and for a refused request.
        self.assertIn("Tunnel connection failed: 403", attempts[0]["error"])
        self.assertEqual(attempts[1]["error"], "HTTP Error 403: Forbidden")
        self.assertIn("https://pypi.org/simple/: refused by the egress proxy: 403 not_allowed",
                      self.r.stdout)

    def test_audit_records_match_the_server(self):
        ev = self.egress_events()
        decisions, closes = ev["egress_decision"], ev["egress_close"]
        by_conn = collections.Counter(e["connection"] for e in decisions)
        self.assertEqual(set(by_conn.values()), {1}, decisions)
        self.assertEqual(sorted(e["connection"] for e in closes), sorted(by_conn), closes)
        seen = sorted((e["decision"], e["method"], e["host"], e["port"], e["reason"])
                      for e in decisions)
        self.assertEqual(seen, [
            ("allowed", "POST", API, self.port(), "allowed"),
            ("denied", "CONNECT", "pypi.org", 443, "not_allowed"),
            ("denied", "CONNECT", "pypi.org", 443, "not_allowed"),
            ("denied", "GET", "billing.internal", 80, "not_allowed"),
        ])
        for e in decisions:
            if e["decision"] == "denied":
                self.assertEqual(e["status"], 403, e)
        allowed = [e for e in decisions if e["decision"] == "allowed"][0]
        self.assertEqual(allowed["address"], "127.0.0.1:%d" % self.port())
        close = [e for e in closes if e["connection"] == allowed["connection"]][0]
        self.assertEqual(close["address"], "127.0.0.1:%d" % self.port())
        # What the API's socket received and sent for the sandbox's POST.
        with open(self.k("api-connections.jsonl")) as f:
            conns = [json.loads(line) for line in f]
        posts = [c for c in conns if c["method"] == "POST"]
        self.assertEqual(len(posts), 1, conns)
        self.assertEqual(posts[0]["status"], 201)
        self.assertEqual((close["bytes_out"], close["bytes_in"]),
                         (posts[0]["bytes_received"], posts[0]["bytes_sent"]), (close, posts))
        # Denied connections moved nothing to or from a destination.
        for e in closes:
            if e["connection"] != allowed["connection"]:
                self.assertEqual((e["bytes_out"], e["bytes_in"]), (0, 0), e)
        # run.sh printed them: one line per connection.
        self.assertIn("run " + self.run_id(), self.r.stdout)
        table = [ln.split() for ln in self.r.stdout.splitlines() if ln[:1].isdigit()]
        self.assertEqual(sorted(ln[:7] for ln in table), sorted(
            [str(e["connection"]), e["decision"], e["method"], "%s:%d" % (e["host"], e["port"]),
             str(e["status"] or "-"), e["reason"], e["address"] or "-"] for e in decisions),
            self.r.stdout)

    def test_status_and_manifest(self):
        p = self.port()
        # `sbxctl status` while the run was alive: the records, with bytes.
        close = [e for e in self.egress_events()["egress_close"] if e["host"] == API][0]
        lines = [ln.split() for ln in self.r.stdout.splitlines() if ln.startswith("egress ")]
        api_line = "%s:%d" % (API, p)
        self.assertEqual(len([ln for ln in lines if api_line in ln and "allowed" in ln]), 1,
                         self.r.stdout)
        for ln in lines:
            if api_line in ln:
                out = ln.index("out")
                self.assertEqual(ln[out:out + 4], ["out", str(close["bytes_out"]), "in",
                                                   str(close["bytes_in"])], ln)
        self.assertEqual(len([ln for ln in lines if "pypi.org:443" in ln and "denied" in ln]),
                         2, self.r.stdout)
        dest = {(d["host"], int(d["port"])): d for d in read_json(self.k("manifest.json"))["egress"]}
        self.assertEqual(set(dest), {(API, p), ("pypi.org", 443), ("billing.internal", 80)})
        api = dest[(API, p)]
        self.assertEqual((count(api.get("connections")), count(api.get("denied"))), (1, 0))
        self.assertEqual(count(api.get("bytes_out", api.get("bytesOut"))), close["bytes_out"])
        self.assertEqual(count(api.get("bytes_in", api.get("bytesIn"))), close["bytes_in"])
        self.assertEqual(count(dest[("pypi.org", 443)].get("denied")), 2)
        self.assertEqual(count(dest[("billing.internal", 80)].get("denied")), 1)

    def test_policy_is_the_document_with_its_port(self):
        ran = read_json(self.k("policy.json"))
        doc = read_json(os.path.join(EXAMPLE, "policy.json"))
        self.assertEqual(doc["egress"]["allow"],
                         [{"host": API, "port": doc["egress"]["allow"][0]["port"],
                           "allow_private": True}])
        doc["egress"]["allow"][0]["port"] = self.port()
        self.assertEqual(ran, doc)

    def test_nothing_left(self):
        # sbxd, its helpers and the API were stopped by run.sh.
        self.assertEqual(self.left, [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
