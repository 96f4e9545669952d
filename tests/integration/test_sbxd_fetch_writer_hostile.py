# SPDX-License-Identifier: Apache-2.0
"""sbx_fetch_fd's in-order writer thread against a hostile server (a bare
nng REP socket standing in for sbxd), through sbxctl fetch ... - into a
pipe (review of fetchipc). The writer "only writes chunks the existing
checks would accept": whatever the server says, what reaches the pipe is
the chunks the taking thread accepted, in order, and nothing after the
first one it refused or after the one that said eof.

- a whole chunk that says eof before the declared size: DATA_LOSS, and the
  chunks after it (which the taking thread never takes) are not written;
- a chunk whose size differs: ABORTED, nothing from it on is written;
- a chunk answered with an error: that error, nothing from it on."""
import subprocess
import signal
import threading
import time
import unittest

from sbxdfix import CLI
from fakefetch import FakeFetchServer
from sbxrpc import sandbox_pb2 as pb

CH = 1 << 20
N = 8
SIZE = N * CH


def chunk(i):
    return bytes([0x41 + i]) * CH


def answering(bad, how):
    """The FakeFetchServer answer: chunk i of N, chunk `bad` spoiled `how`."""
    def answer(fr):
        i = fr.offset // CH
        r = pb.FetchArtifactResponse(size=SIZE, data=chunk(i), eof=(i == N - 1))
        if i == N - 1:
            r.sha256 = "0" * 64
        if i != bad:
            return 0, "", r
        if how == "eof":
            r.eof, r.sha256 = True, "0" * 64
        elif how == "size":
            r.size = SIZE + 1
        elif how == "stall":
            time.sleep(20)  # the client is interrupted meanwhile
        elif how == "error":
            return 13, "no", None  # INTERNAL
        return 0, "", r
    return answer


class WriterHostile(unittest.TestCase):
    def fetch(self, bad, how):
        with FakeFetchServer(answering(bad, how)) as srv:
            return subprocess.run([CLI, "--endpoint", srv.url, "fetch", "run-x", "f.bin", "-"],
                                  capture_output=True, timeout=60)

    def test_an_interrupt_while_the_writer_waits(self):
        # SIGINT (sbx_client_set_interrupt's flag) while chunk 3 never
        # comes: the workers' calls are cancelled, the writer and the
        # taking thread see it, and sbxctl exits promptly with whole
        # chunks before it written, in order, not hung on the writer thread.
        with FakeFetchServer(answering(3, "stall")) as srv:
            p = subprocess.Popen([CLI, "--endpoint", srv.url, "fetch", "run-x", "f.bin", "-"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            got = bytearray()

            def read():
                while True:
                    b = p.stdout.read(1 << 16)
                    if not b:
                        return
                    got.extend(b)
            t = threading.Thread(target=read, daemon=True)
            t.start()
            time.sleep(2)
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=10)  # a hang is the failure, not a slow exit
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        t.join(10)
        err = p.stderr.read()
        self.assertNotEqual(p.returncode, 0, err)
        self.assertIn(b"CANCELLED", err, err)
        # The chunks answered before the stall (the fake server answers
        # in the order asked, so which is not fixed), whole and in order.
        k = len(got) // CH
        self.assertEqual((len(got) % CH, bytes(got) == b"".join(chunk(i) for i in range(k))),
                         (0, True), "%d bytes" % len(got))
        self.assertLessEqual(k, 3)

    def check(self, bad, how, word):
        for attempt in range(6):
            r = self.fetch(bad, how)
            self.assertNotEqual(r.returncode, 0, r.stderr)
            self.assertIn(word, r.stderr, r.stderr)
            taken = bad + 1 if how == "eof" else bad
            want = b"".join(chunk(i) for i in range(taken))
            self.assertEqual(
                (len(r.stdout), r.stdout == want), (len(want), True),
                "attempt %d: %d bytes reached the pipe, %d were taken (chunks 0..%d): "
                "chunks the taking thread never accepted were written" %
                (attempt, len(r.stdout), len(want), taken - 1))

    def test_an_early_eof_stops_the_writing(self):
        self.check(2, "eof", b"DATA_LOSS")

    def test_a_changed_size_stops_the_writing(self):
        self.check(2, "size", b"ABORTED")

    def test_an_error_stops_the_writing(self):
        self.check(3, "error", b"INTERNAL")


if __name__ == "__main__":
    unittest.main()
