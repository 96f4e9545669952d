# SPDX-License-Identifier: Apache-2.0
"""Egress deny said loudly (issue 20, item 5), through the real sbxd and
sbx-helper: a DNS lookup from a deny run fails at once (sbxd refuses it on
the exec's 127.0.0.1:53, one query per try: no resolver retry), a connect
to a literal non-loopback address (TCP, UDP, IPv4, IPv6) fails at once
with ECONNREFUSED and is seen by sbxd's connect watch, the exec's stderr
gets one notice line naming the policy, the name or address and the
image-build advice, and ExecStatus (Wait, Status) and the teardown
manifest and audit log count the attempts and name the first 16 distinct
names; the exec's own loopback traffic is not counted. A flood of queries
or SYNs costs sbxd bounded memory and another caller's calls are answered
meanwhile; hostile queries (long, binary, NUL, compression pointers and
their loops, garbage) are answered or dropped, never recorded as garbage."""
import json
import os
import signal
import time
import unittest

import sbxdfix
from sbxdfix import POLICY, ServerTestCase
from sbxrpc import sandbox_pb2 as pb

NOTICE = "sbx: network egress is denied by this run's policy (egress: deny)"

# One AF_INET lookup per name: exactly one A query each (one try).
LOOKUP = r"""
import socket, sys
for name in sys.argv[1:]:
    try:
        socket.getaddrinfo(name, 443, socket.AF_INET, socket.SOCK_STREAM)
        print(name, "RESOLVED")
    except socket.gaierror as e:
        print(name, "gaierror", e.errno)
"""

CONNECT = r"""
import errno, socket
try:
    socket.create_connection(("93.184.216.34", 443), timeout=20)
    print("CONNECTED")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
"""

# The exec's own servers, a datagram to a closed loopback port, and "which
# address am I" (a UDP connect that sends nothing): no attempt. Every
# address is the exec's own, so its listener on 0.0.0.0 answers 192.0.2.1.
LOOPBACK = r"""
import socket, time
me = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); me.connect(("8.8.8.8", 53))
print("me", me.getsockname()[0])
own = socket.socket(); own.bind(("0.0.0.0", 8080)); own.listen(1)
c = socket.create_connection(("192.0.2.1", 8080), timeout=5); print("own", own.accept()[1][0])
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
c = socket.create_connection(srv.getsockname()); a, _ = srv.accept()
c.sendall(b"x" * 100000); c.close()
got = 0
while True:
    d = a.recv(65536)
    if not d: break
    got += len(d)
u6 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u6.sendto(b"x", ("127.0.0.2", 9))
time.sleep(0.2)  # its port unreachable reaches the watch before the exec ends
print("loopback", got)
"""

# Literal addresses, one attempt each, then LOOPBACK: "ADDRESS ERRNO" lines.
CONNECTS = r"""
import errno, socket, time
def name(e): return errno.errorcode.get(e.errno, e.errno)
def tcp(fam, addr):
    # No timeout: refused (ECONNREFUSED) is the answer, not a wait.
    try:
        socket.socket(fam).connect(addr); r = "CONNECTED"
    except OSError as e:
        r = name(e)
    print(addr[0], r)
tcp(socket.AF_INET, ("192.0.2.1", 443))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(10)
u.connect(("198.51.100.7", 123)); u.send(b"ntp?")
try:
    u.recv(64); print("198.51.100.7 ANSWERED")
except OSError as e:
    print("198.51.100.7", name(e))
if socket.has_ipv6:
    tcp(socket.AF_INET6, ("2001:db8::1", 80))
    u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    u.settimeout(10)
    u.connect(("2001:db8::7", 53)); u.send(b"dns?")
    try:
        u.recv(64); print("2001:db8::7 ANSWERED")
    except OSError as e:
        print("2001:db8::7", name(e))
ul = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 136)  # UDP-Lite
ul.sendto(b"lite", ("203.0.113.5", 7))
""" + LOOPBACK


SYN_FLOOD = r"""
import socket, time
sent = 0
end = time.time() + 4
while time.time() < end:
    s = socket.socket(); s.setblocking(False)
    try:
        s.connect(("203.0.113.%d" % (sent % 250 + 1), 443))
    except OSError:
        pass
    s.close(); sent += 1
print("sent", sent)
"""

