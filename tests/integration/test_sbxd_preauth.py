# SPDX-License-Identifier: Apache-2.0
"""What a caller who is nobody costs sbxd (issue 7, section 1): the envelope
is scanned, not unpacked, before the token is checked, and a connection
whose request was refused before its caller was known is closed at its
next request. Attacked the way the issue measured it: 4 MiB Requests of
~840,000 small unknown fields from 8 token-less tcp connections, while a
legitimate caller runs a full cycle; contained means every flood request is
refused or its connection closed, and sbxd's CPU time per flood request is
bounded (it was ~100 ms of protobuf-c unpacking each before)."""
import json
import os
import socket
import struct
import sys
import threading
import time
import unittest

from sbxdfix import VALGRIND, ServerTestCase, free_port, policy_json
from sbxrpc import CODE
from sbxrpc import sandbox_pb2 as pb

SP_REQ, SP_REP = 0x30, 0x31  # SP protocol numbers of REQ and REP
FLOOD_BYTES = 4 << 20
CONNS = 8
ROUNDS = 3
# sbxd's CPU per 4 MiB flood request: reading it off the socket and a scan
# of one key. Generous for a loaded 2-core CI machine; before the scan it
# was ~20x this.
CPU_MS_PER_REQUEST = 15


class SpConn:
    """One raw SP connection in nng's framing (8-byte header exchange, then
    8-byte big-endian lengths, on ipc after a type byte 1; a REQ message
    starts with its 32-bit id), so the test sees exactly when sbxd closes it."""

    def __init__(self, family, addr):
        self.kind = b"\x01" if family == socket.AF_UNIX else b""
        self.s = socket.socket(family, socket.SOCK_STREAM)
        self.s.settimeout(30)
        self.s.connect(addr)
        self.s.sendall(b"\x00SP\x00" + struct.pack(">H", SP_REQ) + b"\x00\x00")
        hdr = self.recv_exact(8)
        assert hdr and hdr[:4] == b"\x00SP\x00" and hdr[4:6] == struct.pack(">H", SP_REP), hdr
        self.next_id = 1

    def recv_exact(self, n):
        data = b""
        while len(data) < n:
            try:
                part = self.s.recv(n - len(data))
            except ConnectionResetError:
                return None
            if not part:
                return None
            data += part
        return data

    def send(self, payload):
        msg = struct.pack(">I", 0x80000000 | self.next_id) + payload
        self.next_id += 1
        try:
            self.s.sendall(self.kind + struct.pack(">Q", len(msg)) + msg)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def answer(self):
        """The Response, or None when sbxd closed the connection instead."""
        hdr = self.recv_exact(len(self.kind) + 8)
        if hdr is None:
            return None
        data = self.recv_exact(struct.unpack(">Q", hdr[len(self.kind):])[0])
        if data is None:
            return None
        resp = pb.Response()
        resp.ParseFromString(data[4:])  # after the request id
        return resp

    def close(self):
        self.s.close()


def unknown_fields(prefix=b""):
    """prefix, then 5-byte unknown fields (field 6, a 4-byte varint) up to
    4 MiB: the issue's 838,856 fields."""
    n = (FLOOD_BYTES - len(prefix)) // 5
    return prefix + b"\x30\x81\x82\x83\x04" * n


