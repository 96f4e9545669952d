# SPDX-License-Identifier: Apache-2.0
"""libsbxclient's pipelined fetch against a hostile server (a bare nng REP
socket standing in for sbxd): a reply stream whose middle chunk is short
but not the last, and whose last chunk is long, with a sha256 of the
bytes as sent. With workers writing chunks at their offsets and the
in-order thread writing the rest at the file position, such a stream once
left a file whose bytes were not the ones hashed while sbxctl reported
success (review of the pipelined fetch). Every chunk but the last must be
whole and at its place: the fetch fails with DATA_LOSS and leaves no file."""
import ctypes
import hashlib
import os
import subprocess
import tempfile
import threading
import unittest

from sbxdfix import CLI
from sbxrpc import _nng, sandbox_pb2 as pb

CH = 1 << 20
A, B, C = b"A" * CH, b"B" * (CH - 10), b"C" * 20
SIZE = 2 * CH + 10
SHA = hashlib.sha256(A + B + C).hexdigest()


def serve(sock):
    while True:
        buf, size = ctypes.c_void_p(), ctypes.c_size_t()
        if _nng.nng_recv(sock, ctypes.byref(buf), ctypes.byref(size), 1) != 0:
            return  # closed
        data = ctypes.string_at(buf, size.value)
        _nng.nng_free(buf, size)
        req = pb.Request()
        req.ParseFromString(data)
        body = b""
        if req.method.endswith("FetchArtifact"):
            fr = pb.FetchArtifactRequest()
            fr.ParseFromString(req.body)
            r = pb.FetchArtifactResponse(size=SIZE)
            if fr.offset == 0:
                r.data = A
            elif fr.offset == CH:
                r.data = B  # short, yet not the end
            else:
                r.data, r.eof, r.sha256 = C, True, SHA
            body = r.SerializeToString()
        out = pb.Response(code=0, body=body).SerializeToString()
        _nng.nng_send(sock, out, len(out), 0)


class HostileServer(unittest.TestCase):
    def test_short_middle_chunk_is_data_loss(self):
        d = tempfile.mkdtemp()
        url = "ipc://%s/fake.sock" % d
        sock = ctypes.c_uint32()
        self.assertEqual(_nng.nng_rep0_open(ctypes.byref(sock)), 0)
        self.assertEqual(_nng.nng_listen(sock, url.encode(), None, 0), 0)
        t = threading.Thread(target=serve, args=(sock,), daemon=True)
        t.start()
        try:
            dest = os.path.join(d, "got.bin")
            r = subprocess.run([CLI, "--endpoint", url, "fetch", "run-x", "f.bin", dest],
                               capture_output=True, text=True, timeout=60)
        finally:
            _nng.nng_close(sock)
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn("DATA_LOSS", r.stderr + r.stdout, r)
        self.assertFalse(os.path.exists(dest), os.listdir(d))


if __name__ == "__main__":
    unittest.main()
