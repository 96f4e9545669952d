# SPDX-License-Identifier: Apache-2.0
"""Adversarial review of ExportArtifacts (runs_export.c): callers that hang
up in half (shut their socket down, which sbxd sees as a hang-up) or close
without reading, or never read and never hang up, parking calls; a hang-up
counts only once the caller took everything, and what they leave queued
holds no descriptor of sbxd's, so every other caller's runs (descriptors
passed to sbx-helper) go on."""
import errno
import fcntl
import os
import secrets
import socket
import struct
import sys
import termios
import time
import unittest

from sbxrpc import sandbox_pb2 as pb
import test_sbxd_export as te

PY = "/usr/bin/python3"


def drain(c):
    """Everything still queued on c: (messages, fds, bytes)."""
    c.setblocking(False)
    msgs = fds = size = 0
    while True:
        try:
            msg, got, _, _ = socket.recv_fds(c, 1 << 20, 8)
        except BlockingIOError:
            return msgs, fds, size
        except ConnectionResetError:
            continue
        if not msg:
            return msgs, fds, size
        msgs += 1
        size += len(msg)
        fds += len(got)
        for fd in got:
            os.close(fd)


def queued(c):
    """The bytes on c's receive queue (SIOCINQ: every message's)."""
    return struct.unpack("i", fcntl.ioctl(c.fileno(), termios.FIONREAD, b"\0" * 4))[0]


class PreAck:
    """A caller's export socket that never reads. how: "shutdown" hangs up
    in half (shutdown(SHUT_RDWR), no close) once all that sbxd sends (want
    bytes) is queued on it, "close" closes it then, "hold" does nothing.
    What sbxd sent stays queued on it for as long as it keeps it."""

    def __init__(self, n, how="shutdown", want=None):
        self.name = "sbx-export-preack-" + secrets.token_hex(8)
        self.nonce = secrets.token_bytes(16)
        self.n, self.how, self.want = n, how, want
        self.ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ls.bind(b"\0" + self.name.encode())
        self.ls.listen(4)
        self.conn = None
        self.sent = None

    def request(self, run, paths):
        return pb.ExportArtifactsRequest(run_id=run, paths=paths, socket_name=self.name,
                                         nonce=self.nonce)

    def accept_and_hang_up(self):
        self.ls.settimeout(20)
        self.conn, _ = self.ls.accept()
        self.ls.close()
        try:
            self.conn.send(b"k")  # the old acknowledgement: nowhere to go
            self.sent = "sent"
        except OSError as e:
            self.sent = e.errno
        if self.how == "hold":
            return
        end = time.monotonic() + 10
        while queued(self.conn) < self.want and time.monotonic() < end:
            time.sleep(0.005)
        if self.how == "shutdown":
            self.conn.shutdown(socket.SHUT_RDWR)  # before anything is read
        else:
            self.conn.close()


# Short deadlines: a parked call costs the caller its worker until the
# call's deadline, so each parked call takes one of those. 64 parked calls
# (of 300 ms each) hold what hundreds would: no descriptor of sbxd's is in
# flight for any of them (the first test counts), only bytes on the
# caller's own sockets; more only made the test longer.
SHORT = {"same_host_record_ms": 200, "same_host_call_ms": 300}
PARK = 64


