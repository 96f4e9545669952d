# SPDX-License-Identifier: Apache-2.0
"""The Python client (clients/python, package sbx_client) against the real
sbxd over ipc and TLS: the whole API, status codes as exceptions, the
reconciliation example giving what the C client's `run` gives, sha256
verification, REQ's resends and request ids making retries happen once,
reconnects, `python3 -m sbx_client run`, and pip installing it into a venv."""
import asyncio
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from sbxdfix import POLICY, Server, ServerTestCase, free_port, policy_json

SOURCE = os.environ.get("SBX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
PKG_SRC = os.path.join(SOURCE, "clients", "python")
# <build>/python holds the tests' own generated modules; the client's are in
# <build>/clients/python/sbx_client/_pb (built by CMake).
BUILD = os.path.dirname(os.environ.get("SBX_PYTHON_PROTO", "").rstrip("/"))
PKG_GEN = os.path.join(BUILD, "clients", "python")
sys.path[:0] = [PKG_SRC, PKG_GEN]
import sbx_client  # noqa: E402

EXAMPLE = os.path.join(SOURCE, "packaging", "examples", "reconcile")
PY = "/usr/bin/python3"


def sh(script):
    return ["/bin/sh", "-c", script]


class ClientCalls:
    """The whole API; a subclass says how to connect (ipc or TLS)."""

    def connect(self, **kw):
        raise NotImplementedError

    def test_health_names_the_caller(self):
        with self.connect() as c:
            h = c.health()
        self.assertTrue(h.userns and h.seccomp, h)
        self.assertEqual(h.identity, self.IDENTITY)
        self.assertIn(h.cgroup, ("v1", "v2"))

    def test_inputs_exec_result_and_teardown_on_leaving_the_block(self):
        local = os.path.join(self.srv.dir, "local-%s.csv" % self.NAME)
        big = os.urandom(3 * (1 << 20) + 17)  # four PutInput chunks
        with open(local, "wb") as f:
            f.write(big)
        with self.connect() as c:
            with c.create_run(POLICY, labels={"who": self.NAME},
                              inputs={"/data/x.csv": b"id,amount\n1,10\n", "sub/big.bin": local}) \
                    as run:
                self.assertRegex(run.id, r"^run-[0-9a-f]+$")
                self.assertTrue(run.policy_digest.startswith("sha256:"))
                self.assertEqual(run.effective_policy.limits.memory_mb, 256)
                res = run.exec(sh("cat /data/x.csv; sha256sum /data/sub/big.bin >&2; "
                                  "echo made > /out/r.txt; exit 3"))
                self.assertEqual((res.reason, res.exit_code, res.returncode), ("exited", 3, 3))
                self.assertFalse(res.ok)
                self.assertEqual(res.stdout, b"id,amount\n1,10\n")
                self.assertEqual(res.stderr.split()[0].decode(), hashlib.sha256(big).hexdigest())
                self.assertFalse(res.stdout_truncated or res.stderr_truncated)
                self.assertGreater(res.usage.peak_memory_bytes, 0)
                self.assertGreaterEqual(res.usage.wall_ms, 0)
                self.assertGreaterEqual(res.usage.cpu_ms, 0)
                # stdin and cwd
                res = run.exec(["/bin/sh", "-c", "pwd; cat"], stdin=b"from stdin", cwd="/tmp")
                self.assertEqual(res.stdout, b"/tmp\nfrom stdin")
                runs = {r.run_id: r for r in c.list_runs()}
                self.assertEqual(runs[run.id].labels, {"who": self.NAME})
                self.assertEqual(runs[run.id].execs, 2)
                st = run.status()
                self.assertEqual(st.state, "active")
                self.assertEqual([e.exit_code for e in st.execs], [3, 0])
                self.assertEqual(st.labels, {"who": self.NAME})
            m = run.manifest
            self.assertIsNotNone(m, "leaving the with block tears the run down")
            self.assertEqual(m.run_id, run.id)
            self.assertEqual(sorted(i.path for i in m.inputs), ["sub/big.bin", "x.csv"])
            self.assertEqual([a.path for a in m.artifacts], ["r.txt"])
            self.assertEqual(len(m.execs), 2)
            self.assertEqual(m.to_dict()["run_id"], run.id)
            self.assertNotIn(run.id, [r.run_id for r in c.list_runs()])
            with self.assertRaises(sbx_client.NotFound):
                run.status()

    def test_check_raises_a_typed_error_with_the_result(self):
        with self.connect() as c, c.create_run(POLICY) as run:
            self.assertTrue(run.exec(["/bin/true"], check=True).ok)
            with self.assertRaises(sbx_client.CommandError) as e:
                run.exec(sh("echo no >&2; exit 7"), check=True)
            self.assertEqual(e.exception.result.exit_code, 7)
            self.assertEqual(e.exception.result.stderr, b"no\n")
            self.assertIsInstance(e.exception, sbx_client.SbxError)
            # A command that is not there: the exec reports why, no exception.
            res = run.exec(["/no/such/command"])
            self.assertFalse(res.ok)
            self.assertNotEqual(res.returncode, 0)

    def test_stream_yields_while_the_command_runs(self):
        with self.connect() as c, c.create_run(POLICY) as run:
            s = run.stream(sh("for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.4; done; "
                              "exit 4"))
            t0 = time.monotonic()
            got = []
            for name, data in s:
                got.append((name, data, time.monotonic() - t0))
            out = b"".join(d for n, d, _ in got if n == "stdout")
            err = b"".join(d for n, d, _ in got if n == "stderr")
            self.assertEqual(out, b"out1\nout2\nout3\n")
            self.assertEqual(err, b"err1\nerr2\nerr3\n")
            # Yielded while the command ran, not all at its end: the first
            # line (before the first 0.4 s sleep) and the last (after the
            # second) arrived at least those 0.8 s apart, less a margin for
            # the clock; gathered at the end, they arrive together. A busy
            # machine only spreads them further.
            self.assertGreater(got[-1][2] - got[0][2], 0.7, got)
            self.assertEqual((s.result.reason, s.result.exit_code), ("exited", 4))
            self.assertEqual(s.result.stdout, out)

    def test_artifacts_and_fetch_to_a_path_a_file_and_bytes(self):
        payload = os.urandom((1 << 20) * 2 + 5)  # three FetchArtifact chunks
        with self.connect() as c, c.create_run(POLICY, inputs={"/data/p.bin": payload}) as run:
            run.exec(sh("mkdir -p /out/d && cp /data/p.bin /out/d/p.bin && echo hi > /out/h && "
                        "chmod 600 /out/h && ln -s /etc/passwd /out/link"), check=True)
            arts = run.artifacts()
            self.assertFalse(arts.live)
            by = arts.by_path()
            self.assertEqual(sorted(by), ["d/p.bin", "h"])  # the link is skipped
            self.assertEqual(arts.skipped, 1)
            self.assertEqual(by["d/p.bin"].size, len(payload))
            self.assertEqual(by["d/p.bin"].sha256, hashlib.sha256(payload).hexdigest())
            self.assertEqual(by["h"].mode & 0o777, 0o600)
            dest = os.path.join(self.srv.dir, "fetched-%s.bin" % self.NAME)
            f = run.fetch("/out/d/p.bin", dest, sha256=by["d/p.bin"].sha256)
            self.assertEqual((f.size, f.sha256, f.live), (len(payload), by["d/p.bin"].sha256,
                                                          False))
            with open(dest, "rb") as got:
                self.assertEqual(got.read(), payload)
            bio = io.BytesIO()
            run.fetch("h", bio)
            self.assertEqual(bio.getvalue(), b"hi\n")
            self.assertEqual(run.fetch("h").data, b"hi\n")
            with self.assertRaises(sbx_client.NotFound):
                run.fetch("nothing-here")
            with self.assertRaises(sbx_client.SbxError):
                run.fetch("link")  # never follows a link

    def test_fetch_to_a_path_never_opens_the_umask_to_others(self):
        """The umask is per process: fetch used to read it as os.umask(0) and
        back, and another thread making a file in between got it
        world-writable (review 2). Every umask fetch sets must keep o+w."""
        set_to = []
        real = os.umask

        def spy(mask):
            set_to.append(mask)
            return real(mask)
        with self.connect() as c, c.create_run(POLICY) as run:
            run.exec(sh("echo hi > /out/h"), check=True)
            dest = os.path.join(self.srv.dir, "umask-%s.txt" % self.NAME)
            os.umask = spy
            try:
                run.fetch("h", dest)
            finally:
                os.umask = real
            self.assertEqual([m for m in set_to if not m & 0o002], [])
            with open(dest) as got:
                self.assertEqual(got.read(), "hi\n")

    def test_put_declared_inputs_and_what_sbxd_refuses(self):
        data = b"late input\n"
        with self.connect() as c, c.create_run(POLICY, inputs={"/data/late.txt": data},
                                               upload=False) as run:
            with self.assertRaises(sbx_client.InvalidArgument):
                run.put("/data/late.txt", b"other bytes")  # not what was declared
            run.put("/data/late.txt", data)
            self.assertEqual(run.exec(["cat", "/data/late.txt"]).stdout, data)
            with self.assertRaises(sbx_client.FailedPrecondition) as e:
                run.put("/data/late.txt", data)
            self.assertIn("already complete", e.exception.message)  # /data only grows
            # A file the manifest did not name, between execs: declared by
            # its first chunk, with its mode.
            run.put("/data/bin/tool.sh", b"#!/bin/sh\necho tool ran\n", mode=0o755)
            self.assertEqual(run.exec(["/data/bin/tool.sh"]).stdout, b"tool ran\n")
            with self.assertRaises(sbx_client.InvalidArgument) as e:
                run.put("/data/suid", b"x", mode=0o4755)
            self.assertIn("mode", e.exception.message)

    def test_signal_ends_an_exec(self):
        with self.connect() as c, c.create_run(POLICY) as run:
            p = run.start(["sleep", "30"])
            self.assertEqual(p.poll(200).reason, sbx_client.sandbox_pb2.RUNNING)
            run.signal(p.exec_id, signal.SIGTERM)
            res = p.wait()
            self.assertEqual((res.reason, res.signal, res.returncode),
                             ("signaled", signal.SIGTERM, 128 + signal.SIGTERM))

    def test_timeouts_the_policys_and_the_callers(self):
        with self.connect() as c, c.create_run(policy_json(script_seconds=1)) as run:
            res = run.exec(["sleep", "10"])
            self.assertEqual((res.reason, res.returncode), ("timeout", 124))
        with self.connect() as c, c.create_run(POLICY) as run:
            t0 = time.monotonic()
            with self.assertRaises(sbx_client.DeadlineExceeded) as e:
                run.exec(sh("echo started; sleep 20"), timeout=0.5)
            # Ended by the caller's deadline, before the command's own end.
            self.assertLess(time.monotonic() - t0, 20)
            self.assertEqual(e.exception.result.reason, "signaled")
            self.assertEqual(e.exception.result.stdout, b"started\n")

    def test_a_bad_policy_is_invalid_argument_naming_the_json_path(self):
        with self.connect() as c:
            with self.assertRaises(sbx_client.InvalidArgument) as e:
                c.create_run(policy_json(memory_mb=1))
            self.assertIn("limits.memory_mb", e.exception.message)
            self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
            self.assertIsInstance(e.exception, ValueError)
            with self.assertRaises(sbx_client.InvalidArgument) as e:
                c.create_run({**POLICY, "colour": "red"})
            self.assertIn("colour", e.exception.message)
            path = os.path.join(self.srv.dir, "policy-%s.json" % self.NAME)
            with open(path, "w") as f:
                f.write(policy_json())
            with c.create_run(path) as run:  # a path to a policy file works
                self.assertTrue(run.exec(["/bin/true"]).ok)

    def test_another_identitys_run_is_not_found(self):
        with self.connect() as c, c.create_run(POLICY) as run:
            p = run.start(["sleep", "5"])
            with self.other() as o:
                theirs = o.run(run.id)
                for call in (theirs.status, theirs.artifacts, lambda: theirs.exec(["true"]),
                             lambda: theirs.fetch("x"), lambda: theirs.signal(p.exec_id),
                             lambda: theirs.put("/data/x", b"x"), theirs.teardown):
                    with self.assertRaises(sbx_client.NotFound):
                        call()
                self.assertNotIn(run.id, [r.run_id for r in o.list_runs()])
            p.signal()
            self.assertEqual(p.wait().reason, "signaled")

    def test_request_id_makes_a_retried_create_run_happen_once(self):
        with self.connect() as c:
            before = {r.run_id for r in c.list_runs()}
            rid = sbx_client.wire.new_request_id()
            a = c.create_run(POLICY, request_id=rid)
            b = c.create_run(POLICY, request_id=rid)
            try:
                self.assertEqual(a.id, b.id)
                self.assertEqual({r.run_id for r in c.list_runs()} - before, {a.id})
                # Exec too: the same id is one exec.
                e1 = a.start(["/bin/true"], request_id="exec-once-" + self.NAME)
                e2 = a.start(["/bin/true"], request_id="exec-once-" + self.NAME)
                self.assertEqual(e1.exec_id, e2.exec_id)
                e1.wait()
                self.assertEqual(len(a.status().execs), 1)
            finally:
                a.teardown()

    def test_req_resends_change_nothing(self):
        """A resend interval shorter than sbxd's answers: every request goes
        out again on the same connection (same REQ id, same request_id), and
        each run and exec still happens once."""
        with self.connect(resend_interval=0.002) as c:
            before = {r.run_id for r in c.list_runs()}
            runs = [c.create_run(POLICY) for _ in range(3)]
            try:
                for r in runs:
                    r.exec(["/bin/true"])
                    r.exec(["/bin/true"])
                self.assertGreater(c.transport.resends, 0)
                self.assertEqual({r.run_id for r in c.list_runs()} - before,
                                 {r.id for r in runs})
                for r in runs:
                    self.assertEqual(len(r.status().execs), 2)
            finally:
                for r in runs:
                    r.teardown()


class Asyncio(ServerTestCase):
    def test_the_asyncio_flavour_runs_calls_concurrently(self):
        async def main():
            async with sbx_client.aio.connect(self.srv.ipc) as c:
                self.assertEqual((await c.health()).identity, "uid:%d" % os.getuid())
                async with await c.create_run(POLICY, inputs={"/data/a": b"A"}) as run:
                    # Each exec waits (up to 20 s) until all three have
                    # started, in the run's shared /tmp: run one after
                    # another, the first would wait alone and say 1, not 3.
                    barrier = ": > /tmp/at%d; n=0; while set -- /tmp/at*; [ $# -lt 3 ]; do " \
                              "n=$((n+1)); [ $n -ge 200 ] && break; sleep 0.1; done; echo $#; "
                    results = await asyncio.gather(*(
                        run.exec(sh(barrier % i + "cat /data/a; echo %d" % i)) for i in range(3)))
                    self.assertEqual([r.stdout for r in results],
                                     [b"3\nA0\n", b"3\nA1\n", b"3\nA2\n"],
                                     "three execs at once, not one after another")
                    s = run.stream(sh("echo one; sleep 0.3; echo two >&2; exit 2"))
                    got = [item async for item in s]
                    self.assertEqual(got, [("stdout", b"one\n"), ("stderr", b"two\n")])
                    self.assertEqual(s.result.exit_code, 2)
                    arts = await run.artifacts()
                    self.assertEqual(list(arts), [])
                self.assertEqual(run.manifest.run_id, run.id)
                self.assertEqual(await c.list_runs(), [])
        asyncio.run(main())


class OverIpc(ClientCalls, ServerTestCase):
    NAME = "ipc"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.IDENTITY = "uid:%d" % os.getuid()

    def connect(self, **kw):
        return sbx_client.connect(self.srv.ipc, **kw)

    def other(self):
        return sbx_client.connect(self.srv.ipc, token=self.srv.tokens["bob"])


class OverTls(ClientCalls, ServerTestCase):
    NAME = "tls"
    IDENTITY = "token:alice"

    def tls(self, cert="client"):
        return sbx_client.TLS(ca=self.srv.path("ca.pem"), cert=self.srv.path(cert + ".pem"),
                              key=self.srv.path(cert + ".key"))

    def connect(self, **kw):
        return sbx_client.connect(self.srv.tls, token=self.srv.tokens["alice"], tls=self.tls(),
                                  **kw)

    def other(self):
        return sbx_client.connect(self.srv.tls, token=self.srv.tokens["bob"], tls=self.tls())

    def test_authentication_errors(self):
        with sbx_client.connect(self.srv.tls, tls=self.tls()) as c:
            with self.assertRaises(sbx_client.Unauthenticated):
                c.health()
        with sbx_client.connect(self.srv.tls, token="wrong", tls=self.tls()) as c:
            with self.assertRaises(sbx_client.Unauthenticated):
                c.health()
            with self.assertRaises(sbx_client.Unauthenticated):  # a second time, redialed
                c.list_runs()
        # A dict works as tls=, and the certificate and key may be one file.
        with sbx_client.connect(self.srv.tls, token=self.srv.tokens["alice"],
                                tls={"ca": self.srv.path("ca.pem"),
                                     "cert": self.srv.path("client.both.pem")}) as c:
            self.assertEqual(c.health().identity, "token:alice")
        # A certificate from a CA the server does not know: no connection.
        with sbx_client.connect(self.srv.tls, token=self.srv.tokens["alice"],
                                tls=self.tls("rogue"), retries=0, timeout=5) as c:
            with self.assertRaises(sbx_client.Unavailable):
                c.health()
        # The server's certificate checked against another CA: refused by us.
        with sbx_client.connect(self.srv.tls, token=self.srv.tokens["alice"], retries=0,
                                tls={"ca": self.srv.path("rogue-ca.pem"),
                                     "cert": self.srv.path("client.pem"),
                                     "key": self.srv.path("client.key")}) as c:
            with self.assertRaises(sbx_client.Unavailable) as e:
                c.health()
            self.assertIn("TLS", e.exception.message)
        with self.assertRaises(sbx_client.InvalidArgument):
            sbx_client.connect(self.srv.tls)  # no CA


class InsecureServer(Server):
    """sbxd with a tcp:// listener too ("insecure": true)."""

    def start(self):
        if not hasattr(self, "tcp"):
            self.tcp = "tcp://127.0.0.1:%d" % free_port()
            with open(self.config) as f:
                cfg = json.load(f)
            cfg["listen"].append(self.tcp)
            cfg["insecure"] = True
            with open(self.config, "w") as f:
                json.dump(cfg, f)
        super().start()


class OverTcp(unittest.TestCase):
    def test_plain_tcp_when_sbxd_allows_it(self):
        srv = InsecureServer()
        try:
            with sbx_client.connect(srv.tcp, token=srv.tokens["bob"]) as c:
                self.assertEqual(c.health().identity, "token:bob")
                with c.create_run(POLICY, inputs={"/data/in": b"over tcp"}) as run:
                    self.assertEqual(run.exec(["cat", "/data/in"], check=True).stdout,
                                     b"over tcp")
            with sbx_client.connect(srv.tcp, token="wrong") as c:
                with self.assertRaises(sbx_client.Unauthenticated):
                    c.health()
            with self.assertRaises(sbx_client.InvalidArgument):
                sbx_client.connect(srv.tcp, tls={"ca": srv.path("ca.pem")})  # tls is for tls+tcp
        finally:
            self.assertEqual(srv.stop(), 0, srv.log_tail())
            srv.cleanup()


class Reconcile(ServerTestCase):
    """The example as the C client runs it, and as the Python client does."""

    def c_client(self, out):
        r = self.srv.cli("run", "--policy", os.path.join(EXAMPLE, "policy.json"), "--data",
                         EXAMPLE, "--out", out, "--", PY, "/data/reconcile.py")
        self.assertEqual(r.returncode, 0, r)
        return r.stdout

    def module(self, *args, tls=False, input=None):
        cmd = [PY, "-m", "sbx_client", "run"]
        if tls:
            cmd += ["--endpoint", self.srv.tls, "--token", self.srv.tokens["alice"],
                    "--tls-ca", self.srv.path("ca.pem"), "--tls-cert", self.srv.path("client.pem"),
                    "--tls-key", self.srv.path("client.key")]
        else:
            cmd += ["--endpoint", self.srv.ipc]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        env["PYTHONPATH"] = os.pathsep.join([PKG_SRC, PKG_GEN])
        return subprocess.run(cmd + list(args), capture_output=True, timeout=120, env=env,
                              input=input)

    def outputs(self, d):
        got = {}
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                got[name] = f.read()
        return got

    def test_the_same_report_as_the_c_client(self):
        c_out = os.path.join(self.srv.dir, "recon-c")
        c_stdout = self.c_client(c_out)
        self.assertIn("reconciled 25 ledger entries", c_stdout)
        want = self.outputs(c_out)
        self.assertEqual(sorted(want), ["report.csv", "summary.json"])
        json.loads(want["summary.json"])

        # The library, over ipc and TLS.
        for name, tls in (("ipc", None), ("tls", True)):
            found, _ = sbx_client.files.scan_dir(EXAMPLE)
            kw = {}
            ep = self.srv.ipc
            if tls:
                ep = self.srv.tls
                kw = dict(token=self.srv.tokens["alice"],
                          tls=dict(ca=self.srv.path("ca.pem"), cert=self.srv.path("client.pem"),
                                   key=self.srv.path("client.key")))
            out = os.path.join(self.srv.dir, "recon-lib-" + name)
            os.mkdir(out)
            with sbx_client.connect(ep, **kw) as c:
                with c.create_run(os.path.join(EXAMPLE, "policy.json"),
                                  inputs={"/data/" + k: v for k, v in found.items()}) as run:
                    res = run.exec([PY, "/data/reconcile.py"], check=True)
                    self.assertEqual(res.stdout.decode(), c_stdout)
                    arts = run.artifacts()
                    for a in arts:
                        run.fetch(a.path, os.path.join(out, a.path), sha256=a.sha256)
            self.assertEqual(self.outputs(out), want, name)
            self.assertEqual(sorted(i.path for i in run.manifest.inputs), sorted(found))

        # python3 -m sbx_client run, over ipc and TLS.
        for name, tls in (("ipc", False), ("tls", True)):
            out = os.path.join(self.srv.dir, "recon-module-" + name)
            r = self.module("--policy", os.path.join(EXAMPLE, "policy.json"), "--data", EXAMPLE,
                            "--out", out, "--", PY, "/data/reconcile.py", tls=tls)
            self.assertEqual(r.returncode, 0, r)
            self.assertEqual(r.stdout.decode(), c_stdout)
            self.assertEqual(self.outputs(out), want, name)
        self.assertEqual([r.run_id for r in self.srv_runs()], [], "every run was torn down")

    def srv_runs(self):
        with sbx_client.connect(self.srv.ipc) as c:
            return c.list_runs()

    def test_module_exit_status_errors_and_help(self):
        pol = os.path.join(self.srv.dir, "m.json")
        with open(pol, "w") as f:
            f.write(policy_json(script_seconds=1))
        r = self.module("--policy", pol, "--", "/bin/sh", "-c", "cat; echo e >&2; exit 5",
                        input=b"piped")
        self.assertEqual(r.returncode, 5, r)
        self.assertEqual(r.stdout, b"")  # no --stdin: the command reads nothing
        # Without --out, the warning sbxctl gives, then the command's stderr.
        self.assertEqual(r.stderr, b"sbx: warning: no --out given: the run's /out is dropped at "
                                   b"teardown (give --out DIR to keep it)\ne\n")
        stdin = os.path.join(self.srv.dir, "stdin.txt")
        with open(stdin, "wb") as f:
            f.write(b"given")
        r = self.module("--policy", pol, "--stdin", stdin, "--", "cat")
        self.assertEqual((r.returncode, r.stdout), (0, b"given"), r)
        r = self.module("--policy", pol, "--", "sleep", "10")
        self.assertEqual(r.returncode, 124, r)
        self.assertIn(b"sbx: TIMEOUT: script_seconds ran out", r.stderr)
        with open(pol, "w") as f:
            f.write(policy_json(memory_mb=1))
        r = self.module("--policy", pol, "--", "true")
        self.assertEqual(r.returncode, 125, r)
        self.assertRegex(r.stderr.decode(), r"(?m)^sbx: INVALID_ARGUMENT: .*limits\.memory_mb")
        r = subprocess.run([PY, "-m", "sbx_client", "run", "--help"], capture_output=True,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join([PKG_SRC, PKG_GEN])})
        self.assertEqual(r.returncode, 0, r)
        self.assertIn(b"--policy", r.stdout)
        self.assertEqual(self.srv_runs(), [])


