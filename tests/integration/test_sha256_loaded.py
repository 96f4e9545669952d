# SPDX-License-Identifier: Apache-2.0
"""sbx-helper has no libcrypto in DT_NEEDED (mapping it cost every helper
exec about 2 ms) and loads it only for a policy's digest
(helper/sha256_dl.c): the digest is the one sbxctl computes with libcrypto
linked, in `sbx-helper policy` and in a one-shot's result, and where
libcrypto cannot be loaded the error names it and its package."""
import json
import os
import re
import shutil
import subprocess
import unittest

from sbxtest import HELPER, SandboxTest, policy, run_tests

CLI = os.environ.get("SBX_CLI", "")

POLICIES = {
    "base": policy(),
    "egress": policy(egress={"policy": "allowlist",
                             "allow": ["api.example.com:443",
                                       {"host": "bücher.example", "port": 443}]}),
    "limits": policy(limits={"memory_mb": 300, "pids": 64, "script_seconds": 7}),
}


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", out)


def libcrypto_path():
    out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    m = re.search(r"libcrypto\.so\.3 \(libc6,x86-64\) => (\S+)", out)
    return m.group(1) if m else None


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
        lib = libcrypto_path()
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


if __name__ == "__main__":
    run_tests()