class PreAckTest(te.ExportTest):
    SERVER_CONFIG = SHORT

    def preack_call(self, run, n, conn=None, how="shutdown", want=None):
        import threading
        p = PreAck(n, how, want)
        th = threading.Thread(target=p.accept_and_hang_up, daemon=True)
        th.start()
        if conn:
            code, msg, _ = conn.call("ExportArtifacts", p.request(run, ["a"] * n),
                                     pb.ExportArtifactsResponse)
        else:
            with self.srv.conn(timeout_ms=60000) as c:
                code, msg, _ = c.call("ExportArtifacts", p.request(run, ["a"] * n),
                                      pb.ExportArtifactsResponse)
        th.join(30)
        return code, msg, p

    def test_nothing_of_sbxd_is_in_flight_after_the_call(self):
        # What a caller leaves unread is bytes: no descriptor (charged to
        # sbxd's uid in flight, pinning a file after Teardown), at most what
        # the socket's buffers hold; and its hang-up without a close (sbxd
        # sees POLLHUP) does not count until it took everything: the call
        # ends at its deadline.
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('a' * 4096)\n")
        sent = 9 + 16 + 8 * (24 + 4096)  # the hello, then 8 records
        code, msg, p = self.preack_call(run, 8, want=sent)
        self.assertEqual(code, "DEADLINE_EXCEEDED", msg)
        self.assertIn("hung up but did not take all", msg)
        self.assertEqual(p.sent, errno.EPIPE)
        self.teardown(run)
        time.sleep(0.5)
        msgs, fds, size = drain(p.conn)
        p.conn.close()
        sys.stderr.write("after the call and Teardown: %d messages, %d fds, %d bytes queued\n"
                         % (msgs, fds, size))
        self.assertEqual(fds, 0)
        self.assertEqual(size, sent)

    def test_a_close_before_everything_was_taken_is_not_success(self):
        # The close frees what the caller left unread: sbxd sees that it
        # did (ECONNRESET) and does not answer OK.
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('a' * 4096)\n")
        code, msg, p = self.preack_call(run, 4, how="close", want=9 + 16 + 4 * (24 + 4096))
        self.assertEqual(code, "ABORTED", msg)
        self.assertIn("closed its socket before it took all", msg)
        self.teardown(run)

    def test_many_parked_calls_do_not_deny_other_callers(self):
        # The descriptor-passing export's HIGH finding: descriptors in flight
        # count against the SENDER's uid (sbxd's), and past its
        # RLIMIT_NOFILE every sendmsg of that uid with SCM_RIGHTS fails --
        # every run's /out reader and exec listener. Now sbxd sends bytes:
        # a caller parks calls past that limit and bob's runs (sbxd passes
        # descriptors to sbx-helper) and exports still work.
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        with open("/proc/%d/limits" % self.srv.proc.pid) as f:
            lim = [l for l in f if l.startswith("Max open files")][0].split()[3]
        want = PARK
        bob = self.srv.tokens["bob"]
        import sbxdfix
        code, msg, resp = self.c.call("CreateRun", pb.CreateRunRequest(
            policy_json=sbxdfix.policy_json()), pb.CreateRunResponse, token=bob)
        self.assertEqual(code, "OK", msg)
        brun = resp.run_id
        code, msg, resp = self.c.call("Exec", pb.ExecRequest(
            run_id=brun, argv=[PY, "-c", "open('/out/b','w').write('b')"]),
            pb.ExecResponse, token=bob)
        self.assertEqual(code, "OK", msg)
        self.c.call("Wait", pb.WaitRequest(run_id=brun, exec_id=resp.exec_id,
                                           timeout_ms=20000), pb.WaitResponse, token=bob)
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('a')\n")
        held, failed = [], None
        t0 = time.monotonic()
        try:
            while len(held) < want and time.monotonic() - t0 < 90:
                code, msg, p = self.preack_call(run, 4, conn=self.c, how="hold")
                if p.conn:
                    held.append(p.conn)
                if code != "DEADLINE_EXCEEDED":
                    failed = (code, msg)
                    break
            sys.stderr.write("parked %d calls (sbxd NOFILE %s) in %.0f s: %s\n"
                             % (len(held), lim, time.monotonic() - t0, failed))
            self.assertIsNone(failed)
            self.assertEqual(len(held), PARK)
            errors = []

            def bob_call(name, req, resp_type):
                code, msg, resp = self.c.call(name, req, resp_type, token=bob)
                if code != "OK":
                    errors.append("bob %s: %s %s" % (name, code, msg))
                return code, resp

            bob_call("FetchArtifact", pb.FetchArtifactRequest(run_id=brun, path="b"),
                     pb.FetchArtifactResponse)
            rv = te.Receiver()
            bob_call("ExportArtifacts", rv.request(brun, ["b"]), pb.ExportArtifactsResponse)
            rv.done()
            self.assertEqual([r[4] for r in rv.records], [b"b"])
            code, resp = bob_call("CreateRun", pb.CreateRunRequest(
                policy_json=sbxdfix.policy_json()), pb.CreateRunResponse)
            if code == "OK":
                code, ex = bob_call("Exec", pb.ExecRequest(
                    run_id=resp.run_id, argv=[PY, "-c", "pass"]), pb.ExecResponse)
                if code == "OK":
                    bob_call("Wait", pb.WaitRequest(run_id=resp.run_id, exec_id=ex.exec_id,
                                                    timeout_ms=20000), pb.WaitResponse)
                bob_call("Teardown", pb.TeardownRequest(run_id=resp.run_id),
                         pb.TeardownResponse)
            sys.stderr.write("other caller, with the calls parked: %s\n" % errors)
            self.assertEqual(errors, [])
            fds = sum(drain(c)[1] for c in held[:50])
            self.assertEqual(fds, 0)
        finally:
            for c in held:
                c.close()
            self.c.call("Teardown", pb.TeardownRequest(run_id=brun), pb.TeardownResponse,
                        token=bob)
            self.teardown(run)


