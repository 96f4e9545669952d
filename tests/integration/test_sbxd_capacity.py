# SPDX-License-Identifier: Apache-2.0
"""Admission by capacity through the real sbxd (config capacity, here with
numbers of its own so the arithmetic does not depend on this machine): a
policy that asks more than the host can ever give is INVALID_ARGUMENT
naming the limit and the number; one that does not fit beside the runs
committed now is RESOURCE_EXHAUSTED naming what is committed, and fits once
a run is torn down; concurrent CreateRuns never commit past the allowed
total; a run stopped keeps its memory committed until its teardown, but
not its CPU; one identity's stopped runs holding the memory another's
CreateRun needs are swept for it, as many as it takes, and not one more."""
import threading
import time
import unittest

from sbxdfix import Server, policy_json
from sbxrpc import sandbox_pb2 as pb

# 2 CPUs and 2000 MiB, nothing over, nothing reserved.
CAPACITY = {"cpu_millis": 2000, "memory_mb": 2000, "cpu_overcommit_percent": 100,
            "memory_overcommit_percent": 100, "memory_reserve_mb": 0}


def run_mb(memory_mb):
    """sbxdfix's policy's memory bound: memory_mb + out_mb 16 + 2 x tmp_mb 16."""
    return memory_mb + 16 + 2 * 16