# Raw queries to 127.0.0.1:53: (label, datagram) each, and what came back:
# "label rcode=N qd=N len=N" or "label none".
RAW = r"""
import socket, struct, sys
def q(name_wire, qd=1, flags=0x0100, extra=b"\x00\x01\x00\x01"):
    return struct.pack(">HHHHHH", 0x1234, flags, qd, 0, 0, 0) + name_wire + extra
def label(s):
    return bytes([len(s)]) + s
cases = [
    ("ok", q(label(b"ok") + label(b"test") + b"\x00")),
    ("binary", q(label(b"a\x00b\xff.") + label(b"test") + b"\x00")),
    ("long", q(b"".join(label(b"x" * 63) for _ in range(5)) + b"\x00")),
    ("pointer_loop", q(b"\xc0\x0c")),
    ("pointer_fwd", q(label(b"a") + b"\xc0\x12" + b"\x00")),
    ("no_end", q(label(b"abc"), extra=b"")),
    ("two_qd", q(label(b"a") + b"\x00", qd=2)),
    ("answer", q(label(b"a") + b"\x00", flags=0x8100)),
    ("short", b"\x00\x01\x02"),
    ("empty", b""),
    # A name whose presentation form is longer than what is recorded.
    ("cut", q(label(b"\xff" * 63) + label(b"\xffzz") + b"\x00")),
]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
for name, d in cases:
    s.sendto(d, ("127.0.0.1", 53))
    try:
        a, _ = s.recvfrom(4096)
        print(name, "rcode=%d" % (a[3] & 15), "qd=%d" % a[5], "len=%d" % len(a),
              "id=%d" % struct.unpack(">H", a[:2])[0])
    except socket.timeout:
        print(name, "none")
"""

FLOOD = r"""
import socket, struct, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
q = struct.pack(">HHHHHH", 1, 0x0100, 1, 0, 0, 0) + b"\x05flood\x04test\x00\x00\x01\x00\x01"
sent = 0
end = time.time() + 4
while time.time() < end:
    try:
        s.sendto(q, ("127.0.0.1", 53)); sent += 1
    except BlockingIOError:
        pass
    try:
        while True: s.recv(512)
    except BlockingIOError:
        pass
print("sent", sent)
"""


class DenyCalls:
    """The calls of this file's tests, on the class's sbxd."""

    def ok(self, name, req, resp_type, conn=None):
        code, msg, resp = (conn or self.c).call(name, req, resp_type)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def setUp(self):
        self.c = self.srv.conn(timeout_ms=90000)
        self.addCleanup(self.c.close)

    def create(self, policy=None):
        p = json.loads(json.dumps(policy or POLICY))
        return self.ok("CreateRun", pb.CreateRunRequest(policy_json=json.dumps(p)),
                       pb.CreateRunResponse).run_id

    def start(self, run, argv):
        return self.ok("Exec", pb.ExecRequest(run_id=run, argv=argv), pb.ExecResponse).exec_id

    def wait(self, run, ex):
        return self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=60000),
                       pb.WaitResponse).status

    def output(self, run, ex, stream):
        data, off = b"", 0
        while True:
            r = self.ok("ReadOutput", pb.ReadOutputRequest(
                run_id=run, exec_id=ex, stream=stream, offset=off, timeout_ms=5000),
                pb.ReadOutputResponse)
            data += r.data
            off = r.next_offset
            if r.eof:
                return data.decode(errors="replace")

    def run_argv(self, run, argv):
        ex = self.start(run, argv)
        st = self.wait(run, ex)
        return st, self.output(run, ex, pb.STDOUT), self.output(run, ex, pb.STDERR)

    def teardown(self, run):
        return self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse).manifest

    def exec_events(self, run):
        return [e for e in self.srv.audit_events()
                if e.get("event") == "exec_ended" and e.get("run_id") == run]

    def ended_event(self, run, ex):
        """The exec's exec_ended lines, once there is one: sbxd writes a
        run's audit lines after it lets the run's lock go, so Wait may
        answer a moment before the line is in the log (10 s at most)."""
        deadline = time.time() + 10
        while True:
            ended = [e for e in self.exec_events(run) if e.get("exec_id") == ex]
            if ended or time.time() > deadline:
                return ended
            time.sleep(0.05)


