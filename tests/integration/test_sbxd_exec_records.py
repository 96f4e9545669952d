#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What sbxd keeps of an exec's argv and env is bounded in memory, not only
in bytes of strings.

The record of an exec (Status, the manifest) keeps RUN_EXEC_ARGV_RECORD
(8 KiB) of argv and of env, counted in the strings' bytes only: an Exec of
4,000 empty argv entries (8 KiB on the wire) was kept whole, each entry its
own malloc chunk and pointer, about 160 KiB of sbxd's memory an exec, and a
run keeps 10,000 execs' records (1.6 GB a run; Status copied them all
again before trimming). Each entry now counts its overhead too."""
import unittest

from sbxdfix import ServerTestCase, policy_json
from sbxrpc import sandbox_pb2 as pb

EXECS = 200


class ExecRecords(ServerTestCase):
    def ok(self, conn, name, req, resp_type):
        code, msg, resp = conn.call(name, req, resp_type, token=self.srv.tokens["alice"])
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def rss_kib(self):
        with open("/proc/%d/status" % self.srv.proc.pid) as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))

    def growth(self, conn, run, argv):
        before = self.rss_kib()
        for _ in range(EXECS):
            ex = self.ok(conn, "Exec", pb.ExecRequest(run_id=run, argv=argv),
                         pb.ExecResponse).exec_id
            self.ok(conn, "Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=30000),
                    pb.WaitResponse)
        return self.rss_kib() - before

    def test_empty_argv_entries_cost_what_their_bytes_do(self):
        c = self.srv.conn()
        self.addCleanup(c.close)
        run = self.ok(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                      pb.CreateRunResponse).run_id
        # The peer: as many bytes of argv in one string.
        plain = self.growth(c, run, ["/bin/true", "a" * 8000])
        empties = self.growth(c, run, ["/bin/true", "a" * 8000] + [""] * 4000)
        st = self.ok(c, "Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.ok(c, "Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
        # ~14 KiB an exec either way now; 16 times the peer before.
        self.assertLess(empties, 3 * plain + 2048,
                        "%d execs: %d KiB with empty entries, %d KiB without"
                        % (EXECS, empties, plain))
        self.assertIn("more argv entries not recorded", st.execs[-1].argv[-1])


if __name__ == "__main__":
    unittest.main()
