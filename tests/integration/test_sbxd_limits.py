# SPDX-License-Identifier: Apache-2.0
"""Limits sbxd enforces itself, whatever the helper does (issue 7, section 3):
a hung pid 1 cannot keep an exec running past its deadline; the
administrator's ceilings and disk quotas; output and audit lines that keep a
true prefix when the disk fills."""
import errno
import hashlib
import json
import os
import resource
import shutil
import signal
import sys
import time
import unittest

from sbxdfix import Server, policy_json, processes_with
from sbxrpc import sandbox_pb2 as pb


def pid_levels(pid):
    """How many pid namespaces pid is in (NSpid's entries)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return len(line.split()) - 1
    except OSError:
        pass
    return 0


def children(pid):
    """Children of every thread of pid (sbxd spawns from its workers)."""
    found = []
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                found += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return found


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def tree(pid):
    """pid and its descendants."""
    found = [pid]
    for c in children(pid):
        found += tree(c)
    return found


class Base(unittest.TestCase):
    config = {}

    def setUp(self):
        self.srv = Server(**self.config)
        self.c = self.srv.conn()

    def tearDown(self):
        self.c.close()
        rc = self.srv.stop()
        log = self.srv.log_tail()
        self.srv.cleanup()
        self.assertEqual(rc, 0, log)

    def call(self, name, req, resp_type, token=None):
        return self.c.call(name, req, resp_type, token=token)

    def ok(self, name, req, resp_type, token=None):
        code, msg, resp = self.call(name, req, resp_type, token=token)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def create(self, token=None, inputs=(), **limits):
        req = pb.CreateRunRequest(policy_json=policy_json(**limits))
        for path, data in inputs:
            req.inputs.add(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        return self.ok("CreateRun", req, pb.CreateRunResponse, token=token).run_id

    def exec(self, run, argv, token=None):
        return self.ok("Exec", pb.ExecRequest(run_id=run, argv=argv), pb.ExecResponse,
                       token=token).exec_id


class HungPid1(Base):
    def test_a_stopped_pid_1_cannot_keep_an_exec_running_past_its_deadline(self):
        marker = "sbx-hung-%d" % os.getpid()
        run = self.create(script_seconds=2, run_seconds=120)
        # $0 is the marker, so the test finds the command from outside.
        self.exec(run, ["/bin/sh", "-c", "while :; do echo x >> /out/tick; sleep 0.02; done",
                        marker])
        deadline = time.time() + 5
        while not processes_with(marker) and time.time() < deadline:
            time.sleep(0.02)
        cmd = processes_with(marker)
        self.assertTrue(cmd, "the exec did not start")
        helpers = [p for p in children(self.srv.proc.pid) if alive(p)]
        self.assertEqual(len(helpers), 1, helpers)
        # pid 1, not the /out reader (in no pid namespace of its own)
        pid1 = [p for p in children(helpers[0]) if alive(p) and pid_levels(p) > 1]
        self.assertEqual(len(pid1), 1, pid1)
        run_procs = tree(pid1[0])
        self.assertIn(cmd[0][0], run_procs)
        os.kill(pid1[0], signal.SIGSTOP)  # a hung helper: it reads nothing, kills nothing
        started = time.time()
        # The command goes on appending to /out without its pid 1 (its CPU
        # time grows: schedstat, as /proc/PID/io is 0400 and the command
        # runs as a host uid of the run's own)...
        w0 = self.cpu_ns(cmd[0][0])
        time.sleep(0.5)
        self.assertGreater(self.cpu_ns(cmd[0][0]), w0)
        # ...until sbxd kills the run's processes itself: at
        # script_seconds (2 s) + sbxd's grace (2 s), and a little for the kill,
        # not at run_seconds (120 s).
        def left():
            return [p for p in run_procs if alive(p)] + processes_with(marker)
        # Gone within 30 s: an ordering against run_seconds (120 s), the
        # next thing that would end them, not a stopwatch on the ~4.5 s
        # that deadline and grace take.
        while left() and time.time() - started < 30:
            time.sleep(0.05)
        waited = time.time() - started
        print("\n# pid 1 stopped to the run's last process gone: %.2f s" % waited,
              file=sys.stderr)
        self.assertEqual(left(), [], "processes of the run outlived its deadline by "
                         "%.1f s" % waited)
        self.assertFalse(alive(pid1[0]))
        self.assertFalse(alive(helpers[0]))
        st = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual(st.state, pb.FAILED)
        self.assertEqual(st.execs[0].reason, pb.TIMEOUT)
        self.assertTrue(any("killed the sandbox" in a for a in st.alerts), st.alerts)
        # Its cgroups went with it: `sbx-helper cleanup` ran once it was reaped.
        deadline = time.time() + 10
        while self.run_cgroups(helpers[0]) and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.run_cgroups(helpers[0]), [])
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)

    @staticmethod
    def cpu_ns(pid):
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[0])

    @staticmethod
    def run_cgroups(helper):
        try:
            with open("/etc/sbx/cgroup-root") as f:
                rel = f.read().strip()
        except OSError:
            return []
        found = []
        for ctrl in ("", "memory", "pids", "cpu"):
            d = os.path.join("/sys/fs/cgroup", ctrl, rel)
            if os.path.isdir(d):
                found += [ctrl + ":" + e for e in os.listdir(d)
                          if e.startswith("sbx-%d-" % helper)]
        return found


class InputDirOracle(unittest.TestCase):
    """input_dir must not tell a caller what exists where it cannot look:
    a name that exists (not the caller's, or not a directory) and one that
    does not get the same code and message, byte for byte, directly or
    through a link from the caller's own directory."""

    def test_existing_and_missing_names_get_one_answer(self):
        import shutil
        import tempfile
        mine = tempfile.mkdtemp(prefix="sbx-test-oracle-")
        self.addCleanup(shutil.rmtree, mine, True)
        for name, target in (("to-dir", "/usr/share"), ("to-file", "/usr/bin/env"),
                             ("to-nothing", "/usr/share/no-such-name-%d" % os.getpid())):
            os.symlink(target, os.path.join(mine, name))
        srv = Server(input_dirs=["/usr", mine])
        self.addCleanup(srv.cleanup)
        answers = {}
        with srv.conn() as c:
            for d in ("/usr/share", "/usr/bin/env", "/usr/share/no-such-name-%d" % os.getpid(),
                      "/usr/no-such-dir/x", os.path.join(mine, "to-dir"),
                      os.path.join(mine, "to-file"), os.path.join(mine, "to-nothing"),
                      "/etc", "/etc/no-such-name"):
                code, msg, _ = c.call("CreateRun", pb.CreateRunRequest(
                    policy_json=policy_json(), input_dir=d), pb.CreateRunResponse)
                answers[d] = (code, msg)
        self.assertEqual(len(set(answers.values())), 1, json.dumps(answers, indent=1))
        code, msg = answers["/usr/share"]
        self.assertEqual(code, "PERMISSION_DENIED")
        self.assertIn("input_dir", msg)
        self.assertEqual(srv.stop(), 0)


    def test_dotdot_through_a_guessed_name_tells_nothing(self):
        """realpath stops at a missing component before a later "..": the
        path must be canonical, so an existing and a missing guess above
        the caller's own directory get one answer."""
        import shutil
        import tempfile
        root = tempfile.mkdtemp(prefix="sbx-test-dotdot-")
        self.addCleanup(shutil.rmtree, root, True)
        for d in ("private/exists", "mine/d"):
            os.makedirs(os.path.join(root, d))
        srv = Server(input_dirs=[root])
        self.addCleanup(srv.cleanup)
        mine = os.path.join(root, "mine", "d")
        answers = {}
        with srv.conn() as c:
            for d in (root + "/private/exists/../../mine/d", root + "/private/nosuch/../../mine/d",
                      root + "/mine/./d", root + "//mine/d", mine + "/"):
                code, msg, r = c.call("CreateRun", pb.CreateRunRequest(
                    policy_json=policy_json(), input_dir=d), pb.CreateRunResponse)
                answers[d] = (code, msg)
                if code == "OK":
                    c.call("Teardown", pb.TeardownRequest(run_id=r.run_id), pb.TeardownResponse)
            code, msg, r = c.call("CreateRun", pb.CreateRunRequest(
                policy_json=policy_json(), input_dir=mine), pb.CreateRunResponse)
            self.assertEqual(code, "OK", msg)  # the canonical path is the caller's own
            c.call("Teardown", pb.TeardownRequest(run_id=r.run_id), pb.TeardownResponse)
        self.assertEqual(len(set(answers.values())), 1, json.dumps(answers, indent=1))
        self.assertEqual(answers[mine + "/"][0], "PERMISSION_DENIED")
        self.assertEqual(srv.stop(), 0)


class Ceilings(unittest.TestCase):
    def refused(self, srv, want, inputs=(), **limits):
        req = pb.CreateRunRequest(policy_json=policy_json(**limits))
        for path, size in inputs:
            req.inputs.add(path=path, size=size, sha256="0" * 64)
        with srv.conn() as c:
            code, msg, _ = c.call("CreateRun", req, pb.CreateRunResponse)
        self.assertEqual((code, msg), ("FAILED_PRECONDITION", want))

    def test_the_default_pids_ceiling_is_below_pid_max(self):
        with open("/proc/sys/kernel/pid_max") as f:
            pid_max = int(f.read())
        with open("/proc/sys/fs/file-max") as f:
            file_max = int(f.read())
        srv = Server()
        self.addCleanup(srv.cleanup)
        # And at most the run's open files (limits_max.files, shrunk to fit
        # runs_max 32 runs in half of fs.file-max) at 16 per process.
        ceiling = min(4096, pid_max, min(262144, file_max // 2 // 32) // 16)
        self.refused(srv, "limits.pids: 65536 is above this host's ceiling %d (config "
                     "limits_max.pids)" % ceiling, pids=65536)
        with srv.conn() as c:
            code, msg, r = c.call("CreateRun", pb.CreateRunRequest(
                policy_json=policy_json(pids=ceiling)), pb.CreateRunResponse)
            self.assertEqual(code, "OK", msg)
            c.call("Teardown", pb.TeardownRequest(run_id=r.run_id), pb.TeardownResponse)
        self.assertEqual(srv.stop(), 0)

    def test_every_limit_has_a_ceiling_named_in_the_refusal(self):
        srv = Server(limits_max={"cpu": 0.5, "memory_mb": 128, "script_seconds": 10,
                                 "run_seconds": 60, "pids": 32, "out_mb": 8, "tmp_mb": 8,
                                 "output_kb": 32, "inputs": 2, "input_bytes": 100})
        self.addCleanup(srv.cleanup)
        ok = dict(cpu=0.5, memory_mb=128, script_seconds=10, run_seconds=60, pids=32,
                  out_mb=8, tmp_mb=8, output_kb=32)
        for key, value, ceiling in (("memory_mb", 129, 128), ("script_seconds", 11, 10),
                                    ("run_seconds", 61, 60), ("pids", 33, 32),
                                    ("out_mb", 9, 8), ("tmp_mb", 9, 8), ("output_kb", 33, 32)):
            self.refused(srv, "limits.%s: %d is above this host's ceiling %d (config "
                         "limits_max.%s)" % (key, value, ceiling, key), **dict(ok, **{key: value}))
        self.refused(srv, "limits.cpu: 0.75 is above this host's ceiling 0.5 (config "
                     "limits_max.cpu)", **dict(ok, cpu=0.75))
        self.refused(srv, "inputs: 3 is above this host's ceiling 2 (config limits_max.inputs)",
                     inputs=(("a", 1), ("b", 1), ("c", 1)), **ok)
        self.refused(srv, "inputs: more than this host's ceiling of 100 bytes per run (config "
                     "limits_max.input_bytes)", inputs=(("a", 60), ("b", 41)), **ok)
        # A policy default above a ceiling is refused the same way (output_kb
        # defaults to 64 in the tests' policy).
        self.refused(srv, "limits.output_kb: 64 is above this host's ceiling 32 (config "
                     "limits_max.output_kb)", **dict(ok, output_kb=64))
        with srv.conn() as c:
            code, msg, r = c.call("CreateRun", pb.CreateRunRequest(
                policy_json=policy_json(**ok)), pb.CreateRunResponse)
            self.assertEqual(code, "OK", msg)
            c.call("Teardown", pb.TeardownRequest(run_id=r.run_id), pb.TeardownResponse)
        self.assertEqual(os.listdir(os.path.join(srv.state, "runs")), [])
        self.assertEqual(srv.stop(), 0)


KIB = 1024


class Quotas(Base):
    """Small quotas, so the accounting is tested without filling a disk."""
    config = {"quotas": {"identity_mb": 1, "host_mb": 2, "reserve_mb": 0},
              "limits_max": {"output_kb": 4096}}

    def tls_create(self, who, size):
        data = b"x" * size
        req = pb.CreateRunRequest(policy_json=policy_json(output_kb=4096))
        req.inputs.add(path="in", size=size, sha256=hashlib.sha256(data).hexdigest())
        with self.srv.conn(tls=True) as c:
            tok = self.srv.tokens[who] if who != "uid" else None
            conn = c if tok else self.c
            code, msg, r = conn.call("CreateRun", req, pb.CreateRunResponse, token=tok)
            return code, msg, (r.run_id if r else None)

    def test_inputs_count_against_the_identity_and_the_host(self):
        code, msg, alice = self.tls_create("alice", 700 * KIB)
        self.assertEqual(code, "OK", msg)
        code, msg, _ = self.tls_create("alice", 700 * KIB)
        self.assertEqual(code, "RESOURCE_EXHAUSTED")
        self.assertEqual(msg, "inputs: 716800 bytes would take token:alice over its disk quota "
                         "of 1 MiB (config quotas.identity_mb; 716800 bytes in use)")
        code, msg, bob = self.tls_create("bob", 700 * KIB)  # bob's own quota
        self.assertEqual(code, "OK", msg)
        code, msg, _ = self.tls_create("uid", 700 * KIB)
        self.assertEqual(code, "RESOURCE_EXHAUSTED")
        self.assertIn("over its disk quota of 2 MiB (config quotas.host_mb;", msg)
        # Nothing of the refused runs is left, and a teardown gives the bytes back.
        self.assertEqual(len(os.listdir(os.path.join(self.srv.state, "runs"))), 2)
        with self.srv.conn(tls=True) as c:
            code, msg, _ = c.call("Teardown", pb.TeardownRequest(run_id=alice),
                                  pb.TeardownResponse, token=self.srv.tokens["alice"])
            self.assertEqual(code, "OK", msg)
            c.call("Teardown", pb.TeardownRequest(run_id=bob), pb.TeardownResponse,
                   token=self.srv.tokens["bob"])
        code, msg, mine = self.tls_create("uid", 700 * KIB)
        self.assertEqual(code, "OK", msg)
        self.ok("Teardown", pb.TeardownRequest(run_id=mine), pb.TeardownResponse)

    def test_output_spill_is_cut_at_the_quota_and_stays_a_true_prefix(self):
        run = self.create(output_kb=4096)
        # 2 MiB of numbered lines: more than the 1 MiB quota.
        ex = self.exec(run, ["/bin/sh", "-c", "seq -f %08.0f 0 233016"])
        st = self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=30000),
                     pb.WaitResponse).status
        self.assertEqual(st.stdout_bytes, 233017 * 9)
        self.assertIn("quotas.identity_mb", st.stdout_cut)
        data, off, r = b"", 0, None
        while True:
            r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex,
                                                           stream=pb.STDOUT, offset=off,
                                                           max_bytes=1 << 20), pb.ReadOutputResponse)
            data += r.data
            off = r.next_offset
            if r.eof:
                break
        self.assertTrue(r.truncated)
        self.assertIn("quotas.identity_mb", r.cut)
        self.assertEqual(r.kept_bytes, len(data))
        self.assertLessEqual(len(data), 1 << 20)
        self.assertGreater(len(data), 512 * KIB)
        expect = b"".join(b"%08d\n" % i for i in range(233017))
        self.assertEqual(data, expect[:len(data)])
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)

    def test_the_cli_says_where_and_why_output_was_cut(self):
        pol = os.path.join(self.srv.dir, "cut.json")
        with open(pol, "w") as f:
            f.write(policy_json(output_kb=4096))
        r = self.srv.cli("create", "--policy", pol)
        self.assertEqual(r.returncode, 0, r)
        run = r.stdout.strip()
        # 2 MiB of numbered lines, more than the 1 MiB quota: the output
        # ends early, and sbx says where and why instead of just stopping.
        r = self.srv.cli("exec", run, "--", "/bin/sh", "-c", "seq -f %08.0f 0 233016")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(len(r.stdout), 512 * KIB)
        self.assertEqual(r.stdout, "".join("%08d\n" % i for i in range(233017))[:len(r.stdout)])
        self.assertIn("sbxctl: the exec's stdout was cut after %d bytes: " % len(r.stdout), r.stderr)
        self.assertIn("quotas.identity_mb", r.stderr)
        r = self.srv.cli("status", run)
        self.assertRegex(r.stdout, r"out 2097153 \(cut: [^)]*quotas.identity_mb")
        self.assertEqual(self.srv.cli("teardown", run).returncode, 0)


