# SPDX-License-Identifier: Apache-2.0
"""Review 3 of issue 16, finding 1 (each run's sandbox user a host uid of its
own): what changed for sbxd's callers and for sbxd's /out reader.

- Uploads are sbxd's uid's files, and the sandbox user is now another uid:
  an input uploaded with a private mode (0600, what mkstemp makes and the
  Python client sends as the local file's mode; 0700 for a script) must
  still be readable (and executable) by the sandbox, as it was when the
  sandbox ran as sbxd's uid.
- The reader (common/out_reader.c) answers opens one at a time with no id:
  an answer that came late (sbxd gave up after its timeout) must never be
  taken as the answer to the next open, which would hand a fetch of one
  path another file's bytes."""
import hashlib
import os
import signal
import time
import unittest

from sbxdfix import ServerTestCase, policy_json
from sbxrpc import sandbox_pb2 as pb
from test_sbxd_limits import children, pid_levels

READER_TIMEOUT_S = 10  # SBX_OUT_READER_TIMEOUT_MS


class Review(ServerTestCase):
    def setUp(self):
        self.c = self.srv.conn(timeout_ms=60000)
        self.addCleanup(self.c.close)  # cleanups run last first: after the teardowns

    def ok(self, name, req, resp_type):
        code, msg, resp = self.c.call(name, req, resp_type)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def create(self):
        run = self.ok("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                      pb.CreateRunResponse).run_id
        self.addCleanup(self.c.call, "Teardown", pb.TeardownRequest(run_id=run),
                        pb.TeardownResponse)
        return run

    def sh(self, run, script):
        ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=["/bin/sh", "-c", script]),
                     pb.ExecResponse).exec_id
        st = self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=30000),
                     pb.WaitResponse).status
        out, off = b"", 0
        while True:
            r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex,
                                                           stream=pb.STDOUT, offset=off),
                        pb.ReadOutputResponse)
            out += r.data
            off = r.next_offset
            if r.eof or not r.data:
                break
        return st, out

    def put(self, run, path, data, mode):
        r = self.ok("PutInput", pb.PutInputRequest(
            run_id=run, path=path, data=data, last=True, mode=mode, size=len(data),
            sha256=hashlib.sha256(data).hexdigest()), pb.PutInputResponse)
        self.assertTrue(r.complete)

    def test_private_uploads_stay_readable_and_executable_by_the_sandbox(self):
        run = self.create()
        self.put(run, "secret.txt", b"s3cret\n", 0o600)
        self.put(run, "bin/tool.sh", b"#!/bin/sh\necho tool ran\n", 0o700)
        self.put(run, "plain.txt", b"plain\n", 0o644)
        st, out = self.sh(run, "cat /data/secret.txt /data/plain.txt; /data/bin/tool.sh; "
                               "test -w /data/plain.txt || echo not writable")
        self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code), ("EXITED", 0), (st, out))
        self.assertEqual(out, b"s3cret\nplain\ntool ran\nnot writable\n")
        # The manifest still says what the caller declared.
        modes = {i.path: i.mode for i in self.ok(
            "Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse).manifest.inputs}
        self.assertEqual(modes, {"secret.txt": 0o600, "bin/tool.sh": 0o700,
                                 "plain.txt": 0o644}, modes)

    def reader_of_latest_run(self):
        helpers = children(self.srv.proc.pid)
        readers = [c for h in helpers for c in children(h) if pid_levels(c) == 1]
        self.assertEqual(len(readers), 1, (helpers, readers))
        return readers[0]

    def fetch(self, run, path):
        return self.c.call("FetchArtifact", pb.FetchArtifactRequest(run_id=run, path=path),
                           pb.FetchArtifactResponse)

    def test_a_late_answer_never_serves_another_path(self):
        run = self.create()
        st, _ = self.sh(run, "echo AAAA > /out/a; echo BBBB > /out/b")
        self.assertEqual(st.exit_code, 0, st)
        reader = self.reader_of_latest_run()
        os.kill(reader, signal.SIGSTOP)
        try:
            code, msg, _ = self.fetch(run, "a")  # gives up after the reader's timeout
            self.assertNotEqual(code, "OK", msg)
        finally:
            os.kill(reader, signal.SIGCONT)
        time.sleep(0.5)  # the late answer to "a" is now queued for sbxd
        code, msg, resp = self.fetch(run, "b")
        if code == "OK":
            self.assertEqual(resp.data, b"BBBB\n", "a fetch of b was served another file")
        code, msg, resp = self.fetch(run, "a")
        if code == "OK":
            self.assertEqual(resp.data, b"AAAA\n", "a fetch of a was served another file")

    def test_the_reader_holds_no_fd_per_open_and_ends_at_teardown(self):
        run = self.create()
        st, _ = self.sh(run, "mkdir -p /out/d/e; for i in 1 2 3 4 5 6 7 8; do "
                             "echo $i > /out/d/e/f$i; done; mkfifo /out/fifo; chmod 000 /out/d")
        self.assertEqual(st.exit_code, 0, st)
        reader = self.reader_of_latest_run()
        before = len(os.listdir("/proc/%d/fd" % reader))
        for _ in range(3):
            ls = self.ok("ListArtifacts", pb.ListArtifactsRequest(run_id=run),
                         pb.ListArtifactsResponse)
            # A mode of 000 keeps nothing from the reader; the FIFO is skipped.
            self.assertEqual(sorted(a.path for a in ls.artifacts),
                             ["d/e/f%d" % i for i in range(1, 9)])
            code, msg, _ = self.fetch(run, "fifo")
            self.assertEqual(code, "FAILED_PRECONDITION", msg)
        # The reader closes its copy of an fd just after sending it, so the
        # last answer can reach us a moment before that close: wait for it.
        deadline = time.monotonic() + 5
        while (len(os.listdir("/proc/%d/fd" % reader)) != before and
               time.monotonic() < deadline):
            time.sleep(0.02)
        self.assertEqual(len(os.listdir("/proc/%d/fd" % reader)), before)
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
        deadline = time.monotonic() + 10
        while os.path.exists("/proc/%d" % reader) and time.monotonic() < deadline:
            with open("/proc/%d/stat" % reader) as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
            time.sleep(0.05)
        alive = os.path.exists("/proc/%d" % reader)
        if alive:
            with open("/proc/%d/stat" % reader) as f:
                alive = f.read().split(")")[-1].split()[0] != "Z"
        self.assertFalse(alive, "the /out reader outlived Teardown")


if __name__ == "__main__":
    unittest.main()
