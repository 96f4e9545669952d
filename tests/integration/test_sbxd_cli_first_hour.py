# SPDX-License-Identifier: Apache-2.0
"""What a new user must be told (issue 20, item 6), through the real sbxd:
`sbxctl run` without --out warns once that /out is dropped (and not with
--out); a policy's problems are all listed at once, one per line with its
JSON path, bounded (by `sbxctl policy check`, by CreateRun's
INVALID_ARGUMENT and by `sbxctl run --policy`); a run torn down while live
ended TORN in its manifest and audit line, not ACTIVE."""
import json
import os
import unittest

from sbxdfix import ServerTestCase, policy_json
from sbxrpc import sandbox_pb2 as pb

WARNING = ("sbxctl: warning: no --out given: the run's /out is dropped at teardown "
           "(give --out DIR to keep it)")

BAD = {"image": "host", "mounts": [{"path": "/etc", "mode": "rw"}],
       "env": {"A=B": "x", "OK": 5}, "egress": {"policy": "deny"},
       "limits": {"cpu": 0, "memory_mb": 1, "pids": 2}, "lifetime": "forever", "extra": 1}
PROBLEMS = ["extra: unknown key",
            "mounts[0].path: only /data (ro) and /out (rw) can be mounted",
            "env.A=B: name must not contain '='",
            "env.OK: must be a string",
            "limits.cpu: must be 0.01..1024",
            "limits.memory_mb: must be 16..1048576",
            "limits.pids: must be 8..65536",
            'lifetime: must be "per_run"']


class FirstHour(ServerTestCase):
    def tmp(self, name, text):
        p = os.path.join(self.srv.dir, name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def test_run_without_out_warns_once(self):
        r = self.srv.cli("run", "--", "/bin/sh", "-c", "echo hi > /out/x; echo done")
        self.assertEqual((r.returncode, r.stdout), (0, "done\n"), r)
        self.assertEqual(r.stderr.splitlines().count(WARNING), 1, r.stderr)
        out = os.path.join(self.srv.dir, "kept")
        r = self.srv.cli("run", "--out", out, "--", "/bin/sh", "-c", "echo hi > /out/x")
        self.assertEqual(r.returncode, 0, r)
        self.assertNotIn("no --out given", r.stderr)
        with open(os.path.join(out, "x")) as f:
            self.assertEqual(f.read(), "hi\n")

    def test_policy_check_lists_every_problem(self):
        r = self.srv.cli("policy", "check", self.tmp("bad.json", json.dumps(BAD)))
        self.assertEqual(r.returncode, 1, r)
        lines = r.stderr.splitlines()
        self.assertTrue(lines[0].endswith("policy: 8 problems:"), lines)
        self.assertEqual([line.strip() for line in lines[1:]], PROBLEMS)
        # One problem: one line, as before.
        one = json.loads(policy_json())
        one["limits"]["pids"] = 1
        r = self.srv.cli("policy", "check", self.tmp("one.json", json.dumps(one)))
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn("limits.pids: must be 8..65536", r.stderr)

    def test_many_problems_are_bounded(self):
        many = json.loads(policy_json())
        many["env"] = {"N%02d=" % i: "v" for i in range(60)}
        r = self.srv.cli("policy", "check", self.tmp("many.json", json.dumps(many)))
        lines = r.stderr.splitlines()
        self.assertTrue(lines[0].endswith("policy: 60 problems:"), lines[:2])
        listed = [line for line in lines[1:] if "name must not contain '='" in line]
        self.assertLessEqual(len(listed), 20)
        self.assertGreater(len(listed), 5)
        self.assertEqual(lines[-1].strip(), "(%d more not listed)" % (60 - len(listed)))

    def test_create_run_and_sbxctl_run_list_every_problem(self):
        with self.srv.conn() as c:
            code, msg, _ = c.call("CreateRun", pb.CreateRunRequest(policy_json=json.dumps(BAD)),
                                  pb.CreateRunResponse)
        self.assertEqual(code, "INVALID_ARGUMENT", msg)
        # A status message is one line: every problem on it.
        self.assertEqual(msg, "policy: 8 problems: " + "; ".join(PROBLEMS))
        r = self.srv.cli("run", "--policy", self.tmp("bad2.json", json.dumps(BAD)), "true")
        self.assertNotEqual(r.returncode, 0, r)
        for p in PROBLEMS:
            self.assertIn("  " + p, r.stderr.splitlines())

    def test_final_state_of_a_run_torn_down_live(self):
        with self.srv.conn() as c:
            code, msg, run = c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                    pb.CreateRunResponse)
            self.assertEqual(code, "OK", msg)
            code, msg, td = c.call("Teardown", pb.TeardownRequest(run_id=run.run_id),
                                   pb.TeardownResponse)
            self.assertEqual(code, "OK", msg)
        self.assertEqual(pb.RunState.Name(td.manifest.final_state), "TORN")
        ev = [e for e in self.srv.audit_events()
              if e.get("event") == "teardown" and e.get("run_id") == run.run_id]
        self.assertEqual(ev[0]["final_state"], "torn", ev)


if __name__ == "__main__":
    unittest.main()