# Another local user (a subordinate uid of ours, via unshare) that may use
# the ipc socket (ipc_mode 0666): identity uid:<its uid>, its own run, its
# own export socket, calls it parks without reading.
PARKER = """if 1:
    import json, os, resource, secrets, socket, sys, threading, time
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    sys.path[:0] = [sys.argv[1]]
    import sbxrpc, sbxdfix
    from sbxrpc import sandbox_pb2 as pb
    c = sbxrpc.Conn(sys.argv[2], timeout_ms=60000)
    def ok(name, req, t):
        code, msg, resp = c.call(name, req, t)
        assert code == "OK", (name, code, msg)
        return resp
    run = ok("CreateRun", pb.CreateRunRequest(policy_json=sbxdfix.policy_json()),
             pb.CreateRunResponse).run_id
    ex = ok("Exec", pb.ExecRequest(run_id=run, argv=["/usr/bin/python3", "-c",
            "open('/out/a','w').write('a')"]), pb.ExecResponse).exec_id
    ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=20000), pb.WaitResponse)
    held, last = [], None
    def park(n):
        name = "sbx-export-park-" + secrets.token_hex(8)
        ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ls.bind(b"\\0" + name.encode()); ls.listen(4); ls.settimeout(20)
        box = []
        def acc():
            s, _ = ls.accept(); box.append(s)  # never read, never closed
        t = threading.Thread(target=acc); t.start()
        code, msg, _ = c.call("ExportArtifacts", pb.ExportArtifactsRequest(
            run_id=run, paths=["a"] * n, socket_name=name, nonce=secrets.token_bytes(16)),
            pb.ExportArtifactsResponse)
        t.join(); ls.close(); held.extend(box)
        return code, msg
    parked, t0 = 0, time.monotonic()
    while parked < int(sys.argv[3]) and time.monotonic() - t0 < 120:
        code, msg = park(4)
        if code != "DEADLINE_EXCEEDED":
            last = (code, msg); break
        parked += 1
    print(json.dumps({"uid": int(open("/proc/self/uid_map").read().split()[1]), "parked": parked, "stopped": last}), flush=True)
    sys.stdin.read()
    """


