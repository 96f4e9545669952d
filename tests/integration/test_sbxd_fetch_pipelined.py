# SPDX-License-Identifier: Apache-2.0
"""FetchArtifact with several chunks in flight (libsbxclient asks
SBX_FETCH_WINDOW at once, so sbxd's workers serve them in any order): the
bytes and the sha256 are the file's, whatever order the chunks arrive in,
over ipc and TLS; a chunk far ahead of the others, or an exec that changes
the file meanwhile, never yields a digest of bytes that were not served."""
import hashlib
import json
import os
import subprocess
import tempfile
import unittest

from sbxdfix import CLI, ServerTestCase, policy_json
from sbxrpc import sandbox_pb2 as pb

MIB = 1 << 20
PY = "/usr/bin/python3"
# 13.5 MiB: more chunks than the window, and a short last one.
SIZE = 13 * MIB + MIB // 2
MAKE = ("import os\nopen('/out/f.bin','wb').write(os.urandom(%d))\n"
        "open('/out/small','wb').write(b'x' * 100)\n" % SIZE)


class Pipelined(ServerTestCase):
    def setUp(self):
        self.c = self.srv.conn(timeout_ms=30000)
        self.tmpdir = tempfile.mkdtemp(prefix="sbx-test-fetch-")
        os.chmod(self.tmpdir, 0o700)

    def tearDown(self):
        self.c.close()
        subprocess.run(["rm", "-rf", self.tmpdir], check=False)

    def ok(self, name, req, resp_type, tls=False):
        if tls:
            with self.srv.conn(tls=True, timeout_ms=30000) as t:
                code, msg, resp = t.call(name, req, resp_type, token=self.srv.tokens["alice"])
        else:
            code, msg, resp = self.c.call(name, req, resp_type)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def made(self, listing=True, tls=False):
        run = self.ok("CreateRun", pb.CreateRunRequest(
            policy_json=policy_json(out_mb=64, memory_mb=256)), pb.CreateRunResponse,
            tls).run_id
        ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=[PY, "-c", MAKE]),
                     pb.ExecResponse, tls).exec_id
        st = self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=60000),
                     pb.WaitResponse, tls).status
        self.assertEqual(pb.ExitReason.Name(st.reason), "EXITED", st)
        digest = None
        if listing:
            ls = self.ok("ListArtifacts", pb.ListArtifactsRequest(run_id=run),
                         pb.ListArtifactsResponse, tls)
            digest = {a.path: a.sha256 for a in ls.artifacts}["f.bin"]
        return run, digest

    def chunk(self, run, offset, path="f.bin"):
        return self.ok("FetchArtifact", pb.FetchArtifactRequest(
            run_id=run, path=path, offset=offset, max_bytes=MIB), pb.FetchArtifactResponse)

    def raw_fetch(self, run, order):
        """The file by chunks asked in `order` (chunk indexes); the bytes
        put in place and the sha256 of the last chunk."""
        parts, sha = {}, None
        for i in order:
            r = self.chunk(run, i * MIB)
            parts[i] = r.data
            if r.eof:
                sha = r.sha256
        return b"".join(parts[i] for i in sorted(parts)), sha

    def cli_fetch(self, run, digest, tls=False):
        dest = os.path.join(self.tmpdir, "out-%s.bin" % ("tls" if tls else "ipc"))
        r = self.srv.cli("fetch", run, "f.bin", dest, "--json", tls=tls,
                         token=self.srv.tokens["alice"] if tls else None)
        self.assertEqual(r.returncode, 0, r.stderr)
        fj = json.loads(r.stdout)
        with open(dest, "rb") as f:
            got = hashlib.sha256(f.read()).hexdigest()
        self.assertEqual((fj["sha256"], fj["size"], got), (digest, SIZE, digest))

    def test_cli_fetch_is_the_file_over_ipc_and_tls(self):
        # Listed first (the digest is cached), then not (sbxd hashes the
        # chunks as they come, in whatever order its workers take them).
        run, digest = self.made()
        self.cli_fetch(run, digest)
        run_tls, digest_tls = self.made(tls=True)
        self.cli_fetch(run_tls, digest_tls, tls=True)
        run2, _ = self.made(listing=False)
        dest = os.path.join(self.tmpdir, "unlisted.bin")
        r = self.srv.cli("fetch", run2, "f.bin", dest, "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(dest, "rb") as f:
            self.assertEqual(json.loads(r.stdout)["sha256"], hashlib.sha256(f.read()).hexdigest())
        r = subprocess.run([CLI, "--endpoint", self.srv.ipc, "fetch", run2, "small", "-"],
                           capture_output=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout), (0, b"x" * 100), r.stderr)

    def test_fetch_into_a_pipe_is_the_file_in_order(self):
        # Into a pipe (sbx_fetch_fd) a writer thread writes the chunks in
        # order while the taking thread hashes: every chunk once, in its
        # place, whatever order they arrived in.
        run, digest = self.made()
        r = subprocess.run([CLI, "--endpoint", self.srv.ipc, "fetch", run, "f.bin", "-"],
                           capture_output=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual((len(r.stdout), hashlib.sha256(r.stdout).hexdigest()), (SIZE, digest))

    def test_chunks_out_of_order_give_the_files_digest(self):
        run, _ = self.made(listing=False)  # nothing cached: the cursor hashes
        n = (SIZE + MIB - 1) // MIB
        # Behind, ahead within the gap the cursor fills, and the last one
        # before those between.
        order = [0, 3, 1, 2, 5, 4] + list(range(6, n - 2)) + [n - 1, n - 2]
        data, sha = self.raw_fetch(run, order)
        self.assertEqual(len(data), SIZE)
        self.assertEqual(sha, hashlib.sha256(data).hexdigest())
        # The last chunk right after the first (far beyond the gap): a
        # fresh pass at the end, still the file's digest.
        first, last = self.chunk(run, 0), self.chunk(run, (n - 1) * MIB)
        self.assertTrue(last.eof)
        self.assertEqual(last.sha256, hashlib.sha256(data).hexdigest())
        self.assertEqual(first.data, data[:MIB])

    def test_a_file_changed_between_chunks_is_never_passed_off(self):
        # The digest is cached, then an exec rewrites the file between the
        # first chunk and the rest: the last chunk's digest is of the file
        # as it is now and says live or differs from the bytes served.
        run, digest = self.made()
        head = self.chunk(run, 0).data
        ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=[
            "/bin/sh", "-c", "head -c %d /dev/zero > /out/f.bin" % SIZE]),
            pb.ExecResponse).exec_id
        self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=60000),
                pb.WaitResponse)
        n = (SIZE + MIB - 1) // MIB
        parts, last = [], None
        for i in range(1, n):
            last = self.chunk(run, i * MIB)
            parts.append(last.data)
        rest, sha = b"".join(parts), last.sha256
        self.assertNotEqual(sha, digest)
        self.assertEqual(sha, hashlib.sha256(b"\0" * SIZE).hexdigest())
        self.assertNotEqual(sha, hashlib.sha256(head + rest).hexdigest())
        # And it says so: the fetch met another version of the file, so
        # the client is told "changed by an exec" (live), not corruption
        # (review: the cursor was dropped and the last chunk said live
        # false).
        self.assertTrue(last.live, "the last chunk says live false")

    def sbxd_holds(self, name):
        d = "/proc/%d/fd" % self.srv.proc.pid
        held = []
        for fd in os.listdir(d):
            try:
                t = os.readlink(os.path.join(d, fd))
            except OSError:
                continue
            if t.split(" (deleted)")[0].endswith("/" + name):
                held.append(t)
        return held

    def test_abandoned_fetches_hold_at_most_two_files(self):
        # A caller that asks the first chunk of many files and never the
        # rest: sbxd keeps at most 2 of them open for the run (its budget
        # of descriptors keeps 16 a run), not one per fetch (review: 8 per
        # run stayed open until teardown).
        run = self.ok("CreateRun", pb.CreateRunRequest(
            policy_json=policy_json(out_mb=64, memory_mb=256)), pb.CreateRunResponse).run_id
        ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=[PY, "-c", (
            "for i in range(12): open('/out/a%02d' % i, 'wb').write(b'y' * (3 << 20))")]),
            pb.ExecResponse).exec_id
        self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=60000),
                pb.WaitResponse)
        for i in range(12):
            self.chunk(run, 0, path="a%02d" % i)
        held = [t for t in (self.sbxd_holds("a%02d" % i) for i in range(12)) if t]
        self.assertLessEqual(len(held), 2, held)
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)

    def test_teardown_leaves_no_file_of_a_fetch_in_progress(self):
        # Chunks after the first reuse the file sbxd opened: a Teardown in
        # the middle of a fetch closes it, and the next chunk is refused.
        run, _ = self.made()
        self.chunk(run, 0)
        self.chunk(run, MIB)
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
        code, msg, _ = self.c.call("FetchArtifact", pb.FetchArtifactRequest(
            run_id=run, path="f.bin", offset=2 * MIB, max_bytes=MIB), pb.FetchArtifactResponse)
        self.assertEqual(code, "NOT_FOUND", msg)
        self.assertEqual(self.sbxd_holds("f.bin"), [])


if __name__ == "__main__":
    unittest.main()
