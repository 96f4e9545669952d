# SPDX-License-Identifier: Apache-2.0
"""Files in and out of a run: the input manifest, and the digest check every
fetch ends with."""
import hashlib
import os
import secrets
import socket
import struct
import threading

from . import dest, errors
from .results import Fetched

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
# How sbxd's refusal begins when it could not connect to our socket
# (common/export_wire.h, SBX_SIDE_UNREACHED): another local user can keep
# an abstract listener's backlog full (its name is in /proc/net/unix), so
# the transfer then goes in chunks instead of failing.
SIDE_UNREACHED = "same-host: connecting to the caller's socket_name"


def same_host_unreached(e):
    """Whether e is sbxd's refusal for a socket of ours it could not reach:
    at the message's start only, where export_files and import_input keep
    it for that refusal alone (_unreached_only_if)."""
    return isinstance(e, errors.FailedPrecondition) and e.message.startswith(SIDE_UNREACHED)


def _unreached_only_if(e, unreached):
    """e, or e with "same-host: " in front when it begins as sbxd's refusal
    for an unreached socket but is not that (our own error naming a file
    the sandbox named so, or a refusal after sbxd did connect)."""
    if not unreached and e.message.startswith(SIDE_UNREACHED):
        return type(e)("same-host: " + e.message)
    return e


