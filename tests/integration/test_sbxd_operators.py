# SPDX-License-Identifier: Apache-2.0
"""The operator's view through the real sbxd: an identity named in the
config's `operators` lists every identity's runs with their owners, reads
any run's Status, tears any run down (its owner is then told who did, not
NOT_FOUND), drains and undrains; each such call is in the audit log naming
the operator and the owner. A caller that is not an operator is refused
each of these and never learns another identity's run ids."""
import os
import sys
import unittest

from sbxdfix import Server, policy_json
from sbxrpc import sandbox_pb2 as pb

SOURCE = os.environ.get("SBX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.dirname(os.environ.get("SBX_PYTHON_PROTO", "").rstrip("/"))
sys.path[:0] = [os.path.join(SOURCE, "clients", "python"), os.path.join(BUILD, "clients", "python")]
import sbx_client  # noqa: E402


class TokenCaller:
    """A bearer token over TLS: alice is the operator, bob is not."""

    def __init__(self, srv, name):
        self.c = srv.conn(tls=True)
        self.token = srv.tokens[name]
        self.name = "token:" + name

    def close(self):
        self.c.close()

    def call(self, name, req, resp_type):
        return self.c.call(name, req, resp_type, token=self.token)


class Operators(unittest.TestCase):
    def setUp(self):
        self.srv = Server(operators=["token:alice"])
        self.owner = self.srv.conn()  # ipc: "uid:N", its runs are the ones attacked
        self.op = TokenCaller(self.srv, "alice")
        self.bob = TokenCaller(self.srv, "bob")

    def tearDown(self):
        for c in (self.owner, self.op, self.bob):
            c.close()
        rc = self.srv.stop()
        try:
            self.assertEqual(rc, 0, "sbxd exited %s: %s" % (rc, self.srv.log_tail()))
        finally:
            self.srv.cleanup()

    def owner_call(self, name, req, resp_type):
        return self.owner.call(name, req, resp_type)

    def create(self, caller=None):
        call = caller.call if caller else self.owner_call
        code, msg, r = call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                            pb.CreateRunResponse)
        self.assertEqual(code, "OK", msg)
        return r.run_id

    def audit(self, event):
        return [e for e in self.srv.audit_events() if e.get("event") == event]

    def owner_name(self):
        code, _, h = self.owner_call("Health", pb.HealthRequest(), pb.HealthResponse)
        self.assertEqual(code, "OK")
        return h.identity

    def test_an_operator_lists_reads_and_tears_down_anothers_run(self):
        run = self.create()
        owner = self.owner_name()
        own = self.create(self.op)

        code, msg, l = self.op.call("ListRuns", pb.ListRunsRequest(all=True),
                                    pb.ListRunsResponse)
        self.assertEqual(code, "OK", msg)
        rows = {r.run_id: r for r in l.runs}
        self.assertEqual(set(rows), {run, own}, "every identity's runs, and only those")
        self.assertEqual(rows[run].owner, owner)
        self.assertEqual(rows[own].owner, "token:alice")
        self.assertEqual(rows[run].state, pb.CREATED)
        self.assertGreaterEqual(rows[run].age_ms, 0)
        self.assertTrue(any(e["operator"] == "token:alice" for e in self.audit(
            "operator_list_runs")), "the listing of every run is audited")
        # Without all, an operator's ListRuns is its own, as anyone's.
        code, _, l = self.op.call("ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse)
        self.assertEqual([r.run_id for r in l.runs], [own])

        # The owner's run ran something: its ended exec's CPU shows in the row.
        code, msg, e = self.owner_call("Exec", pb.ExecRequest(
            run_id=run, argv=["/bin/sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); "
                              "done"]), pb.ExecResponse)
        self.assertEqual(code, "OK", msg)
        code, msg, w = self.owner_call("Wait", pb.WaitRequest(run_id=run, exec_id=e.exec_id,
                                                             timeout_ms=30000), pb.WaitResponse)
        self.assertEqual(code, "OK", msg)
        code, _, l = self.op.call("ListRuns", pb.ListRunsRequest(all=True),
                                  pb.ListRunsResponse)
        row = [r for r in l.runs if r.run_id == run][0]
        self.assertEqual(row.state, pb.ACTIVE)
        self.assertEqual(row.cpu_ms, w.status.cpu_ms, "the helper's word on the ended exec")
        self.assertEqual(row.peak_memory_bytes, w.status.peak_memory_bytes)

        code, msg, s = self.op.call("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual(code, "OK", msg)
        self.assertEqual(s.run_id, run)
        st = [ev for ev in self.audit("operator_status") if ev.get("run_id") == run]
        self.assertEqual([(ev["operator"], ev["owner"]) for ev in st], [("token:alice", owner)])

        code, msg, t = self.op.call("Teardown", pb.TeardownRequest(run_id=run),
                                    pb.TeardownResponse)
        self.assertEqual(code, "OK", msg)
        self.assertEqual(t.manifest.identity, owner)
        td = [ev for ev in self.audit("operator_teardown") if ev.get("run_id") == run]
        self.assertEqual([(ev["operator"], ev["owner"]) for ev in td], [("token:alice", owner)])
        torn = [ev for ev in self.audit("teardown") if ev.get("run_id") == run]
        self.assertEqual(torn[0]["reason"], "operator")
        self.assertIn("manifest", torn[0], "the owner never got it: the audit log has it")

        # The owner learns what happened, not NOT_FOUND.
        for name, req, resp in (("Status", pb.StatusRequest(run_id=run), pb.StatusResponse),
                                ("Teardown", pb.TeardownRequest(run_id=run),
                                 pb.TeardownResponse)):
            code, msg, _ = self.owner_call(name, req, resp)
            self.assertEqual(code, "FAILED_PRECONDITION", "%s: %s" % (name, msg))
            self.assertIn("torn down by operator token:alice", msg)
        # Anyone else still gets what a run that never existed gets.
        code, msg, _ = self.bob.call("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual(code, "NOT_FOUND", msg)
        self.assertNotIn("operator", msg)

    def test_a_non_operator_is_refused_every_operator_call(self):
        run = self.create()
        bobs = self.create(self.bob)

        code, msg, _ = self.bob.call("ListRuns", pb.ListRunsRequest(all=True),
                                     pb.ListRunsResponse)
        self.assertEqual(code, "PERMISSION_DENIED", msg)
        self.assertIn("not an operator", msg)
        code, _, l = self.bob.call("ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse)
        self.assertEqual([r.run_id for r in l.runs], [bobs], "its own runs, never another's")

        for name, req, resp in (("Status", pb.StatusRequest(run_id=run), pb.StatusResponse),
                                ("Teardown", pb.TeardownRequest(run_id=run),
                                 pb.TeardownResponse)):
            code, msg, _ = self.bob.call(name, req, resp)
            self.assertEqual(code, "NOT_FOUND", "%s: %s" % (name, msg))
        for undrain in (False, True):
            code, msg, _ = self.bob.call("Drain", pb.DrainRequest(undrain=undrain),
                                         pb.DrainResponse)
            self.assertEqual(code, "PERMISSION_DENIED", msg)
        code, _, h = self.bob.call("Health", pb.HealthRequest(), pb.HealthResponse)
        self.assertEqual(h.state, pb.SERVING, "the refused Drain changed nothing")
        self.assertFalse(h.operator)
        # Host-wide numbers are every caller's (clients place runs with
        # them); how the host is configured stays the operators'.
        self.assertGreater(h.capacity_memory_mb, 0, "placement needs capacity")
        self.assertGreater(h.committed_memory_mb, 0, "the owner's run is committed")
        self.assertGreater(h.run_slots_free, 0)
        self.assertEqual((h.capacity_source, h.cpu_overcommit_percent, h.operator_drain),
                         ("", 0, False), "configuration is for operators")
        # The owner's run is untouched.
        code, _, s = self.owner_call("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual((code, s.state), ("OK", pb.CREATED))
        self.assertEqual(self.audit("operator_drain") + self.audit("operator_teardown"), [])

    def test_an_operators_drain_refuses_new_runs_until_undrained(self):
        run = self.create()
        code, msg, d = self.op.call("Drain", pb.DrainRequest(), pb.DrainResponse)
        self.assertEqual(code, "OK", msg)
        self.assertEqual((d.state, d.operator_drain, d.shutdown_drain, d.runs_active),
                         (pb.DRAINING, True, False, 1))
        for caller in (self.owner_call, self.op.call, self.bob.call):
            code, msg, _ = caller("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                  pb.CreateRunResponse)
            self.assertEqual(code, "UNAVAILABLE", msg)
            self.assertIn("an operator's drain", msg)
            code, _, h = caller("Health", pb.HealthRequest(), pb.HealthResponse)
            self.assertEqual(h.state, pb.DRAINING)
        # A run already there goes on.
        code, msg, e = self.owner_call("Exec", pb.ExecRequest(run_id=run, argv=["/bin/true"]),
                                       pb.ExecResponse)
        self.assertEqual(code, "OK", msg)
        code, _, h = self.op.call("Health", pb.HealthRequest(), pb.HealthResponse)
        self.assertTrue(h.operator and h.operator_drain and not h.shutdown_drain)

        code, msg, d = self.op.call("Drain", pb.DrainRequest(undrain=True), pb.DrainResponse)
        self.assertEqual(code, "OK", msg)
        self.assertEqual((d.state, d.operator_drain), (pb.SERVING, False))
        code, _, h = self.bob.call("Health", pb.HealthRequest(), pb.HealthResponse)
        self.assertEqual(h.state, pb.SERVING)
        self.create(self.bob)
        self.assertEqual([(e["operator"], e["was_draining"]) for e in self.audit(
            "operator_drain")], [("token:alice", False)])
        self.assertEqual([e["operator"] for e in self.audit("operator_undrain")],
                         ["token:alice"])

    def test_an_operators_health_carries_the_capacity(self):
        code, _, before = self.op.call("Health", pb.HealthRequest(), pb.HealthResponse)
        self.assertEqual(code, "OK")
        self.assertTrue(before.operator)
        self.assertGreater(before.capacity_cpu_millis, 0)
        self.assertGreater(before.capacity_memory_mb, 0)
        self.assertTrue(before.capacity_source)
        self.assertEqual(before.cpu_overcommit_percent, 10000)  # sbxdfix's
        self.assertEqual(before.allowed_cpu_millis, before.capacity_cpu_millis * 100)
        self.assertEqual((before.committed_cpu_millis, before.committed_memory_mb), (0, 0))
        self.assertEqual(before.run_slots_free, 32)
        self.create()
        code, _, after = self.op.call("Health", pb.HealthRequest(), pb.HealthResponse)
        # sbxdfix's policy: cpu 1, memory_mb 256 + out_mb 16 + 2 x tmp_mb 16.
        self.assertEqual((after.committed_cpu_millis, after.committed_memory_mb), (1000, 304))
        self.assertEqual(after.run_slots_free, 31)
        self.assertEqual(after.identity_run_slots_free, 8, "alice's own: she has none")


    def test_the_clis_and_the_python_clients_operator_commands(self):
        run = self.create()
        owner = self.owner_name()
        alice, bob = self.srv.tokens["alice"], self.srv.tokens["bob"]

        r = self.srv.cli("runs", "--all", token=alice)
        self.assertEqual(r.returncode, 0, r.stderr)
        head, *rows = r.stdout.splitlines()
        self.assertEqual(head.split(), ["RUN", "OWNER", "STATE", "AGE", "CPU", "MEM", "EXECS"])
        self.assertEqual([row.split()[:3] for row in rows], [[run, owner, "CREATED"]])
        r = self.srv.cli("runs", "--all", token=bob)
        self.assertEqual(r.returncode, 1)
        self.assertIn("PERMISSION_DENIED", r.stderr)
        self.assertNotIn(run, r.stdout + r.stderr)

        r = self.srv.cli("drain", token=bob)
        self.assertEqual(r.returncode, 1)
        self.assertIn("PERMISSION_DENIED", r.stderr)
        r = self.srv.cli("drain", token=alice)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("state DRAINING", r.stdout)
        r = self.srv.cli("health", token=alice)
        self.assertIn("state DRAINING", r.stdout)
        self.assertIn("drains operator yes, shutdown no", r.stdout)
        self.assertIn("committed", r.stdout)
        r = self.srv.cli("health", token=bob)
        self.assertIn("state DRAINING", r.stdout)
        # Host-wide numbers are every caller's (placement); the
        # configuration and the drains are the operators'.
        self.assertIn("committed", r.stdout)
        self.assertNotIn("overcommit", r.stdout, "the configuration is for operators")
        self.assertNotIn("drains operator", r.stdout)
        r = self.srv.cli("undrain", token=alice)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("state SERVING", r.stdout)

        with sbx_client.connect(self.srv.ipc, token=alice) as op, \
                sbx_client.connect(self.srv.ipc, token=bob) as other:
            rows = op.list_runs(all=True)
            self.assertEqual([(x.run_id, x.owner, x.state) for x in rows],
                             [(run, owner, "created")])
            with self.assertRaises(sbx_client.PermissionDenied):
                other.list_runs(all=True)
            with self.assertRaises(sbx_client.PermissionDenied):
                other.drain()
            d = op.drain()
            self.assertEqual((d.state, d.operator_drain, d.runs_active), ("draining", True, 1))
            h = op.health()
            self.assertEqual((h.state, h.operator), ("draining", True))
            self.assertEqual(h.committed_memory_mb, 304)
            self.assertEqual(other.health().state, "draining")
            self.assertEqual(op.drain(undrain=True).state, "serving")
            m = op.run(run).teardown()
            self.assertEqual(m.identity, owner)
        code, msg, _ = self.owner_call("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual(code, "FAILED_PRECONDITION", msg)


class ListingBounded(unittest.TestCase):
    def test_every_run_listed_fits_an_answer_the_rest_counted(self):
        """Every run of the host with its labels can be more than an answer
        holds (max_message_bytes): the newest are counted, not sent, and
        the call still answers."""
        srv = Server(operators=["token:alice"], max_message_bytes=65536)
        try:
            with srv.conn() as c:
                made = []
                for i in range(4):
                    req = pb.CreateRunRequest(policy_json=policy_json())
                    for k in range(28):
                        req.labels["k%03d" % k + "x" * 250] = "v" * 256
                    code, msg, r = c.call("CreateRun", req, pb.CreateRunResponse)
                    self.assertEqual(code, "OK", msg)
                    made.append(r.run_id)
                code, msg, l = c.call("ListRuns", pb.ListRunsRequest(all=True),
                                      pb.ListRunsResponse, token=srv.tokens["alice"])
                self.assertEqual(code, "OK", msg)
                self.assertGreater(l.runs_not_listed, 0)
                self.assertEqual([r.run_id for r in l.runs] + made[len(l.runs):], made,
                                 "the oldest listed, the newest counted")
                self.assertLessEqual(l.ByteSize(), 65536)
        finally:
            srv.cleanup()


if __name__ == "__main__":
    unittest.main()
