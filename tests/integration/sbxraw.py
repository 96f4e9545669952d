# SPDX-License-Identifier: Apache-2.0
"""Raw connections to sbxd for the listener tests: nng's SP framing by hand,
from a chosen loopback address, closed at the worst moments. Loopback and
unix sockets only."""
import socket
import ssl
import struct

REQ0_HEADER = b"\x00SP\x00" + struct.pack(">H", 0x30) + b"\x00\x00"
ATTACKER_IP = "127.0.0.2"  # another peer than the tests' clients (127.0.0.1)


def connect(target, source=ATTACKER_IP, timeout=2):
    """target: ("unix", path) or ("inet", (host, port))."""
    family, addr = target
    s = socket.socket(socket.AF_UNIX if family == "unix" else socket.AF_INET,
                      socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        if family == "inet" and source:
            s.bind((source, 0))
        s.connect(addr)
    except OSError:
        s.close()
        raise
    return s


def rst_close(s):
    """Close with an RST instead of a FIN (SO_LINGER 0)."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def fin_then_rst(s, first=b""):
    """Send first, FIN, then RST: the RST lands on sbxd's socket in
    CLOSE_WAIT, and Linux reports EPIPE to its next write (nng #1518 on
    tcp and tls)."""
    if first:
        s.send(first)
    s.shutdown(socket.SHUT_WR)
    rst_close(s)


def client_hello():
    """The bytes of one real TLS 1.2 ClientHello."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
    c = ctx.wrap_bio(i, o, server_hostname="localhost")
    try:
        c.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return o.read()


def sp_handshake(s):
    """Our REQ0 header, then sbxd's REP0 header. b"" if sbxd closed at once
    (a refused connection)."""
    try:
        s.sendall(REQ0_HEADER)
        got = b""
        while len(got) < 8:
            part = s.recv(8 - len(got))
            if not part:
                return got
            got += part
        return got
    except (ConnectionResetError, BrokenPipeError):
        return b""


def refused(s, within=2.0):
    """True if sbxd closes s without sending its SP header."""
    s.settimeout(within)
    try:
        return sp_handshake(s) == b""
    except socket.timeout:
        return False


def ipc_frame(body, tag=0x80000000):
    """One REQ message on ipc: type 1, 64-bit length, request id, body."""
    return b"\x01" + struct.pack(">Q", 4 + len(body)) + struct.pack(">I", tag) + body


def tcp_frame(body, tag=0x80000000):
    return struct.pack(">Q", 4 + len(body)) + struct.pack(">I", tag) + body
