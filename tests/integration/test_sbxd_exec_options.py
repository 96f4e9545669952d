# SPDX-License-Identifier: Apache-2.0
"""An exec's own options, against a real sbxd: env set over the policy's
(reaching the program and the manifest), HOME, the bounds on env refused
with nothing started, cwd recorded and a missing one named, a per-exec
timeout that ends the exec TIMEOUT and may not exceed script_seconds,
stdin streamed by WriteStdin (several MiB arrive whole; a sandbox that never
reads does not hold up sbxd; the mistakes a caller can make are refused
clearly), and output past output_kb that keeps its head and its end with
the one gap counted exactly."""
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import unittest

from sbxdfix import CLI, POLICY, ServerTestCase
from sbxrpc import policy_pb2
from sbxrpc import sandbox_pb2 as pb

PY = "/usr/bin/python3"


def policy(env=None, **limits):
    p = json.loads(json.dumps(POLICY))
    p["limits"].update(limits)
    if env is not None:
        p["env"] = env
    return json.dumps(p)


class Fixture(ServerTestCase):
    def setUp(self):
        self.c = self.srv.conn()
        self.runs = []

    def tearDown(self):
        for run in self.runs:
            self.c.call("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
        self.c.close()

    def ok(self, name, req, resp_type, conn=None, token=None):
        code, msg, resp = (conn or self.c).call(name, req, resp_type, token=token)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def refused(self, name, req, resp_type, code, *words, conn=None, token=None):
        got, msg, _ = (conn or self.c).call(name, req, resp_type, token=token)
        self.assertEqual(got, code, msg)
        for w in words:
            self.assertIn(w, msg)
        return msg

    def create(self, env=None, **limits):
        run = self.ok("CreateRun", pb.CreateRunRequest(policy_json=policy(env, **limits)),
                      pb.CreateRunResponse).run_id
        self.runs.append(run)
        return run

    def start(self, run, argv, **kw):
        return self.ok("Exec", pb.ExecRequest(run_id=run, argv=argv, **kw),
                       pb.ExecResponse).exec_id

    def wait(self, run, ex, timeout_ms=30000):
        return self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=timeout_ms),
                       pb.WaitResponse).status

    def output(self, run, ex, stream=pb.STDOUT):
        """The whole stream as served: (bytes, dropped, where the gap was)."""
        data, dropped, gap_at, off = b"", 0, None, 0
        while True:
            r = self.ok("ReadOutput", pb.ReadOutputRequest(
                run_id=run, exec_id=ex, stream=stream, offset=off, max_bytes=1 << 20,
                timeout_ms=10000), pb.ReadOutputResponse)
            if r.dropped:
                self.assertIsNone(gap_at, "a second gap")
                gap_at, dropped = len(data), r.dropped
            self.assertEqual(r.next_offset, off + r.dropped + len(r.data))
            data += r.data
            off = r.next_offset
            if r.eof:
                return data, dropped, gap_at

    def execs_run(self, run):
        st = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        return len(st.execs)



