# SPDX-License-Identifier: Apache-2.0
"""Repeats of a running request (a retry with its request id) wait on
their caller's share, never on a place others need (review of
2026-12-03: the request-id table parked at most 8 repeats for everyone
together, so a caller holding them with repeats of a request it kept slow
made every other caller's retry UNAVAILABLE, and the fleet client then
placed that caller's run on another host while the first host made it
too; the first fix, no cap but each caller's requests in hand, let a
caller's repeats from connections long gone take all of its own places).

A real sbxd (workers 16: 32 contexts for parked repeats, 8 a caller) starts its helper through a gate
(sbxdfix.HelperGate), so every CreateRun waits, before its sandbox
exists, until the test opens it. Over TLS, identities alice and carol
each send a CreateRun and park 8 repeats of it (sbx_rpc_repeats_total
says so: 16 parked, twice the old cap); alice's 9th repeat is refused
UNAVAILABLE at once and alice still gets Health answered; then bob sends
a CreateRun and a repeat of it, which must be parked too. Nothing else is
answered while the gate is shut; opened, every repeat gets its own first
request's run: three runs, one each."""
import hashlib
import os
import shutil
import tempfile
import threading
import time
import unittest

import sbxdfix
import sbxrpc
from sbxrpc import sandbox_pb2 as pb

WORKERS = 16
# rpc_server.c: parked repeats have as many contexts as the pools hold
# (2 x workers), a caller a quarter of them.
SHARE = (2 * WORKERS) // 4


