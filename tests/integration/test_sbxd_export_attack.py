# SPDX-License-Identifier: Apache-2.0
"""Adversarial review of ExportArtifacts (runs_export.c): a caller that
acknowledges records before it has received them."""
import os
import secrets
import socket
import sys
import time
import unittest

from sbxrpc import sandbox_pb2 as pb
import test_sbxd_export as te

PY = "/usr/bin/python3"


def drain(c):
    """Every record still queued on c: (records, fds)."""
    c.setblocking(False)
    recs = fds = 0
    while True:
        try:
            msg, got, _, _ = socket.recv_fds(c, 256, 8)
        except BlockingIOError:
            return recs, fds
        except ConnectionResetError:
            continue  # sbxd closed with acks unread; what it queued is still there
        if not msg:
            return recs, fds
        recs += 1
        fds += len(got)
        for fd in got:
            os.close(fd)


class PreAck:
    """A caller's export socket that acknowledges n records up front and
    never reads one: sbxd takes each ack as "copied" and sends the next."""

    def __init__(self, n):
        self.name = "sbx-export-preack-" + secrets.token_hex(8)
        self.nonce = secrets.token_bytes(16)
        self.n = n
        self.ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ls.bind(b"\0" + self.name.encode())
        self.ls.listen(4)
        self.conn = None

    def request(self, run, paths):
        return pb.ExportArtifactsRequest(run_id=run, paths=paths, socket_name=self.name,
                                         nonce=self.nonce)

    def accept_and_ack(self):
        self.ls.settimeout(20)
        self.conn, _ = self.ls.accept()
        self.ls.close()
        for _ in range(self.n):
            self.conn.send(b"k")


