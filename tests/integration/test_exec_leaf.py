# SPDX-License-Identifier: Apache-2.0
"""Each exec's processes live in its own cgroup leaf (exec-N under the run's
sbx-PID-XXXXXXXX) from the command's first instruction, however exec init got
there: born in it on cgroup v2 (clone3's CLONE_INTO_CGROUP, the run's
--timings mark in_leaf), or joining it after birth (v1, or clone3 refused:
an old kernel, Docker's seccomp profile), and confined the same either way."""
import json
import os
import subprocess
import time

from sbxtest import HELPER, SOURCE_DIR, PYTHON, SandboxTest, policy, run_tests

NO_CLONE3 = os.path.join(SOURCE_DIR, "tests", "vm", "no_clone3.py")
MARKER = "sbx-exec-leaf-4242"
# Prints what confines it, then holds until the test has looked at it.
HOLD = ("grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; "
        "while [ ! -e /data/go ]; do sleep 0.05; done")


def command_pid():
    """The held command (/bin/sh with MARKER as its $0), not the helper
    whose own argv carries the marker too."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0] == b"/bin/sh" and MARKER.encode() in argv:
            return int(pid)
    return None


def cgroups_of(pid, tid=None):
    """{hierarchy: path} from /proc/PID/cgroup (or PID's task TID): "" for
    v2's, each controller's name for v1's."""
    out = {}
    where = "/proc/%d/task/%d/cgroup" % (pid, tid) if tid else "/proc/%d/cgroup" % pid
    with open(where) as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                out[c] = path
    return out


def every_task(pid):
    """{(pid, tid): cgroups} for each thread of the command and of its
    parent, exec init: v1 moves exec init's one thread (`tasks`), so a
    thread of either outside the leaf would be a process half in it."""
    with open("/proc/%d/stat" % pid) as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    return {(p, int(t)): cgroups_of(p, int(t))
            for p in (pid, ppid) for t in os.listdir("/proc/%d/task" % p)}


class ExecLeaf(SandboxTest):
    def held_run(self, wrapper=(), extra=()):
        """Runs HOLD with --timings; returns (rc, stdout, stderr, the
        cgroups of every thread of the command and of exec init, the timing
        marks, result)."""
        timings = os.path.join(self.tmp, "timings")
        result = os.path.join(self.tmp, "result.json")
        cmd = list(wrapper) + [HELPER, "run", "--policy", self.write_policy(policy()),
                               "--data", self.data, "--result", result,
                               "--timings", timings] + list(extra) + \
            ["--", "/bin/sh", "-c", HOLD, MARKER]
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        cgroups = None
        try:
            deadline = time.monotonic() + 60
            while cgroups is None and time.monotonic() < deadline and p.poll() is None:
                pid = command_pid()
                try:
                    cgroups = every_task(pid) if pid else None
                except OSError:
                    pass
                time.sleep(0.02)
        finally:
            open(os.path.join(self.data, "go"), "w").close()
            out, err = p.communicate(timeout=60)
        marks = {}
        if os.path.exists(timings):
            with open(timings) as f:
                marks = dict(line.split() for line in f if line.strip())
        res = None
        if os.path.exists(result):
            with open(result) as f:
                res = json.load(f)
        return p.returncode, out.decode(), err.decode(), cgroups, marks, res

    def assert_in_leaf_and_confined(self, rc, out, err, cgroups, marks, res):
        self.assertEqual(rc, 0, err)
        self.assertIsNotNone(cgroups, "the command was never seen: " + err)
        mode = res["enforced"]["cgroup"]
        hierarchies = {"v2": [""], "v1": ["memory", "pids", "cpu"]}[mode]
        self.assertEqual(len({pid for pid, _ in cgroups}), 2, cgroups)
        for task, groups in cgroups.items():
            for h in hierarchies:
                self.assertRegex(groups.get(h, ""), r"/sbx-\d+-[0-9a-f]{8}/exec-\d+$",
                                 "task %s, hierarchy %r: %s" % (task, h, groups))
        self.assertIn("Seccomp:\t2", out)
        self.assertIn("NoNewPrivs:\t1", out)
        self.assertIn("CapEff:\t0000000000000000", out)
        self.assertIn("joined", marks)
        return mode

    def test_exec_is_in_its_leaf(self):
        r = self.held_run()
        mode = self.assert_in_leaf_and_confined(*r)
        # Born in the leaf on v2; v1 has no such clone and joins.
        self.assertEqual("in_leaf" in r[4], mode == "v2", r[4])

    def test_clone3_refused_still_joins_its_leaf(self):
        # clone3 refused as Docker's profile does (ENOSYS): exec init falls
        # back to clone and joins its leaf. no_new_privs comes with the
        # unprivileged filter, so newuidmap is out: the caller's own uid.
        r = self.held_run(wrapper=[PYTHON, NO_CLONE3], extra=["--host-uids", "shared"])
        self.assert_in_leaf_and_confined(*r)
        self.assertNotIn("in_leaf", r[4])


if __name__ == "__main__":
    run_tests()
