# SPDX-License-Identifier: Apache-2.0
"""sbxd bounds the connections a peer can hold and what they cost.

Attacks from raw sockets (sbxraw.py): another peer is 127.0.0.2 (or more
loopback addresses) on tcp and tls+tcp; on ipc it is this uid, so the
legitimate caller then comes over tls+tcp from 127.0.0.1. Each test fails
on a tree without the caps: the attacker's connections are all accepted,
their memory is held, their requests hold every context."""
import json
import os
import resource
import socket
import stat
import struct
import time
import unittest

import sbxdfix
import sbxraw
import sbxrpc
from sbxdfix import Server, free_port, policy_json
from sbxrpc import sandbox_pb2 as pb

MIB = 1 << 20


def server(test, connections, tcp=True, **config):
    """sbxd with ipc, tls+tcp and (tcp=True) tcp://127.0.0.1 listeners."""
    srv = Server(connections=connections, **config)
    test.addCleanup(srv.cleanup)
    srv.stop()
    with open(srv.config) as f:
        cfg = json.load(f)
    srv.tcp = "tcp://127.0.0.1:%d" % free_port()
    if tcp:
        cfg["listen"] = [srv.ipc, srv.tls, srv.tcp]
        cfg["insecure"] = True
    cfg["connections"] = connections
    with open(srv.config, "w") as f:
        json.dump(cfg, f)
    srv.start()
    return srv


def target(url):
    if url.startswith("ipc://"):
        return ("unix", url[len("ipc://"):])
    host, port = url.split("://")[1].rsplit(":", 1)
    return ("inet", (host, int(port)))


def health(srv, tls=True, timeout_ms=5000):
    """One Health on a fresh connection from 127.0.0.1 (tls) or this uid."""
    with srv.conn(tls=tls, timeout_ms=timeout_ms) as c:
        code, msg, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse,
                              token=srv.tokens["alice"] if tls else None)
    return code


def hold(url, n, source=sbxraw.ATTACKER_IP):
    """n connections that finish the SP handshake and then sit; (held,
    refused): refused ones were closed by sbxd before its SP header."""
    held, refused = [], 0
    for _ in range(n):
        s = sbxraw.connect(target(url), source=source)
        if sbxraw.sp_handshake(s):
            held.append(s)
        else:
            refused += 1
            s.close()
    return held, refused