class ExecOptions(Fixture):
    # -- env, HOME, cwd --

    def test_env_reaches_the_program_and_the_manifest(self):
        run = self.create(env={"A": "policy", "B": "kept", "HOME": "/out"})
        ex = self.start(run, ["/usr/bin/env"], env=[policy_pb2.EnvVar(name="A", value="exec"),
                                                    policy_pb2.EnvVar(name="C", value="x=y")])
        st = self.wait(run, ex)
        self.assertEqual(pb.ExitReason.Name(st.reason), "EXITED", st)
        env = dict(line.split("=", 1) for line in self.output(run, ex)[0].decode().splitlines())
        self.assertEqual(env, {"A": "exec", "B": "kept", "C": "x=y", "HOME": "/out"})
        self.assertEqual([(e.name, e.value) for e in st.env], [("A", "exec"), ("C", "x=y")])
        self.assertEqual(st.cwd, "/out")
        m = self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse).manifest
        self.runs.remove(run)
        self.assertEqual([(e.name, e.value) for e in m.execs[0].env],
                         [("A", "exec"), ("C", "x=y")])

    def test_home_is_tmp_unless_the_policy_or_the_exec_says(self):
        run = self.create()
        ex = self.start(run, ["/bin/sh", "-c", 'printf "%s|" "$HOME"; pwd'])
        self.wait(run, ex)
        self.assertEqual(self.output(run, ex)[0], b"/tmp|/out\n")
        ex = self.start(run, ["/bin/sh", "-c", 'printf "%s|" "$HOME"; pwd'], cwd="/tmp",
                        env=[policy_pb2.EnvVar(name="HOME", value="/data")])
        self.assertEqual(self.wait(run, ex).cwd, "/tmp")
        self.assertEqual(self.output(run, ex)[0], b"/data|/tmp\n")

    def test_bad_env_is_refused_naming_the_entry_and_nothing_starts(self):
        run = self.create()
        E = policy_pb2.EnvVar
        cases = [
            ([E(name="", value="v")], "env[0]", "empty"),
            ([E(name="OK", value="1"), E(name="A=B", value="v")], "env[1]", "'='"),
            ([E(name="X", value="1"), E(name="X", value="2")], "env[1]", "twice"),
            ([E(name="V%d" % i, value="") for i in range(257)], "env:", "256"),
            ([E(name="V%d" % i, value="v" * 8000) for i in range(9)], "env:", "65536"),
        ]
        for env, *words in cases:
            self.refused("Exec", pb.ExecRequest(run_id=run, argv=["/bin/true"], env=env),
                         pb.ExecResponse, "INVALID_ARGUMENT", *words)
        self.assertEqual(self.execs_run(run), 0)

    def test_a_missing_cwd_fails_the_exec_naming_it(self):
        run = self.create()
        ex = self.start(run, ["/bin/true"], cwd="/out/nowhere")
        st = self.wait(run, ex)
        self.assertEqual(pb.ExitReason.Name(st.reason), "SETUP_FAILED", st)
        self.assertIn("/out/nowhere", st.message)
        self.assertEqual(st.cwd, "/out/nowhere")

    # -- timeout --

    def test_timeout_ends_the_exec_and_may_not_exceed_script_seconds(self):
        run = self.create(script_seconds=30)
        self.refused("Exec", pb.ExecRequest(run_id=run, argv=["/bin/true"], timeout_seconds=31),
                     pb.ExecResponse, "INVALID_ARGUMENT", "timeout_seconds: 31",
                     "script_seconds (30)")
        self.assertEqual(self.execs_run(run), 0)
        ex = self.start(run, ["/bin/sleep", "25"], timeout_seconds=1)
        st = self.wait(run, ex)
        self.assertEqual(pb.ExitReason.Name(st.reason), "TIMEOUT", st)
        self.assertEqual(st.timeout_seconds, 1)
        # It ended at its own deadline, far before script_seconds.
        self.assertLess(st.ended_unix_ms - st.started_unix_ms, 25000)
        ex = self.start(run, ["/bin/true"])
        self.assertEqual(self.wait(run, ex).timeout_seconds, 30)

    # -- streamed stdin --

    def write_all(self, run, ex, data, chunk=1 << 20, eof=True):
        off = 0
        deadline = time.monotonic() + 120  # a hang bound
        while off < len(data) or eof:
            part = data[off:off + chunk]
            last = eof and off + len(part) == len(data)
            r = self.ok("WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id=ex, offset=off,
                                                           data=part, eof=last),
                        pb.WriteStdinResponse)
            self.assertGreaterEqual(r.accepted, off)
            if last and r.accepted == len(data):
                return
            if r.accepted == off:
                time.sleep(0.01)
            off = r.accepted
            self.assertLess(time.monotonic(), deadline)

    def test_streamed_stdin_of_several_mib_arrives_whole(self):
        run = self.create()
        data = os.urandom(6 << 20)
        ex = self.start(run, [PY, "-c", "import hashlib, sys; "
                              "print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"],
                        stdin_stream=True)
        self.write_all(run, ex, data)
        st = self.wait(run, ex)
        self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code), ("EXITED", 0), st)
        self.assertEqual(self.output(run, ex)[0].decode().strip(),
                         hashlib.sha256(data).hexdigest())

    def test_a_sandbox_that_never_reads_stdin_holds_up_nobody(self):
        run = self.create()
        ex = self.start(run, ["/bin/sleep", "60"], stdin_stream=True)
        chunk = os.urandom(1 << 20)
        off = 0
        for _ in range(8):  # far more than the pipe holds
            r = self.ok("WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id=ex, offset=off,
                                                           data=chunk), pb.WriteStdinResponse)
            off = r.accepted
        self.assertLess(off, 8 << 20)  # it took only what fits
        # Meanwhile another caller's calls are answered while this one keeps
        # pushing at the full pipe.
        stop = threading.Event()

        def push():
            with self.srv.conn() as c:
                while not stop.is_set():
                    c.call("WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id=ex,
                                                              offset=off, data=chunk),
                           pb.WriteStdinResponse)
        threads = [threading.Thread(target=push) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            with self.srv.conn(tls=True) as other:
                tok = self.srv.tokens["bob"]
                for _ in range(5):
                    self.ok("Health", pb.HealthRequest(), pb.HealthResponse, conn=other,
                            token=tok)
                r2 = self.ok("CreateRun", pb.CreateRunRequest(policy_json=policy()),
                             pb.CreateRunResponse, conn=other, token=tok).run_id
                e2 = self.ok("Exec", pb.ExecRequest(run_id=r2, argv=["/bin/true"]),
                             pb.ExecResponse, conn=other, token=tok).exec_id
                st = self.ok("Wait", pb.WaitRequest(run_id=r2, exec_id=e2, timeout_ms=30000),
                             pb.WaitResponse, conn=other, token=tok).status
                self.assertEqual(pb.ExitReason.Name(st.reason), "EXITED")
                # and bob cannot write to alice's exec
                self.refused("WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id=ex,
                                                                offset=off, data=b"x"),
                             pb.WriteStdinResponse, "NOT_FOUND", conn=other, token=tok)
                self.ok("Teardown", pb.TeardownRequest(run_id=r2), pb.TeardownResponse,
                        conn=other, token=tok)
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.ok("Signal", pb.SignalRequest(run_id=run, exec_id=ex), pb.SignalResponse)
        self.wait(run, ex)
        # The exec's end closed its stdin.
        self.refused("WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id=ex, offset=off,
                                                        data=b"x"),
                     pb.WriteStdinResponse, "FAILED_PRECONDITION", "ended")

    def test_stdin_mistakes_are_refused_clearly(self):
        run = self.create()
        plain = self.start(run, ["/bin/cat"])
        self.refused("WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id=plain, data=b"x"),
                     pb.WriteStdinResponse, "FAILED_PRECONDITION", "not streamed")
        self.refused("Exec", pb.ExecRequest(run_id=run, argv=["/bin/cat"], stdin=b"x",
                                            stdin_stream=True),
                     pb.ExecResponse, "INVALID_ARGUMENT", "stdin", "stdin_stream")
        ex = self.start(run, [PY, "-c", "import sys; print(len(sys.stdin.buffer.read()))"],
                        stdin_stream=True)
        self.refused("WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id=ex,
                                                        data=b"x" * ((1 << 20) + 1)),
                     pb.WriteStdinResponse, "INVALID_ARGUMENT", "data")
        self.assertEqual(self.ok("WriteStdin", pb.WriteStdinRequest(
            run_id=run, exec_id=ex, data=b"abc"), pb.WriteStdinResponse).accepted, 3)
        self.refused("WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id=ex, offset=1,
                                                        data=b"bc"),
                     pb.WriteStdinResponse, "FAILED_PRECONDITION", "offset: 1", "3 bytes")
        self.refused("WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id="exec-99",
                                                        offset=3, data=b"d"),
                     pb.WriteStdinResponse, "NOT_FOUND", "exec-99")
        self.ok("WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id=ex, offset=3, eof=True),
                pb.WriteStdinResponse)
        self.refused("WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id=ex, offset=3,
                                                        data=b"d"),
                     pb.WriteStdinResponse, "FAILED_PRECONDITION", "already ended")
        self.wait(run, ex)
        self.assertEqual(self.output(run, ex)[0], b"3\n")

    # -- output that keeps the end --

    def test_long_output_keeps_head_and_tail_with_the_gap_counted(self):
        run = self.create(output_kb=64)
        ex = self.start(run, [PY, "-c", "import sys\n"
                              "for i in range(100000): sys.stdout.write('line %d\\n' % i)\n"
                              "sys.stdout.write('the end')"])
        st = self.wait(run, ex)
        produced = b"".join(b"line %d\n" % i for i in range(100000)) + b"the end"
        self.assertEqual(st.stdout_bytes, len(produced))
        data, dropped, gap_at = self.output(run, ex)
        self.assertEqual(dropped, st.stdout_dropped)
        self.assertEqual(len(data) + dropped, len(produced))  # head + dropped + tail
        self.assertEqual(gap_at, 32 << 10)
        self.assertEqual(data[:gap_at], produced[:gap_at])
        self.assertEqual(data[gap_at:], produced[gap_at + dropped:])
        self.assertTrue(data.endswith(b"line 99999\nthe end"))
        self.assertTrue(st.stdout_truncated)
        self.assertEqual(st.stdout_cut, "")

    def test_a_follower_that_keeps_up_gets_every_byte(self):
        run = self.create(output_kb=512)
        # 1 MiB in pieces the reader can follow: the ring (256 KiB) holds
        # 32 of them, 1.6 s of slack for the reader.
        ex = self.start(run, [PY, "-c", "import sys, time\n"
                              "for i in range(128):\n"
                              "    sys.stdout.write(str(i % 10) * 8192); sys.stdout.flush()\n"
                              "    time.sleep(0.05)\n"])
        data, dropped, _ = self.output(run, ex)
        st = self.wait(run, ex)
        self.assertEqual(dropped, 0)
        self.assertEqual(data, b"".join(b"%d" % (i % 10) * 8192 for i in range(128)))
        self.assertEqual(st.stdout_dropped, (1 << 20) - (512 << 10))  # sbxd kept 512 KiB