class Digests(ServerTestCase):
    def test_a_wrong_digest_is_detected(self):
        good = hashlib.sha256(b"hi\n").hexdigest()
        bad = hashlib.sha256(b"tampered").hexdigest()
        sbx_client.check_digest("h", good, good, good)
        for got, server, expected in ((good, bad, None), (good, good, bad), (good, "", None)):
            with self.assertRaises(sbx_client.DataLoss):
                sbx_client.check_digest("h", got, server, expected)
            with self.assertRaises(sbx_client.Aborted if server else sbx_client.DataLoss):
                sbx_client.check_digest("h", got, server, expected, live=True)
        with sbx_client.connect(self.srv.ipc) as c, c.create_run(POLICY) as run:
            run.exec(sh("echo hi > /out/h"), check=True)
            dest = os.path.join(self.srv.dir, "h")
            with self.assertRaises(sbx_client.DataLoss) as e:
                run.fetch("h", dest, sha256=bad)
            self.assertIn(bad, e.exception.message)
            self.assertFalse(os.path.exists(dest), "nothing is left of a fetch that failed")
            self.assertEqual([n for n in os.listdir(self.srv.dir) if n.startswith(".sbx-fetch")],
                             [])
            self.assertEqual(run.fetch("h", dest, sha256=good).sha256, good)


