#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""sbxd's own descriptors held by running execs are each run's share.

A running exec holds up to 7 of sbxd's descriptors (its output pipes and
spill files, a streamed stdin's pipe, egress deny's resolver and connect
watch). sbxd keeps 16 a run for the run itself; before execs had a share of
their own, one caller's runs of many concurrent execs took every descriptor
of a sbxd under a low RLIMIT_NOFILE (a private sbxd of `sbxctl run`,
valgrind's 1024), and another caller's CreateRun or connection failed. Now
an Exec is admitted only within its run's exec_fds_per_run, and refused
RESOURCE_EXHAUSTED naming the key past it."""
import os
import stat
import time
import unittest

import sbxdfix
from sbxdfix import ServerTestCase, policy_json
from sbxrpc import sandbox_pb2 as pb

NOFILE = 320
# With runs_max 4 and workers 4, sbxd keeps 64 + 16 + 16 x 4 + 16 x 4 = 208
# and gives each run's execs half of the 112 left over 4 runs, in whole execs of
# 7: 14, two execs at once (its stderr says so).
RUNS_MAX = 4
EXECS_AT_ONCE = 2
# What caller A tries in each of its runs: far more than the descriptors
# left would hold for the two, and within the policy's 64 pids (an exec
# is its init and its command).
TRIES = 30


class ExecFds(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        wrapper = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                               "sbxd-execfds-%d.sh" % os.getpid())
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nulimit -n %d && exec %s \"$@\"\n" % (NOFILE, sbxdfix.SBXD))
        os.chmod(wrapper, stat.S_IRWXU)
        real, sbxdfix.SBXD = sbxdfix.SBXD, wrapper
        try:
            cls.srv = sbxdfix.Server(runs_max=RUNS_MAX, runs_max_per_identity=RUNS_MAX - 1,
                                     workers=4)
        finally:
            sbxdfix.SBXD = real
            os.unlink(wrapper)

    def call(self, conn, token, name, req, resp_type):
        return conn.call(name, req, resp_type, token=self.srv.tokens[token])

    def ok(self, conn, token, name, req, resp_type):
        code, msg, resp = self.call(conn, token, name, req, resp_type)
        self.assertEqual(code, "OK", "%s of %s: %s" % (name, token, msg))
        return resp

    def create(self, conn, token):
        return self.ok(conn, token, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                       pb.CreateRunResponse).run_id

    def holder(self, run):
        """An exec that holds its descriptors until its stdin ends."""
        return pb.ExecRequest(run_id=run, argv=["/bin/cat"], stdin_stream=True)

    def test_one_callers_execs_leave_another_caller_its_run(self):
        a = self.srv.conn()
        self.addCleanup(a.close)
        # Caller A: every run it may have, each asked for many execs that
        # hold their descriptors.
        runs, started, refused = [], {}, []
        for _ in range(RUNS_MAX - 1):
            run = self.create(a, "alice")
            runs.append(run)
            started[run] = []
            for _ in range(TRIES):
                code, msg, resp = self.call(a, "alice", "Exec", self.holder(run),
                                            pb.ExecResponse)
                if code == "OK":
                    started[run].append(resp.exec_id)
                else:
                    refused.append((code, msg))
        # Caller B, another identity, on a connection of its own: its run,
        # and its execs in it, as if A were not there.
        with self.srv.conn() as b:
            run = self.create(b, "bob")
            ids = [self.ok(b, "bob", "Exec", self.holder(run), pb.ExecResponse).exec_id
                   for _ in range(EXECS_AT_ONCE)]
            for ex in ids:
                self.ok(b, "bob", "WriteStdin",
                        pb.WriteStdinRequest(run_id=run, exec_id=ex, data=b"hi\n", eof=True),
                        pb.WriteStdinResponse)
                st = self.ok(b, "bob", "Wait", pb.WaitRequest(run_id=run, exec_id=ex,
                                                              timeout_ms=30000),
                             pb.WaitResponse).status
                self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code, st.stdout_bytes),
                                 ("EXITED", 0, 3), st)
            self.ok(b, "bob", "Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)

        # A's excess execs were refused, each with what bounds them.
        with open(self.srv.path("sbxd.stderr")) as f:
            self.assertIn("exec_fds_per_run fits 14 descriptors (%d execs at once a run) in "
                          "RLIMIT_NOFILE %d" % (EXECS_AT_ONCE, NOFILE), f.read())
        for run in runs:
            self.assertEqual(len(started[run]), EXECS_AT_ONCE, started)
        self.assertEqual(len(refused), (RUNS_MAX - 1) * (TRIES - EXECS_AT_ONCE))
        for code, msg in refused:
            self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
            self.assertIn("exec_fds_per_run 14", msg)
            self.assertIn("ulimit -Hn", msg)

        # An exec that ended gives its run's share back: A's run takes
        # another (once the monitor has closed what the exec held).
        run = runs[0]
        ex = started[run][0]
        self.ok(a, "alice", "WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id=ex, eof=True),
                pb.WriteStdinResponse)
        self.ok(a, "alice", "Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=30000),
                pb.WaitResponse)
        deadline = time.monotonic() + 20
        while True:
            code, msg, _ = self.call(a, "alice", "Exec", self.holder(run), pb.ExecResponse)
            if code == "OK" or time.monotonic() > deadline:
                break
            self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
            time.sleep(0.05)
        self.assertEqual(code, "OK", msg)
        for r in runs:
            self.ok(a, "alice", "Teardown", pb.TeardownRequest(run_id=r), pb.TeardownResponse)


if __name__ == "__main__":
    unittest.main()