class EgressDeny(DenyCalls, ServerTestCase):
    def test_lookup_and_connect_fail_at_once_and_say_why(self):
        run = self.create()
        st, out, err = self.run_argv(run, ["python3", "-c", LOOKUP, "pypi.org",
                                           "files.pythonhosted.org"])
        # Refused at once by sbxd: EAI_AGAIN (-3), not a timeout's wait.
        self.assertEqual(out, "pypi.org gaierror -3\nfiles.pythonhosted.org gaierror -3\n", err)
        # One query per lookup (attempts:1, AF_INET: one A query): no retry.
        self.assertEqual(st.network_denied_attempts, 2, st)
        self.assertEqual(list(st.network_denied_names), ["pypi.org", "files.pythonhosted.org"])
        lines = [line for line in err.splitlines() if NOTICE in line]
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith(NOTICE), lines)  # on a line of its own
        self.assertIn("tried to reach pypi.org.", lines[0])
        self.assertIn("Install what it needs into the image", lines[0])
        self.assertIn("docs/operator/images.md", lines[0])
        # getent (glibc's gethostbyname2 over both families) fails too.
        st2, out, err = self.run_argv(run, ["getent", "hosts", "pypi.org"])
        self.assertEqual((st2.exit_code, out), (2, ""), err)
        self.assertGreaterEqual(st2.network_denied_attempts, 1)
        self.assertEqual(list(st2.network_denied_names), ["pypi.org"])
        self.assertEqual(sum(NOTICE in line for line in err.splitlines()), 1, err)
        # A connect to an address is refused at once, and counted.
        st3, out, err = self.run_argv(run, ["python3", "-c", CONNECT])
        self.assertEqual(out, "ECONNREFUSED\n", err)
        self.assertEqual(st3.network_denied_attempts, 1)
        self.assertEqual(list(st3.network_denied_names), ["93.184.216.34:443"])
        self.assertIn("tried to reach 93.184.216.34:443.", err)
        # curl by name: the lookup fails at once (curl's "Could not resolve").
        st4, out, err = self.run_argv(run, ["curl", "-sS", "-m", "20", "https://pypi.org/simple/"])
        self.assertEqual(st4.exit_code, 6, err)
        self.assertIn(NOTICE, err)
        # Status says the same; the manifest and the audit log keep it.
        s = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        by_id = {e.exec_id: e for e in s.execs}
        self.assertEqual(by_id[st.exec_id].network_denied_attempts, 2)
        m = self.teardown(run)
        # What the run ended as (it was ACTIVE when torn down), not "active".
        self.assertEqual(pb.RunState.Name(m.final_state), "TORN")
        td = [e for e in self.srv.audit_events()
              if e.get("event") == "teardown" and e.get("run_id") == run]
        self.assertEqual(td[0]["final_state"], "torn", td)
        me = {e.exec_id: e for e in m.execs}
        self.assertEqual(me[st.exec_id].network_denied_attempts, 2)
        self.assertEqual(list(me[st.exec_id].network_denied_names),
                         ["pypi.org", "files.pythonhosted.org"])
        ev = {e["exec_id"]: e for e in self.exec_events(run)}
        self.assertEqual(ev[st.exec_id]["network_denied_attempts"], 2)
        self.assertEqual(ev[st.exec_id]["network_denied_names"],
                         ["pypi.org", "files.pythonhosted.org"])
        self.assertEqual(ev[st3.exec_id]["network_denied_names"], ["93.184.216.34:443"])

    def stopped_while_it_connects(self, run, after):
        """An exec that sleeps 1.5 s, connects and exits; sbxd stopped
        `after` seconds after the Exec answered, until it has ended, so that
        the run's monitor finds everything of it in one round."""
        ex = self.start(run, ["python3", "-c", "import time; time.sleep(1.5)\n" + CONNECT])
        time.sleep(after)
        os.kill(self.srv.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(4)  # the connect, its refusal, the exec's end
        finally:
            os.kill(self.srv.proc.pid, signal.SIGCONT)
        st = self.wait(run, ex)
        err = self.output(run, ex, pb.STDERR)
        self.assertEqual(self.output(run, ex, pb.STDOUT), "ECONNREFUSED\n", err)
        return ex, st, err

    def test_the_notice_comes_before_the_end_of_stderr(self):
        """The watch's record and the end of stderr read in one round: the
        monitor read the pipes first, and stream_note read a pipe to its
        end before adding the notice, so the attempt was counted and the
        notice lost (ci30, three tests at a time). Failed 5 runs in 5
        with either of the two put back."""
        run = self.create()
        _, st, err = self.stopped_while_it_connects(run, 0.5)
        self.assertEqual(list(st.network_denied_names), ["93.184.216.34:443"])
        self.assertTrue(err.startswith(NOTICE), err)
        self.assertIn("tried to reach 93.184.216.34:443.", err)
        self.teardown(run)

    def test_an_attempt_read_with_the_exec_end_is_counted(self):
        """Stopped at once, sbxd mostly takes the exec's watch (its
        ExecStarted) in the round that reads its end (ExecEnded): the watch
        was released unread and the attempt lost, from ExecStatus and the
        audit line alike. What the watch holds is now read before the end
        is recorded, past the error its first read returns (ENETDOWN: the
        exec's lo went with its namespace). Where sbxd took the watch
        before it stopped, this is the test above, and the count holds
        there too; with the error not read past, this failed 1 run in 5,
        without the read before the end 5 in 5."""
        run = self.create()
        ex, st, err = self.stopped_while_it_connects(run, 0)
        self.assertTrue(err.startswith(NOTICE), err)
        self.assertEqual(st.network_denied_attempts, 1, st)
        self.assertEqual(list(st.network_denied_names), ["93.184.216.34:443"])
        ended = self.ended_event(run, ex)
        self.assertEqual(len(ended), 1, self.exec_events(run))
        self.assertEqual(ended[0].get("network_denied_attempts"), 1, ended)
        self.teardown(run)

    def test_output_then_a_refused_connect_then_the_end(self):
        """A command that writes to stderr, connects and exits at once:
        the round that woke for its output may read the pipe to its end
        while the refusal reached the watch after that round's poll began,
        and the end was recorded before the watch was read (review 22: the
        notice missing in 2-10 of 32 such execs). A pipe's end is recorded
        only once the exec's watch has been read."""
        run = self.create()
        prog = ("import os, socket, sys\n"
                "os.write(2, b'x' * int(sys.argv[1]) + b'\\n')\n"
                "try:\n    socket.create_connection(('93.184.216.34', 443))\n"
                "except OSError:\n    pass\n"
                "os._exit(0)\n")
        missing = []
        for i, size in enumerate([900000, 2] * 12):
            ex = self.start(run, ["python3", "-c", prog, str(size)])
            st = self.wait(run, ex)
            err = self.output(run, ex, pb.STDERR)
            self.assertEqual(st.network_denied_attempts, 1, st)
            if NOTICE not in err:
                missing.append((i, size))
        self.assertEqual(missing, [], "execs (index, stderr bytes) whose notice was lost")
        self.teardown(run)

    def test_own_loopback_refusals_leave_the_budget_to_attempts(self):
        """400 datagrams to a closed port of the exec's own loopback, then
        a connect to an address, then the end: the port unreachables of
        loopback passed the watch's kernel filter (sbxd dropped them), took
        the exec's 128 tokens and filled the watch's 64 KiB queue, so the
        attempt behind them went uncounted. The filter now drops them."""
        run = self.create()
        prog = ("import os, socket\n"
                "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "for _ in range(400):\n    u.sendto(b'x', ('127.0.0.2', 9))\n"
                "try:\n    socket.create_connection(('93.184.216.34', 443))\n"
                "except OSError as e:\n    os.write(1, b'%d\\n' % e.errno)\n"
                "os._exit(0)\n")
        for _ in range(3):
            ex = self.start(run, ["python3", "-c", prog])
            st = self.wait(run, ex)
            self.assertEqual(self.output(run, ex, pb.STDOUT), "111\n")  # ECONNREFUSED
            self.assertEqual(list(st.network_denied_names), ["93.184.216.34:443"], st)
            self.assertEqual(st.network_denied_attempts, 1, st)
            ended = self.ended_event(run, ex)
            self.assertEqual([e.get("network_denied_attempts") for e in ended], [1], ended)
        self.teardown(run)

    def test_datagrams_with_ip_options_are_counted(self):
        """A datagram sent with 40 bytes of IPv4 options (record route, no
        privilege needed): its port unreachable carries them twice, in
        its own header and the quoted one, 146 bytes to the quoted ports,
        and sbxd read only 128 of them, so the attempt passed the filter
        and was not counted (review 23)."""
        run = self.create()
        prog = ("import os, socket\n"
                "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "u.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, bytes([7, 39, 4]) + bytes(37))\n"
                "u.connect(('203.0.113.5', 443)); u.send(b'x'); u.settimeout(10)\n"
                "try:\n    u.recv(8)\n"
                "except OSError as e:\n    os.write(1, b'%d\\n' % e.errno)\n")
        st, out, err = self.run_argv(run, ["python3", "-c", prog])
        self.assertEqual(out, "111\n", err)  # ECONNREFUSED
        self.assertEqual(list(st.network_denied_names), ["203.0.113.5:443/udp"], err)
        self.assertEqual(st.network_denied_attempts, 1)
        self.assertIn("tried to reach 203.0.113.5:443/udp.", err)
        # Options the exec's kernel takes from the socket and refuses on
        # receipt (record route, one slot, bytes to spare): a parameter
        # problem comes back, EPROTO at once, and was not counted (review
        # 24).
        bad = prog.replace("bytes([7, 39, 4]) + bytes(37)", "bytes([7, 8, 4]) + bytes(5)")
        st, out, err = self.run_argv(run, ["python3", "-c", bad])
        self.assertEqual(out, "71\n", err)  # EPROTO
        self.assertEqual(list(st.network_denied_names), ["203.0.113.5:443/udp"], err)
        self.assertEqual(st.network_denied_attempts, 1)
        self.assertIn("tried to reach 203.0.113.5:443/udp.", err)
        self.teardown(run)

    def test_connects_to_addresses_counted_loopback_not(self):
        run = self.create()
        st, out, err = self.run_argv(run, ["python3", "-c", CONNECTS])
        lines = out.splitlines()
        self.assertEqual(lines[0], "192.0.2.1 ECONNREFUSED", out + err)
        # The datagram was seen; its sender learns at once (port unreachable).
        self.assertEqual(lines[1], "198.51.100.7 ECONNREFUSED", out + err)
        want = ["192.0.2.1:443", "198.51.100.7:123/udp"]
        if os.path.exists("/proc/net/if_inet6"):  # the host has IPv6
            self.assertEqual(lines[2], "2001:db8::1 ECONNREFUSED", out + err)
            self.assertEqual(lines[3], "2001:db8::7 ECONNREFUSED", out + err)
            want += ["[2001:db8::1]:80", "[2001:db8::7]:53/udp"]
        want.append("203.0.113.5:7/udplite")
        # The exec's own servers work and are no attempt.
        self.assertEqual(lines[-3:], ["me 8.8.8.8", "own 192.0.2.1", "loopback 100000"],
                         out + err)
        self.assertEqual(list(st.network_denied_names), want, err)
        self.assertEqual(st.network_denied_attempts, len(want), st)
        lines = [line for line in err.splitlines() if NOTICE in line]
        self.assertEqual(len(lines), 1, err)
        self.assertIn("tried to reach 192.0.2.1:443.", lines[0])
        # An exec that only talks to itself is not an attempt at all.
        st2, out, err = self.run_argv(run, ["python3", "-c", LOOPBACK])
        self.assertEqual(out, "me 8.8.8.8\nown 192.0.2.1\nloopback 100000\n", err)
        self.assertEqual(st2.network_denied_attempts, 0, err)
        self.assertNotIn(NOTICE, err)
        self.teardown(run)

    def test_syn_flood_is_bounded(self):
        run = self.create()
        before = self.srv.rss_kb()
        ex = self.start(run, ["python3", "-c", SYN_FLOOD])
        with self.srv.conn(tls=True) as bob:
            for _ in range(5):
                code, msg, r = bob.call("ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse,
                                        token=self.srv.tokens["bob"])
                self.assertEqual(code, "OK", msg)
        st = self.wait(run, ex)
        sent = int(self.output(run, ex, pb.STDOUT).split()[1])
        self.assertGreater(sent, 1000)
        self.assertGreater(st.network_denied_attempts, 0)
        self.assertLess(st.network_denied_attempts, min(sent, 128 * 7))
        self.assertEqual(len(st.network_denied_names), 16)
        self.assertLess(self.srv.rss_kb() - before, 16 * 1024)
        self.teardown(run)

    def test_names_capped_at_16_distinct(self):
        run = self.create()
        names = ["n%02d.test" % i for i in range(20)]
        st, out, err = self.run_argv(run, ["python3", "-c", LOOKUP] + names + ["n00.test"])
        self.assertEqual(out.count("gaierror -3"), 21, err)
        self.assertEqual(st.network_denied_attempts, 21)
        self.assertEqual(list(st.network_denied_names), names[:16])
        self.assertEqual(sum(NOTICE in line for line in err.splitlines()), 1, err)
        self.teardown(run)

    def test_hostile_queries(self):
        run = self.create()
        st, out, err = self.run_argv(run, ["python3", "-c", RAW])
        got = dict(line.split(" ", 1) for line in out.splitlines())
        self.assertEqual(got["ok"], "rcode=5 qd=1 len=%d id=4660" % (12 + 9 + 4), out)
        self.assertTrue(got["binary"].startswith("rcode=5 qd=1"), out)
        # 5 labels of 63: 320 bytes on the wire, over 255: malformed.
        for bad in ("long", "pointer_loop", "pointer_fwd", "no_end", "two_qd"):
            self.assertEqual(got[bad], "rcode=1 qd=0 len=12 id=4660", (bad, out))
        for dropped in ("answer", "short", "empty"):
            self.assertEqual(got[dropped], "none", (dropped, out))
        self.assertEqual(got["cut"], "rcode=5 qd=1 len=%d id=4660" % (12 + 69 + 4), out)
        self.assertEqual(st.network_denied_attempts, 11, st)
        # A name cut to fit is a prefix of what was asked: no byte of it is
        # skipped and a later one kept (the record never shows "...zz" for
        # a name that was "...\\255zz").
        self.assertEqual(list(st.network_denied_names),
                         ["ok.test", "a\\000b\\255\\..test", "\\255" * 63 + "."])
        self.teardown(run)

    def test_flood_is_bounded_and_others_are_answered(self):
        run = self.create()
        other = self.create()
        before = self.srv.rss_kb()
        ex = self.start(run, ["python3", "-c", FLOOD])
        # Another caller's calls are answered while the flood goes on.
        answered = []
        with self.srv.conn(tls=True) as bob:
            for _ in range(5):
                code, msg, r = bob.call("ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse,
                                        token=self.srv.tokens["bob"])
                answered.append(code)
        st2, out, err = self.run_argv(other, ["echo", "served"])
        self.assertEqual(out, "served\n", err)
        st = self.wait(run, ex)
        sent = int(self.output(run, ex, pb.STDOUT).split()[1])
        self.assertEqual(answered, ["OK"] * 5)
        # Past its budget an exec's queries wait in its own socket: counted
        # up to the budget (128 a second, and a burst), never all of a flood.
        self.assertGreater(sent, 1000)
        self.assertGreater(st.network_denied_attempts, 0)
        self.assertLess(st.network_denied_attempts, min(sent, 128 * 7))
        self.assertEqual(list(st.network_denied_names), ["flood.test"])
        self.assertLess(self.srv.rss_kb() - before, 16 * 1024)
        self.teardown(run)
        self.teardown(other)



