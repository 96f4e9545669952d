# SPDX-License-Identifier: Apache-2.0
"""Attacks on issue 18's operator view, reload and drain through the real
sbxd, each asserting the property held for the right reason:

- the operator bit is the identity of each call, never of its connection:
  an operator uid's ipc connection that presents bob's token is bob (no
  operator call, no capacity), and is the operator again on its next call
  without one; a reload that drops the uid from `operators` takes effect on
  the very next call of a connection opened before it;
- an operator's Status of another identity's run never renews that run's
  lease: polled by an operator only, the run still ends by its lease;
- a flood of SIGHUPs (each one a real change) while callers call: every
  call answered OK, nothing blocks, sbxd lives and reloads;
- a token removed by a reload while a call made with it is in flight: that
  call finishes (it was judged by the table it arrived under), the next one
  with the token is UNAUTHENTICATED;
- a drain whose caller keeps calling on its run: drain_seconds still ends
  it (the calls renew the run's lease, not the drain); an operator's
  undrain during SIGTERM's drain lifts nothing (CreateRun stays
  UNAVAILABLE);
- a reload that moves the audit log into a directory others can rename in
  (mode 0777, no sticky bit), or to a name that is a symlink to a file
  elsewhere, is refused naming why and the log stays where it was; sbxd
  does not start with such a log either;
- a reload that replaces tls.client_ca (the documented way to shut out a
  revoked client certificate) ends the connections made under the old
  one, the one nng 1.5.2 had armed with it included: a client of the old
  CA never gets another call answered, one of the new CA does."""

import hashlib
import os
import signal
import threading
import time
import unittest

import sbxrpc
from sbxdfix import Server, policy_json
from sbxrpc import sandbox_pb2 as pb


def ok(conn, name, req, resp_type, token=None):
    code, msg, resp = conn.call(name, req, resp_type, token=token)
    assert code == "OK", "%s: %s %s" % (name, code, msg)
    return resp


class Base(unittest.TestCase):
    CONFIG = {}

    def setUp(self):
        self.srv = Server(**self.CONFIG)

    def tearDown(self):
        rc = self.srv.stop()
        log = self.srv.log_tail()
        self.srv.cleanup()
        self.assertEqual(rc, 0, log)

    def edit(self, **keys):
        self.srv.edit_config(**keys)

    def reloads(self):
        """How many reloads sbxd has logged (its whole stderr)."""
        with open(self.srv.path("sbxd.stderr"), "rb") as f:
            return f.read().count(b"SIGHUP: reloaded")

    def sighup(self):
        before = self.reloads()
        self.srv.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30  # a hang bound; it takes milliseconds
        while time.monotonic() < deadline:
            if self.reloads() > before:
                return
            self.assertIsNone(self.srv.proc.poll(), self.srv.log_tail())
            time.sleep(0.02)
        raise AssertionError("no reload: " + self.srv.log_tail())


