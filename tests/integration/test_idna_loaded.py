# SPDX-License-Identifier: Apache-2.0
"""sbx-helper has no libidn2 (nor its libunistring) in DT_NEEDED nor among
what it loads at exec (mapping them cost every helper exec about 0.3 ms)
and loads libidn2 only for a policy's host name outside ASCII
(helper/idna_dl.c), by the absolute path the build found: such names get
the A-labels the linked library gives (UTS #46, non-transitional), a name
libidn2 refuses is refused with its reason, and where libidn2 cannot be
loaded a name outside ASCII is refused with the library and its package
named."""
import json
import os
import re
import shutil
import subprocess

from sbxtest import HELPER, SandboxTest, ldconfig_path, needed, policy, run_tests

CLI = os.environ.get("SBX_CLI", "")


def egress(*hosts):
    # A port each: two spellings of one name are one rule, refused twice.
    return policy(egress={"policy": "allowlist",
                          "allow": [{"host": h, "port": 443 + i} for i, h in enumerate(hosts)]})


class IdnaLoaded(SandboxTest):
    def helper_policy(self, pol, env=None):
        path = self.write_policy(pol, "p%d.json" % len(os.listdir(self.tmp)))
        return subprocess.run([HELPER, "policy", path], capture_output=True, text=True,
                              timeout=30, env=env)

    def test_libidn2_is_not_needed(self):
        libs = needed(HELPER)
        self.assertIn("libc.so.6", libs)  # the parse found the section
        self.assertFalse([l for l in libs if l.startswith(("libidn2", "libunistring"))], libs)

    def test_nothing_loaded_at_exec_needs_it(self):
        env = dict(os.environ, LD_TRACE_LOADED_OBJECTS="1")
        p = subprocess.run([HELPER, "--version"], env=env, capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("libc.so.6", p.stdout)
        self.assertNotIn("libidn2", p.stdout)
        self.assertNotIn("libunistring", p.stdout)

    def test_names_outside_ascii_get_their_a_labels(self):
        # Case and NFC mapped, ß kept (non-transitional: "fass.de" would
        # be the transitional answer), an ASCII name beside them as given.
        p = self.helper_policy(egress("BÜcher.example", "bu\u0308cher.example", "faß.de",
                                      "api.example.com"))
        self.assertEqual(p.returncode, 0, p)
        printed = json.loads(p.stdout.rsplit("\ndigest sha256:", 1)[0])
        hosts = {r["port"]: r["host"] for r in printed["egress"]["allow"]}
        self.assertEqual(hosts, {443: "xn--bcher-kva.example", 444: "xn--bcher-kva.example",
                                 445: "xn--fa-hia.de", 446: "api.example.com"}, p.stdout)

    def test_the_same_digest_as_sbxctl_with_libidn2_linked(self):
        if not CLI:
            self.skipTest("sbxctl not built (SBX_WITH_SERVER off)")
        path = self.write_policy(egress("BÜcher.example", "faß.de", "*.bücher.example"))
        mine = subprocess.run([HELPER, "policy", path], capture_output=True, text=True,
                              timeout=30)
        theirs = subprocess.run([CLI, "policy", "check", path], capture_output=True,
                                text=True, timeout=30)
        self.assertEqual(mine.returncode, 0, mine)
        self.assertEqual(theirs.returncode, 0, theirs)
        digest = re.compile(r"digest sha256:([0-9a-f]{64})")
        self.assertEqual(digest.search(mine.stdout).group(1),
                         digest.search(theirs.stdout + theirs.stderr).group(1))

    def test_a_name_libidn2_refuses_says_its_reason(self):
        for host in ("\U0001f642.example", "-bücher.example", "a\u009bb.example"):
            p = self.helper_policy(egress(host))
            self.assertEqual(p.returncode, 1, (host, p))
            self.assertIn("invalid IDNA name: ", p.stderr, host)
            self.assertNotIn("cannot be loaded", p.stderr, host)

    def without_libidn2(self, *argv):
        """argv run in a mount namespace of the test's where libidn2 is
        an empty file (and, in its user namespace, root's files are not
        root's: the helper refuses to load them for that first)."""
        lib = ldconfig_path("libidn2.so.0")
        if not lib or not shutil.which("unshare"):
            self.skipTest("no libidn2.so.0 in ld.so.cache, or no unshare")
        script = 'mount --bind /dev/null "$(realpath "$1")" && shift && exec "$@"'
        p = subprocess.run(["unshare", "-Urm", "sh", "-c", script, "sh", lib] + list(argv),
                           capture_output=True, text=True, timeout=60)
        if "mount" in p.stderr and "bind" in p.stderr:
            self.skipTest("cannot mount in a user namespace here: " + p.stderr)
        return p

    def test_loaded_only_for_a_name_outside_ascii(self):
        # The dynamic linker says what it loads, dlopen()ed libraries too.
        env = dict(os.environ, LD_DEBUG="files")
        p = self.helper_policy(egress("api.example.com", "*.example.org", "xn--bcher-kva.example"),
                               env=env)
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("calling init: ", p.stderr)  # LD_DEBUG was heard
        self.assertNotIn("libidn2", p.stderr)
        self.assertNotIn("libunistring", p.stderr)
        p = self.helper_policy(egress("api.example.com", "bücher.example"), env=env)
        self.assertEqual(p.returncode, 0, p)
        self.assertRegex(p.stderr, r"file=/\S+/libidn2\.so\.0 \[0\];  dynamically loaded by ")

    def test_without_libidn2_a_name_outside_ascii_names_it(self):
        path = self.write_policy(egress("bücher.example"))
        p = self.without_libidn2(HELPER, "policy", path)
        self.assertEqual(p.returncode, 1, p)
        self.assertIn("outside ASCII needs libidn2", p.stderr)
        self.assertIn("libidn2.so.0 cannot be loaded", p.stderr)
        self.assertIn("libidn2-0", p.stderr)
        self.assertNotIn("digest", p.stdout)


if __name__ == "__main__":
    run_tests()
