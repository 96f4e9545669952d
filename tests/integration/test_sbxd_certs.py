# SPDX-License-Identifier: Apache-2.0
"""packaging/certs/sbx-certs, the certificate recipe: a CA, a server
certificate with DNS and IP subjectAltNames and a client certificate (ECDSA
P-256 and RSA) that a real sbxd serves and both clients accept by address
and by name; keys mode 0600; nothing overwritten without --force; bad
arguments refused with exit status 2 naming what was wrong."""
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

from sbxdfix import CLI, Server

SOURCE = os.environ.get("SBX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
CERTS = os.path.join(SOURCE, "packaging", "certs", "sbx-certs")
BUILD = os.path.dirname(os.environ.get("SBX_PYTHON_PROTO", "").rstrip("/"))
sys.path[:0] = [os.path.join(SOURCE, "clients", "python"), os.path.join(BUILD, "clients", "python")]
import sbx_client  # noqa: E402


def certs(*args):
    return subprocess.run(["sh", CERTS] + list(args), capture_output=True, text=True, timeout=120)


class Recipe(unittest.TestCase):
    KEY = []

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sbx-test-certs-")
        os.chmod(cls.dir, 0o755)
        for args in (["ca"], ["server", "srv", "--dns", "localhost", "--ip", "127.0.0.1"],
                     ["client", "caller"]):
            r = certs(*args, "--dir", cls.dir, *cls.KEY)
            assert r.returncode == 0, "sbx-certs %s: %s" % (args, r.stderr)
        cls.srv = Server(tls={"cert": cls.p("srv.pem"), "key": cls.p("srv.key"),
                              "client_ca": cls.p("ca.pem")})

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        cls.srv.cleanup()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, "sbxd exited %s" % rc

    @classmethod
    def p(cls, name):
        return os.path.join(cls.dir, name)

    def sbxctl(self, host, *extra):
        e = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        return subprocess.run([CLI, "--endpoint", "tls+tcp://%s:%d" % (host, self.srv.port),
                               "--tls-cert", self.p("caller.pem"), "--tls-key",
                               self.p("caller.key"), "--tls-ca", self.p("ca.pem"), "--token",
                               self.srv.tokens["alice"], *extra, "health"],
                              capture_output=True, text=True, timeout=120, env=e)

    def test_sbxctl_by_address_and_by_name(self):
        for host in ("127.0.0.1", "localhost"):
            r = self.sbxctl(host)
            self.assertEqual(r.returncode, 0, "%s: %s" % (host, r.stderr))

    def test_python_client_by_address(self):
        tls = sbx_client.TLS(ca=self.p("ca.pem"), cert=self.p("caller.pem"),
                             key=self.p("caller.key"))
        with sbx_client.connect(self.srv.tls, token=self.srv.tokens["alice"], tls=tls,
                                timeout=30) as c:
            c.health()

    def test_keys_private(self):
        for k in ("ca.key", "srv.key", "caller.key", "caller.both.pem"):
            self.assertEqual(stat.S_IMODE(os.stat(self.p(k)).st_mode), 0o600, k)

    def test_nothing_overwritten(self):
        before = open(self.p("srv.pem")).read()
        r = certs("server", "srv", "--ip", "127.0.0.1", "--dir", self.dir)
        self.assertEqual(r.returncode, 1)
        self.assertIn("srv.pem exists (--force overwrites it)", r.stderr)
        self.assertEqual(open(self.p("srv.pem")).read(), before)

    def test_usage_errors(self):
        for args, want in ((["server", "x"], "at least one --dns or --ip"),
                           (["server", "x", "--ip", "not-an-ip"], "not an IPv4 or IPv6"),
                           (["server", "x", "--dns", "a b"], "not a DNS name"),
                           (["client", "../x"], "letters, digits"),
                           (["client", "x", "--ip", "1.2.3.4"], "for server certificates"),
                           (["frob"], "unknown command"), (["ca", "--days", "0"], "--days")):
            r = certs(*args, "--dir", self.dir)
            self.assertEqual(r.returncode, 2, "%s: %s" % (args, r.stderr))
            self.assertIn(want, r.stderr, args)
        r = certs("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("Usage: sbx-certs", r.stdout)


class RecipeRsa(Recipe):
    KEY = ["--rsa"]

    def test_rsa_keys(self):
        r = subprocess.run(["openssl", "x509", "-in", self.p("srv.pem"), "-noout", "-text"],
                           capture_output=True, text=True, check=True)
        self.assertIn("rsaEncryption", r.stdout)


if __name__ == "__main__":
    unittest.main()