class CliExecOptions(Fixture):
    """sbxctl exec's flags for the same options, its streamed stdin, and the
    gap's notice on a line of its own."""

    def sbxctl(self, *args, input=None, merged=False):
        e = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        return subprocess.run([CLI, "--endpoint", self.srv.ipc, *args], input=input,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                              timeout=300, env=e)

    def test_sbxctl_exec_env_cwd_timeout(self):
        run = self.create(env={"A": "policy"}, script_seconds=30)
        r = self.sbxctl("exec", "--env", "A=exec", "-e", "B=2", "--cwd", "/tmp", run,
                        "/bin/sh", "-c", 'echo "$A $B $HOME"; pwd')
        self.assertEqual(r.returncode, 0, r)
        self.assertEqual(r.stdout, b"exec 2 /tmp\n/tmp\n")
        r = self.sbxctl("exec", "--timeout", "1", run, "/bin/sleep", "20")
        self.assertEqual(r.returncode, 124, r)
        r = self.sbxctl("exec", "--timeout", "31", run, "/bin/true")
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn(b"script_seconds (30)", r.stderr)

    def test_sbxctl_streams_its_stdin(self):
        run = self.create()
        data = os.urandom(5 << 20)
        r = self.sbxctl("exec", run, PY, "-c", "import hashlib, sys; "
                        "print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())", input=data)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.decode().strip(), hashlib.sha256(data).hexdigest())

    def test_sbxctl_shows_the_gap_on_a_line_of_its_own(self):
        run = self.create(output_kb=64)
        job = [PY, "-c", "import sys\n"
               "for i in range(100000): sys.stdout.write('progress %d\\n' % i)\n"
               "sys.stdout.write('progres')"]
        produced = sum(len(b"progress %d\n" % i) for i in range(100000)) + len(b"progres")
        # A follower that kept up was shown every byte (sbxd's record
        # still lost its middle): sbxctl then says so last, and no gap.
        kept_up = (b"sbxctl: all of the exec's stdout was shown here; sbxd's record of it "
                   b"keeps its head and its tail (policy limits.output_kb)")
        # Where a terminal shows both: every notice is a line of its own.
        r = self.sbxctl("exec", run, *job, merged=True)
        self.assertEqual(r.returncode, 0, r.stdout[-500:])
        shown = r.stdout[:-len(kept_up) - 2] if r.stdout.endswith(b"\n" + kept_up + b"\n") \
            else r.stdout
        self.assertTrue(shown.endswith(b"progress 99999\nprogres"), r.stdout[-200:])
        for line in shown.split(b"\n"):
            if b"sbxctl" in line:
                self.assertRegex(line, rb"^sbxctl: \d+ bytes of the exec's stdout dropped here "
                                 rb"\(policy limits.output_kb keeps its head and its tail\)$")
        # Apart: what was shown and the gaps it says it skipped are all
        # the job wrote (a follower that fell behind may skip more than
        # one stretch; sbxd's record has one gap).
        r = self.sbxctl("exec", run, *job)
        self.assertEqual(r.returncode, 0, r)
        notes = [line for line in r.stderr.split(b"\n") if line.startswith(b"sbxctl: ")]
        gaps = [int(line.split()[1]) for line in notes if b" dropped here " in line]
        # Fell behind: one note per stretch skipped, nothing else; kept up:
        # the record's loss said once.
        if gaps:
            self.assertEqual(len(gaps), len(notes), r.stderr)
        else:
            self.assertEqual(notes, [kept_up], r.stderr)
        self.assertEqual(len(r.stdout) + sum(gaps), produced)
        self.assertTrue(r.stdout.endswith(b"progress 99999\nprogres"))

