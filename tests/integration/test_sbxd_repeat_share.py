# SPDX-License-Identifier: Apache-2.0
"""One caller's repeats of its own slow request cannot take the places
another caller's retry needs (review of 2026-12-03: the request-id table
parked at most 8 repeats for everyone together, so a caller holding them
with repeats of a request it kept slow made every other caller's retry
UNAVAILABLE, and the fleet client then placed that caller's run on
another host while the first host made it too).

A real sbxd starts its helper through a gate (sbxdfix.HelperGate), so
every CreateRun waits, before its sandbox exists, until the test opens
it. Over TLS, identity alice sends a CreateRun and 8 more with the same
request id (parked: sbx_rpc_repeats_total says so); then bob sends a
CreateRun and a repeat of it. bob's repeat must be parked too, not
refused, and once the gate opens every repeat gets its own first
request's answer: two runs, one each."""
import os
import shutil
import tempfile
import threading
import time
import unittest

import sbxdfix
from sbxrpc import sandbox_pb2 as pb

# The old shared cap: alice's repeats fill it.
ALICE_REPEATS = 8


class RepeatShare(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sbx-repeat-share-")
        os.chmod(cls.dir, 0o755)
        cls.gate = sbxdfix.HelperGate(cls.dir)
        cls.srv = sbxdfix.Server(helper=cls.gate.helper, metrics={"listen": "127.0.0.1:0"})

    @classmethod
    def tearDownClass(cls):
        cls.gate.reset()
        cls.srv.cleanup()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def parked(self):
        status, _, text = sbxdfix.metrics_scrape(self.srv.metrics_port())
        self.assertEqual(status, 200, text)
        return sbxdfix.metric_value(sbxdfix.metrics_parse(text), "sbx_rpc_repeats_total",
                                    outcome="parked")

    def wait_parked(self, n, calls):
        """Until n repeats were parked; nothing may be answered meanwhile
        (the gate holds every first request)."""
        deadline = time.monotonic() + 60
        while self.parked() < n:
            done = [(c.who, c.result[:2]) for c in calls if c.result is not None]
            self.assertEqual(done, [], "answered while every first request waits at the "
                             "gate (%d repeats parked, want %d)" % (self.parked(), n))
            self.assertLess(time.monotonic(), deadline,
                            "%d repeats parked, want %d" % (self.parked(), n))
            time.sleep(0.05)

    def test_another_callers_repeats_leave_room_for_mine(self):
        req = pb.CreateRunRequest(policy_json=sbxdfix.policy_json(memory_mb=64))
        base = self.parked()
        self.srv.kids_before = children(self.srv.proc.pid)
        self.gate.arm()
        calls = []
        try:
            alice = [Call(self.srv, "alice", req, "alice-slow")]
            alice[0].start()
            wait_for_helper(self.srv, 1)
            for _ in range(ALICE_REPEATS):
                alice.append(Call(self.srv, "alice", req, "alice-slow"))
                alice[-1].start()
            calls = list(alice)
            self.wait_parked(base + ALICE_REPEATS, calls)
            bob = [Call(self.srv, "bob", req, "bob-own")]
            bob[0].start()
            calls += bob
            wait_for_helper(self.srv, 2)
            bob.append(Call(self.srv, "bob", req, "bob-own"))
            bob[-1].start()
            calls.append(bob[-1])
            # Parked, not told UNAVAILABLE "an earlier attempt is still
            # running" (what the shared cap said).
            self.wait_parked(base + ALICE_REPEATS + 1, calls)
            self.assertIsNone(bob[-1].result, "bob's repeat was answered before its "
                              "first request could be: %s" % (bob[-1].result,))
        finally:
            self.gate.open()
            for c in calls:
                c.join(120)
            self.gate.reset()
        for who, group in (("alice", alice), ("bob", bob)):
            codes = [c.result[0] for c in group]
            self.assertEqual(codes, ["OK"] * len(group), "%s: %s" % (
                who, [c.result[:2] for c in group]))
            ids = {c.result[2].run_id for c in group}
            self.assertEqual(len(ids), 1, "%s's repeats got their first request's run: %s"
                             % (who, ids))
        self.assertNotEqual(alice[0].result[2].run_id, bob[0].result[2].run_id)
        for who, group in (("alice", alice), ("bob", bob)):
            with self.srv.conn(tls=True) as c:
                code, msg, _ = c.call("Teardown", pb.TeardownRequest(
                    run_id=group[0].result[2].run_id), pb.TeardownResponse,
                    token=self.srv.tokens[who])
                self.assertEqual(code, "OK", msg)


class Call(threading.Thread):
    """A CreateRun over a TLS connection of its own, as `who`, with a request
    id; result: (code, message, response) once answered."""

    def __init__(self, srv, who, req, request_id):
        super().__init__(daemon=True)
        self.srv, self.who, self.req, self.request_id = srv, who, req, request_id
        self.result = None

    def run(self):
        try:
            with self.srv.conn(tls=True, timeout_ms=120000) as c:
                self.result = c.call("CreateRun", self.req, pb.CreateRunResponse,
                                     token=self.srv.tokens[self.who],
                                     request_id=self.request_id)
        except Exception as e:  # shown by the test's assertion on the codes
            self.result = ("no answer", repr(e), None)


def children(pid):
    """How many processes pid's children are."""
    n = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/stat" % p) as f:
                    n += int(f.read().rsplit(")", 1)[1].split()[1]) == pid
            except (OSError, IndexError, ValueError):
                pass
    return n


def wait_for_helper(srv, n):
    """Until sbxd has started n helpers more than it had (each waits at the
    gate): the CreateRun that started the n-th is running, not queued."""
    deadline = time.monotonic() + 60
    while True:
        kids = children(srv.proc.pid) - srv.kids_before
        if kids >= n:
            return
        assert time.monotonic() < deadline, "sbxd started %d helpers, want %d" % (kids, n)
        time.sleep(0.02)


if __name__ == "__main__":
    unittest.main()
