# SPDX-License-Identifier: Apache-2.0
"""The AppArmor profile that grants sbx-helper user namespaces where Ubuntu
restricts them (packaging/apparmor/sbx-helper): parsed by the installed
apparmor_parser as far as it knows the language, and installed by CMake
where AppArmor reads it, naming the path the helper is installed at.

Debian 12's parser (3.0.8) knows neither `abi <abi/4.0>` nor `userns`, the
two AppArmor 4 lines; there the rest of the profile is parsed and the two
lines are checked as text. A parser that has abi/4.0 parses it whole.
Nothing here loads the profile into a kernel (this host has no AppArmor)."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

SOURCE = os.environ.get("SBX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILE = os.path.join(SOURCE, "packaging", "apparmor", "sbx-helper")
HELPER = os.environ["SBX_HELPER"]
BUILD = os.path.dirname(os.path.dirname(HELPER))
PARSER = shutil.which("apparmor_parser") or "/usr/sbin/apparmor_parser"
AA4_LINES = ("abi <abi/4.0>,", "userns,")


def expand(glob):
    """The paths an AppArmor attachment with {a,b} alternations names
    (no nesting, no wildcards: the profile uses neither)."""
    m = re.search(r"\{([^{}]*)\}", glob)
    if not m:
        return [glob]
    out = []
    for alt in m.group(1).split(","):
        out += expand(glob[:m.start()] + alt + glob[m.end():])
    return out


def parse(text):
    """apparmor_parser -Q (everything but loading) on `text`: (rc, stderr)."""
    with tempfile.NamedTemporaryFile("w", suffix=".aa") as f:
        f.write(text)
        f.flush()
        r = subprocess.run([PARSER, "-Q", "-K", f.name], capture_output=True, text=True,
                           timeout=60)
    return r.returncode, r.stderr


class Profile(unittest.TestCase):
    def setUp(self):
        with open(PROFILE) as f:
            self.text = f.read()
        self.rules = [ln.strip() for ln in self.text.splitlines()
                      if ln.strip() and not ln.strip().startswith("#")]

    def test_it_is_bwraps_profile_for_sbx_helper(self):
        """The profile Ubuntu ships for bwrap: AppArmor 4's abi, unconfined
        but for the `userns` grant, a local include. Its name is what
        `sbx-helper check` looks for in its own label."""
        self.assertEqual(self.rules[0], "abi <abi/4.0>,", self.rules)
        self.assertIn("include <tunables/global>", self.rules)
        head = [r for r in self.rules if r.startswith("profile ")]
        self.assertEqual(len(head), 1, self.rules)
        self.assertRegex(head[0], r"^profile sbx-helper /\S+ flags=\(unconfined\) \{$")
        self.assertIn("userns,", self.rules)
        self.assertIn("include if exists <local/sbx-helper>", self.rules)
        self.assertEqual(self.rules[-1], "}")

    def test_this_parser_accepts_it(self):
        self.assertTrue(os.access(PARSER, os.X_OK), "apparmor_parser (package apparmor)")
        if os.path.exists("/etc/apparmor.d/abi/4.0"):
            rc, err = parse(self.text)
            self.assertEqual(rc, 0, err)
            return
        # Debian 12: the whole profile is refused for its abi line, and
        # without the abi, for `userns` (proof the two lines are what this
        # parser lacks, not a mistake elsewhere).
        rc, err = parse(self.text)
        self.assertNotEqual(rc, 0)
        self.assertIn("abi/4.0", err)
        rc, err = parse(self.text.replace("abi <abi/4.0>,\n", ""))
        self.assertNotEqual(rc, 0)
        self.assertIn("line %d" % (self.text.replace("abi <abi/4.0>,\n", "")
                                   .splitlines().index("  userns,") + 1), err)
        rest = "".join(ln for ln in self.text.splitlines(True) if ln.strip() not in AA4_LINES)
        rc, err = parse(rest)
        self.assertEqual(rc, 0, err)
        # And the parser does refuse a broken profile (its 0 means something).
        rc, _ = parse(rest.replace("flags=(unconfined)", "flags=(unconfined"))
        self.assertNotEqual(rc, 0)

    def test_install_puts_it_where_apparmor_reads_it_naming_the_helpers_path(self):
        """cmake --install (helper/'s rules, under DESTDIR) writes the
        profile to /etc/apparmor.d/sbx-helper, and its attachment names the
        path the helper was installed at."""
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            cache = f.read()
        prefix = re.search(r"^CMAKE_INSTALL_PREFIX:PATH=(.*)$", cache, re.M).group(1)
        if prefix not in ("/usr", "/usr/local"):
            self.skipTest("prefix %s: the profile is not installed by default" % prefix)
        self.assertIn("SBX_INSTALL_APPARMOR_PROFILE:BOOL=ON", cache)
        dest = tempfile.mkdtemp(prefix="sbx-test-install-")
        try:
            r = subprocess.run(["cmake", "-P", os.path.join(BUILD, "helper",
                                                            "cmake_install.cmake")],
                               env=dict(os.environ, DESTDIR=dest), capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(dest, "etc", "apparmor.d", "sbx-helper")) as f:
                self.assertEqual(f.read(), self.text)
            installed = [os.path.join(d, n)[len(dest):] for d, _, names in os.walk(dest)
                         for n in names if n == "sbx-helper" and "apparmor.d" not in d]
            self.assertEqual(installed, [prefix + "/libexec/sbx/sbx-helper"])
            head = [r for r in self.text.splitlines() if r.startswith("profile ")][0]
            paths = expand(head.split()[2])
            self.assertIn(installed[0], paths)
            self.assertIn("/usr/libexec/sbx/sbx-helper", paths)
            self.assertIn("/usr/lib/sbx/sbx-helper", paths)
        finally:
            shutil.rmtree(dest)


if __name__ == "__main__":
    unittest.main()
