# SPDX-License-Identifier: Apache-2.0
"""The Python SDK as a developer gets it: packaging/build-python.sh's wheel
and sdist, each pip-installed into a fresh venv made here (no system
site-packages, no index: protobuf, setuptools and wheel come from a
wheelhouse of Debian's files; no protoc on PATH; nothing of the checkout on
sys.path), driving the Sandbox API (E2B's shape) and its asyncio twin
against a real sbxd over ipc and TLS: commands with callbacks, background
commands, files into /data between commands, /out read, listed and
downloaded with sha256 checked, the reconciliation example giving what
sbxctl run gives, a three-step run where each step reads the last one's
/out. Then `python3 -m sbx_client run` as sbxctl run: its defaults with no
--policy, the warning without --out, the same flags and results, and
Ctrl-C: the first reaches the script and /out is still fetched, the second
kills, never a traceback.

test_per_exec_options_need_the_server_side (env, timeout, streamed stdin)
needs the server's side of ExecRequest.env/timeout_seconds/stdin_stream and
WriteStdin (issue 20, part B)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyvenv  # noqa: E402
from sbxdfix import CLI, POLICY, ServerTestCase  # noqa: E402

SOURCE = pyvenv.SOURCE
EXAMPLE = os.path.join(SOURCE, "packaging", "examples", "reconcile")
SCENARIOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sdk_scenarios.py")
NO_OUT = ("warning: no --out given: the run's /out is dropped at teardown "
          "(give --out DIR to keep it)")
SHARED = {}


def setUpModule():
    work = tempfile.mkdtemp(prefix="sbx-test-sdk-")
    os.chmod(work, 0o755)
    SHARED["work"] = work
    sdist, wheel = pyvenv.build_dist(os.path.join(work, "dist"))
    wheels = pyvenv.wheelhouse(os.path.join(work, "wheelhouse"))
    home = os.path.join(work, "home")
    os.mkdir(home)
    SHARED.update(sdist=sdist, wheel=wheel, home=home)
    for name, pkg in (("wheel", wheel), ("sdist", sdist)):
        venv = os.path.join(work, "venv-" + name)
        SHARED["py-" + name] = pyvenv.make_venv(venv, pkg, wheels, home)
        SHARED["env-" + name] = pyvenv.clean_env(venv, home)


def tearDownModule():
    shutil.rmtree(SHARED.get("work", "/nonexistent"), ignore_errors=True)


class SdkCase(ServerTestCase):
    def conn(self, tls):
        if not tls:
            return {"endpoint": self.srv.ipc}
        return {"endpoint": self.srv.tls, "token": self.srv.tokens["alice"],
                "tls": {"ca": self.srv.path("ca.pem"), "cert": self.srv.path("client.pem"),
                        "key": self.srv.path("client.key"), "server_name": "localhost"}}

    def scenario(self, name, venv="wheel", tls=False, **extra):
        cfg = {"scenario": name, "name": "%s-%s-%s" % (name, venv, "tls" if tls else "ipc"),
               "work": SHARED["work"], "policy": POLICY, "example": EXAMPLE, **self.conn(tls),
               **extra}
        r = subprocess.run([SHARED["py-" + venv], SCENARIOS, json.dumps(cfg)],
                           capture_output=True, text=True, env=SHARED["env-" + venv],
                           cwd=SHARED["home"], timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(r.stdout)
        venv_dir = os.path.dirname(os.path.dirname(SHARED["py-" + venv]))
        # The package pip installed, not the checkout's.
        self.assertTrue(got["module"].startswith(venv_dir + "/"), got["module"])
        return got

    def runs_left(self):
        r = self.srv.cli("runs", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        return [x["run_id"] for x in json.loads(r.stdout).get("runs", [])]


class Packages(unittest.TestCase):
    def test_the_sdist_carries_protos_and_generated_code_the_wheel_the_code(self):
        with tarfile.open(SHARED["sdist"]) as t:
            names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
        for need in ("proto/sbx/v1/sandbox.proto", "proto/sbx/v1/policy.proto",
                     "sbx_client/_pb/sandbox_pb2.py", "sbx_client/_pb/policy_pb2.py",
                     "sbx_client/py.typed", "sbx_client/sandbox.py", "pyproject.toml"):
            self.assertIn(need, names)
        with zipfile.ZipFile(SHARED["wheel"]) as z:
            wnames = set(z.namelist())
            meta = [z.read(n).decode() for n in wnames if n.endswith(".dist-info/METADATA")][0]
        for need in ("sbx_client/_pb/sandbox_pb2.py", "sbx_client/py.typed",
                     "sbx_client/aio_sandbox.py"):
            self.assertIn(need, wnames)
        self.assertRegex(meta, r"Requires-Dist: protobuf ?\(?<7,>=3\.20|"
                               r"Requires-Dist: protobuf ?\(?>=3\.20,<7")
        # Generated code is never in git.
        r = subprocess.run(["git", "-C", SOURCE, "ls-files", "*_pb2.py"], capture_output=True,
                           text=True)
        if r.returncode == 0:
            self.assertEqual(r.stdout, "")

    def test_each_venv_has_its_own_protobuf_and_no_protoc(self):
        for v in ("wheel", "sdist"):
            env = SHARED["env-" + v]
            self.assertIsNone(shutil.which("protoc", path=env["PATH"]))
            r = subprocess.run([SHARED["py-" + v], "-c",
                                "import sys, google.protobuf as g, sbx_client as s; "
                                "print(g.__file__); print(s.__file__); "
                                "print(any('dist-packages' in p for p in sys.path))"],
                               capture_output=True, text=True, env=env, cwd=SHARED["home"])
            self.assertEqual(r.returncode, 0, r.stderr)
            pb, mod, system = r.stdout.split()
            venv = os.path.dirname(os.path.dirname(SHARED["py-" + v]))
            self.assertTrue(pb.startswith(venv + "/") and mod.startswith(venv + "/"), r.stdout)
            self.assertEqual(system, "False", "no system site-packages")


class SandboxApi(SdkCase):
    def check_basics(self, got):
        self.assertEqual(got["shell"], ["input\n", "err\n", 3, "exited", "exited with 3"])
        self.assertEqual(got["argv"], ["argv $HOME\n", 0, None])
        self.assertEqual(got["callbacks"], ["line1\nline2\nline3\n", "e1\n",
                                            "line1\nline2\nline3\n"])
        self.assertEqual(got["cwd_stdin"], "/tmp\nfrom stdin")
        self.assertTrue(got["background_running"])
        self.assertEqual(got["background"], ["signaled", 137, "started\n"])
        self.assertEqual(got["written_digests"], got["want_digests"])
        self.assertEqual(got["rewrite"], "INVALID_ARGUMENT")  # a path is never replaced
        self.assertEqual(got["write_out"], "INVALID_ARGUMENT")
        self.assertEqual(got["read"], "one\n")
        self.assertEqual(got["read_bytes_len"], 2000000)
        self.assertEqual(got["list"], [["/out/d/a.txt", 4], ["/out/d/r.bin", 2000000]])
        self.assertEqual(got["list_all"], ["/out/d/a.txt", "/out/d/r.bin", "/out/t.txt"])
        self.assertEqual(got["exists"], [True, False])
        self.assertEqual(got["download_local"], got["listed_digests"])
        self.assertEqual(sorted(got["download_local"]), ["a.txt", "r.bin"])
        self.assertTrue(got["killed"])
        self.assertEqual(got["manifest_inputs"], ["big.bin", "in.txt", "late.bin",
                                                  "sub/text.txt"])
        self.assertFalse(got["is_running_after"])

    def test_the_api_from_the_wheel_over_ipc(self):
        self.check_basics(self.scenario("basics", "wheel", tls=False))
        self.assertEqual(self.runs_left(), [])

    def test_the_api_from_the_sdist_over_tls(self):
        self.check_basics(self.scenario("basics", "sdist", tls=True))

    def test_the_asyncio_twin(self):
        got = self.scenario("asyncio", "wheel", tls=True)
        self.assertEqual(got["gather"], ["A0\n", "A1\n", "A2\n"])
        self.assertEqual(got["async_callback"], "x\ny\n")
        self.assertEqual(got["async_background"], "signaled")
        self.assertEqual(got["async_read"], "made\n")
        self.assertEqual(got["async_list"], ["/out/m.txt"])
        self.assertTrue(got["async_killed"])

    def test_the_reconciliation_example_as_sbxctl_gives_it(self):
        c_out = os.path.join(SHARED["work"], "recon-c")
        r = self.srv.cli("run", "--policy", os.path.join(EXAMPLE, "policy.json"), "--data",
                         EXAMPLE, "--out", c_out, "--", "/usr/bin/python3", "/data/reconcile.py")
        self.assertEqual(r.returncode, 0, r.stderr)
        want = {n: open(os.path.join(c_out, n)).read() for n in sorted(os.listdir(c_out))}
        self.assertEqual(sorted(want), ["report.csv", "summary.json"])
        for venv, tls in (("wheel", False), ("sdist", True)):
            got = self.scenario("reconcile", venv, tls=tls)
            self.assertEqual(got["exit_code"], 0)
            self.assertEqual(got["stdout"], r.stdout)
            self.assertEqual(got["out"], want)

    def test_three_steps_each_reading_the_last_ones_out(self):
        got = self.scenario("three_steps", "sdist", tls=False)
        self.assertEqual(got["codes"], [0, 0, 0])
        self.assertEqual(got["final"], "total=55 from 10 lines\n")
        self.assertEqual(got["inputs"], ["step1.txt", "step2.txt"])

    def test_per_exec_options_need_the_server_side(self):
        """env over the policy's (HOME=/tmp by default), a timeout shorter
        than script_seconds, stdin streamed by WriteStdin (part B)."""
        got = self.scenario("per_exec", "wheel", tls=False)
        self.assertEqual(got["env"], "hi-/tmp\n")
        self.assertEqual(got["timeout"], ["timeout", 124])
        self.assertEqual(got["stdin_stream"][0], got["stdin_stream"][1])
        self.assertEqual(got["stdin_iter"], "5")


class Cli(SdkCase):
    def module(self, *args, venv="wheel"):
        return [SHARED["py-" + venv], "-m", "sbx_client", "run", "--endpoint", self.srv.ipc,
                *args]

    def run_module(self, *args, timeout=120):
        return subprocess.run(self.module(*args), capture_output=True, text=True,
                              env=SHARED["env-wheel"], cwd=SHARED["home"], timeout=timeout)

    def start_and_wait_ready(self, script, out):
        p = subprocess.Popen(self.module("--out", out, "--", "/bin/sh", "-c", script),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=SHARED["env-wheel"], cwd=SHARED["home"])
        got = []
        t = threading.Thread(target=lambda: got.append(p.stdout.readline()), daemon=True)
        t.start()
        t.join(120)  # a guard against hanging, far above the second it takes
        if got != [b"ready\n"]:
            p.kill()
            _, err = p.communicate()
            self.fail("the script never said ready: %r %r" % (got, err.decode()))
        return p

    def test_first_ctrl_c_reaches_the_script_and_out_is_fetched(self):
        out = os.path.join(SHARED["work"], "int-out")
        p = self.start_and_wait_ready(
            "trap 'echo got-INT > /out/int.txt; exit 7' INT; echo partial > /out/p.txt; "
            "echo ready; while :; do sleep 0.1; done", out)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        err = err.decode()
        self.assertEqual(p.returncode, 130, err)
        self.assertNotIn("Traceback", err)
        self.assertIn("sbx: SIGINT: passed to the command (another one kills it)", err)
        self.assertIn("sbx: interrupted: fetching what is in /out into %s" % out, err)
        with open(os.path.join(out, "int.txt")) as f:
            self.assertEqual(f.read(), "got-INT\n", "the script got SIGINT and wrote /out")
        with open(os.path.join(out, "p.txt")) as f:
            self.assertEqual(f.read(), "partial\n")
        self.assertEqual(self.runs_left(), [])

    def test_second_ctrl_c_kills_the_command(self):
        out = os.path.join(SHARED["work"], "int2-out")
        p = self.start_and_wait_ready("trap '' INT; echo ready; while :; do sleep 0.1; done",
                                      out)
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)  # the first is passed on (and ignored by the script)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        err = err.decode()
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("sbx: killing the command", err)
        self.assertNotIn("Traceback", err)
        self.assertEqual(self.runs_left(), [])

    def test_no_policy_means_sbxctls_defaults_and_no_out_is_warned(self):
        r = self.run_module("--", "/bin/sh", "-c", "echo hi; cat /proc/self/status | "
                            "grep -c NoNewPrivs:.1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "hi\n1\n")
        self.assertIn("sbx: " + NO_OUT, r.stderr)
        r = self.run_module("--print-policy")
        self.assertEqual(json.loads(r.stdout), {"image": "host"})
        r = self.run_module("--print-policy", "--memory", "512m", "-e", "A=b", "--timeout",
                            "2m", "--cpus", "1.5", "--allow", "api.internal:443")
        self.assertEqual(json.loads(r.stdout), {
            "image": "host", "env": {"A": "b"},
            "limits": {"memory_mb": 512, "script_seconds": 120, "cpu": 1.5},
            "egress": {"policy": "allowlist", "allow": ["api.internal:443"]}})
        r = self.run_module("--memory", "12q", "--", "true")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--memory 12q: unknown unit 'q'", r.stderr)

    def test_the_same_flags_as_sbxctl_run(self):
        def longs(text):
            return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+|-[a-z])\b", text))
        c_run = subprocess.run([CLI, "run", "--help"], capture_output=True, text=True).stdout
        c_all = subprocess.run([CLI, "--help"], capture_output=True, text=True).stdout
        py = subprocess.run(self.module("--help")[:4] + ["--help"], capture_output=True,
                            text=True, env=SHARED["env-wheel"]).stdout
        want, have = longs(c_run), longs(py)
        self.assertIn("--memory", want)
        self.assertEqual(want - have, set(), "sbxctl run's flags the Python CLI lacks")
        extra = have - want - longs(c_all) - {"--tty", "-t", "--version", "-m"}
        self.assertEqual(extra, set(), "flags sbxctl run does not have")

    def test_the_same_results_as_sbxctl_run(self):
        for args, status in ((["--timeout", "1", "--", "sleep", "10"], 124),
                             (["--", "nosuchcommand"], 127),
                             (["--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"], 3),
                             (["--memory", "8m", "--", "true"], 125)):
            c = self.srv.cli("run", *args)
            p = self.run_module(*args)

            def said(text, prefix):
                return [ln[len(prefix):] for ln in text.splitlines()
                        if ln.startswith(prefix) and "warning: no --out" not in ln]
            self.assertEqual((c.returncode, p.returncode), (status, status), (args, c, p))
            self.assertEqual(p.stdout, c.stdout, args)
            self.assertEqual(said(p.stderr, "sbx: "), said(c.stderr, "sbxctl: "), args)
            self.assertEqual([ln for ln in p.stderr.splitlines() if not ln.startswith("sbx: ")],
                             [ln for ln in c.stderr.splitlines()
                              if not ln.startswith("sbxctl: ")], args)


if __name__ == "__main__":
    unittest.main()