class Reserve(Base):
    config = {"quotas": {"reserve_mb": 1 << 39}}

    def test_the_free_space_reserve_refuses_createrun(self):
        code, msg, _ = self.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                 pb.CreateRunResponse)
        self.assertEqual(code, "RESOURCE_EXHAUSTED")
        self.assertIn("free-space reserve of %d MiB (config quotas.reserve_mb;" % (1 << 39), msg)
        self.assertEqual(os.listdir(os.path.join(self.srv.state, "runs")), [])


class DiskFull(Base):
    """A real write failure: RLIMIT_FSIZE on sbxd (set from outside with
    prlimit) makes its writes past a size fail with EFBIG, as a full disk
    fails them with ENOSPC; raising it again is the disk freeing up."""

    def fsize(self, limit):
        resource.prlimit(self.srv.proc.pid, resource.RLIMIT_FSIZE,
                         (limit, resource.RLIM_INFINITY))

    def audit_lines(self):
        with open(self.srv.audit, "rb") as f:
            return f.read().split(b"\n")

    def test_createrun_and_putinput_on_a_full_disk_leave_nothing(self):
        self.fsize(100)  # the run's policy.json does not fit
        code, msg, _ = self.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                 pb.CreateRunResponse)
        self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
        self.assertIn("File too large", msg)
        self.fsize(resource.RLIM_INFINITY)
        self.assertEqual(os.listdir(os.path.join(self.srv.state, "runs")), [])
        data = b"y" * 300000
        run = self.create(inputs=(("big", data),))
        self.fsize(1000)
        code, msg, _ = self.call("PutInput", pb.PutInputRequest(run_id=run, path="big", data=data,
                                                                last=True), pb.PutInputResponse)
        self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
        self.assertIn("input big", msg)
        self.fsize(resource.RLIM_INFINITY)
        self.assertEqual(os.listdir(os.path.join(self.srv.state, "runs", run, "data")), [])
        r = self.ok("PutInput", pb.PutInputRequest(run_id=run, path="big", data=data, last=True),
                    pb.PutInputResponse)
        self.assertTrue(r.complete)
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)

    def test_output_and_audit_keep_a_true_prefix_when_the_disk_fills_and_frees(self):
        run = self.create(output_kb=1024)
        size = os.path.getsize(self.srv.audit)
        self.assertLess(size, 16000)
        # The next audit line (exec_started) tears 10 bytes in; the spill
        # file stops at the same size, mid-line.
        limit = size + 10
        self.fsize(limit)
        ex = self.exec(run, ["/bin/sh", "-c",
                             "seq -f %08.0f 0 1999; sleep 2; seq -f %08.0f 2000 3999"])
        time.sleep(1)
        self.fsize(resource.RLIM_INFINITY)  # the disk has room again
        st = self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=30000),
                     pb.WaitResponse).status
        self.assertEqual(st.stdout_bytes, 4000 * 9)
        self.assertIn("File too large", st.stdout_cut)
        r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex, stream=pb.STDOUT,
                                                       max_bytes=1 << 20), pb.ReadOutputResponse)
        expect = b"".join(b"%08d\n" % i for i in range(4000))
        self.assertEqual(r.kept_bytes, limit)
        self.assertEqual(r.data, expect[:limit])  # a true prefix, nothing glued after it
        self.assertTrue(r.truncated)
        self.assertIn("File too large", r.cut)
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
        # Every audit line is whole; the lost ones are counted, in the log and
        # in Health.
        lines = [l for l in self.audit_lines() if l]
        events = [json.loads(l) for l in lines]  # a torn line does not parse
        lost = [e for e in events if e["event"] == "audit_lines_lost"]
        self.assertEqual(len(lost), 1, lost)
        self.assertGreaterEqual(lost[0]["lost"], 1)
        h = self.ok("Health", pb.HealthRequest(), pb.HealthResponse)
        self.assertEqual(h.audit_lines_lost, lost[0]["lost_since_start"])
        self.assertIn("exec_ended", [e["event"] for e in events])


