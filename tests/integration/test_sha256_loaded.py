# SPDX-License-Identifier: Apache-2.0
"""sbx-helper has no libcrypto in DT_NEEDED nor among what it loads at exec
(mapping it cost every helper exec about 2 ms) and loads it only for a
policy's digest (helper/sha256_dl.c), by the absolute path the build found:
the digest is the one sbxctl computes with libcrypto linked, in `sbx-helper
policy` and in a one-shot's result; a libcrypto.so.3 the sandbox writes
into --out, which is the current directory of a caller whose
LD_LIBRARY_PATH names it, is never loaded; where libcrypto cannot be
loaded the error names it and its package, also in a one-shot's result."""
import json
import os
import re
import shutil
import subprocess

from sbxtest import (HELPER, PLANTED_MARK, SandboxTest, ldconfig_path, needed, policy,
                     run_tests)

CLI = os.environ.get("SBX_CLI", "")

POLICIES = {
    "base": policy(),
    "egress": policy(egress={"policy": "allowlist",
                             "allow": ["api.example.com:443",
                                       {"host": "bücher.example", "port": 443}]}),
    "limits": policy(limits={"memory_mb": 300, "pids": 64, "script_seconds": 7}),
}


class Sha256Loaded(SandboxTest):
    def helper_digest(self, path):
        p = subprocess.run([HELPER, "policy", path], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p)
        m = re.search(r"^digest sha256:([0-9a-f]{64})$", p.stdout, re.M)
        self.assertTrue(m, p.stdout)
        return m.group(1)

    def test_libcrypto_is_not_needed(self):
        libs = needed(HELPER)
        self.assertIn("libc.so.6", libs)  # the parse found the section
        self.assertFalse([l for l in libs if l.startswith("libcrypto")], libs)
        self.assertFalse([l for l in libs if l.startswith("libssl")], libs)

    def test_nothing_loaded_at_exec_needs_it(self):
        loaded = self.helper_loads_at_exec()
        self.assertNotIn("libcrypto", loaded)
        self.assertNotIn("libssl", loaded)

    def test_a_libcrypto_the_sandbox_writes_is_not_loaded(self):
        # In /data, for the sandbox to copy into /out.
        self.plant_library(os.path.join(self.data, "libcrypto.so.3"))
        out = os.path.join(self.tmp, "out")
        os.mkdir(out)
        pol = POLICIES["limits"]
        # An empty element in the search path is the current directory:
        # the caller runs in --out, where the sandbox's file is copied.
        env = dict(os.environ, LD_LIBRARY_PATH="/nonexistent:")
        cwd = os.getcwd()
        os.chdir(out)
        try:
            r = self.run_sandbox(["/bin/cp", "/data/libcrypto.so.3", "/out/libcrypto.so.3"],
                                 pol=pol, out=out, env=env)
        finally:
            os.chdir(cwd)
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(os.path.exists(os.path.join(out, "libcrypto.so.3")), r)
        self.assertFalse(os.path.exists(os.path.join(out, PLANTED_MARK)),
                         "the helper loaded the sandbox's libcrypto")
        self.assertEqual(r.result["policy_digest"],
                         self.helper_digest(self.write_policy(pol, "again.json")))

    def test_libcrypto_is_loaded_before_anything_of_the_command_is_taken(self):
        # Its dependencies are searched for at its dlopen (libz where
        # OpenSSL has zlib): so the digest is taken while pid 1 builds the
        # root, before the helper takes anything of the command's (its
        # output, its end, /out into --out). The --timings marks say when:
        # "digest" before "ended" (the helper has the command's end).
        timings = os.path.join(self.tmp, "timings")
        r = self.run_sandbox(["/bin/true"], pol=POLICIES["limits"], extra=["--timings", timings])
        self.assertEqual(r.rc, 0, r)
        with open(timings) as f:
            marks = dict((k, int(v)) for k, v in (line.split() for line in f))
        self.assertIn("digest", marks, marks)
        self.assertLess(marks["digest"], marks["ended"], marks)
        self.assertLess(marks["cloned"], marks["digest"], marks)
        self.assertRegex(r.result["policy_digest"], "^[0-9a-f]{64}$")
        # Without --result there is no digest, and libcrypto is not loaded.
        p = subprocess.run([HELPER, "run", "--policy", self.write_policy(POLICIES["limits"]),
                            "--timings", timings, "--", "/bin/true"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p)
        with open(timings) as f:
            self.assertNotIn("digest", f.read())

    def test_digest_is_sbxctls(self):
        if not CLI:
            self.skipTest("sbxctl not built (SBX_WITH_SERVER off)")
        for name, pol in POLICIES.items():
            path = self.write_policy(pol, name + ".json")
            p = subprocess.run([CLI, "policy", "check", path], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(p.returncode, 0, p)
            theirs = re.search(r"digest sha256:([0-9a-f]{64})", p.stdout + p.stderr)
            self.assertTrue(theirs, p)
            self.assertEqual(self.helper_digest(path), theirs.group(1), name)

    def test_a_one_shots_result_carries_it(self):
        pol = POLICIES["limits"]
        r = self.run_sandbox(["/bin/true"], pol=pol)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.result["policy_digest"],
                         self.helper_digest(self.write_policy(pol, "again.json")))

    def test_without_libcrypto_the_error_names_it(self):
        lib = ldconfig_path("libcrypto.so.3")
        if not lib or not shutil.which("unshare"):
            self.skipTest("no libcrypto.so.3 in ld.so.cache, or no unshare")
        path = self.write_policy(POLICIES["base"])
        # A mount namespace of our own where libcrypto is an empty file.
        script = 'mount --bind /dev/null "$1" && exec "$2" policy "$3"'
        p = subprocess.run(["unshare", "-Urm", "sh", "-c", script, "sh", lib, HELPER, path],
                           capture_output=True, text=True, timeout=30)
        if "mount" in p.stderr and p.returncode != 1:
            self.skipTest("cannot mount in a user namespace here: " + p.stderr)
        self.assertEqual(p.returncode, 1, p)
        self.assertIn("libcrypto.so.3 cannot be loaded", p.stderr)
        self.assertIn("libssl3", p.stderr)
        self.assertNotIn("digest", p.stdout)

    def test_a_one_shot_without_libcrypto_says_so(self):
        lib = ldconfig_path("libcrypto.so.3")
        if not lib or not shutil.which("unshare"):
            self.skipTest("no libcrypto.so.3 in ld.so.cache, or no unshare")
        path = self.write_policy(POLICIES["base"])
        result = os.path.join(self.tmp, "result.json")
        # In a user namespace of the test's own: its one uid for the
        # sandbox (--host-uids shared), libcrypto an empty file.
        script = ('mount --bind /dev/null "$1" && '
                  'exec "$2" run --host-uids shared --policy "$3" --result "$4" -- /bin/true')
        p = subprocess.run(["unshare", "-Urm", "sh", "-c", script, "sh", lib, HELPER, path,
                            result], capture_output=True, text=True, timeout=60)
        if "mount" in p.stderr and not os.path.exists(result):
            self.skipTest("cannot mount in a user namespace here: " + p.stderr)
        self.assertEqual(p.returncode, 0, p)  # the command's status
        self.assertIn("libcrypto.so.3 cannot be loaded", p.stderr)
        with open(result) as f:
            res = json.load(f)
        self.assertIsNone(res["policy_digest"], res)
        self.assertIn("libcrypto.so.3 cannot be loaded", res["message"] or "", res)


if __name__ == "__main__":
    run_tests()
