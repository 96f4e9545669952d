# SPDX-License-Identifier: Apache-2.0
"""Invariant 6: ephemerality. After a run, whichever way it ended, no process,
cgroup, mount or file of it remains on the host, and nothing of one run is
visible to the next. Bad policies are refused before anything is made.

sbx-helper alone cannot clean up after its own SIGKILL: its sandbox dies with
it (PR_SET_PDEATHSIG), but the run's cgroup directories stay until someone
removes them. Removing what a killed helper left is sbxd's job at restart
(DESIGN.md, Invariant 6), so that case only checks the processes (and tidies
the cgroups itself so the suite leaves nothing behind)."""
import glob
import json
import os
import signal
import subprocess
import time

from sbxtest import HELPER, PYTHON, Run, SandboxTest, policy, run_tests, procs_with

CG_ROOT_CONFIG = "/etc/sbx/cgroup-root"
CONTROLLERS = ("memory", "pids", "cpu")


def cgroup_rel():
    try:
        with open(CG_ROOT_CONFIG) as f:
            rel = f.read().strip()
    except OSError:
        return None
    return rel or None


def run_cgroups(helper_pid):
    """The run cgroup directories (sbx-<helper pid>-<hex>) under the delegated
    root, in every v1 controller (or the v2 tree)."""
    rel = cgroup_rel()
    if rel is None:
        return []
    bases = [os.path.join("/sys/fs/cgroup", c, rel) for c in CONTROLLERS]
    bases.append(os.path.join("/sys/fs/cgroup", rel))  # v2
    found = []
    for b in bases:
        found += glob.glob(os.path.join(b, "sbx-%d-*" % helper_pid))
    return sorted(set(found))


def remove_cgroups(paths):
    for p in paths:
        for sub in sorted(glob.glob(os.path.join(p, "*/")), reverse=True):
            try:
                os.rmdir(sub)
            except OSError:
                pass
        try:
            os.rmdir(p)
        except OSError:
            pass


def mounts():
    with open("/proc/self/mountinfo") as f:
        return set(f.read().splitlines())


def _mine(d, keep):
    found = set()
    for e in os.listdir(d):
        try:
            if keep(e) and os.lstat(os.path.join(d, e)).st_uid == os.getuid():
                found.add(e)
        except OSError:
            pass
    return found


def host_entries():
    """This uid's sbx* entries in /tmp (but the harness's own sbx-test-* temp
    dirs, and sbxdfix's sbxd-test-* of sbxd tests ctest runs beside this one)
    and all of its entries in /dev/shm. Only this uid's: builds running next
    to the suite leave their own sbx-* temporaries in /tmp."""
    tmp = _mine("/tmp", lambda e: e.startswith("sbx") and not e.startswith("sbx-test-")
                and not e.startswith("sbxd-test-"))
    shm = _mine("/dev/shm", lambda e: True)
    return tmp, shm