class AuditLogMode(unittest.TestCase):
    """The audit log names every caller's runs: not readable by the group
    callers join to reach the socket. The tests run as one unprivileged
    user, so the mode and group sbxd sets are asserted (a second uid in
    sbxd's group could read a 0640 log; it cannot read a 0600 one)."""

    def test_the_log_is_sbxds_alone_or_log_groups(self):
        import grp
        import stat
        srv = Server()
        self.addCleanup(srv.cleanup)
        st = os.stat(srv.audit)
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
        srv.stop()
        # A log left readable by an earlier sbxd is moved aside and made
        # anew: a reader that opened it while it was open reads no new line.
        os.chmod(srv.audit, 0o644)
        with open(srv.audit) as reader:
            reader.read()
            srv.start()
            with srv.conn() as c:
                code, msg, r = c.call("CreateRun", pb.CreateRunRequest(
                    policy_json=policy_json()), pb.CreateRunResponse)
                self.assertEqual(code, "OK", msg)
                c.call("Teardown", pb.TeardownRequest(run_id=r.run_id), pb.TeardownResponse)
            self.assertEqual(reader.read(), "")
        self.assertEqual(stat.S_IMODE(os.stat(srv.audit).st_mode), 0o600)
        self.assertIn("run_created", [e["event"] for e in srv.audit_events()])
        aside = [n for n in os.listdir(srv.dir) if n.startswith("audit.log.unsafe-")]
        self.assertEqual(len(aside), 1, os.listdir(srv.dir))
        self.assertIn("audit log %s was more open than its mode should be (mode 644" % srv.audit,
                      srv.log_tail())
        srv.stop()
        # A FIFO (which would block the start and take the lines) or a link
        # at the log's path is refused.
        os.rename(srv.audit, srv.audit + ".old")
        os.mkfifo(srv.audit, 0o600)
        with self.assertRaises(RuntimeError) as e:
            srv.start()
        self.assertIn("audit log %s: not a regular file" % srv.audit, str(e.exception))
        os.unlink(srv.audit)
        os.symlink(srv.audit + ".old", srv.audit)
        with self.assertRaises(RuntimeError) as e:
            srv.start()
        self.assertIn("audit log %s: Too many levels of symbolic links" % srv.audit,
                      str(e.exception))
        os.unlink(srv.audit)
        os.rename(srv.audit + ".old", srv.audit)
        group = grp.getgrgid(os.getgid()).gr_name
        with open(srv.config) as f:
            cfg = json.load(f)
        cfg["log_group"] = group
        with open(srv.config, "w") as f:
            json.dump(cfg, f)
        srv.start()
        st = os.stat(srv.audit)
        self.assertEqual((stat.S_IMODE(st.st_mode), st.st_gid), (0o640, os.getgid()))
        srv.stop()
        cfg["log_group"] = "no-such-group-sbx"
        with open(srv.config, "w") as f:
            json.dump(cfg, f)
        with self.assertRaises(RuntimeError) as e:
            srv.start()
        self.assertIn("log_group no-such-group-sbx: no such group", str(e.exception))

