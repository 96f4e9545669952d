# SPDX-License-Identifier: Apache-2.0
"""Review of leases, the sweeper, and PutInput after the first exec, as a
second identity (bob, a bearer token over TLS) and as the sandbox's code.
Each test here attacks one property and fails on the tree it was written
against for the reason its docstring gives."""
import hashlib
import os
import time
import unittest

from sbxdfix import policy_json
from sbxrpc import sandbox_pb2 as pb
from test_sbxd_lease import LeaseTestCase, events, wait_for


class Bob:
    """Calls as the second identity: a bearer token over TLS."""

    def __init__(self, srv):
        self.c = srv.conn(tls=True)
        self.token = srv.tokens["bob"]

    def close(self):
        self.c.close()

    def call(self, name, req, resp_type):
        return self.c.call(name, req, resp_type, token=self.token)


class StoppedRunsFillRunsMax(LeaseTestCase):
    # A host sized for two callers: each may hold one run.
    CONFIG = {"runs_max": 2, "runs_max_per_identity": 1, "expired_keep_seconds": 600}

    def test_one_identitys_stopped_runs_do_not_deny_another_createrun(self):
        """Stopped runs left runs_max_per_identity (runs_registry.c
        count_identity) but still count against runs_max (run_register), and
        the sweeper keeps up to runs_max_per_identity of them per identity
        (runs_sweeper.c pick). So one identity holds 2 x runs_max_per_identity
        registry slots: here both of runs_max, and bob, who holds none, is
        refused. Before leases an identity held at most
        runs_max_per_identity."""
        a = self.c.create(idle_seconds=1).run_id
        self.assertTrue(wait_for(lambda: events(self.srv, "run_idle", a), 6))
        self.c.create()  # a's per-identity slot is free: a second run
        self.assertEqual(self.c.state(a)[0], "EXPIRED")
        bob = Bob(self.srv)
        self.addCleanup(bob.close)
        code, msg, r = bob.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                pb.CreateRunResponse)
        self.assertEqual(code, "OK", "bob, with no run at all, was refused: %s" % msg)
        # Room was made from alice's stopped run, its manifest to the log.
        td = wait_for(lambda: events(self.srv, "teardown", a), 3)
        self.assertEqual([ev["reason"] for ev in td], ["runs_max"])
        self.assertIn("manifest", td[0])
        self.assertEqual(self.c.state(a)[0], "NOT_FOUND")
        bob.call("Teardown", pb.TeardownRequest(run_id=r.run_id), pb.TeardownResponse)


class SweptManifestDropped(LeaseTestCase):
    # 1 KiB/s: a bucket of 64 KiB of audit lines per identity.
    CONFIG = {"expired_keep_seconds": 0, "quotas": {"audit_identity_kb_per_s": 1}}

    def test_the_sweepers_manifest_is_never_dropped_by_the_audit_rate(self):
        """A run torn down by the sweeper has nobody to take its manifest:
        the audit log is its only record (runs_teardown.c teardown_finish,
        run_audit -> sbx_audit). That line is rate-limited like any caller
        line (audit.c within_rate), and the sandbox sizes it: 200 files with
        250-byte names in /out make a line larger than the identity's whole
        bucket, so it is dropped (counted in audit_lines_dropped) and the
        manifest is lost, with the run and its files already gone."""
        run = self.c.create(idle_seconds=2).run_id
        e = self.c.exec(run, "i=0; while [ $i -lt 200 ]; do "
                             "n=$(printf '%03d' $i); : > /out/$n$(printf 'x%.0s' $(seq 247)); "
                             "i=$((i+1)); done; ls /out | wc -l")
        st = self.c.wait(run, e)
        self.assertEqual(st.exit_code, 0, st)
        self.assertEqual(self.c.stdout(run, e).strip(), b"200")
        # Then silence: idle_seconds, and the sweeper at once.
        self.assertTrue(wait_for(lambda: events(self.srv, "run_idle", run), 8))
        self.assertTrue(wait_for(lambda: self.c.state(run)[0] == "NOT_FOUND", 8, 0.5))
        time.sleep(1)
        td = events(self.srv, "teardown", run)
        dropped = [ev for ev in self.srv.audit_events() if ev.get("event") ==
                   "audit_lines_dropped"]
        self.assertEqual(len(td), 1, "the sweeper's teardown line (with the run's only "
                         "manifest) was not written; drops: %s" % dropped)
        self.assertEqual(len(td[0]["manifest"]["artifacts"]), 200)


