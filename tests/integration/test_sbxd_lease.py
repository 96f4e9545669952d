# SPDX-License-Identifier: Apache-2.0
"""Runs nobody can abandon, through the real sbxd: a run whose client was
killed ends by its lease (idle_seconds) and is then torn down by itself
(expired_keep_seconds) with its manifest in the audit log; calls and long
polls renew the lease; stopped runs leave the per-identity quota; inputs
can be added between execs, appear in /data whole, and keep their mode."""
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import unittest

from sbxdfix import Server, policy_json, processes_with
from sbxrpc import sandbox_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))


class Client:
    """Calls on one sbxd connection, asserting OK unless told otherwise."""

    def __init__(self, srv):
        self.srv = srv
        self.c = srv.conn()

    def close(self):
        self.c.close()

    def call(self, name, req, resp_type):
        return self.c.call(name, req, resp_type)

    def ok(self, name, req, resp_type):
        code, msg, resp = self.c.call(name, req, resp_type)
        assert code == "OK", "%s: %s %s" % (name, code, msg)
        return resp

    def create(self, inputs=(), **limits):
        req = pb.CreateRunRequest(policy_json=policy_json(**limits))
        for path, data, *mode in inputs:
            req.inputs.add(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                           mode=mode[0] if mode else 0)
        return self.ok("CreateRun", req, pb.CreateRunResponse)

    def exec(self, run, script, stdin=b""):
        return self.ok("Exec", pb.ExecRequest(run_id=run, argv=["/bin/sh", "-c", script],
                                              stdin=stdin), pb.ExecResponse).exec_id

    def wait(self, run, exec_id, timeout_ms=30000):
        return self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=exec_id,
                                              timeout_ms=timeout_ms), pb.WaitResponse).status

    def stdout(self, run, exec_id):
        r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=exec_id,
                                                       stream=pb.STDOUT, max_bytes=1 << 20),
                    pb.ReadOutputResponse)
        return r.data

    def put(self, run, path, data, mode=0, declare=False, chunk=1 << 20, pause=0.0):
        """Uploads data in chunks; declare: size and sha256 on the first."""
        off, r = 0, None
        while True:
            piece = data[off:off + chunk]
            req = pb.PutInputRequest(run_id=run, path=path, offset=off, data=piece,
                                     last=off + len(piece) >= len(data))
            if off == 0:
                req.mode = mode
                if declare:
                    req.size = len(data)
                    req.sha256 = hashlib.sha256(data).hexdigest()
            r = self.ok("PutInput", req, pb.PutInputResponse)
            off += len(piece)
            if req.last:
                return r
            time.sleep(pause)

    def state(self, run):
        code, msg, st = self.call("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        return (pb.RunState.Name(st.state) if code == "OK" else code), st


def events(srv, event, run_id):
    return [e for e in srv.audit_events() if e.get("event") == event and e.get("run_id") == run_id]


def wait_for(pred, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


class LeaseTestCase(unittest.TestCase):
    CONFIG = {}

    def setUp(self):
        self.srv = Server(**self.CONFIG)
        self.c = Client(self.srv)

    def tearDown(self):
        self.c.close()
        rc = self.srv.stop()
        try:
            self.assertEqual(rc, 0, "sbxd exited %s on SIGTERM: %s" % (rc, self.srv.log_tail()))
        finally:
            self.srv.cleanup()


class Lease(LeaseTestCase):
    CONFIG = {"expired_keep_seconds": 2, "idle_seconds_default": 600}

    def test_a_killed_client_leaves_a_run_that_ends_by_its_lease_then_goes(self):
        # A client that creates a run, starts a long command, and dies by
        # SIGKILL without a word: nobody calls on the run any more.
        child = textwrap.dedent("""
            import sys, time
            sys.path.insert(0, %r)
            from sbxdfix import policy_json
            import sbxrpc
            from sbxrpc import sandbox_pb2 as pb
            with sbxrpc.Conn(%r) as c:
                code, msg, r = c.call("CreateRun", pb.CreateRunRequest(
                    policy_json=policy_json(idle_seconds=3)), pb.CreateRunResponse)
                assert code == "OK", msg
                before = time.monotonic()  # the last call starts
                code, msg, e = c.call("Exec", pb.ExecRequest(
                    run_id=r.run_id, argv=["sleep", "4242.5"]), pb.ExecResponse)
                assert code == "OK", msg
                print(r.run_id, before, time.monotonic(), flush=True)
                time.sleep(600)
        """) % (HERE, self.srv.ipc)
        p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ))
        try:
            run, call_started, call_ended = p.stdout.readline().split()
            self.assertRegex(run, r"^run-[0-9a-f]+$")
            self.assertTrue(wait_for(lambda: processes_with("sleep 4242.5"), 5))
            p.send_signal(signal.SIGKILL)
        finally:
            p.kill()
            p.wait()
            p.stdout.close()
        # Nothing here may call on the run (a call would renew its lease):
        # the audit log and the process table say what happened.
        idle = wait_for(lambda: events(self.srv, "run_idle", run), 8)
        ended = time.monotonic()
        self.assertTrue(idle, self.srv.audit_events()[-5:])
        self.assertEqual(idle[0]["idle_seconds"], 3)
        # The lease ran out no earlier than idle_seconds after the last
        # call (CLOCK_MONOTONIC is the host's, the child's and sbxd's), and
        # it was the lease: before twice idle_seconds (the monitor notices
        # within about a second; a stopwatch on that second is the
        # machine's load, not the lease).
        self.assertGreaterEqual(ended - float(call_started), 3.0)
        self.assertLess(ended - float(call_ended), 2 * 3)
        self.assertTrue(wait_for(lambda: not processes_with("sleep 4242.5"), 6),
                        "the sandbox outlived its lease")
        # expired_keep_seconds later it is torn down by sbxd itself.
        td = wait_for(lambda: events(self.srv, "teardown", run), 8)
        self.assertTrue(td)
        self.assertEqual((td[0]["reason"], td[0]["final_state"], td[0]["idle"]),
                         ("expired_keep", "expired", True))
        self.assertFalse(os.path.exists(os.path.join(self.srv.state, "runs", run)))
        self.assertEqual(self.c.state(run)[0], "NOT_FOUND")

    def test_calls_and_long_polls_renew_the_lease(self):
        run = self.c.create(idle_seconds=2).run_id
        # Status every second, for three times idle_seconds.
        for _ in range(6):
            time.sleep(1)
            self.assertEqual(self.c.state(run)[0], "CREATED")
        # A Wait in progress is a call: a command longer than idle_seconds
        # is waited for, not ended for idleness.
        e = self.c.exec(run, "sleep 5; echo done")
        st = self.c.wait(run, e, timeout_ms=20000)
        self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code), ("EXITED", 0), st)
        self.assertEqual(self.c.stdout(run, e), b"done\n")
        # Then silence: the run ends by its lease, and Status says why.
        self.assertTrue(wait_for(lambda: events(self.srv, "run_idle", run), 6))
        state, status = self.c.state(run)
        self.assertEqual(state, "EXPIRED")
        self.assertTrue(any("idle_seconds (2 s) ran out" in a for a in status.alerts),
                        status.alerts)
        self.assertEqual(status.policy.limits.idle_seconds, 2)
        code, msg, _ = self.c.call("Exec", pb.ExecRequest(run_id=run, argv=["true"]),
                                   pb.ExecResponse)
        self.assertEqual(code, "FAILED_PRECONDITION")
        self.assertIn("idle_seconds", msg)

    def test_an_exec_running_when_the_lease_runs_out_ends_with_reason_idle(self):
        run = self.c.create(idle_seconds=2).run_id
        e = self.c.exec(run, "sleep 60")
        self.assertTrue(wait_for(lambda: events(self.srv, "run_idle", run), 6))
        st = self.c.wait(run, e, timeout_ms=5000)
        self.assertEqual(pb.ExitReason.Name(st.reason), "IDLE", st)
        self.assertIn("idle_seconds", st.message)

    def test_the_default_idle_seconds_is_in_the_effective_policy(self):
        r = self.c.create()
        self.assertEqual(r.effective_policy.limits.idle_seconds, 600)
        code, msg, _ = self.c.call("CreateRun", pb.CreateRunRequest(
            policy_json=policy_json(idle_seconds=-1)), pb.CreateRunResponse)
        self.assertEqual(code, "INVALID_ARGUMENT")
        self.assertIn("limits.idle_seconds", msg)

    def test_cli_run_keeps_the_lease_while_it_waits(self):
        pol = os.path.join(self.srv.dir, "idle.json")
        with open(pol, "w") as f:
            f.write(policy_json(idle_seconds=2))
        r = self.srv.cli("run", "--policy", pol, "--", "/bin/sh", "-c", "sleep 5; echo waited")
        self.assertEqual(r.returncode, 0, r)
        self.assertIn("waited", r.stdout)

    def test_an_expired_runs_artifacts_stay_then_it_goes_with_a_manifest(self):
        run = self.c.create(run_seconds=3, script_seconds=3).run_id
        body = b"kept after expiry\n"
        e = self.c.exec(run, "printf 'kept after expiry\\n' > /out/result.txt")
        self.assertEqual(pb.ExitReason.Name(self.c.wait(run, e).reason), "EXITED")
        self.assertEqual(wait_for(lambda: self.c.state(run)[0] == "EXPIRED", 8, 0.2), True)
        # Readable during expired_keep_seconds (2 s here) ...
        f = self.c.ok("FetchArtifact", pb.FetchArtifactRequest(run_id=run, path="result.txt"),
                      pb.FetchArtifactResponse)
        self.assertEqual((f.data, f.eof, f.sha256), (body, True, hashlib.sha256(body).hexdigest()))
        # ... then torn down by sbxd (Status calls do not keep a stopped run).
        self.assertEqual(wait_for(lambda: self.c.state(run)[0] == "NOT_FOUND", 6, 0.3), True)
        # Unlisted as its teardown begins, the run's record is written as
        # it ends (after /out is listed for the manifest): a moment later.
        td = wait_for(lambda: events(self.srv, "teardown", run), 5) or []
        self.assertEqual(len(td), 1, td)
        self.assertEqual((td[0]["reason"], td[0]["final_state"], td[0]["idle"]),
                         ("expired_keep", "expired", False))
        m = td[0]["manifest"]
        self.assertEqual([(a["path"], a["size"], a["sha256"]) for a in m["artifacts"]],
                         [("result.txt", len(body), hashlib.sha256(body).hexdigest())])
        self.assertTrue(td[0]["policy_digest"].startswith("sha256:"))
        self.assertEqual(m["image_digest"], "unpinned")


