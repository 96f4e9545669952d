# SPDX-License-Identifier: Apache-2.0
"""FetchArtifact reads its chunk straight into the reply's nng message
(rpc_reply_bulk; review of fetchipc): every reply carries bytes of the
file asked for, at the offset asked for, and nothing else (no bytes of
another call, of another run, nor uninitialised memory), whatever the
file does meanwhile (an exec shrinking and growing it during the reads),
at the edges (offset at and past the end, max_bytes 1 and past the
limit), and with the run torn down under the reads. Run it against an
ASan sbxd (SBX_SBXD=build-asan/server/sbxd) for the error paths."""
import threading
import time
import unittest

from sbxdfix import ServerTestCase, policy_json
from sbxrpc import sandbox_pb2 as pb

MIB = 1 << 20
PY = "/usr/bin/python3"
SIZE = 3 * MIB + 5


def pattern(seed, n):
    """The bytes of a run's file: which run they are of shows in every one."""
    unit = bytes(((i * 7 + seed) % 251) + 1 for i in range(251 * 16))
    return (unit * (n // len(unit) + 1))[:n]


MAKE = ("import sys\nseed = int(sys.argv[1])\n"
        "unit = bytes(((i * 7 + seed) %% 251) + 1 for i in range(251 * 16))\n"
        "data = (unit * (%d // len(unit) + 1))[:%d]\n"
        "open('/out/f.bin', 'wb').write(data)\n" % (SIZE, SIZE))
# Shrinks and grows the file (always with the pattern's bytes at their
# offsets, never a hole) for a few seconds.
CHURN = MAKE + ("import os, time\nf = open('/out/f.bin', 'r+b')\nend = time.time() + 6\n"
                "k = 0\nwhile time.time() < end:\n"
                "    n = (k * 389111) % len(data)\n    f.truncate(n)\n"
                "    f.seek(n)\n    f.write(data[n:])\n    f.flush()\n    k += 1\n")


class FetchBulk(ServerTestCase):
    def ok(self, c, name, req, resp_type):
        code, msg, resp = c.call(name, req, resp_type)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def run_with(self, seed, script=MAKE, wait=True):
        with self.srv.conn(timeout_ms=30000) as c:
            run = self.ok(c, "CreateRun", pb.CreateRunRequest(
                policy_json=policy_json(out_mb=64, memory_mb=256, script_seconds=60)),
                pb.CreateRunResponse).run_id
            ex = self.ok(c, "Exec", pb.ExecRequest(
                run_id=run, argv=[PY, "-c", script, str(seed)]), pb.ExecResponse).exec_id
            if wait:
                st = self.ok(c, "Wait", pb.WaitRequest(run_id=run, exec_id=ex,
                                                       timeout_ms=60000), pb.WaitResponse).status
                self.assertEqual(pb.ExitReason.Name(st.reason), "EXITED", st)
        return run, ex

    def fetch(self, c, run, offset, max_bytes=MIB):
        return c.call("FetchArtifact", pb.FetchArtifactRequest(
            run_id=run, path="f.bin", offset=offset, max_bytes=max_bytes),
            pb.FetchArtifactResponse)

    def test_edges(self):
        run, _ = self.run_with(11)
        want = pattern(11, SIZE)
        with self.srv.conn(timeout_ms=30000) as c:
            code, msg, r = self.fetch(c, run, SIZE)
            self.assertEqual((code, r.data, r.eof, r.size, len(r.sha256)),
                             ("OK", b"", True, SIZE, 64), msg)
            code, msg, _ = self.fetch(c, run, SIZE + 1)
            self.assertEqual(code, "OUT_OF_RANGE", msg)
            for off, mb in ((0, 1), (7, 1), (SIZE - 1, 1), (SIZE - 1, MIB), (MIB - 3, MIB),
                            (3 * MIB, MIB), (12345, 0)):
                code, msg, r = self.fetch(c, run, off, mb)
                n = min(SIZE - off, mb or MIB)
                self.assertEqual((code, r.data == want[off:off + n], len(r.data), r.size),
                                 ("OK", True, n, SIZE), "%d+%d: %s" % (off, mb, msg))
            code, msg, _ = self.fetch(c, run, 0, MIB + 1)
            self.assertEqual(code, "INVALID_ARGUMENT", msg)

    def test_churning_files_of_two_runs(self):
        # Two runs whose files shrink and grow while four callers fetch
        # chunks of both at once: every byte of a reply is its own run's,
        # at its offset.
        runs = [(self.run_with(seed, CHURN, wait=False)[0], seed) for seed in (3, 5)]
        time.sleep(0.5)
        want = {seed: pattern(seed, SIZE) for _, seed in runs}
        bad, seen = [], [0]

        def fetcher(k):
            with self.srv.conn(timeout_ms=30000) as c:
                end = time.time() + 5
                i = 0
                while time.time() < end and not bad:
                    run, seed = runs[(k + i) % 2]
                    off = ((i * 7 + k) % 4) * MIB - (i % 3)
                    off = max(off, 0)
                    mb = (MIB, 1, 4097, 0)[i % 4]
                    code, msg, r = self.fetch(c, run, off, mb)
                    i += 1
                    if code != "OK":
                        if code not in ("OUT_OF_RANGE", "ABORTED", "FAILED_PRECONDITION",
                                        "RESOURCE_EXHAUSTED"):
                            bad.append("%s at %d: %s %s" % (run, off, code, msg))
                        continue
                    seen[0] += 1
                    lim = mb or MIB
                    if len(r.data) > lim or r.data != want[seed][off:off + len(r.data)]:
                        bad.append("%s (seed %d) at %d, max %d: %d bytes not the file's" %
                                   (run, seed, off, lim, len(r.data)))

        ts = [threading.Thread(target=fetcher, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        self.assertEqual(bad, [])
        self.assertGreater(seen[0], 20)

    def test_teardown_under_the_reads(self):
        run, _ = self.run_with(9)
        want = pattern(9, SIZE)
        bad, stop = [], threading.Event()

        def fetcher(k):
            with self.srv.conn(timeout_ms=30000) as c:
                i = 0
                while not stop.is_set():
                    off = ((i + k) % 4) * MIB
                    code, msg, r = self.fetch(c, run, off)
                    i += 1
                    if code == "OK":
                        if r.data != want[off:off + len(r.data)]:
                            bad.append("at %d: %d bytes not the file's" % (off, len(r.data)))
                    elif code == "NOT_FOUND":
                        return
                    elif code not in ("FAILED_PRECONDITION", "ABORTED", "RESOURCE_EXHAUSTED"):
                        bad.append("at %d: %s %s" % (off, code, msg))

        ts = [threading.Thread(target=fetcher, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        time.sleep(1.0)
        with self.srv.conn(timeout_ms=30000) as c:
            code, msg, _ = c.call("Teardown", pb.TeardownRequest(run_id=run),
                                  pb.TeardownResponse)
        time.sleep(0.5)
        stop.set()
        for t in ts:
            t.join(60)
        self.assertEqual((code, bad), ("OK", []), msg)


class FetchBulkSmallMessages(FetchBulk):
    """max_message_bytes at its smallest: a chunk whose answer is exactly
    the limit goes, one byte more is INTERNAL, saying why (as rpc_reply's
    answers; the envelope is written around the bytes read)."""
    SERVER_CONFIG = {"max_message_bytes": 65536}
    # The others ask for whole chunks, which this sbxd cannot send.
    test_edges = test_churning_files_of_two_runs = test_teardown_under_the_reads = None

    def test_the_limit(self):
        run, _ = self.run_with(13)
        want = pattern(13, SIZE)
        with self.srv.conn(timeout_ms=30000) as c:
            # A middle chunk (no eof, no digest, not live): its answer is
            # the bytes and 13 bytes around them.
            for n in range(65520, 65527):
                code, msg, r = self.fetch(c, run, MIB, n)
                if n + 13 <= 65536:
                    self.assertEqual((code, r.data == want[MIB:MIB + n]), ("OK", True), msg)
                else:
                    self.assertEqual(code, "INTERNAL", "%d: %s" % (n, msg))
                    self.assertIn("larger than max_message_bytes (65536)", msg)


if __name__ == "__main__":
    unittest.main()
