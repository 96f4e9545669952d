# SPDX-License-Identifier: Apache-2.0
"""ExportArtifacts on a kernel older than 6.16 (the VM target, Debian 12,
runs 6.1), where SO_PASSRIGHTS does not exist and sbxd's socket cannot
refuse the descriptors a caller attaches to what it sends. The kernel would
drop them in sbxd's worker, and the last close of a TCP socket the caller
gave SO_LINGER waits there for the linger time the caller chose: two
identities would hold the whole long pool that way. So the channel is one
way: sbxd shuts its socket for reading before it connects, and whatever a
caller sends it fails EPIPE in the caller's own sendmsg. The export is on
there, and an attacking caller holds nothing of sbxd's past its deadline.

This kernel (6.18) knows SO_PASSRIGHTS; sbxd runs here with a preloaded
shim that answers its setsockopt(SO_PASSRIGHTS) as 6.1 does (ENOPROTOOPT),
and nothing else: everything else is the real sbxd on the real kernel. The
kernel's own part (tests/vm/side_oneway.py) is checked here too, and on 6.1
by the VM stage."""
import errno
import os
import select
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
HERE = os.path.dirname(os.path.abspath(__file__))
SHIM_SO = None  # built by old_kernel_server


def old_kernel_server(**config):
    """A real sbxd that plays a kernel without SO_PASSRIGHTS (SHIM)."""
    global SHIM_SO
    if SHIM_SO is None:
        SHIM_SO = sbxdfix.build_shim(SHIM, "no_passrights.so")
    return sbxdfix.PreloadServer(SHIM_SO, **config)


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
        cls.srv = old_kernel_server(**cls.SERVER_CONFIG)

    def test_the_shim_plays_a_kernel_without_so_passrights(self):
        with open("/proc/%d/maps" % self.srv.proc.pid) as f:
            self.assertIn(SHIM_SO, f.read())
        with open(self.srv.path("sbxd.stderr"), errors="replace") as f:
            self.assertNotIn("same_host_export is off", f.read())

    def test_the_kernel_keeps_a_socket_shut_for_reading_one_way(self):
        # sbxd's own calls on this kernel, without SO_PASSRIGHTS and with.
        probe = os.path.join(HERE, "..", "vm", "side_oneway.py")
        for args in ([], ["--passrights"]):
            r = subprocess.run([sys.executable, probe] + args, capture_output=True, text=True,
                               timeout=60)
            sys.stderr.write(r.stdout)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

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

    def attacking_export(self, token, run, results, then):
        """An export whose caller, once the record came, sends sbxd bytes
        and then a lingering TCP socket with a pipe's write end; then
        ("hold") keeps its connection open unread, or ("close") reads the
        file and closes it."""
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
        r, w = os.pipe()
        try:
            rv.conn.settimeout(10)
            head = rv.recv(rv.conn)  # the record
            for what, fds in (("bytes", []), ("rights", [ling.sock.fileno(), w])):
                if fds:
                    ling.arm()
                try:
                    socket.send_fds(rv.conn, [b"k"], fds)
                    box[what] = "sent"
                except OSError as e:
                    box[what] = e.errno
            if then == "close":
                box["got"] = (len(head), rv.recv(rv.conn))
        except (OSError, AttributeError) as e:
            box["failed"] = e
        # Our own copies: if the kernel had queued them on sbxd's socket,
        # that one would now be the last (and its close, lingering, sbxd's).
        if box.get("rights") != "sent":  # else ours would linger here
            ling.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 0, 0))
        ling.sock.close()
        os.close(w)
        p = select.poll()
        p.register(r, select.POLLIN)
        ev = p.poll(2000)
        box["pipe_held_elsewhere"] = not (ev and ev[0][1] & select.POLLHUP)
        os.close(r)
        if then == "close" and rv.conn:
            rv.conn.close()
        return th, rv, ling, box

    def test_what_an_attacking_caller_sends_goes_nowhere_and_holds_no_worker(self):
        alice, bob = self.srv.tokens["alice"], self.srv.tokens["bob"]
        ours = self.create()
        self.run_py(ours, "open('/out/b','w').write('b')\n")
        runs = {alice: self.run_as(alice), bob: self.run_as(bob)}
        results, held = [], []
        try:
            held.append(self.attacking_export(alice, runs[alice], results, "hold"))
            held.append(self.attacking_export(bob, runs[bob], results, "close"))
            sys.stderr.write("what the callers sent: %s\n" % [h[3] for h in held])
            # Past same_host_call_ms: every export has answered, and a
            # third caller's long call gets a worker.
            time.sleep(te.CALL_MS / 1000 + 2)
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
                             "it began (same_host_call_ms %d)" % (te.CALL_MS / 1000 + 2,
                                                                  te.CALL_MS))
            self.assertEqual(code, "OK", msg)
            # Nothing went: each sendmsg failed in the caller, and nothing
            # of what it tried to attach is held anywhere else.
            for _, _, _, box in held:
                self.assertNotIn("failed", box)
                self.assertEqual((box["bytes"], box["rights"], box["pipe_held_elsewhere"]),
                                 (errno.EPIPE, errno.EPIPE, False), box)
            got = {r[0]: r[1:3] for r in results}
            # The one that held its connection unread: its own deadline.
            self.assertEqual(got[alice][0], "DEADLINE_EXCEEDED", got)
            self.assertIn("did not hang up after the last file in time", got[alice][1])
            # The one that took the file and closed: its export went on.
            self.assertEqual(got[bob][0], "OK", got)
            self.assertEqual(held[1][3]["got"], (24, b"a"))
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

    def test_the_export_is_on_and_sbxctl_uses_it(self):
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('alpha')\n")
        code, msg, resp, rv = self.export(run, ["a"])
        self.assertEqual(code, "OK", msg)
        self.assertEqual([r[4] for r in rv.records], [b"alpha"])
        with tempfile.TemporaryDirectory() as top:
            out = os.path.join(top, "o")
            r = self.srv.cli("fetch", run, "--all", out)
            self.assertEqual(r.returncode, 0, r)
            with open(os.path.join(out, "a")) as f:
                self.assertEqual(f.read(), "alpha")
        # Both exported (not fetched in chunks): audited as such.
        self.assertEqual(len(self.exported_events(run)), 2)
        self.teardown(run)


for _n in dir(te.ExportTest):
    if _n.startswith("test_"):
        setattr(OldKernelExport, _n, None)


if __name__ == "__main__":
    unittest.main()