class Capacity(unittest.TestCase):
    def setUp(self):
        self.srv = Server(capacity=CAPACITY, operators=["token:alice"])
        self.c = self.srv.conn()
        self.op = self.srv.conn(tls=True)

    def tearDown(self):
        self.c.close()
        self.op.close()
        rc = self.srv.stop()
        try:
            self.assertEqual(rc, 0, "sbxd exited %s: %s" % (rc, self.srv.log_tail()))
        finally:
            self.srv.cleanup()

    def create(self, conn=None, **limits):
        return (conn or self.c).call("CreateRun",
                                     pb.CreateRunRequest(policy_json=policy_json(**limits)),
                                     pb.CreateRunResponse)

    def teardown(self, run_id):
        code, msg, _ = self.c.call("Teardown", pb.TeardownRequest(run_id=run_id),
                                   pb.TeardownResponse)
        self.assertEqual(code, "OK", msg)

    def health(self):
        code, msg, h = self.op.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                    token=self.srv.tokens["alice"])
        self.assertEqual(code, "OK", msg)
        return h

    def test_a_policy_the_host_can_never_give_is_invalid_argument(self):
        code, msg, _ = self.create(memory_mb=512000)
        self.assertEqual(code, "INVALID_ARGUMENT", msg)
        self.assertIn("limits.memory_mb", msg)
        self.assertIn("%d MiB" % run_mb(512000), msg)
        self.assertIn("allowed memory 2000 MiB", msg)
        self.assertIn("capacity.memory_overcommit_percent 100", msg)
        code, msg, _ = self.create(cpu=64)
        self.assertEqual(code, "INVALID_ARGUMENT", msg)
        self.assertIn("limits.cpu_millis 64000", msg)
        self.assertIn("allowed CPU 2000", msg)
        h = self.health()
        self.assertEqual((h.committed_cpu_millis, h.committed_memory_mb, h.run_slots_free),
                         (0, 0, 32), "a refused CreateRun commits nothing")

    def test_a_run_that_does_not_fit_now_fits_after_a_teardown(self):
        code, msg, first = self.create(memory_mb=1200, cpu=0.5)
        self.assertEqual(code, "OK", msg)
        code, msg, _ = self.create(memory_mb=1200, cpu=0.5)
        self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
        self.assertIn("committed %d of its allowed 2000 MiB memory" % run_mb(1200), msg)
        self.assertIn("place it elsewhere", msg)
        code, msg, _ = self.create(memory_mb=100, cpu=2)
        self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
        self.assertIn("committed 500 of its allowed 2000 millis CPU", msg)
        self.teardown(first.run_id)
        code, msg, second = self.create(memory_mb=1200, cpu=0.5)
        self.assertEqual(code, "OK", "after the teardown it fits: %s" % msg)
        h = self.health()
        self.assertEqual((h.committed_cpu_millis, h.committed_memory_mb), (500, run_mb(1200)))
        self.assertEqual((h.allowed_cpu_millis, h.allowed_memory_mb), (2000, 2000))
        self.assertIn("config capacity", h.capacity_source)
        self.teardown(second.run_id)

    def test_concurrent_createruns_never_commit_past_the_allowed_total(self):
        # Each run commits 448 MiB: 4 of them fit in 2000, never 5.
        results, conns = [], [self.srv.conn() for _ in range(8)]
        lock = threading.Lock()
        go = threading.Event()

        def one(conn):
            go.wait()
            code, msg, r = self.create(conn, memory_mb=400, cpu=0.1)
            with lock:
                results.append((code, msg, r.run_id if r else ""))

        threads = [threading.Thread(target=one, args=(c,)) for c in conns]
        for t in threads:
            t.start()
        go.set()
        for t in threads:
            t.join(120)
        ok = [r for r in results if r[0] == "OK"]
        refused = [r for r in results if r[0] != "OK"]
        self.assertEqual(len(results), 8)
        self.assertEqual(len(ok), 4, results)
        for code, msg, _ in refused:
            self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
            self.assertIn("MiB memory", msg)
        h = self.health()
        self.assertEqual(h.committed_memory_mb, 4 * run_mb(400))
        self.assertLessEqual(h.committed_memory_mb, h.allowed_memory_mb)
        for c in conns:
            c.close()

    def test_a_stopped_run_keeps_its_memory_committed_not_its_cpu(self):
        code, msg, r = self.create(memory_mb=1200, cpu=1.5, run_seconds=1, script_seconds=1)
        self.assertEqual(code, "OK", msg)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            code, _, s = self.c.call("Status", pb.StatusRequest(run_id=r.run_id),
                                     pb.StatusResponse)
            if s.state == pb.EXPIRED:
                break
            time.sleep(0.2)
        self.assertEqual(s.state, pb.EXPIRED)
        h = self.health()
        self.assertEqual((h.committed_cpu_millis, h.committed_memory_mb), (0, run_mb(1200)))
        # Its CPU is free for others; its /out (memory) only after teardown.
        code, msg, other = self.create(memory_mb=100, cpu=1.5)
        self.assertEqual(code, "OK", msg)
        self.teardown(r.run_id)
        self.teardown(other.run_id)
        h = self.health()
        self.assertEqual((h.committed_cpu_millis, h.committed_memory_mb), (0, 0))

    def test_stopped_runs_of_one_identity_never_hold_anothers_createrun(self):
        # bob's four runs commit 4 x 448 of the 2000 MiB, then stop (their
        # run_seconds end): memory nobody uses but their /out.
        bob = self.srv.conn(tls=True)
        self.addCleanup(bob.close)
        runs = []
        for _ in range(4):
            code, msg, r = bob.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json(
                memory_mb=400, cpu=0.1, run_seconds=1, script_seconds=1)),
                pb.CreateRunResponse, token=self.srv.tokens["bob"])
            self.assertEqual(code, "OK", msg)
            runs.append(r.run_id)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = [bob.call("Status", pb.StatusRequest(run_id=r), pb.StatusResponse,
                               token=self.srv.tokens["bob"])[2].state for r in runs]
            if all(s == pb.EXPIRED for s in states):
                break
            time.sleep(0.2)
        self.assertEqual(self.health().committed_memory_mb, 4 * run_mb(400))
        # Another identity's run needs three of them gone (1248 + 448 fits
        # 2000; 1248 + 2 x 448 does not): its first CreateRun gets it.
        code, msg, r = self.create(memory_mb=1200, cpu=0.5)
        self.assertEqual(code, "OK", "bob's stopped runs held it off: %s" % msg)
        h = self.health()
        self.assertEqual(h.committed_memory_mb, run_mb(1200) + run_mb(400),
                         "as many swept as it took, no more")
        swept = [e for e in self.srv.audit_events() if e["event"] == "teardown" and
                 e.get("run_id") in runs]
        self.assertEqual(len(swept), 3)
        self.teardown(r.run_id)


if __name__ == "__main__":
    unittest.main()