class Reconnects(unittest.TestCase):
    def test_a_connection_closed_by_sbxd_is_redialed_and_the_request_resent(self):
        srv = Server(connections={"idle_seconds": 1})
        try:
            with sbx_client.connect(srv.ipc) as c:
                with c.create_run(POLICY) as run:
                    self.assertTrue(run.exec(["/bin/true"]).ok)
                    time.sleep(2.5)  # sbxd closes the pooled connections meanwhile
                    self.assertTrue(run.exec(["/bin/true"]).ok)
                    self.assertGreater(c.transport.reconnects, 0)
                    self.assertEqual(len(run.status().execs), 2)
        finally:
            self.assertEqual(srv.stop(), 0, srv.log_tail())
            srv.cleanup()

    def test_no_server_is_unavailable_at_once(self):
        d = tempfile.mkdtemp(prefix="sbxd-test-")
        try:
            t0 = time.monotonic()
            with sbx_client.connect("ipc://" + os.path.join(d, "none.sock")) as c:
                with self.assertRaises(sbx_client.Unavailable) as e:
                    c.health()
            self.assertLess(time.monotonic() - t0, 3)
            self.assertIn("none.sock", e.exception.message)
        finally:
            shutil.rmtree(d)
        with self.assertRaises(sbx_client.InvalidArgument):
            sbx_client.connect("http://example.com")