def _side_call(client, method, req, resp_type, t, done, conns, ls):
    """The call of a same-host transfer, its side thread t started first:
    (the answer, the SbxError or None). Whatever ends the call (an answer,
    an error, an interrupt), the thread is told (done), the connection it
    accepted (conns) shut down so that it stops sending or receiving, and
    it is joined before this returns, the listener closed; what arrives
    during the join (KeyboardInterrupt, SystemExit) is raised after."""
    r, failed = None, None
    try:
        t.start()
        r = client.call(method, req, resp_type, timeout=client.timeout + 120)
    except errors.SbxError as e:
        failed = e
    finally:
        done.set()
        for c in list(conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # shut or closed already: the thread's own end
        held = _join(t)
        ls.close()
    if held is not None:
        raise held
    return r, failed


def _join(t):
    """Joins t whatever arrives meanwhile (KeyboardInterrupt, SystemExit
    from a signal handler): the first such exception is returned, to raise
    once the thread is gone."""
    held = None
    while t.is_alive():
        try:
            t.join()
        except BaseException as e:  # noqa: B036 (held, raised by the caller)
            held = held or e
    return held
_HELLO = b"sbxhel3\0"


def import_input(client, run_id, inp, mode):
    """Uploads one Input over a unix socket of ours (ImportInputs): sbxd
    checks the declaration as PutInput's first chunk, connects (its
    listener's uid checked), says the call's nonce, and takes the bytes,
    256 KiB a message, then our close. Only a peer of the uid that owns
    sbxd's socket that repeats the nonce is sent anything."""
    from .proto import sandbox_pb2 as pb

    sbxd_uid = os.stat(client.endpoint[len("ipc://"):]).st_uid
    ls, name, nonce = _side_listener("sbx-import-")
    done = threading.Event()
    failure = []
    connected = []

    def send():
        try:
            c = _side_accept(ls, sbxd_uid, nonce, done, client.timeout + 120, connected)
            if c is None:
                return
            with c:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
                for off, data, _ in inp.chunks():
                    for i in range(0, len(data), IMPORT_CHUNK):
                        c.send(data[i:i + IMPORT_CHUNK])
        except (OSError, errors.SbxError) as e:
            failure.append(e)

    t = threading.Thread(target=send, daemon=True)
    req = pb.ImportInputsRequest(run_id=run_id, socket_name=name, nonce=nonce)
    f = req.files.add(path=inp.path, size=inp.size, sha256=inp.sha256)
    if mode:
        f.mode = mode
    r, failed = _side_call(client, "ImportInputs", req, pb.ImportInputsResponse, t, done,
                           connected, ls)
    if failed is not None:
        # A local file we could not read says more than the end sbxd saw.
        if failure and isinstance(failure[0], errors.SbxError):
            raise _unreached_only_if(failure[0], False) from None
        raise _unreached_only_if(failed, not connected) from None
    if list(r.sha256) != [inp.sha256]:
        raise errors.DataLoss("ImportInputs %s: sbxd received sha256 %s, sent %s"
                              % (inp.path, list(r.sha256), inp.sha256))


EXPORT_CHUNK = 256 * 1024  # ExportArtifacts' largest message (common/export_wire.h)
EXPORT_MAX_PATHS = 256
# An export record: magic, index u32, mode u32, size u64, in the host's
# byte order (both ends are on one host).
_EXPORT_RECORD = struct.Struct("=8sIIQ")
_EXPORT_MAGIC = b"sbxexp3\0"


def _side_listener(prefix):
    """An abstract SOCK_SEQPACKET socket of a random name, listening (the
    caller's side of common/export_wire.h's channel): (socket, name, nonce)."""
    name = prefix + secrets.token_hex(16)
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ls.bind(b"\0" + name.encode())
    ls.listen(4)
    ls.settimeout(0.1)
    return ls, name, secrets.token_bytes(16)


def _side_accept(ls, sbxd_uid, nonce, done, timeout, conns):
    """sbxd's connection, once a peer of sbxd's uid repeated the nonce in its
    hello (another local user who connects first is closed unread), added
    to conns (for _side_call to shut it down) and the listener closed (sbxd
    connects once: nobody else is let queue up on it); None once done is
    set."""
    while not done.is_set():
        try:
            c, _ = ls.accept()
        except socket.timeout:
            continue
        try:
            creds = c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            c.settimeout(timeout)
            ok = (int.from_bytes(creds[4:8], "little") == sbxd_uid and not done.is_set()
                  and c.recv(256) == _HELLO + bytes([len(nonce)]) + nonce)
        except BaseException:
            c.close()
            raise
        if ok:
            conns.append(c)
            ls.close()
            # Recorded before done is looked at, and _side_call sets done
            # before it looks at conns: one of the two shuts it down.
            if not done.is_set():
                return c
        c.close()
    return None


def _copy_sha256(fd, size):
    """The sha256 of our own copy, read back from it (the page cache)."""
    h = hashlib.sha256()
    off = 0
    while off < size:
        b = os.pread(fd, min(CHUNK, size - off), off)
        if not b:
            raise errors.Internal("reading the copy back: it shrank")
        h.update(b)
        off += len(b)
    return h.hexdigest()


def export_files(client, run_id, top, items, live):
    """Copies up to 256 artifacts on sbxd's own host over a unix socket of
    ours (ExportArtifacts), as libsbxclient's sbx_export_at does: sbxd
    connects (its listener's uid checked), says the call's nonce, and sends
    per file a record (index, mode, size) and exactly that many bytes, 256
    KiB a message; our hang-up is the acknowledgement. Each file is written
    into a dest.Staged file beneath top (no link followed), its digest
    sbxd's final one when sbxd vouches that nothing of the run could write
    it while it was read, else our copy's, read back: either way of the
    bytes we hold; it must be what the listing said (DataLoss, Aborted when
    live) before it is renamed into place. items: [(path in /out, rel
    beneath top, mode, listed sha256 or None)]. Returns [Fetched]."""
    from .proto import sandbox_pb2 as pb

    if not items:
        return []
    if len(items) > EXPORT_MAX_PATHS:
        raise errors.InvalidArgument("export: %d paths, at most %d per call"
                                     % (len(items), EXPORT_MAX_PATHS))
    sbxd_uid = os.stat(client.endpoint[len("ipc://"):]).st_uid
    ls, name, nonce = _side_listener("sbx-export-")
    done = threading.Event()  # the call returned (or was interrupted): take no more
    staged = []  # (Staged, size), in order: every one is discarded at the end
    whole = []  # how many files arrived whole (a file cut short is not counted)
    conn = []  # sbxd's connection, once accepted: shut down to stop the thread
    ours = []  # a reason of ours to stop: it says more than sbxd's ABORTED

    def take(c, buf):
        view = memoryview(buf)
        for i, (_, rel, _, _) in enumerate(items):
            k = c.recv_into(buf, _EXPORT_RECORD.size + 1)
            if k == 0 or done.is_set():
                return  # sbxd's answer says why; or the caller is gone
            magic, index, _, size = (_EXPORT_RECORD.unpack(view[:k])
                                     if k == _EXPORT_RECORD.size else (b"", -1, 0, 0))
            if magic != _EXPORT_MAGIC or index != i:
                raise errors.Aborted("export: record %d is not the one this call asked for" % i)
            try:
                f = dest.Staged(top, rel)
            except OSError as e:
                raise errors.FailedPrecondition("%s: %s" % (rel, e.strerror)) from None
            staged.append((f, size))
            got = 0
            while got < size:
                k = c.recv_into(buf)
                if k == 0:
                    return
                if k > size - got or k > EXPORT_CHUNK:
                    raise errors.Aborted("%s: sbxd sent more than the file's %d bytes"
                                         % (rel, size))
                try:
                    w = 0
                    while w < k:
                        w += os.pwrite(f.fd, view[w:k], got + w)
                except OSError as e:
                    raise errors.Internal("%s: writing: %s" % (rel, e.strerror)) from None
                got += k
            whole.append(i)

    def receive():
        try:
            c = _side_accept(ls, sbxd_uid, nonce, done, client.timeout + 120, conn)
            if c is None:
                return
            with c:
                try:
                    take(c, bytearray(EXPORT_CHUNK + 1))
                finally:
                    # The hang-up, after the last byte is written or on a
                    # failure (then ours to report); a shutdown, not only a
                    # close: a process forked meanwhile holds a copy.
                    c.shutdown(socket.SHUT_RDWR)
        except errors.SbxError as e:
            ours.append(e)
        except OSError:
            pass  # the socket: sbxd's answer says why it stopped

    t = threading.Thread(target=receive, daemon=True)
    req = pb.ExportArtifactsRequest(run_id=run_id, paths=[i[0] for i in items],
                                    socket_name=name, nonce=nonce)
    try:
        # The thread is joined before the files are looked at or removed,
        # so no temporary file outlives this call.
        r, failed = _side_call(client, "ExportArtifacts", req, pb.ExportArtifactsResponse, t,
                               done, conn, ls)
        if ours:
            raise _unreached_only_if(ours[0], False)
        if failed is not None:
            raise _unreached_only_if(failed, not conn)
        if len(whole) != len(items):
            raise errors.Internal("export: sbxd answered OK after %d of %d files"
                                  % (len(whole), len(items)))
        out = []
        for i, ((path, rel, mode, expected), (f, size)) in enumerate(zip(items, staged)):
            vouched = r.sha256[i] if len(r.sha256) == len(items) else ""
            got = vouched if len(vouched) == 64 else _copy_sha256(f.fd, size)
            check_digest(rel, got, got, expected, live)
            f.commit(mode)
            out.append(Fetched(path, size, got, live))
        return out
    finally:
        for f, _ in staged:
            f.discard()