class PreAckTest(te.ExportTest):
    def preack_call(self, run, n, conn=None):
        import threading
        p = PreAck(n)
        th = threading.Thread(target=p.accept_and_ack, daemon=True)
        th.start()
        with self.srv.conn(timeout_ms=60000) as c:
            code, msg, _ = (conn or c).call("ExportArtifacts", p.request(run, ["a"] * n),
                                            pb.ExportArtifactsResponse)
        th.join(30)
        return code, msg, p

    def test_at_most_one_descriptor_of_sbxd_is_in_flight_even_after_the_call(self):
        # export_wire.h: "at most one descriptor of sbxd is ever in flight
        # ... and none is left queued once the call ends". A caller that
        # sends its acknowledgements first gets sbxd to queue one record
        # per ack, and they stay queued (charged to sbxd's uid, pinning
        # the files after Teardown) for as long as it keeps the socket.
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('a' * 4096)\n")
        code, msg, p = self.preack_call(run, 8)
        self.assertIn(code, ("OK", "DEADLINE_EXCEEDED"), msg)
        self.teardown(run)
        time.sleep(1)
        recs, fds = drain(p.conn)
        p.conn.close()
        sys.stderr.write("after the call and Teardown: %d records, %d fds queued\n"
                         % (recs, fds))
        self.assertLessEqual(fds, 1, "%d descriptors of sbxd left in flight" % fds)

    def test_parked_descriptors_do_not_deny_other_callers(self):
        # Descriptors in flight count against the SENDER's uid (sbxd's):
        # past its RLIMIT_NOFILE every sendmsg of sbxd with SCM_RIGHTS fails
        # (ETOOMANYREFS) -- every other caller's export, and sbxd's
        # descriptors to its helpers. One caller parks ~10 per call, at
        # the cost of one socket of its own each.
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        with open("/proc/%d/limits" % self.srv.proc.pid) as f:
            lim = [l for l in f if l.startswith("Max open files")][0].split()[3]
        sbxd_nofile = int(lim)
        bob = self.srv.tokens["bob"]
        import sbxdfix
        # bob's run, made before: a file in /out he will fetch and export.
        code, msg, resp = self.c.call("CreateRun", pb.CreateRunRequest(
            policy_json=sbxdfix.policy_json()), pb.CreateRunResponse, token=bob)
        self.assertEqual(code, "OK", msg)
        brun = resp.run_id
        code, msg, resp = self.c.call("Exec", pb.ExecRequest(
            run_id=brun, argv=[PY, "-c", "open('/out/b','w').write('b')"]),
            pb.ExecResponse, token=bob)
        self.assertEqual(code, "OK", msg)
        self.c.call("Wait", pb.WaitRequest(run_id=brun, exec_id=resp.exec_id,
                                           timeout_ms=20000), pb.WaitResponse, token=bob)
        run = self.create()
        self.run_py(run, "open('/out/a','w').write('a')\n")
        parked, held, failed = 0, [], None
        t0 = time.monotonic()
        while parked <= sbxd_nofile + 64 and time.monotonic() - t0 < 60:
            code, msg, p = self.preack_call(run, 10)
            if code == "DEADLINE_EXCEEDED":  # refused, but its first record is queued
                held.append(p.conn)
                parked += 1
                continue
            if code != "OK":
                failed = (code, msg)
                p.conn and p.conn.close()
                break
            held.append(p.conn)
            parked += 10
        sys.stderr.write("parked %d descriptors in %d calls (sbxd NOFILE %d): %s\n"
                         % (parked, len(held), sbxd_nofile, failed))
        # Up to the edge, one at a time, from a fresh run (its reader is new).
        run2 = self.create()
        self.run_py(run2, "open('/out/a','w').write('a')\n")
        for _ in range(64):
            if time.monotonic() - t0 > 90:
                break
            code, msg, p = self.preack_call(run2, 1)
            if code != "OK":
                failed = (code, msg)
                p.conn and p.conn.close()
                break
            held.append(p.conn)
            parked += 1
        sys.stderr.write("then %d parked: %s\n" % (parked, failed))
        errors = []
        import sbxrpc

        def bob_call(name, req, resp_type):
            try:
                code, msg, resp = self.c.call(name, req, resp_type, token=bob)
            except sbxrpc.NngError as e:
                code, msg, resp = "NO ANSWER", str(e), None
            if code != "OK":
                errors.append("bob %s: %s %s" % (name, code, msg))
            return code, resp

        try:
            bob_call("FetchArtifact", pb.FetchArtifactRequest(run_id=brun, path="b"),
                     pb.FetchArtifactResponse)
            rv = te.Receiver()
            bob_call("ExportArtifacts", rv.request(brun, ["b"]), pb.ExportArtifactsResponse)
            rv.done()
            code, resp = bob_call("CreateRun", pb.CreateRunRequest(
                policy_json=sbxdfix.policy_json()), pb.CreateRunResponse)
            if code == "OK":
                bob_call("Exec", pb.ExecRequest(run_id=resp.run_id, argv=[PY, "-c", "pass"]),
                         pb.ExecResponse)
                bob_call("Teardown", pb.TeardownRequest(run_id=resp.run_id),
                         pb.TeardownResponse)
            with open(self.srv.path("sbxd.stderr"), errors="replace") as f:
                sys.stderr.write("sbxd's log, last lines:\n" + "".join(f.readlines()[-8:]))
            sys.stderr.write("other caller, with the descriptors parked: %s\n" % errors)
            for c in held:
                c.close()
            held = []
            time.sleep(1)
            n = len(errors)
            # Released: what is lost stays lost (bob's reader is gone).
            bob_call("FetchArtifact", pb.FetchArtifactRequest(run_id=brun, path="b"),
                     pb.FetchArtifactResponse)
            sys.stderr.write("after the parking caller let go: %s\n" % errors[n:])
            self.assertEqual(errors, [])
        finally:
            for c in held:
                c.close()
            self.c.call("Teardown", pb.TeardownRequest(run_id=brun), pb.TeardownResponse,
                        token=bob)
            self.teardown(run)
            self.teardown(run2)


# Another local user (a subordinate uid of ours, via unshare) that may use
# the ipc socket (ipc_mode 0666): identity uid:<its uid>, its own run, its
# own export socket -- and sbxd's descriptors it parks count against
# sbxd's uid, not its own.
PARKER = """if 1:
    import json, os, resource, secrets, socket, sys, threading, time
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    sys.path[:0] = [sys.argv[1]]
    import sbxrpc, sbxdfix
    from sbxrpc import sandbox_pb2 as pb
    c = sbxrpc.Conn(sys.argv[2], timeout_ms=60000)
    def ok(name, req, t):
        code, msg, resp = c.call(name, req, t)
        assert code == "OK", (name, code, msg)
        return resp
    run = ok("CreateRun", pb.CreateRunRequest(policy_json=sbxdfix.policy_json()),
             pb.CreateRunResponse).run_id
    ex = ok("Exec", pb.ExecRequest(run_id=run, argv=["/usr/bin/python3", "-c",
            "open('/out/a','w').write('a')"]), pb.ExecResponse).exec_id
    ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=20000), pb.WaitResponse)
    held, last = [], None
    def park(n):
        name = "sbx-export-park-" + secrets.token_hex(8)
        ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ls.bind(b"\\0" + name.encode()); ls.listen(4); ls.settimeout(20)
        box = []
        def acc():
            s, _ = ls.accept(); box.append(s)
            for _ in range(n):
                s.send(b"k")
        t = threading.Thread(target=acc); t.start()
        code, msg, _ = c.call("ExportArtifacts", pb.ExportArtifactsRequest(
            run_id=run, paths=["a"] * n, socket_name=name, nonce=secrets.token_bytes(16)),
            pb.ExportArtifactsResponse)
        t.join(); ls.close(); held.extend(box)
        return code, msg
    parked, t0 = 0, time.monotonic()
    while parked < int(sys.argv[3]) and time.monotonic() - t0 < 60:
        code, msg = park(10)
        if code == "DEADLINE_EXCEEDED":
            parked += 1; last = (code, msg); continue
        if code != "OK":
            last = (code, msg); break
        parked += 10
    print(json.dumps({"uid": int(open("/proc/self/uid_map").read().split()[1]), "parked": parked, "stopped": last}), flush=True)
    sys.stdin.read()
    """


