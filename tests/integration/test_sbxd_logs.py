# SPDX-License-Identifier: Apache-2.0
"""sbxd's stderr (what journald keeps): a TLS connection that ends before
its handshake completed is logged with the peer's address, a storm of them
in a bounded number of lines (the rest counted as suppressed), and a
connection that completes its handshake is not logged at all."""
import re
import socket
import ssl
import time
import unittest

from sbxdfix import ServerTestCase
from sbxrpc import sandbox_pb2 as pb

LINE = re.compile(r"^sbxd: tls\+tcp: connection from 127\.0\.0\.1:(\d+) closed \d+ ms after "
                  r"accept before its TLS handshake completed: .*?(?: \((\d+) more suppressed\))?$")
MORE = re.compile(r"^sbxd: tls\+tcp: (\d+) more connections closed before their TLS handshake "
                  r"completed \(suppressed\)$")


class HandshakeLog(ServerTestCase):
    SERVER_CONFIG = {"connections": {"new_per_peer_per_second": 1000, "per_peer": 1000}}

    def lines(self):
        return [line for line in self.srv.log_tail().splitlines() if line.startswith("sbxd: tls+tcp: ")]

    def rogue(self):
        """A client whose certificate the server's client_ca did not sign."""
        ctx = ssl.create_default_context(cafile=self.srv.path("ca.pem"))
        ctx.load_cert_chain(self.srv.path("rogue.pem"), self.srv.path("rogue.key"))
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        port = s.getsockname()[1]
        try:
            with ctx.wrap_socket(s, server_hostname="localhost") as t:
                t.recv(1)  # TLS 1.3: the refusal arrives after the client's finish
        except (ssl.SSLError, OSError):
            pass
        finally:
            s.close()
        return port

    def wait_lines(self, pred, seconds=30):
        deadline = time.monotonic() + seconds  # a hang bound
        while time.monotonic() < deadline:
            found = self.lines()
            if pred(found):
                return found
            time.sleep(0.05)
        return self.lines()

    def test_1_a_good_connection_is_not_logged_a_bad_one_is(self):
        with self.srv.conn(tls=True) as c:
            code, _, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                token=self.srv.tokens["bob"])
            self.assertEqual(code, "OK")
        time.sleep(0.5)  # its close, had it been logged, is logged by now
        self.assertEqual(self.lines(), [])
        port = self.rogue()
        found = self.wait_lines(lambda f: len(f) >= 1)
        self.assertEqual(len(found), 1, found)
        m = LINE.match(found[0])
        self.assertIsNotNone(m, found[0])
        self.assertEqual(int(m.group(1)), port)

    def test_2_a_storm_is_rate_limited(self):
        before = len(self.lines())
        n = 200
        for _ in range(n):
            # Half plain TCP that says nothing and leaves, half a refused
            # certificate.
            if _ % 2:
                socket.create_connection(("127.0.0.1", self.srv.port), timeout=10).close()
            else:
                self.rogue()
        # Every connection is accounted for: in a line of its own, or
        # counted in a suppressed total (with the next line or a sweep).

        def total(found):
            t = 0
            for line in found[before:]:
                m, more = LINE.match(line), MORE.match(line)
                self.assertTrue(m or more, line)
                t += 1 if m else 0
                t += int(m.group(2) or 0) if m else int(more.group(1))
            return t
        found = self.wait_lines(lambda f: total(f) >= n)
        self.assertEqual(total(found), n, found[before:])
        written = len(found) - before
        self.assertLess(written, n / 4, "%d lines for %d failed handshakes" % (written, n))
        with self.srv.conn(tls=True) as c:  # and sbxd still serves
            code, _, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                token=self.srv.tokens["bob"])
            self.assertEqual(code, "OK")


if __name__ == "__main__":
    unittest.main()