EMPTY = hashlib.sha256(b"").hexdigest()


def deep_inputs(n, depth, prefix=""):
    """n empty files, each under depth - 1 directories of its own."""
    return [("%s%04d/" % (prefix, i) + "/".join(["d"] * (depth - 2)) + "/f", 0)
            for i in range(n)]


def manifest(inputs):
    req = pb.CreateRunRequest(policy_json=policy_json())
    for path, size in inputs:
        req.inputs.add(path=path, size=size, sha256=EMPTY if size == 0 else "0" * 64)
    return req


class InputDirectories(Base):
    """Empty inputs under deep paths take inodes and blocks that no size in
    the manifest declares: each file takes at least a block, each directory
    one, both count against the identity's quota, and a path's depth and a
    run's directories are bounded."""
    config = {"quotas": {"identity_mb": 1, "reserve_mb": 0}}

    def test_directories_and_empty_files_are_charged_and_bounded(self):
        # 256 blocks of 4 KiB in the quota: 10 inputs x (28 directories + the
        # file) = 290 blocks, with no byte declared.
        code, msg, _ = self.call("CreateRun", manifest(deep_inputs(10, 29)),
                                 pb.CreateRunResponse)
        self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
        self.assertIn("inputs: 1187840 bytes would take uid:%d over its disk quota of 1 MiB "
                      "(config quotas.identity_mb" % os.getuid(), msg)
        code, msg, _ = self.call("CreateRun", manifest(("e%d" % i, 0) for i in range(300)),
                                 pb.CreateRunResponse)
        self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
        self.assertIn("inputs: 1228800 bytes", msg)
        code, msg, _ = self.call("CreateRun", manifest(deep_inputs(1, 33)), pb.CreateRunResponse)
        self.assertEqual((code, msg), ("INVALID_ARGUMENT", "inputs[0].path %s: 33 components, "
                                       "at most 32" % deep_inputs(1, 33)[0][0]))
        code, msg, _ = self.call("CreateRun", manifest(deep_inputs(340, 31)),
                                 pb.CreateRunResponse)
        self.assertEqual((code, msg), ("INVALID_ARGUMENT", "inputs: the paths make 10200 "
                                       "directories, at most 10000"))
        self.assertEqual(os.listdir(os.path.join(self.srv.state, "runs")), [])

    def test_a_failed_upload_leaves_no_directories(self):
        data = b"z" * 100
        req = pb.CreateRunRequest(policy_json=policy_json())
        for path in ("a/b/c/d/x", "a/keep"):
            req.inputs.add(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        run = self.ok("CreateRun", req, pb.CreateRunResponse).run_id
        data_dir = os.path.join(self.srv.state, "runs", run, "data")
        self.ok("PutInput", pb.PutInputRequest(run_id=run, path="a/keep", data=data, last=True),
                pb.PutInputResponse)
        code, msg, _ = self.call("PutInput", pb.PutInputRequest(
            run_id=run, path="a/b/c/d/x", data=b"w" * 100, last=True), pb.PutInputResponse)
        self.assertEqual(code, "INVALID_ARGUMENT", msg)
        self.assertIn("sha256 mismatch", msg)
        # The file and its empty directories are gone; a/ holds another input.
        self.assertEqual(sorted(os.listdir(os.path.join(data_dir, "a"))), ["keep"])
        r = self.ok("PutInput", pb.PutInputRequest(run_id=run, path="a/b/c/d/x", data=data,
                                                   last=True), pb.PutInputResponse)
        self.assertTrue(r.complete)
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)


