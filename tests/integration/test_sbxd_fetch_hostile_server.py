# SPDX-License-Identifier: Apache-2.0
"""libsbxclient's pipelined fetch against a hostile server (a bare nng REP
socket standing in for sbxd): a reply stream whose middle chunk is short
but not the last, and whose last chunk is long, with a sha256 of the
bytes as sent. With workers writing chunks at their offsets and the
in-order thread writing the rest at the file position, such a stream once
left a file whose bytes were not the ones hashed while sbxctl reported
success (review of the pipelined fetch). Every chunk but the last must be
whole and at its place: the fetch fails with DATA_LOSS and leaves no file."""
import hashlib
import os
import subprocess
import unittest

from sbxdfix import CLI
from fakefetch import FakeFetchServer
from sbxrpc import sandbox_pb2 as pb

CH = 1 << 20
A, B, C = b"A" * CH, b"B" * (CH - 10), b"C" * 20
SIZE = 2 * CH + 10
SHA = hashlib.sha256(A + B + C).hexdigest()


def answer(fr):
    r = pb.FetchArtifactResponse(size=SIZE)
    if fr.offset == 0:
        r.data = A
    elif fr.offset == CH:
        r.data = B  # short, yet not the end
    else:
        r.data, r.eof, r.sha256 = C, True, SHA
    return 0, "", r


class HostileServer(unittest.TestCase):
    def test_short_middle_chunk_is_data_loss(self):
        with FakeFetchServer(answer) as srv:
            dest = os.path.join(srv.dir, "got.bin")
            r = subprocess.run([CLI, "--endpoint", srv.url, "fetch", "run-x", "f.bin", dest],
                               capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn("DATA_LOSS", r.stderr + r.stdout, r)
        self.assertFalse(os.path.exists(dest), os.listdir(srv.dir))


if __name__ == "__main__":
    unittest.main()
