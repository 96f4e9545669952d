#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Status and the manifest fit max_message_bytes whatever the execs' records
take, the first and the last included.

An exec's record keeps up to 8 KiB of argv and 8 KiB of env (each entry
with its framing), a cwd of up to 4 KiB and 16 denied DNS names of up to
253 bytes: over 20 KiB, and labels take up to 16 KiB of a 64 KiB answer.
Status left out only execs of the
middle, always keeping the first and the last, so under the smallest
max_message_bytes (64 KiB) a run whose first and last records and labels
outgrew it answered Status INTERNAL ("response larger than
max_message_bytes") however many execs it had: the caller's own records
made sbxd report a fault of its own, and the run's Status unreadable for
its owner and operators alike. Now the last and then the first go too
when even they do not fit, counted in execs_not_listed."""
import unittest

from sbxdfix import ServerTestCase, policy_json
from sbxrpc import sandbox_pb2 as pb
from sbx.v1 import policy_pb2

MESSAGE_BYTES = 64 * 1024


def big_exec(run, i):
    # 8 KiB of argv strings, then 4,000 empty entries (as many as the
    # record keeps), and 8 KiB of env. Under
    # egress deny, 16 lookups of distinct names of ~240 bytes: each
    # recorded in network_denied_names.
    look = ("for k in $(seq 10 25); do getent hosts %s$k.%s.%s.%s.example >/dev/null; done; true"
            % ("n" * 60, "a" * 60, "b" * 60, "c" * 45))
    argv = ["/bin/sh", "-c", look, "%02d" % i + "a" * (8000 - len(look))] + [""] * 4000
    env = [policy_pb2.EnvVar(name="V%03d" % k, value="v" * 27) for k in range(256)]
    # A working directory of nearly 4 KiB (the first exec makes it).
    cwd = "/tmp/" + "/".join(["b" * 200] * 19)
    return pb.ExecRequest(run_id=run, argv=argv, env=env, cwd=cwd)


class StatusFit(ServerTestCase):
    SERVER_CONFIG = {"max_message_bytes": MESSAGE_BYTES}

    def setUp(self):
        self.c = self.srv.conn()
        self.addCleanup(self.c.close)

    def ok(self, name, req, resp_type):
        code, msg, resp = self.c.call(name, req, resp_type, token=self.srv.tokens["alice"])
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def run_execs(self, n):
        # Labels (at most 64 of 256 + 256 bytes) take their part too.
        labels = {"k%02d" % k + "k" * 240: "v" * 250 for k in range(28)}
        run = self.ok("CreateRun", pb.CreateRunRequest(policy_json=policy_json(), labels=labels),
                      pb.CreateRunResponse).run_id
        ids = []
        first = big_exec(run, 0)
        first.argv[2] = "mkdir -p %s; %s" % (first.cwd, first.argv[2])
        first.argv[3] = first.argv[3][:8000 - len(first.argv[2])]
        first.cwd = "/tmp"
        mk = self.ok("Exec", first, pb.ExecResponse).exec_id
        self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=mk, timeout_ms=30000), pb.WaitResponse)
        ids.append(mk)
        n -= 1
        for i in range(n):
            ex = self.ok("Exec", big_exec(run, i), pb.ExecResponse).exec_id
            self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=30000),
                    pb.WaitResponse)
            ids.append(ex)
        return run, ids

    def check(self, n):
        run, ids = self.run_execs(n)
        code, msg, st = self.c.call("Status", pb.StatusRequest(run_id=run), pb.StatusResponse,
                                    token=self.srv.tokens["alice"])
        self.assertEqual(code, "OK", msg)
        self.assertLessEqual(len(st.SerializeToString()), MESSAGE_BYTES)
        self.assertEqual(len(st.execs) + st.execs_not_listed, n)
        self.assertGreater(st.execs_not_listed, 0)
        listed = [e.exec_id for e in st.execs]
        self.assertEqual(listed, [x for x in ids if x in listed])
        code, msg, t = self.c.call("Teardown", pb.TeardownRequest(run_id=run),
                                   pb.TeardownResponse, token=self.srv.tokens["alice"])
        self.assertEqual(code, "OK", msg)
        self.assertEqual(len(t.manifest.execs) + t.manifest.execs_not_listed, n)

    def test_two_large_execs(self):
        self.check(2)

    def test_three_large_execs(self):
        self.check(3)


if __name__ == "__main__":
    unittest.main()