class PythonPassThrough(Fixture):
    """The raw Python client's pass-throughs: start(env=, cwd=, timeout=,
    stdin_stream=), write_stdin, and a stream's dropped counts."""

    def client(self):
        source = os.environ.get("SBX_SOURCE_DIR",
                                os.path.join(os.path.dirname(__file__), "..", ".."))
        build = os.path.dirname(os.environ.get("SBX_PYTHON_PROTO", "").rstrip("/"))
        sys.path[:0] = [os.path.join(source, "clients", "python"),
                        os.path.join(build, "clients", "python")]
        import sbx_client
        return sbx_client.connect(self.srv.ipc)

    def test_start_env_cwd_timeout_and_write_stdin(self):
        with self.client() as c, c.create_run(policy(output_kb=64)) as run:
            p = run.start(["/bin/sh", "-c", 'echo "$X $HOME"; pwd; wc -c'], cwd="/tmp",
                          env={"X": "1"}, timeout=20, stdin_stream=True)
            self.assertEqual(p.write_stdin(b"abc", 0), 3)
            self.assertEqual(p.write_stdin(b"de", 3, eof=True), 5)
            res = p.wait()
            self.assertEqual(res.stdout, b"1 /tmp\n/tmp\n5\n")
            self.assertEqual(res.raw.timeout_seconds, 20)
            self.assertEqual([(e.name, e.value) for e in res.raw.env], [("X", "1")])
            s = run.stream([PY, "-c", "print('x' * 200000)"])
            got = b"".join(d for n, d in s if n == "stdout")
            self.assertEqual(len(got) + s.dropped["stdout"], 200001)
            self.assertEqual(s.result.raw.stdout_dropped, 200001 - (64 << 10))


