# SPDX-License-Identifier: Apache-2.0
"""sbxd end to end over ipc and TLS: every call, a run of several execs,
live output, deadlines, oom, expiry, artifacts, teardown, identities,
authentication, and bad input that must change nothing."""
import hashlib
import json
import os
import random
import re
import time
import unittest

import sbxrpc
from sbxdfix import Server, ServerTestCase, policy_json, processes_with, stale_run_cgroups
from sbxrpc import sandbox_pb2 as pb


class SbxdTest(ServerTestCase):
    def setUp(self):
        self.c = self.srv.conn()

    def tearDown(self):
        self.c.close()

    # -- helpers
    def ok(self, name, req, resp_type, conn=None, token=None, request_id=None):
        code, msg, resp = (conn or self.c).call(name, req, resp_type, token=token,
                                                request_id=request_id)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def create(self, conn=None, token=None, inputs=(), **limits):
        req = pb.CreateRunRequest(policy_json=policy_json(**limits))
        for path, data in inputs:
            req.inputs.add(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        return self.ok("CreateRun", req, pb.CreateRunResponse, conn=conn, token=token).run_id

    def exec(self, run, script, conn=None, token=None, stdin=b""):
        return self.ok("Exec", pb.ExecRequest(run_id=run, argv=["/bin/sh", "-c", script],
                                              stdin=stdin),
                       pb.ExecResponse, conn=conn, token=token).exec_id

    def wait(self, run, ex, timeout_ms=30000, conn=None, token=None):
        return self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=timeout_ms),
                       pb.WaitResponse, conn=conn, token=token).status

    def read_all(self, run, ex, stream=pb.STDOUT):
        data, off = b"", 0
        while True:
            r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex, stream=stream,
                                                           offset=off, timeout_ms=5000),
                        pb.ReadOutputResponse)
            data += r.data
            off = r.next_offset
            if r.eof:
                return data, r.truncated

    def teardown(self, run, conn=None, token=None):
        return self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse,
                       conn=conn, token=token).manifest

    # -- the calls
    def test_health_over_ipc_and_tls(self):
        h = self.ok("Health", pb.HealthRequest(), pb.HealthResponse)
        self.assertTrue(h.userns and h.seccomp, h)
        self.assertIn(h.cgroup, ("v1", "v2"))
        self.assertEqual(h.identity, "uid:%d" % os.getuid())
        with self.srv.conn(tls=True) as t:
            h = self.ok("Health", pb.HealthRequest(), pb.HealthResponse, conn=t,
                        token=self.srv.tokens["alice"])
            self.assertEqual(h.identity, "token:alice")

    def test_a_run_of_several_execs_sharing_files_not_processes(self):
        inputs = [("ledger.csv", b"id,amount\n1,10\n2,20\n"), ("sub/notes.txt", os.urandom(3000))]
        run = self.create(inputs=inputs)
        # A chunk at 0 starts a file that is not complete over: what came
        # before is dropped, from the file and from its sha256 (the
        # declared digest must still match at the end).
        self.ok("PutInput", pb.PutInputRequest(run_id=run, path="ledger.csv", offset=0,
                                               data=b"X" * 9), pb.PutInputResponse)
        for path, data in inputs:
            # Two chunks each, to exercise offsets.
            half = len(data) // 2
            self.ok("PutInput", pb.PutInputRequest(run_id=run, path=path, offset=0,
                                                   data=data[:half]), pb.PutInputResponse)
            r = self.ok("PutInput", pb.PutInputRequest(run_id=run, path=path, offset=half,
                                                       data=data[half:], last=True),
                        pb.PutInputResponse)
            self.assertTrue(r.complete)
        e1 = self.exec(run, "cat /data/ledger.csv > /out/copy.csv; echo t > /tmp/t;"
                            " sleep 999.25 & echo one")
        st = self.wait(run, e1)
        self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code), ("EXITED", 0), st)
        self.assertEqual(processes_with("sleep 999.25"), [])
        e2 = self.exec(run, "cat /out/copy.csv /tmp/t; cat; exit 3", stdin=b"from stdin\n")
        st = self.wait(run, e2)
        self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code), ("EXITED", 3), st)
        out, _ = self.read_all(run, e2)
        self.assertEqual(out, b"id,amount\n1,10\n2,20\nt\nfrom stdin\n")
        # A complete input is never replaced (new ones may still come).
        code, msg, _ = self.c.call("PutInput", pb.PutInputRequest(run_id=run, path="ledger.csv",
                                                                  data=b"x"), pb.PutInputResponse)
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        status = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual(pb.RunState.Name(status.state), "ACTIVE")
        self.assertEqual([list(e.argv)[-1] for e in status.execs][1], "cat /out/copy.csv /tmp/t; cat; exit 3")
        self.assertTrue(status.policy_digest.startswith("sha256:"))
        arts = self.ok("ListArtifacts", pb.ListArtifactsRequest(run_id=run),
                       pb.ListArtifactsResponse)
        self.assertEqual([(a.path, a.size) for a in arts.artifacts], [("copy.csv", 20)])
        self.assertEqual(arts.artifacts[0].sha256, hashlib.sha256(inputs[0][1]).hexdigest())
        runs = self.ok("ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse)
        self.assertIn(run, [r.run_id for r in runs.runs])
        m = self.teardown(run)
        self.assertEqual(m.run_id, run)
        self.assertEqual(len(m.execs), 2)
        self.assertEqual(sorted(i.path for i in m.inputs), ["ledger.csv", "sub/notes.txt"])
        self.assertEqual([a.path for a in m.artifacts], ["copy.csv"])
        code, msg, _ = self.c.call("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual(code, "NOT_FOUND", msg)
        self.assertFalse(os.path.exists(os.path.join(self.srv.state, "runs", run)))
        events = [e["event"] for e in self.srv.audit_events() if e.get("run_id") == run]
        for ev in ("run_created", "exec_started", "exec_ended", "teardown"):
            self.assertIn(ev, events)

    def test_live_output_while_the_exec_runs(self):
        run = self.create()
        ex = self.exec(run, "echo first; sleep 2; echo second")
        r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex, stream=pb.STDOUT,
                                                       timeout_ms=5000), pb.ReadOutputResponse)
        self.assertEqual(r.data, b"first\n")
        self.assertFalse(r.eof)
        running = self.wait(run, ex, timeout_ms=10)
        self.assertEqual(pb.ExitReason.Name(running.reason), "RUNNING")
        rest, _ = self.read_all(run, ex)
        self.assertTrue(rest.endswith(b"second\n"), rest)
        self.teardown(run)

    def test_output_beyond_output_kb_is_counted_not_kept(self):
        run = self.create(output_kb=64)
        ex = self.exec(run, "head -c 5000000 /dev/zero")
        st = self.wait(run, ex)
        self.assertEqual(st.stdout_bytes, 5000000)
        self.assertTrue(st.stdout_truncated)
        out, truncated = self.read_all(run, ex)
        self.assertEqual(len(out), 64 * 1024)
        self.assertTrue(truncated)
        self.teardown(run)

    def test_timeout_and_oom(self):
        run = self.create(script_seconds=2, memory_mb=64)
        t0 = time.time()
        st = self.wait(run, self.exec(run, "sleep 60"))
        # Ended by script_seconds (TIMEOUT, 124), not by the command's own
        # 60 s, and not before its 2 s.
        self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code), ("TIMEOUT", 124), st)
        self.assertGreaterEqual(time.time() - t0, 2)
        st = self.wait(run, self.exec(run, "exec /usr/bin/python3 -c 'b=[]\nwhile True: b.append(bytearray(1<<20))'"))
        self.assertEqual(pb.ExitReason.Name(st.reason), "OOM", st)
        self.teardown(run)

    def test_signal_stops_an_exec(self):
        run = self.create()
        ex = self.exec(run, "sleep 60")
        self.ok("Signal", pb.SignalRequest(run_id=run, exec_id=ex), pb.SignalResponse)
        st = self.wait(run, ex)
        self.assertEqual((pb.ExitReason.Name(st.reason), st.signal), ("SIGNALED", 9), st)
        self.teardown(run)

    # ThreadSanitizer runs signal handlers late, at its next interceptor, in
    # an exec init that a raw clone() made behind its back: under it this
    # test failed 5 times in 12 on the tree before issue 21's third sitting
    # too, and never in the uninstrumented run (which checks the property;
    # the TSan stage is for sbxd's threads). docs/dev/testing.md.
    @unittest.skipIf(os.environ.get("SBX_SANITIZER") == "thread",
                     "ThreadSanitizer defers the helper's signal handlers")
    def test_signal_right_after_exec_is_not_lost(self):
        # Exec answers once pid 1 has the request, before the command
        # exists: a forwarded signal sent then waits for the command (it
        # was dropped by the kernel, or by exec init with no group to pass
        # it to, and the command ran to its end). Every way an exec
        # starts: from the init pid 1 made ahead while the run was idle,
        # from the one it made while another exec ran, and fresh (a sbxd
        # whose config says exec_prepare false).
        self.signal_each_right_after_exec(self.c, running_beside=False)
        self.signal_each_right_after_exec(self.c, running_beside=True)
        srv = Server(exec_prepare=False)
        try:
            with srv.conn() as c:
                self.signal_each_right_after_exec(c, running_beside=True)
        finally:
            self.assertEqual(srv.stop(), 0, srv.log_tail())
            srv.cleanup()

    def signal_each_right_after_exec(self, conn, running_beside):
        run = self.create(conn=conn)
        bg = self.ok("Exec", pb.ExecRequest(run_id=run, argv=["/bin/sleep", "60"]),
                     pb.ExecResponse, conn=conn).exec_id if running_beside else None
        for i in range(8):
            if not running_beside:
                time.sleep(0.3)  # idle: pid 1 prepares the next exec's init
            ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=["/bin/sleep", "5"]),
                         pb.ExecResponse, conn=conn).exec_id
            time.sleep(0.001 * i)
            self.ok("Signal", pb.SignalRequest(run_id=run, exec_id=ex, signal=15),
                    pb.SignalResponse, conn=conn)
            st = self.wait(run, ex, conn=conn)
            self.assertEqual((pb.ExitReason.Name(st.reason), st.signal),
                             ("SIGNALED", 15), (running_beside, i, st))
        if bg:
            self.ok("Signal", pb.SignalRequest(run_id=run, exec_id=bg), pb.SignalResponse,
                    conn=conn)
            self.wait(run, bg, conn=conn)
        self.teardown(run, conn=conn)

    def test_run_expiry_keeps_artifacts_until_teardown(self):
        run = self.create(run_seconds=2, script_seconds=2)
        ex = self.exec(run, "echo kept > /out/result.txt; sleep 60")
        st = self.wait(run, ex)
        self.assertIn(pb.ExitReason.Name(st.reason), ("RUN_EXPIRED", "TIMEOUT"), st)
        deadline = time.time() + 10
        while time.time() < deadline:
            status = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
            if pb.RunState.Name(status.state) == "EXPIRED":
                break
            time.sleep(0.1)
        self.assertEqual(pb.RunState.Name(status.state), "EXPIRED")
        code, msg, _ = self.c.call("Exec", pb.ExecRequest(run_id=run, argv=["/bin/true"]),
                                   pb.ExecResponse)
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        f = self.ok("FetchArtifact", pb.FetchArtifactRequest(run_id=run, path="result.txt"),
                    pb.FetchArtifactResponse)
        self.assertEqual(f.data, b"kept\n")
        self.assertTrue(f.eof)
        self.assertEqual(f.sha256, hashlib.sha256(b"kept\n").hexdigest())
        self.teardown(run)

    def test_fetch_in_chunks_matches_the_digest(self):
        run = self.create(out_mb=16)
        self.wait(run, self.exec(run, "head -c 3500000 /dev/urandom > /out/blob"))
        data, off, digest = b"", 0, ""
        while True:
            f = self.ok("FetchArtifact", pb.FetchArtifactRequest(run_id=run, path="blob",
                                                                 offset=off, max_bytes=1 << 20),
                        pb.FetchArtifactResponse)
            data += f.data
            off += len(f.data)
            if f.eof:
                digest = f.sha256
                break
        self.assertEqual(len(data), 3500000)
        self.assertEqual(hashlib.sha256(data).hexdigest(), digest)
        self.teardown(run)

    def test_hostile_out_entries_are_never_served(self):
        run = self.create()
        sentinel = os.path.join(self.srv.dir, "host-secret")
        with open(sentinel, "w") as f:
            f.write("host secret\n")
        self.wait(run, self.exec(run, "ln -s %s /out/link; mkfifo /out/fifo; mkdir /out/d;"
                                      " ln -s /etc /out/d/etc; echo fine > /out/ok" % sentinel))
        arts = self.ok("ListArtifacts", pb.ListArtifactsRequest(run_id=run),
                       pb.ListArtifactsResponse)
        self.assertEqual([a.path for a in arts.artifacts], ["ok"])
        self.assertEqual(arts.skipped, 3)
        # A FIFO opened for reading would block the server forever: each
        # call is answered (within the connection's 30 s receive timeout,
        # else its code is not one of these).
        for path in ("link", "d/etc/passwd", "fifo", "../../../etc/passwd", "/etc/passwd",
                     "d/../ok", "", "a//b"):
            code, msg, _ = self.c.call("FetchArtifact",
                                       pb.FetchArtifactRequest(run_id=run, path=path),
                                       pb.FetchArtifactResponse)
            self.assertIn(code, ("INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION"),
                          "%s: %s %s" % (path, code, msg))
        self.teardown(run)

    def test_sparse_giant_in_out_is_neither_hashed_nor_served(self):
        run = self.create(out_mb=4)
        self.wait(run, self.exec(run, "truncate -s 1T /out/huge; echo fine > /out/ok"))
        t0 = time.time()
        arts = self.ok("ListArtifacts", pb.ListArtifactsRequest(run_id=run),
                       pb.ListArtifactsResponse)
        self.assertEqual([a.path for a in arts.artifacts], ["ok"])
        self.assertGreaterEqual(arts.skipped, 1)
        code, msg, _ = self.c.call("FetchArtifact", pb.FetchArtifactRequest(
            run_id=run, path="huge", offset=(1 << 40) - 1), pb.FetchArtifactResponse)
        self.assertNotEqual(code, "OK", msg)
        m = self.teardown(run)
        self.assertEqual([a.path for a in m.artifacts], ["ok"])
        self.assertLess(time.time() - t0, 10)

    def test_sbxd_takes_only_the_host_image(self):
        for image in ("/usr", "/", "/nonexistent"):
            code, msg, _ = self.c.call("CreateRun", pb.CreateRunRequest(
                policy_json='{"image": "%s"}' % image), pb.CreateRunResponse)
            self.assertEqual(code, "FAILED_PRECONDITION", "%s: %s" % (image, msg))
            self.assertIn("image", msg)

    def test_input_dir_needs_the_config_to_allow_it(self):
        code, msg, _ = self.c.call("CreateRun", pb.CreateRunRequest(
            policy_json=policy_json(), input_dir=self.srv.dir), pb.CreateRunResponse)
        self.assertEqual(code, "PERMISSION_DENIED", msg)

    # -- identities
    def test_another_identity_gets_not_found_for_every_call(self):
        with self.srv.conn(tls=True) as t:
            alice, bob = self.srv.tokens["alice"], self.srv.tokens["bob"]
            run = self.create(conn=t, token=alice)
            ex = self.exec(run, "echo secret > /out/s", conn=t, token=alice)
            self.wait(run, ex, conn=t, token=alice)
            calls = [
                ("PutInput", pb.PutInputRequest(run_id=run, path="x"), pb.PutInputResponse),
                ("Exec", pb.ExecRequest(run_id=run, argv=["/bin/true"]), pb.ExecResponse),
                ("Wait", pb.WaitRequest(run_id=run, exec_id=ex), pb.WaitResponse),
                ("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex, stream=pb.STDOUT),
                 pb.ReadOutputResponse),
                ("Signal", pb.SignalRequest(run_id=run, exec_id=ex), pb.SignalResponse),
                ("Status", pb.StatusRequest(run_id=run), pb.StatusResponse),
                ("ListArtifacts", pb.ListArtifactsRequest(run_id=run), pb.ListArtifactsResponse),
                ("FetchArtifact", pb.FetchArtifactRequest(run_id=run, path="s"),
                 pb.FetchArtifactResponse),
                ("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse),
            ]
            for who, conn, tok in (("bob", t, bob), ("uid", self.c, None)):
                for name, req, resp in calls:
                    code, msg, _ = conn.call(name, req, resp, token=tok)
                    self.assertEqual(code, "NOT_FOUND", "%s as %s: %s" % (name, who, msg))
                runs = self.ok("ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse, conn=conn,
                               token=tok)
                self.assertNotIn(run, [r.run_id for r in runs.runs])
            # And the run is untouched: alice still has it.
            self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse, conn=t, token=alice)
            self.teardown(run, conn=t, token=alice)

    def test_tls_needs_a_valid_token(self):
        # A connection whose request was refused unauthenticated is closed
        # at its next request (rpc_server.c, refused_check), and the REQ
        # client then resends on a new one when its dialer has redialled:
        # a connection each keeps the test off that redial's timing.
        for tok in (None, "wrong", self.srv.tokens["alice"] + "x"):
            with self.srv.conn(tls=True) as t:
                code, msg, _ = t.call("Health", pb.HealthRequest(), pb.HealthResponse, token=tok)
                self.assertEqual(code, "UNAUTHENTICATED", msg)
        self.assertTrue(any(e["event"] == "auth_failure" for e in self.srv.audit_events()))

    def test_tls_without_a_trusted_client_certificate_cannot_connect(self):
        for cert in (None, "rogue"):
            try:
                with self.srv.conn(tls=True, cert=cert, timeout_ms=3000) as t:
                    t.call("Health", pb.HealthRequest(), pb.HealthResponse,
                           token=self.srv.tokens["alice"])
                self.fail("a client with certificate %r got an answer" % cert)
            except sbxrpc.NngError:
                pass

    # -- bad input: a clear error, and sbxd stays up and unchanged
    def assert_still_serving(self):
        self.ok("Health", pb.HealthRequest(), pb.HealthResponse)

    def test_bad_bytes_and_envelopes(self):
        before = self.ok("ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse)
        rnd = random.Random(7)
        cases = [bytes(rnd.getrandbits(8) for _ in range(n)) for n in (1, 17, 300, 5000)]
        good = pb.Request(method="/sbx.v1.Sandbox/Health").SerializeToString()
        cases += [good[:-3], b"\x0a\xff\xff\xff\xff\x0f", b"\x12\x05abc"]
        for data in cases:
            resp = pb.Response()
            resp.ParseFromString(self.c.raw(data))
            self.assertIn(sbxrpc.CODE[resp.code], ("INVALID_ARGUMENT", "UNIMPLEMENTED"),
                          (data[:20], resp))
        r = self.c.envelope("/sbx.v1.Sandbox/NoSuchCall")
        self.assertEqual(sbxrpc.CODE[r.code], "UNIMPLEMENTED")
        self.assertIn("NoSuchCall", r.message)
        r = self.c.envelope("/sbx.v1.Sandbox/CreateRun", body=b"\xff\xfe garbage")
        self.assertEqual(sbxrpc.CODE[r.code], "INVALID_ARGUMENT", r.message)
        after = self.ok("ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse)
        self.assertEqual(len(before.runs), len(after.runs))

    def test_oversized_and_huge_repeated_fields(self):
        run = self.create()
        big = pb.ExecRequest(run_id=run, argv=["x"] * 200000)
        code, msg, _ = self.c.call("Exec", big, pb.ExecResponse)
        self.assertEqual(code, "INVALID_ARGUMENT", msg)
        nested = pb.CreateRunRequest(policy_json=policy_json())
        for i in range(200000):
            nested.inputs.add()
        code, msg, _ = self.c.call("CreateRun", nested, pb.CreateRunResponse)
        self.assertEqual(code, "INVALID_ARGUMENT", msg)
        # Beyond max_message_bytes the transport drops the message.
        with self.srv.conn(timeout_ms=2000) as c2:
            with self.assertRaises(sbxrpc.NngError):
                c2.raw(b"\x0a" + b"\xff" * (6 << 20))
        self.assert_still_serving()
        self.teardown(run)

    def test_bad_policies_name_the_path(self):
        for text, needle in (('{"image": "host", "bogus": 1}', "bogus: unknown key"),
                             ('{"image": "host", "limits": {"memory_mb": 0}}', "limits.memory_mb"),
                             ('not json', "line 1")):
            code, msg, _ = self.c.call("CreateRun", pb.CreateRunRequest(policy_json=text),
                                       pb.CreateRunResponse)
            self.assertEqual(code, "INVALID_ARGUMENT", msg)
            self.assertIn(needle, msg)
        # An allowlist is refused only by an sbxd whose egress proxy did not
        # start: test_sbxd_egress_wire.py.

    def test_request_id_makes_create_happen_once(self):
        rid = sbxrpc.new_request_id()
        req = pb.CreateRunRequest(policy_json=policy_json())
        a = self.ok("CreateRun", req, pb.CreateRunResponse, request_id=rid)
        b = self.ok("CreateRun", req, pb.CreateRunResponse, request_id=rid)
        self.assertEqual(a.run_id, b.run_id)
        runs = self.ok("ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse)
        self.assertEqual([r.run_id for r in runs.runs].count(a.run_id), 1)
        self.teardown(a.run_id)

    def test_request_id_makes_signal_and_teardown_happen_once(self):
        """A retried Signal or Teardown (same request id) gets the first
        answer: not "already ended" for an exec it stopped, and the manifest,
        not NOT_FOUND, for a run it tore down."""
        run = self.create()
        ex = self.exec(run, "echo out > /out/kept.txt; sleep 60")
        sig = pb.SignalRequest(run_id=run, exec_id=ex)
        rid = sbxrpc.new_request_id()
        self.ok("Signal", sig, pb.SignalResponse, request_id=rid)
        st = self.wait(run, ex)
        self.assertEqual((pb.ExitReason.Name(st.reason), st.signal), ("SIGNALED", 9), st)
        again = self.ok("Signal", sig, pb.SignalResponse, request_id=rid)
        self.assertEqual(again, pb.SignalResponse())
        code, msg, _ = self.c.call("Signal", sig, pb.SignalResponse,
                                   request_id=sbxrpc.new_request_id())
        self.assertEqual(code, "FAILED_PRECONDITION", msg)

        rid = sbxrpc.new_request_id()
        td = pb.TeardownRequest(run_id=run)
        first = self.ok("Teardown", td, pb.TeardownResponse, request_id=rid).manifest
        self.assertEqual(first.run_id, run)
        self.assertEqual(len(first.execs), 1)
        retried = self.ok("Teardown", td, pb.TeardownResponse, request_id=rid).manifest
        self.assertEqual(retried.SerializeToString(), first.SerializeToString())
        code, msg, _ = self.c.call("Teardown", td, pb.TeardownResponse,
                                   request_id=sbxrpc.new_request_id())
        self.assertEqual(code, "NOT_FOUND", msg)
        # Same id, another run: a different request, refused.
        code, msg, _ = self.c.call("Teardown", pb.TeardownRequest(run_id="run-other"),
                                   pb.TeardownResponse, request_id=rid)
        self.assertEqual(code, "INVALID_ARGUMENT", msg)

    def test_another_callers_flood_cannot_evict_my_request_ids(self):
        rid = sbxrpc.new_request_id()
        req = pb.CreateRunRequest(policy_json=policy_json())
        first = self.ok("CreateRun", req, pb.CreateRunResponse, request_id=rid)
        bob = self.srv.tokens["bob"]
        # More answers than the whole table holds (4096), all bob's.
        for i in range(4200):
            code, _, _ = self.c.call("PutInput", pb.PutInputRequest(run_id="run-none", path="x"),
                                     pb.PutInputResponse, token=bob,
                                     request_id=sbxrpc.new_request_id())
            self.assertEqual(code, "NOT_FOUND")
        again = self.ok("CreateRun", req, pb.CreateRunResponse, request_id=rid)
        self.assertEqual(again.run_id, first.run_id)
        self.teardown(first.run_id)

    def test_a_peer_that_never_reads_cannot_starve_others(self):
        """A raw ipc connection speaking nng's SP framing pipelines 60
        FetchArtifact requests for 1 MiB and never reads a reply: its
        replies fill the socket, and without a per-connection limit every
        server context would wait on them. Others must still be served."""
        import socket as so
        import struct
        run = self.create(out_mb=8)
        self.wait(run, self.exec(run, "head -c 1048576 /dev/zero > /out/mib"))
        body = pb.Request(method="/sbx.v1.Sandbox/FetchArtifact",
                          body=pb.FetchArtifactRequest(run_id=run, path="mib",
                                                       max_bytes=1 << 20).SerializeToString()
                          ).SerializeToString()
        raw = so.socket(so.AF_UNIX, so.SOCK_STREAM)
        raw.setsockopt(so.SOL_SOCKET, so.SO_RCVBUF, 4096)
        raw.connect(self.srv.ipc[len("ipc://"):])
        raw.sendall(b"\x00SP\x00" + struct.pack(">H", 0x30) + b"\x00\x00")  # REQ0
        raw.settimeout(5)
        raw.recv(8)  # the server's header (REP0)
        for i in range(60):
            raw.sendall(b"\x01" + struct.pack(">Q", 4 + len(body)) +
                        struct.pack(">I", 0x80000000 | i) + body)
        time.sleep(1)
        try:
            # Another caller is answered: each call within its 5 s receive
            # timeout (a hang bound; an answer takes milliseconds).
            with self.srv.conn(timeout_ms=5000) as other:
                for _ in range(3):
                    code, msg, _ = other.call("ListRuns", pb.ListRunsRequest(),
                                              pb.ListRunsResponse)
                    self.assertEqual(code, "OK", msg)
        finally:
            raw.close()
        self.teardown(run)

    def test_per_identity_cap(self):
        runs = []
        try:
            for _ in range(8):
                runs.append(self.create())
            code, msg, _ = self.c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                       pb.CreateRunResponse)
            self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
        finally:
            for r in runs:
                self.teardown(r)

    def test_teardown_leaves_nothing(self):
        # Settled: an earlier test's teardowns may still be at the closer.
        fds = len(self.srv.settled_fds(quiet=0.5))
        cg = stale_run_cgroups()
        run = self.create()
        self.wait(run, self.exec(run, "sleep 999.75 & echo > /out/x"))
        ex = self.exec(run, "sleep 999.5")
        time.sleep(0.2)
        self.assertTrue(processes_with("sleep 999.5"))
        self.teardown(run)
        self.assertEqual(processes_with("sleep 999.5"), [])
        # This run's: a run another test left behind is not this one's.
        self.assertEqual(processes_with(os.path.join(self.srv.state, "runs", run) + "/"), [])
        self.assertFalse(os.path.exists(os.path.join(self.srv.state, "runs", run)))
        if cg is not None:
            self.assertEqual(stale_run_cgroups(), cg)
        # nng releases pipes of closed connections asynchronously: allow it
        # a moment, then nothing of the run may hold an fd in sbxd.
        deadline = time.time() + 3
        while self.srv.fd_count() > fds and time.time() < deadline:
            time.sleep(0.05)
        self.assertLessEqual(self.srv.fd_count(), fds)
        del ex

    def test_teardown_digests_what_the_writers_left(self):
        # Three execs rewrite a file each in /out as fast as they can, each
        # round 256 KiB of one letter (a, b, ... h, a, ...), when Teardown
        # comes. /out is read only once no process of the sandbox is left:
        # then each file holds one letter and its digest is of that. A
        # listing beside a writer would hash a mix of two rounds, or bytes
        # of a longer file than it said.
        writer = ("import os\nfd = os.open('/out/w%d', os.O_WRONLY | os.O_CREAT, 0o644)\n"
                  "print('writing', flush=True)\ni = 0\n"
                  "while True:\n    buf = b'abcdefgh'[i %% 8:i %% 8 + 1] * 4096\n    i += 1\n"
                  "    os.ftruncate(fd, 0)\n    os.lseek(fd, 0, 0)\n"
                  "    for _ in range(64):\n        os.write(fd, buf)\n")
        for _ in range(3):  # three runs: three chances for a listing too early
            run = self.create()
            execs = [self.ok("Exec", pb.ExecRequest(run_id=run, argv=["/usr/bin/python3", "-c",
                                                                       writer % i]),
                             pb.ExecResponse).exec_id for i in range(3)]
            for ex in execs:  # each one writing before the Teardown
                r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex,
                                                               stream=pb.STDOUT,
                                                               timeout_ms=10000),
                            pb.ReadOutputResponse)
                self.assertEqual(r.data, b"writing\n", r)
            m = self.teardown(run)
            arts = {a.path: a for a in m.artifacts}
            self.assertEqual(sorted(arts), ["w0", "w1", "w2"], m)
            for a in arts.values():
                self.assertIn(a.sha256, [hashlib.sha256(bytes([c]) * a.size).hexdigest()
                                         for c in b"abcdefgh"], a)
            self.assertEqual([e.reason for e in m.execs], [pb.TORN_DOWN] * 3, m)

    # -- the CLI against the real server
    def test_cli_run_reconcile_example(self):
        ex = os.path.join(os.environ["SBX_SOURCE_DIR"], "packaging", "examples", "reconcile")
        out = os.path.join(self.srv.dir, "cli-out")
        r = self.srv.cli("run", "--policy", os.path.join(ex, "policy.json"), "--data", ex,
                         "--out", out, "--", "/usr/bin/python3", "/data/reconcile.py")
        self.assertEqual(r.returncode, 0, r)
        self.assertIn("reconciled 25 ledger entries", r.stdout)
        self.assertEqual(sorted(os.listdir(out)), ["report.csv", "summary.json"])

    def test_cli_scripting_commands(self):
        pol = os.path.join(self.srv.dir, "p.json")
        with open(pol, "w") as f:
            f.write(policy_json(script_seconds=2))
        tok = self.srv.tokens["bob"]
        r = self.srv.cli("create", "--policy", pol, tls=True, token=tok)
        self.assertEqual(r.returncode, 0, r)
        run = r.stdout.strip()
        self.assertRegex(run, r"^run-[0-9a-f]+$")
        r = self.srv.cli("exec", run, "--", "/bin/sh", "-c", "echo hi > /out/h; exit 5",
                         tls=True, token=tok)
        self.assertEqual(r.returncode, 5, r)
        r = self.srv.cli("exec", run, "--", "sleep", "10", tls=True, token=tok)
        self.assertEqual(r.returncode, 124, r)
        r = self.srv.cli("status", run, "--json", tls=True, token=tok)
        self.assertEqual(r.returncode, 0, r)
        self.assertIn('"run_id"', r.stdout)
        r = self.srv.cli("status", run, tls=True, token=self.srv.tokens["alice"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("NOT_FOUND", r.stderr)
        r = self.srv.cli("teardown", run, tls=True, token=tok)
        self.assertEqual(r.returncode, 0, r)
        self.assertIn('"artifacts"', r.stdout)

    # Names a script chose, as the CLI prints them: one escaped line each.
    HOSTILE = ["a\nforged line", "esc\x1b[31mred", "rtl\u202efdp.exe", "back\\x0aslash",
               "del\x7f\u0085"]
    SHOWN = ["a\\x0aforged line", "esc\\x1b[31mred", "rtl\\xe2\\x80\\xaefdp.exe",
             "back\\\\x0aslash", "del\\x7f\\xc2\\x85"]

    def cli_run(self):
        pol = os.path.join(self.srv.dir, "p.json")
        with open(pol, "w") as f:
            f.write(policy_json())
        r = self.srv.cli("create", "--policy", pol)
        self.assertEqual(r.returncode, 0, r)
        run = r.stdout.strip()
        # A failed check must not leave the run (and its execs) to later tests.
        self.addCleanup(self.srv.cli, "teardown", run)
        return run

    def test_cli_prints_hostile_names_as_one_escaped_line_each(self):
        run = self.cli_run()
        code = "import sys\nfor n in sys.argv[1:]: open('/out/' + n, 'w').write('x')\n"
        r = self.srv.cli("exec", run, "--", "/usr/bin/python3", "-c", code, *self.HOSTILE)
        self.assertEqual(r.returncode, 0, r)
        r = self.srv.cli("artifacts", run)
        self.assertEqual(r.returncode, 0, r)
        lines = r.stdout.split("\n")
        self.assertEqual(lines[-1], "")
        self.assertEqual(len(lines) - 1, len(self.HOSTILE), r.stdout)  # no forged line
        names = [re.fullmatch(r" *\d+  0\d{3}  [0-9a-f]{64}  (.*)", l).group(1)
                 for l in lines[:-1]]
        self.assertEqual(sorted(names), sorted(self.SHOWN))
        for raw in ("\x1b", "\u202e", "\x7f", "\u0085"):
            self.assertNotIn(raw, r.stdout + r.stderr)
        # JSON stays JSON, with the true names (shown as \u escapes).
        r = self.srv.cli("artifacts", run, "--json")
        self.assertEqual(sorted(a["path"] for a in json.loads(r.stdout)["artifacts"]),
                         sorted(self.HOSTILE))
        self.assertNotIn("\u202e", r.stdout)
        # A script chooses its argv: status prints it escaped, on one line.
        r = self.srv.cli("status", run)
        self.assertEqual(r.returncode, 0, r)
        argv_line = [l for l in r.stdout.split("\n") if "/usr/bin/python3" in l]
        self.assertEqual(len(argv_line), 1, r.stdout)
        for shown in self.SHOWN:
            self.assertIn(shown, argv_line[0])
        self.assertNotIn("\x1b", r.stdout)
        r = self.srv.cli("teardown", run)
        self.assertEqual(r.returncode, 0, r)
        self.assertNotIn("\u202e", r.stdout)
        self.assertEqual(sorted(a["path"] for a in json.loads(r.stdout)["artifacts"]),
                         sorted(self.HOSTILE))

    def test_cli_says_a_live_listing_is_not_final_and_a_change_is_not_corruption(self):
        run = self.cli_run()
        # Rewrites /out/f as fast as it can through a shared mapping, which
        # changes no time stamp once the page is in: every read sees new bytes.
        writer = ("import mmap\nf = open('/out/f', 'w+b')\nf.write(b'0' * 20)\nf.flush()\n"
                  "m = mmap.mmap(f.fileno(), 20)\ni = 0\n"
                  "while True:\n    m[0:20] = b'%020d' % i; i += 1\n")
        r = self.srv.cli("exec", "--no-wait", run, "--", "/usr/bin/python3", "-c", writer)
        self.assertEqual(r.returncode, 0, r)
        deadline = time.time() + 20
        while time.time() < deadline:
            r = self.srv.cli("artifacts", run)
            if r.stdout.endswith("  f\n"):
                break
            time.sleep(0.1)
        self.assertEqual(r.returncode, 0, r)
        self.assertIn("live: an exec is running; digests are not final", r.stderr)
        dest = os.path.join(self.srv.dir, "live-f")
        r = self.srv.cli("fetch", run, "f", dest)
        self.assertEqual(r.returncode, 0, r)
        with open(dest, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        self.assertIn("f: live: an exec is running; sha256 %s is of the bytes fetched, not final"
                      % digest, r.stderr)
        # The file changed between the listing and the fetch: said as what
        # it is, not as corruption (DATA_LOSS), and no file is left. On a
        # loaded machine the writer may not get the CPU between the two, and
        # then the fetch rightly succeeds: try again (a new directory each
        # time) until it did change, a few times at most.
        for attempt in range(10):
            out = os.path.join(self.srv.dir, "live-all-%d" % attempt)
            r = self.srv.cli("fetch", run, "--all", out)
            if r.returncode != 0:
                break
            self.assertIn("live: an exec is running; digests are not final", r.stderr)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("live: an exec is running; digests are not final", r.stderr)
        self.assertIn("ABORTED: f: changed since it was listed", r.stderr)
        self.assertIn("fetch it again when the run's execs have ended", r.stderr)
        self.assertNotIn("DATA_LOSS", r.stderr)
        self.assertEqual(os.listdir(out), [])
        r = self.srv.cli("teardown", run)
        self.assertEqual(r.returncode, 0, r)


if __name__ == "__main__":
    unittest.main(verbosity=2)
