# SPDX-License-Identifier: Apache-2.0
"""A short-lived shortage is an error the caller can retry, never a wrong
answer (issue 7, section 1): with sbxd out of descriptors, Exec failed
INTERNAL, ListArtifacts answered NOT_FOUND for a run that exists and
Teardown answered OK and left the run's directory behind. Here sbxd's
RLIMIT_NOFILE is lowered (prlimit, from outside) to its lowest free
descriptor, so that every descriptor it would open fails with EMFILE while
the connection already open still carries calls: each answer must be
UNAVAILABLE naming what ran short, nothing changes, and once descriptors are
back the same calls succeed (a second Teardown finishes the first)."""
import os
import resource
import unittest

from sbxdfix import ServerTestCase, policy_json
from sbxrpc import sandbox_pb2 as pb


class Shortage(ServerTestCase):
    def ok(self, c, name, req, resp_type):
        code, msg, resp = c.call(name, req, resp_type)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def short_of_descriptors(self):
        """Lowers sbxd's soft RLIMIT_NOFILE to its lowest free descriptor;
        returns the limits to restore."""
        old = self.srv.limit_fds_to_held()
        self.addCleanup(resource.prlimit, self.srv.proc.pid, resource.RLIMIT_NOFILE, old)
        return old

    def expect_short(self, c, name, req, resp_type):
        code, msg, _ = c.call(name, req, resp_type)
        self.assertEqual(code, "UNAVAILABLE", "%s: %s %s" % (name, code, msg))
        self.assertIn("short of file descriptors", msg)
        self.assertIn("retry", msg)
        return msg

    def test_out_of_descriptors_every_answer_is_retryable_and_true(self):
        c = self.srv.conn()
        self.addCleanup(c.close)
        run = self.ok(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                      pb.CreateRunResponse).run_id
        ex = self.ok(c, "Exec", pb.ExecRequest(run_id=run, argv=["/bin/sh", "-c",
                                                                 "echo kept > /out/a"]),
                     pb.ExecResponse).exec_id
        self.ok(c, "Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=20000),
                pb.WaitResponse)
        run_dir = os.path.join(self.srv.state, "runs", run)
        self.assertTrue(os.path.isdir(run_dir))

        old = self.short_of_descriptors()
        try:
            # The run exists: never NOT_FOUND.
            self.expect_short(c, "ListArtifacts", pb.ListArtifactsRequest(run_id=run),
                              pb.ListArtifactsResponse)
            self.expect_short(c, "FetchArtifact", pb.FetchArtifactRequest(run_id=run, path="a"),
                              pb.FetchArtifactResponse)
            self.expect_short(c, "Exec", pb.ExecRequest(run_id=run, argv=["/bin/true"]),
                              pb.ExecResponse)
            self.expect_short(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                              pb.CreateRunResponse)
            # Teardown kills the sandbox but cannot list /out or remove the
            # directory: not OK, and it says the run is kept.
            msg = self.expect_short(c, "Teardown", pb.TeardownRequest(run_id=run),
                                    pb.TeardownResponse)
            self.assertIn("call Teardown again", msg)
            self.assertTrue(os.path.isdir(run_dir), "the run's directory went unrecorded")
        finally:
            resource.prlimit(self.srv.proc.pid, resource.RLIMIT_NOFILE, old)

        # Descriptors are back: the second Teardown finishes the first and
        # its manifest holds what /out held.
        m = self.ok(c, "Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse).manifest
        self.assertEqual(m.run_id, run)
        self.assertEqual([a.path for a in m.artifacts], ["a"])
        self.assertEqual([e.exec_id for e in m.execs][:1], [ex])
        self.assertFalse(os.path.exists(run_dir))
        code, msg, _ = c.call("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
        self.assertEqual(code, "NOT_FOUND", msg)
        kept = [e for e in self.srv.audit_events()
                if e.get("run_id") == run and e["event"] == "teardown_error"]
        self.assertTrue(kept and all(e.get("kept") for e in kept), kept)
        # Nothing else was created while short.
        runs = self.ok(c, "ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse)
        self.assertEqual(list(runs.runs), [])


if __name__ == "__main__":
    unittest.main()
