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

WAITERS = 4  # RUNS_IDEM_WAITERS: repeats of a STARTING run's key that may wait


class FleetInProgress(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sbx-fleet-in-progress-")
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
