# SPDX-License-Identifier: Apache-2.0
"""`cmake --install` into a fresh prefix lays out the tree the Debian package
has (sbin/sbxd, libexec/sbx/sbx-helper, bin/sbxctl, the C client with its
pkg-config file), and that sbxd, with no "helper" in its config and no
sbx-helper on PATH, finds its helper at ../libexec/sbx and answers Health to
the installed sbxctl; without the helper there it refuses to start, naming
the place it looked."""
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

BUILD = os.environ.get("SBX_BUILD_DIR", "")
# No sbx-helper on it: only the install's own place may be found.
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def install(build, root, scratch):
    """What `DESTDIR=root cmake --install build --prefix /opt/sbx` does,
    except writing install_manifest.txt into the build tree (which the test
    user may not write): the top-level cmake_install.cmake without that one
    line. DESTDIR also takes what installs to absolute paths (/etc/apparmor.d)."""
    with open(os.path.join(build, "cmake_install.cmake")) as f:
        text = f.read()
    text, n = re.subn(r'file\(WRITE "[^"]*/\$\{CMAKE_INSTALL_MANIFEST\}"[^)]*\)', "", text)
    assert n == 1, "cmake_install.cmake: no install_manifest write found (cmake changed?)"
    script = os.path.join(scratch, "cmake_install.cmake")
    with open(script, "w") as f:
        f.write(text)
    r = subprocess.run(["cmake", "-DCMAKE_INSTALL_PREFIX=/opt/sbx", "-P", script],
                       capture_output=True, text=True, cwd=build, timeout=300,
                       env=dict(os.environ, DESTDIR=root))
    assert r.returncode == 0, "install failed: " + r.stdout[-2000:] + r.stderr[-2000:]


def slurp(path):
    with open(path) as f:
        return f.read()


class CmakeInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not BUILD or not os.path.isfile(os.path.join(BUILD, "cmake_install.cmake")):
            raise RuntimeError("SBX_BUILD_DIR is not a build tree (run through ctest)")
        cls.dir = tempfile.mkdtemp(prefix="sbx-test-install-")
        os.chmod(cls.dir, 0o755)
        root = os.path.join(cls.dir, "root")
        cls.prefix = root + "/opt/sbx"
        install(BUILD, root, cls.dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def p(self, *parts):
        return os.path.join(self.prefix, *parts)

    def start(self, name):
        """The installed sbxd with a config naming no helper: (process,
        socket endpoint, its stderr file)."""
        d = os.path.join(self.dir, name)
        os.mkdir(d)
        sock = "ipc://" + os.path.join(d, "sbxd.sock")
        conf = os.path.join(d, "sbxd.json")
        with open(conf, "w") as f:
            f.write('{"listen": ["%s"], "state_dir": "%s"}\n' % (sock, os.path.join(d, "state")))
        err = open(os.path.join(d, "stderr"), "w+")
        proc = subprocess.Popen([self.p("sbin", "sbxd"), "--config", conf], env=ENV,
                                stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        self.addCleanup(err.close)
        self.addCleanup(lambda: proc.poll() is not None or (proc.terminate(), proc.wait(30)))
        return proc, sock, err

    def test_layout(self):
        for f in ("sbin/sbxd", "sbin/sbxd-image", "libexec/sbx/sbx-helper", "bin/sbxctl"):
            self.assertTrue(os.access(self.p(f), os.X_OK), f + " missing or not executable")
        libdir = [d for d in ("lib", "lib64") if os.path.isdir(self.p(d, "pkgconfig"))]
        self.assertTrue(libdir, "no lib*/pkgconfig in the prefix")
        lib = self.p(libdir[0])
        for f in ("libsbxclient.so", "libsbxclient.so.0", "libsbxclient.a",
                  "pkgconfig/sbxclient.pc"):
            self.assertTrue(os.path.exists(os.path.join(lib, f)), f + " missing")
        for f in ("sbxclient.h", "err.h", "rpc_status.h", "v1/sandbox.pb-c.h"):
            self.assertTrue(os.path.isfile(self.p("include", "sbx", f)), "include/sbx/" + f)

    def test_pkg_config_builds_a_client(self):
        """A program using only the installed header, library and .pc file."""
        src = os.path.join(self.dir, "client.c")
        with open(src, "w") as f:
            f.write('#include <sbx/sbxclient.h>\n'
                    'int main(void) { struct sbx_err err = {0}; (void)err; '
                    'return sbx_client_open == 0; }\n')
        lib = [d for d in ("lib", "lib64") if os.path.isdir(self.p(d, "pkgconfig"))][0]
        env = dict(ENV, PKG_CONFIG_PATH=self.p(lib, "pkgconfig"))
        flags = subprocess.run(["pkg-config", "--define-variable=prefix=" + self.prefix,
                                "--cflags", "--libs", "sbxclient"], env=env,
                               capture_output=True, text=True, check=True).stdout.split()
        exe = os.path.join(self.dir, "client")
        r = subprocess.run(["cc", "-o", exe, src] + flags, env=env, capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = subprocess.run([exe], env=dict(ENV, LD_LIBRARY_PATH=self.p(lib)))
        self.assertEqual(r.returncode, 0)

    def test_installed_sbxd_finds_its_helper(self):
        proc, sock, err = self.start("with-helper")
        out = ""
        for _ in range(150):
            self.assertIsNone(proc.poll(), "installed sbxd exited: " + slurp(err.name))
            r = subprocess.run([self.p("bin", "sbxctl"), "--endpoint", sock, "health"], env=ENV,
                               capture_output=True, text=True, timeout=60)
            out = r.stdout + r.stderr
            if r.returncode == 0:
                break
            time.sleep(0.1)
        else:
            self.fail("installed sbxd never answered Health: %s / %s" % (out, slurp(err.name)))
        proc.terminate()
        self.assertEqual(proc.wait(60), 0, slurp(err.name))

    def test_without_its_helper_it_refuses_naming_where(self):
        helper = self.p("libexec", "sbx", "sbx-helper")
        os.rename(helper, helper + ".away")
        self.addCleanup(os.rename, helper + ".away", helper)
        proc, _, err = self.start("no-helper")
        rc = proc.wait(60)
        text = slurp(err.name)
        self.assertNotEqual(rc, 0)
        self.assertIn("sbx-helper not found", text)
        self.assertIn("../libexec/sbx/sbx-helper", text)


if __name__ == "__main__":
    unittest.main()
