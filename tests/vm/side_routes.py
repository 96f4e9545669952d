# SPDX-License-Identifier: Apache-2.0
"""Every route a caller has to sbxd's export socket (shut for reading, then
connected; runs_side.c), on the running kernel: the accepted socket's
sendmsg with bytes, nothing, SCM_RIGHTS, SCM_CREDENTIALS (SO_PASSCRED on),
MSG_OOB, an address (sendto), splice and sendfile into it, a forked holder;
and sbxd's socket has no name to be reached by (no autobind). Prints one
JSON line; exit status 0 if nothing was sent and nothing is queued."""
import errno
import fcntl
import json
import os
import secrets
import socket
import struct
import sys
import termios


def main():
    name = b"\0sbx-side-routes-" + secrets.token_hex(8).encode()
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ls.bind(name)
    ls.listen(4)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.shutdown(socket.SHUT_RD)
    s.connect(name)
    c, _ = ls.accept()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    r, w = os.pipe()
    pr, pw = os.pipe()
    os.write(pw, b"k")
    f = os.open("/proc/self/exe", os.O_RDONLY)
    cred = struct.pack("iII", os.getpid(), os.getuid(), os.getgid())
    tries = {
        "bytes": lambda: c.send(b"k"),
        "empty": lambda: c.send(b""),
        "rights": lambda: socket.send_fds(c, [b"k"], [w]),
        "creds": lambda: c.sendmsg([b"k"], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, cred)]),
        "oob": lambda: c.send(b"k", socket.MSG_OOB),
        "sendto": lambda: c.sendto(b"k", name),
        "splice": lambda: os.splice(pr, c.fileno(), 1),
        "sendfile": lambda: os.sendfile(c.fileno(), f, 0, 1),
    }
    got = {"kernel": os.uname().release}
    for what, fn in tries.items():
        try:
            fn()
            got[what] = "sent"
        except OSError as e:
            got[what] = errno.errorcode.get(e.errno, e.errno)
    pid = os.fork()
    if pid == 0:
        try:
            socket.send_fds(c, [b"k"], [w])
            os._exit(0)
        except OSError as e:
            os._exit(e.errno)
    _, st = os.waitpid(pid, 0)
    got["forked"] = errno.errorcode.get(os.waitstatus_to_exitcode(st))
    got["queued"] = struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\0" * 4))[0]
    ino = os.fstat(s.fileno()).st_ino
    with open("/proc/net/unix") as fh:
        row = [l.split() for l in fh if l.split()[6:7] == [str(ino)]]
    got["sbxd_name"] = row[0][7] if row and len(row[0]) > 7 else ""
    bad = [k for k in tries if got[k] not in ("EPIPE", "EOPNOTSUPP", "ENOTSUP")]
    bad += ["forked"] if got["forked"] != "EPIPE" else []
    bad += ["queued"] if got["queued"] else []
    bad += ["sbxd_name"] if got["sbxd_name"] else []
    got["ok"] = not bad
    print(json.dumps(got), flush=True)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
