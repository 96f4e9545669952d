#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A listing of a sandbox's /out holds sbxd's descriptors within what sbxd
keeps for the worker that lists it.

sbxd's budget of RLIMIT_NOFILE (server/rpc/rpc_server.c, FD_RESERVE) keeps
16 descriptors a worker for "its open files and walks" (beside each run's
own 16 and its execs' share, exec_fds_per_run), and the connection caps and
the egress proxy take the rest. But a listing of /out (ListArtifacts, a
Teardown's manifest, even one over its identity's share of passes, which
walks without hashing) goes depth first holding one directory open per
level, down to SBX_TREE_MAX_DEPTH (64): a script that makes /out/a/a/.../a
64 deep makes every listing of its run hold 66 descriptors, 50 past the
worker's 16. One identity listing in each worker its share allows holds
hundreds more than the budget kept, which the fit of exec_fds_per_run
and the connection caps assume never happens. A listing now walks a
directory's subdirectories after closing it (common/tree.c). Removing a
run's directory at Teardown held two per level (its DIR and the directory
beneath; the caller chooses inputs 32 components deep, a script /out
thousands deep): it now climbs back by a checked ".." and holds at most
three at any depth (common/tree_remove.c; unit.runs_util removes 2100
levels under RLIMIT_NOFILE 24)."""
import hashlib
import os
import threading
import time
import unittest

from sbxdfix import ServerTestCase, policy_json
from sbxrpc import sandbox_pb2 as pb

DEPTH = 64
# A worker's part of FD_RESERVE (rpc_server.c).
WORKER_FDS = 16
DEEP = ("d=/out; for i in $(seq %d); do d=$d/a; done; mkdir -p $d && cd $d && "
        "seq 1 1500 | xargs touch" % DEPTH)


class WalkFds(ServerTestCase):
    def ok(self, conn, name, req, resp_type):
        code, msg, resp = conn.call(name, req, resp_type, token=self.srv.tokens["alice"])
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def peak_during(self, fn):
        """sbxd's descriptors before fn, and the most held while it ran."""
        fd_dir = "/proc/%d/fd" % self.srv.proc.pid
        time.sleep(0.5)  # an exec's pipes closed by the monitor
        base = len(os.listdir(fd_dir))
        peak, done = [base], threading.Event()

        def sample():
            while not done.is_set():
                try:
                    peak[0] = max(peak[0], len(os.listdir(fd_dir)))
                except OSError:
                    pass

        t = threading.Thread(target=sample)
        t.start()
        try:
            fn()
        finally:
            done.set()
            t.join()
        return base, peak[0]

    def test_teardown_of_deep_inputs_holds_a_workers_descriptors(self):
        c = self.srv.conn()
        self.addCleanup(c.close)
        run = self.ok(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                      pb.CreateRunResponse).run_id
        data = b"x"
        for j in range(20):
            path = "/".join(["d%d" % j] + ["a"] * 30 + ["f"])
            self.ok(c, "PutInput",
                    pb.PutInputRequest(run_id=run, path=path, data=data, last=True, size=1,
                                       sha256=hashlib.sha256(data).hexdigest()),
                    pb.PutInputResponse)
        base, peak = self.peak_during(
            lambda: self.ok(c, "Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse))
        self.assertLessEqual(peak - base, WORKER_FDS,
                             "one Teardown held %d descriptors of sbxd's (%d before it)"
                             % (peak - base, base))

    def test_listing_of_deep_out_holds_a_workers_descriptors(self):
        c = self.srv.conn()
        self.addCleanup(c.close)
        run = self.ok(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                      pb.CreateRunResponse).run_id
        ex = self.ok(c, "Exec", pb.ExecRequest(run_id=run, argv=["/bin/sh", "-c", DEEP]),
                     pb.ExecResponse).exec_id
        st = self.ok(c, "Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=60000),
                     pb.WaitResponse).status
        self.assertEqual(st.exit_code, 0, st)
        def list_five():
            for _ in range(5):
                listing = self.ok(c, "ListArtifacts", pb.ListArtifactsRequest(run_id=run),
                                  pb.ListArtifactsResponse)
                self.assertTrue(listing.artifacts, listing)
                self.assertIn("a/" * DEPTH, listing.artifacts[0].path + "/")

        base, peak = self.peak_during(list_five)
        self.assertLessEqual(peak - base, WORKER_FDS,
                             "one listing held %d descriptors of sbxd's (%d before it)"
                             % (peak - base, base))
        # The Teardown lists /out for its manifest and removes it, 64 deep.
        base, peak = self.peak_during(
            lambda: self.ok(c, "Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse))
        self.assertLessEqual(peak - base, WORKER_FDS,
                             "the Teardown of a 64-deep /out held %d descriptors of sbxd's "
                             "(%d before it)" % (peak - base, base))


if __name__ == "__main__":
    unittest.main()