class TmpfsServer(Server):
    """sbxd with its state_dir on a small tmpfs of its own: a user and mount
    namespace mounts it (as root there), and a second user namespace gives
    sbxd back our uid, so its callers, cgroups and helper are as usual."""
    tmpfs = "size=64m,nr_inodes=3000,mode=0700"

    def __init__(self, **config):
        # Inside these user namespaces only our own uid is mapped, so no
        # subordinate uid can be (newuidmap maps from the parent
        # namespace): the sandboxes share sbxd's uid, as configured.
        super().__init__(**dict({"host_uids": "shared"}, **config))

    def wrap(self, cmd):
        script = ('mkdir -p "$1" && mount -t tmpfs -o "$2" sbx-test "$1" && shift 2 && '
                  'exec unshare --user --map-user=%d --map-group=%d "$@"'
                  % (os.getuid(), os.getgid()))
        return ["unshare", "-Urm", "sh", "-c", script, "sh", self.state, self.tmpfs] + cmd

    def state_path(self, *names):
        """state_dir as sbxd sees it (its mount namespace)."""
        return os.path.join("/proc/%d/root" % self.proc.pid, self.state.lstrip("/"), *names)

    def free_inodes(self):
        return os.statvfs(self.state_path()).f_favail


class Inodes(unittest.TestCase):
    """On a file system with few inodes, one identity's deep empty inputs
    must not take them from another identity or from sbxd."""

    def server(self, **quotas):
        srv = TmpfsServer(quotas=dict({"identity_mb": 60, "reserve_mb": 0}, **quotas))
        self.addCleanup(srv.cleanup)
        return srv

    def test_deep_empty_inputs_cannot_take_another_identitys_inodes(self):
        srv = self.server(reserve_inodes=500)
        alice, bob = srv.tokens["alice"], srv.tokens["bob"]
        before = srv.free_inodes()
        # 100 x 29 directories + 100 files: 3,000 inodes, all the tmpfs has.
        inputs = deep_inputs(100, 30)
        with srv.conn(tls=True) as c:
            code, msg, r = c.call("CreateRun", manifest(inputs), pb.CreateRunResponse,
                                  token=alice)
            if code == "OK":  # the attack: upload every (empty) input
                for path, _ in inputs:
                    c.call("PutInput", pb.PutInputRequest(run_id=r.run_id, path=path,
                                                          last=True),
                           pb.PutInputResponse, token=alice)
            else:
                self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
                # + the run's own 5: its directory, policy.json, output/,
                # data/ and staging/ (where uploads wait until verified).
                self.assertIn("inputs: 3005 inodes would leave state_dir less than its inode "
                              "reserve of 500 inodes (config quotas.reserve_inodes;", msg)
            code, msg, b = c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                  pb.CreateRunResponse, token=bob)
            self.assertEqual(code, "OK", msg)
            c.call("Teardown", pb.TeardownRequest(run_id=b.run_id), pb.TeardownResponse,
                   token=bob)
        self.assertGreater(srv.free_inodes(), before - 100)
        self.assertEqual(srv.stop(), 0)

    def test_createrun_on_a_full_disk_is_resource_exhausted(self):
        srv = self.server(reserve_inodes=0)
        fill = srv.state_path("fill")
        os.mkdir(fill)
        i = 0
        try:
            while True:
                os.mkdir(os.path.join(fill, str(i)))
                i += 1
        except OSError as e:
            self.assertEqual(e.errno, errno.ENOSPC)
        with srv.conn() as c:
            code, msg, _ = c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                  pb.CreateRunResponse)
        self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
        self.assertRegex(msg, r"^mkdir .*/runs/run-[0-9a-f]{32}: No space left on device$")
        shutil.rmtree(fill)
        self.assertEqual(os.listdir(srv.state_path("runs")), [])
        self.assertEqual(srv.stop(), 0)