class NoWatch(DenyCalls, ServerTestCase):
    """A kernel that refuses packet sockets: sbxd (and every helper below
    it) under a seccomp filter that fails socket(AF_PACKET) (sbx-no-packet;
    no_new_privs, so host_uids shared: no setuid mapper). No exec has a
    connect watch, fresh or prepared (pid 1 makes a prepared one's at its
    claim): sbxd says so once, lookups are still refused and recorded,
    connects refused and not recorded, and sbxd polls each exec's resolver
    alone (its poll set once overflowed by an entry per missing watch)."""

    @classmethod
    def setUpClass(cls):
        wrapper = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                               "sbxd-nopacket-%d.sh" % os.getpid())
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec %s %s \"$@\"\n" % (os.environ["SBX_NO_PACKET"],
                                                         sbxdfix.SBXD))
        os.chmod(wrapper, 0o700)
        real, sbxdfix.SBXD = sbxdfix.SBXD, wrapper
        try:
            cls.srv = sbxdfix.Server(host_uids="shared")
        finally:
            sbxdfix.SBXD = real
            os.unlink(wrapper)

    def test_no_watch_is_said_and_lookups_still_counted(self):
        run = self.create()
        try:
            for i in range(6):  # back to back: prepared execs after the first
                st, out, err = self.run_argv(run, ["python3", "-c", LOOKUP + CONNECT,
                                                   "n%d.example" % i])
                self.assertEqual((st.reason, st.exit_code), (pb.EXITED, 0), (i, st, err))
                self.assertEqual(out.split(), ["n%d.example" % i, "gaierror", "-3",
                                               "ECONNREFUSED"], (i, out, err))
                self.assertEqual(list(st.network_denied_names), ["n%d.example" % i], (i, st))
            st = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
            said = [a for a in st.alerts if "has no connect watch" in a]
            self.assertEqual(len(said), 1, list(st.alerts))
        finally:
            self.teardown(run)
        self.assertIsNone(self.srv.proc.poll(), "sbxd ended")

if __name__ == "__main__":
    unittest.main()
