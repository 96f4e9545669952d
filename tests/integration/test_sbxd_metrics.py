# SPDX-License-Identifier: Apache-2.0
"""sbxd's Prometheus metrics (docs/operator/metrics.md) from a real sbxd
with metrics.listen on a free loopback port: a scrape before and after a
run moves each counter by what the run did (a CreateRun, an Exec that
ended, an egress connection the proxy denied, a call refused
unauthenticated); `promtool check metrics` takes the scrape; no label
value is a run id or a caller's name; only GET /metrics is served (404
elsewhere, 405 for another method); a non-loopback listen without
allow_remote stops sbxd at start naming the key; and a storm of
connections to the metrics port, bounded in count, fills only the metrics
listener's own few slots while Health keeps answering on ipc and TLS."""
import http.client
import json
import os
import select
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

import sbxdfix
from sbxrpc import sandbox_pb2 as pb

# conn_guard.h: CONN_GUARD_HTTP_MAX
HTTP_MAX = 8
parse = sbxdfix.metrics_parse
value = sbxdfix.metric_value


class MetricsTest(sbxdfix.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sbx-test-metrics-")
        os.chmod(cls.tmp, 0o755)
        cls.hosts = os.path.join(cls.tmp, "hosts")
        with open(cls.hosts, "w") as f:
            f.write("127.0.0.1 allowed.test denied.test\n")
        cls.SERVER_CONFIG = {"metrics": {"listen": "127.0.0.1:0"},
                             "egress": {"hosts_file": cls.hosts, "resolv_conf": ""}}
        super().setUpClass()
        cls.port = cls.srv.metrics_port()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def request(self, method="GET", path="/metrics"):
        return sbxdfix.metrics_get(self.port, method, path)

    def scrape(self):
        status, ctype, text = sbxdfix.metrics_scrape(self.port)
        self.assertEqual(status, 200, text)
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"), ctype)
        return text

    def ok(self, conn, name, req, resp_type):
        code, msg, resp = conn.call(name, req, resp_type)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def one_run(self, conn):
        """A run, an exec that asks the proxy for a host the allowlist
        does not have (denied) and ends, and the run torn down: its id."""
        policy = json.loads(sbxdfix.policy_json())
        policy["egress"] = {"policy": "allowlist",
                            "allow": [{"host": "allowed.test", "port": 1,
                                       "allow_private": True}]}
        run = self.ok(conn, "CreateRun", pb.CreateRunRequest(policy_json=json.dumps(policy)),
                      pb.CreateRunResponse).run_id
        mid = parse(self.scrape())
        ex = self.ok(conn, "Exec", pb.ExecRequest(
            run_id=run, argv=["/bin/sh", "-c", "curl -s -o /dev/null -m 20 -w '%{http_code}' "
                              "http://denied.test:1/"]), pb.ExecResponse).exec_id
        st = self.ok(conn, "Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=60000),
                     pb.WaitResponse).status
        self.assertEqual(pb.ExitReason.Name(st.reason), "EXITED", st)
        self.ok(conn, "Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
        return run, mid

    def test_counters_move_by_what_a_run_did(self):
        with self.srv.conn() as c:
            before = parse(self.scrape())
            run, mid = self.one_run(c)
        # A call refused before its caller is known: no token over TLS.
        with self.srv.conn(tls=True) as t:
            code, _, _ = t.call("Health", pb.HealthRequest(), pb.HealthResponse)
            self.assertEqual(code, "UNAUTHENTICATED")
        after = parse(self.scrape())

        def moved(name, **labels):
            return value(after, name, **labels) - value(before, name, **labels)

        calls = "sbx_rpc_calls_total"
        for method in ("CreateRun", "Exec", "Wait", "Teardown"):
            self.assertEqual(moved(calls, method=method, code="OK"), 1, method)
            self.assertEqual(moved("sbx_rpc_duration_seconds_count", method=method), 1, method)
        self.assertEqual(moved(calls, method="unknown", code="UNAUTHENTICATED"), 1)
        self.assertEqual(moved("sbx_exec_ends_total", reason="EXITED"), 1)
        self.assertEqual(moved("sbx_exec_duration_seconds_count"), 1)
        self.assertEqual(moved("sbx_egress_connections_total", decision="denied"), 1)
        self.assertEqual(moved("sbx_egress_connections_total", decision="allowed"), 0)
        # The run was counted while it was there, and is gone now.
        self.assertEqual(value(mid, "sbx_runs", state="created") -
                         value(before, "sbx_runs", state="created"), 1)
        for state in ("starting", "created", "active", "expired", "failed", "tearing"):
            self.assertEqual(value(after, "sbx_runs", state=state), 0, state)
        # A histogram's buckets are cumulative and end at its count.
        for method in ("CreateRun", "Exec"):
            buckets = sorted(((float("inf") if dict(k[1])["le"] == "+Inf" else
                               float(dict(k[1])["le"])), v) for k, v in after.items()
                             if k[0] == "sbx_rpc_duration_seconds_bucket" and
                             dict(k[1]).get("method") == method)
            counts = [v for _, v in buckets]
            self.assertEqual(counts, sorted(counts), method)
            self.assertEqual(counts[-1],
                             value(after, "sbx_rpc_duration_seconds_count", method=method))
        versions = [dict(k[1])["version"] for k in after if k[0] == "sbx_build_info"]
        self.assertEqual(len(versions), 1, versions)
        self.assertEqual(value(after, "sbx_build_info", version=versions[0]), 1)
        self.assertGreater(value(after, "process_start_time_seconds"), 1.6e9)
        self.assertEqual(value(after, "sbx_runs_max"), 32)

    def test_repeats_are_counted_by_outcome(self):
        """A request id sent again: the first call is no repeat, the second
        with the same body is answered from the table (replayed), the same
        id with another method is refused (mismatched); nothing else
        moves. The parked outcome is test_sbxd_fleet_retry's."""
        rid = "metrics-repeat-" + os.urandom(8).hex()
        gone = pb.TeardownRequest(run_id="run-" + "0" * 32)
        before = parse(self.scrape())
        with self.srv.conn() as c:
            first = c.call("Teardown", gone, pb.TeardownResponse, request_id=rid)
            mid = parse(self.scrape())
            again = c.call("Teardown", gone, pb.TeardownResponse, request_id=rid)
            other = c.call("Signal", pb.SignalRequest(run_id=gone.run_id, exec_id="exec-1"),
                           pb.SignalResponse, request_id=rid)
        after = parse(self.scrape())
        self.assertEqual(first[0], "NOT_FOUND", first)
        self.assertEqual(again[:2], first[:2], "a repeat gets the first answer")
        self.assertEqual(other[0], "INVALID_ARGUMENT", other)
        self.assertIn("already used for a different request", other[1])
        name = "sbx_rpc_repeats_total"
        for outcome in ("replayed", "parked", "mismatched"):
            self.assertEqual(value(mid, name, outcome=outcome),
                             value(before, name, outcome=outcome), outcome)
        self.assertEqual(value(after, name, outcome="replayed") -
                         value(before, name, outcome="replayed"), 1)
        self.assertEqual(value(after, name, outcome="mismatched") -
                         value(before, name, outcome="mismatched"), 1)
        self.assertEqual(value(after, name, outcome="parked"),
                         value(before, name, outcome="parked"))

    def test_no_label_is_a_run_or_a_caller(self):
        with self.srv.conn() as c:
            run, _ = self.one_run(c)
        text = self.scrape()
        names = {run, "uid:%d" % os.getuid(), str(os.getuid())}
        for t in self.srv.tokens:
            names |= {t, "token:" + t}
        for (_, labels), _ in parse(text).items():
            for label, v in labels:
                self.assertNotIn(v, names, label)
                self.assertNotIn(run, v, label)
        self.assertNotIn(run, text)

    def test_promtool_accepts_the_scrape(self):
        promtool = shutil.which("promtool")
        if not promtool:
            if os.environ.get("CI") == "true":
                self.fail("promtool is missing (Debian package prometheus; packaging/setup.sh)")
            self.skipTest("promtool is not installed (Debian package prometheus)")
        p = subprocess.run([promtool, "check", "metrics"], input=self.scrape(),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_only_get_metrics_is_served(self):
        self.assertEqual(self.request("GET", "/other")[0], 404)
        self.assertEqual(self.request("GET", "/")[0], 404)
        self.assertEqual(self.request("POST", "/metrics")[0], 405)
        self.assertEqual(self.request("DELETE", "/metrics")[0], 405)

    def test_remote_listen_needs_allow_remote(self):
        cfg = os.path.join(self.tmp, "remote.json")
        for listen in ("0.0.0.0:9464", "192.0.2.1:9464", "[::]:9464"):
            with open(cfg, "w") as f:
                json.dump({"listen": ["ipc://" + os.path.join(self.tmp, "r.sock")],
                           "state_dir": os.path.join(self.tmp, "state"),
                           "metrics": {"listen": listen}}, f)
            p = subprocess.run([sbxdfix.SBXD, "--config", cfg], capture_output=True, text=True,
                               timeout=60, stdin=subprocess.DEVNULL)
            self.assertNotEqual(p.returncode, 0, listen)
            self.assertIn("metrics.listen", p.stderr)
            self.assertIn("allow_remote", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(self.tmp, "r.sock")))

    def test_metrics_port_apart_from_rpc_ports(self):
        # The connection guard tells listeners apart by their port: the
        # same port on another loopback address is refused at start.
        port = sbxdfix.free_port()
        cfg = os.path.join(self.tmp, "shared-port.json")
        with open(cfg, "w") as f:
            json.dump({"listen": ["tcp://127.0.0.1:%d" % port], "insecure": True,
                       "state_dir": os.path.join(self.tmp, "state2"),
                       "tokens": [{"name": "t", "sha256": "0" * 64}],
                       "helper": sbxdfix.HELPER,
                       "metrics": {"listen": "127.0.0.2:%d" % port}}, f)
        p = subprocess.run([sbxdfix.SBXD, "--config", cfg], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("metrics.listen: port %d is an RPC listener's too" % port, p.stderr)

    def test_connection_storm_leaves_rpc_answering(self):
        before = parse(self.scrape())
        storm = []
        try:
            # Four times the listener's slots, each holding its connection
            # and sending nothing, as a slow or hostile scraper would.
            for _ in range(4 * HTTP_MAX):
                s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                storm.append(s)
            # Health answers on ipc and on TLS from the same address.
            with self.srv.conn() as c:
                self.ok(c, "Health", pb.HealthRequest(), pb.HealthResponse)
            with self.srv.conn(tls=True) as t:
                code, msg, _ = t.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                      token=self.srv.tokens["alice"])
                self.assertEqual(code, "OK", msg)
            # The slots past the first HTTP_MAX were refused at accept:
            # the peer sees its connection closed.
            closed = set()
            deadline = time.time() + 60
            while len(closed) < 3 * HTTP_MAX and time.time() < deadline:
                ready, _, _ = select.select([s for s in storm if s not in closed], [], [], 1)
                for s in ready:
                    try:
                        if s.recv(1) == b"":
                            closed.add(s)
                    except ConnectionError:
                        closed.add(s)
            closed = len(closed)
            # The slots past HTTP_MAX were closed, the held ones stay open
            # until their lifetime (30 s) ends, long after these; one or two
            # slots may still have been held by the scrape before the storm
            # (its close not yet seen by nng).
            self.assertGreaterEqual(closed, 3 * HTTP_MAX)
            self.assertTrue(HTTP_MAX - 2 <= len(storm) - closed <= HTTP_MAX,
                            "%d of %d held open" % (len(storm) - closed, len(storm)))
        finally:
            for s in storm:
                s.close()
        # Once the storm is gone a scrape is answered again (nng closes
        # the held connections as their peers hang up).
        deadline = time.time() + 60
        while True:
            try:
                after = parse(self.scrape())
                break
            except (ConnectionError, http.client.HTTPException, AssertionError):
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        self.assertGreaterEqual(value(after, "sbx_connections_refused_total",
                                      reason="metrics_full") -
                                value(before, "sbx_connections_refused_total",
                                      reason="metrics_full"), 3 * HTTP_MAX)


if __name__ == "__main__":
    unittest.main()
