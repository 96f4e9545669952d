"""Limits sbxd enforces itself, whatever the helper does (issue 7, section 3):
a hung pid 1 cannot keep an exec running past its deadline; the
administrator's ceilings and disk quotas; output and audit lines that keep a
true prefix when the disk fills."""
import hashlib
import json
import os
import signal
import time
import unittest

from sbxdfix import Server, policy_json, processes_with
from sbxrpc import sandbox_pb2 as pb


def children(pid):
    """Children of every thread of pid (sbxd spawns from its workers)."""
    found = []
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                found += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return found


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def tree(pid):
    """pid and its descendants."""
    found = [pid]
    for c in children(pid):
        found += tree(c)
    return found


class Base(unittest.TestCase):
    config = {}

    def setUp(self):
        self.srv = Server(**self.config)
        self.c = self.srv.conn()

    def tearDown(self):
        self.c.close()
        rc = self.srv.stop()
        log = self.srv.log_tail()
        self.srv.cleanup()
        self.assertEqual(rc, 0, log)

    def call(self, name, req, resp_type, token=None):
        return self.c.call(name, req, resp_type, token=token)

    def ok(self, name, req, resp_type, token=None):
        code, msg, resp = self.call(name, req, resp_type, token=token)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def create(self, token=None, inputs=(), **limits):
        req = pb.CreateRunRequest(policy_json=policy_json(**limits))
        for path, data in inputs:
            req.inputs.add(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        return self.ok("CreateRun", req, pb.CreateRunResponse, token=token).run_id

    def exec(self, run, argv, token=None):
        return self.ok("Exec", pb.ExecRequest(run_id=run, argv=argv), pb.ExecResponse,
                       token=token).exec_id


class HungPid1(Base):
    def test_a_stopped_pid_1_cannot_keep_an_exec_running_past_its_deadline(self):
        marker = "sbx-hung-%d" % os.getpid()
        run = self.create(script_seconds=2, run_seconds=120)
        # $0 is the marker, so the test finds the command from outside.
        self.exec(run, ["/bin/sh", "-c", "while :; do echo x >> /out/tick; sleep 0.02; done",
                        marker])
        deadline = time.time() + 5
        while not processes_with(marker) and time.time() < deadline:
            time.sleep(0.02)
        cmd = processes_with(marker)
        self.assertTrue(cmd, "the exec did not start")
        helpers = [p for p in children(self.srv.proc.pid) if alive(p)]
        self.assertEqual(len(helpers), 1, helpers)
        pid1 = [p for p in children(helpers[0]) if alive(p)]
        self.assertEqual(len(pid1), 1, pid1)
        run_procs = tree(pid1[0])
        self.assertIn(cmd[0][0], run_procs)
        os.kill(pid1[0], signal.SIGSTOP)  # a hung helper: it reads nothing, kills nothing
        started = time.time()
        # The command goes on appending to /out without its pid 1 (its
        # wchar counts the writes)...
        w0 = self.wchar(cmd[0][0])
        time.sleep(0.5)
        self.assertGreater(self.wchar(cmd[0][0]), w0)
        # ...until sbxd kills the run's processes itself: at
        # script_seconds (2 s) + sbxd's grace (2 s), and a little for the kill,
        # not at run_seconds (120 s).
        def left():
            return [p for p in run_procs if alive(p)] + processes_with(marker)
        while left() and time.time() - started < 10:
            time.sleep(0.05)
        waited = time.time() - started
        self.assertEqual(left(), [], "processes of the run outlived its deadline by "
                         "%.1f s" % waited)
        self.assertLess(waited, 7.5)
        self.assertFalse(alive(pid1[0]))
        self.assertFalse(alive(helpers[0]))
        st = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual(st.state, pb.FAILED)
        self.assertEqual(st.execs[0].reason, pb.TIMEOUT)
        self.assertTrue(any("killed the sandbox" in a for a in st.alerts), st.alerts)
        # Its cgroups went with it: `sbx-helper cleanup` ran once it was reaped.
        deadline = time.time() + 10
        while self.run_cgroups(helpers[0]) and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.run_cgroups(helpers[0]), [])
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)

    @staticmethod
    def wchar(pid):
        with open("/proc/%d/io" % pid) as f:
            return int(next(l for l in f if l.startswith("wchar:")).split()[1])

    @staticmethod
    def run_cgroups(helper):
        try:
            with open("/etc/sbx/cgroup-root") as f:
                rel = f.read().strip()
        except OSError:
            return []
        found = []
        for ctrl in ("", "memory", "pids", "cpu"):
            d = os.path.join("/sys/fs/cgroup", ctrl, rel)
            if os.path.isdir(d):
                found += [ctrl + ":" + e for e in os.listdir(d)
                          if e.startswith("sbx-%d-" % helper)]
        return found


class InputDirOracle(unittest.TestCase):
    """input_dir must not tell a caller what exists where it cannot look:
    a name that exists (not the caller's, or not a directory) and one that
    does not get the same code and message, byte for byte, directly or
    through a link from the caller's own directory."""

    def test_existing_and_missing_names_get_one_answer(self):
        import shutil
        import tempfile
        mine = tempfile.mkdtemp(prefix="sbx-oracle-")
        self.addCleanup(shutil.rmtree, mine, True)
        for name, target in (("to-dir", "/usr/share"), ("to-file", "/usr/bin/env"),
                             ("to-nothing", "/usr/share/no-such-name-%d" % os.getpid())):
            os.symlink(target, os.path.join(mine, name))
        srv = Server(input_dirs=["/usr", mine])
        self.addCleanup(srv.cleanup)
        answers = {}
        with srv.conn() as c:
            for d in ("/usr/share", "/usr/bin/env", "/usr/share/no-such-name-%d" % os.getpid(),
                      "/usr/no-such-dir/x", os.path.join(mine, "to-dir"),
                      os.path.join(mine, "to-file"), os.path.join(mine, "to-nothing"),
                      "/etc", "/etc/no-such-name"):
                code, msg, _ = c.call("CreateRun", pb.CreateRunRequest(
                    policy_json=policy_json(), input_dir=d), pb.CreateRunResponse)
                answers[d] = (code, msg)
        self.assertEqual(len(set(answers.values())), 1, json.dumps(answers, indent=1))
        code, msg = answers["/usr/share"]
        self.assertEqual(code, "PERMISSION_DENIED")
        self.assertIn("input_dir", msg)
        self.assertEqual(srv.stop(), 0)


if __name__ == "__main__":
    unittest.main()
