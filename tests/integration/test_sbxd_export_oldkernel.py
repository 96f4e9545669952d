# SPDX-License-Identifier: Apache-2.0
"""Adversarial review of ExportArtifacts on a kernel older than 6.16 (the
VM target, Debian 12, runs 6.1): SO_PASSRIGHTS does not exist there, so
sbxd's socket cannot refuse the descriptors a caller attaches to its
acknowledgement. The kernel drops them in sbxd's worker (recv without a
control buffer, or the close of a socket with them still queued), and the
last close of a TCP socket the caller gave SO_LINGER waits there for the
linger time the caller chose: past every deadline of sbxd's, for as long as
the caller likes. Two identities hold the whole long pool that way and
every other caller's Wait, ReadOutput and FetchArtifact stops.

This kernel (6.18) knows SO_PASSRIGHTS; sbxd runs here with a preloaded
shim that answers its setsockopt(SO_PASSRIGHTS) as 6.1 does (ENOPROTOOPT),
and nothing else: everything else is the real sbxd on the real kernel."""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import sbxdfix
from sbxrpc import sandbox_pb2 as pb
import test_sbxd_export as te

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/socket.h>
int setsockopt(int fd, int level, int name, const void *v, socklen_t len)
{
	static int (*real)(int, int, int, const void *, socklen_t);
	if (level == SOL_SOCKET && name == 83) { /* SO_PASSRIGHTS: Linux 6.16 */
		errno = ENOPROTOOPT;
		return -1;
	}
	if (!real)
		real = (int (*)(int, int, int, const void *, socklen_t))dlsym(RTLD_NEXT, "setsockopt");
	return real(fd, level, name, v, len);
}
"""
SHIM_DIR = tempfile.mkdtemp(prefix="sbx-oldkernel-")
SHIM_SO = os.path.join(SHIM_DIR, "no_passrights.so")


def build_shim():
    src = os.path.join(SHIM_DIR, "shim.c")
    with open(src, "w") as f:
        f.write(SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", SHIM_SO, src, "-ldl"], check=True)
    os.chmod(SHIM_DIR, 0o755)


class OldKernelServer(sbxdfix.Server):
    def wrap(self, cmd):
        return ["env", "LD_PRELOAD=" + SHIM_SO] + cmd


class Lingering:
    """A TCP connection of ours on loopback whose peer never reads, with
    SO_LINGER: its last close waits (in whatever thread makes it the last)
    until its bytes and FIN are taken, or the linger time passes."""

    def __init__(self, seconds=3600):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.ls.listen(1)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        self.sock.connect(self.ls.getsockname())
        self.peer, _ = self.ls.accept()
        self.sock.setblocking(False)
        try:
            while True:
                self.sock.send(b"x" * 65536)
        except BlockingIOError:
            pass
        self.seconds = seconds

    def arm(self):
        """SO_LINGER, just before the socket goes to sbxd (a close of ours
        while armed would wait here)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             struct.pack("ii", 1, self.seconds))

    def release(self):
        # The peer's close with unread bytes resets the connection: a close
        # still lingering in sbxd's worker returns.
        self.peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.peer.close()
        self.ls.close()


