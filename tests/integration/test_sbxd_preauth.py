# SPDX-License-Identifier: Apache-2.0
"""What a caller who is nobody costs sbxd (issue 7, section 1): the envelope
is scanned, not unpacked, before the token is checked, and a connection
whose request was refused before its caller was known is closed at its
next request. Attacked the way the issue measured it: 4 MiB Requests of
~840,000 small unknown fields from 8 token-less tcp connections, while a
legitimate caller runs a full cycle; contained means every flood request is
refused or its connection closed, and nothing of it was unpacked.

"Nothing was unpacked" is asserted by comparison within the run, never by
a budget in milliseconds (issue 15, item 6: sbxd's CPU per flood request
was 17-21 ms on a fresh machine of this kind, over the 15 ms budget this
test had, with nothing regressed). Each flood is sent twice: once as the
attack (unknown fields, which protobuf-c unpacks with an allocation each)
and once as bytes of the same size that sbxd's scan refuses at the same
place and protobuf-c would give up on at their first field. Unread, the
two cost sbxd the same; unpacked before the refusal, the first costs more
by what unpacking adds, which a known caller's requests measure in the
same run (bob's 4 MiB PutInput as unknown fields, less one of a single
bytes field). Checked to fail with the body or the envelope unpacked
before the token is checked."""
import json
import os
import socket
import struct
import sys
import threading
import unittest

from sbxdfix import VALGRIND, ServerTestCase, free_port, policy_json
from sbxrpc import CODE
from sbxrpc import sandbox_pb2 as pb