class Quota(LeaseTestCase):
    CONFIG = {"runs_max_per_identity": 1, "expired_keep_seconds": 60,
              "limits_max": {"inputs": 2, "input_bytes": 3 << 20},
              "quotas": {"identity_mb": 1, "reserve_mb": 0}}

    def declare(self, run, path, size):
        return self.c.call("PutInput", pb.PutInputRequest(
            run_id=run, path=path, data=b"", size=size, sha256="0" * 64), pb.PutInputResponse)

    def test_inputs_declared_later_are_held_to_the_same_ceilings_and_quota(self):
        run = self.c.create(inputs=[("a", b"a" * 100)]).run_id
        self.c.put(run, "a", b"a" * 100)
        self.c.wait(run, self.c.exec(run, "true"))
        code, msg, _ = self.declare(run, "b", 3 << 20)  # with a's 100 bytes: over
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        self.assertIn("limits_max.input_bytes", msg)
        code, msg, _ = self.declare(run, "b", 2 << 20)
        self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
        self.assertIn("quotas.identity_mb", msg)
        # The refused declarations charged nothing: what fits still fits.
        self.c.put(run, "b", b"b" * (100 << 10), declare=True)
        code, msg, _ = self.declare(run, "c", 0)
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        self.assertIn("limits_max.inputs", msg)
        e = self.c.exec(run, "wc -c < /data/a; wc -c < /data/b")
        self.c.wait(run, e)
        self.assertEqual(self.c.stdout(run, e).split(), [b"100", b"102400"])
        self.c.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)

    def test_stopped_runs_free_their_quota_slot_and_are_bounded(self):
        a = self.c.create(idle_seconds=2).run_id
        code, msg, _ = self.c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                   pb.CreateRunResponse)
        self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
        self.assertTrue(wait_for(lambda: events(self.srv, "run_idle", a), 6))
        b = self.c.create(idle_seconds=2).run_id  # a's slot is free
        self.assertEqual(self.c.state(a)[0], "EXPIRED")  # still kept, with its artifacts
        # Once b stopped too, this identity keeps more stopped runs than
        # runs_max_per_identity: the oldest goes early.
        self.assertTrue(wait_for(lambda: events(self.srv, "run_idle", b), 6))
        td = wait_for(lambda: events(self.srv, "teardown", a), 3)
        self.assertTrue(td)
        self.assertEqual(td[0]["reason"], "stopped_runs_max")
        self.assertEqual(self.c.state(b)[0], "EXPIRED")


