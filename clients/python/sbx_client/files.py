# SPDX-License-Identifier: Apache-2.0
"""Files in and out of a run: the input manifest, and the digest check every
fetch ends with."""
import hashlib
import os
import secrets
import socket
import threading

from . import errors

CHUNK = 1 << 20  # PutInput.data and FetchArtifact.max_bytes: at most 1 MiB
FETCH_WINDOW = 4  # FetchArtifact chunks asked at once (libsbxclient's SBX_FETCH_WINDOW)
MAX_INPUTS = 10000
_CHANGED = ("an exec is running, so the file can change and digests are not final; fetch it "
            "again when the run's execs have ended")


def current_umask():
    """The process's umask, read without setting it: os.umask(0) then back
    leaves every other thread of the process (a Client is shared between
    threads, the asyncio API runs each call on one) making world-writable
    files for that moment. /proc/self/status says it since Linux 4.7."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o077)  # the fallback's window makes files private, not public
    os.umask(mask)
    return mask


def sha256_file(path):
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                return h.hexdigest(), size
            h.update(b)
            size += len(b)


def input_path(path):
    """"/data/x.csv" or "x.csv" -> "x.csv" (InputFile.path is relative to /data)."""
    p = os.fspath(path)
    if p.startswith("/data/"):
        p = p[len("/data/"):]
    if not p or p.startswith("/") or any(c in ("", ".", "..") for c in p.split("/")):
        raise errors.InvalidArgument("input %r: a path under /data, without '..'" % path)
    return p


def out_path(path):
    """"/out/r.csv" or "r.csv" -> "r.csv" (Artifact.path is relative to /out)."""
    p = os.fspath(path)
    if p.startswith("/out/"):
        p = p[len("/out/"):]
    return p


class Input:
    """One declared input: bytes in memory or a local file. sha256: the
    digest the run declared for it already (CreateRun's manifest): then the
    source is not hashed here, since sbxd checks its bytes against that
    digest as they arrive (a file that differs is refused, nothing lands)."""

    def __init__(self, path, source, sha256=None):
        self.path = input_path(path)
        if isinstance(source, (bytes, bytearray, memoryview)):
            self.data = bytes(source)
            self.local = None
            self.size = len(self.data)
            self.sha256 = sha256 or hashlib.sha256(self.data).hexdigest()
        elif isinstance(source, (str, os.PathLike)):
            self.data = None
            self.local = os.fspath(source)
            try:
                if sha256:
                    self.sha256, self.size = sha256, os.stat(self.local).st_size
                else:
                    self.sha256, self.size = sha256_file(self.local)
            except OSError as e:
                raise errors.InvalidArgument("input %s: %s: %s"
                                             % (self.path, self.local, e.strerror)) from None
        else:
            raise errors.InvalidArgument("input %s: bytes or a local path, not %s"
                                         % (path, type(source).__name__))

    def chunks(self):
        """(offset, bytes, last) in order; the file must still be as hashed."""
        if self.data is not None:
            src = self.data
            if not src:
                yield 0, b"", True
            for off in range(0, len(src), CHUNK):
                part = src[off:off + CHUNK]
                yield off, part, off + len(part) == len(src)
            return
        with open(self.local, "rb") as f:
            off = 0
            if self.size == 0:
                yield 0, b"", True
            while off < self.size:
                part = f.read(min(CHUNK, self.size - off))
                if not part:
                    raise errors.Aborted("%s: shrank while being uploaded" % self.local)
                yield off, part, off + len(part) == self.size
                off += len(part)


def scan_dir(top):
    """Every regular file under top as {relative path: local path}, sorted,
    links and special files left out (and said on the returned skipped list),
    as `sbx run --data` does."""
    found, skipped = {}, []

    def walk(d, rel, depth):
        if depth > 64:
            raise errors.InvalidArgument("%s: nested deeper than 64" % d)
        with os.scandir(d) as it:
            for e in sorted(it, key=lambda e: e.name):
                r = rel + "/" + e.name if rel else e.name
                if e.is_file(follow_symlinks=False):
                    found[r] = e.path
                elif e.is_dir(follow_symlinks=False):
                    walk(e.path, r, depth + 1)
                else:
                    skipped.append(e.path)
                if len(found) > MAX_INPUTS:
                    raise errors.InvalidArgument("more than %d input files" % MAX_INPUTS)
    try:
        walk(top, "", 0)
    except OSError as e:
        raise errors.InvalidArgument("--data %s: %s" % (top, e.strerror)) from None
    return dict(sorted(found.items())), skipped


def check_digest(name, got, server, expected=None, live=False):
    """The end of every fetch: got (the sha256 of the bytes received) must be
    what the server said (server) and, when given, what a listing said
    (expected). A mismatch is DataLoss; when an exec could still change the
    file (live), Aborted (fetch it again when the execs ended)."""
    if server != got:
        if live and server:
            raise errors.Aborted("%s: changed while being fetched (the bytes received hash to "
                                 "%s, the file now to %s): %s" % (name, got, server, _CHANGED))
        raise errors.DataLoss("%s: sha256 of the bytes received is %s, the server says %s"
                              % (name, got, server or "nothing"))
    if expected is not None and expected != got:
        if live:
            raise errors.Aborted("%s: changed since it was listed (sha256 %s, listed as %s): %s"
                                 % (name, got, expected, _CHANGED))
        raise errors.DataLoss("%s: sha256 of the bytes received is %s, expected %s"
                              % (name, got, expected))


def safe_relative(p):
    """An artifact path that stays inside the directory it is written to."""
    if not p or p.startswith("/") or len(p) > 4096:
        return False
    return all(c not in ("", ".", "..") for c in p.split("/"))


IMPORT_CHUNK = 256 * 1024  # ImportInputs' largest message (common/import_wire.h)
_HELLO = b"sbxhel3\0"


def import_input(client, run_id, inp, mode):
    """Uploads one Input over a unix socket of ours (ImportInputs): sbxd
    checks the declaration as PutInput's first chunk, connects (its
    listener's uid checked), says the call's nonce, and takes the bytes,
    256 KiB a message, then our close. Only a peer of the uid that owns
    sbxd's socket that repeats the nonce is sent anything."""
    from .proto import sandbox_pb2 as pb

    sbxd_uid = os.stat(client.endpoint[len("ipc://"):]).st_uid
    name = "sbx-import-" + secrets.token_hex(16)
    nonce = secrets.token_bytes(16)
    done = threading.Event()
    failure = []
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ls.bind(b"\0" + name.encode())
    ls.listen(4)
    ls.settimeout(0.1)

    def send():
        try:
            while not done.is_set():
                try:
                    c, _ = ls.accept()
                except socket.timeout:
                    continue
                with c:
                    creds = c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
                    if int.from_bytes(creds[4:8], "little") != sbxd_uid:
                        continue
                    c.settimeout(client.timeout + 120)
                    if c.recv(256) != _HELLO + bytes([len(nonce)]) + nonce:
                        continue
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
                    for off, data, _ in inp.chunks():
                        for i in range(0, len(data), IMPORT_CHUNK):
                            c.send(data[i:i + IMPORT_CHUNK])
                    return
        except (OSError, errors.SbxError) as e:
            failure.append(e)

    t = threading.Thread(target=send, daemon=True)
    t.start()
    req = pb.ImportInputsRequest(run_id=run_id, socket_name=name, nonce=nonce)
    f = req.files.add(path=inp.path, size=inp.size, sha256=inp.sha256)
    if mode:
        f.mode = mode
    try:
        r = client.call("ImportInputs", req, pb.ImportInputsResponse,
                        timeout=client.timeout + 120)
    except errors.SbxError:
        done.set()
        t.join()
        # A local file we could not read says more than the end sbxd saw.
        if failure and isinstance(failure[0], errors.SbxError):
            raise failure[0] from None
        raise
    finally:
        done.set()
        t.join()
        ls.close()
    if list(r.sha256) != [inp.sha256]:
        raise errors.DataLoss("ImportInputs %s: sbxd received sha256 %s, sent %s"
                              % (inp.path, list(r.sha256), inp.sha256))
