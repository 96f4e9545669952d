# SPDX-License-Identifier: Apache-2.0
"""Hostile scrapers of sbxd's metrics listener (metrics.listen on a free
loopback port; any local user can reach it): a slowloris holding every one
of its slots by trickling a request head is shut down by sbxd at the
slots' fixed lifetime although it keeps sending (then a scrape is served
again), while Health answers on ipc throughout; a request head far past
nng's 8 KiB buffer costs sbxd that buffer, not the bytes sent (the
connection is closed, sbxd's memory does not grow by them)."""
import http.client
import re
import socket
import time
import unittest

from sbxdfix import Server
from sbxrpc import sandbox_pb2 as pb

HTTP_MAX = 8  # conn_guard.h: CONN_GUARD_HTTP_MAX


class MetricsHostile(unittest.TestCase):
    def setUp(self):
        self.srv = Server(metrics={"listen": "127.0.0.1:0"})
        deadline = time.monotonic() + 60
        while True:
            with open(self.srv.path("sbxd.stderr"), errors="replace") as f:
                m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", f.read())
            if m:
                self.port = int(m.group(1))
                break
            self.assertLess(time.monotonic(), deadline, self.srv.log_tail())
            time.sleep(0.05)

    def tearDown(self):
        rc = self.srv.stop()
        log = self.srv.log_tail()
        self.srv.cleanup()
        self.assertEqual(rc, 0, log)

    def scrape(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request("GET", "/metrics")
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()

    def health(self):
        with self.srv.conn() as c:
            code, msg, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse)
            self.assertEqual(code, "OK", msg)

    def test_a_slowloris_is_shut_at_the_slots_lifetime(self):
        self.assertEqual(self.scrape()[0], 200)
        held = []
        try:
            for _ in range(HTTP_MAX):
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                s.sendall(b"GET /metrics HTTP/1.1\r\n")
                held.append(s)
            open_ = set(held)
            deadline = time.monotonic() + 120  # the lifetime is 30 s
            n = 0
            while open_ and time.monotonic() < deadline:
                for s in list(open_):
                    try:
                        # One header byte at a time, never the blank line.
                        s.sendall(b"X-%d: y\r\n" % n if n % 2 else b"X")
                        s.settimeout(0.05)
                        if s.recv(4096) == b"":
                            open_.discard(s)
                    except socket.timeout:
                        pass
                    except OSError:
                        open_.discard(s)
                n += 1
                if n % 20 == 0:
                    self.health()
                time.sleep(0.2)
            self.assertEqual(open_, set(), "sbxd kept a trickling connection past its lifetime")
        finally:
            for s in held:
                s.close()
        deadline = time.monotonic() + 60
        while self.scrape_status() != 200:
            self.assertLess(time.monotonic(), deadline, "no scrape after the slowloris")
            time.sleep(0.2)

    def scrape_status(self):
        try:
            return self.scrape()[0]
        except (OSError, http.client.HTTPException):
            return None

    def rss_kb(self):
        with open("/proc/%d/status" % self.srv.proc.pid) as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

    def test_a_huge_request_head_costs_a_buffer(self):
        self.assertEqual(self.scrape()[0], 200)
        before = self.rss_kb()
        sent = 0
        closed = 0
        for _ in range(HTTP_MAX):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            try:
                s.sendall(b"GET /metrics HTTP/1.1\r\n")
                chunk = b"X-Big: " + b"a" * 65536 + b"\r\n"
                for _ in range(64):  # 4 MiB a connection, unless sbxd closes first
                    s.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                closed += 1  # sbxd closed it (reset) mid-send: what we want
            else:
                s.shutdown(socket.SHUT_WR)
                try:
                    while s.recv(65536):
                        pass
                except OSError:
                    pass
                closed += 1
            finally:
                s.close()
        self.assertEqual(closed, HTTP_MAX)
        self.health()
        grown = self.rss_kb() - before
        # Each connection sent up to 4 MiB: what sbxd kept is far less.
        self.assertLess(grown * 1024, sent // 8, "rss grew %d KiB for %d bytes sent" %
                        (grown, sent))
        deadline = time.monotonic() + 60
        while self.scrape_status() != 200:
            self.assertLess(time.monotonic(), deadline, "no scrape after the huge heads")
            time.sleep(0.2)


if __name__ == "__main__":
    unittest.main()
