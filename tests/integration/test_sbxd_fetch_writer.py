# SPDX-License-Identifier: Apache-2.0
"""sbx_fetch_fd's in-order writer thread (review of fetchipc): a write of
chunk i that fails after part of the chunk went out must fail the fetch,
as the taking thread's own write did before the writer existed. The
writer used to drop the chunk silently ("the taking thread writes it
again"), the taking thread wrote the whole chunk a second time, and
sbxctl fetch ... - reported success with the sha256 of the file while
stdout carried the part written twice.

The output is a socket with a send timeout (SO_SNDTIMEO; a non-blocking
pipe gives the same EAGAIN, less predictably): the reader takes chunk 0,
then stalls long enough for the writer's write of chunk 1 to go out in
part and then time out, and reads the rest before the taking thread's
write would time out too."""
import hashlib
import socket
import struct
import subprocess
import threading
import time
import unittest

from sbxdfix import CLI, ServerTestCase, policy_json
from sbxrpc import sandbox_pb2 as pb

MIB = 1 << 20
PY = "/usr/bin/python3"
SIZE = 4 * MIB
MAKE = "import os\nopen('/out/f.bin','wb').write(os.urandom(%d))\n" % SIZE
TIMEOUT_S = 2  # the output socket's SO_SNDTIMEO
STALL_S = 5    # the reader's pause after chunk 0: past 2 timeouts, before 3


class FetchWriter(ServerTestCase):
    def ok(self, c, name, req, resp_type):
        code, msg, resp = c.call(name, req, resp_type)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def made(self):
        with self.srv.conn(timeout_ms=30000) as c:
            run = self.ok(c, "CreateRun", pb.CreateRunRequest(
                policy_json=policy_json(out_mb=64, memory_mb=256)), pb.CreateRunResponse).run_id
            ex = self.ok(c, "Exec", pb.ExecRequest(run_id=run, argv=[PY, "-c", MAKE]),
                         pb.ExecResponse).exec_id
            st = self.ok(c, "Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=60000),
                         pb.WaitResponse).status
            self.assertEqual(pb.ExitReason.Name(st.reason), "EXITED", st)
            ls = self.ok(c, "ListArtifacts", pb.ListArtifactsRequest(run_id=run),
                         pb.ListArtifactsResponse)
        return run, {a.path: a.sha256 for a in ls.artifacts}["f.bin"]

    def test_a_partial_write_by_the_writer_fails_the_fetch(self):
        run, digest = self.made()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                          struct.pack("ll", TIMEOUT_S, 0))
        got = bytearray()

        def read():
            while len(got) < MIB:  # chunk 0, at once
                b = ours.recv(min(1 << 16, MIB - len(got)))
                if not b:
                    return
                got.extend(b)
            time.sleep(STALL_S)
            while True:
                b = ours.recv(1 << 16)
                if not b:
                    return
                got.extend(b)

        t = threading.Thread(target=read, daemon=True)
        t.start()
        p = subprocess.Popen([CLI, "--endpoint", self.srv.ipc, "fetch", run, "f.bin", "-"],
                             stdout=theirs, stderr=subprocess.PIPE)
        theirs.close()
        _, err = p.communicate(timeout=120)
        t.join(60)
        ours.close()
        ok = p.returncode == 0
        same = (len(got), hashlib.sha256(bytes(got)).hexdigest()) == (SIZE, digest)
        # Success only with the file's bytes; else an error that says so.
        self.assertTrue(same or not ok,
                        "sbxctl exited 0 (%s) yet wrote %d bytes for a %d-byte file "
                        "(sha256 %s, the file's %s)" %
                        (err.decode(errors="replace").strip(), len(got), SIZE,
                         hashlib.sha256(bytes(got)).hexdigest(), digest))
        if not ok:
            self.assertIn(b"writing", err, err)


if __name__ == "__main__":
    unittest.main()
