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

from sbxtest import (HELPER, PLANTED_MARK, PLANTED_SOURCE, SandboxTest, ldconfig_path, needed,
                     policy, run_tests)

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
        # libidn2's own file is checked first, before it is even read.
        self.assertRegex(p.stderr, r"libidn2\.so\.0 cannot be loaded \(Debian and Ubuntu: "
                         r"package libidn2-0\): /\S+/libidn2\.so\.0\S* is owned by "
                         r"uid 65534 ")
        self.assertNotIn("digest", p.stdout)

    def test_loaded_only_for_a_name_outside_ascii(self):
        # The dynamic linker says what it loads, dlopen()ed libraries too,
        # and what it searches for.
        env = dict(os.environ, LD_DEBUG="files,libs")
        p = self.helper_policy(egress("api.example.com", "*.example.org", "xn--bcher-kva.example"),
                               env=env)
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("calling init: ", p.stderr)  # LD_DEBUG was heard
        self.assertNotIn("libidn2", p.stderr)
        self.assertNotIn("libunistring", p.stderr)
        p = self.helper_policy(egress("api.example.com", "bücher.example"), env=env)
        self.assertEqual(p.returncode, 0, p)
        self.assertRegex(p.stderr, r"file=/\S+/libidn2\.so\.0\S* \[0\];  dynamically loaded by ")
        self.assertRegex(p.stderr, r"file=/\S+/libunistring\.so\.2\S* \[0\];  dynamically "
                         r"loaded by ")
        # Each by its path: neither is searched for.
        self.assertNotIn("find library=libidn2", p.stderr)
        self.assertNotIn("find library=libunistring", p.stderr)

    def helper_tree(self, idn2=None, beside=None):
        """A root of the test's own for chroot, holding the helper, the
        libraries it needs at exec and loads (at the paths it knows:
        realpath of each, usr-merged), and idn2's bytes (None: the real
        one) as libidn2.so.0, with files of beside's (name: bytes) next
        to it. In `unshare -Ur` the test user is uid 0, so the tree is
        root's alone and the helper's check lets each load be tried."""
        root = os.path.join(self.tmp, "root")
        idn2_lib = ldconfig_path("libidn2.so.0")
        needed = [idn2_lib, ldconfig_path("libcrypto.so.3"), ldconfig_path("libunistring.so.2")]
        if not all(needed) or not os.path.exists("/lib64/ld-linux-x86-64.so.2"):
            self.skipTest("not the x86-64 Debian layout this tree copies")
        libs = re.findall(r"=> (/\S+)", subprocess.run(["ldd", HELPER], capture_output=True,
                                                       text=True, check=True).stdout)
        libs += needed + ["/lib64/ld-linux-x86-64.so.2"]
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
        libdir = root + os.path.dirname(os.path.realpath(idn2_lib))
        if idn2 is not None:
            # In place of the soname's link, at the path the helper opens.
            os.unlink(os.path.join(libdir, "libidn2.so.0"))
            with open(os.path.join(libdir, "libidn2.so.0"), "wb") as f:
                f.write(idn2)
        for name, data in (beside or {}).items():
            with open(os.path.join(libdir, name), "wb") as f:
                f.write(data)
        os.mkdir(os.path.join(root, "here"))
        shutil.copy2(HELPER, os.path.join(root, "sbx-helper"))
        with open(os.path.join(root, "p.json"), "w") as f:
            json.dump(egress("bücher.example"), f)
        for d, _, files in os.walk(root):
            os.chmod(d, 0o755)
        return root

    def in_tree(self, root, env=None):
        """`sbx-helper policy /p.json` with root as its /, in /here."""
        probe = subprocess.run(["unshare", "-Ur", "true"], capture_output=True, text=True,
                               timeout=60)
        if probe.returncode != 0:
            self.skipTest("no user namespace for the test here: " + probe.stderr)
        return subprocess.run(["unshare", "-Ur", "--root=" + root, "--wd=/here", "/sbx-helper",
                               "policy", "/p.json"], capture_output=True, text=True, timeout=60,
                              env=env)

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
                         r"package libidn2-0\): .*not a shared object of this machine")
        self.assertNotIn("digest", p.stdout)

    def test_a_library_without_idn2s_calls_is_refused(self):
        with open(ldconfig_path("libunistring.so.2"), "rb") as f:
            other = f.read()
        p = self.in_tree(self.helper_tree(idn2=other))
        self.assertEqual(p.returncode, 1, p)
        self.assertIn("it lacks idn2_to_ascii_8z or idn2_strerror", p.stderr)
        self.assertNotIn("digest", p.stdout)

    def test_libraries_in_the_current_directory_are_not_loaded(self):
        # An empty element of LD_LIBRARY_PATH is the current directory: a
        # search would find these first. libidn2 is opened by its path;
        # libunistring, which libidn2 needs and the dynamic linker would
        # search for, is loaded by its path before it (review 31).
        here = os.path.join(self.tmp, "here")
        os.mkdir(here)
        self.plant_library(os.path.join(here, "libunistring.so.2"))
        # Without idn2's calls, but a dlopen of it would run its
        # constructor before anything asked for them.
        self.plant_library(os.path.join(here, "libidn2.so.0"))
        path = self.write_policy(egress("bücher.example"))
        p = subprocess.run([HELPER, "policy", path], capture_output=True, text=True, timeout=30,
                           cwd=here, env=dict(os.environ, LD_LIBRARY_PATH="/nonexistent:",
                                              LD_DEBUG="libs"))
        self.assertEqual(p.returncode, 0, p)
        self.assertIn('"host": "xn--bcher-kva.example"', p.stdout)
        # Never searched for: the planted file, which lacks libidn2's
        # calls, would fail its dlopen before its constructor ran (review
        # 32), so its mark alone could not tell.
        self.assertIn("find library=libc.so.6", p.stderr)  # LD_DEBUG was heard
        self.assertNotIn("find library=libunistring", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(here, PLANTED_MARK)),
                         "the helper loaded a planted library")

    def later_libidn2(self, u5_soname="libunistring.so.5", u5_link=()):
        """A tree (helper_tree) whose libidn2.so.0 is a stand-in that needs
        libunistring.so.5, as a libidn2 installed after this build might
        (Debian 13's does), with a libunistring.so.5 beside it of soname
        u5_soname, linked with u5_link, and a planted one in /here."""
        cc = shutil.which("cc") or shutil.which("gcc")
        if not cc:
            self.skipTest("no C compiler for the libraries")
        d = os.path.join(self.tmp, "libs")
        os.mkdir(d)
        for name, src in (("u5.c", U5), ("planted5.c", U5 + PLANTED_SOURCE), ("idn2.c", IDN2)):
            with open(os.path.join(d, name), "w") as f:
                f.write(src)

        def cc_so(out, soname, src, *extra):
            subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname," + soname, "-o",
                            os.path.join(d, out), os.path.join(d, src), "-Wl,--no-as-needed",
                            *extra], check=True, timeout=60)
        cc_so("libunistring.so.5", "libunistring.so.5", "u5.c")
        cc_so("beside.so.5", u5_soname, "u5.c", *u5_link)
        cc_so("planted.so.5", "libunistring.so.5", "planted5.c")
        cc_so("libidn2.so.0", "libidn2.so.0", "idn2.c", "-L" + d, "-l:libunistring.so.5")
        data = {}
        for name in ("libidn2.so.0", "beside.so.5", "planted.so.5"):
            with open(os.path.join(d, name), "rb") as f:
                data[name] = f.read()
        root = self.helper_tree(idn2=data["libidn2.so.0"],
                                beside={"libunistring.so.5": data["beside.so.5"]})
        with open(os.path.join(root, "here", "libunistring.so.5"), "wb") as f:
            f.write(data["planted.so.5"])
        return root

    def in_later_tree(self, root):
        return self.in_tree(root, env=dict(os.environ, LD_LIBRARY_PATH="/nonexistent:",
                                           LD_DEBUG="libs"))

    def assert_refused_unsearched(self, root, p, says, name):
        """p (in_later_tree of root) failed 1 saying says, never searched
        for name and never loaded the library planted in /here."""
        self.assertEqual(p.returncode, 1, p)
        self.assertRegex(p.stderr, says)
        self.assertNotIn("find library=" + name, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(root, "here", PLANTED_MARK)))

    def test_a_libidn2_installed_later_gets_what_it_needs_by_path(self):
        # What it needs is read from its file at the load and loaded by
        # its path beside it, never searched for, with a planted copy in
        # the current directory and an empty LD_LIBRARY_PATH element
        # (review 32).
        root = self.later_libidn2()
        p = self.in_later_tree(root)
        self.assertEqual(p.returncode, 0, p)
        self.assertIn('"host": "xn--stub.example"', p.stdout)  # the stand-in's answer
        self.assertNotIn("find library=libunistring", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(root, "here", PLANTED_MARK)),
                         "the helper loaded the planted libunistring.so.5")

    def test_a_library_beside_it_of_another_soname_is_refused(self):
        # The dynamic linker would not take it for libunistring.so.5 and
        # would search for that name (review 33).
        root = self.later_libidn2(u5_soname="libunistring.so.5.0")
        self.assert_refused_unsearched(
            root, self.in_later_tree(root),
            r"libidn2\.so\.0 cannot be loaded \(Debian and Ubuntu: package libidn2-0\): "
            r"/\S+/libunistring\.so\.5 is not libunistring\.so\.5 \(its soname is "
            r"\"libunistring\.so\.5\.0\"\)", "libunistring")

    def test_a_library_beside_it_that_needs_more_is_refused(self):
        # What it needs in turn would be searched for: one level only.
        root = self.later_libidn2(u5_link=("-lm",))
        self.assert_refused_unsearched(
            root, self.in_later_tree(root),
            r"/\S+/libunistring\.so\.5 needs libm\.so\.6, which the helper would have to "
            r"search for", "libm")

    def test_a_library_loaded_here_is_not_taken_by_its_file_name(self):
        # libidn2 needs libX.so.1 then libY.so.1; libX.so.1 beside it is a
        # link to libY.so.1, a file whose soname is libX.so.1. Loaded as
        # libX.so.1 by its resolved path, it must not then count as
        # libY.so.1 by its file's name: the dynamic linker would search
        # for that (review 34). Refused.
        cc = shutil.which("cc") or shutil.which("gcc")
        if not cc:
            self.skipTest("no C compiler for the libraries")
        d = os.path.join(self.tmp, "libs")
        os.mkdir(d)
        with open(os.path.join(d, "x.c"), "w") as f:
            f.write(U5)
        with open(os.path.join(d, "idn2.c"), "w") as f:
            f.write(IDN2)
        for out, soname in (("libX.so.1", "libX.so.1"), ("libY.so.1", "libY.so.1"),
                            ("beside-Y", "libX.so.1")):
            subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname," + soname, "-o",
                            os.path.join(d, out), os.path.join(d, "x.c")], check=True, timeout=60)
        subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libidn2.so.0", "-o",
                        os.path.join(d, "libidn2.so.0"), os.path.join(d, "idn2.c"),
                        "-Wl,--no-as-needed", "-L" + d, "-l:libX.so.1", "-l:libY.so.1"],
                       check=True, timeout=60)
        with open(os.path.join(d, "libidn2.so.0"), "rb") as f:
            idn2 = f.read()
        with open(os.path.join(d, "beside-Y"), "rb") as f:
            root = self.helper_tree(idn2=idn2, beside={"libY.so.1": f.read()})
        libdir = os.path.dirname(os.path.join(root, "p.json"))
        for dirpath, _, files in os.walk(root):
            if "libY.so.1" in files:
                libdir = dirpath
        os.symlink("libY.so.1", os.path.join(libdir, "libX.so.1"))
        self.plant_library(os.path.join(root, "here", "libY.so.1"))
        self.assert_refused_unsearched(
            root, self.in_later_tree(root),
            r"/\S+/libY\.so\.1 is not libY\.so\.1 \(its soname is \"libX\.so\.1\"\)", "libY")


# The stand-ins for a later libidn2 and its libunistring.so.5.
U5 = "int u5_nfc(void) { return 0; }\n"
IDN2 = r"""
#include <string.h>
int u5_nfc(void);
int idn2_to_ascii_8z(const char *in, char **out, int flags)
{
	(void)in;
	(void)flags;
	*out = strdup(u5_nfc() == 0 ? "xn--stub.example" : "wrong");
	return 0;
}
const char *idn2_strerror(int rc)
{
	(void)rc;
	return "stub";
}
"""


if __name__ == "__main__":
    run_tests()
