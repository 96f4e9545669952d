# SPDX-License-Identifier: Apache-2.0
"""sbx-helper has no libidn2 (nor its libunistring) in DT_NEEDED nor among
what it loads at exec (mapping them cost every helper exec about 0.3 ms)
and loads libidn2 only for a policy's host name outside ASCII
(helper/idna_dl.c), by the absolute path the build found: such names get
the A-labels the linked library gives (UTS #46, non-transitional), a name
libidn2 refuses is refused with its reason, and where libidn2 cannot be
loaded (not root's alone, not a library, without its calls) a name outside
ASCII is refused with the library and its package named; libunistring,
which libidn2 needs, is loaded by its path too, never found by a search."""
import json
import os
import re
import shutil
import subprocess

from sbxtest import (HELPER, PLANTED_MARK, SandboxTest, ldconfig_path, needed, policy,
                     run_tests)

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
        loaded = self.helper_loads_at_exec()
        self.assertNotIn("libidn2", loaded)
        self.assertNotIn("libunistring", loaded)

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

    def test_a_libidn2_not_roots_alone_is_refused(self):
        # In a user namespace of the test's own, root's files show as
        # uid 65534: the helper refuses to load them before any dlopen.
        if not shutil.which("unshare"):
            self.skipTest("no unshare")
        path = self.write_policy(egress("bücher.example"))
        p = subprocess.run(["unshare", "-Ur", HELPER, "policy", path], capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 1 and "unshare" in p.stderr:
            self.skipTest("no user namespace for the test here: " + p.stderr)
        self.assertEqual(p.returncode, 1, p)
        self.assertIn("outside ASCII needs libidn2", p.stderr)
        self.assertRegex(p.stderr, r"libidn2\.so\.0 cannot be loaded \(Debian and Ubuntu: "
                         r"package libidn2-0\): \S+ is owned by uid 65534 ")
        self.assertNotIn("digest", p.stdout)

    def helper_tree(self, idn2=None):
        """A root of the test's own for chroot, holding the helper, the
        libraries it needs at exec and loads (at the paths it knows:
        realpath of each, usr-merged), and idn2's bytes (None: the real
        one) as libidn2.so.0. In `unshare -Ur` the test user is uid 0, so
        the tree is root's alone and the helper's check lets each load be
        tried."""
        root = os.path.join(self.tmp, "root")
        idn2_lib = ldconfig_path("libidn2.so.0")
        if not idn2_lib:
            self.skipTest("no libidn2.so.0 in ld.so.cache")
        libs = re.findall(r"=> (/\S+)", subprocess.run(["ldd", HELPER], capture_output=True,
                                                       text=True, check=True).stdout)
        libs += [ldconfig_path("libcrypto.so.3"), ldconfig_path("libunistring.so.2"),
                 idn2_lib, "/lib64/ld-linux-x86-64.so.2"]
        for lib in libs:
            real = os.path.realpath(lib)
            dst = root + os.path.dirname(real)
            os.makedirs(dst, mode=0o755, exist_ok=True)
            shutil.copy2(real, os.path.join(dst, os.path.basename(real)))
            # The name asked for, beside the file it names.
            name = os.path.join(dst, os.path.basename(lib))
            if not os.path.exists(name):
                os.symlink(os.path.basename(real), name)
        # The ELF interpreter at the path the helper names (PT_INTERP).
        interp = os.path.realpath("/lib64/ld-linux-x86-64.so.2")
        os.makedirs(os.path.join(root, "usr/lib64"), mode=0o755, exist_ok=True)
        os.symlink(interp, os.path.join(root, "usr/lib64/ld-linux-x86-64.so.2"))
        for link, target in (("lib", "usr/lib"), ("lib64", "usr/lib64")):
            os.symlink(target, os.path.join(root, link))
        if idn2 is not None:
            # In place of the soname's link, at the path the helper opens.
            at = root + os.path.join(os.path.dirname(os.path.realpath(idn2_lib)),
                                     "libidn2.so.0")
            os.unlink(at)
            with open(at, "wb") as f:
                f.write(idn2)
        shutil.copy2(HELPER, os.path.join(root, "sbx-helper"))
        with open(os.path.join(root, "p.json"), "w") as f:
            json.dump(egress("bücher.example"), f)
        for d, _, files in os.walk(root):
            os.chmod(d, 0o755)
        return root

    def in_tree(self, root):
        probe = subprocess.run(["unshare", "-Ur", "true"], capture_output=True, text=True,
                               timeout=60)
        if probe.returncode != 0:
            self.skipTest("no user namespace for the test here: " + probe.stderr)
        return subprocess.run(["unshare", "-Ur", "chroot", root, "/sbx-helper", "policy",
                               "/p.json"], capture_output=True, text=True, timeout=60)

    def test_in_a_tree_of_roots_it_loads_and_maps(self):
        # The control for the two below: the same tree with the real
        # libraries maps the name.
        p = self.in_tree(self.helper_tree())
        self.assertEqual(p.returncode, 0, p)
        self.assertIn('"host": "xn--bcher-kva.example"', p.stdout)

    def test_a_libidn2_that_is_no_library_is_refused(self):
        p = self.in_tree(self.helper_tree(idn2=b""))
        self.assertEqual(p.returncode, 1, p)
        self.assertRegex(p.stderr, r"libidn2\.so\.0 cannot be loaded \(Debian and Ubuntu: "
                         r"package libidn2-0\): .*(too short|invalid ELF)")
        self.assertNotIn("digest", p.stdout)

    def test_a_library_without_idn2s_calls_is_refused(self):
        with open(ldconfig_path("libunistring.so.2"), "rb") as f:
            other = f.read()
        p = self.in_tree(self.helper_tree(idn2=other))
        self.assertEqual(p.returncode, 1, p)
        self.assertIn("it lacks idn2_to_ascii_8z or idn2_strerror", p.stderr)
        self.assertNotIn("digest", p.stdout)

    def test_a_libunistring_in_the_current_directory_is_not_loaded(self):
        # libidn2 needs libunistring, which the dynamic linker searches
        # for (an empty element of LD_LIBRARY_PATH is the current
        # directory): the helper loads it first by the path the build
        # found (review 31).
        here = os.path.join(self.tmp, "here")
        os.mkdir(here)
        self.plant_library(os.path.join(here, "libunistring.so.2"))
        path = self.write_policy(egress("bücher.example"))
        p = subprocess.run([HELPER, "policy", path], capture_output=True, text=True, timeout=30,
                           cwd=here, env=dict(os.environ, LD_LIBRARY_PATH="/nonexistent:"))
        self.assertEqual(p.returncode, 0, p)
        self.assertIn('"host": "xn--bcher-kva.example"', p.stdout)
        self.assertFalse(os.path.exists(os.path.join(here, PLANTED_MARK)),
                         "the helper loaded the planted libunistring.so.2")


if __name__ == "__main__":
    run_tests()
