# SPDX-License-Identifier: Apache-2.0
"""Adversarial review of the egress proxy through the real sbxd and a real
sandbox: what a script in a run can do to sbxd and to the other runs. Each
test attacks, and asserts what DESIGN.md invariant 10 promises (nothing a
sandbox sends costs sbxd more than a bounded amount, no run can deny
service to another). See tests/unit/test_egress_bounded.c for the same
holes at the proxy's own level, with their root causes."""
import fcntl
import json
import os
import shutil
import socket
import tempfile
import threading
import time
import unittest

from egressfix import egress_config, write_hosts
from sbxdfix import POLICY, ServerTestCase
from sbxrpc import sandbox_pb2 as pb

F_GETPIPE_SZ = 1032
F_SETPIPE_SZ = 1031


class Origin:
    """A TCP server on the host's loopback: keeps the first bytes of each
    connection; with blast, sends 8 MiB first."""

    def __init__(self, blast=False):
        self.blast = blast
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.got = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.one, args=(c,), daemon=True).start()

    def one(self, c):
        data = b""
        try:
            c.settimeout(60)
            if self.blast:
                c.sendall(b"d" * (8 << 20))
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk[:4096]
                with self.lock:
                    self.got.append(data)
        except OSError:
            pass
        finally:
            c.close()

    def seen(self, needle):
        with self.lock:
            return any(needle in d for d in self.got)

    def close(self):
        self.sock.close()


def policy(port, max_concurrent=32):
    p = json.loads(json.dumps(POLICY))
    p["egress"] = {"policy": "allowlist",
                   "allow": [{"host": "api.test", "port": port, "allow_private": True,
                              "max_concurrent": max_concurrent}]}
    return json.dumps(p)


def cpu_ticks(pid):
    """utime + stime of every thread of pid, in clock ticks."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class EgressReview(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sbx-test-egress-review-")
        hosts = os.path.join(cls.tmp, "hosts")
        write_hosts(hosts, ["api.test"])
        cls.SERVER_CONFIG = {"egress": egress_config(hosts)}
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.c = self.srv.conn()

    def tearDown(self):
        self.c.close()

    def ok(self, name, req, resp_type):
        code, msg, resp = self.c.call(name, req, resp_type)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def start_script(self, run, script):
        """Starts python3 -c script; returns once it printed its first line."""
        ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=["python3", "-c", script]),
                     pb.ExecResponse).exec_id
        r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex, stream=pb.STDOUT,
                                                       timeout_ms=20000), pb.ReadOutputResponse)
        return ex, r.data.decode(errors="replace")

    def test_an_urgent_byte_neither_stalls_the_relay_nor_spins_sbxd(self):
        """send(MSG_OOB) on a CONNECT tunnel: splice(2) never reads past the
        urgent mark (EAGAIN while the socket stays readable), and the relay
        polls again at once, forever. The bytes after it never arrive and
        sbxd's egress thread takes a whole CPU until idle_seconds."""
        origin = Origin()
        try:
            run = self.ok("CreateRun", pb.CreateRunRequest(policy_json=policy(origin.port)),
                          pb.CreateRunResponse).run_id
            script = ("import socket, time\n"
                      "s = socket.create_connection(('127.0.0.1', 3128))\n"
                      "s.sendall(b'CONNECT api.test:%d HTTP/1.1\\r\\n\\r\\n')\n"
                      "head = s.recv(200)\n"
                      "s.sendall(b'AAAA'); time.sleep(0.2)\n"
                      "s.send(b'U', socket.MSG_OOB); s.sendall(b'BBBB')\n"
                      "print(head.split(b'\\r\\n')[0].decode(), flush=True)\n"
                      "time.sleep(20)\n" % origin.port)
            _, first = self.start_script(run, script)
            self.assertIn("200", first)
            pid = self.srv.proc.pid
            t0, c0 = time.time(), cpu_ticks(pid)
            time.sleep(2)
            share = (cpu_ticks(pid) - c0) / os.sysconf("SC_CLK_TCK") / (time.time() - t0)
            delivered = origin.seen(b"BBBB")
            self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
            self.assertTrue(delivered and share < 0.3,
                            "after an urgent byte: the origin got %r (the bytes after it never "
                            "left), sbxd used %.0f%% of a CPU" % (origin.got, 100 * share))
        finally:
            origin.close()

    def test_one_run_cannot_use_up_the_service_users_pipe_pages(self):
        """80 downloads the sandbox does not read: each relay pipe grows to
        1 MiB (F_SETPIPE_SZ), charged to sbxd's uid
        (fs.pipe-user-pages-soft: 64 MiB), outside any cgroup. Past it every
        new pipe of that uid (the next run's relays, the helpers' output
        pipes) gets 8 KiB and cannot grow. The test runs as sbxd's user, so
        its own fresh pipe shows what the next run would get."""
        origin = Origin(blast=True)
        try:
            run = self.ok("CreateRun", pb.CreateRunRequest(
                policy_json=policy(origin.port, max_concurrent=100)), pb.CreateRunResponse).run_id
            script = ("import socket, time\n"
                      "held = []\n"
                      "for i in range(80):\n"
                      "    s = socket.create_connection(('127.0.0.1', 3128))\n"
                      "    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)\n"
                      "    s.sendall(b'CONNECT api.test:%d HTTP/1.1\\r\\n\\r\\n')\n"
                      "    held.append(s)\n"
                      "    time.sleep(0.025)\n"
                      "print('holding', len(held), flush=True)\n"
                      "time.sleep(30)\n" % origin.port)
            _, first = self.start_script(run, script)
            self.assertIn("holding 80", first)
            time.sleep(1.5)
            r, w = os.pipe()
            try:
                size = fcntl.fcntl(w, F_GETPIPE_SZ)
                try:
                    grown = fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
                except OSError as e:
                    grown = -e.errno
            finally:
                os.close(r)
                os.close(w)
            self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
            self.assertEqual((size, grown), (65536, 1 << 20),
                             "after one run's 80 unread downloads a new pipe of sbxd's user "
                             "gets %d bytes, growing it: %d" % (size, grown))
        finally:
            origin.close()


if __name__ == "__main__":
    unittest.main()
