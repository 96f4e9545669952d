# SPDX-License-Identifier: Apache-2.0
"""A host that answers "an earlier attempt is still running here"
(Response.in_progress) keeps the create: the fleet clients ask it again
and never place the run on another host, where a second run would be
made while the first host still makes its own.

Two sbxd on loopback. Host A starts its helpers through a gate
(sbxdfix.HelperGate), so a CreateRun with idempotency key K waits there,
STARTING; four more creates with K wait for it (at most 4 may) and a
further one is answered UNAVAILABLE with in_progress at once. Host B
already holds one run of its two (runs_max 2), so placement scores A
first. Then a fleet client (sbxctl over both, the C library; then the
Python Fleet) creates with K: before the fix it took A's answer for an
unreachable host and made a second run on B; now it waits on A, and
once the gate opens it gets the run A made for K."""
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import sbxtest  # noqa: F401  (sys.path for the generated protos)

import sbxdfix

SOURCE = os.environ.get("SBX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.dirname(os.environ.get("SBX_PYTHON_PROTO", "").rstrip("/"))
sys.path[:0] = [os.path.join(SOURCE, "clients", "python"), os.path.join(BUILD, "clients", "python")]
import sbx_client  # noqa: E402
from sbxrpc import sandbox_pb2 as pb  # noqa: E402

WAITERS = 4  # RUNS_IDEM_WAITERS: repeats of a STARTING run's key that may wait


class FleetInProgress(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sbx-test-fleet-in-progress-")
        os.chmod(cls.dir, 0o755)
        sbxdfix.make_certs(cls.dir)  # one CA, a server certificate for localhost
        cls.token = "a" + os.urandom(16).hex()
        cls.ops = "o" + os.urandom(16).hex()
        tokens = [{"name": n, "sha256": hashlib.sha256(t.encode()).hexdigest()}
                  for n, t in (("alice", cls.token), ("ops", cls.ops))]
        p = lambda name: os.path.join(cls.dir, name)  # noqa: E731
        tls = {"cert": p("server.pem"), "key": p("server.key"), "client_ca": p("ca.pem")}
        cls.gate = sbxdfix.HelperGate(cls.dir)
        # workers 32: a caller's share of the 16 short-call workers is 8,
        # room for the first create, its 4 waiting repeats and 2 more (at
        # the default 16 the share, 4, is full before 4 repeats wait).
        cls.a = sbxdfix.Server(tls=tls, tokens=tokens, operators=["token:ops"],
                               helper=cls.gate.helper, workers=32)
        cls.b = sbxdfix.Server(tls=tls, tokens=tokens, operators=["token:ops"], runs_max=2,
                               runs_max_per_identity=2)
        cls.policy = sbxdfix.policy_json(memory_mb=64)
        cls.policy_file = p("policy.json")
        with open(cls.policy_file, "w") as f:
            f.write(cls.policy)
        # B holds one run of its two: placement scores A (1 of 32) first.
        r = subprocess.run(cls.cli_args(cls.url(cls.b)) + ["create", "--policy",
                                                           cls.policy_file],
                           capture_output=True, text=True, timeout=120, env=cls.env())
        if r.returncode != 0:
            raise RuntimeError("a run on B: " + r.stderr)

    @classmethod
    def tearDownClass(cls):
        cls.gate.reset()
        for s in (cls.a, cls.b):
            s.cleanup()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @staticmethod
    def url(s):
        return "tls+tcp://localhost:%d" % s.port

    @staticmethod
    def env():
        return {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}

    @classmethod
    def cli_args(cls, eps, token=None):
        p = lambda name: os.path.join(cls.dir, name)  # noqa: E731
        return [sbxdfix.CLI, "--endpoint", eps, "--tls-cert", p("client.pem"), "--tls-key",
                p("client.key"), "--tls-ca", p("ca.pem"), "--token", token or cls.token]

    def tls(self):
        p = lambda name: os.path.join(self.dir, name)  # noqa: E731
        return {"ca": p("ca.pem"), "cert": p("client.pem"), "key": p("client.key")}

    def runs(self, s):
        r = subprocess.run(self.cli_args(self.url(s), self.ops) + ["--json", "runs", "--all"],
                           capture_output=True, text=True, timeout=60, env=self.env())
        self.assertEqual(r.returncode, 0, r.stderr)
        return {x["run_id"] for x in json.loads(r.stdout or "{}").get("runs", [])}

    def hold(self, start_one):
        """Holds a create of K on A at the gate with WAITERS repeats waiting
        for it: start_one() starts one create of K on A alone and returns a
        handle whose .result is None until it ends. Returns (the first, every
        repeat) once a repeat was answered at once, which only happens when
        WAITERS are waiting (their 20 s wait is still far from over)."""
        kids = sbxdfix.children(self.a.proc.pid)
        self.gate.reset()
        self.gate.arm()
        first = start_one()
        deadline = time.monotonic() + 60
        while not sbxdfix.children(self.a.proc.pid) - kids:
            self.assertLess(time.monotonic(), deadline, "A started no helper for the create")
            self.assertIsNone(first.result, "the first create ended at the gate")
            time.sleep(0.01)
        repeats = [start_one() for _ in range(WAITERS + 2)]
        while not any(r.result is not None for r in repeats):
            self.assertLess(time.monotonic(), deadline, "no repeat was turned away")
            time.sleep(0.02)
        self.assertIsNone(first.result, "the first create ended at the gate")
        return first, repeats

    def check_outcome(self, first, repeats, run_id, host, b_before):
        self.assertEqual(host, "localhost:%d" % self.a.port,
                         "the fleet's create stayed on the host that was making the run")
        self.assertEqual(first.join(), ("ok", run_id), "the fleet got the run A made for K")
        self.assertEqual(self.runs(self.b), b_before, "no second run on B")
        waited = [r.join() for r in repeats]
        self.assertGreaterEqual(len([w for w in waited if w == ("ok", run_id)]), WAITERS,
                                waited)

    def test_sbxctl_waits_for_the_host_making_the_run(self):
        key = "c-" + os.urandom(8).hex()
        args = ["create", "--policy", self.policy_file, "--idempotency-key", key]
        b_before = self.runs(self.b)
        try:
            first, repeats = self.hold(lambda: Proc(self.cli_args(self.url(self.a)) + args,
                                                    self.env()))
            turned = [r.join() for r in repeats if r.result is not None]
            self.assertIn("still creating", turned[0][1])
            fleet = Proc(self.cli_args("%s,%s" % (self.url(self.a), self.url(self.b))) + args,
                         self.env())
            time.sleep(1.5)
            self.assertIsNone(fleet.result, "the fleet client still waits for A (it did "
                              "not place the run on B: %s)" % (fleet.result,))
            self.gate.open()
            status, out = fleet.join()
            self.assertEqual(status, "ok", out)
            run_id, _, host = out.strip().partition("@")
        finally:
            self.gate.open()
        self.check_outcome(first, repeats, run_id, host, b_before)
        self.gate.reset()

    def test_sbxctl_is_interrupted_while_it_waits(self):
        """SIGINT ends sbxctl's wait on a host that says in_progress at once
        (review of 2026-12-03: it waited out the whole bound, minutes)."""
        key = "i-" + os.urandom(8).hex()
        args = ["create", "--policy", self.policy_file, "--idempotency-key", key]
        b_before = self.runs(self.b)
        try:
            first, repeats = self.hold(lambda: Proc(self.cli_args(self.url(self.a)) + args,
                                                    self.env()))
            fleet = Proc(self.cli_args("%s,%s" % (self.url(self.a), self.url(self.b))) + args,
                         self.env())
            time.sleep(1.5)
            self.assertIsNone(fleet.result, "the fleet client waits for A")
            fleet.p.send_signal(signal.SIGINT)
            fleet.t.join(5)
            self.assertIsNotNone(fleet.result, "SIGINT ended the wait within 5 s")
            self.assertEqual(fleet.result[0], "failed", fleet.result)
            self.assertIn("interrupted", fleet.result[1])
            self.assertIn("idempotency_key " + key, fleet.result[1])
        finally:
            self.gate.open()
        self.assertEqual(first.join()[0], "ok", first.result)
        for r in repeats:
            r.join()
        self.assertEqual(self.runs(self.b), b_before, "no run on B")
        self.gate.reset()

    def test_python_fleet_waits_for_the_host_making_the_run(self):
        key = "p-" + os.urandom(8).hex()
        b_before = self.runs(self.b)
        a = sbx_client.Client(self.url(self.a), token=self.token, tls=self.tls())

        def one():
            return Call(lambda: a.create_run(self.policy, idempotency_key=key).id)
        try:
            first, repeats = self.hold(one)
            turned = [r.join() for r in repeats if r.result is not None]
            self.assertEqual(turned[0][0], "in_progress", turned[0])
            self.assertIn("still creating", turned[0][1])
            f = sbx_client.fleet([self.url(self.a), self.url(self.b)], token=self.token,
                                 tls=self.tls())
            fleet = Call(lambda: f.create_run(self.policy, idempotency_key=key))
            time.sleep(1.5)
            self.assertIsNone(fleet.result, "the Python Fleet still waits for A (it did "
                              "not place the run on B: %s)" % (fleet.result,))
            self.gate.open()
            status, run = fleet.join()
            self.assertEqual(status, "ok", run)
        finally:
            self.gate.open()
        self.check_outcome(first, repeats, run.id, run.host, b_before)
        f.close()
        a.close()
        self.gate.reset()

    def test_python_create_again_with_its_key_is_the_same_run(self):
        """Client.create_run with inputs and a key, sent again, gets the
        first run, its inputs found whole (not refused "already complete"
        and the first run torn down)."""
        self.gate.reset()
        key = "again-" + os.urandom(8).hex()
        with sbx_client.Client(self.url(self.a), token=self.token, tls=self.tls()) as a:
            inputs = {"/data/x.txt": b"hello\n" * 1000}
            first = a.create_run(self.policy, inputs=inputs, idempotency_key=key)
            again = a.create_run(self.policy, inputs=inputs, idempotency_key=key)
            self.assertEqual(again.id, first.id)
            self.assertEqual(again.exec(["cat", "/data/x.txt"]).stdout, b"hello\n" * 1000)
            first.teardown()

    def test_python_keyed_create_keeps_a_run_whose_upload_failed(self):
        """With a key a run whose upload failed is kept for a retry with
        the key (it may be an earlier call's); without one it is torn down.
        The input is /proc/sys/kernel/random/uuid, 37 bytes that differ at
        every read: hashed once and sent as other bytes, it is refused."""
        self.gate.reset()
        uuid = "/proc/sys/kernel/random/uuid"
        key = "kept-" + os.urandom(8).hex()
        with sbx_client.Client(self.url(self.a), token=self.token, tls=self.tls()) as a:
            before = {r.run_id for r in a.list_runs()}
            for k in (key, None):
                with self.assertRaises(sbx_client.SbxError) as cm:
                    a.create_run(self.policy, inputs={"/data/f": uuid}, idempotency_key=k)
                self.assertIn("sha256", str(cm.exception))
            kept = {r.run_id for r in a.list_runs()} - before
            self.assertEqual(len(kept), 1, "the keyed run kept, the other torn down")
            a.run(kept.pop()).teardown()


    def test_python_fleet_keyed_create_keeps_a_run_whose_upload_failed(self):
        """The Fleet, alike: with the caller's key a run whose upload failed
        is kept on its host, which the error names (the retry with the key
        must go there); with the Fleet's own key it is torn down."""
        self.gate.reset()
        uuid = "/proc/sys/kernel/random/uuid"
        key = "fkept-" + os.urandom(8).hex()
        before_a, before_b = self.runs(self.a), self.runs(self.b)
        f = sbx_client.fleet([self.url(self.a), self.url(self.b)], token=self.token,
                             tls=self.tls())
        try:
            errs = []
            for k in (key, None):
                with self.assertRaises(sbx_client.SbxError) as cm:
                    f.create_run(self.policy, inputs={"/data/f": uuid}, idempotency_key=k)
                self.assertIn("sha256", str(cm.exception))
                errs.append(str(cm.exception))
        finally:
            f.close()
        kept_a, kept_b = self.runs(self.a) - before_a, self.runs(self.b) - before_b
        self.assertEqual(len(kept_a) + len(kept_b), 1, "the keyed run kept, the other torn "
                         "down: %s %s" % (kept_a, kept_b))
        host = self.a if kept_a else self.b
        kept = (kept_a or kept_b).pop()
        self.assertIn("CreateRun on %s:" % self.url(host).split("://", 1)[1], errs[0])
        self.assertIn("run %s is kept" % kept, errs[0])
        self.assertNotIn("is kept", errs[1])
        with sbx_client.Client(self.url(host), token=self.token, tls=self.tls()) as c:
            c.run(kept).teardown()


class ScriptedHost:
    """An sbx host that answers CreateRun from a script: what a hostile or
    broken host could say (in_progress for ever) is what the fleet clients
    must bound. It speaks nng's REP over plain tcp (the SP header, 8-byte
    lengths, the REQ backtrace) and answers Health SERVING with room to
    spare, so placement prefers it. script: one action per CreateRun
    received, the last one repeated: "silent" (no answer), "exhausted"
    (RESOURCE_EXHAUSTED), "in_progress" (UNAVAILABLE with in_progress),
    "ok" (a run)."""

    def __init__(self, script):
        self.script, self.creates, self.run_id = list(script), [], "run-" + os.urandom(16).hex()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    @staticmethod
    def recv(conn, n):
        b = b""
        while len(b) < n:
            chunk = conn.recv(n - len(b))
            if not chunk:
                raise EOFError
            b += chunk
        return b

    def serve(self, conn):
        try:
            self.recv(conn, 8)
            conn.sendall(b"\x00SP\x00\x00\x31\x00\x00")  # REP, version 0
            while True:
                msg = self.recv(conn, struct.unpack(">Q", self.recv(conn, 8))[0])
                i = 4
                while not msg[i - 4] & 0x80:  # the backtrace ends at a word with bit 31
                    i += 4
                req, resp = pb.Request.FromString(msg[i:]), pb.Response()
                if req.method.endswith("/Health"):
                    resp.body = pb.HealthResponse(
                        version="scripted", runs_max=64, runs_max_per_identity=64,
                        state=pb.SERVING, run_slots_free=64,
                        identity_run_slots_free=64).SerializeToString()
                elif req.method.endswith("/CreateRun"):
                    self.creates.append(req.request_id)
                    action = self.script[min(len(self.creates), len(self.script)) - 1]
                    if action == "silent":
                        continue
                    if action == "exhausted":
                        resp.code, resp.message = pb.RESOURCE_EXHAUSTED, "server busy (scripted)"
                    elif action == "in_progress":
                        resp.code, resp.in_progress = pb.UNAVAILABLE, True
                        resp.message = "still running here (scripted)"
                    else:
                        resp.body = pb.CreateRunResponse(run_id=self.run_id).SerializeToString()
                else:
                    resp.code = pb.UNIMPLEMENTED
                body = msg[:i] + resp.SerializeToString()
                conn.sendall(struct.pack(">Q", len(body)) + body)
        except (OSError, EOFError):
            conn.close()

    def close(self):
        self.sock.close()


class FleetInProgressForEver(unittest.TestCase):
    """A host that says in_progress for ever holds a create for four call
    timeouts, no more, and never sends it to another host: the error names
    the host and the key (review of 2026-12-03: the wait was bounded only
    by reading the code)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sbx-test-fleet-for-ever-")
        os.chmod(cls.dir, 0o755)
        sbxdfix.make_certs(cls.dir)
        cls.token = "a" + os.urandom(16).hex()
        p = lambda name: os.path.join(cls.dir, name)  # noqa: E731
        # B holds one run of its two: placement scores the scripted host first.
        cls.b = sbxdfix.Server(tls={"cert": p("server.pem"), "key": p("server.key"),
                                    "client_ca": p("ca.pem")},
                               tokens=[{"name": "alice", "sha256": hashlib.sha256(
                                   cls.token.encode()).hexdigest()}],
                               runs_max=2, runs_max_per_identity=2)
        cls.policy = sbxdfix.policy_json(memory_mb=64)
        with sbx_client.Client("tls+tcp://localhost:%d" % cls.b.port, token=cls.token,
                               tls=cls.tls()) as b:
            cls.b_run = b.create_run(cls.policy).id

    @classmethod
    def tearDownClass(cls):
        cls.b.cleanup()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def tls(cls):
        p = lambda name: os.path.join(cls.dir, name)  # noqa: E731
        return {"ca": p("ca.pem"), "cert": p("client.pem"), "key": p("client.key")}

    def b_runs(self):
        with sbx_client.Client("tls+tcp://localhost:%d" % self.b.port, token=self.token,
                               tls=self.tls()) as b:
            return {r.run_id for r in b.list_runs()}

    def test_sbxctl_gives_up_after_four_call_timeouts(self):
        host = ScriptedHost(["in_progress"])
        p = lambda name: os.path.join(self.dir, name)  # noqa: E731
        policy = p("policy.json")
        with open(policy, "w") as f:
            f.write(self.policy)
        t0 = time.monotonic()
        try:
            r = subprocess.run(
                [sbxdfix.CLI, "--endpoint", "tcp://127.0.0.1:%d,tls+tcp://localhost:%d"
                 % (host.port, self.b.port), "--tls-cert", p("client.pem"), "--tls-key",
                 p("client.key"), "--tls-ca", p("ca.pem"), "--token", self.token,
                 "--call-timeout", "1", "create", "--policy", policy, "--idempotency-key",
                 "for-ever"],
                capture_output=True, text=True, timeout=120,
                env={k: v for k, v in os.environ.items() if not k.startswith("SBX_")})
        finally:
            host.close()
        elapsed = time.monotonic() - t0
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("CreateRun on 127.0.0.1:%d, still in progress there with "
                      "idempotency_key for-ever" % host.port, r.stderr)
        # Asked again and again within the bound (50 ms doubling to 1 s
        # over 4 s, each call with the client's own two quick retries).
        self.assertGreaterEqual(len(host.creates), 6, host.creates)
        self.assertEqual(len(set(host.creates)), 1, "one request id for every try")
        self.assertLess(elapsed, 30, "bounded by four call timeouts, and a little more")
        self.assertEqual(self.b_runs(), {self.b_run}, "no run on B")

    def test_python_fleet_gives_up_after_four_call_timeouts(self):
        host = ScriptedHost(["in_progress"])
        t0 = time.monotonic()
        try:
            with sbx_client.fleet(["tcp://127.0.0.1:%d" % host.port,
                                   "tls+tcp://localhost:%d" % self.b.port],
                                  token=self.token, tls=self.tls(), timeout=1) as f:
                with self.assertRaises(sbx_client.Unavailable) as cm:
                    f.create_run(self.policy, idempotency_key="for-ever")
        finally:
            host.close()
        self.assertTrue(cm.exception.in_progress)
        self.assertIn("CreateRun on 127.0.0.1:%d, still in progress there with "
                      "idempotency_key for-ever" % host.port, str(cm.exception))
        self.assertGreaterEqual(len(host.creates), 6, host.creates)
        self.assertEqual(len(set(host.creates)), 1, "one request id for every try")
        self.assertLess(time.monotonic() - t0, 30)
        self.assertEqual(self.b_runs(), {self.b_run}, "no run on B")


class Proc:
    """An sbxctl create in the background: .result is None until it ends,
    then ("ok", its stdout) or ("failed", its stderr); its run id alone for
    the ok of a single-host create."""

    def __init__(self, argv, env):
        self.result = None
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env)
        self.t = threading.Thread(target=self.wait, daemon=True)
        self.t.start()

    def wait(self):
        out, err = self.p.communicate(timeout=180)
        self.result = ("ok", out.strip()) if self.p.returncode == 0 else ("failed", err)

    def join(self):
        self.t.join(180)
        return self.result


class Call:
    """A Python client call in a thread, as Proc: ("ok", its value),
    ("in_progress", message) for an Unavailable with in_progress, or
    ("failed", message)."""

    def __init__(self, fn):
        self.result = None
        self.t = threading.Thread(target=self.run, args=(fn,), daemon=True)
        self.t.start()

    def run(self, fn):
        try:
            self.result = ("ok", fn())
        except sbx_client.SbxError as e:
            self.result = ("in_progress" if e.in_progress else "failed", str(e))

    def join(self):
        self.t.join(180)
        return self.result


if __name__ == "__main__":
    unittest.main()