SP_REQ, SP_REP = 0x30, 0x31  # SP protocol numbers of REQ and REP
FLOOD_BYTES = 4 << 20
CONNS = 8
ROUNDS = 3
# Requests of each honest peer measured (one after another, on one
# connection) to price receiving and unpacking 4 MiB in this run.
PEER_REQUESTS = 6


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
        # The class's tests open ~60 connections from 127.0.0.1 within a
        # second or two: over the default new_per_peer_per_second (50, as
        # many in a burst), whose refusal at accept is test_sbxd_conns'
        # subject, not this one's (a fast machine lost flood connections to
        # it before their SP header).
        cfg["connections"] = {"pending_bytes_per_peer_mb": 64, "new_per_peer_per_second": 10000}
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

    def peer_cost(self, body):
        """sbxd's CPU per request, in ms, for bob's PutInput whose body is
        `body`, PEER_REQUESTS times on one connection; and the answers."""
        env = pb.Request(method="/sbx.v1.Sandbox/PutInput", body=body,
                         credentials=self.srv.tokens["bob"]).SerializeToString()
        self.assertLessEqual(len(env), FLOOD_BYTES)
        answers = []
        c = self.tcp_conn()
        try:
            before = cpu_ms(self.srv.proc.pid)
            for _ in range(PEER_REQUESTS):
                self.assertTrue(c.send(env))
                r = c.answer()
                self.assertIsNotNone(r, "sbxd closed a known caller's connection")
                answers.append((CODE[r.code], r.message))
            spent = cpu_ms(self.srv.proc.pid) - before
        finally:
            c.close()
        return spent / PEER_REQUESTS, answers

    def unpacking_cost(self):
        """What unpacking the flood's unknown fields adds to a 4 MiB request,
        measured now on a known caller (whose body sbxd does unpack): bob's
        PutInput with the fields as its body, less bob's PutInput with one
        4 MiB bytes field (received and copied once), in ms per request."""
        body = FLOOD_BYTES - 512  # room for the envelope and bob's token
        receive, answers = self.peer_cost(
            pb.PutInputRequest(run_id="run-0000000000000000", path="x",
                               data=b"\0" * (body - 64)).SerializeToString())
        # The handler read the field (and refused its size): it was unpacked.
        self.assertTrue(all(m.startswith("data: ") for _, m in answers), answers[:1])
        unpack, answers = self.peer_cost(unknown_fields()[:body])
        self.assertNotIn("UNAUTHENTICATED", {code for code, _ in answers}, answers[:1])
        print("a known caller's 4 MiB PutInput: %.2f ms as one bytes field, %.2f ms as "
              "unknown fields" % (receive, unpack), file=sys.stderr)
        return unpack - receive

    def flood(self, payload, want):
        """The flood: CONNS token-less connections at once, ROUNDS times, each
        sending `payload` twice, beside bob's cycle on the same listener.
        sbxd's CPU per flood request in ms, and what each request got."""
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
        firsts = [r for r in results if r[0] == "first"]
        seconds = [r for r in results if r[0] == "second"]
        self.assertEqual(len(firsts), CONNS * ROUNDS, results)
        for r in firsts:
            self.assertEqual(r[1], want, r)
        # The connection's next request is not looked at: it is closed.
        self.assertEqual([r[1] for r in seconds], ["closed"] * len(seconds), seconds)
        # The legitimate caller on the same listener was served throughout.
        self.assertTrue(legit and all(code == "OK" for _, code, _ in legit), legit)
        return spent / n, results

    def assert_not_unpacked(self, costly, cheap, want):
        """Floods `costly` (4 MiB that cost protobuf-c an allocation per
        field to unpack) and `cheap` (as many bytes, which protobuf-c would
        give up on at their first field), both refused with `want`. Not
        unpacked, what is in the bytes changes nothing: both cost sbxd the
        same. Unpacked before the refusal, each costly connection adds the
        unpacking that bob's requests measure in this run. Returns the
        costly flood's results."""
        per_costly, results = self.flood(costly, want)
        if VALGRIND:  # valgrind's costs per byte copied and per malloc are no measure
            return results
        per_cheap, _ = self.flood(cheap, want)
        unpacking = self.unpacking_cost()
        # Half the flood's requests are examined (the second on each
        # connection is closed unread): unpacked, a costly request would
        # cost per_cheap + unpacking / 2 on average. That must be more than
        # twice per_cheap, or the comparison below would say nothing.
        self.assertGreater(unpacking, 2 * per_cheap,
                           "unpacking 4 MiB of unknown fields adds %.2f ms to a request, a "
                           "refused 4 MiB request costs %.2f ms: too close to tell"
                           % (unpacking, per_cheap))
        self.assertLess(per_costly, 2 * per_cheap,
                        "a refused request of unknown fields cost %.2f ms, one of bytes an "
                        "unpack gives up on at once %.2f ms (unpacking adds %.2f ms): the "
                        "flood's bytes were unpacked before the refusal"
                        % (per_costly, per_cheap, unpacking))
        return results

    def test_unknown_fields_from_nobody_cost_a_scan_of_one_key(self):
        head = pb.Request(method="/sbx.v1.Sandbox/Health").SerializeToString()
        # As many bytes, the scan refusing the same key; an unpack would
        # stop there too (field 6's varint never ends).
        unending = head + b"\x30" + b"\xff" * (FLOOD_BYTES - len(head) - 1)
        results = self.assert_not_unpacked(unknown_fields(head), unending, "INVALID_ARGUMENT")
        self.assertIn("unknown field 6 at byte %d" % len(head), results[0][2])

    def test_a_body_from_nobody_is_never_unpacked(self):
        # A valid envelope without a token whose body is the flood: refused
        # UNAUTHENTICATED before the body is looked at. Beside it, the same
        # envelope whose body an unpack would give up on at its first byte.
        size = FLOOD_BYTES - 64
        env = pb.Request(method="/sbx.v1.Sandbox/PutInput",
                         body=unknown_fields()[:size]).SerializeToString()
        unending = pb.Request(method="/sbx.v1.Sandbox/PutInput",
                              body=b"\xff" * size).SerializeToString()
        results = self.assert_not_unpacked(env, unending, "UNAUTHENTICATED")
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
        # The socket's receive timeout (10 s) is far below nng's resend
        # time (60 s): an answer means the request went again on the new
        # connection, not that the resend timer fired.
        with Conn(self.tcp, timeout_ms=10000) as c:
            code, _, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse, token="wrong")
            self.assertEqual(code, "UNAUTHENTICATED")
            code, msg, h = c.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                  token=self.srv.tokens["alice"])
            self.assertEqual((code, h.identity), ("OK", "token:alice"), msg)


if __name__ == "__main__":
    unittest.main()