class Cleanup(SandboxTest):
    def setUp(self):
        super().setUp()
        self.marker = "%d.%d" % (1000 + os.getpid() % 1000, int(time.time() * 1000) % 100000)
        self.leftover_cgroups = []

    def tearDown(self):
        remove_cgroups(self.leftover_cgroups)
        super().tearDown()

    def start(self, argv, pol=None, extra=(), out=None, result=True):
        """Starts sbx-helper; returns (Popen, result path)."""
        pol_path = self.write_policy(pol if pol is not None else policy())
        result_path = os.path.join(self.tmp, "result.json")
        if os.path.exists(result_path):
            os.unlink(result_path)
        cmd = [HELPER, "run", "--policy", pol_path]
        if result:
            cmd += ["--result", result_path]
        cmd += ["--data", self.data]
        if out:
            cmd += ["--out", out]
        cmd += list(extra) + ["--"] + list(argv)
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        return p, result_path

    def finish(self, p, result_path, timeout=60):
        out, err = p.communicate(timeout=timeout)
        result = None
        if os.path.exists(result_path):
            with open(result_path) as f:
                result = json.load(f)
        return Run(p.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
                   result)

    def run_tracked(self, argv, **kw):
        p, rp = self.start(argv, **kw)
        return p.pid, self.finish(p, rp)

    def assert_nothing_left(self, helper_pid, before_mounts, before_entries, r=None,
                            cgroups=True):
        self.assertEqual(procs_with(self.marker), [], r)
        if cgroups:
            self.assertEqual(run_cgroups(helper_pid), [], r)
        self.assertEqual(mounts() - before_mounts, set(), r)
        tmp, shm = host_entries()
        self.assertEqual(tmp - before_entries[0], set(), r)
        self.assertEqual(shm - before_entries[1], set(), r)

    def snapshot(self):
        return mounts(), host_entries()

    def skip_unless_cgroup_root(self):
        if cgroup_rel() is None:
            self.skipTest("%s is missing: no delegated cgroup root to inspect "
                          "(packaging/setup.sh writes it)" % CG_ROOT_CONFIG)

    # ---- each way a run can end ----

    def test_successful_run_leaves_nothing(self):
        self.skip_unless_cgroup_root()
        m, e = self.snapshot()
        # A background child outlives the command unless the sandbox kills it.
        pid, r = self.run_tracked(["/bin/sh", "-c", "sleep %s & echo started" % self.marker])
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.stdout, "started\n")
        self.assertIn(r.result["enforced"]["cgroup"], ("v1", "v2"), r)
        self.assert_nothing_left(pid, m, e, r)

    def test_setup_failure_before_the_sandbox_leaves_nothing(self):
        m, e = self.snapshot()
        pid, r = self.run_tracked(["/bin/sleep", self.marker], extra=["--cgroup-root", "no/such"])
        self.assertEqual(r.rc, 125, r)
        self.assertTrue(r.stderr.startswith("sbx-helper: "), r)
        self.assertEqual(r.result["exit_reason"], "setup_failed", r)
        self.assert_nothing_left(pid, m, e, r)

    def test_setup_failure_inside_the_sandbox_leaves_nothing(self):
        # The run cgroup and the namespaces exist when building the root
        # fails: an image directory that cannot be opened.
        self.skip_unless_cgroup_root()
        img = os.path.join(self.tmp, "image")
        os.mkdir(img, 0)
        try:
            m, e = self.snapshot()
            pid, r = self.run_tracked(["/bin/sleep", self.marker], pol=policy(image=img))
        finally:
            os.chmod(img, 0o755)
        self.assertEqual(r.rc, 125, r)
        self.assertTrue(r.stderr.startswith("sbx-helper: "), r)
        self.assertIn(img, r.stderr)
        self.assertEqual(r.result["exit_reason"], "setup_failed", r)
        self.assert_nothing_left(pid, m, e, r)

    def test_timeout_leaves_nothing(self):
        self.skip_unless_cgroup_root()
        m, e = self.snapshot()
        pid, r = self.run_tracked(["/bin/sh", "-c", "sleep %s & exec sleep %s" % (
            self.marker, self.marker)], pol=policy(limits={"script_seconds": 1}))
        self.assertEqual(r.rc, 124, r)
        self.assertEqual(r.result["exit_reason"], "timeout", r)
        self.assert_nothing_left(pid, m, e, r)

    def test_oom_leaves_nothing(self):
        self.skip_unless_cgroup_root()
        m, e = self.snapshot()
        bomb = ("import sys, subprocess\n"
                "subprocess.Popen(['/bin/sleep', sys.argv[1]])\n"
                "a = []\n"
                "while True: a.append(bytearray(1 << 20))\n")
        pid, r = self.run_tracked([PYTHON, "-c", bomb, self.marker],
                                  pol=policy(limits={"memory_mb": 32}))
        self.assertEqual(r.rc, 137, r)
        self.assertEqual(r.result["exit_reason"], "oom", r)
        self.assert_nothing_left(pid, m, e, r)

    def test_sigterm_to_the_helper_leaves_nothing(self):
        self.skip_unless_cgroup_root()
        m, e = self.snapshot()
        p, rp = self.start(["/bin/sh", "-c", "sleep %s & exec sleep %s" % (self.marker,
                                                                          self.marker)])
        self._wait_for_command(p)
        # While it runs, the run cgroup is there in every controller (so the
        # check below is not vacuous).
        live = run_cgroups(p.pid)
        v1 = os.path.isdir(os.path.join("/sys/fs/cgroup/memory", cgroup_rel()))
        self.assertEqual(len(live), len(CONTROLLERS) if v1 else 1, live)
        p.send_signal(signal.SIGTERM)
        r = self.finish(p, rp)
        self.assertEqual(r.rc, 128 + signal.SIGTERM, r)
        self.assertEqual(r.result["exit_reason"], "signaled", r)
        self.assert_nothing_left(p.pid, m, e, r)

    def _wait_for_command(self, p):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if any(cmd.startswith("sleep " + self.marker) for _, cmd in procs_with(self.marker)):
                return
            self.assertIsNone(p.poll(), "the helper ended before the command started")
            time.sleep(0.02)
        self.fail("the command did not start within 20 s")

    def test_sigkill_of_the_helper_kills_its_processes(self):
        m, e = self.snapshot()
        p, rp = self.start(["/bin/sh", "-c", "sleep %s & exec sleep %s" % (self.marker,
                                                                          self.marker)])
        self._wait_for_command(p)
        self.assertGreaterEqual(len(procs_with(self.marker)), 4)  # helper, pid 1, init, sleeps
        p.kill()
        p.communicate(timeout=10)
        self.assertEqual(p.returncode, -signal.SIGKILL)
        deadline = time.monotonic() + 1.0
        while procs_with(self.marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(procs_with(self.marker), [])
        # A killed helper cannot remove its run cgroup: that is sbxd's job at
        # restart. Tidy it here; everything else must already be gone.
        self.leftover_cgroups = run_cgroups(p.pid)
        self.assert_nothing_left(p.pid, m, e, cgroups=False)
        self.assertFalse(os.path.exists(rp))

    # ---- one run to the next ----

    def test_nothing_of_a_run_is_visible_to_the_next(self):
        out = os.path.join(self.tmp, "outdir")
        secret = "s3cr3t-%s" % self.marker
        r = self.sh("echo %s > /tmp/secret && echo %s > /out/secret && "
                    "echo %s > /dev/shm/secret && echo written" % (secret, secret, secret),
                    out=out)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.stdout, "written\n")
        # /out came back to the host...
        with open(os.path.join(out, "secret")) as f:
            self.assertEqual(f.read(), secret + "\n")
        # ...but the next run's /out starts empty even with the same --out.
        r = self.py("import os\n"
                    "for p in ('/tmp/secret', '/out/secret', '/dev/shm/secret'):\n"
                    "    print(p, os.path.exists(p))\n"
                    "print(sorted(os.listdir('/tmp')), sorted(os.listdir('/out')),"
                    " sorted(os.listdir('/dev/shm')))\n", out=out)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.stdout, "/tmp/secret False\n/out/secret False\n"
                                   "/dev/shm/secret False\n[] [] []\n", r)

    # ---- bad policies make nothing ----

    BAD_POLICIES = [
        # (name, policy text, strings the message must hold)
        ("unknown top-level key", json.dumps(dict(policy(), surprise_key=1)),
         ["surprise_key", "unknown key"]),
        ("wrong type", json.dumps(policy(limits={"memory_mb": "big"})),
         ["limits.memory_mb", "integer"]),
        ("relative mount path", json.dumps(policy(mounts=[{"path": "data", "mode": "ro"}])),
         ["mounts[0].path", "absolute"]),
        ("duplicate mount path", json.dumps(policy(mounts=[{"path": "/out", "mode": "rw"},
                                                           {"path": "/out", "mode": "rw"}])),
         ["mounts[1].path", "duplicate"]),
        ("memory_mb 0", json.dumps(policy(limits={"memory_mb": 0})),
         ["limits.memory_mb", "16..1048576"]),
        ("memory_mb 99999999", json.dumps(policy(limits={"memory_mb": 99999999})),
         ["limits.memory_mb", "16..1048576"]),
        ("env name with =", json.dumps(policy(env={"A=B": "x"})), ["env.A=B", "'='"]),
        ("script_seconds 0", json.dumps(policy(limits={"script_seconds": 0})),
         ["limits.script_seconds", "1..86400"]),
    ]

    def _bad_policy(self, text):
        before_mounts, before_entries = self.snapshot()
        out = os.path.join(self.tmp, "not-yet-out")
        pol_path = self.write_policy(text, name="bad.json")
        result_path = os.path.join(self.tmp, "bad-result.json")
        p = subprocess.Popen([HELPER, "run", "--policy", pol_path, "--out", out, "--result",
                              result_path, "--data", self.data, "--", "/bin/sleep",
                              self.marker],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        o, e = p.communicate(timeout=30)
        r = Run(p.returncode, o.decode(errors="replace"), e.decode(errors="replace"), None)
        self.assertEqual(r.rc, 125, r)
        self.assertTrue(r.stderr.startswith("sbx-helper: "), r)
        self.assertEqual(r.stderr.count("\n"), 1, r)  # one line says why
        self.assertEqual(r.stdout, "", r)
        self.assertFalse(os.path.lexists(out), r)
        # Refused before the run exists; the result says why, and is the
        # only file written (no temporary left beside it).
        with open(result_path) as f:
            res = json.load(f)
        self.assertEqual(res["exit_reason"], "setup_failed", res)
        self.assertEqual(res["exit_code"], 125, res)
        self.assertIn(res["message"], r.stderr, res)
        self.assertEqual([f for f in os.listdir(self.tmp) if f.startswith("bad-result")],
                         ["bad-result.json"])
        self.assert_nothing_left(p.pid, before_mounts, before_entries, r)
        return r

    def test_bad_policies_are_refused_and_make_nothing(self):
        for name, text, needles in self.BAD_POLICIES:
            with self.subTest(policy=name):
                r = self._bad_policy(text)
                for n in needles:
                    self.assertIn(n, r.stderr)

    def test_env_name_with_nul_is_refused_and_makes_nothing(self):
        r = self._bad_policy(json.dumps(policy(env={"A\u0000B": "x"})))
        msg = r.stderr.lower()
        self.assertTrue("env" in msg or "nul" in msg, r)


if __name__ == "__main__":
    run_tests()