class AuditBounds(Base):
    """A caller's strings are cut in the audit log, and each identity's
    lines are bounded by a byte rate (here 1 KiB/s, 64 KiB at once), so
    one caller cannot fill the log's disk; another identity's lines still
    go in, and the dropped ones are counted."""
    config = {"quotas": {"audit_identity_kb_per_s": 1}}

    def test_long_strings_are_cut_and_a_flood_is_dropped_and_counted(self):
        argv0 = "/" + "\x01" * (16 * KIB)
        run = self.create()
        size0 = os.path.getsize(self.srv.audit)
        t0 = time.time()
        for _ in range(60):
            code, msg, e = self.call("Exec", pb.ExecRequest(run_id=run, argv=[argv0]),
                                     pb.ExecResponse)
            self.assertEqual(code, "OK", msg)
            self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=e.exec_id, timeout_ms=30000),
                    pb.WaitResponse)
        grown = os.path.getsize(self.srv.audit) - size0
        self.assertLess(grown, 64 * KIB + (time.time() - t0 + 1) * KIB)
        started = [e for e in self.srv.audit_events() if e["event"] == "exec_started"]
        self.assertEqual(started[0]["argv0"], argv0[:256])
        self.assertIs(started[0]["truncated"], True)
        self.assertEqual(started[0]["full_bytes"], {"argv0": len(argv0)})
        self.assertLess(len(started), 60)
        # bob is under his own rate.
        with self.srv.conn(tls=True) as c:
            tok = self.srv.tokens["bob"]
            code, msg, r = c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                  pb.CreateRunResponse, token=tok)
            self.assertEqual(code, "OK", msg)
            c.call("Teardown", pb.TeardownRequest(run_id=r.run_id), pb.TeardownResponse,
                   token=tok)
        time.sleep(1.5)  # refills what the teardown line takes
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
        events = self.srv.audit_events()
        self.assertIn(("run_created", "token:bob"), [(e["event"], e["identity"]) for e in events])
        dropped = [e for e in events if e["event"] == "audit_lines_dropped"]
        # A summary each time the flood's lines go in again, all of them ours.
        self.assertTrue(dropped)
        self.assertEqual({(d["identity"], d["quota"]) for d in dropped},
                         {("uid:%d" % os.getuid(), "quotas.audit_identity_kb_per_s")})
        ours = [e for e in events if e["identity"] == "uid:%d" % os.getuid()
                and e["event"] in ("exec_started", "exec_ended")]
        self.assertEqual(len(ours) + sum(d["dropped"] for d in dropped), 120)
        self.assertEqual(events[-1]["event"], "teardown")


