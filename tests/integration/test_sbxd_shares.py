# SPDX-License-Identifier: Apache-2.0
"""Callers stay apart in the worker pools (issue 7, section 4): 16 ordinary
Waits of one identity used to take every long-call worker and queue slot,
so every other identity's Wait, ReadOutput and FetchArtifact got
RESOURCE_EXHAUSTED. Now an identity gets half of each pool: its flood is
refused past its share (RESOURCE_EXHAUSTED naming the share) and another
identity is served at once."""
import threading
import time
import unittest

from sbxdfix import ServerTestCase, policy_json
from sbxrpc import sandbox_pb2 as pb

FLOOD = 16  # the count: sbxd's default workers (16) give the long pool 8 + 8 queued


class Shares(ServerTestCase):
    def ok(self, conn, name, req, resp_type, token=None):
        code, msg, resp = conn.call(name, req, resp_type, token=token)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def run_with_exec(self, conn, token=None, script="echo out > /out/a; echo hi; sleep 60"):
        run = self.ok(conn, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                      pb.CreateRunResponse, token=token).run_id
        ex = self.ok(conn, "Exec", pb.ExecRequest(run_id=run, argv=["/bin/sh", "-c", script]),
                     pb.ExecResponse, token=token).exec_id
        return run, ex

    def test_one_identitys_waits_leave_workers_to_another(self):
        c = self.srv.conn()
        bob = self.srv.tokens["bob"]
        self.addCleanup(c.close)
        mine, my_exec = self.run_with_exec(c)
        theirs, their_exec = self.run_with_exec(c, token=bob)
        # Bob's exec has written its artifact and its line before the flood.
        for _ in range(100):
            r = self.ok(c, "ReadOutput", pb.ReadOutputRequest(run_id=theirs, exec_id=their_exec,
                                                             stream=pb.STDOUT, timeout_ms=100),
                        pb.ReadOutputResponse, token=bob)
            if r.data:
                break

        # The flood: uid's ordinary Waits, each long-polling 20 s.
        answers = []
        conns = [self.srv.conn() for _ in range(FLOOD)]

        def wait(conn):
            code, msg, _ = conn.call("Wait", pb.WaitRequest(run_id=mine, exec_id=my_exec,
                                                            timeout_ms=20000), pb.WaitResponse)
            answers.append((code, msg))
        ts = [threading.Thread(target=wait, args=(k,)) for k in conns]
        for t in ts:
            t.start()
        # Until the refused ones have been answered, the rest are in hand
        # (before the shares none was refused: all 16 were).
        deadline = time.monotonic() + 3
        while len(answers) < FLOOD // 2 and time.monotonic() < deadline:
            time.sleep(0.05)

        # Another identity's long calls are served, not refused.
        try:
            with self.srv.conn(tls=True) as t:
                st = self.ok(t, "Wait", pb.WaitRequest(run_id=theirs, exec_id=their_exec,
                                                       timeout_ms=10), pb.WaitResponse, token=bob)
                self.assertEqual(pb.ExitReason.Name(st.status.reason), "RUNNING")
                r = self.ok(t, "ReadOutput", pb.ReadOutputRequest(run_id=theirs,
                                                                  exec_id=their_exec,
                                                                  stream=pb.STDOUT,
                                                                  timeout_ms=10),
                            pb.ReadOutputResponse, token=bob)
                self.assertEqual(r.data, b"hi\n")
                f = self.ok(t, "FetchArtifact", pb.FetchArtifactRequest(run_id=theirs, path="a"),
                            pb.FetchArtifactResponse, token=bob)
                self.assertEqual(f.data, b"out\n")
            # The flood's accepted Waits were still long-polling meanwhile,
            # and the rest were refused for the share, naming it.
            self.assertEqual(len(answers), FLOOD // 2, answers)
            refused = [a for a in answers if a[0] == "RESOURCE_EXHAUSTED"]
            self.assertEqual(len(refused), FLOOD // 2, answers)
            self.assertIn("uid:", refused[0][1])
            self.assertIn("share of the long-call pool", refused[0][1])
        finally:
            # Teardown ends the long polls at once.
            self.ok(c, "Teardown", pb.TeardownRequest(run_id=mine), pb.TeardownResponse)
            for t in ts:
                t.join(30)
            for k in conns:
                k.close()
            self.ok(c, "Teardown", pb.TeardownRequest(run_id=theirs), pb.TeardownResponse,
                    token=bob)
        self.assertEqual(len(answers), FLOOD, answers)


if __name__ == "__main__":
    unittest.main()
