# SPDX-License-Identifier: Apache-2.0
"""The sbxctl CLI through the real sbxd: runs without a policy file, the
container-style flags and --print-policy against `policy check`, options
ending at the command, the messages a user must see (a missing or
non-executable command, an unwritable --out, no server), Ctrl-C reaching a
script's KeyboardInterrupt handler, --json, and wait/logs/fetch -/put."""
import json
import os
import signal
import subprocess
import time
import unittest

from sbxdfix import CLI, ServerTestCase, policy_json


class CliTest(ServerTestCase):
    def cli(self, *args, **kw):
        kw.setdefault("timeout", 60)
        return self.srv.cli(*args, **kw)

    def ok(self, *args, **kw):
        r = self.cli(*args, **kw)
        self.assertEqual(r.returncode, 0, r)
        return r

    def tmp(self, name, text=None):
        p = os.path.join(self.srv.dir, name)
        if text is not None:
            with open(p, "w") as f:
                f.write(text)
        return p

    def run_ids(self):
        return [r["run_id"] for r in json.loads(self.ok("runs", "--json").stdout).get("runs", [])]

    def create(self, *flags):
        run = self.ok("create", *flags).stdout.strip()
        self.addCleanup(self.cli, "teardown", run)
        return run

    # -- 1. policy defaults, flags, --print-policy
    def test_print_policy_is_what_policy_check_says(self):
        env_file = self.tmp("e.env", "# a comment\n\n  B=two words \nUNSET_HERE\nFROM_CALLER\n")
        base = self.tmp("base.json", policy_json())
        for flags in ([],
                      ["-e", "A=1", "--env", "FROM_CALLER", "--env-file", env_file,
                       "--memory", "512m", "--cpus", "1.5", "--timeout", "1m",
                       "--run-timeout", "1h", "--pids", "99", "--image", "host",
                       "--allow", "example.com:443", "--out-mb", "3", "--tmp-mb", "4"],
                      ["--policy", base, "--memory", "1g", "-e", "Z=9"]):
            r = self.cli("run", "--print-policy", *flags, "true",
                         env={"FROM_CALLER": "caller's"})
            self.assertEqual(r.returncode, 0, r)
            saved = self.tmp("printed.json", r.stdout)
            check = self.ok("policy", "check", saved)
            self.assertEqual(check.stdout, r.stdout + r.stderr)
            self.assertRegex(r.stderr, r"^digest sha256:[0-9a-f]{64}\n$")
        # The last one: the file with the flags over it.
        p = json.loads(r.stdout)
        self.assertEqual(p["limits"]["memory_mb"], 1024)
        self.assertEqual(p["limits"]["pids"], 64)  # from the file
        self.assertEqual(p["env"], {"Z": "9"})
        # No policy, no flags: the documented defaults.
        r = self.ok("create", "--print-policy")
        p = json.loads(r.stdout)
        self.assertEqual((p["image"], p["egress"]["policy"], p["limits"]["memory_mb"],
                          p["limits"]["script_seconds"], p["env"]),
                         ("host", "deny", 1024, 300, {}))

    def test_flags_reach_the_run(self):
        env_file = self.tmp("f.env", "# x\nB=two words \nFROM_CALLER\n")
        flags = ["-e", "A=1", "--env-file", env_file, "-e", "FROM_CALLER", "--memory", "300m",
                 "--timeout", "3s", "--idle-timeout", "10m", "--pids", "40"]
        mine = {"FROM_CALLER": "mine"}
        run = self.ok("create", *flags, env=mine).stdout.strip()
        self.addCleanup(self.cli, "teardown", run)
        r = self.cli("exec", run, "/bin/sh", "-c", 'echo "$A|$B|$FROM_CALLER"; sleep 30')
        # script_seconds 3: the sleep is cut (124), after the echo.
        self.assertEqual(r.returncode, 124, r)
        self.assertEqual(r.stdout, "1|two words |mine\n")
        # The run's policy is the one --print-policy shows for these flags
        # (idle_seconds given: unset, sbxd would fill in its own default).
        digest = self.ok("create", "--print-policy", *flags, env=mine).stderr.split(" ")[1]
        status = self.ok("status", run).stdout
        self.assertIn("policy %s" % digest.strip(), status)

    def test_run_without_policy_and_without_dashdash(self):
        out = self.tmp("o1")
        r = self.cli("run", "--out", out, "/bin/sh", "-c",
                     'echo "$0 $*" > /out/args; echo done', "--memory", "x")
        self.assertEqual(r.returncode, 0, r)
        self.assertEqual(r.stdout, "done\n")
        with open(os.path.join(out, "args")) as f:
            self.assertEqual(f.read(), "--memory x\n")
        r = self.cli("run", "--", "/bin/sh", "-c", "exit 3")
        self.assertEqual(r.returncode, 3, r)

    def test_bad_flags_are_usage_errors(self):
        for flags, want in ((["--memory", "1000k"], "whole number of MiB"),
                            (["--timeout", "3d"], "unknown unit 'd'"),
                            (["--cpus", "many"], "not a positive number")):
            r = self.cli("run", *flags, "true")
            self.assertEqual(r.returncode, 2, r)
            self.assertIn(want, r.stderr)
        # Out of the policy's range: the parser's own words, by JSON path.
        r = self.cli("run", "--print-policy", "--memory", "8m", "true")
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("limits.memory_mb", r.stderr)

    # -- 2. errors a user must see
    def test_missing_and_non_executable_commands_say_why(self):
        r = self.cli("run", "python4", "-c", "1")
        self.assertEqual(r.returncode, 127, r)
        self.assertIn("sbxctl: run: python4: command not found\n", r.stderr)
        r = self.cli("run", "/no/such/prog")
        self.assertEqual(r.returncode, 127, r)
        self.assertIn("sbxctl: run: /no/such/prog: No such file or directory\n", r.stderr)
        data = self.tmp("noexec")
        os.makedirs(data, exist_ok=True)
        with open(os.path.join(data, "script.sh"), "w") as f:
            f.write("#!/bin/sh\necho hi\n")
        os.chmod(os.path.join(data, "script.sh"), 0o644)
        r = self.cli("run", "--data", data, "/data/script.sh")
        self.assertEqual(r.returncode, 126, r)
        self.assertIn("sbxctl: run: /data/script.sh: cannot execute: Permission denied\n", r.stderr)
        # A command's own 127 is its own: no message from sbx.
        r = self.cli("run", "/bin/sh", "-c", "exit 127")
        self.assertEqual(r.returncode, 127, r)
        # (Only the warning that /out is dropped without --out.)
        self.assertEqual([line for line in r.stderr.splitlines() if "no --out given" not in line],
                         [])
        run = self.create()
        r = self.cli("exec", run, "nosuchcmd")
        self.assertEqual(r.returncode, 127, r)
        self.assertIn("sbxctl: exec: nosuchcmd: command not found\n", r.stderr)

    def test_unwritable_out_is_refused_before_the_run_is_created(self):
        out = self.tmp("ro-out")
        os.makedirs(out, exist_ok=True)
        os.chmod(out, 0o555)
        before = self.ok("runs").stdout
        created = len([e for e in self.srv.audit_events() if e.get("event") == "run_created"])
        r = self.cli("run", "--out", out, "/bin/sh", "-c", "echo never")
        self.assertEqual(r.returncode, 125, r)
        self.assertIn("--out %s: cannot write there: Permission denied" % out, r.stderr)
        self.assertNotIn("never", r.stdout)
        self.assertEqual(self.ok("runs").stdout, before)
        self.assertEqual(
            len([e for e in self.srv.audit_events() if e.get("event") == "run_created"]),
            created)
        self.assertEqual(os.listdir(out), [])
        r = self.cli("run", "--out", os.path.join(out, "sub"), "true")
        self.assertEqual(r.returncode, 125, r)
        self.assertIn("Permission denied", r.stderr)

    def test_no_server_says_how_to_start_one(self):
        sock = "ipc://" + self.tmp("nobody.sock")
        e = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        r = subprocess.run([CLI, "--endpoint", sock, "runs"], capture_output=True, text=True,
                           timeout=30, env=e)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("UNAVAILABLE: cannot connect to %s" % sock, r.stderr)
        self.assertIn("sbxctl: no sbxd at %s: start one with 'sbxd --listen %s'" % (sock, sock),
                      r.stderr)

    # -- 3. signals
    HANDLER = ("import sys, time\n"
               "try:\n"
               "    print('ready', flush=True)\n"
               "    time.sleep(60)\n"
               "except KeyboardInterrupt:\n"
               "    open('/out/partial.txt', 'w').write('partial\\n')\n"
               "    print('interrupted', flush=True)\n")
    IGNORER = ("import signal, time\n"
               "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
               "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
               "print('ready', flush=True)\n"
               "time.sleep(60)\n")

    def interrupted(self, argv, signals, out=None):
        """Starts the CLI, waits for the command's 'ready', sends the
        signals 0.5 s apart, and returns (exit status, stdout, stderr,
        seconds from the first signal to the exit)."""
        e = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        cmd = [CLI, "--endpoint", self.srv.ipc] + argv
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=e)
        try:
            line = p.stdout.readline()
            self.assertEqual(line, "ready\n", p.stderr.read() if not line else line)
            t0 = time.time()
            for i, sig in enumerate(signals):
                if i:
                    time.sleep(0.5)
                p.send_signal(sig)
            stdout, stderr = p.communicate(timeout=30)
            return p.returncode, line + stdout, stderr, time.time() - t0
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()

    def test_sigint_reaches_the_scripts_handler_and_out_is_fetched(self):
        out = self.tmp("int-out")
        rc, stdout, stderr, took = self.interrupted(
            ["run", "--out", out, "/usr/bin/python3", "-c", self.HANDLER], [signal.SIGINT])
        self.assertEqual(rc, 130, stderr)
        self.assertEqual(stdout, "ready\ninterrupted\n")
        self.assertIn("sbxctl: SIGINT: passed to the command", stderr)
        self.assertIn("sbxctl: interrupted: fetching what is in /out into %s before the teardown"
                      % out, stderr)
        with open(os.path.join(out, "partial.txt")) as f:
            self.assertEqual(f.read(), "partial\n")
        self.assertLess(took, 20)

    def test_a_second_sigint_kills_and_sigterm_is_143(self):
        rc, stdout, stderr, took = self.interrupted(
            ["run", "/usr/bin/python3", "-c", self.IGNORER], [signal.SIGINT, signal.SIGINT])
        self.assertEqual(rc, 130, stderr)
        self.assertIn("sbxctl: killing the command", stderr)
        self.assertLess(took, 20)  # not the script's 60 s
        run = self.create()
        rc, stdout, stderr, took = self.interrupted(
            ["exec", run, "/usr/bin/python3", "-c", self.HANDLER.replace("/out/partial.txt",
                                                                         "/tmp/p")],
            [signal.SIGTERM])
        # SIGTERM has no handler in the script: it dies of it, and sbxctl says 143.
        self.assertEqual(rc, 143, stderr)
        self.assertIn("sbxctl: SIGTERM: passed to the command", stderr)
        st = self.ok("status", run).stdout
        self.assertRegex(st, r"SIGNALED 15")

    # -- 4. --json
    def test_status_json_policy_goes_back_to_policy_check(self):
        run = json.loads(self.ok("create", "--json", "--memory", "200m", "-e", "K=v",
                                 "--allow", "example.com:443").stdout)["run_id"]
        self.addCleanup(self.cli, "teardown", run)
        self.assertIn(run, self.run_ids())
        st = json.loads(self.ok("status", run, "--json").stdout)
        self.assertEqual(st["state"], "created")  # lower case, as the policy writes enums
        self.assertIsInstance(st["created_unix_ms"], int)
        saved = self.tmp("status-policy.json", json.dumps(st["policy"]))
        check = self.ok("policy", "check", saved).stdout
        doc, digest = check.rsplit("\n", 2)[0:2]
        self.assertEqual(json.loads(doc), st["policy"])
        self.assertEqual(digest, "digest " + st["policy_digest"])
        # policy check --json: the same document and digest in one object.
        pj = json.loads(self.ok("policy", "check", saved, "--json").stdout)
        self.assertEqual((pj["policy"], pj["digest"]), (st["policy"], st["policy_digest"]))
        # And the document runs as it is.
        r = self.cli("create", "--policy", saved, "--json")
        self.assertEqual(r.returncode, 0, r)
        self.cli("teardown", json.loads(r.stdout)["run_id"])

    def test_run_and_exec_json_result(self):
        out = self.tmp("json-out")
        r = self.cli("run", "--json", "--out", out, "/bin/sh", "-c",
                     "echo to-stdout; echo to-stderr >&2; printf abc > /out/a.txt; exit 3")
        self.assertEqual(r.returncode, 3, r)
        res = json.loads(r.stdout)  # the object alone: the command's stdout went to stderr
        self.assertIn("to-stdout\n", r.stderr)
        self.assertIn("to-stderr\n", r.stderr)
        self.assertEqual((res["reason"], res["exit_code"], res["exit_status"]), ("exited", 3, 3))
        for k in ("wall_ms", "cpu_ms", "peak_memory_bytes", "stdout_bytes", "started_unix_ms"):
            self.assertIsInstance(res[k], int, k)
        self.assertEqual(res["stdout_bytes"], len("to-stdout\n"))
        self.assertIs(res["stdout_truncated"], False)
        self.assertEqual(res["interrupted_by_signal"], 0)
        self.assertEqual(res["argv"][0], "/bin/sh")
        arts = {a["path"]: a for a in res["artifacts"]}
        self.assertEqual(arts["a.txt"]["size"], 3)
        self.assertEqual(arts["a.txt"]["sha256"],
                         "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        self.assertIs(res["artifacts_listing"]["live"], False)
        with open(os.path.join(out, "a.txt")) as f:
            self.assertEqual(f.read(), "abc")
        run = self.create("--policy", self.tmp("p64.json", policy_json()))  # output_kb 64
        r = self.cli("exec", run, "--json", "/bin/sh", "-c", "head -c 100000 /dev/zero")
        self.assertEqual(r.returncode, 0, r)
        res = json.loads(r.stdout)
        self.assertEqual((res["run_id"], res["reason"], res["stdout_bytes"]),
                         (run, "exited", 100000))
        self.assertIs(res["stdout_truncated"], True)
        r = self.cli("exec", run, "--no-wait", "--json", "true")
        ids = json.loads(r.stdout)
        self.assertEqual(ids["run_id"], run)
        self.assertRegex(ids["exec_id"], r"^\S+$")

    # -- 5. wait, logs, fetch -, put
    def test_wait_and_logs_follow_an_exec_started_elsewhere(self):
        run = self.create()
        exec_id = self.ok("exec", "--no-wait", run, "/bin/sh", "-c",
                          "echo a; echo e >&2; sleep 2; echo b; exit 4").stdout.strip()
        # Without --follow: what is there now, at once.
        # (Followed, it would have waited for the exec's end and "b".)
        deadline = time.time() + 10
        while time.time() < deadline:
            r = self.ok("logs", run, exec_id)
            if r.stdout:
                break
            time.sleep(0.1)
        self.assertEqual(r.stdout, "a\n")
        r = self.ok("logs", run, exec_id, "--follow")
        self.assertEqual(r.stdout, "a\nb\n")
        self.assertEqual(self.ok("logs", "--stderr", run, exec_id).stdout, "e\n")
        r = self.cli("wait", run, exec_id)
        self.assertEqual(r.returncode, 4, r)
        r = self.cli("wait", run, exec_id, "--json")
        self.assertEqual(r.returncode, 4, r)
        res = json.loads(r.stdout)
        self.assertEqual((res["exec_id"], res["reason"], res["exit_code"]), (exec_id, "exited", 4))
        lj = json.loads(self.ok("logs", run, exec_id, "--json").stdout)
        self.assertEqual((lj["stream"], lj["data"], lj["eof"], lj["next_offset"]),
                         ("stdout", "YQpiCg==", True, 4))
        r = self.cli("wait", run, "no-such-exec")
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("NOT_FOUND", r.stderr)

    def test_fetch_to_stdout_and_put(self):
        data = self.tmp("put-data")
        os.makedirs(data, exist_ok=True)
        with open(os.path.join(data, "in.bin"), "wb") as f:
            f.write(os.urandom(3 << 20))  # several chunks
        run = self.create("--data", data, "--no-upload")
        r = self.ok("put", "--json", run, os.path.join(data, "in.bin"), "in.bin")
        put = json.loads(r.stdout)
        self.assertEqual((put["path"], put["size"]), ("in.bin", 3 << 20))
        self.ok("exec", run, "/bin/sh", "-c", "cp /data/in.bin /out/copy.bin")
        r = subprocess.run([CLI, "--endpoint", self.srv.ipc, "fetch", run, "copy.bin", "-"],
                           capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(data, "in.bin"), "rb") as f:
            self.assertEqual(r.stdout, f.read())
        dest = self.tmp("fetched.bin")
        fj = json.loads(self.ok("fetch", run, "copy.bin", dest, "--json").stdout)
        self.assertEqual((fj["sha256"], fj["size"], fj["dest"]), (put["sha256"], 3 << 20, dest))
        r = self.cli("fetch", run, "nope", "-")
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("NOT_FOUND", r.stderr)
        self.assertEqual(r.stdout, "")

    def test_put_between_execs_keeps_the_mode(self):
        """put of a file the run did not declare, after an exec: it is
        declared by its first chunk, appears whole, and keeps its mode bits
        (an executable script runs directly)."""
        script = self.tmp("tool.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho tool ran\n")
        os.chmod(script, 0o755)
        run = self.create()
        self.ok("exec", run, "true")
        self.ok("put", run, script, "bin/tool.sh")
        r = self.ok("exec", run, "/data/bin/tool.sh")
        self.assertEqual(r.stdout, "tool ran\n")
        r = self.ok("exec", run, "stat", "-c", "%a", "/data/bin/tool.sh")
        self.assertEqual(r.stdout.strip(), "755")

    def test_tty_is_refused_with_the_reason(self):
        r = self.cli("run", "--tty", "true")
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("--tty: not supported yet", r.stderr)


if __name__ == "__main__":
    unittest.main()