class RunShare(Base):
    """limits.pids and limits.cpu bound a run, not each of its execs: up to
    64 execs run at once, so a per-exec bound let one run take 64 times it
    (three execs of 30 processes each under pids 40 ran 93)."""

    def run_cgroup_file(self, ctrl, name):
        helpers = [p for p in children(self.srv.proc.pid) if alive(p)]
        self.assertEqual(len(helpers), 1, helpers)
        with open("/etc/sbx/cgroup-root") as f:
            rel = f.read().strip()
        for base in (os.path.join("/sys/fs/cgroup", ctrl, rel), os.path.join("/sys/fs/cgroup", rel)):
            if os.path.isdir(base):
                for e in os.listdir(base):
                    if e.startswith("sbx-%d-" % helpers[0]) and os.path.exists(
                            os.path.join(base, e, name)):
                        with open(os.path.join(base, e, name)) as f:
                            return f.read()
        self.fail("no run cgroup with %s" % name)

    def test_concurrent_execs_share_the_runs_pids(self):
        run = self.create(pids=40)
        spawn = ("import subprocess, sys, time\nstarted = 0\nfor _ in range(30):\n"
                 "    try:\n        subprocess.Popen(['sleep', '30'])\n        started += 1\n"
                 "    except OSError:\n        pass\nprint(started, flush=True)\n"
                 "time.sleep(30)")
        execs = [self.exec(run, ["/usr/bin/python3", "-c", spawn]) for _ in range(3)]
        started, deadline = {}, time.time() + 15
        while len(started) < 3 and time.time() < deadline:
            for ex in execs:
                r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex,
                                                               stream=pb.STDOUT),
                            pb.ReadOutputResponse)
                if r.data.endswith(b"\n"):
                    started[ex] = int(r.data)
            time.sleep(0.1)
        self.assertEqual(len(started), 3, started)
        # Three pythons and what they started: within the run's 40.
        self.assertLessEqual(sum(started.values()) + 3, 40, started)
        # For the right reason: the run's cgroup holds the limit (v1 counts
        # the refused forks in the exec's leaf, not where the limit was hit).
        self.assertEqual(self.run_cgroup_file("pids", "pids.max").strip(), "40")
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)

    def test_concurrent_execs_share_the_runs_cpu(self):
        run = self.create(cpu=0.25)
        burn = ("import time\nend = time.time() + 2\nwhile time.time() < end: pass\n"
                "print(time.process_time())")
        execs = [self.exec(run, ["/usr/bin/python3", "-c", burn]) for _ in range(2)]
        used = 0.0
        for ex in execs:
            self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=30000),
                    pb.WaitResponse)
            r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex,
                                                           stream=pb.STDOUT),
                        pb.ReadOutputResponse)
            used += float(r.data)
        # 2 s at a quarter of a CPU for both together: 0.5 s (1.0 s if each
        # exec had its own quarter).
        self.assertLess(used, 0.75)
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)


if __name__ == "__main__":
    unittest.main()
