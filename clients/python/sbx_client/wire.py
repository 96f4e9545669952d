# SPDX-License-Identifier: Apache-2.0
"""The nng SP REQ/REP wire, in Python: what libnng's req0 does on ipc://,
tcp:// and tls+tcp://, so that no C library is needed (proto/README.md
describes the bytes).

A connection starts with both sides sending an 8-byte SP header (b"\\0SP\\0",
the sender's 16-bit protocol id, two zero bytes: REQ0 is 0x30, REP0 0x31).
Then each message is a 64-bit big-endian length and that many bytes (on ipc
preceded by one byte, 1). A request's bytes are a 32-bit request id with the
high bit set, then the body; the reply starts with the same id.

REQ semantics as nng's: a request that got no reply within resend_interval is
sent again (same id), and a request whose connection broke is sent again on
a new one; replies with another id (a late answer to an earlier try) are
skipped. Calls may run from several threads: each takes its own connection
from a small pool, so a long poll never holds up another call."""
import dataclasses
import os
import secrets
import socket
import ssl
import struct
import threading
import time

from . import errors

REQ0 = 0x30
REP0 = 0x31
SP_HEADER_REQ = b"\x00SP\x00" + struct.pack(">H", REQ0) + b"\x00\x00"
SP_HEADER_REP = b"\x00SP\x00" + struct.pack(">H", REP0) + b"\x00\x00"
IPC_MSG = 1  # the ipc transport's message type byte
DEFAULT_ENDPOINT = "ipc:///run/sbx/sbxd.sock"
DEFAULT_MAX_MESSAGE = 8 << 20  # as libsbxclient: what a server may make us allocate
DEFAULT_RESEND_SECONDS = 60.0  # nng's NNG_OPT_REQ_RESENDTIME


