# SPDX-License-Identifier: Apache-2.0
"""The kernel's part of the same-host export's one-way channel
(server/runs/runs_side.c), checked on the running kernel with the very
calls sbxd makes: a SOCK_SEQPACKET socket shut down for reading BEFORE it
connects to the caller's abstract listener. Run by the VM stage on Debian
12's 6.1 (check side_oneway) and by sbxd.export_oldkernel on the build
host. Prints one JSON line; exit status 0 only if every property held:

- shutdown(SHUT_RD) of an unconnected unix socket succeeds, and its connect
  to a listener still does;
- the receive shutdown survives the connect: whatever the caller's accepted
  socket sends (bytes; SCM_RIGHTS with a pipe's write end) fails EPIPE in
  the caller's own sendmsg, and nothing is queued on sbxd's socket; the
  descriptor it tried to attach is held by nobody once the caller closes
  its copy (the pipe's read end sees the hang-up at once);
- the caller's close is what sbxd sees as its answer: POLLHUP, with
  SO_ERROR 0 if it took every message and ECONNRESET if it left some, and
  nothing of sbxd's queued (SIOCOUTQ 0) after it; a caller that only shuts
  its socket down (no close) gives POLLHUP with sbxd's messages still
  queued (SIOCOUTQ > 0), which is why sbxd looks at SIOCOUTQ too.

--passrights also sets SO_PASSRIGHTS 0 (Linux 6.16) on sbxd's socket, as
sbxd does where the kernel has it."""
import errno
import fcntl
import json
import os
import secrets
import select
import socket
import struct
import sys
import termios
import time

SO_PASSRIGHTS = 83
SIOCINQ = termios.FIONREAD
SIOCOUTQ = termios.TIOCOUTQ


def queued(s, req):
    return struct.unpack("i", fcntl.ioctl(s.fileno(), req, b"\0" * 4))[0]


def errname(f):
    try:
        f()
        return "sent"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def pair(passrights):
    """sbxd's end (shut for reading, then connected) and the caller's."""
    name = b"\0sbx-side-oneway-" + secrets.token_hex(8).encode()
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ls.bind(name)
    ls.listen(4)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.shutdown(socket.SHUT_RD)
    if passrights:
        s.setsockopt(socket.SOL_SOCKET, SO_PASSRIGHTS, 0)
    s.connect(name)
    c, _ = ls.accept()
    ls.close()
    s.setblocking(False)
    return s, c


def hangup(s, timeout=5.0):
    """sbxd's wait for the caller's close: (revents, SO_ERROR, SIOCOUTQ once
    it is 0 or the timeout passed)."""
    p = select.poll()
    p.register(s, 0)  # POLLHUP and POLLERR are always reported
    got = p.poll(int(timeout * 1000))
    rev = got[0][1] if got else 0
    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    end = time.monotonic() + timeout
    outq = queued(s, SIOCOUTQ)
    while outq and time.monotonic() < end:
        time.sleep(0.01)
        outq = queued(s, SIOCOUTQ)
    return rev, err, outq


def main():
    passrights = "--passrights" in sys.argv[1:]
    got, bad = {"kernel": os.uname().release, "passrights": passrights}, []

    def want(key, value, expect):
        got[key] = value
        if value != expect:
            bad.append("%s: %r, expected %r" % (key, value, expect))

    # What the caller sends after the connect goes nowhere.
    s, c = pair(passrights)
    want("caller_send_bytes", errname(lambda: c.send(b"k")), "EPIPE")
    r, w = os.pipe()
    want("caller_send_rights", errname(lambda: socket.send_fds(c, [b"k"], [w])), "EPIPE")
    os.close(w)
    p = select.poll()
    p.register(r, select.POLLIN)
    ev = p.poll(2000)
    want("pipe_write_end_held_elsewhere", not (ev and ev[0][1] & select.POLLHUP), False)
    os.close(r)
    want("queued_on_sbxds_socket", queued(s, SIOCINQ), 0)
    msg, fds, _, _ = socket.recv_fds(s, 64, 4)
    want("sbxd_receives", [len(msg), len(fds)], [0, 0])
    # sbxd's messages still go, and a caller that takes them and closes
    # is sbxd's clean hang-up.
    s.send(b"hello")
    s.send(b"x" * 4096)
    want("caller_receives", [c.recv(64).decode(), len(c.recv(8192))], ["hello", 4096])
    c.close()
    rev, err, outq = hangup(s)
    want("taken_then_closed", [bool(rev & select.POLLHUP), err, outq], [True, 0, 0])
    s.close()

    # A caller that closes with messages unread: sbxd sees it, and the
    # close frees them.
    s, c = pair(passrights)
    s.send(b"x" * 4096)
    c.close()
    rev, err, outq = hangup(s)
    want("closed_unread", [bool(rev & select.POLLHUP), errno.errorcode.get(err, err), outq],
         [True, "ECONNRESET", 0])
    s.close()

    # A caller that shuts its socket down without closing it: POLLHUP, and
    # sbxd's message still queued on it.
    s, c = pair(passrights)
    s.send(b"x" * 4096)
    c.shutdown(socket.SHUT_RDWR)
    rev, err, outq = hangup(s, timeout=0.5)
    want("shut_down_unread", [bool(rev & select.POLLHUP), err, outq > 0], [True, 0, True])
    want("still_readable_by_the_caller", len(c.recv(8192)), 4096)
    c.close()
    s.close()

    got["ok"] = not bad
    if bad:
        got["failed"] = bad
    print(json.dumps(got), flush=True)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