def cpu_ms(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


class PreAuth(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.srv.stop()
        cls.port = free_port()
        cls.tcp = "tcp://127.0.0.1:%d" % cls.port
        with open(cls.srv.config) as f:
            cfg = json.load(f)
        cfg["listen"] = [cls.srv.ipc, cls.srv.tls, cls.tcp]
        cfg["insecure"] = True
        # CONNS floods of 4 MiB at once from one peer: over the default
        # pending budget of 16 MiB per peer, which would reset them unread.
        cfg["connections"] = {"pending_bytes_per_peer_mb": 64}
        with open(cls.srv.config, "w") as f:
            json.dump(cfg, f)
        cls.srv.start()

    def tcp_conn(self):
        return SpConn(socket.AF_INET, ("127.0.0.1", self.port))

    def flood_one(self, payload, want, results):
        """One connection: the first request is refused with `want`, the
        second closes the connection unanswered."""
        c = self.tcp_conn()
        try:
            c.send(payload)
            r = c.answer()
            results.append(("first", CODE[r.code] if r else "closed", r.message if r else ""))
            c.send(payload)
            r = c.answer()
            results.append(("second", CODE[r.code] if r else "closed", r.message if r else ""))
        finally:
            c.close()

    def legit_cycle(self, out):
        bob = self.srv.tokens["bob"]
        from sbxrpc import Conn
        with Conn(self.tcp) as c:
            code, msg, r = c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                  pb.CreateRunResponse, token=bob)
            out.append(("CreateRun", code, msg))
            if code != "OK":
                return
            run = r.run_id
            code, msg, e = c.call("Exec", pb.ExecRequest(run_id=run, argv=["/bin/true"]),
                                  pb.ExecResponse, token=bob)
            out.append(("Exec", code, msg))
            if code == "OK":
                code, msg, _ = c.call("Wait", pb.WaitRequest(run_id=run, exec_id=e.exec_id,
                                                             timeout_ms=20000),
                                      pb.WaitResponse, token=bob)
                out.append(("Wait", code, msg))
            code, msg, _ = c.call("Teardown", pb.TeardownRequest(run_id=run),
                                  pb.TeardownResponse, token=bob)
            out.append(("Teardown", code, msg))

    def flood(self, payload, want):
        results, legit = [], []
        before = cpu_ms(self.srv.proc.pid)
        for _ in range(ROUNDS):
            ts = [threading.Thread(target=self.flood_one, args=(payload, want, results))
                  for _ in range(CONNS)]
            ts.append(threading.Thread(target=self.legit_cycle, args=(legit,)))
            for t in ts:
                t.start()
            for t in ts:
                t.join(120)
        spent = cpu_ms(self.srv.proc.pid) - before
        n = 2 * CONNS * ROUNDS
        print("%s flood: sbxd spent %.0f ms of CPU on %d requests (%.2f ms each)"
              % (want, spent, n, spent / n), file=sys.stderr)
        if not VALGRIND:  # valgrind's own cost per byte copied is no measure
            self.assertLess(spent / n, CPU_MS_PER_REQUEST,
                            "sbxd spent %.0f ms of CPU on %d flood requests" % (spent, n))
        firsts = [r for r in results if r[0] == "first"]
        seconds = [r for r in results if r[0] == "second"]
        self.assertEqual(len(firsts), CONNS * ROUNDS, results)
        for r in firsts:
            self.assertEqual(r[1], want, r)
        # The connection's next request is not looked at: it is closed.
        self.assertEqual([r[1] for r in seconds], ["closed"] * len(seconds), seconds)
        # The legitimate caller on the same listener was served throughout.
        self.assertTrue(legit and all(code == "OK" for _, code, _ in legit), legit)
        return results

    def test_unknown_fields_from_nobody_cost_a_scan_of_one_key(self):
        head = pb.Request(method="/sbx.v1.Sandbox/Health").SerializeToString()
        results = self.flood(unknown_fields(head), "INVALID_ARGUMENT")
        self.assertIn("unknown field 6 at byte %d" % len(head), results[0][2])

    def test_a_body_from_nobody_is_never_unpacked(self):
        # A valid envelope without a token whose body is the flood: refused
        # UNAUTHENTICATED before the body is looked at.
        env = pb.Request(method="/sbx.v1.Sandbox/PutInput",
                         body=unknown_fields()[:FLOOD_BYTES - 64]).SerializeToString()
        results = self.flood(env, "UNAUTHENTICATED")
        self.assertIn("missing token", results[0][2])

    def test_ipc_callers_are_known_before_the_body(self):
        # On ipc the kernel names the caller: a bad envelope is that uid's
        # mistake, answered every time, and its connection stays.
        c = SpConn(socket.AF_UNIX, self.srv.ipc[len("ipc://"):])
        try:
            for _ in range(3):
                self.assertTrue(c.send(unknown_fields()))
                r = c.answer()
                self.assertIsNotNone(r, "sbxd closed a known caller's connection")
                self.assertEqual(CODE[r.code], "INVALID_ARGUMENT", r.message)
            c.send(pb.Request(method="/sbx.v1.Sandbox/Health").SerializeToString())
            r = c.answer()
            self.assertEqual(CODE[r.code], "OK", r.message)
        finally:
            c.close()

    def test_an_honest_client_recovers_from_a_refusal(self):
        # nng's REQ socket dials again and resends when sbxd closes the
        # connection: a wrong token, then the right one, on one socket.
        from sbxrpc import Conn
        with Conn(self.tcp, timeout_ms=10000) as c:
            code, _, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse, token="wrong")
            self.assertEqual(code, "UNAUTHENTICATED")
            t = time.monotonic()
            code, msg, h = c.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                  token=self.srv.tokens["alice"])
            self.assertEqual((code, h.identity), ("OK", "token:alice"), msg)
            self.assertLess(time.monotonic() - t, 5)


if __name__ == "__main__":
    unittest.main()
