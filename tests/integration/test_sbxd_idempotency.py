# SPDX-License-Identifier: Apache-2.0
"""Idempotent creates through the real sbxd: a CreateRun repeated with its
idempotency_key makes one run and gets the first answer (also when the
repeats arrive together, while the first is still starting, when the
identity is at its cap, and for the run's whole life); the same key with
another request is refused naming the key; the same key from another
identity is that identity's own create and reveals nothing of the first;
after the run is torn down a repeat is told so and makes no second run."""
import os
import threading
import time
import unittest

from sbxdfix import ServerTestCase, policy_json
import sbxrpc
from sbxrpc import sandbox_pb2 as pb


class Idempotency(ServerTestCase):
    SERVER_CONFIG = {"runs_max_per_identity": 3, "operators": ["token:alice"]}

    def setUp(self):
        self.conns = []
        self.shared = None

    def tearDown(self):
        for token in (None, "alice", "bob"):
            for run in self.runs(token):
                self.call("Teardown", pb.TeardownRequest(run_id=run.run_id),
                          pb.TeardownResponse, token=token)
        for c in self.conns:
            c.close()

    def conn(self):
        c = self.srv.conn()
        self.conns.append(c)
        return c

    def call(self, name, req, resp_type, token=None, conn=None):
        # One connection for the calls that name none: a new one each
        # ran into sbxd's new_per_peer_per_second (50) on a fast machine,
        # and nng 1.5.2's dialer never dials again once refused.
        if conn is None:
            self.shared = self.shared or self.conn()
            conn = self.shared
        tok = self.srv.tokens[token] if token else None
        return conn.call(name, req, resp_type, token=tok)

    def create(self, key, token=None, conn=None, **limits):
        req = pb.CreateRunRequest(policy_json=policy_json(**limits), idempotency_key=key)
        req.labels["job"] = "idem"
        return self.call("CreateRun", req, pb.CreateRunResponse, token=token, conn=conn)

    def runs(self, token=None):
        code, msg, resp = self.call("ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse,
                                    token=token)
        self.assertEqual(code, "OK", msg)
        return list(resp.runs)

    def test_a_repeat_gets_the_first_answer_and_no_second_run(self):
        code, msg, first = self.create("job-1:attempt")
        self.assertEqual(code, "OK", msg)
        self.assertRegex(first.run_id, r"^run-[0-9a-f]{32}$")
        for _ in range(3):
            code, msg, again = self.create("job-1:attempt")
            self.assertEqual(code, "OK", msg)
            self.assertEqual(again.SerializeToString(deterministic=True),
                             first.SerializeToString(deterministic=True))
        self.assertEqual([r.run_id for r in self.runs()], [first.run_id])
        ev = [(e["event"], e.get("idempotency_key")) for e in self.srv.audit_events()
              if e.get("run_id") == first.run_id and e["event"].startswith("run_create")]
        self.assertEqual(ev, [("run_created", "job-1:attempt")] +
                         [("run_create_repeated", "job-1:attempt")] * 3)
        # Without a key every create is a new run.
        code, msg, other = self.call("CreateRun", pb.CreateRunRequest(
            policy_json=policy_json()), pb.CreateRunResponse)
        self.assertEqual(code, "OK", msg)
        self.assertNotEqual(other.run_id, first.run_id)

    def test_concurrent_repeats_make_one_run(self):
        answers, lock = [], threading.Lock()
        conns = [self.conn() for _ in range(5)]
        go = threading.Barrier(len(conns))

        def one(c):
            go.wait()
            a = self.create("together", conn=c)
            with lock:
                answers.append(a)

        threads = [threading.Thread(target=one, args=(c,)) for c in conns]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        ok = [a[2].SerializeToString(deterministic=True) for a in answers if a[0] == "OK"]
        others = [a for a in answers if a[0] != "OK"]
        self.assertEqual(len(answers), len(conns))
        self.assertTrue(ok, answers)
        self.assertEqual(len(set(ok)), 1, "every OK is the first answer")
        # More repeats than may wait are told to retry, never given a run.
        for code, msg, _ in others:
            self.assertEqual(code, "UNAVAILABLE", msg)
            self.assertIn("idempotency_key together", msg)
        self.assertEqual(len(self.runs()), 1)
        run = self.runs()[0].run_id
        repeated = [e for e in self.srv.audit_events()
                    if e["event"] == "run_create_repeated" and e.get("run_id") == run]
        self.assertEqual(len(repeated), len(ok) - 1, "every other OK came from the key")

    def test_a_repeat_during_a_drain_gets_its_run(self):
        code, msg, first = self.create("k-drain")
        self.assertEqual(code, "OK", msg)
        code, msg, _ = self.call("Drain", pb.DrainRequest(), pb.DrainResponse, token="alice")
        self.assertEqual(code, "OK", msg)
        try:
            code, msg, again = self.create("k-drain")
            self.assertEqual((code, again.run_id), ("OK", first.run_id), msg)
            req = pb.CreateRunRequest(policy_json=policy_json(), idempotency_key="k-drain-new")
            req.labels["job"] = "idem"
            self.shared = self.shared or self.conn()
            resp = self.shared.envelope(sbxrpc.SERVICE + "CreateRun", req.SerializeToString())
            self.assertEqual(resp.code, pb.UNAVAILABLE, resp.message)
            # Refused, nothing in progress: another host may take it.
            self.assertFalse(resp.in_progress, resp.message)
        finally:
            code, msg, _ = self.call("Drain", pb.DrainRequest(undrain=True), pb.DrainResponse,
                                     token="alice")
            self.assertEqual(code, "OK", msg)

    def test_a_different_request_with_the_key_is_refused_naming_it(self):
        code, msg, first = self.create("k-policy")
        self.assertEqual(code, "OK", msg)
        code, msg, _ = self.create("k-policy", memory_mb=128)
        self.assertEqual(code, "INVALID_ARGUMENT")
        self.assertIn("idempotency_key k-policy", msg)
        self.assertIn("different request", msg)
        self.assertIn(first.run_id, msg)
        self.assertEqual(len(self.runs()), 1)

    def test_another_identity_with_the_key_gets_its_own_run(self):
        code, msg, alice = self.create("shared-key", token="alice")
        self.assertEqual(code, "OK", msg)
        # Bob's create with Alice's key, and another request: his own run,
        # never Alice's answer nor a hint that the key was used.
        code, msg, bob = self.create("shared-key", token="bob", memory_mb=128)
        self.assertEqual(code, "OK", msg)
        self.assertNotEqual(bob.run_id, alice.run_id)
        code, msg, bob2 = self.create("shared-key", token="bob", memory_mb=128)
        self.assertEqual((code, bob2.run_id), ("OK", bob.run_id), msg)
        self.assertEqual([r.run_id for r in self.runs("alice")], [alice.run_id])
        self.assertEqual([r.run_id for r in self.runs("bob")], [bob.run_id])
        # Bob tearing his run down leaves Alice's key alone.
        code, msg, _ = self.call("Teardown", pb.TeardownRequest(run_id=bob.run_id),
                                 pb.TeardownResponse, token="bob")
        self.assertEqual(code, "OK", msg)
        code, msg, again = self.create("shared-key", token="alice")
        self.assertEqual((code, again.run_id), ("OK", alice.run_id), msg)

    def test_a_repeat_after_teardown_is_told_so_and_makes_nothing(self):
        code, msg, first = self.create("k-gone")
        self.assertEqual(code, "OK", msg)
        code, msg, _ = self.call("Teardown", pb.TeardownRequest(run_id=first.run_id),
                                 pb.TeardownResponse)
        self.assertEqual(code, "OK", msg)
        code, msg, _ = self.create("k-gone")
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        self.assertIn("idempotency_key k-gone", msg)
        self.assertIn("the run this key created (%s) was torn down" % first.run_id, msg)
        self.assertEqual(self.runs(), [])
        # Another request with it is still a misuse of the key.
        code, msg, _ = self.create("k-gone", memory_mb=128)
        self.assertEqual(code, "INVALID_ARGUMENT", msg)

    def test_the_key_lasts_the_runs_life(self):
        code, msg, first = self.create("k-life", run_seconds=2, script_seconds=2)
        self.assertEqual(code, "OK", msg)
        deadline = time.time() + 60
        while time.time() < deadline:
            states = [r.state for r in self.runs()]
            if states != [pb.CREATED]:
                break
            time.sleep(0.2)
        self.assertEqual(states, [pb.EXPIRED])
        # Stopped but not torn down: still the first answer, still one run.
        code, msg, again = self.create("k-life", run_seconds=2, script_seconds=2)
        self.assertEqual((code, again.run_id, again.deadline_unix_ms),
                         ("OK", first.run_id, first.deadline_unix_ms), msg)
        self.assertEqual(len(self.runs()), 1)

    def test_a_repeat_at_the_identitys_cap_gets_its_run(self):
        made = []
        for i in range(3):
            code, msg, r = self.create("k-cap-%d" % i)
            self.assertEqual(code, "OK", msg)
            made.append(r.run_id)
        code, msg, _ = self.create("k-cap-new")
        self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
        code, msg, again = self.create("k-cap-1")
        self.assertEqual((code, again.run_id), ("OK", made[1]), msg)

    def test_malformed_keys_are_refused_naming_the_field(self):
        for key, why in (("x" * 129, "129 bytes, must be 1..128"),
                         ("a b", "byte 1 (0x20)"), ("k/../x", "byte 1 (0x2f)"),
                         ("é", "byte 0 (0xc3)")):
            code, msg, _ = self.create(key)
            self.assertEqual(code, "INVALID_ARGUMENT", key)
            self.assertIn("idempotency_key", msg)
            self.assertIn(why, msg)
        code, msg, _ = self.create("A-z_0.9:" + "x" * 120)
        self.assertEqual(code, "OK", msg)
        self.assertEqual(len(self.runs()), 1)

    def test_sbxctl_create_again_with_its_key_is_the_same_run(self):
        """sbxctl create --idempotency-key, sent again, gets the first run,
        its inputs found whole rather than refused (review of 2026-12-03:
        the second command's upload failed "already complete" and it tore
        the first command's run down), by import and by chunks."""
        d = self.srv.path("key-inputs")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "in.txt"), "w") as f:
            f.write("hello\n" * 1000)
        policy = self.srv.path("key-policy.json")
        with open(policy, "w") as f:
            f.write(policy_json())
        for extra in ([], ["--no-import"]):
            key = "cli-" + os.urandom(4).hex()
            ids = []
            for _ in range(2):
                r = self.srv.cli("create", "--policy", policy, "--data", d,
                                 "--idempotency-key", key, *extra)
                self.assertEqual(r.returncode, 0, r.stderr)
                ids.append(r.stdout.strip())
            self.assertEqual(ids[0], ids[1], extra)
            self.assertEqual([x.run_id for x in self.runs()], [ids[0]], extra)
            r = self.srv.cli("exec", ids[0], "--", "cat", "/data/in.txt")
            self.assertEqual((r.returncode, r.stdout), (0, "hello\n" * 1000), r.stderr)
            r = self.srv.cli("teardown", ids[0])
            self.assertEqual(r.returncode, 0, r.stderr)
        # Cut off mid-upload: declared (--no-upload sends the same request),
        # half of it sent; the same command again starts the file over.
        key = "cli-cut-" + os.urandom(4).hex()
        r = self.srv.cli("create", "--policy", policy, "--data", d, "--no-upload",
                         "--idempotency-key", key)
        self.assertEqual(r.returncode, 0, r.stderr)
        run = r.stdout.strip()
        code, msg, _ = self.call("PutInput", pb.PutInputRequest(
            run_id=run, path="in.txt", offset=0, data=b"hello\n" * 500), pb.PutInputResponse)
        self.assertEqual(code, "OK", msg)
        r = self.srv.cli("create", "--policy", policy, "--data", d, "--idempotency-key", key)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, run), r.stderr)
        r = self.srv.cli("exec", run, "--", "cat", "/data/in.txt")
        self.assertEqual((r.returncode, r.stdout), (0, "hello\n" * 1000), r.stderr)
        r = self.srv.cli("teardown", run)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.srv.cli("create", "--policy", policy, "--idempotency-key", "")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--idempotency-key: must not be empty", r.stderr)
        self.assertEqual(self.runs(), [])


if __name__ == "__main__":
    unittest.main()