def health_soon(srv, tls=False, within=3.0):
    """Health once the connections sbxd closed have given their counts
    back (nng closes their descriptors a moment after the peer sees EOF)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return health(srv, tls=tls)
        except sbxrpc.NngError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def closed_by_server(s, within):
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


class Caps(unittest.TestCase):
    def test_connections_over_a_peers_or_a_listeners_cap_are_refused_at_once(self):
        srv = server(self, {"per_listener": 30, "per_peer": 12,
                            "new_per_peer_per_second": 1000})
        held, refused = hold(srv.tcp, 20)
        self.addCleanup(lambda: [s.close() for s in held])
        self.assertEqual((len(held), refused), (12, 8), "per_peer 12 on 127.0.0.2")
        # Another peer is not charged for it.
        with sbxrpc.Conn(srv.tcp, timeout_ms=5000) as c:
            code, _, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                token=srv.tokens["alice"])
        self.assertEqual(code, "OK")
        # The listener's cap counts every peer: 12 + 12 + 6 more, then each
        # newcomer shuts down the oldest connection that never brought a
        # request (test_a_full_listener_...): 30 stay open.
        more, _ = hold(srv.tcp, 12, source="127.0.0.3")
        rest, refused = hold(srv.tcp, 10, source="127.0.0.4")
        late = sbxraw.connect(target(srv.tcp), source="127.0.0.5")
        self.assertTrue(sbxraw.sp_handshake(late), "a newcomer evicts a silent connection")
        self.assertEqual((len(more), len(rest), refused), (12, 10, 0))
        time.sleep(0.3)
        everyone = held + more + rest + [late]
        gone = [i for i, s in enumerate(everyone) if closed_by_server(s, 0.05)]
        self.assertEqual(len(gone), 5, "per_listener 30: 5 evicted")
        self.assertLess(max(gone), 12, "the oldest ones (127.0.0.2's) are evicted first")
        held = [s for i, s in enumerate(everyone) if i not in gone]
        self.addCleanup(lambda: [s.close() for s in everyone])
        # Other listeners have their own caps.
        self.assertEqual(health(srv), "OK")
        self.assertEqual(health(srv, tls=False), "OK")
        # Closed connections are given back.
        for s in held[:12]:
            s.close()
        time.sleep(0.5)
        again, refused = hold(srv.tcp, 3)
        held += again
        self.assertEqual((len(again), refused), (3, 0), "counts given back on close")

    def test_a_full_listener_evicts_silent_connections_and_times_them_out(self):
        """e2 scaled down: 5 addresses x 8 connections that finish the SP
        handshake and send nothing fill a tcp listener of 40. A caller from
        127.0.0.1 still connects (the oldest silent connection is shut down
        for it) and calls Health; the silent ones are closed
        first_request_seconds after accept, long before idle_seconds."""
        srv = server(self, {"per_listener": 40, "per_peer": 8, "first_request_seconds": 4,
                            "new_per_peer_per_second": 1000})
        held = []
        self.addCleanup(lambda: [s.close() for s in held])
        for a in range(2, 7):
            more, _ = hold(srv.tcp, 8, source="127.0.0.%d" % a)
            held += more
        self.assertEqual(len(held), 40, "the listener is full")
        t0 = time.monotonic()
        for _ in range(3):
            with sbxrpc.Conn(srv.tcp, timeout_ms=3000) as c:
                code, _, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                    token=srv.tokens["alice"])
            self.assertEqual(code, "OK", "a caller gets in beside 40 silent connections")
        # Beside them, not after them: each caller's connection shut down
        # one silent connection, the rest are still open (their
        # first_request_seconds has not closed them all).
        gone = [s for s in held if closed_by_server(s, 0.01)]
        self.assertLessEqual(len(gone), 3, "silent connections closed before the callers got in")
        deadline = t0 + 4 + 3
        for s in held:
            if s not in gone:
                self.assertTrue(closed_by_server(s, max(0.1, deadline - time.monotonic())),
                                "a connection with no request is closed after 4 s")

    def test_new_connections_per_peer_per_second(self):
        srv = server(self, {"new_per_peer_per_second": 5})
        admitted = refused = 0
        t0 = time.monotonic()
        for _ in range(20):
            s = sbxraw.connect(target(srv.tcp))
            if sbxraw.refused(s):
                refused += 1
            else:
                admitted += 1
            s.close()
        took = time.monotonic() - t0
        # A burst of 5, then refused; however long the 20 took, the budget
        # refilled by at most 5 a second of it (usually they take a few
        # hundredths: 5 admitted, 15 refused).
        self.assertGreaterEqual(admitted, 5, (admitted, refused, took))
        self.assertLessEqual(admitted, 5 + 5 * took + 1, (admitted, refused, took))
        # Meanwhile another peer (127.0.0.1) is not refused, and is served.
        s = sbxraw.connect(target(srv.tcp), source=None)
        self.assertFalse(sbxraw.refused(s), "another peer's connection was refused")
        s.close()
        with sbxrpc.Conn(srv.tcp, timeout_ms=5000) as c:
            code, _, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                token=srv.tokens["alice"])
        self.assertEqual(code, "OK")
        # And the budget refills: 5 a second.
        time.sleep(0.5)
        s = sbxraw.connect(target(srv.tcp))
        self.assertFalse(sbxraw.refused(s))
        s.close()


class Held(unittest.TestCase):
    def test_partial_messages_hold_bounded_memory_and_are_closed(self):
        """200 connections each send the SP header and all but the last byte
        of a 4 MiB message: nng allocates the whole message before sbxd sees
        anything. At most per_peer of them are accepted, and each is closed
        message_seconds after its message began."""
        srv = server(self, {"per_peer": 40, "per_listener": 300, "message_seconds": 3,
                            "new_per_peer_per_second": 1000}, tcp=False)
        rss0 = srv.rss_kb()
        body = 4 * MIB
        held = []
        self.addCleanup(lambda: [s.close() for s in held])
        t0 = time.monotonic()
        for _ in range(200):
            s = sbxraw.connect(target(srv.ipc))
            try:
                if not sbxraw.sp_handshake(s):
                    s.close()
                    continue
                s.sendall(b"\x01" + struct.pack(">Q", body) + b"\0" * (body - 1))
                held.append(s)
            except (BrokenPipeError, ConnectionResetError):
                s.close()
        grown = srv.rss_kb() - rss0
        print("held %d partial messages, sbxd grew %d MiB in %.1f s" %
              (len(held), grown // 1024, time.monotonic() - t0))
        self.assertLessEqual(len(held), 40)
        self.assertLess(grown, (40 * 4 + 64) * 1024, "RSS bounded by per_peer x 4 MiB")
        # A caller from another peer is served meanwhile.
        self.assertEqual(health(srv), "OK")
        # Closed after message_seconds (3 s), not held as long as the peer likes.
        deadline = time.monotonic() + 3 + 4
        for s in held:
            self.assertTrue(closed_by_server(s, max(0.1, deadline - time.monotonic())),
                            "a partial message is cut off after message_seconds")
        self.assertEqual(health_soon(srv), "OK")

    def test_partial_messages_from_many_peers_are_bounded_by_the_pending_budgets(self):
        """4 addresses x 16 tcp connections, no token, each announces a 4 MiB
        message and sends all but 16 bytes of it (256 MiB in all; before the
        pending budgets sbxd held all of it). Each peer may have 8 MiB
        announced and not yet complete, all peers together 24 MiB: a length
        over that resets the connection before nng allocates it."""
        srv = server(self, {"pending_bytes_per_peer_mb": 8, "pending_bytes_mb": 24,
                            "new_per_peer_per_second": 1000})
        rss0 = srv.rss_kb()
        body = 4 * MIB
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        for a in range(2, 6):
            for _ in range(16):
                s = sbxraw.connect(target(srv.tcp), source="127.0.0.%d" % a)
                socks.append(s)
                try:
                    if sbxraw.sp_handshake(s):
                        s.sendall(struct.pack(">Q", body) + b"\0" * (body - 16))
                except (BrokenPipeError, ConnectionResetError):
                    pass
        grown = srv.rss_kb() - rss0
        # A legitimate small call is served while the budget is full.
        with sbxrpc.Conn(srv.tcp, timeout_ms=5000) as c:
            code, _, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                token=srv.tokens["alice"])
        self.assertEqual(code, "OK")
        open_ = sum(not closed_by_server(s, 0.05) for s in socks)
        print("64 partial 4 MiB messages: %d left open, sbxd grew %d MiB" %
              (open_, grown // 1024))
        self.assertLessEqual(open_, 6, "24 MiB in all: 6 messages of 4 MiB")
        self.assertLess(grown, (24 + 64) * 1024, "RSS bounded by pending_bytes_mb")

    def test_idle_connections_are_capped_within_the_descriptors_and_closed(self):
        """~2,000 idle connections (handshake, nothing else) from several
        addresses: the caps hold them within sbxd's descriptors less its
        reserve for runs, Health answers and an exec cycle (which needs
        descriptors) works; idle_seconds later they are closed."""
        # This process holds the attacker's ends.
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        wrapper = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                               "sbxd-nofile-%d.sh" % os.getpid())
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nulimit -n 2048 && exec %s \"$@\"\n" % sbxdfix.SBXD)
        os.chmod(wrapper, stat.S_IRWXU)
        self.addCleanup(os.unlink, wrapper)
        real, sbxdfix.SBXD = sbxdfix.SBXD, wrapper
        self.addCleanup(setattr, sbxdfix, "SBXD", real)
        # 3 x (500 + 1 + 8 evicting) + the reserve (64 + 16 closing + 16 x runs_max 32 + 16 x workers 16
        # = 848, and each run's execs' share: half of the 1200 left over 32 runs, in whole
        # execs of 7, 14 x 32 = 448) is more than 2048: sbxd says so and does not start.
        with self.assertRaises(RuntimeError) as e:
            server(self, {"per_listener": 500, "per_peer": 500})
        self.assertIn("over RLIMIT_NOFILE 2048", str(e.exception))
        # Unwritten, per_listener shrinks to fit, and per_peer to at most a
        # quarter of it: (2048 - 1296 kept) / 3 - 1 - 8 = 241, per_peer 60;
        # at a written per_peer of 500, 60 too.
        small = server(self, {})
        with open(small.path("sbxd.stderr")) as f:
            log = f.read()
        self.assertIn("per_listener lowered from 1024 to 241 and per_peer from 64 to 60", log)
        self.assertIn("exec_fds_per_run fits 14 descriptors (2 execs at once a run) in "
                      "RLIMIT_NOFILE 2048 beside 848 kept", log)
        small.cleanup()
        small = server(self, {"per_peer": 500})
        with open(small.path("sbxd.stderr")) as f:
            self.assertIn("per_listener lowered from 1024 to 241 and per_peer from 500 to 60",
                          f.read())
        small.cleanup()
        srv = server(self, {"per_listener": 220, "per_peer": 200, "idle_seconds": 4,
                            "new_per_peer_per_second": 100000})
        fds0 = srv.fd_count()
        held, refused = [], 0
        self.addCleanup(lambda: [s.close() for s in held])
        for i in range(2000):
            url = srv.tcp if i % 2 else srv.tls
            try:
                s = sbxraw.connect(target(url), source="127.0.0.%d" % (2 + i % 6))
            except OSError:
                refused += 1
                continue
            if url == srv.tls or sbxraw.sp_handshake(s):
                held.append(s)  # tls: a TCP connection that never says hello
            else:
                refused += 1
                s.close()
        time.sleep(0.5)
        fds = srv.fd_count()
        print("%d held, %d refused; sbxd fds %d -> %d" % (len(held), refused, fds0, fds))
        self.assertLessEqual(fds - fds0, 2 * (220 + 8) + 2)
        self.assertEqual(health(srv, tls=False), "OK")
        with srv.conn(timeout_ms=10000) as c:
            code, msg, r = c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                  pb.CreateRunResponse)
            self.assertEqual(code, "OK", msg)
            code, msg, e = c.call("Exec", pb.ExecRequest(run_id=r.run_id,
                                                         argv=["/bin/sh", "-c", "echo x > /out/x"]),
                                  pb.ExecResponse)
            self.assertEqual(code, "OK", msg)
            code, msg, w = c.call("Wait", pb.WaitRequest(run_id=r.run_id, exec_id=e.exec_id,
                                                         timeout_ms=5000), pb.WaitResponse)
            self.assertEqual((code, w.status.exit_code), ("OK", 0), msg)
            code, msg, a = c.call("ListArtifacts", pb.ListArtifactsRequest(run_id=r.run_id),
                                  pb.ListArtifactsResponse)
            self.assertEqual(code, "OK", msg)
            code, msg, _ = c.call("Teardown", pb.TeardownRequest(run_id=r.run_id),
                                  pb.TeardownResponse)
            self.assertEqual(code, "OK", msg)
        self.assertFalse(os.path.exists(os.path.join(srv.state, "runs", r.run_id)))
        # The tls ones never finished a handshake: nng's 10 s negotiation
        # timeout. The tcp ones: idle_seconds (4) with no request.
        deadline = time.monotonic() + 4 + 3
        tcp_held = [s for s in held if s.getpeername()[1] == target(srv.tcp)[1][1]]
        for s in tcp_held:
            self.assertTrue(closed_by_server(s, max(0.1, deadline - time.monotonic())),
                            "an idle connection is closed after idle_seconds")


class Contexts(unittest.TestCase):
    def test_a_peer_with_many_connections_cannot_hold_every_context(self):
        """14 ipc connections each pipeline 8 FetchArtifact requests for 1 MiB
        and never read: 8 per connection is within the per-connection
        limit, but together they would hold every context and a new
        caller's Health would wait for the 30 s send timeout."""
        srv = server(self, {}, tcp=False)
        with srv.conn() as c:
            code, msg, r = c.call("CreateRun", pb.CreateRunRequest(
                policy_json=policy_json(out_mb=8)), pb.CreateRunResponse)
            self.assertEqual(code, "OK", msg)
            code, msg, e = c.call("Exec", pb.ExecRequest(
                run_id=r.run_id, argv=["/bin/sh", "-c", "head -c 1048576 /dev/zero > /out/mib"]),
                pb.ExecResponse)
            code, msg, _ = c.call("Wait", pb.WaitRequest(run_id=r.run_id, exec_id=e.exec_id,
                                                         timeout_ms=5000), pb.WaitResponse)
            self.assertEqual(code, "OK", msg)
        body = pb.Request(method="/sbx.v1.Sandbox/FetchArtifact",
                          body=pb.FetchArtifactRequest(run_id=r.run_id, path="mib",
                                                       max_bytes=MIB).SerializeToString()
                          ).SerializeToString()
        raws = []
        self.addCleanup(lambda: [s.close() for s in raws])
        for i in range(14):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(target(srv.ipc)[1])
            raws.append(s)
            self.assertTrue(sbxraw.sp_handshake(s))
            for j in range(8):
                s.sendall(sbxraw.ipc_frame(body, 0x80000000 | (i * 8 + j)))
            # Time for the workers, so that each request gets one (none is
            # refused for a full pool): the first 1 MiB answer on each
            # connection goes out and never finishes, the other 7 wait
            # behind it, each holding a context.
            time.sleep(0.2)
        time.sleep(0.5)
        self.assert_health_at_once(srv)

    def test_one_identity_on_two_peers_cannot_hold_every_context(self):
        """e5: bob's token from 127.0.0.2 on tcp and on this uid's ipc
        connections (another peer each), 8 FetchArtifact of 1 MiB per
        connection that it never reads: within each peer's limit, but
        together every context. alice's Health is answered at once."""
        srv = server(self, {})
        bob = srv.tokens["bob"]
        with srv.conn() as c:
            code, msg, r = c.call("CreateRun", pb.CreateRunRequest(
                policy_json=policy_json(out_mb=8)), pb.CreateRunResponse, token=bob)
            self.assertEqual(code, "OK", msg)
            code, msg, e = c.call("Exec", pb.ExecRequest(
                run_id=r.run_id, argv=["/bin/sh", "-c", "head -c 1048576 /dev/zero > /out/mib"]),
                pb.ExecResponse, token=bob)
            code, msg, _ = c.call("Wait", pb.WaitRequest(run_id=r.run_id, exec_id=e.exec_id,
                                                         timeout_ms=5000), pb.WaitResponse,
                                  token=bob)
            self.assertEqual(code, "OK", msg)
        body = pb.Request(method="/sbx.v1.Sandbox/FetchArtifact", credentials=bob,
                          body=pb.FetchArtifactRequest(run_id=r.run_id, path="mib",
                                                       max_bytes=MIB).SerializeToString()
                          ).SerializeToString()
        raws = []
        self.addCleanup(lambda: [s.close() for s in raws])
        for kind, n in (("ipc", 6), ("tcp", 3)):
            for i in range(n):
                if kind == "ipc":
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.connect(target(srv.ipc)[1])
                else:
                    s = socket.socket()
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.bind((sbxraw.ATTACKER_IP, 0))
                    s.connect(target(srv.tcp)[1])
                raws.append(s)
                self.assertTrue(sbxraw.sp_handshake(s))
                frame = sbxraw.ipc_frame if kind == "ipc" else sbxraw.tcp_frame
                for j in range(8):
                    s.sendall(frame(body, 0x80000000 | (i * 8 + j)))
                time.sleep(0.2)
        time.sleep(0.5)
        self.assert_health_at_once(srv)

    def assert_health_at_once(self, srv):
        # Each within its 5 s receive timeout: held contexts would keep it
        # waiting for their 30 s send timeout (an answer takes milliseconds).
        for _ in range(3):
            self.assertEqual(health(srv, timeout_ms=5000), "OK",
                             "another caller gets a context")


if __name__ == "__main__":
    unittest.main()