class OldKernelExport(te.ExportTest):
    # Two long workers: a share of one per identity.
    SERVER_CONFIG = dict(te.ExportTest.SERVER_CONFIG, workers=4)

    @classmethod
    def setUpClass(cls):
        build_shim()
        cls.srv = OldKernelServer(**cls.SERVER_CONFIG)

    def run_as(self, token):
        code, msg, resp = self.c.call("CreateRun", pb.CreateRunRequest(
            policy_json=sbxdfix.policy_json()), pb.CreateRunResponse, token=token)
        self.assertEqual(code, "OK", msg)
        run = resp.run_id
        code, msg, resp = self.c.call("Exec", pb.ExecRequest(
            run_id=run, argv=[te.PY, "-c", "open('/out/a','w').write('a')"]),
            pb.ExecResponse, token=token)
        self.assertEqual(code, "OK", msg)
        self.c.call("Wait", pb.WaitRequest(run_id=run, exec_id=resp.exec_id, timeout_ms=20000),
                    pb.WaitResponse, token=token)
        return run

    def lingering_export(self, token, run, results):
        """An export whose acknowledgement carries a lingering TCP socket."""
        ling = Lingering()
        rv = te.Receiver(n=1, read=False)  # the hello only: the rest is ours
        box = {}

        def call():
            with self.srv.conn(timeout_ms=120000) as c:
                t0 = time.monotonic()
                try:
                    code, msg, _ = c.call("ExportArtifacts", rv.request(run, ["a"]),
                                          pb.ExportArtifactsResponse, token=token)
                except Exception as e:  # noqa: BLE001 (no answer in time)
                    code, msg = "NO ANSWER", str(e)
                results.append((token, code, msg, time.monotonic() - t0))

        th = threading.Thread(target=call, daemon=True)
        th.start()
        deadline = time.monotonic() + 30
        while rv.hello is None and th.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            rv.conn.settimeout(10)
            head = rv.recv(rv.conn)  # the record, then its one byte
            data = rv.recv(rv.conn)
            box["got"] = (len(head), data)
            ling.arm()
            socket.send_fds(rv.conn, [b"k"], [ling.sock.fileno()])
            box["sent"] = True
        except (OSError, AttributeError) as e:
            box["sent"] = e
            ling.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 0, 0))
        ling.sock.close()  # sbxd's copy in flight is now the last one
        return th, rv, ling, box

    def test_a_descriptor_in_the_ack_holds_no_worker_past_the_deadline(self):
        alice, bob = self.srv.tokens["alice"], self.srv.tokens["bob"]
        ours = self.create()
        self.run_py(ours, "open('/out/b','w').write('b')\n")
        runs = {alice: self.run_as(alice), bob: self.run_as(bob)}
        results, held = [], []
        try:
            for token in (alice, bob):
                held.append(self.lingering_export(token, runs[token], results))
            sys.stderr.write("descriptors attached: %s\n" % [h[3] for h in held])
            # Well past same_host_call_ms: every export has answered, and a
            # third caller's long call gets a worker.
            time.sleep(te.CALL_MS / 1000 + 4)
            t0 = time.monotonic()
            with self.srv.conn(timeout_ms=10000) as c:
                try:
                    code, msg, _ = c.call("FetchArtifact", pb.FetchArtifactRequest(
                        run_id=ours, path="b"), pb.FetchArtifactResponse)
                except Exception as e:  # noqa: BLE001
                    code, msg = "NO ANSWER", str(e)
            sys.stderr.write("exports answered: %s; another caller's FetchArtifact: %s %s "
                             "after %.1f s\n" % (results, code, msg, time.monotonic() - t0))
            self.assertEqual(len(results), 2, "an export still holds its worker %d s after "
                             "it began (same_host_call_ms %d)" % (te.CALL_MS / 1000 + 4,
                                                                  te.CALL_MS))
            self.assertEqual(code, "OK", msg)
            # Such a kernel has no side channel: callers fetch instead.
            self.assertEqual([r[1] for r in results], ["UNIMPLEMENTED"] * 2, results)
            for r in results:
                self.assertIn("SO_PASSRIGHTS", r[2])
        finally:
            for th, rv, ling, _ in held:
                ling.release()
            for th, rv, ling, _ in held:
                th.join(30)
                if rv.conn is None:  # never connected: wake its accept
                    try:
                        rv.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                rv.done()
            for token, run in runs.items():
                self.c.call("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse,
                            token=token)
            self.teardown(ours)

    def test_sbxd_says_at_start_that_the_export_is_off(self):
        with open(self.srv.path("sbxd.stderr"), errors="replace") as f:
            self.assertRegex(f.read(), r"same_host_export is off: .*SO_PASSRIGHTS.*"
                                       r"fetch artifacts in chunks")

    def test_sbxctl_fetches_in_chunks_instead(self):
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('alpha')\n")
        with tempfile.TemporaryDirectory() as top:
            out = os.path.join(top, "o")
            r = self.srv.cli("fetch", run, "--all", out)
            self.assertEqual(r.returncode, 0, r)
            with open(os.path.join(out, "a")) as f:
                self.assertEqual(f.read(), "alpha")
        self.teardown(run)


for _n in dir(te.ExportTest):
    if _n.startswith("test_"):
        setattr(OldKernelExport, _n, None)


if __name__ == "__main__":
    unittest.main()