class ModeOnLaterChunks(LeaseTestCase):
    def test_a_later_chunk_may_repeat_the_mode_as_the_proto_says(self):
        """sandbox.proto PutInputRequest.mode: "Later chunks leave it 0 or
        repeat it". runs_inputs.c check_chunk refuses any mode on a chunk
        past offset 0 ("given on the first chunk (offset 0) only"), so a
        client coded against the contract fails its second chunk."""
        run = self.c.create().run_id
        self.c.wait(run, self.c.exec(run, "true"))
        data = b"a" * 10 + b"b" * 10
        sha = hashlib.sha256(data).hexdigest()
        first = pb.PutInputRequest(run_id=run, path="f", offset=0, data=data[:10], mode=0o755,
                                   size=len(data), sha256=sha)
        self.c.ok("PutInput", first, pb.PutInputResponse)
        code, msg, r = self.c.call("PutInput", pb.PutInputRequest(
            run_id=run, path="f", offset=10, data=data[10:], last=True, mode=0o755),
            pb.PutInputResponse)
        self.assertEqual(code, "OK", msg)
        self.assertTrue(r.complete)

    def test_a_failed_upload_does_not_pin_its_mode_for_the_retry(self):
        """The mode is the input's once its upload completes: a first
        upload that failed (its bytes did not match the sha256) gave 0755,
        and its retry from offset 0 with 0600 is taken, not refused as
        "declared 0755", and the file gets 0600."""
        run = self.c.create().run_id
        self.c.wait(run, self.c.exec(run, "true"))
        data = b"c" * 20
        sha = hashlib.sha256(data).hexdigest()
        code, msg, _ = self.c.call("PutInput", pb.PutInputRequest(
            run_id=run, path="g", offset=0, data=b"d" * 20, last=True, mode=0o755,
            size=len(data), sha256=sha), pb.PutInputResponse)
        self.assertEqual(code, "INVALID_ARGUMENT", msg)
        self.assertIn("sha256 mismatch", msg)
        code, msg, r = self.c.call("PutInput", pb.PutInputRequest(
            run_id=run, path="g", offset=0, data=data, last=True, mode=0o600),
            pb.PutInputResponse)
        self.assertEqual(code, "OK", msg)
        self.assertTrue(r.complete)
        e = self.c.exec(run, "stat -c %a /data/g")
        self.c.wait(run, e)
        # 0600 as /data shows it: others get the owner's read and execute
        # bits (the sandbox user is not sbxd's uid); 0755 would stay 755.
        self.assertEqual(self.c.stdout(run, e).strip(), b"604")


class Held(LeaseTestCase):
    """What held: these pass on the tree reviewed, and stay as guards."""
    CONFIG = {"expired_keep_seconds": 1}

    def test_another_identitys_calls_never_renew_a_run(self):
        run = self.c.create(idle_seconds=2).run_id
        bob = Bob(self.srv)
        self.addCleanup(bob.close)
        # Bob names alice's run on every call for three times idle_seconds:
        # NOT_FOUND each time, and the lease runs out all the same.
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline and not events(self.srv, "run_idle", run):
            for name, req, t in (
                    ("Status", pb.StatusRequest(run_id=run), pb.StatusResponse),
                    ("Wait", pb.WaitRequest(run_id=run, exec_id="exec-1", timeout_ms=100),
                     pb.WaitResponse),
                    ("PutInput", pb.PutInputRequest(run_id=run, path="x", data=b"x", last=True,
                                                    size=1, sha256="0" * 64),
                     pb.PutInputResponse)):
                code, _, _ = bob.call(name, req, t)
                self.assertEqual(code, "NOT_FOUND", name)
            time.sleep(0.2)
        self.assertTrue(events(self.srv, "run_idle", run), "bob's calls kept alice's run")

    def test_owner_calls_racing_the_sweeper_leave_one_teardown(self):
        import threading
        for _ in range(3):
            run = self.c.create(run_seconds=1, script_seconds=1).run_id
            self.c.exec(run, "echo x > /out/a; sleep 5")
            results, stop = [], threading.Event()

            def hammer(kind):
                c = self.srv.conn()
                try:
                    while not stop.is_set():
                        if kind == 0:
                            code, _, _ = c.call("Teardown", pb.TeardownRequest(run_id=run),
                                                pb.TeardownResponse)
                        elif kind == 1:
                            code, _, _ = c.call("FetchArtifact", pb.FetchArtifactRequest(
                                run_id=run, path="a"), pb.FetchArtifactResponse)
                        elif kind == 2:
                            code, _, _ = c.call("Status", pb.StatusRequest(run_id=run),
                                                pb.StatusResponse)
                        else:
                            code, _, _ = c.call("PutInput", pb.PutInputRequest(
                                run_id=run, path="late", data=b"", last=True, size=0,
                                sha256=hashlib.sha256(b"").hexdigest()), pb.PutInputResponse)
                        results.append((kind, code))
                        if kind == 0 and code == "OK":
                            break
                finally:
                    c.close()

            # The owner's Teardown starts as the sweeper's time comes.
            self.assertTrue(wait_for(lambda: self.c.state(run)[0] == "EXPIRED", 8, 0.05))
            time.sleep(0.9)
            ts = [threading.Thread(target=hammer, args=(k,)) for k in (0, 1, 2, 3)]
            for t in ts:
                t.start()
            wait_for(lambda: self.c.state(run)[0] == "NOT_FOUND", 8, 0.05)
            stop.set()
            for t in ts:
                t.join(30)
            self.assertEqual(self.srv.proc.poll(), None, self.srv.log_tail())
            td = wait_for(lambda: events(self.srv, "teardown", run), 3)
            self.assertEqual(len(td), 1, td)
            self.assertFalse(os.path.exists(os.path.join(self.srv.state, "runs", run)))
            self.assertNotIn("INTERNAL", {c for _, c in results}, results)


if __name__ == "__main__":
    unittest.main()
