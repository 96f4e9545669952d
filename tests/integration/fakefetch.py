# SPDX-License-Identifier: Apache-2.0
"""A bare nng REP socket standing in for sbxd, for the tests that attack
libsbxclient's fetch with answers no real sbxd gives. It answers every
FetchArtifact with what the test's `answer` says and every other call with
an empty OK, until it is closed."""
import ctypes
import tempfile
import threading

from sbxrpc import _nng, sandbox_pb2 as pb


class FakeFetchServer:
    """`with FakeFetchServer(answer) as srv:` listens on srv.url (ipc, in
    srv.dir). answer(FetchArtifactRequest) returns (code, message, body):
    body a FetchArtifactResponse or None."""

    def __init__(self, answer):
        self.answer = answer
        self.dir = tempfile.mkdtemp()
        self.url = "ipc://%s/fake.sock" % self.dir
        self.sock = ctypes.c_uint32()

    def __enter__(self):
        if _nng.nng_rep0_open(ctypes.byref(self.sock)) != 0:
            raise OSError("nng_rep0_open failed")
        if _nng.nng_listen(self.sock, self.url.encode(), None, 0) != 0:
            _nng.nng_close(self.sock)
            raise OSError("nng_listen %s failed" % self.url)
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc):
        _nng.nng_close(self.sock)

    def _serve(self):
        while True:
            buf, size = ctypes.c_void_p(), ctypes.c_size_t()
            if _nng.nng_recv(self.sock, ctypes.byref(buf), ctypes.byref(size), 1) != 0:
                return  # closed
            data = ctypes.string_at(buf, size.value)
            _nng.nng_free(buf, size)
            req = pb.Request()
            req.ParseFromString(data)
            code, message, body = 0, "", None
            if req.method.endswith("FetchArtifact"):
                fr = pb.FetchArtifactRequest()
                fr.ParseFromString(req.body)
                code, message, body = self.answer(fr)
            out = pb.Response(code=code, message=message,
                              body=body.SerializeToString() if body else b"")
            out = out.SerializeToString()
            _nng.nng_send(self.sock, out, len(out), 0)
