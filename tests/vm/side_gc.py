# SPDX-License-Identifier: Apache-2.0
"""Whose thread closes another user's descriptors on this kernel: the
af_unix garbage collector's. A local user makes a cycle of in-flight unix
sockets that nothing references any more (a socket whose own receive queue
holds the only reference to it), with a TCP socket of its own in flight
beside it, given SO_LINGER and a peer that never reads. The next collection
frees the cycle and makes the last close of that TCP socket; where the
collector runs synchronously in the task that releases any unix socket
(unix_release_sock -> unix_gc before Linux 6.8's async GC), that close --
lingering -- runs in THAT task, on its return from close().

The victim here does exactly what sbxd's export worker does at the end of a
call: close() a SOCK_SEQPACKET socket it connected (shut for reading first).
Prints one JSON line: how long that close took, per attempt. Exit status 0
if no close took longer than 1 s, 1 otherwise (the victim was held)."""
import json
import os
import secrets
import socket
import struct
import sys
import time

LINGER = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def lingering(seconds):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ls.listen(1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    s.connect(ls.getsockname())
    peer, _ = ls.accept()
    s.setblocking(False)
    try:
        while True:
            s.send(b"x" * 65536)
    except BlockingIOError:
        pass
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, seconds))
    return ls, s, peer


def attacker(ready_w, hup_w):
    """Another user's process: builds the garbage cycle and keeps the TCP
    peer (never reading) alive; says when the cycle was collected (a pipe's
    write end in it is closed: its read end hangs up)."""
    import select
    ls, tcp, peer = lingering(LINGER)
    pr, pw = os.pipe()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    socket.send_fds(a, [b"x"], [b.fileno(), tcp.fileno(), pw])  # queued on b
    # Not the last references (the message holds them): no release, no GC.
    os.close(tcp.detach())
    os.close(b.detach())
    os.close(pw)
    os.write(ready_w, b"r")
    t0 = time.monotonic()
    p = select.poll()
    p.register(pr, select.POLLIN)
    ev = p.poll((LINGER * 2 + 5) * 1000)
    os.write(hup_w, b"%.2f" % (time.monotonic() - t0) if ev else b"never")
    time.sleep(LINGER * 2 + 5)
    os._exit(0)


def victim_close():
    """sbxd's calls: a listener of the 'caller', sbxd's socket shut for
    reading, connected, accepted; then sbxd's close, timed."""
    name = b"\0sbx-side-gc-" + secrets.token_hex(8).encode()
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ls.bind(name)
    ls.listen(1)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.shutdown(socket.SHUT_RD)
    s.connect(name)
    c, _ = ls.accept()
    c.shutdown(socket.SHUT_RDWR)  # the caller hangs up without a release
    return s, (ls, c)


def main():
    times, collected = [], []
    for _ in range(3):
        s, keep = victim_close()
        r, w = os.pipe()
        hr, hw = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.close(hr)
            # Not this process's sockets: the victim's close must be the last.
            for k in (s,) + keep:
                os.close(k.detach())
            attacker(w, hw)
        os.close(w)
        os.close(hw)
        os.read(r, 1)
        os.close(r)
        t0 = time.monotonic()
        s.close()  # sbxd's worker's close at the end of the call
        times.append(round(time.monotonic() - t0, 2))
        collected.append(os.read(hr, 16).decode())
        os.close(hr)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        for k in keep:
            k.close()
    held = max(times) > 1.0
    try:  # names only (addresses need root): which collector this kernel has
        with open("/proc/kallsyms") as f:
            syms = {l.split()[2] for l in f if " unix_gc" in l or " __unix_gc" in l}
    except OSError:
        syms = set()
    print(json.dumps({"kernel": os.uname().release, "linger_s": LINGER,
                      "victim_close_s": times,
                      "collected_after_s": collected, "victim_held": held,
                      "async_gc": "unix_gc_work" in syms or "__unix_gc" in syms}), flush=True)
    return 1 if held else 0


if __name__ == "__main__":
    sys.exit(main())