class PipInstall(ServerTestCase):
    def test_pip_installs_it_into_a_venv_offline(self):
        """`pip install clients/python` into a venv: protoc runs in its build
        step (a copy of the package and the protos: the source tree stays as
        it is), no index is reached, and the installed package works."""
        work = tempfile.mkdtemp(prefix="sbxd-test-pip-")
        try:
            pkg = os.path.join(work, "python")
            shutil.copytree(PKG_SRC, pkg, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                        "__pycache__"))
            venv = os.path.join(work, "venv")
            subprocess.run([PY, "-m", "venv", "--system-site-packages", venv], check=True,
                           timeout=120)
            env = {**os.environ, "SBX_PROTO_DIR": os.path.join(SOURCE, "proto"),
                   "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                   "HOME": work, "PYTHONDONTWRITEBYTECODE": "1"}
            env.pop("PYTHONPATH", None)
            r = subprocess.run([os.path.join(venv, "bin", "pip"), "install",
                                "--no-build-isolation", pkg], capture_output=True, text=True,
                               env=env, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            code = ("import sbx_client, sys; c = sbx_client.connect(sys.argv[1]); "
                    "print(sbx_client.__file__); print(c.health().identity)")
            r = subprocess.run([os.path.join(venv, "bin", "python"), "-c", code, self.srv.ipc],
                               capture_output=True, text=True, env=env, timeout=60, cwd=work)
            self.assertEqual(r.returncode, 0, r)
            path, ident = r.stdout.split()
            self.assertTrue(path.startswith(venv), path)
            self.assertEqual(ident, "uid:%d" % os.getuid())
            self.assertTrue(os.path.isfile(os.path.join(os.path.dirname(path), "_pb",
                                                        "sandbox_pb2.py")))
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