class ManifestBound(LeaseTestCase):
    CONFIG = {"max_message_bytes": 128 << 10}

    def test_inputs_declared_later_never_make_a_manifest_too_large_to_send(self):
        run = self.c.create().run_id
        refused = None
        for i in range(100):  # ~1.1 KB each; half of an answer is ~32 KiB
            path = "%03d-" % i + "x" * 1000
            code, msg, _ = self.c.call("PutInput", pb.PutInputRequest(
                run_id=run, path=path, data=b"", size=1, sha256="0" * 64), pb.PutInputResponse)
            if code != "OK":
                refused = (i, code, msg)
                break
        self.assertIsNotNone(refused)
        i, code, msg = refused
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        self.assertIn("manifest would take more than", msg)
        self.assertGreater(i, 10)
        self.c.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)


class Inputs(LeaseTestCase):
    def test_inputs_added_between_execs_with_their_mode_in_the_manifest(self):
        first = b"declared at CreateRun\n"
        run = self.c.create(inputs=[("first.txt", first)]).run_id
        self.c.put(run, "first.txt", first)
        e = self.c.exec(run, "cat /data/first.txt")
        self.assertEqual(self.c.wait(run, e).exit_code, 0)
        script = b"#!/bin/sh\necho \"ran directly: $(cat /data/more/notes.txt)\"\n"
        before = int(time.time() * 1000)
        r = self.c.put(run, "bin/run.sh", script, mode=0o755, declare=True)
        self.assertTrue(r.complete)
        self.c.put(run, "more/notes.txt", b"second\n", declare=True)
        e = self.c.exec(run, "/data/bin/run.sh; stat -c '%a %n' /data/bin/run.sh "
                             "/data/more/notes.txt /data/first.txt")
        st = self.c.wait(run, e)
        self.assertEqual(st.exit_code, 0, st)
        self.assertEqual(self.c.stdout(run, e).decode(),
                         "ran directly: second\n755 /data/bin/run.sh\n"
                         "644 /data/more/notes.txt\n644 /data/first.txt\n")
        # Modes beyond the permission bits are refused, a declared path is
        # never replaced, an undeclared one is refused.
        for req, want in (
                (pb.PutInputRequest(run_id=run, path="suid", data=b"x", last=True, mode=0o4755,
                                    size=1, sha256=hashlib.sha256(b"x").hexdigest()),
                 "INVALID_ARGUMENT"),
                (pb.PutInputRequest(run_id=run, path="bin/run.sh", data=b"y", last=True, size=1,
                                    sha256=hashlib.sha256(b"y").hexdigest()),
                 "INVALID_ARGUMENT"),
                (pb.PutInputRequest(run_id=run, path="bin/run.sh", data=script, last=True),
                 "FAILED_PRECONDITION"),
                (pb.PutInputRequest(run_id=run, path="bin/run.sh/x", data=b"x", last=True,
                                    size=1, sha256=hashlib.sha256(b"x").hexdigest()),
                 "INVALID_ARGUMENT"),
                (pb.PutInputRequest(run_id=run, path="nodecl", data=b"x", last=True),
                 "INVALID_ARGUMENT")):
            code, msg, _ = self.c.call("PutInput", req, pb.PutInputResponse)
            self.assertEqual(code, want, (req.path, msg))
        e = self.c.exec(run, "ls /data")
        self.c.wait(run, e)
        self.assertEqual(self.c.stdout(run, e), b"bin\nfirst.txt\nmore\n")
        m = self.c.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse).manifest
        got = {f.path: (f.size, f.sha256, f.mode) for f in m.inputs}
        self.assertEqual(got, {
            "first.txt": (len(first), hashlib.sha256(first).hexdigest(), 0o644),
            "bin/run.sh": (len(script), hashlib.sha256(script).hexdigest(), 0o755),
            "more/notes.txt": (7, hashlib.sha256(b"second\n").hexdigest(), 0o644)})
        arrived = {f.path: f.arrived_unix_ms for f in m.inputs}
        self.assertLess(arrived["first.txt"], before)
        self.assertGreaterEqual(arrived["bin/run.sh"], before)
        self.assertLessEqual(arrived["bin/run.sh"], arrived["more/notes.txt"])

    def test_an_exec_never_sees_a_partial_input(self):
        run = self.c.create().run_id
        data = os.urandom(4 << 18)  # 1 MiB, in four chunks a while apart
        want = hashlib.sha256(data).hexdigest()
        # Reads /data/big whenever it is there, for as long as the upload
        # takes and a little more; prints every digest it saw.
        e = self.c.exec(run, textwrap.dedent("""
            end=$(( $(date +%s) + 6 )); seen=0
            while [ $(date +%s) -lt $end ]; do
              if [ -e /data/big ]; then sha256sum < /data/big; seen=$((seen+1)); fi
              [ $seen -ge 20 ] && break
            done
            echo end
        """))
        time.sleep(0.5)
        self.c.put(run, "big", data, declare=True, chunk=1 << 18, pause=0.5)
        st = self.c.wait(run, e, timeout_ms=20000)
        self.assertEqual(st.exit_code, 0, st)
        lines = self.c.stdout(run, e).decode().split("\n")
        self.assertEqual(lines[-2:], ["end", ""], lines[-5:])
        digests = {ln.split()[0] for ln in lines[:-2]}
        self.assertEqual(digests, {want}, "an exec saw a part of the file")
        # It read the file many times, the first as soon as it appeared.
        self.assertEqual(len(lines) - 2, 20)


if __name__ == "__main__":
    unittest.main()
