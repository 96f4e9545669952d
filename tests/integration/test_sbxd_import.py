# SPDX-License-Identifier: Apache-2.0
"""ImportInputs (the same-host upload into /data, runs_import.c) against a
real sbxd, by a caller who sends what it likes on its socket: what lands in
/data is exactly the declared bytes, with the declared mode, verified
against the declared sha256, or nothing at all; every declaration goes
through PutInput's own checks (paths, the manifest, the run's input
ceilings); sbxd takes bytes only (no descriptor, no message longer than
256 KiB or than the file's rest, nothing after the last file), only from a
socket of the calling uid, for a bounded time; and sbxctl uses it on
ipc:// and falls back to chunks where sbxd says UNIMPLEMENTED."""
import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from sbxdfix import accept_until, policy_json
from sbxrpc import sandbox_pb2 as pb
from test_sbxd_out import OutTest

SOURCE = os.environ.get("SBX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.dirname(os.environ.get("SBX_PYTHON_PROTO", "").rstrip("/"))
sys.path[:0] = [os.path.join(SOURCE, "clients", "python"), os.path.join(BUILD, "clients", "python")]
import sbx_client  # noqa: E402

PY = "/usr/bin/python3"
HELLO = b"sbxhel3\0"
CHUNK = 256 * 1024
RECORD_MS = 2000  # same_host_record_ms here (the default is 30 s)
CALL_MS = 4000
INPUT_BYTES = 32 << 20  # limits_max.input_bytes here

# A listener of another uid: a subordinate uid of ours (unshare maps it;
# it shares our network namespace, so the abstract name is the same one).
# It tries to send what an import would.
OTHER = """if 1:
    import json, os, socket, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(b"\\0" + sys.argv[1].encode()); s.listen(4)
    print(os.getuid(), flush=True)
    s.settimeout(20)
    got = {"hello": 0}
    try:
        c, _ = s.accept(); c.settimeout(5)
        got["hello"] = len(c.recv(256))
        c.send(b"x")
    except OSError as e:
        got["error"] = str(e)
    print(json.dumps(got), flush=True)
    """


def sha(data):
    return hashlib.sha256(data).hexdigest()


class Sender:
    """The caller's side of the import socket, in a thread: checks sbxd's
    hello, then sends the messages given (bytes; None: stop sending and
    keep the socket open until done()), then closes (unless hold).
    before(sender) runs after the hello, before the first message."""

    def __init__(self, messages, hold=False, before=None, sndbuf=1 << 20):
        self.name = "sbx-import-test-" + secrets.token_hex(8)
        self.nonce = secrets.token_bytes(16)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(b"\0" + self.name.encode())
        self.sock.listen(4)
        self.messages, self.hold, self.before, self.sndbuf = messages, hold, before, sndbuf
        self.hello, self.error, self.conn, self.sent = None, None, None, 0
        self.release = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            c = accept_until(self.sock, self.release)
            if c is None:
                return
            self.conn = c
            c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
            c.settimeout(50)
            self.hello = c.recv(256)
            if self.before:
                self.before(self)
            for m in self.messages:
                if m is None:
                    self.release.wait(60)
                    return
                c.send(m)
                self.sent += 1
            if self.hold:
                self.release.wait(60)
                return
            c.close()
            self.conn = None
        except OSError as e:
            self.error = e

    def done(self):
        self.release.set()
        self.thread.join(60)
        self.sock.close()
        if self.conn:
            self.conn.close()

    def request(self, run, files):
        """files: (path, data, mode) or (path, size, sha256, mode)."""
        decl = []
        for f in files:
            if len(f) == 3:
                decl.append(pb.InputFile(path=f[0], size=len(f[1]), sha256=sha(f[1]), mode=f[2]))
            else:
                decl.append(pb.InputFile(path=f[0], size=f[1], sha256=f[2], mode=f[3]))
        return pb.ImportInputsRequest(run_id=run, files=decl, socket_name=self.name,
                                      nonce=self.nonce)


def pieces(data, size=CHUNK):
    return [data[i:i + size] for i in range(0, len(data), size)]


class ImportTest(OutTest):
    """OutTest's calls (ok, create, run_py, teardown) on one sbxd."""

    # On by default (same_host_import is not written here); short deadlines.
    SERVER_CONFIG = {"same_host_record_ms": RECORD_MS, "same_host_call_ms": CALL_MS,
                     "limits_max": {"input_bytes": INPUT_BYTES}}

    def imp(self, run, files, messages=None, conn=None, token=None, **kw):
        if messages is None:
            messages = [p for f in files for p in pieces(f[1])]
        s = Sender(messages, **kw)
        try:
            code, msg, resp = (conn or self.c).call("ImportInputs", s.request(run, files),
                                                    pb.ImportInputsResponse, token=token)
        finally:
            s.done()
        return code, msg, resp, s

    def data_listing(self, run):
        """{path: (sha256, mode)} of the regular files under /data, as the
        sandbox sees them."""
        code = ("import hashlib, json, os\nout = {}\n"
                "for d, _, fs in os.walk('/data'):\n"
                "    for f in fs:\n"
                "        p = os.path.join(d, f)\n"
                "        out[p[6:]] = [hashlib.sha256(open(p, 'rb').read()).hexdigest(),"
                " os.stat(p).st_mode & 0o7777]\n"
                "open('/out/listing.json', 'w').write(json.dumps(out))\n")
        self.run_py(run, code)
        r = self.ok("FetchArtifact", pb.FetchArtifactRequest(run_id=run, path="listing.json"),
                    pb.FetchArtifactResponse)
        return {k: tuple(v) for k, v in json.loads(r.data).items()}

    def imported_events(self, run):
        return [e for e in self.srv.audit_events()
                if e.get("event") == "inputs_imported" and e.get("run_id") == run]

    def create_with(self, inputs):
        return self.ok("CreateRun", pb.CreateRunRequest(
            policy_json=policy_json(), inputs=[pb.InputFile(path=p, size=len(d), sha256=sha(d))
                                               for p, d in inputs]),
            pb.CreateRunResponse).run_id

    # ---- what a caller gets ----

    def test_files_land_with_their_bytes_mode_and_digest(self):
        big = os.urandom(5 << 20) + b"x"  # 21 messages, the last of one byte
        run = self.create_with([("declared.csv", b"a,b\n1,2\n")])
        code, msg, resp, s = self.imp(run, [("declared.csv", b"a,b\n1,2\n", 0),
                                            ("new/big.bin", big, 0o600),
                                            ("empty", b"", 0o755)])
        self.assertEqual(code, "OK", msg)
        self.assertEqual(resp.files_received, 3)
        self.assertEqual(list(resp.sha256), [sha(b"a,b\n1,2\n"), sha(big), sha(b"")])
        self.assertEqual(s.hello, HELLO + bytes([16]) + s.nonce)
        self.assertEqual(s.error, None)
        # 0600 shows as 0604 (others get the owner's read bit: the sandbox
        # user is another uid), 0 is 0644.
        self.assertEqual(self.data_listing(run), {
            "declared.csv": (sha(b"a,b\n1,2\n"), 0o644), "new/big.bin": (sha(big), 0o604),
            "empty": (sha(b""), 0o755)})
        ev = self.imported_events(run)
        self.assertEqual([(e["files"], e["bytes"], e["uid"]) for e in ev],
                         [(3, len(big) + 8, os.getuid())])
        # In the manifest as a chunked upload leaves them.
        m = self.teardown(run)
        self.assertEqual(sorted((i.path, i.size, i.sha256, i.mode) for i in m.inputs),
                         [("declared.csv", 8, sha(b"a,b\n1,2\n"), 0o644),
                          ("empty", 0, sha(b""), 0o755),
                          ("new/big.bin", len(big), sha(big), 0o600)])

    def test_sbxctl_put_imports_on_ipc_and_chunks_with_no_import(self):
        run = self.create()
        with tempfile.TemporaryDirectory() as top:
            a = os.path.join(top, "a")
            with open(a, "wb") as f:
                f.write(b"alpha" * 100000)
            os.chmod(a, 0o640)
            r = self.srv.cli("put", run, a, "d/a")
            self.assertEqual(r.returncode, 0, r)
            self.assertEqual(len(self.imported_events(run)), 1)
            r = self.srv.cli("put", "--no-import", run, a, "d/b")
            self.assertEqual(r.returncode, 0, r)
            self.assertEqual(len(self.imported_events(run)), 1)  # chunks
            # A path already complete: sbxd's reason, no fallback.
            r = self.srv.cli("put", run, a, "d/a")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("ImportInputs", r.stderr)
            self.assertIn("already complete", r.stderr)
        want = sha(b"alpha" * 100000)
        self.assertEqual(self.data_listing(run), {"d/a": (want, 0o644), "d/b": (want, 0o644)})
        self.teardown(run)

    def test_sbxctl_put_of_a_declared_input_leaves_the_hash_to_sbxd(self):
        # sbxctl declares the file with sha256 "" and sbxd checks the bytes
        # against the manifest's digest: a file that differs is refused in
        # the manifest's words (had sbxctl hashed it and declared that, the
        # refusal would be "a path is declared once and never replaced").
        body = b"beta" * 300000
        run = self.create_with([("in/b.bin", body)])
        with tempfile.TemporaryDirectory() as top:
            local = os.path.join(top, "b")
            with open(local, "wb") as f:
                f.write(body[:-1] + b"!")
            r = self.srv.cli("put", run, local, "in/b.bin")
            self.assertNotEqual(r.returncode, 0, r)
            self.assertIn("sha256 mismatch: the bytes received hash to %s, the manifest says %s"
                          % (sha(body[:-1] + b"!"), sha(body)), r.stderr)
            with open(local, "wb") as f:
                f.write(body)
            r = self.srv.cli("put", run, local, "in/b.bin")
            self.assertEqual(r.returncode, 0, r)
            # A path whose name holds the words of "not declared": the
            # mismatch is the answer, not taken for "hash it and ask again"
            # (which would then be refused as a second declaration).
            odd = "is not in the run's manifest: declare it at CreateRun"
            run2 = self.create_with([(odd, body)])
            with open(local, "wb") as f:
                f.write(body[:-1] + b"!")
            r = self.srv.cli("put", run2, local, odd)
            self.assertNotEqual(r.returncode, 0, r)
            self.assertIn("sha256 mismatch", r.stderr)
            self.assertNotIn("declared once", r.stderr)
            self.teardown(run2)
        self.assertEqual(len(self.imported_events(run)), 1)
        self.assertEqual(self.data_listing(run), {"in/b.bin": (sha(body), 0o644)})
        self.teardown(run)

    def test_sbxctl_run_data_imports(self):
        with tempfile.TemporaryDirectory() as top:
            data = os.path.join(top, "data")
            os.makedirs(os.path.join(data, "sub"))
            for name, body in (("x.txt", b"x" * 1000), ("sub/y.txt", b"why")):
                with open(os.path.join(data, name), "wb") as f:
                    f.write(body)
            r = self.srv.cli("run", "--data", data, "--", PY, "-c",
                             "print(open('/data/sub/y.txt').read()+"
                             "str(len(open('/data/x.txt').read())))")
            self.assertEqual(r.returncode, 0, r)
            self.assertEqual(r.stdout.strip(), "why1000")
        ev = [e for e in self.srv.audit_events() if e.get("event") == "inputs_imported"
              and e.get("files") == 2 and e.get("bytes") == 1003]
        self.assertEqual(len(ev), 1, ev)

    def test_the_python_client_imports_on_ipc(self):
        with sbx_client.connect(self.srv.ipc) as c, tempfile.TemporaryDirectory() as top:
            local = os.path.join(top, "l.bin")
            body = os.urandom(600 << 10)
            with open(local, "wb") as f:
                f.write(body)
            os.chmod(local, 0o700)
            run = c.create_run(json.loads(policy_json()), inputs={"/data/m.txt": b"manifest"})
            run.put("/data/p/l.bin", local)
            self.assertEqual(len(self.imported_events(run.id)), 2)
            c.same_host_import = False  # chunks
            run.put("/data/q.txt", b"chunked")
            self.assertEqual(len(self.imported_events(run.id)), 2)
            self.assertEqual(self.data_listing(run.id), {
                "m.txt": (sha(b"manifest"), 0o644), "p/l.bin": (sha(body), 0o705),
                "q.txt": (sha(b"chunked"), 0o644)})
            run.teardown()

    def test_an_import_that_outlasts_reqs_resend_goes_on(self):
        # As the export's: REQ resends the ImportInputs (0.25 s here, the
        # sending slowed to ~1 s, well within same_host_call_ms 4 s also
        # under TSan); sbxd answers the resend with the first call's answer. Run as a call of its own it found the input being
        # written by the first and answered ABORTED, which ended the upload
        # (review 15).
        real = socket.socket.send

        def slow(sock, b, *a):
            if sock.type == socket.SOCK_SEQPACKET:
                time.sleep(0.06)  # 16 messages of 256 KiB: ~1 s
            return real(sock, b, *a)
        body = os.urandom(4 << 20)
        with sbx_client.connect(self.srv.ipc, resend_interval=0.25) as c:
            run = c.create_run(json.loads(policy_json()))
            socket.socket.send = slow
            try:
                run.put("/data/big.bin", body)
            finally:
                socket.socket.send = real
            self.assertGreater(c.transport.resends, 0, "the test needs a resend")
            self.assertEqual(self.data_listing(run.id), {"big.bin": (sha(body), 0o644)})
            self.assertEqual(len(self.imported_events(run.id)), 1)
            run.teardown()

    def test_the_python_client_sends_a_declared_input_without_hashing_it(self):
        # Run.put of a path declared at create_run(upload=False) sends the
        # declared digest, not one of its own: a file that changed since
        # (same size) is refused by sbxd in the manifest's words, which a
        # client that hashed it again would have refused itself, saying
        # "not the bytes declared".
        body = os.urandom(2 << 20)
        changed = body[:-1] + bytes([body[-1] ^ 1])
        with sbx_client.connect(self.srv.ipc) as c, tempfile.TemporaryDirectory() as top:
            local = os.path.join(top, "d.bin")
            with open(local, "wb") as f:
                f.write(body)
            run = c.create_run(json.loads(policy_json()), inputs={"/data/d.bin": local},
                               upload=False)
            with open(local, "wb") as f:
                f.write(changed)
            with self.assertRaises(sbx_client.InvalidArgument) as e:
                run.put("/data/d.bin", local)
            self.assertIn("sha256 mismatch: the bytes received hash to %s, the manifest says "
                          "%s" % (sha(changed), sha(body)), str(e.exception))
            with open(local, "wb") as f:
                f.write(body + b"x")
            with self.assertRaises(sbx_client.InvalidArgument) as e:
                run.put("/data/d.bin", local)
            self.assertIn("not the bytes declared at CreateRun", str(e.exception))
            with open(local, "wb") as f:
                f.write(body)
            run.put("/data/d.bin", local)
            self.assertEqual(self.data_listing(run.id), {"d.bin": (sha(body), 0o644)})
            run.teardown()

    # ---- what a caller sends ----

    def assert_nothing_landed(self, run, path):
        self.assertNotIn(path, self.data_listing(run))

    def test_a_wrong_size_or_sha256_lands_nothing_and_names_it(self):
        run = self.create()
        body = b"b" * 1000
        cases = [
            # (what is sent, code, words)
            ([body[:999]], "INVALID_ARGUMENT", "size mismatch: the caller ended after 999 "
                                               "bytes, the manifest says 1000"),
            ([b"c" * 1000], "INVALID_ARGUMENT", "sha256 mismatch: the bytes received hash to "
                                                + sha(b"c" * 1000)),
            ([body + b"!"], "INVALID_ARGUMENT", "sent more than the manifest's size 1000"),
            ([body[:500], body[500:] + b"!"], "INVALID_ARGUMENT",
             "sent more than the manifest's size 1000 (a message of 501 bytes after 500)"),
            ([body, b"more"], "INVALID_ARGUMENT", "a message of 4 bytes after the last file"),
            ([b"b" * (CHUNK + 1)], "INVALID_ARGUMENT", "a message of 262145 bytes, at most "
                                                       "262144 per message"),
        ]
        for sent, want, words in cases:
            files = [("ok.txt", b"fine", 0), ("f.txt", body, 0)]
            code, msg, _, s = self.imp(run, files, messages=[b"fine"] + sent)
            self.assertEqual(code, want, (sent[:1], msg))
            self.assertIn("f.txt" if "after the last" not in words else "", msg)
            self.assertIn(words, msg)
            # Neither file landed: the good one waits for the whole call.
            listing = self.data_listing(run)
            self.assertNotIn("f.txt", listing)
            self.assertNotIn("ok.txt", listing)
        # Nothing is left busy or half-written: the same call, right, works.
        code, msg, _, _ = self.imp(run, [("ok.txt", b"fine", 0), ("f.txt", body, 0)])
        self.assertEqual(code, "OK", msg)
        self.assertEqual(self.data_listing(run)["f.txt"], (sha(body), 0o644))
        self.teardown(run)

    def test_a_declared_input_needs_no_digest_from_the_caller(self):
        # sha256 "" for an input the manifest (or an earlier upload)
        # declared: its bytes are checked against that declaration's.
        body, later = os.urandom(3 << 20), b"later"
        run = self.create_with([("m.bin", body)])
        files = [("m.bin", len(body), "", 0)]
        bad = body[:-1] + bytes([body[-1] ^ 1])
        code, msg, _, _ = self.imp(run, files, messages=pieces(bad))
        self.assertEqual(code, "INVALID_ARGUMENT", msg)
        self.assertIn("input m.bin: sha256 mismatch: the bytes received hash to %s, the "
                      "manifest says %s" % (sha(bad), sha(body)), msg)
        # Not in: the first Exec still waits for it.
        code, msg, _ = self.c.call("Exec", pb.ExecRequest(run_id=run, argv=["/bin/true"]),
                                   pb.ExecResponse)
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        self.assertIn("input m.bin has not been uploaded completely", msg)
        code, msg, resp, _ = self.imp(run, files, messages=pieces(body))
        self.assertEqual(code, "OK", msg)
        self.assertEqual(list(resp.sha256), [sha(body)])
        # A path declared by a first chunk that left it incomplete, alike.
        chunk = pb.PutInputRequest(run_id=run, path="n.txt", size=len(later), sha256=sha(later),
                                   offset=0, data=later[:2])
        code, msg, _ = self.c.call("PutInput", chunk, pb.PutInputResponse)
        self.assertEqual(code, "OK", msg)
        code, msg, resp, _ = self.imp(run, [("n.txt", len(later), "", 0)],
                                      messages=pieces(later))
        self.assertEqual(code, "OK", msg)
        self.assertEqual(list(resp.sha256), [sha(later)])
        self.assertEqual(self.data_listing(run), {"m.bin": (sha(body), 0o644),
                                                  "n.txt": (sha(later), 0o644)})
        self.teardown(run)

    def test_a_refused_empty_digest_takes_nothing_of_the_call(self):
        # [a declared input half uploaded in chunks, sent with "";
        #  a new path with its digest; a new path with ""]: refused for the
        # third before anything is taken, so the chunked upload goes on at
        # its offset and the second path was never declared (review 12).
        body = b"p" * 100000
        run = self.create_with([("part.bin", body)])
        chunk = pb.PutInputRequest(run_id=run, path="part.bin", offset=0, data=body[:50000])
        code, msg, _ = self.c.call("PutInput", chunk, pb.PutInputResponse)
        self.assertEqual(code, "OK", msg)
        code, msg, _, s = self.imp(run, [("part.bin", len(body), "", 0),
                                         ("new.txt", b"new", 0),
                                         ("other.txt", 5, "", 0)], messages=[])
        self.assertEqual(code, "INVALID_ARGUMENT", msg)
        self.assertIn("input other.txt is not in the run's manifest", msg)
        self.assertIsNone(s.hello)  # sbxd connected to nothing
        chunk = pb.PutInputRequest(run_id=run, path="part.bin", offset=50000,
                                   data=body[50000:], last=True)
        code, msg, _ = self.c.call("PutInput", chunk, pb.PutInputResponse)
        self.assertEqual(code, "OK", msg)
        # new.txt is free to be declared with other bytes.
        chunk = pb.PutInputRequest(run_id=run, path="new.txt", offset=0, data=b"else",
                                   size=4, sha256=sha(b"else"), last=True)
        code, msg, _ = self.c.call("PutInput", chunk, pb.PutInputResponse)
        self.assertEqual(code, "OK", msg)
        self.assertEqual(self.data_listing(run), {"part.bin": (sha(body), 0o644),
                                                  "new.txt": (sha(b"else"), 0o644)})
        self.teardown(run)

    def test_a_wrong_byte_in_a_call_hashed_beside_its_writes_lands_nothing(self):
        # More bytes than the hash's buffers hold (4 x 256 KiB): sbxd
        # hashes on a thread of its own. One byte changed in the second
        # file, well past its first messages, is still caught, for that
        # file, and neither file lands.
        first, second = os.urandom(3 << 20), os.urandom(3 << 20)
        bad = second[:(2 << 20) + 5] + bytes([second[(2 << 20) + 5] ^ 1]) + second[(2 << 20) + 6:]
        run = self.create()
        files = [("one.bin", first, 0), ("two.bin", second, 0)]
        code, msg, _, _ = self.imp(run, files, messages=pieces(first) + pieces(bad))
        self.assertEqual(code, "INVALID_ARGUMENT", msg)
        self.assertIn("input two.bin: sha256 mismatch: the bytes received hash to " + sha(bad),
                      msg)
        listing = self.data_listing(run)
        self.assertNotIn("one.bin", listing)
        self.assertNotIn("two.bin", listing)
        code, msg, _, _ = self.imp(run, files)
        self.assertEqual(code, "OK", msg)
        self.assertEqual(self.data_listing(run)["two.bin"], (sha(second), 0o644))
        self.teardown(run)

    def test_declarations_chunked_putinput_refuses_are_refused_alike(self):
        run = self.create_with([("dir/declared", b"abc")])
        self.ok("PutInput", pb.PutInputRequest(run_id=run, path="done", data=b"d", last=True,
                                               size=1, sha256=sha(b"d")), pb.PutInputResponse)
        good = sha(b"z")
        cases = [("../etc/passwd", 1, good, 0), ("/etc/passwd", 1, good, 0),
                 ("a\0b", 1, good, 0), ("x/" * 40 + "deep", 1, good, 0),
                 ("dir", 1, good, 0),                    # a directory of an input
                 ("dir/declared/below", 1, good, 0),     # below a file
                 ("dir/declared", 4, sha(b"abcd"), 0),   # not the manifest's
                 ("done", 1, sha(b"d"), 0),              # already complete
                 ("setuid", 1, good, 0o4755),
                 ("huge", INPUT_BYTES + 1, good, 0)]     # limits_max.input_bytes
        for path, size, digest, mode in cases:
            chunk = pb.PutInputRequest(run_id=run, path=path, size=size, sha256=digest,
                                       mode=mode)
            pcode, pmsg, _ = self.c.call("PutInput", chunk, pb.PutInputResponse)
            self.assertNotEqual(pcode, "OK", path)
            code, msg, _, s = self.imp(run, [(path, size, digest, mode)], messages=[])
            # The RPC layer names the field (a NUL byte): files[0].path, path.
            self.assertEqual((code, msg.replace("files[0].", "", 1)), (pcode, pmsg), path)
            self.assertIsNone(s.hello, path)  # sbxd connected to nothing
        # Whatever else the call has, nothing of it lands either.
        code, msg, _, s = self.imp(run, [("fine", b"z", 0), ("../x", 1, good, 0)], messages=[])
        self.assertEqual(code, "INVALID_ARGUMENT", msg)
        code, msg, _, _ = self.imp(run, [("dir/declared", b"abc", 0)])  # for the first exec
        self.assertEqual(code, "OK", msg)
        self.assertNotIn("fine", self.data_listing(run))
        self.teardown(run)

    def test_bad_requests_are_refused_by_field(self):
        run = self.create()
        cases = [
            (dict(files=[]), "INVALID_ARGUMENT", "files: 0 given"),
            (dict(files=[pb.InputFile(path="f%d" % i, size=0, sha256=sha(b""))
                         for i in range(257)]), "INVALID_ARGUMENT", "files: 257 given"),
            (dict(files=[pb.InputFile(path="a", size=1, sha256="A" * 64)]), "INVALID_ARGUMENT",
             "files[0].sha256: must be 64 lowercase hex digits, or empty for a declared input"),
            # "" is the declaration's digest: a new path has none.
            (dict(files=[pb.InputFile(path="a", size=1, sha256="")]), "INVALID_ARGUMENT",
             "input a is not in the run's manifest: declare it at CreateRun (inputs) or with "
             "size and sha256"),
            (dict(files=[pb.InputFile(path="a", size=1, sha256=sha(b"a"),
                                      arrived_unix_ms=1)]), "INVALID_ARGUMENT",
             "files[0].arrived_unix_ms"),
            (dict(files=[pb.InputFile(path="a", size=1, sha256=sha(b"a"))] * 2),
             "INVALID_ARGUMENT", "a is listed twice"),
            (dict(nonce=b"short"), "INVALID_ARGUMENT", "nonce: 5 bytes"),
            (dict(socket_name=""), "INVALID_ARGUMENT", "socket_name: 0 bytes"),
            (dict(socket_name="x" * 101), "INVALID_ARGUMENT", "socket_name: 101 bytes"),
            (dict(socket_name="nobody-listens-" + secrets.token_hex(8)), "FAILED_PRECONDITION",
             "connecting to the caller's socket_name"),
        ]
        for fields, want, words in cases:
            s = Sender([])
            req = s.request(run, [("a", b"a", 0)])
            for k, v in fields.items():
                if k == "files":
                    del req.files[:]
                    req.files.extend(v)
                else:
                    setattr(req, k, v)
            code, msg, _ = self.c.call("ImportInputs", req, pb.ImportInputsResponse)
            s.done()
            self.assertEqual(code, want, (list(fields), msg))
            self.assertIn(words, msg)
        # The unconnected call declared "a" (as a failed first chunk does);
        # it was not left busy: it can be uploaded now.
        code, msg, _, _ = self.imp(run, [("a", b"a", 0)])
        self.assertEqual(code, "OK", msg)
        self.teardown(run)

    def test_the_runs_quota_holds(self):
        run = self.create()
        first = os.urandom(20 << 20)
        code, msg, _, _ = self.imp(run, [("first", first, 0)])
        self.assertEqual(code, "OK", msg)
        # 20 MiB + 13 MiB > limits_max.input_bytes (32 MiB), in one call or two.
        for files in ([("second", 13 << 20, sha(b""), 0)],
                      [("small", 1, sha(b"s"), 0), ("second", 13 << 20, sha(b""), 0)]):
            code, msg, _, s = self.imp(run, files, messages=[])
            self.assertEqual(code, "FAILED_PRECONDITION", msg)
            self.assertIn("limits_max.input_bytes", msg)
            self.assertIsNone(s.hello)
        self.teardown(run)

    def test_sbxds_socket_takes_no_descriptor(self):
        # Whatever a caller attaches, sbxd's socket refuses it (EPERM at the
        # caller's sendmsg): no close of a caller's file (a FUSE file, a
        # lingering socket) ever happens in sbxd's thread.
        run = self.create()
        with tempfile.TemporaryDirectory() as top:
            r, w = os.pipe()
            reg = os.open(os.path.join(top, "f"), os.O_RDWR | os.O_CREAT)
            s1, s2 = socket.socketpair()
            got = {}

            def attach(sender):
                for kind, fds in (("file", [reg]), ("pipe", [r, w]), ("socket", [s1.fileno()])):
                    try:
                        socket.send_fds(sender.conn, [b"dat"], fds)
                        got[kind] = "sent"
                    except OSError as e:
                        got[kind] = e.errno

            code, msg, _, _ = self.imp(run, [("f", b"data", 0)], messages=[b"data"],
                                       before=attach)
            self.assertEqual(got, {"file": 1, "pipe": 1, "socket": 1})  # EPERM, each
            self.assertEqual(code, "OK", msg)  # nothing was received: "data" is the file
            self.assertEqual(self.data_listing(run)["f"], (sha(b"data"), 0o644))
            for fd in (r, w, reg):
                os.close(fd)
            s1.close()
            s2.close()
        self.teardown(run)

    # ---- who may ask, and for how long ----

    def test_a_socket_of_another_uid_gets_nothing_taken(self):
        run = self.create()
        name = "sbx-import-other-" + secrets.token_hex(8)
        other = subprocess.Popen(["unshare", "--user", "--map-users=auto", "--map-groups=auto",
                                  "--setuid", "0", "--setgid", "0", PY, "-c", OTHER, name],
                                 stdout=subprocess.PIPE, text=True)
        try:
            if not other.stdout.readline():
                self.skipTest("unshare --map-users=auto: no subordinate uids for this user")
            req = pb.ImportInputsRequest(run_id=run, files=[
                pb.InputFile(path="x", size=1, sha256=sha(b"x"))], socket_name=name,
                nonce=secrets.token_bytes(16))
            code, msg, _ = self.c.call("ImportInputs", req, pb.ImportInputsResponse)
            self.assertEqual(code, "PERMISSION_DENIED", msg)
            self.assertIn("not by the calling uid %d" % os.getuid(), msg)
            got = json.loads(other.communicate(timeout=30)[0])
        finally:
            other.kill()
            other.wait()
        self.assertEqual(got["hello"], 0, got)  # not even the nonce
        self.assertNotIn("x", self.data_listing(run))
        self.teardown(run)

    def test_tls_and_another_identity_are_refused(self):
        run = self.create()
        with self.srv.conn(tls=True) as t:
            code, msg, _, s = self.imp(run, [("a", b"a", 0)], conn=t,
                                       token=self.srv.tokens["alice"])
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        self.assertIn("only over ipc://", msg)
        code, msg, _, s = self.imp(run, [("a", b"a", 0)], token=self.srv.tokens["bob"])
        self.assertEqual(code, "NOT_FOUND", msg)
        self.assertIsNone(s.hello)
        self.teardown(run)

    def test_a_caller_that_stops_sending_costs_its_own_call_a_bounded_time(self):
        run = self.create()
        for messages, hold, words in [([b"a" * 10, None], False, "did not send a file's bytes"),
                                      ([b"a" * 100], True, "did not end after the last file")]:
            result = {}

            def stalled():
                with self.srv.conn(timeout_ms=60000) as c:
                    result["r"] = self.imp(run, [("stalled", b"a" * 100, 0)],
                                           messages=messages, hold=hold, conn=c)

            th = threading.Thread(target=stalled)
            th.start()
            time.sleep(0.5)
            # Meanwhile sbxd answers everyone, this caller too, imports for
            # it and creates runs.
            self.ok("Health", pb.HealthRequest(), pb.HealthResponse)
            self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
            code, msg, _, _ = self.imp(run, [("other-%d" % hold, b"o", 0)])
            self.assertEqual(code, "OK", msg)
            other = self.create()
            self.teardown(other)
            th.join(60)
            code, msg, _, _ = result["r"]
            self.assertEqual(code, "DEADLINE_EXCEEDED", msg)
            self.assertIn(words, msg)
            self.assertIn("%d ms per record, %d ms per call" % (RECORD_MS, CALL_MS), msg)
            self.assertNotIn("stalled", self.data_listing(run))
        # The worker and the input were freed: the file goes in now.
        code, msg, _, _ = self.imp(run, [("stalled", b"a" * 100, 0)])
        self.assertEqual(code, "OK", msg)
        self.teardown(run)

    def test_a_teardown_ends_a_stalled_import(self):
        run = self.create()
        result = {}

        def stalled():
            with self.srv.conn(timeout_ms=60000) as c:
                result["r"] = self.imp(run, [("s", b"s" * 10, 0)], messages=[b"s", None],
                                       conn=c)

        th = threading.Thread(target=stalled)
        th.start()
        time.sleep(0.5)
        self.teardown(run)
        th.join(60)
        code, msg, _, _ = result["r"]
        self.assertEqual(code, "ABORTED", msg)
        self.assertIn("being torn down", msg)


def refused_then_chunks(t, run, named, put_path):
    """An ImportInputs of "a" is UNIMPLEMENTED naming `named`, sbxd having
    connected to nothing (no hello); then sbxctl put of b"kept" to
    put_path succeeds, in chunks."""
    s = Sender([b"a"])
    code, msg, _ = t.c.call("ImportInputs", s.request(run, [("a", b"a", 0)]),
                            pb.ImportInputsResponse)
    s.done()
    t.assertEqual(code, "UNIMPLEMENTED", msg)
    t.assertIn(named, msg)
    t.assertIsNone(s.hello)
    with tempfile.NamedTemporaryFile() as f:
        f.write(b"kept")
        f.flush()
        r = t.srv.cli("put", run, f.name, put_path)
        t.assertEqual(r.returncode, 0, r)


class ImportOff(OutTest):
    """An sbxd with same_host_import false: the call is UNIMPLEMENTED naming
    the key, sbxd connects to nothing, and sbxctl uploads in chunks."""

    SERVER_CONFIG = {"same_host_import": False}

    def test_off_when_the_config_says_so_and_sbxctl_uploads_chunks(self):
        run = self.create()
        refused_then_chunks(self, run, "same_host_import", "a")
        with sbx_client.connect(self.srv.ipc) as c:
            sbx_client.Run(c, run).put("/data/b", b"python")  # chunks, after UNIMPLEMENTED
        m = self.teardown(run)
        self.assertEqual([(i.path, i.sha256) for i in m.inputs],
                         [("a", sha(b"kept")), ("b", sha(b"python"))])
        self.assertFalse([e for e in self.srv.audit_events()
                          if e.get("event") == "inputs_imported"])


class ImportOldKernel(OutTest):
    """A kernel before Linux 6.16 (Debian 12's 6.1), played by
    test_sbxd_export_oldkernel's shim (setsockopt(SO_PASSRIGHTS) answers
    ENOPROTOOPT): sbxd's socket could not refuse a caller's descriptors, so
    the call is UNIMPLEMENTED naming SO_PASSRIGHTS before it declares or
    connects anything, and sbxctl uploads in chunks."""

    @classmethod
    def setUpClass(cls):
        import test_sbxd_export_oldkernel as old

        cls.srv = old.old_kernel_server()  # ASan's preload order: sbxdfix.preload_env

    def test_unimplemented_naming_so_passrights_and_sbxctl_uploads_chunks(self):
        run = self.create()
        refused_then_chunks(self, run, "SO_PASSRIGHTS", "b")
        m = self.teardown(run)
        # "a" was never declared; "b" came in chunks.
        self.assertEqual([(i.path, i.sha256) for i in m.inputs], [("b", sha(b"kept"))])
        self.assertFalse([e for e in self.srv.audit_events()
                          if e.get("event") == "inputs_imported"])


if __name__ == "__main__":
    unittest.main()