class ParkedByAnotherUser(te.ExportTest):
    SERVER_CONFIG = dict(SHORT, ipc_mode=0o666)

    def test_another_users_parked_calls_do_not_deny_this_one(self):
        import subprocess
        import sbxdfix
        with open("/proc/%d/limits" % self.srv.proc.pid) as f:
            sbxd_nofile = int([l for l in f if l.startswith("Max open files")][0].split()[3])
        # Ours, before: a file in /out.
        run = self.create()
        self.run_py(run, "open('/out/b','w').write('b')\n")
        here = os.path.dirname(os.path.abspath(__file__))
        other = subprocess.Popen(["unshare", "--user", "--map-users=auto", "--map-groups=auto",
                                  "--setuid", "0", "--setgid", "0", PY, "-c", PARKER, here,
                                  self.srv.ipc, str(PARK)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            line = other.stdout.readline()
            if not line:
                self.skipTest("unshare --map-users=auto: no subordinate uids for this user")
            import json
            got = json.loads(line)
            sys.stderr.write("uid %d (not ours, %d) parked %d calls "
                             "(sbxd NOFILE %d): %s\n" % (got["uid"], os.getuid(),
                                                          got["parked"], sbxd_nofile,
                                                          got["stopped"]))
            errors = []
            for name, req, t in [
                    ("FetchArtifact", pb.FetchArtifactRequest(run_id=run, path="b"),
                     pb.FetchArtifactResponse),
                    ("CreateRun", pb.CreateRunRequest(policy_json=sbxdfix.policy_json()),
                     pb.CreateRunResponse)]:
                try:
                    code, msg, resp = self.c.call(name, req, t)
                except Exception as e:  # noqa: BLE001 (no answer at all)
                    code, msg, resp = "NO ANSWER", str(e), None
                if code != "OK":
                    errors.append("%s: %s %s" % (name, code, msg))
                elif name == "CreateRun":
                    self.teardown(resp.run_id)
            sys.stderr.write("our calls meanwhile: %s\n" % errors)
            self.assertEqual(errors, [])
            self.assertIsNone(got["stopped"])
            self.assertEqual(got["parked"], PARK)
        finally:
            other.stdin.close()
            other.kill()
            other.wait()
            self.teardown(run)


class ExportFds(te.ExportTest):
    def test_no_descriptor_of_sbxd_outlives_a_failed_export(self):
        run = self.create()
        self.run_py(run, "import os\nopen('/out/a','w').write('a')\nos.mkfifo('/out/fifo')\n"
                         "os.symlink('/etc/passwd', '/out/link')\n")
        # Warm: the run's reader and caches exist before the count.
        code, msg, _, rv = self.export(run, ["a"])
        self.assertEqual(code, "OK", msg)
        time.sleep(0.5)
        before = self.srv.fd_count()
        for _ in range(20):
            for paths in (["a", "fifo"], ["a", "link"], ["gone"], ["a", "a", "../x"]):
                code, msg, _, rv = self.export(run, paths)
            req = pb.ExportArtifactsRequest(run_id=run, paths=["a"],
                                            socket_name="nobody-" + secrets.token_hex(8),
                                            nonce=secrets.token_bytes(16))
            self.c.call("ExportArtifacts", req, pb.ExportArtifactsResponse)
        time.sleep(0.5)
        self.assertLessEqual(self.srv.fd_count(), before)
        self.teardown(run)


class TruncatedDuringExport(te.ExportTest):
    def test_a_file_truncated_while_sent_is_a_clear_error(self):
        # An exec truncates the file after its record left sbxd and before
        # its bytes did: the call fails naming it, no short copy with a
        # digest.
        run = self.create(out_mb=64)
        self.run_py(run, "open('/out/big','wb').write(b'x' * (16 << 20))\n")
        ex = self.ok("Exec", pb.ExecRequest(run_id=run, stdin_stream=True, argv=[
            PY, "-c", "import sys, os\nsys.stdin.readline()\nos.truncate('/out/big', 100)\n"
            "print('cut', flush=True)\n"]), pb.ExecResponse).exec_id

        def cut(rv, index):
            c = self.srv.conn()
            code, msg, _ = c.call("WriteStdin", pb.WriteStdinRequest(
                run_id=run, exec_id=ex, data=b"go\n", eof=True), pb.WriteStdinResponse)
            assert code == "OK", msg
            c.call("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=10000),
                   pb.WaitResponse)
            c.close()

        code, msg, resp, rv = self.export(run, ["big"], on_record=cut)
        sys.stderr.write("export of a file cut while sent: %s %s; got %s bytes\n"
                         % (code, msg, [len(r[4]) for r in rv.records]))
        self.assertEqual(code, "ABORTED", msg)
        self.assertIn("shrank", msg)
        self.teardown(run)


# Only this file's attacks here; test_sbxd_export.py runs its own.
for _n in dir(te.ExportTest):
    if _n.startswith("test_"):
        setattr(PreAckTest, _n, None)
        setattr(ParkedByAnotherUser, _n, None)
        setattr(ExportFds, _n, None)
        setattr(TruncatedDuringExport, _n, None)


if __name__ == "__main__":
    unittest.main()