class ParkedByAnotherUser(te.ExportTest):
    SERVER_CONFIG = {"same_host_export": True, "ipc_mode": 0o666}

    def test_another_users_parked_descriptors_do_not_deny_this_one(self):
        import subprocess
        import sbxdfix
        with open("/proc/%d/limits" % self.srv.proc.pid) as f:
            sbxd_nofile = int([l for l in f if l.startswith("Max open files")][0].split()[3])
        # Ours, before: a file in /out.
        run = self.create()
        self.run_py(run, "open('/out/b','w').write('b')\n")
        here = os.path.dirname(os.path.abspath(__file__))
        other = subprocess.Popen(["unshare", "--user", "--map-users=auto", "--map-groups=auto",
                                  "--setuid", "0", "--setgid", "0", PY, "-c", PARKER, here,
                                  self.srv.ipc, str(sbxd_nofile + 100)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            line = other.stdout.readline()
            if not line:
                self.skipTest("unshare --map-users=auto: no subordinate uids for this user")
            import json
            got = json.loads(line)
            sys.stderr.write("uid %d (not ours, %d) parked %d of sbxd's descriptors "
                             "(sbxd NOFILE %d): %s\n" % (got["uid"], os.getuid(),
                                                          got["parked"], sbxd_nofile,
                                                          got["stopped"]))
            errors = []
            for name, req, t in [
                    ("FetchArtifact", pb.FetchArtifactRequest(run_id=run, path="b"),
                     pb.FetchArtifactResponse),
                    ("CreateRun", pb.CreateRunRequest(policy_json=sbxdfix.policy_json()),
                     pb.CreateRunResponse)]:
                try:
                    code, msg, resp = self.c.call(name, req, t)
                except Exception as e:  # noqa: BLE001 (no answer at all)
                    code, msg, resp = "NO ANSWER", str(e), None
                if code != "OK":
                    errors.append("%s: %s %s" % (name, code, msg))
                elif name == "CreateRun":
                    self.teardown(resp.run_id)
            sys.stderr.write("our calls meanwhile: %s\n" % errors)
            self.assertEqual(errors, [])
        finally:
            other.stdin.close()
            other.kill()
            other.wait()
            self.teardown(run)


class ExportFds(te.ExportTest):
    def test_no_descriptor_of_sbxd_outlives_a_failed_export(self):
        run = self.create()
        self.run_py(run, "import os\nopen('/out/a','w').write('a')\nos.mkfifo('/out/fifo')\n"
                         "os.symlink('/etc/passwd', '/out/link')\n")
        # Warm: the run's reader and caches exist before the count.
        code, msg, _, rv = self.export(run, ["a"])
        self.assertEqual(code, "OK", msg)
        for r in rv.records:
            os.close(r[4][0])
        time.sleep(0.5)
        before = self.srv.fd_count()
        for _ in range(20):
            for paths in (["a", "fifo"], ["a", "link"], ["gone"], ["a", "a", "../x"]):
                code, msg, _, rv = self.export(run, paths)
                for r in rv.records:
                    for fd in r[4]:
                        os.close(fd)
            req = pb.ExportArtifactsRequest(run_id=run, paths=["a"],
                                            socket_name="nobody-" + secrets.token_hex(8),
                                            nonce=secrets.token_bytes(16))
            self.c.call("ExportArtifacts", req, pb.ExportArtifactsResponse)
        time.sleep(0.5)
        self.assertLessEqual(self.srv.fd_count(), before)
        self.teardown(run)


# Only this file's attacks here; test_sbxd_export.py runs its own.
for _n in dir(te.ExportTest):
    if _n.startswith("test_"):
        setattr(PreAckTest, _n, None)
        setattr(ParkedByAnotherUser, _n, None)
        setattr(ExportFds, _n, None)


if __name__ == "__main__":
    unittest.main()
