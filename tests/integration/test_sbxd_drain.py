# SPDX-License-Identifier: Apache-2.0
"""SIGTERM drains: CreateRun is refused (UNAVAILABLE) while every other call
goes on, a run in flight finishes and its artifact is still fetched, the
sweeper keeps working, drain_seconds tears the rest down with manifests in
the audit log and tells their owner (and nobody else) why, and a second
SIGTERM ends it at once."""
import signal
import time
import unittest

import sbxrpc
from sbxdfix import Server, policy_json, processes_with
from sbxrpc import sandbox_pb2 as pb


def ok(conn, name, req, resp_type, token=None):
    code, msg, resp = conn.call(name, req, resp_type, token=token)
    assert code == "OK", "%s: %s %s" % (name, code, msg)
    return resp


def wait_for_line(srv, text, seconds=30):
    """The hang bound only: the line comes within milliseconds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in srv.log_tail():
            return
        time.sleep(0.02)
    raise AssertionError("no %r in sbxd's log: %s" % (text, srv.log_tail()))


class Drain(unittest.TestCase):
    def server(self, **config):
        srv = Server(**config)
        self.addCleanup(srv.cleanup)
        return srv

    def exited(self, srv, seconds=60):
        srv.proc.wait(seconds)
        return srv.proc.returncode

    def test_a_run_in_flight_finishes_and_its_artifact_is_fetched(self):
        srv = self.server(drain_seconds=120)
        with srv.conn() as c:
            run = ok(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                     pb.CreateRunResponse).run_id
            # It ends only after it is told to: a file the test writes.
            ex = ok(c, "Exec", pb.ExecRequest(run_id=run, argv=[
                "sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.05; done; echo done > "
                "/out/result"]), pb.ExecResponse).exec_id
            srv.proc.send_signal(signal.SIGTERM)
            wait_for_line(srv, "SIGTERM: draining")
            # Still answering; CreateRun refused, naming the drain.
            h = ok(c, "Health", pb.HealthRequest(), pb.HealthResponse)
            self.assertEqual(h.runs_active, 1)
            code, msg, _ = c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                  pb.CreateRunResponse)
            self.assertEqual((code, "draining" in msg), ("UNAVAILABLE", True), msg)
            # The run goes on: a second exec, then the first one finishes.
            ex2 = ok(c, "Exec", pb.ExecRequest(run_id=run, argv=["touch", "/tmp/go"]),
                     pb.ExecResponse).exec_id
            st = ok(c, "Wait", pb.WaitRequest(run_id=run, exec_id=ex2), pb.WaitResponse).status
            self.assertEqual(pb.ExitReason.Name(st.reason), "EXITED")
            st = ok(c, "Wait", pb.WaitRequest(run_id=run, exec_id=ex), pb.WaitResponse).status
            self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code), ("EXITED", 0), st)
            ls = ok(c, "ListArtifacts", pb.ListArtifactsRequest(run_id=run),
                    pb.ListArtifactsResponse)
            self.assertEqual([a.path for a in ls.artifacts], ["result"])
            f = ok(c, "FetchArtifact", pb.FetchArtifactRequest(run_id=run, path="result"),
                   pb.FetchArtifactResponse)
            self.assertEqual((f.data, f.eof), (b"done\n", True))
            self.assertIsNone(srv.proc.poll(), "sbxd left while a run was there")
            t = ok(c, "Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
            self.assertEqual(len(t.manifest.artifacts), 1)
        # The last run gone, sbxd ends the drain itself.
        self.assertEqual(self.exited(srv), 0, srv.log_tail())
        log = srv.log_tail()
        for line in ("draining: CreateRun is refused; 1 runs left", "no runs left",
                     "stopped (drain complete)"):
            self.assertIn(line, log)
        ev = srv.audit_events()
        names = [e["event"] for e in ev]
        self.assertLess(names.index("sbxd_draining"), names.index("teardown"))
        self.assertEqual([e.get("drain") for e in ev if e["event"] == "sbxd_stopped"],
                         ["complete"])
        self.assertNotIn("sbxd_drain_timeout", names)

    def test_the_sweeper_keeps_working_during_a_drain(self):
        srv = self.server(drain_seconds=600, expired_keep_seconds=0)
        with srv.conn() as c:
            run = ok(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json(run_seconds=2, script_seconds=2)),
                     pb.CreateRunResponse).run_id
            srv.proc.send_signal(signal.SIGTERM)
            wait_for_line(srv, "SIGTERM: draining")
        # Its run_seconds end it, the sweeper removes it, and the drain is
        # over long before drain_seconds (60 s is the hang bound).
        self.assertEqual(self.exited(srv), 0, srv.log_tail())
        ev = srv.audit_events()
        self.assertIn(("teardown", run, "expired_keep"),
                      [(e["event"], e.get("run_id"), e.get("reason")) for e in ev])
        self.assertIn("stopped (drain complete)", srv.log_tail())

    def test_the_timeout_tears_down_and_tells_the_owner_only(self):
        srv = self.server(drain_seconds=2)
        alice = srv.tokens["alice"]
        owner, other = srv.conn(tls=True, timeout_ms=5000), srv.conn(tls=True, timeout_ms=5000)
        self.addCleanup(owner.close)
        self.addCleanup(other.close)
        run = ok(owner, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                 pb.CreateRunResponse, token=alice).run_id
        ex = ok(owner, "Exec", pb.ExecRequest(run_id=run, argv=["sleep", "997.5"]),
                pb.ExecResponse, token=alice).exec_id
        srv.proc.send_signal(signal.SIGTERM)
        wait_for_line(srv, "SIGTERM: draining")
        # A Wait in progress returns when the drain tears the run down.
        st = ok(owner, "Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=60000),
                pb.WaitResponse, token=alice).status
        self.assertEqual(pb.ExitReason.Name(st.reason), "TORN_DOWN")
        self.assertIn("drain", st.message)
        # Then, for as long as sbxd answers: the owner hears of the drain,
        # the other identity of nothing.
        seen_owner, seen_other = set(), set()
        deadline = time.monotonic() + 30
        while srv.proc.poll() is None and time.monotonic() < deadline:
            try:
                code, msg, _ = owner.call("Status", pb.StatusRequest(run_id=run),
                                          pb.StatusResponse, token=alice)
                seen_owner.add((code, "drain" in msg))
                code, msg, _ = other.call("Status", pb.StatusRequest(run_id=run),
                                          pb.StatusResponse, token=srv.tokens["bob"])
                seen_other.add((code, "drain" in msg))
            except sbxrpc.NngError:
                break
        # (UNAVAILABLE: the socket closing, "sbxd is stopping".)
        self.assertIn(("FAILED_PRECONDITION", True), seen_owner)
        self.assertEqual({s[0] for s in seen_owner} - {"FAILED_PRECONDITION", "UNAVAILABLE"},
                         set(), seen_owner)
        self.assertIn(("NOT_FOUND", False), seen_other)
        self.assertEqual(seen_other - {("NOT_FOUND", False), ("UNAVAILABLE", False)}, set(),
                         seen_other)
        self.assertEqual(self.exited(srv), 0, srv.log_tail())
        self.assertEqual(processes_with("sleep 997.5"), [])
        ev = srv.audit_events()
        torn = [e for e in ev if e["event"] == "teardown" and e.get("run_id") == run]
        self.assertEqual(len(torn), 1)
        self.assertEqual(torn[0]["reason"], "drain")
        self.assertIn("manifest", torn[0])
        self.assertEqual(torn[0]["manifest"]["execs"], 1)
        timeout = [e for e in ev if e["event"] == "sbxd_drain_timeout"]
        self.assertEqual([(e["runs"], e["drain_seconds"]) for e in timeout], [(1, 2)])
        self.assertEqual([e.get("drain") for e in ev if e["event"] == "sbxd_stopped"],
                         ["timeout"])
        self.assertIn("drain_seconds (2 s) passed", srv.log_tail())

    def test_a_second_sigterm_stops_at_once(self):
        srv = self.server(drain_seconds=3600)
        with srv.conn() as c:
            run = ok(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                     pb.CreateRunResponse).run_id
            ok(c, "Exec", pb.ExecRequest(run_id=run, argv=["sleep", "997.25"]), pb.ExecResponse)
        srv.proc.send_signal(signal.SIGTERM)
        wait_for_line(srv, "SIGTERM: draining")
        srv.proc.send_signal(signal.SIGTERM)
        # An hour of drain_seconds: only the second signal ends it.
        self.assertEqual(self.exited(srv), 0, srv.log_tail())
        self.assertEqual(processes_with("sleep 997.25"), [])
        ev = srv.audit_events()
        self.assertEqual([(e["signal"], e["runs"]) for e in ev if e["event"] == "sbxd_drain_cut"],
                         [("TERM", 1)])
        self.assertEqual([e.get("drain") for e in ev if e["event"] == "sbxd_stopped"],
                         ["signal"])


if __name__ == "__main__":
    unittest.main()