class OperatorBit(Base):
    CONFIG = {"operators": ["uid:%d" % os.getuid()]}

    def test_the_operator_bit_is_each_calls_identity(self):
        srv = self.srv
        bob = srv.tokens["bob"]
        with srv.conn() as c, srv.conn(tls=True) as t:
            bobs = ok(t, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                      pb.CreateRunResponse, token=bob).run_id
            mine = ok(c, "ListRuns", pb.ListRunsRequest(all=True), pb.ListRunsResponse)
            self.assertEqual([r.run_id for r in mine.runs], [bobs])
            # The same ipc connection, bob's token: bob, whose bit is off.
            for name, req, resp in (("ListRuns", pb.ListRunsRequest(all=True),
                                     pb.ListRunsResponse),
                                    ("Drain", pb.DrainRequest(), pb.DrainResponse)):
                code, msg, _ = c.call(name, req, resp, token=bob)
                self.assertEqual(code, "PERMISSION_DENIED", msg)
                self.assertIn("token:bob is not an operator", msg)
            # (Every caller gets the host-wide capacity numbers, for
            # placement; the configuration behind them is operators' only.)
            h = ok(c, "Health", pb.HealthRequest(), pb.HealthResponse, token=bob)
            self.assertEqual((h.identity, h.operator, h.capacity_source, h.memory_reserve_mb,
                              h.cpu_overcommit_percent), ("token:bob", False, "", 0, 0))
            # Its next call without a token is the operator uid again.
            h = ok(c, "Health", pb.HealthRequest(), pb.HealthResponse)
            self.assertTrue(h.operator)
            self.assertNotEqual(h.capacity_source, "")
            self.assertGreater(h.cpu_overcommit_percent, 0)
            # A reload that drops it from operators: the next call on the
            # connection opened before is refused.
            self.edit(operators=[])
            self.sighup()
            code, msg, _ = c.call("ListRuns", pb.ListRunsRequest(all=True),
                                  pb.ListRunsResponse)
            self.assertEqual(code, "PERMISSION_DENIED", msg)
            code, msg, _ = c.call("Status", pb.StatusRequest(run_id=bobs), pb.StatusResponse)
            self.assertEqual((code, msg), ("NOT_FOUND", "run %s not found" % bobs))
            h = ok(c, "Health", pb.HealthRequest(), pb.HealthResponse)
            self.assertEqual((h.operator, h.capacity_source, h.cpu_overcommit_percent),
                             (False, "", 0))
        self.assertEqual([e for e in srv.audit_events() if e["event"] == "operator_drain"], [])

    def test_an_operators_status_never_renews_the_owners_lease(self):
        srv = self.srv
        bob = srv.tokens["bob"]
        with srv.conn() as op, srv.conn(tls=True) as t:
            run = ok(t, "CreateRun", pb.CreateRunRequest(
                policy_json=policy_json(idle_seconds=2)), pb.CreateRunResponse,
                token=bob).run_id
            # Only the operator calls on it from here on, many times a second.
            ended = None
            deadline = time.monotonic() + 60  # a hang bound: the lease is 2 s
            while time.monotonic() < deadline:
                s = ok(op, "Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
                if s.state not in (pb.CREATED, pb.ACTIVE):
                    ended = s
                    break
                time.sleep(0.1)
            self.assertIsNotNone(ended, "an operator's polls kept the run alive")
            idle = [e for e in srv.audit_events()
                    if e["event"] == "run_idle" and e.get("run_id") == run]
            self.assertEqual(len(idle), 1, "the run ended by its lease")
            # Each read was audited naming operator and owner (rate-limited
            # lines are counted, never silently lost: audit_lines_dropped).
            reads = [e for e in srv.audit_events() if e["event"] == "operator_status"]
            self.assertTrue(reads)
            self.assertEqual({(e["operator"], e["owner"]) for e in reads},
                             {("uid:%d" % os.getuid(), "token:bob")})


class ReloadStorm(Base):
    def test_a_sighup_flood_while_callers_call(self):
        srv = self.srv
        stop = threading.Event()
        failures, counts = [], {"calls": 0}
        lock = threading.Lock()

        def caller(tls, token):
            try:
                with srv.conn(tls=tls) as c:
                    while not stop.is_set():
                        run = ok(c, "CreateRun",
                                 pb.CreateRunRequest(policy_json=policy_json()),
                                 pb.CreateRunResponse, token=token).run_id
                        ok(c, "Health", pb.HealthRequest(), pb.HealthResponse, token=token)
                        ok(c, "Teardown", pb.TeardownRequest(run_id=run),
                           pb.TeardownResponse, token=token)
                        with lock:
                            counts["calls"] += 3
            except (AssertionError, sbxrpc.NngError) as e:
                with lock:
                    failures.append(repr(e))

        threads = [threading.Thread(target=caller, args=a)
                   for a in ((False, None), (True, srv.tokens["alice"]),
                             (True, srv.tokens["bob"]))]
        for th in threads:
            th.start()
        try:
            for i in range(200):
                # A real change each time: the next CreateRun decides by one
                # side of it or the other.
                self.edit(runs_max_per_identity=8 - i % 2)
                srv.proc.send_signal(signal.SIGHUP)
                time.sleep(0.005)
            self.sighup()  # the last one is done
        finally:
            stop.set()
            for th in threads:
                th.join(120)
        self.assertEqual(failures, [])
        self.assertFalse(any(th.is_alive() for th in threads), "a caller hangs")
        self.assertGreater(counts["calls"], 0)
        self.assertIsNone(srv.proc.poll(), srv.log_tail())
        with srv.conn() as c:
            self.assertEqual(
                len(ok(c, "ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse).runs), 0)
        self.assertTrue([e for e in srv.audit_events() if e["event"] == "config_reloaded"])

    def test_a_token_removed_while_its_call_is_in_flight(self):
        srv = self.srv
        bob = srv.tokens["bob"]
        with srv.conn(tls=True) as c, srv.conn(tls=True) as w:
            run = ok(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                     pb.CreateRunResponse, token=bob).run_id
            ex = ok(c, "Exec", pb.ExecRequest(run_id=run, argv=["sleep", "3"]),
                    pb.ExecResponse, token=bob).exec_id
            got = {}

            def wait():
                got["r"] = w.call("Wait", pb.WaitRequest(run_id=run, exec_id=ex,
                                                         timeout_ms=60000),
                                  pb.WaitResponse, token=bob)

            th = threading.Thread(target=wait)
            th.start()
            time.sleep(0.5)  # the Wait is in sbxd (a hang would be caught below)
            self.edit(tokens=[{"name": "alice", "sha256": hashlib.sha256(
                srv.tokens["alice"].encode()).hexdigest()}])
            self.sighup()
            th.join(60)
            self.assertFalse(th.is_alive())
            code, msg, r = got["r"]
            self.assertEqual(code, "OK", msg)
            self.assertEqual(pb.ExitReason.Name(r.status.reason), "EXITED")
            code, msg, _ = c.call("Status", pb.StatusRequest(run_id=run), pb.StatusResponse,
                                  token=bob)
            self.assertEqual((code, msg), ("UNAUTHENTICATED",
                                           "invalid token in Request.credentials"))


class DrainCaller(Base):
    CONFIG = {"drain_seconds": 2}

    def test_a_caller_calling_on_its_run_does_not_hold_the_drain(self):
        srv = self.srv
        alice = srv.tokens["alice"]
        with srv.conn(tls=True, timeout_ms=5000) as c:
            run = ok(c, "CreateRun", pb.CreateRunRequest(
                policy_json=policy_json(idle_seconds=1)), pb.CreateRunResponse,
                token=alice).run_id
            srv.proc.send_signal(signal.SIGTERM)
            seen = set()
            deadline = time.monotonic() + 60  # a hang bound: drain_seconds is 2
            while srv.proc.poll() is None and time.monotonic() < deadline:
                try:
                    code, msg, _ = c.call("Status", pb.StatusRequest(run_id=run),
                                          pb.StatusResponse, token=alice)
                except sbxrpc.NngError:
                    break
                seen.add((code, "drain" in msg))
                if code == "UNAVAILABLE":
                    break
        try:
            srv.proc.wait(60)
        except Exception:
            pass
        self.assertEqual(srv.proc.returncode, 0, srv.log_tail())
        self.assertIn(("OK", False), seen, "the run went on during the drain")
        self.assertIn(("FAILED_PRECONDITION", True), seen, seen)
        torn = [e for e in srv.audit_events()
                if e["event"] == "teardown" and e.get("run_id") == run]
        self.assertEqual([e["reason"] for e in torn], ["drain"])


class UndrainDuringShutdown(Base):
    CONFIG = {"drain_seconds": 120, "operators": ["token:alice"]}

    def test_an_operators_undrain_never_lifts_sigterms_drain(self):
        srv = self.srv
        alice = srv.tokens["alice"]
        with srv.conn() as c, srv.conn(tls=True) as op:
            run = ok(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                     pb.CreateRunResponse).run_id
            srv.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 30
            while "SIGTERM: draining" not in srv.log_tail():
                self.assertLess(time.monotonic(), deadline, srv.log_tail())
                time.sleep(0.02)
            d = ok(op, "Drain", pb.DrainRequest(undrain=True), pb.DrainResponse, token=alice)
            self.assertEqual((d.state, d.operator_drain, d.shutdown_drain),
                             (pb.DRAINING, False, True))
            for caller, token in ((c, None), (op, alice)):
                code, msg, _ = caller.call("CreateRun", pb.CreateRunRequest(
                    policy_json=policy_json()), pb.CreateRunResponse, token=token)
                self.assertEqual((code, msg), ("UNAVAILABLE",
                                               "sbxd is draining: it takes no new runs"))
            ok(c, "Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
        srv.proc.wait(60)
        self.assertEqual(srv.proc.returncode, 0, srv.log_tail())
        self.assertIn("draining: no runs left", srv.log_tail())


class AuditLogPlace(Base):
    def test_a_log_moved_where_another_user_could_replace_it(self):
        srv = self.srv
        open_dir = srv.path("anyone")
        os.mkdir(open_dir)
        os.chmod(open_dir, 0o777)  # no sticky bit: anyone may rename in it
        victim = srv.path("victim")
        with open(victim, "w") as f:
            f.write("not a log\n")
        os.chmod(victim, 0o600)
        link = srv.path("link.log")
        os.symlink(victim, link)
        for path, says in ((os.path.join(open_dir, "audit.log"), "lets another user"),
                           (link, "symbolic links")):
            self.edit(log=path)
            before = self.reloads()
            srv.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            while self.reloads() == before:
                self.assertLess(time.monotonic(), deadline, srv.log_tail())
                time.sleep(0.02)
            self.assertIn("reopening the audit log: audit log %s" % path, srv.log_tail())
            self.assertIn(says, srv.log_tail())
            self.assertFalse(os.path.exists(os.path.join(open_dir, "audit.log")))
            with open(victim) as f:
                self.assertEqual(f.read(), "not a log\n")
        # The log stayed where it was: the reloads are in it.
        self.assertEqual(len([e for e in srv.audit_events()
                              if e["event"] == "config_reloaded"]), 2)
        rc = srv.stop()
        self.assertEqual(rc, 0)
        with self.assertRaises(RuntimeError) as e:
            srv.restart_with(log=os.path.join(open_dir, "audit.log"))
        self.assertIn("lets another user", str(e.exception))
        self.edit(log=srv.audit)
        srv.start()  # for tearDown's clean stop


class ClientCaRotation(Base):
    def test_a_rotated_client_ca_ends_the_old_cas_connections(self):
        srv = self.srv
        bob = srv.tokens["bob"]
        old = srv.conn(tls=True, timeout_ms=3000)
        self.addCleanup(old.close)
        ok(old, "Health", pb.HealthRequest(), pb.HealthResponse, token=bob)
        self.edit(tls={"cert": srv.path("server.pem"), "key": srv.path("server.key"),
                       "client_ca": srv.path("rogue-ca.pem")})
        self.sighup()
        self.assertIn("tls (client_ca: its connections closed)", srv.log_tail())
        # The old CA's client: its connection ends, and its redials (the
        # first of which may meet the accept nng armed before the reload)
        # never get an answer again.
        answered = []
        for _ in range(5):
            try:
                code, msg, _ = old.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                        token=bob)
                answered.append((code, msg))
            except sbxrpc.NngError:
                pass
        for _ in range(3):
            try:
                with srv.conn(tls=True, timeout_ms=3000) as fresh:
                    code, msg, _ = fresh.call("Health", pb.HealthRequest(),
                                              pb.HealthResponse, token=bob)
                    answered.append((code, msg))
            except sbxrpc.NngError:
                pass
        self.assertEqual(answered, [], "a client of the replaced CA was answered")
        with srv.conn(tls=True, cert="rogue") as new:
            ok(new, "Health", pb.HealthRequest(), pb.HealthResponse, token=bob)


if __name__ == "__main__":
    unittest.main()