class RepeatShare(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sbx-test-repeat-share-")
        os.chmod(cls.dir, 0o755)
        cls.gate = sbxdfix.HelperGate(cls.dir)
        cls.tokens = {n: n[0] + os.urandom(16).hex() for n in ("alice", "bob", "carol")}
        cls.srv = sbxdfix.Server(
            helper=cls.gate.helper, metrics={"listen": "127.0.0.1:0"}, workers=WORKERS,
            tokens=[{"name": n, "sha256": hashlib.sha256(t.encode()).hexdigest()}
                    for n, t in cls.tokens.items()])

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

    def call(self, who, name, req, resp_type, request_id=None):
        # Long enough for a first request held at the gate while 17
        # repeats park one by one on a loaded machine.
        with self.srv.conn(tls=True, timeout_ms=120000) as c:
            return c.call(name, req, resp_type, token=self.tokens[who], request_id=request_id)

    def first_and_repeats(self, who, req, n, calls, helpers):
        """who's CreateRun (its helper at the gate) and n repeats of it,
        one at a time, each parked before the next is sent (a burst could
        meet the caller's share of the workers' queue instead)."""
        group = [Call(self, who, req, who + "-slow")]
        group[0].start()
        calls.append(group[0])
        wait_for_helper(self.srv, helpers)
        parked = self.parked()
        for _ in range(n):
            group.append(Call(self, who, req, who + "-slow"))
            group[-1].start()
            calls.append(group[-1])
            parked += 1
            self.wait_parked(parked, calls)
        return group

    def test_each_caller_parks_on_its_own_share(self):
        req = pb.CreateRunRequest(policy_json=sbxdfix.policy_json(memory_mb=64))
        base = self.parked()
        self.srv.kids_before = sbxdfix.children(self.srv.proc.pid)
        self.gate.arm()
        calls, groups = [], {}
        try:
            groups["alice"] = self.first_and_repeats("alice", req, SHARE, calls, 1)
            groups["carol"] = self.first_and_repeats("carol", req, SHARE, calls, 2)
            self.assertEqual(self.parked(), base + 2 * SHARE)
            # alice's share is full: her next repeat is refused at once, and
            # she keeps places for other calls.
            with self.srv.conn(tls=True, timeout_ms=120000) as c:
                resp = c.envelope(sbxrpc.SERVICE + "CreateRun", req.SerializeToString(),
                                  self.tokens["alice"], "alice-slow")
            self.assertEqual(resp.code, pb.UNAVAILABLE, resp.message)
            self.assertIn("still running", resp.message)
            # The first attempt may still make its run: the fleet clients
            # retry this host on in_progress, and never place it elsewhere.
            self.assertTrue(resp.in_progress, "a refused repeat says in_progress")
            code, msg, _ = self.call("alice", "Health", pb.HealthRequest(), pb.HealthResponse)
            self.assertEqual(code, "OK", msg)
            # Parked, not told UNAVAILABLE "an earlier attempt is still
            # running" (what the shared cap said).
            groups["bob"] = self.first_and_repeats("bob", req, 1, calls, 3)
            self.assertEqual(self.parked(), base + 2 * SHARE + 1)
        finally:
            self.gate.open()
            for c in calls:
                c.join(120)
            self.gate.reset()
        runs = set()
        for who, group in groups.items():
            codes = [c.result[0] for c in group]
            self.assertEqual(codes, ["OK"] * len(group), "%s: %s" % (
                who, [c.result[:2] for c in group]))
            ids = {c.result[2].run_id for c in group}
            self.assertEqual(len(ids), 1, "%s's repeats got their first request's run: %s"
                             % (who, ids))
            runs |= ids
        self.assertEqual(len(runs), 3, runs)
        for who, group in groups.items():
            code, msg, _ = self.call(who, "Teardown", pb.TeardownRequest(
                run_id=group[0].result[2].run_id), pb.TeardownResponse)
            self.assertEqual(code, "OK", msg)

    def test_a_resend_no_worker_can_take_is_in_progress_here(self):
        """A resend whose first runs here, met by a full share of the
        workers, is UNAVAILABLE with in_progress: RESOURCE_EXHAUSTED read
        "try another host" (review of 2026-12-03: a fleet client's resend
        after a timeout made a second run elsewhere)."""
        req = pb.CreateRunRequest(policy_json=sbxdfix.policy_json(memory_mb=64))
        self.srv.kids_before = sbxdfix.children(self.srv.proc.pid)
        self.gate.reset()
        self.gate.arm()
        calls = []
        try:
            first = Call(self, "carol", req, "carol-first")
            first.start()
            calls.append(first)
            wait_for_helper(self.srv, 1)
            # carol's share of the short-call workers, running and queued,
            # until a new request of hers is refused at once.
            deadline = time.monotonic() + 60
            while True:
                c = Call(self, "carol", req, "carol-fill-%d" % len(calls))
                c.start()
                calls.append(c)
                c.join(0.3)
                if c.result is not None:
                    self.assertEqual(c.result[0], "RESOURCE_EXHAUSTED", c.result[1])
                    break
                self.assertLess(time.monotonic(), deadline, "carol's share never filled")
            with self.srv.conn(tls=True, timeout_ms=120000) as conn:
                resp = conn.envelope(sbxrpc.SERVICE + "CreateRun", req.SerializeToString(),
                                     self.tokens["carol"], "carol-first")
            self.assertEqual(resp.code, pb.UNAVAILABLE, resp.message)
            self.assertTrue(resp.in_progress, resp.message)
            self.assertIn("ran or is running here", resp.message)
        finally:
            self.gate.open()
            for c in calls:
                c.join(120)
            self.gate.reset()
            made = [c.result[2].run_id for c in calls if c.result and c.result[0] == "OK"]
            for run_id in made:  # carol is at her cap now: for the other test
                self.call("carol", "Teardown", pb.TeardownRequest(run_id=run_id),
                          pb.TeardownResponse)
        self.assertEqual(first.result[0], "OK", first.result[1])
        self.assertIn(first.result[2].run_id, made)


class Call(threading.Thread):
    """A CreateRun over a TLS connection of its own, as `who`, with a request
    id; result: (code, message, response) once answered."""

    def __init__(self, test, who, req, request_id):
        super().__init__(daemon=True)
        self.test, self.who, self.req, self.request_id = test, who, req, request_id
        self.result = None

    def run(self):
        try:
            self.result = self.test.call(self.who, "CreateRun", self.req,
                                         pb.CreateRunResponse, self.request_id)
        except Exception as e:  # shown by the test's assertion on the codes
            self.result = ("no answer", repr(e), None)


def wait_for_helper(srv, n):
    """Until sbxd has started n helpers more than it had (each waits at the
    gate): the CreateRun that started the n-th is running, not queued."""
    deadline = time.monotonic() + 60
    while True:
        kids = len(sbxdfix.children(srv.proc.pid) - srv.kids_before)
        if kids >= n:
            return
        assert time.monotonic() < deadline, "sbxd started %d helpers, want %d" % (kids, n)
        time.sleep(0.02)


if __name__ == "__main__":
    unittest.main()