class StdinPipeBound(Fixture):
    """The host-wide bound on streamed stdins' enlarged pipes
    (RUN_STDIN_HOST_BYTES) against a caller that takes all of it: the
    kernel counts every pipe sbxd makes against one per-user soft limit
    (fs.pipe-user-pages-soft, 64 MiB by default), past which each new pipe
    gets 2 pages; the budget must leave the rest of sbxd's pipes theirs."""

    def hold_the_budget(self, eof=False):
        # 64 streamed stdins: more than the host's budget of enlarged pipes.
        for _ in range(4):
            run = self.create()
            for _ in range(16):
                ex = self.start(run, ["/bin/sleep", "60"], stdin_stream=True)
                if eof:
                    self.ok("WriteStdin", pb.WriteStdinRequest(run_id=run, exec_id=ex, eof=True),
                            pb.WriteStdinResponse)

    def first_line(self, run, ex, conn=None, token=None):
        r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex, stream=pb.STDOUT,
                                                       timeout_ms=20000), pb.ReadOutputResponse,
                    conn=conn, token=token)
        return r.data

    def test_one_callers_stdins_leave_another_callers_pipes_whole(self):
        self.check_another_callers_pipes(eof=False)

    def test_stdins_ended_by_eof_still_count_while_their_command_lives(self):
        # eof closes sbxd's end, but the pipe (its pages sbxd's) lives on
        # with the command's end until the exec ends.
        self.check_another_callers_pipes(eof=True)

    def check_another_callers_pipes(self, eof):
        self.hold_the_budget(eof)
        with self.srv.conn(tls=True) as other:
            tok = self.srv.tokens["bob"]
            run = self.ok("CreateRun", pb.CreateRunRequest(policy_json=policy()),
                          pb.CreateRunResponse, conn=other, token=tok).run_id
            try:
                ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=[
                    PY, "-c", "import fcntl; print(fcntl.fcntl(1, 1032), flush=True)"]),
                    pb.ExecResponse, conn=other, token=tok).exec_id
                # bob's stdout pipe has the kernel's default size (64 KiB)
                self.assertEqual(self.first_line(run, ex, other, tok), b"65536\n")
            finally:
                self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse,
                        conn=other, token=tok)


    def test_a_sandbox_enlarging_its_stdin_pipe_gets_no_more_queued(self):
        # The pipe's pages are the writer's (sbxd's): a sandbox that
        # enlarges its end (F_SETPIPE_SZ on fd 0) must not make sbxd queue
        # more than the size it granted, or the budget means nothing.
        self.hold_the_budget()
        run = self.create()
        ex = self.start(run, [PY, "-c", "import fcntl, time\n"
                              "print(fcntl.fcntl(0, 1031, 1 << 20), flush=True)\n"
                              "time.sleep(60)\n"], stdin_stream=True)
        self.assertEqual(self.first_line(run, ex), b"%d\n" % (1 << 20))  # it did enlarge it
        off = 0
        for _ in range(4):
            off = self.ok("WriteStdin", pb.WriteStdinRequest(
                run_id=run, exec_id=ex, offset=off, data=os.urandom(1 << 20)),
                pb.WriteStdinResponse).accepted
        # past the budget a pipe is granted the kernel's default (64 KiB)
        self.assertGreater(off, 0)
        self.assertLessEqual(off, 64 << 10)


if __name__ == "__main__":
    unittest.main()