@dataclasses.dataclass
class TLS:
    """Files for tls+tcp://: the CA that signed the server's certificate, and
    the client certificate and its key (key may be None when cert holds both).
    server_name: the name the server's certificate must carry (default: the
    endpoint's host)."""
    ca: str
    cert: str = None
    key: str = None
    server_name: str = None

    @classmethod
    def of(cls, value):
        """A TLS from a TLS, a dict (ca, cert, key, server_name) or None."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = set(value) - {"ca", "cert", "key", "server_name"}
            if unknown:
                raise errors.InvalidArgument("tls: unknown keys %s (ca, cert, key, server_name)"
                                             % ", ".join(sorted(unknown)))
            return cls(**value)
        raise errors.InvalidArgument("tls: a sbx_client.TLS or a dict with ca, cert, key")


@dataclasses.dataclass(frozen=True)
class Endpoint:
    url: str
    scheme: str  # "ipc", "tcp" or "tls+tcp"
    path: str = None
    host: str = None
    port: int = None

    @classmethod
    def parse(cls, url):
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in ("ipc", "tcp", "tls+tcp") or not rest:
            raise errors.InvalidArgument(
                "endpoint %s: must be ipc://PATH, tls+tcp://HOST:PORT or tcp://HOST:PORT" % url)
        if scheme == "ipc":
            return cls(url, scheme, path=rest)
        if rest.startswith("["):
            host, _, port = rest[1:].partition("]:")
        else:
            host, _, port = rest.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise errors.InvalidArgument("endpoint %s: needs HOST:PORT" % url)
        return cls(url, scheme, host=host, port=int(port))


class _Closed(Exception):
    """The connection ended (EOF, reset, or a broken frame): dial again."""


class _Resend(Exception):
    """resend_interval passed without a reply."""


class Connection:
    """One SP connection to a REP0 peer."""

    def __init__(self, ep, ssl_ctx, server_name, deadline, max_message):
        self.ep = ep
        self.max_message = max_message
        self.sock = None
        timeout = max(deadline - time.monotonic(), 0.001)
        try:
            if ep.scheme == "ipc":
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(timeout)
                try:
                    s.connect(ep.path)
                except BaseException:
                    s.close()
                    raise
            else:
                s = socket.create_connection((ep.host, ep.port), timeout=timeout)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_ctx is not None:
                try:
                    s = ssl_ctx.wrap_socket(s, server_hostname=server_name)
                except BaseException:
                    s.close()
                    raise
            self.sock = s
            self._send_all(SP_HEADER_REQ, deadline)
            peer = self._recv_exact(8, deadline)
        except ssl.SSLCertVerificationError as e:
            self.close()
            raise errors.Unavailable(
                "TLS handshake with %s failed (check the CA, the client certificate and the "
                "server name): %s" % (ep.url, e.verify_message or e)) from None
        except ssl.SSLError as e:
            self.close()
            raise errors.Unavailable(
                "TLS handshake with %s failed (check the CA, the client certificate and the "
                "server name): %s" % (ep.url, e.reason or e)) from None
        except (socket.timeout, TimeoutError):
            self.close()
            raise errors.DeadlineExceeded("cannot connect to %s in time" % ep.url) from None
        except (OSError, _Closed) as e:
            self.close()
            why = e.strerror if isinstance(e, OSError) and e.strerror else \
                "closed during the SP handshake"
            raise errors.Unavailable("cannot connect to %s: %s" % (ep.url, why)) from None
        if peer != SP_HEADER_REP:
            self.close()
            raise errors.Unavailable("%s is not an nng REP0 peer (SP header %r)"
                                     % (ep.url, peer))

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def _set_timeout(self, until):
        left = until - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        self.sock.settimeout(left)

    def _send_all(self, data, deadline):
        self._set_timeout(deadline)
        self.sock.sendall(data)

    def _recv_exact(self, n, until):
        parts, got = [], 0
        while got < n:
            self._set_timeout(until)
            part = self.sock.recv(min(n - got, 1 << 20))
            if not part:
                raise _Closed("EOF")
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    def send(self, payload, deadline):
        if self.ep.scheme == "ipc":
            head = struct.pack(">BQ", IPC_MSG, len(payload))
        else:
            head = struct.pack(">Q", len(payload))
        # One write for small messages, so a request is never split in two
        # segments by us (sbxd times a message from its first byte).
        if len(payload) < 65536:
            self._send_all(head + payload, deadline)
        else:
            self._send_all(head, deadline)
            self._send_all(payload, deadline)

    def recv(self, deadline, resend_at):
        """Returns (request id, body) of the next message; _Resend when
        resend_at passes first, socket.timeout at deadline."""
        until = min(deadline, resend_at)
        try:
            first = self._recv_exact(1, until)  # only this wait may end in a resend
        except socket.timeout:
            if time.monotonic() < deadline:
                raise _Resend() from None
            raise
        if self.ep.scheme == "ipc":
            if first[0] != IPC_MSG:
                raise _Closed("ipc message type %d" % first[0])
            first = b""
        (length,) = struct.unpack(">Q", first + self._recv_exact(8 - len(first), deadline))
        if length > self.max_message + 64:
            raise errors.ResourceExhausted(
                "%s sent a message of %d bytes, above the client's max_message_bytes %d"
                % (self.ep.url, length, self.max_message))
        payload = self._recv_exact(length, deadline)
        # The reply's header is the request's backtrace: 32-bit words up to
        # and including the one with the high bit set (the request id).
        for off in range(0, min(len(payload), 4 * 32) - 3, 4):
            (word,) = struct.unpack_from(">I", payload, off)
            if word & 0x80000000:
                return word, payload[off + 4:]
        raise _Closed("a reply without a request id")


class Transport:
    """REQ over a pool of connections to one endpoint."""

    def __init__(self, endpoint, tls=None, max_message=DEFAULT_MAX_MESSAGE,
                 resend_interval=DEFAULT_RESEND_SECONDS, pool_size=4, redials=3):
        self.ep = Endpoint.parse(endpoint)
        self.max_message = max_message
        self.resend_interval = resend_interval
        self.pool_size = pool_size
        self.redials = redials  # reconnects per call before it is UNAVAILABLE
        self._lock = threading.Lock()
        self._idle = []
        self._closed = False
        self._next_id = secrets.randbits(31)
        # What REQ did so far (for a caller's diagnostics): requests sent
        # again after resend_interval, and after their connection broke.
        self.resends = 0
        self.reconnects = 0
        self.ssl_ctx, self.server_name = None, None
        tls = TLS.of(tls)
        if self.ep.scheme == "tls+tcp":
            self.ssl_ctx, self.server_name = self._ssl_context(tls)
        elif tls is not None:
            raise errors.InvalidArgument("tls: only for a tls+tcp:// endpoint, not %s" % endpoint)

    def _ssl_context(self, tls):
        if tls is None or not tls.ca:
            raise errors.InvalidArgument(
                "%s: a tls+tcp endpoint needs the CA that signed the server's certificate "
                "(tls=sbx_client.TLS(ca=..., cert=..., key=...))" % self.ep.url)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        # sbxd's TLS is nng 1.5.2 with mbedTLS 2.28: TLS 1.2.
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_verify_locations(cafile=tls.ca)
            if tls.cert:
                ctx.load_cert_chain(tls.cert, tls.key)
            elif tls.key:
                raise errors.InvalidArgument("tls: a key needs its certificate")
        except (OSError, ssl.SSLError) as e:
            raise errors.InvalidArgument("tls: %s" % e) from None
        return ctx, tls.server_name or self.ep.host

    def close(self):
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def _request_id(self):
        with self._lock:
            self._next_id = (self._next_id + 1) & 0x7FFFFFFF
            return self._next_id | 0x80000000

    def _take(self, deadline):
        with self._lock:
            if self._closed:
                raise errors.Cancelled("the client is closed")
            if self._idle:
                return self._idle.pop()
        return Connection(self.ep, self.ssl_ctx, self.server_name, deadline, self.max_message)

    def _give(self, conn):
        with self._lock:
            if not self._closed and len(self._idle) < self.pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def _count(self, what):
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    def exchange(self, data, timeout):
        """Sends one request (bytes of sbx.v1.Request) and returns the reply's
        bytes, resending as REQ does, within timeout seconds."""
        deadline = time.monotonic() + timeout
        rid = self._request_id()
        payload = struct.pack(">I", rid) + data
        conn = self._take(deadline)
        lost = 0
        try:
            while True:
                try:
                    conn.send(payload, deadline)
                    resend_at = time.monotonic() + self.resend_interval
                    while True:
                        got, body = conn.recv(deadline, resend_at)
                        if got == rid:
                            self._give(conn)
                            conn = None
                            return body
                        # A late reply to an earlier request: not ours.
                except _Resend:
                    self._count("resends")
                    continue
                except (socket.timeout, TimeoutError):
                    raise errors.DeadlineExceeded("no answer from %s in time" % self.ep.url) \
                        from None
                except (OSError, _Closed) as e:
                    conn.close()
                    conn = None
                    lost += 1
                    if lost > self.redials:
                        raise errors.Unavailable("connection to %s lost (%s)" % (self.ep.url, e)) \
                            from None
                    # Dial again and resend: the same id, the same request_id.
                    self._count("reconnects")
                    conn = self._take(deadline)
        finally:
            if conn is not None:
                conn.close()


def new_request_id():
    """A fresh Request.request_id (32 hex digits)."""
    return os.urandom(16).hex()
