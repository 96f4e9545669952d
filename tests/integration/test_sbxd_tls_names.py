# SPDX-License-Identifier: Apache-2.0
"""The C client (sbxctl) checks the server's name as the Python client does:
dialing tls+tcp://127.0.0.1:PORT, a certificate whose only subjectAltName is
IP:127.0.0.1 is accepted (nng 1.5.2's mbedtls engine alone refused it:
clients/c/tls_names.c); one naming only DNS:localhost, another address, or
the address spelled as a dNSName or as its CN is refused, with an error that
names the mismatch and the names the certificate carries. A DNS name still
matches its dNSName, and not another."""
import os
import subprocess
import sys
import unittest

from sbxdfix import CLI, Server, openssl

# The Python client, from the source tree and its generated classes in the build.
SOURCE = os.environ.get("SBX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.dirname(os.environ.get("SBX_PYTHON_PROTO", "").rstrip("/"))
sys.path[:0] = [os.path.join(SOURCE, "clients", "python"), os.path.join(BUILD, "clients", "python")]
import sbx_client  # noqa: E402


def server_cert(d, name, ext):
    """NAME.pem/NAME.key signed by the test CA, with these extensions."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + name.split("~")[0],
            "-keyout", name + ".key", "-out", name + ".csr", cwd=d)
    with open(os.path.join(d, name + ".ext"), "w") as f:
        f.write(ext + "\n")
    args = ["x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", name + ".pem"]
    if ext:
        args += ["-extfile", name + ".ext"]
    openssl(*args, cwd=d)


class TlsNames(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server()
        d = cls.srv.dir
        server_cert(d, "ip-only", "subjectAltName=IP:127.0.0.1")
        server_cert(d, "dns-only", "subjectAltName=DNS:localhost")
        server_cert(d, "other-ip", "subjectAltName=IP:127.0.0.2")
        server_cert(d, "ip-as-dns", "subjectAltName=DNS:127.0.0.1")
        # CN=127.0.0.1 and no subjectAltName at all.
        server_cert(d, "127.0.0.1~cn", "")

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        try:
            assert rc == 0, "sbxd exited %s on SIGTERM: %s" % (rc, cls.srv.log_tail())
        finally:
            cls.srv.cleanup()

    def serve(self, name):
        s = self.srv
        s.restart_with(tls={"cert": s.path(name + ".pem"), "key": s.path(name + ".key"),
                            "client_ca": s.path("ca.pem")})

    def health(self, host, server_name=None):
        s = self.srv
        args = ["--endpoint", "tls+tcp://%s:%d" % (host, s.port), "--tls-cert",
                s.path("client.pem"), "--tls-key", s.path("client.key"), "--tls-ca",
                s.path("ca.pem"), "--token", s.tokens["alice"], "--call-timeout", "20"]
        if server_name:
            args += ["--tls-server-name", server_name]
        e = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        return subprocess.run([CLI] + args + ["health"], capture_output=True,
                              text=True, timeout=120, env=e)

    def test_ip_san_accepted(self):
        self.serve("ip-only")
        r = self.health("127.0.0.1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(self.python_health("127.0.0.1"), "the Python client refused it")

    def python_health(self, host):
        """The Python client's verdict (OpenSSL's check) on the same server."""
        s = self.srv
        tls = sbx_client.TLS(ca=s.path("ca.pem"), cert=s.path("client.pem"),
                             key=s.path("client.key"))
        try:
            with sbx_client.connect("tls+tcp://%s:%d" % (host, s.port), token=s.tokens["alice"],
                                    tls=tls, timeout=20) as c:
                c.health()
            return True
        except (sbx_client.SbxError, OSError):
            return False

    def refused(self, cert, host, names, server_name=None):
        self.serve(cert)
        r = self.health(host, server_name)
        self.assertNotEqual(r.returncode, 0, "%s accepted for %s" % (cert, host))
        want = server_name or host
        self.assertIn("does not name %s" % want, r.stderr)
        self.assertIn("it names %s" % names, r.stderr)
        self.assertNotIn("Cryptographic error", r.stderr.split("does not name")[0])
        if not server_name:
            self.assertFalse(self.python_health(host), "the Python client accepted it")

    def test_dns_only_refused_for_an_address(self):
        self.refused("dns-only", "127.0.0.1", "DNS:localhost")

    def test_other_address_refused(self):
        self.refused("other-ip", "127.0.0.1", "IP:127.0.0.2")

    def test_address_spelled_as_dns_name_refused(self):
        self.refused("ip-as-dns", "127.0.0.1", "DNS:127.0.0.1")

    def test_address_as_common_name_refused(self):
        self.refused("127.0.0.1~cn", "127.0.0.1", "no subjectAltName")

    def test_dns_names_still_checked(self):
        self.serve("dns-only")
        r = self.health("127.0.0.1", server_name="localhost")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.refused("dns-only", "127.0.0.1", "DNS:localhost", server_name="other.example")


if __name__ == "__main__":
    unittest.main()
