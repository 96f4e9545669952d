# SPDX-License-Identifier: Apache-2.0
"""ExportArtifacts (the same-host export of /out, runs_export.c) against a real
sbxd, by an attacker who holds the sandbox's code or a second local identity:
what sbxd sends is the bytes of regular files beneath /out only, whatever the
sandbox swaps in; it goes only to a socket of the calling uid, which hears
sbxd's hello with the call's nonce first; the caller can send sbxd nothing, a
descriptor least of all (EPIPE); a caller that stops reading, or never hangs
up, holds its own call for a bounded time (the
deadlines are config keys, short here); tls+tcp is refused; and what sbxctl
keeps hashes as the bytes it holds."""
import errno
import hashlib
import json
import os
import secrets
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from sbxdfix import (accept_until, build_shim, metric_value, metrics_parse, metrics_scrape,
                     policy_json, preload_env)
from sbxrpc import sandbox_pb2 as pb
from test_sbxd_out import OutTest

SOURCE = os.environ.get("SBX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.dirname(os.environ.get("SBX_PYTHON_PROTO", "").rstrip("/"))
sys.path[:0] = [os.path.join(SOURCE, "clients", "python"), os.path.join(BUILD, "clients", "python")]
import sbx_client  # noqa: E402
from sbx_client import dest as sbx_dest  # noqa: E402
from sbx_client import wire as sbx_wire  # noqa: E402

PY = "/usr/bin/python3"
HELLO = b"sbxhel3\0"
MAGIC = b"sbxexp3\0"
RECORD_MS = 2000  # same_host_record_ms here (the default is 30 s)
CALL_MS = 4000

# A listener of another uid: a subordinate uid of ours (unshare maps it;
# it shares our network namespace, so the abstract name is the same one).
OTHER = """if 1:
    import json, os, socket, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(b"\\0" + sys.argv[1].encode()); s.listen(4)
    print(os.getuid(), flush=True)
    s.settimeout(20)
    got = {"fds": 0, "bytes": 0}
    try:
        c, _ = s.accept(); c.settimeout(5)
        while True:
            msg, fds, _, _ = socket.recv_fds(c, 256, 8)
            got["fds"] += len(fds); got["bytes"] += len(msg)
            if not msg:
                break
    except OSError as e:
        got["error"] = str(e)
    print(json.dumps(got), flush=True)
    """


def sha(data):
    return hashlib.sha256(data).hexdigest()


def slow_download(test, run, want, per_message_s, resend_interval):
    """The Python download of run's /out by the export, each 256 KiB written
    per_message_s late, on a client whose REQ resends every resend_interval:
    every file as want ({path: sha256}) says, and at least one resend."""
    real = os.pwrite

    def slow(fd, b, off):
        time.sleep(per_message_s)
        return real(fd, b, off)
    with sbx_client.connect(test.srv.ipc, resend_interval=resend_interval) as c, \
            tempfile.TemporaryDirectory() as top:
        os.pwrite = slow
        try:
            sbx_client.Sandbox(c.run(run)).files.download("/out", os.path.join(top, "o"))
        finally:
            os.pwrite = real
        test.assertGreater(c.transport.resends, 0, "the test needs a resend")
        test.assert_copied(os.path.join(top, "o"), want)


class Receiver:
    """The caller's side of the export socket, in a thread: checks sbxd's
    hello, takes n records with their bytes (reading nothing if read is
    False) and acknowledges them by closing its connection (unless close
    is False: then done() closes it, after the call). on_record(rv, index)
    runs when a record's head arrived, before its bytes are read (with this
    receiver, whose conn is sbxd's connection)."""

    def __init__(self, n=1, close=True, read=True, on_record=None):
        self.name = "sbx-export-test-" + secrets.token_hex(8)
        self.nonce = secrets.token_bytes(16)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(b"\0" + self.name.encode())
        self.sock.listen(4)
        self.n, self.close, self.read = n, close, read
        self.records, self.error, self.hello, self.fds = [], None, None, 0
        self.on_record = on_record
        self.conn = None
        self.over = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def recv(self, c):
        msg, fds, flags, _ = socket.recv_fds(c, 1 << 20, 8)
        self.fds += len(fds)
        for fd in fds:
            os.close(fd)
        return msg

    def run(self):
        try:
            c = accept_until(self.sock, self.over)
            if c is None:
                return
            self.conn = c
            c.settimeout(50)
            self.hello = self.recv(c)
            if not self.read:
                return
            for _ in range(self.n):
                head = self.recv(c)
                if not head:
                    return
                index = int.from_bytes(head[8:12], "little")
                mode = int.from_bytes(head[12:16], "little")
                size = int.from_bytes(head[16:24], "little")
                if self.on_record:
                    self.on_record(self, index)
                data = bytearray()
                while len(data) < size:
                    chunk = self.recv(c)
                    if not chunk:
                        break
                    data += chunk
                self.records.append((head[:8], index, mode, size, bytes(data)))
            c.setblocking(False)
            try:
                if self.recv(c):
                    self.error = "a message after the last record"
            except BlockingIOError:
                pass  # nothing more was sent
            if self.close:
                c.close()  # the acknowledgement
        except OSError as e:
            self.error = e

    def done(self):
        self.over.set()
        self.thread.join(60)
        self.sock.close()
        if self.conn:
            self.conn.close()

    def request(self, run, paths):
        return pb.ExportArtifactsRequest(run_id=run, paths=paths, socket_name=self.name,
                                         nonce=self.nonce)


class ExportCalls(OutTest):
    """OutTest's calls (ok, create, start, run_py, teardown) and what an
    export test reads back: the audit's exports, and (with metrics on)
    sbxd's count of repeated requests."""

    def exported_events(self, run):
        return [e for e in self.srv.audit_events()
                if e.get("event") == "artifacts_exported" and e.get("run_id") == run]

    def repeats(self, outcome):
        _, _, body = metrics_scrape(self.srv.metrics_port())
        return metric_value(metrics_parse(body), "sbx_rpc_repeats_total", outcome=outcome)


class ExportTest(ExportCalls):
    """The export's calls on one sbxd with short deadlines."""

    # On by default (same_host_export is not written here); short deadlines.
    SERVER_CONFIG = {"same_host_record_ms": RECORD_MS, "same_host_call_ms": CALL_MS}

    def export(self, run, paths, close=True, read=True, conn=None, token=None, on_record=None):
        rv = Receiver(n=len(paths), close=close, read=read, on_record=on_record)
        try:
            code, msg, resp = (conn or self.c).call("ExportArtifacts", rv.request(run, paths),
                                                    pb.ExportArtifactsResponse, token=token)
        finally:
            rv.done()
        return code, msg, resp, rv

    # ---- what a caller gets ----

    def test_sbxctl_exports_on_ipc_and_the_copies_hash_as_listed(self):
        run = self.create(out_mb=64)
        self.run_py(run, "import os\nos.makedirs('/out/d/e')\n"
                         "open('/out/big','wb').write(os.urandom(5<<20)+b'x')\n"
                         "open('/out/d/e/small','w').write('hi')\nopen('/out/empty','w')\n"
                         "os.chmod('/out/d/e/small', 0o640)\n")
        want = self.digests(run)
        with tempfile.TemporaryDirectory() as top:
            out = os.path.join(top, "o")
            r = self.srv.cli("fetch", run, "--all", out)
            self.assertEqual(r.returncode, 0, r)
            self.assert_copied(out, want)
            self.assertEqual(os.stat(os.path.join(out, "d/e/small")).st_mode & 0o777,
                             0o640 & ~self.umask())
            self.assertEqual(sorted(os.listdir(out)), ["big", "d", "empty"])  # no temp left
        # By export: audited as such, with every byte.
        ev = self.exported_events(run)
        self.assertEqual(len(ev), 1, ev)
        self.assertEqual((ev[0]["files"], ev[0]["bytes"], ev[0]["uid"]),
                         (3, (5 << 20) + 3, os.getuid()))
        # --no-export: chunks, no export on record.
        with tempfile.TemporaryDirectory() as top:
            r = self.srv.cli("fetch", run, "--all", os.path.join(top, "o"), "--no-export")
            self.assertEqual(r.returncode, 0, r)
        self.assertEqual(len(self.exported_events(run)), 1)
        self.teardown(run)

    def umask(self):
        m = os.umask(0)
        os.umask(m)
        return m

    def test_an_export_that_outlasts_reqs_resend_goes_on(self):
        # REQ resends a request it has no answer to (60 s by default; 0.25 s
        # here, with the copy slowed to ~1 s). sbxd takes the resent
        # ExportArtifacts as a repeat of the running one and answers it
        # with the first's answer: run as a call of its own it connected to
        # the caller's name again, found the listener closed, and its
        # "unreached" answer ended the transfer (review 15).
        run = self.create(out_mb=64)
        self.run_py(run, "import os\nopen('/out/big','wb').write(os.urandom(4<<20))\n")
        want = self.digests(run)
        # 16 messages of 256 KiB: ~1 s, well within same_host_call_ms (4 s)
        slow_download(self, run, want, 0.06, 0.25)
        self.assertEqual(len(self.exported_events(run)), 1)

    def test_the_python_client_exports_on_ipc(self):
        run = self.create(out_mb=64)
        self.run_py(run, "import os\nos.makedirs('/out/d/e')\n"
                         "open('/out/big','wb').write(os.urandom(5<<20)+b'x')\n"
                         "open('/out/d/e/small','w').write('hi')\nopen('/out/empty','w')\n"
                         "os.chmod('/out/d/e/small', 0o640)\n")
        with sbx_client.connect(self.srv.ipc) as c, tempfile.TemporaryDirectory() as top:
            r = c.run(run)
            listing = r.artifacts()
            want = {a.path: a.sha256 for a in listing}
            # The E2B-shaped download: every file, by one export.
            got = sbx_client.Sandbox(r).files.download("/out", os.path.join(top, "o"))
            self.assertEqual({f.path: f.sha256 for f in got}, want)
            self.assert_copied(os.path.join(top, "o"), want)
            self.assertEqual(os.stat(os.path.join(top, "o", "d/e/small")).st_mode & 0o777,
                             0o640 & ~self.umask())
            self.assertEqual(sorted(os.listdir(os.path.join(top, "o"))),
                             ["big", "d", "empty"])  # no temporary file left
            ev = self.exported_events(run)
            self.assertEqual(len(ev), 1, ev)
            self.assertEqual((ev[0]["files"], ev[0]["bytes"]), (3, (5 << 20) + 3))
            # A listed digest the bytes do not have: DataLoss, nothing kept.
            fd = sbx_dest.open_dest(os.path.join(top, "p"))
            try:
                with self.assertRaises(sbx_client.DataLoss) as e:
                    r.fetch_many_at(fd, [("d/e/small", "small", 0o600, sha(b"other"))])
                self.assertIn("small: sha256 of the bytes received is %s, expected %s"
                              % (sha(b"hi"), sha(b"other")), str(e.exception))
                self.assertEqual(os.listdir(os.path.join(top, "p")), [])
                self.assertEqual(len(self.exported_events(run)), 2)
                # A link where a file goes is refused, never written through;
                # the client hangs up early, so sbxd's call fails too.
                os.symlink(os.path.join(top, "victim"), os.path.join(top, "p", "big"))
                with self.assertRaises(sbx_client.FailedPrecondition) as e:
                    r.fetch_many_at(fd, [("big", "big", 0o600, want["big"])])
                self.assertIn("big: a symbolic link is in the way", str(e.exception))
                self.assertFalse(os.path.exists(os.path.join(top, "victim")))
                self.assertEqual(os.listdir(os.path.join(top, "p")), ["big"])
            finally:
                os.close(fd)
            self.assertEqual(len(self.exported_events(run)), 2)
            # Turned off by the caller: chunks, no export on record.
            c.same_host_export = False
            sbx_client.Sandbox(r).files.download("/out/d", os.path.join(top, "q"))
            with open(os.path.join(top, "q", "e", "small")) as f:
                self.assertEqual(f.read(), "hi")
            self.assertEqual(len(self.exported_events(run)), 2)
        self.teardown(run)

    def test_a_name_in_the_words_of_unreached_is_no_fallback(self):
        # The sandbox names a file with the words that begin sbxd's
        # "could not reach your socket" refusal, and a directory stands
        # where it goes: the clients' own refusal of it begins with those
        # words, and must fail the export, not send the clients to chunks
        # (which would place "a", then fail on the same file; review 14).
        words = "same-host: connecting to the caller's socket_name"
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('alpha')\n"
                         "open('/out/' + %r,'w').write('x')\n" % words)
        with tempfile.TemporaryDirectory() as top:
            for who in ("sbxctl", "python"):
                out = os.path.join(top, who)
                os.makedirs(os.path.join(out, words), mode=0o700)
                os.chmod(out, 0o700)
                if who == "sbxctl":
                    r = self.srv.cli("fetch", run, "--all", out)
                    self.assertNotEqual(r.returncode, 0, r)
                    msg = r.stderr
                else:
                    with sbx_client.connect(self.srv.ipc) as c:
                        with self.assertRaises(sbx_client.FailedPrecondition) as e:
                            sbx_client.Sandbox(c.run(run)).files.download("/out", out)
                    msg = str(e.exception)
                self.assertIn("a directory is in the way", msg)
                self.assertEqual(sorted(os.listdir(out)), [words], who)  # "a" not placed
        self.teardown(run)

    def test_python_run_out_exports_and_no_export_fetches_chunks(self):
        env = dict(os.environ, PYTHONPATH=":".join(sys.path[:2]))
        with tempfile.TemporaryDirectory() as top:
            before = len([e for e in self.srv.audit_events()
                          if e.get("event") == "artifacts_exported"])
            for flags, exported in (([], 1), (["--no-export"], 0)):
                out = os.path.join(top, "o%d" % exported)
                r = subprocess.run(
                    [sys.executable, "-m", "sbx_client", "run", "--endpoint", self.srv.ipc,
                     "--out", out] + flags + ["--", PY, "-c",
                                              "open('/out/r.txt','w').write('done')"],
                    capture_output=True, text=True, timeout=120, env=env)
                self.assertEqual(r.returncode, 0, r)
                with open(os.path.join(out, "r.txt")) as f:
                    self.assertEqual(f.read(), "done")
                now = len([e for e in self.srv.audit_events()
                           if e.get("event") == "artifacts_exported"])
                self.assertEqual(now - before, exported, flags)
                before = now

    def test_sbxd_says_the_nonce_then_sends_each_files_bytes_and_no_descriptor(self):
        run = self.create()
        self.run_py(run, "import os\nopen('/out/a','w').write('alpha')\n"
                         "open('/out/b','w').write('b')\nos.chmod('/out/b', 0o604)\n")
        # Not hashed yet in this epoch: no digest vouched for.
        code, msg, resp, rv = self.export(run, ["a", "b"])
        self.assertEqual(code, "OK", msg)
        self.assertEqual(list(resp.sha256), ["", ""])
        # Listed (hashed, settled): the cached final digests come back.
        self.ok("ListArtifacts", pb.ListArtifactsRequest(run_id=run), pb.ListArtifactsResponse)
        code, msg, resp, rv = self.export(run, ["a", "b"])
        self.assertEqual(code, "OK", msg)
        self.assertEqual(list(resp.sha256), [sha(b"alpha"), sha(b"b")])
        self.assertEqual(resp.files_sent, 2)
        self.assertEqual(rv.hello, HELLO + bytes([16]) + rv.nonce)
        self.assertEqual(rv.records, [(MAGIC, 0, 0o644, 5, b"alpha"), (MAGIC, 1, 0o604, 1, b"b")])
        self.assertEqual((rv.fds, rv.error), (0, None))
        self.teardown(run)

    def test_sbxds_connection_takes_nothing_from_the_caller(self):
        # Whatever a caller sends (bytes alone, or with a file, a FIFO, a
        # socket, either end of a pipe, several at once attached), its
        # sendmsg fails EPIPE: sbxd's socket was shut for reading before it
        # connected. Nothing of the caller's (a FUSE file whose close waits
        # on the caller, a lingering socket) reaches sbxd.
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('alpha')\n")
        with tempfile.TemporaryDirectory() as top:
            fifo = os.path.join(top, "fifo")
            os.mkfifo(fifo)
            r, w = os.pipe()
            rw = os.open("/proc/self/fd/%d" % r, os.O_RDWR)
            reg = os.open(os.path.join(top, "f"), os.O_RDWR | os.O_CREAT)
            ff = os.open(fifo, os.O_RDWR)
            s1, s2 = socket.socketpair()
            kinds = {"no descriptor": [], "regular file": [reg], "FIFO": [ff],
                     "socket": [s1.fileno()],
                     "pipe's read end": [r], "pipe's write end": [w], "O_RDWR pipe": [rw],
                     "two descriptors": [r, w]}
            refused = {}
            for kind, fds in kinds.items():
                got = {}

                def send_fds(rv, _index, got=got, fds=fds):
                    try:
                        socket.send_fds(rv.conn, [b"k"], fds)
                        got["sent"] = True
                    except OSError as e:
                        got["errno"] = e.errno

                rv = Receiver(n=1, on_record=send_fds)
                code, msg, _ = self.c.call("ExportArtifacts", rv.request(run, ["a"]),
                                           pb.ExportArtifactsResponse)
                rv.done()
                refused[kind] = got
                self.assertEqual(got, {"errno": errno.EPIPE}, (kind, code, msg))
                self.assertEqual(code, "OK", (kind, msg))  # the call itself goes on
            sys.stderr.write("what the caller sent, refused: %s\n" % refused)
            for fd in (r, w, rw, reg, ff):
                os.close(fd)
            s1.close()
            s2.close()
        self.teardown(run)

    def test_no_digest_is_vouched_for_while_an_exec_runs(self):
        run = self.create(script_seconds=60, run_seconds=120)
        self.run_py(run, "open('/out/a','w').write('alpha')\n")
        self.ok("ListArtifacts", pb.ListArtifactsRequest(run_id=run), pb.ListArtifactsResponse)
        self.start(run, [PY, "-c", "import time\ntime.sleep(30)\n"])
        code, msg, resp, rv = self.export(run, ["a"])
        self.assertEqual(code, "OK", msg)
        self.assertEqual(list(resp.sha256), [""])
        self.teardown(run)

    def test_no_digest_is_vouched_for_when_an_exec_ran_during_the_copy(self):
        # The digest sbxd cached is of the file before the exec; an exec
        # that ran (and ended) while sbxd was still reading the file could
        # have changed the bytes sent. 8 MiB do not fit the socket's
        # buffers, so sbxd is mid-file when the caller runs the exec.
        run = self.create(out_mb=64)
        self.run_py(run, "open('/out/a','wb').write(b'a' * (8 << 20))\n")
        self.ok("ListArtifacts", pb.ListArtifactsRequest(run_id=run), pb.ListArtifactsResponse)

        def exec_meanwhile(_rv, _index):
            with self.srv.conn(timeout_ms=30000) as c:
                self.run_py_on(c, run, "open('/out/b','w').write('other')\n")

        code, msg, resp, rv = self.export(run, ["a"], on_record=exec_meanwhile)
        self.assertEqual(code, "OK", msg)
        self.assertEqual(list(resp.sha256), [""])
        self.assertEqual(rv.records[0][4], b"a" * (8 << 20))
        # Listed again, without an exec meanwhile, the same export is
        # vouched for.
        self.ok("ListArtifacts", pb.ListArtifactsRequest(run_id=run), pb.ListArtifactsResponse)
        code, msg, resp, rv = self.export(run, ["a"])
        self.assertEqual(list(resp.sha256), [sha(b"a" * (8 << 20))])
        self.teardown(run)

    def run_py_on(self, conn, run, code):
        ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=[PY, "-c", code]), pb.ExecResponse,
                     conn=conn).exec_id
        st = self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=20000),
                     pb.WaitResponse, conn=conn).status
        self.assertEqual(pb.ExitReason.Name(st.reason), "EXITED", st)

    # ---- who may ask ----

    def test_tls_is_refused_saying_why(self):
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('alpha')\n")
        tok = self.srv.tokens["alice"]
        alice = self.ok("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                        pb.CreateRunResponse, conn=TokConn(self.srv.conn(tls=True), tok))
        with self.srv.conn(tls=True) as t:
            code, msg, _, rv = self.export(alice.run_id, ["a"], conn=t, token=tok)
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        self.assertIn("only over ipc://", msg)
        self.assertEqual(rv.records, [])
        # sbxctl over TLS still fetches (chunks), nothing exported.
        with tempfile.TemporaryDirectory() as top:
            r = self.srv.cli("fetch", alice.run_id, "--all", os.path.join(top, "o"), tls=True,
                             token=tok)
            self.assertEqual(r.returncode, 0, r)
        self.assertEqual(self.exported_events(alice.run_id), [])
        with self.srv.conn(tls=True) as t:
            t.call("Teardown", pb.TeardownRequest(run_id=alice.run_id), pb.TeardownResponse,
                   token=tok)
        self.teardown(run)

    def test_a_request_larger_than_any_valid_one_is_refused_at_once(self):
        # 256 paths of PATH_MAX bytes with their fields is the largest valid
        # ExportArtifacts or ImportInputs (SBX_SIDE_REQUEST_MAX, 1082368
        # bytes): a larger body is INVALID_ARGUMENT before it is queued
        # (review 21: a repeat's bytes are compared with the caller's
        # pending calls in the nng callback), and sbxd connects to nothing.
        # One of the largest valid size passes the cap (its paths are then
        # refused for what they are).
        run = self.create()
        name = "sbx-test-cap-" + secrets.token_hex(6)
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as ls:
            ls.bind(b"\0" + name.encode())
            ls.listen(1)
            ls.setblocking(False)
            for n in (4300, 4096):
                paths = ["%03d" % i + "a" * (n - 3) for i in range(256)]
                req = pb.ExportArtifactsRequest(run_id=run, paths=paths, socket_name=name,
                                                nonce=secrets.token_bytes(16))
                code, msg, _ = self.c.call("ExportArtifacts", req, pb.ExportArtifactsResponse)
                if n > 4096:
                    self.assertGreater(len(req.SerializeToString()), 1082368)
                    self.assertEqual(code, "INVALID_ARGUMENT", msg)
                    self.assertIn("more than a valid /sbx.v1.Sandbox/ExportArtifacts request "
                                  "can have (1082368)", msg)
                else:
                    self.assertNotIn("more than a valid", msg)
                files = [pb.InputFile(path="%03d" % i + "b" * (n - 3), size=1, sha256="0" * 64)
                         for i in range(256)]
                code, msg, _ = self.c.call(
                    "ImportInputs", pb.ImportInputsRequest(
                        run_id=run, files=files, socket_name=name, nonce=secrets.token_bytes(16)),
                    pb.ImportInputsResponse)
                if n > 4096:
                    self.assertEqual(code, "INVALID_ARGUMENT", msg)
                    self.assertIn("more than a valid /sbx.v1.Sandbox/ImportInputs request", msg)
                    self.assertRaises(BlockingIOError, ls.accept)  # nobody connected
                else:
                    self.assertNotIn("more than a valid", msg)
        self.teardown(run)

    def test_another_identitys_run_is_not_found(self):
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('alpha')\n")
        code, msg, _, rv = self.export(run, ["a"], token=self.srv.tokens["bob"])
        self.assertEqual(code, "NOT_FOUND", msg)
        self.assertEqual(rv.records, [])
        self.teardown(run)

    def test_a_socket_of_another_uid_gets_nothing(self):
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('alpha')\n")
        name = "sbx-export-other-" + secrets.token_hex(8)
        other = subprocess.Popen(["unshare", "--user", "--map-users=auto", "--map-groups=auto",
                                  "--setuid", "0", "--setgid", "0", PY, "-c", OTHER, name],
                                 stdout=subprocess.PIPE, text=True)
        try:
            if not other.stdout.readline():
                self.skipTest("unshare --map-users=auto: no subordinate uids for this user")
            req = pb.ExportArtifactsRequest(run_id=run, paths=["a"], socket_name=name,
                                            nonce=secrets.token_bytes(16))
            code, msg, _ = self.c.call("ExportArtifacts", req, pb.ExportArtifactsResponse)
            self.assertEqual(code, "PERMISSION_DENIED", msg)
            self.assertIn("not by the calling uid %d" % os.getuid(), msg)
            got = json.loads(other.communicate(timeout=30)[0])
        finally:
            other.kill()
            other.wait()
        self.assertEqual((got["fds"], got["bytes"]), (0, 0), got)
        self.teardown(run)

    def test_bad_requests_are_refused_by_field(self):
        run = self.create()
        cases = [
            (dict(paths=[]), "INVALID_ARGUMENT", "paths: 0 given"),
            (dict(paths=["a"] * 257), "INVALID_ARGUMENT", "paths: 257 given"),
            (dict(paths=["../etc/passwd"]), "INVALID_ARGUMENT", "path ../etc/passwd"),
            (dict(paths=["/etc/passwd"]), "INVALID_ARGUMENT", "path /etc/passwd"),
            (dict(nonce=b"short"), "INVALID_ARGUMENT", "nonce: 5 bytes"),
            (dict(socket_name=""), "INVALID_ARGUMENT", "socket_name: 0 bytes"),
            (dict(socket_name="x" * 101), "INVALID_ARGUMENT", "socket_name: 101 bytes"),
            (dict(socket_name="nobody-listens-" + secrets.token_hex(8)), "FAILED_PRECONDITION",
             "connecting to the caller's socket_name"),
        ]
        for fields, want, words in cases:
            rv = Receiver()
            req = rv.request(run, ["a"])
            for k, v in fields.items():
                if k == "paths":
                    del req.paths[:]
                    req.paths.extend(v)
                else:
                    setattr(req, k, v)
            code, msg, _ = self.c.call("ExportArtifacts", req, pb.ExportArtifactsResponse)
            rv.sock.close()
            self.assertEqual(code, want, (fields, msg))
            self.assertIn(words, msg)
        self.teardown(run)

    # ---- what the sandbox can do to /out ----

    def test_links_fifos_and_sparse_files_are_refused_by_name(self):
        run = self.create(out_mb=16)
        self.run_py(run, "import os\nopen('/out/real','w').write('r')\n"
                         "os.symlink('/etc/passwd', '/out/link')\nos.mkfifo('/out/fifo')\n"
                         "os.symlink('/etc', '/out/dirlink')\nos.mkdir('/out/dir')\n"
                         "f = open('/out/sparse','wb'); f.truncate(1 << 40)\n")
        for path, words in [("link", "a symbolic link is on its path"),
                            ("dirlink/passwd", "a symbolic link is on its path"),
                            ("fifo", "not a regular file"), ("dir", "not a regular file"),
                            ("sparse", "more than out_mb holds"), ("gone", "not found")]:
            # A FIFO opened for reading would block sbxd: the code then
            # says DEADLINE_EXCEEDED, not the refusal.
            code, msg, _, rv = self.export(run, ["real", path])
            self.assertIn(code, ("FAILED_PRECONDITION", "NOT_FOUND"), (path, msg))
            self.assertIn(words, msg, path)
            # The regular file before it went; nothing for the refused one.
            self.assertEqual([r[4] for r in rv.records], [b"r"], path)
        self.teardown(run)

    def test_a_swapped_name_never_yields_anything_but_the_regular_file(self):
        run = self.create(script_seconds=60, run_seconds=120)
        body = b"the regular file\n"
        swap = ("import os\nopen('/out/f.real','wb').write(%r)\n"
                "open('/out/ready','w').close()\n"
                "while True:\n"
                "    for kind in ('link', 'fifo', 'real'):\n"
                "        if kind == 'real': os.link('/out/f.real', '/out/tmp')\n"
                "        elif kind == 'link': os.symlink('/etc/passwd', '/out/tmp')\n"
                "        else: os.mkfifo('/out/tmp')\n"
                "        os.rename('/out/tmp', '/out/f')\n" % body)
        self.start(run, [PY, "-c", swap])
        self.wait_for(run, "ready")
        kinds = {"OK": 0, "FAILED_PRECONDITION": 0}
        # 60 exports at least, and on until one met a swapped name: on a
        # loaded machine the sandbox's loop may not get the CPU to swap
        # during 60 of them (ci32, three tests at a time: 60 OK).
        deadline = time.monotonic() + 45  # within the swapper's script_seconds
        while sum(kinds.values()) < 60 or (not kinds["FAILED_PRECONDITION"] and
                                           time.monotonic() < deadline):
            code, msg, _, rv = self.export(run, ["f"])
            self.assertIn(code, kinds, msg)
            kinds[code] += 1
            for r in rv.records:
                self.assertEqual(r[4], body)
        self.assertGreater(kinds["FAILED_PRECONDITION"], 0, kinds)
        # sbxctl says why sbxd refused (not that the socket closed on it).
        said = set()
        for _ in range(8):
            with tempfile.TemporaryDirectory() as top:
                r = self.srv.cli("fetch", run, "--all", os.path.join(top, "o"))
            if r.returncode:
                self.assertNotIn("closed the socket", r.stderr)
                why = [w for w in ("not a regular file", "symbolic link", "an exec", "not found")
                       if w in r.stderr]
                self.assertTrue(why, r.stderr)
                said.update(why)
        sys.stderr.write("sbxctl refusals: %s\n" % sorted(said))
        self.teardown(run)

    def test_a_growing_file_yields_exactly_the_size_sbxd_opened(self):
        # A live exec appends to /out/g all the time: each record says the
        # size at sbxd's open, and exactly that many bytes follow, the
        # file's first ones (no more, whatever it grew to meanwhile).
        run = self.create(out_mb=64, script_seconds=60, run_seconds=120)
        grow = ("import os, time\nf = os.open('/out/g', os.O_WRONLY|os.O_CREAT|os.O_APPEND)\n"
                "i = 0\nopen('/out/ready','w').close()\n"
                "while os.fstat(f).st_size < (16 << 20):\n"
                "    os.write(f, b'%07d\\n' % i * 1024); i += 1; time.sleep(0.001)\n"
                "time.sleep(60)\n")
        self.start(run, [PY, "-c", grow])
        self.wait_for(run, "ready")
        sizes = set()
        for _ in range(5):
            code, msg, resp, rv = self.export(run, ["g"])
            self.assertEqual(code, "OK", msg)
            (_, _, _, size, data), = rv.records
            self.assertEqual(len(data), size)
            self.assertEqual(list(resp.sha256), [""])  # live: the caller hashes
            want = b"".join(b"%07d\n" % i * 1024 for i in range(size // 8192 + 1))[:size]
            self.assertEqual(data, want)
            sizes.add(size)
        sys.stderr.write("sizes exported while it grew: %s\n" % sorted(sizes))
        self.teardown(run)

    def test_a_file_written_during_the_copy_is_kept_only_as_listed(self):
        # A live exec rewrites /out/w now as 8 MiB of 'a', now of 'b', a MiB
        # at a time. sbxd vouches for no digest while it runs, so sbxctl
        # hashes each copy and keeps it only if it hashes as the (live)
        # listing said; a copy that does not is refused, ABORTED, naming
        # the exec, and leaves nothing behind. (A listing may catch the file
        # between two pieces, and a copy the same state: that is kept, as
        # listed, and said to be live.)
        run = self.create(out_mb=64, script_seconds=60, run_seconds=120)
        writer = ("import os, time\nf = os.open('/out/w', os.O_WRONLY|os.O_CREAT)\n"
                  "while True:\n"
                  "    for c in b'ab':\n"
                  "        for i in range(8):\n"
                  "            os.pwrite(f, bytes([c]) * (1 << 20), i << 20)\n"
                  "            time.sleep(0.01)\n"
                  "        time.sleep(0.3)\n")
        self.start(run, [PY, "-c", writer])
        whole = {sha(c * (8 << 20)) for c in (b"a", b"b")}
        time.sleep(1)
        outcomes = []
        for _ in range(8):
            with tempfile.TemporaryDirectory() as top:
                out = os.path.join(top, "o")
                r = self.srv.cli("fetch", run, "--all", out)
                if r.returncode == 0 and os.path.exists(os.path.join(out, "w")):
                    with open(os.path.join(out, "w"), "rb") as f:
                        data = f.read()
                    self.assertEqual(len(data), 8 << 20)
                    self.assertEqual(data.strip(b"ab"), b"")
                    self.assertIn("live", r.stderr)
                    outcomes.append("kept" if sha(data) in whole else "kept as listed, torn")
                elif r.returncode == 0:
                    outcomes.append("not listed")  # it changed while listed
                else:
                    outcomes.append("refused")
                    self.assertIn("ABORTED", r.stderr)
                    self.assertIn("an exec", r.stderr)
                    self.assertFalse(os.path.exists(os.path.join(out, "w")))
                    self.assertEqual([n for n in os.listdir(out) if n.startswith(".sbx")], [])
        sys.stderr.write("outcomes: %s\n" % outcomes)
        self.teardown(run)

    # ---- what a caller that stops reading costs ----

    def test_a_caller_that_stops_reading_costs_its_own_call_a_bounded_time(self):
        run = self.create(out_mb=64)
        self.run_py(run, "open('/out/a','wb').write(b'a' * (16 << 20))\n"
                         "open('/out/b','w').write('b')\n")
        for paths, read, words in [(["a", "b"], False, "did not take what sbxd sent in time"),
                                   (["b"], True, "did not hang up after the last file in time")]:
            result = {}

            def stalled():
                with self.srv.conn(timeout_ms=60000) as c:
                    result["r"] = self.export(run, paths, read=read, close=False, conn=c)

            th = threading.Thread(target=stalled)
            th.start()
            time.sleep(0.5)
            # Meanwhile sbxd answers everyone, this caller too, and exports
            # and creates runs for others.
            self.ok("Health", pb.HealthRequest(), pb.HealthResponse)
            self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
            code, msg, resp, rv = self.export(run, ["b"])
            self.assertEqual((code, rv.records[0][4]), ("OK", b"b"), msg)
            other = self.create()
            self.teardown(other)
            th.join(60)
            code, msg, _, rv = result["r"]
            self.assertEqual(code, "DEADLINE_EXCEEDED", msg)
            self.assertIn(words, msg)
            self.assertIn("%d ms per record, %d ms per call" % (RECORD_MS, CALL_MS), msg)
        self.teardown(run)


def raw_conn(srv):
    """A connection of the Python wire to srv's ipc listener, for requests
    sent and answered by hand (REQ ids of the test's choosing)."""
    return sbx_wire.Connection(sbx_wire.Endpoint.parse(srv.ipc), None, None,
                               time.monotonic() + 10, 8 << 20)


def close_all(conns, listeners):
    """A test's connections (None: never opened) and listeners, closed."""
    for c in conns:
        if c:
            c.close()
    for ls in listeners:
        ls.close()


def raw_send(conn, req_id, data):
    conn.send((req_id | 0x80000000).to_bytes(4, "big") + data, time.monotonic() + 5)


def raw_answer(conn, seconds=30):
    """(REQ id, Response) of the next answer on conn."""
    req_id, body = conn.recv(time.monotonic() + seconds, time.monotonic() + seconds)
    return req_id & 0x7fffffff, pb.Response.FromString(body)


def take_export(ls):
    """sbxd's hello, the one record and its bytes on a test's listener; the
    close acknowledges."""
    c, _ = ls.accept()
    with c:
        c.settimeout(30)
        c.recv(256)
        size, got = int.from_bytes(c.recv(64)[16:24], sys.byteorder), 0
        while got < size:
            got += len(c.recv(1 << 20))


class ResendWithThePoolFull(ExportCalls):
    """REQ's resend of a running export, while two other callers' Waits hold
    every long-call worker and queue place: the resend gets no worker, and
    is left unanswered rather than refused (review 16: a refusal, with the
    first's REQ id, reached the client first and ended the copy)."""

    SERVER_CONFIG = {"workers": 4, "metrics": {"listen": "127.0.0.1:0"}}

    def two_raw_exports(self, tag):
        """A run with a 4 MiB /out/big, two listeners of the test's and two
        ExportArtifacts envelopes of it, one to each (each its own request
        id): (run, listeners, envelopes), for REQ frames sent by hand."""
        run = self.create(out_mb=64)
        self.run_py(run, "import os\nopen('/out/big','wb').write(os.urandom(4<<20))\n")
        listeners, envelopes = [], []
        for i in range(2):
            name = "sbx-test-%s-%d-%s" % (tag, i, secrets.token_hex(6))
            ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            ls.bind(b"\0" + name.encode())
            ls.listen(4)
            ls.settimeout(30)
            listeners.append(ls)
            req = pb.ExportArtifactsRequest(run_id=run, paths=["big"], socket_name=name,
                                            nonce=secrets.token_bytes(16))
            envelopes.append(pb.Request(method="/sbx.v1.Sandbox/ExportArtifacts",
                                        body=req.SerializeToString(),
                                        request_id=secrets.token_hex(16),
                                        deadline_ms=60000).SerializeToString())
        return run, listeners, envelopes

    def first_running_second_queued(self, tag):
        """two_raw_exports, the first sent (REQ id 7) on a connection of its
        own and running (sbxd connected to its listener, the caller not
        reading), the second (REQ id 8) on another, queued behind the
        caller's share of the long pool (one running and one queued at
        workers 4): (run, listeners, envelopes, first, second)."""
        run, listeners, envelopes = self.two_raw_exports(tag)
        first, second = raw_conn(self.srv), raw_conn(self.srv)
        raw_send(first, 7, envelopes[0])
        self.assertTrue(select.select([listeners[0]], [], [], 30)[0], "the first never ran")
        raw_send(second, 8, envelopes[1])
        deadline = time.monotonic() + 30
        while self.long_pool("sbx_rpc_queued_calls") < 1:
            self.assertLess(time.monotonic(), deadline, "the second was never queued")
            time.sleep(0.05)
        return run, listeners, envelopes, first, second

    def long_pool(self, gauge):
        _, _, body = metrics_scrape(self.srv.metrics_port())
        return metric_value(metrics_parse(body), gauge, pool="long")

    def hogs(self):
        """alice's and bob's runs, each with a `sleep 100`, and hold(who):
        a Wait on it (20 s, over TLS) that takes a long-call worker or
        queue place of theirs; its code goes to the list returned. Torn
        down by drop_hogs. (hogs, hold, answers)"""
        hogs, answers = {}, []
        for who in ("alice", "bob"):
            tok = self.srv.tokens[who]
            r = self.ok("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                        pb.CreateRunResponse, conn=TokConn(self.srv.conn(tls=True), tok)).run_id
            e = self.ok("Exec", pb.ExecRequest(run_id=r, argv=["/bin/sleep", "100"]),
                        pb.ExecResponse, conn=TokConn(self.srv.conn(tls=True), tok)).exec_id
            hogs[who] = (tok, r, e)

        def hold(who):
            tok, r, e = hogs[who]
            with self.srv.conn(tls=True, timeout_ms=60000) as c:
                answers.append(c.call("Wait", pb.WaitRequest(run_id=r, exec_id=e, timeout_ms=20000),
                                      pb.WaitResponse, token=tok)[0])
        return hogs, hold, answers

    def drop_hogs(self, hogs):
        for who, (tok, r, _) in hogs.items():
            self.ok("Teardown", pb.TeardownRequest(run_id=r), pb.TeardownResponse,
                    conn=TokConn(self.srv.conn(tls=True), tok))

    def test_a_resend_finds_no_worker_and_the_copy_goes_on(self):
        run = self.create(out_mb=64)
        self.run_py(run, "import os\nopen('/out/big','wb').write(os.urandom(16<<20))\n")
        want = self.digests(run)
        hogs, hold, answers = self.hogs()

        def fill():
            deadline = time.monotonic() + 30
            while self.long_pool("sbx_rpc_workers_busy") < 1:  # the export has its worker
                if time.monotonic() > deadline:
                    return  # the assertions below say the pool was never full
                time.sleep(0.02)
            for who in ("alice", "bob") * 8:  # beyond both shares: the rest refused
                threading.Thread(target=hold, args=(who,), daemon=True).start()
        before = self.repeats("dropped")
        filler = threading.Thread(target=fill)
        filler.start()
        slow_download(self, run, want, 0.05, 1.0)  # 64 messages: ~3 s
        filler.join()
        self.assertIn("RESOURCE_EXHAUSTED", answers, "the long pool was never full")
        self.assertGreater(self.repeats("dropped"), before, "no resend was left unanswered")
        self.assertEqual(len([e for e in self.srv.audit_events()
                              if e.get("event") == "artifacts_exported"
                              and e.get("run_id") == run]), 1)
        self.drop_hogs(hogs)
        self.teardown(run)


    def test_a_resend_of_an_export_still_queued_is_not_refused(self):
        # One caller's share of the long pool at workers 4 is one running
        # and one queued: its first export runs (held by the caller), its
        # second waits for a worker, and REQ resends the second (the same
        # REQ id, the same bytes). That resend is left unanswered: the
        # first reply the caller gets for it is the second export's own
        # answer, once it ran (review 17: the dedupe entry appears only
        # when a worker takes a call, and the resend was refused
        # RESOURCE_EXHAUSTED while the export ran later for nobody). Its
        # request id with another body is INVALID_ARGUMENT meanwhile.
        run, listeners, envelopes, first, second = self.first_running_second_queued("queued")
        try:
            before = self.repeats("dropped")
            raw_send(second, 8, envelopes[1])  # REQ's resend
            deadline = time.monotonic() + 10
            while self.repeats("dropped") == before and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(self.repeats("dropped"), before + 1, "the resend was not left unanswered")
            # The same request id with another body while the second still
            # waits: not a resend but a client's bug, said at once (a worker
            # would say the same), not left unanswered.
            other = pb.Request.FromString(envelopes[1])
            other.body = pb.ExportArtifactsRequest(
                run_id=run, paths=["big"], socket_name="sbx-test-other",
                nonce=secrets.token_bytes(16)).SerializeToString()
            mismatched = self.repeats("mismatched")
            raw_send(second, 3, other.SerializeToString())
            rid, r = raw_answer(second)
            self.assertEqual((rid, pb.Code.Name(r.code)), (3, "INVALID_ARGUMENT"), r.message)
            self.assertIn("was already used for a different request", r.message)
            self.assertEqual(self.repeats("mismatched"), mismatched + 1)
            self.assertEqual(self.repeats("dropped"), before + 1)
            take_export(listeners[0])
            rid, r = raw_answer(first)
            self.assertEqual((rid, pb.Code.Name(r.code)), (7, "OK"), r.message)
            take_export(listeners[1])
            rid, r = raw_answer(second)
            self.assertEqual((rid, pb.Code.Name(r.code)), (8, "OK"), r.message)
        finally:
            close_all((first, second), listeners)
        self.teardown(run)


    def test_a_resend_after_a_reconnect_gets_the_first_answer(self):
        # REQ redials when its connection breaks and resends there (the
        # same REQ id and bytes). The first export still runs (held by the
        # caller) and its answer will go to the old connection; the
        # caller's share is in hand (a second export queued). The resend
        # is parked on the first, not dropped (review 19: dropped, the
        # caller heard nothing until its next resend 60 s later), and gets
        # the first's answer once it ran; nothing is exported twice.
        run, listeners, envelopes, first, second = self.first_running_second_queued("redial")
        third = None
        try:
            parked, dropped = self.repeats("parked"), self.repeats("dropped")
            first.close()  # the connection breaks; REQ redials and resends
            third = raw_conn(self.srv)
            raw_send(third, 7, envelopes[0])
            deadline = time.monotonic() + 10
            while self.repeats("parked") == parked and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual((self.repeats("parked"), self.repeats("dropped")),
                             (parked + 1, dropped), "the resend was not parked on the first")
            take_export(listeners[0])  # the first runs to its end
            rid, r = raw_answer(third, 10)
            self.assertEqual((rid, pb.Code.Name(r.code)), (7, "OK"), r.message)
            take_export(listeners[1])
            rid, r = raw_answer(second, 30)
            self.assertEqual((rid, pb.Code.Name(r.code)), (8, "OK"), r.message)
        finally:
            close_all((first, second, third), listeners)
        self.assertEqual(len(self.exported_events(run)), 2)
        self.teardown(run)

    def assert_unanswered(self, conn, seconds):
        """Nothing arrives on conn for that long: the caller's call goes on."""
        with self.assertRaises(Exception, msg="an answer came while the first was pending") as cm:
            rid, r = raw_answer(conn, seconds)
            print("unexpected answer: %d %s in_progress=%s: %s"
                  % (rid, pb.Code.Name(r.code), r.in_progress, r.message), file=sys.stderr)
        self.assertNotIsInstance(cm.exception, AssertionError)

    def test_a_resend_of_a_queued_export_after_a_reconnect_waits(self):
        # The caller's second export is queued behind its share when its
        # connection breaks; REQ redials and resends. No worker has begun
        # it, so there is nothing to park on: the resend is dropped, not
        # answered (review 20: in_progress ended the caller's call while
        # the queued export then ran for nobody). The queued export runs
        # once; the caller's next resend gets its answer replayed.
        run, listeners, envelopes, first, second = self.first_running_second_queued(
            "queued-redial")
        third = None
        try:
            dropped = self.repeats("dropped")
            second.close()  # the queued call's connection breaks
            third = raw_conn(self.srv)
            raw_send(third, 8, envelopes[1])  # REQ redials and resends at once
            deadline = time.monotonic() + 10
            while self.repeats("dropped") == dropped and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(self.repeats("dropped"), dropped + 1, "the resend was not dropped")
            self.assert_unanswered(third, 2)
            take_export(listeners[0])
            rid, r = raw_answer(first)
            self.assertEqual((rid, pb.Code.Name(r.code)), (7, "OK"), r.message)
            take_export(listeners[1])  # the queued export runs, once
            deadline = time.monotonic() + 10
            while len(self.exported_events(run)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            replayed = self.repeats("replayed")
            raw_send(third, 8, envelopes[1])  # REQ's next resend
            rid, r = raw_answer(third, 10)
            self.assertEqual((rid, pb.Code.Name(r.code)), (8, "OK"), r.message)
            self.assertEqual(self.repeats("replayed"), replayed + 1)
        finally:
            close_all((first, second, third), listeners)
        self.assertEqual(len(self.exported_events(run)), 2)
        self.teardown(run)

    def test_resends_after_a_reconnect_past_the_parking_share_wait(self):
        # The long pool full (alice's and bob's Waits), so REQ's resends
        # after a reconnect find no worker: each is parked on the running
        # first until the caller's parking share (2 at workers 4) is spent,
        # the ones past it dropped, never answered in_progress (review 20:
        # that ended the caller's call while the first still ran and its
        # parked copies would answer). The caller gets the first's OK once
        # it ran, from one export.
        run, listeners, envelopes = self.two_raw_exports("redial-share")
        hogs, hold, answers = self.hogs()
        first, third = raw_conn(self.srv), None
        try:
            raw_send(first, 7, envelopes[0])
            self.assertTrue(select.select([listeners[0]], [], [], 30)[0], "the first never ran")
            for who in ("alice", "bob", "alice", "bob", "alice"):
                threading.Thread(target=hold, args=(who,), daemon=True).start()
                time.sleep(0.2)
            deadline = time.monotonic() + 10
            while self.long_pool("sbx_rpc_queued_calls") < 2:  # every worker and queue place
                self.assertLess(time.monotonic(), deadline, "the long pool was never full")
                time.sleep(0.05)
            parked, dropped = self.repeats("parked"), self.repeats("dropped")
            first.close()  # REQ redials ...
            third = raw_conn(self.srv)
            for _ in range(4):  # ... and resends, once per resend time
                raw_send(third, 7, envelopes[0])
                time.sleep(0.2)
            deadline = time.monotonic() + 10
            while (self.repeats("parked") + self.repeats("dropped") < parked + dropped + 4
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            self.assertEqual((self.repeats("parked"), self.repeats("dropped")),
                             (parked + 2, dropped + 2), "two parked, the rest dropped")
            self.assert_unanswered(third, 1)
            take_export(listeners[0])
            rid, r = raw_answer(third, 10)
            self.assertEqual((rid, pb.Code.Name(r.code)), (7, "OK"), r.message)
        finally:
            close_all((first, third), listeners)
        self.assertEqual(len(self.exported_events(run)), 1)
        self.assertNotIn("UNAVAILABLE", answers)
        self.drop_hogs(hogs)
        self.teardown(run)


class ResendFromSbxctl(ExportCalls):
    """The C client under REQ's resend: `sbxctl fetch --all` with nng's
    resend time at 20 ms (a preloaded shim sets it where the client opens
    its socket; nng's default is 60 s) and its reads of the export slowed
    to ~0.2 s, so the ExportArtifacts is resent several times during the
    copy. Every resend waits for the first's answer (parked, or dropped
    with no parking place): one export, every byte (review 16 showed
    sbxctl failing at 60.5 s against an sbxd without the dedupe)."""

    SERVER_CONFIG = {"metrics": {"listen": "127.0.0.1:0"}}
    SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nng/nng.h>
#include <sys/socket.h>
#include <unistd.h>

int nng_req0_open(nng_socket *s)
{
	int (*open_real)(nng_socket *) = (int (*)(nng_socket *))dlsym(RTLD_NEXT, "nng_req0_open");
	int (*set_ms)(nng_socket, const char *, nng_duration) =
	    (int (*)(nng_socket, const char *, nng_duration))dlsym(RTLD_DEFAULT, "nng_socket_set_ms");
	int rv = open_real(s);

	return rv ? rv : set_ms(*s, "req:resend-time", 20);
}

/* The export's side channel is the one recv with MSG_TRUNC (clients/c/side.c). */
ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	static ssize_t (*real)(int, void *, size_t, int);
	ssize_t k;

	if (!real)
		real = (ssize_t (*)(int, void *, size_t, int))dlsym(RTLD_NEXT, "recv");
	k = real(fd, buf, len, flags);
	if (k > 0 && (flags & MSG_TRUNC))
		usleep(3000);
	return k;
}
"""

    def test_sbxctl_fetch_all_survives_its_resends(self):
        so = build_shim(self.SHIM, "resend.so")
        run = self.create(out_mb=64)
        self.run_py(run, "import os\nopen('/out/big','wb').write(os.urandom(16<<20))\n"
                         "open('/out/small','w').write('hi')\n")
        want = self.digests(run)
        before = self.repeats("parked") + self.repeats("dropped")
        with tempfile.TemporaryDirectory() as top:
            out = os.path.join(top, "o")
            r = self.srv.cli("fetch", run, "--all", out, env=preload_env(so))
            self.assertEqual(r.returncode, 0, r)
            self.assert_copied(out, want)
            self.assertEqual(sorted(os.listdir(out)), ["big", "small"])
        self.assertGreater(self.repeats("parked") + self.repeats("dropped"), before,
                           "no ExportArtifacts was resent: the shim did not take")
        self.assertEqual(len(self.exported_events(run)), 1)
        self.teardown(run)


class ExportOff(OutTest):
    """An sbxd with same_host_export false: the call is UNIMPLEMENTED naming
    the key, sbxd connects to nothing, and sbxctl fetches instead."""

    SERVER_CONFIG = {"same_host_export": False}

    def test_off_when_the_config_says_so_and_sbxctl_fetches_instead(self):
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('kept')\n")
        name = "sbx-export-test-" + secrets.token_hex(8)
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as ls:
            ls.bind(b"\0" + name.encode())
            ls.listen(1)
            ls.setblocking(False)
            code, msg, _ = self.c.call(
                "ExportArtifacts", pb.ExportArtifactsRequest(
                    run_id=run, paths=["a"], socket_name=name, nonce=secrets.token_bytes(16)),
                pb.ExportArtifactsResponse)
            self.assertEqual(code, "UNIMPLEMENTED", msg)
            self.assertIn("same_host_export", msg)
            self.assertRaises(BlockingIOError, ls.accept)  # nobody connected
        with tempfile.TemporaryDirectory() as top:
            out = os.path.join(top, "o")
            r = self.srv.cli("fetch", run, "--all", out)
            self.assertEqual(r.returncode, 0, r)
            with open(os.path.join(out, "a")) as f:
                self.assertEqual(f.read(), "kept")
        self.assertFalse([e for e in self.srv.audit_events()
                          if e.get("event") == "artifacts_exported"])
        # The Python client alike: UNIMPLEMENTED, then chunks.
        with sbx_client.connect(self.srv.ipc) as c, tempfile.TemporaryDirectory() as top:
            got = sbx_client.Sandbox(c.run(run)).files.download("/out", top)
            self.assertEqual([f.path for f in got], ["a"])
            with open(os.path.join(top, "a")) as f:
                self.assertEqual(f.read(), "kept")
            self.assertTrue(c._export_off)
        self.teardown(run)


class PythonExportAgainstAFakeSbxd(unittest.TestCase):
    """sbx_client.files.export_files against an in-process peer that plays
    sbxd (our own uid, as the ipc socket's owner): what a broken sbxd or an
    interrupt does to the files it writes (review 13)."""

    FULL = b"A" * (3 << 20)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sbx-test-export-fake-")
        self.sock = os.path.join(self.tmp, "ipc")
        self.s0 = socket.socket(socket.AF_UNIX)
        self.s0.bind(self.sock)
        self.c = sbx_client.Client("ipc://" + self.sock)
        self.top = os.path.join(self.tmp, "dst")
        self.fd = sbx_dest.open_dest(self.top)

    def tearDown(self):
        os.close(self.fd)
        self.c.close()
        self.s0.close()
        subprocess.run(["rm", "-rf", self.tmp])

    def peer(self, req, cut):
        """sbxd's side: hello, a record, cut bytes of FULL, then the end."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        s.connect(b"\0" + req.socket_name.encode())
        s.send(HELLO + bytes([len(req.nonce)]) + req.nonce)
        s.send(MAGIC + (0).to_bytes(4, sys.byteorder) + (0o644).to_bytes(4, sys.byteorder)
               + len(self.FULL).to_bytes(8, sys.byteorder))
        for i in range(0, cut, 1 << 18):
            s.send(self.FULL[i:min(cut, i + (1 << 18))])
        return s

    def export(self):
        from sbx_client import files
        return files.export_files(self.c, "run-x", self.fd,
                                  [("f", "f", 0o644, sha(self.FULL))], False)

    def test_a_file_cut_short_is_not_kept_whatever_the_answer_says(self):
        def call(name, req, rtype, **kw):
            s = self.peer(req, 5)
            s.shutdown(socket.SHUT_WR)
            time.sleep(0.2)
            s.close()
            return pb.ExportArtifactsResponse(sha256=[sha(self.FULL)], files_sent=1)
        self.c.call = call
        with self.assertRaises(sbx_client.Internal) as e:
            self.export()
        self.assertIn("sbxd answered OK after 0 of 1 files", str(e.exception))
        self.assertEqual(os.listdir(self.top), [])

    def test_the_listener_is_closed_once_sbxd_connected(self):
        """Nobody can queue up on the caller's name once sbxd is in (as the
        C client's listener, closed after its accept)."""
        refused = []

        def call(name, req, rtype, **kw):
            s = self.peer(req, len(self.FULL))
            deadline = time.time() + 10
            while not refused and time.time() < deadline:
                other = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                other.setblocking(False)  # a full backlog: EAGAIN, not a wait
                try:
                    other.connect(b"\0" + req.socket_name.encode())
                except ConnectionRefusedError:
                    refused.append(True)
                except BlockingIOError:
                    pass
                finally:
                    other.close()
                time.sleep(0.01)
            s.settimeout(10)
            self.assertEqual(s.recv(1), b"")  # the caller's hang-up: all taken
            s.close()
            return pb.ExportArtifactsResponse(sha256=[sha(self.FULL)], files_sent=1)
        self.c.call = call
        self.export()
        self.assertEqual(refused, [True], "a second connect was still taken")
        with open(os.path.join(self.top, "f"), "rb") as f:
            self.assertEqual(f.read(), self.FULL)

    def test_an_interrupt_during_the_call_leaves_no_file_and_no_thread(self):
        fds = len(os.listdir("/proc/self/fd"))

        def call(name, req, rtype, **kw):
            self.held = self.peer(req, 1 << 20)  # part of the file, then nothing
            deadline = time.time() + 10
            while not [n for n in os.listdir(self.top) if n.startswith(".sbx-fetch-")]:
                self.assertLess(time.time(), deadline, "no temporary file was made")
                time.sleep(0.01)
            raise KeyboardInterrupt
        self.c.call = call
        threads = threading.active_count()
        with self.assertRaises(KeyboardInterrupt):
            self.export()
        self.assertEqual(os.listdir(self.top), [])
        self.assertEqual(threading.active_count(), threads)
        self.held.close()
        self.assertEqual(len(os.listdir("/proc/self/fd")), fds)


class TokConn:
    def __init__(self, conn, token):
        self.conn, self.token = conn, token

    def call(self, name, req, resp_type):
        try:
            return self.conn.call(name, req, resp_type, token=self.token)
        finally:
            self.conn.close()


if __name__ == "__main__":
    unittest.main()
