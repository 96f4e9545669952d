# SPDX-License-Identifier: Apache-2.0
"""Issue 16's host-wide pools and hostile strings, through a real sbxd:
- a run's ptys: each exec's devpts has its own `max=` (the non-initial
  devpts instances of the whole host share kernel.pty.max - reserve), and a
  second exec still gets one while the first holds all of its own;
- a request string with a NUL inside is refused INVALID_ARGUMENT naming the
  field, and nothing acts on the part before the NUL (PutInput wrote
  `report.csv` for `report.csv\\0.sig`);
- the run's cgroups are closed to other local users (0700), seen from the
  host while the run lives;
- a run's open files: RLIMIT_NOFILE per process is the run's budget
  (limits_max.files) over its pids, and sbxd refuses a budget that runs_max
  full runs would take more than half of fs.file-max with;
- a run's files pinned through mappings (open, mmap, close, again: no
  descriptor stays, RLIMIT_NOFILE counts none): the run's memory limit
  stops them, and the host's fs.file-nr stays within the run's bound."""
import hashlib
import os
import stat
import subprocess
import threading
import time

from sbxdfix import CLI, Server, ServerTestCase, policy_json
from sbxrpc import sandbox_pb2 as pb

PTYS_PER_EXEC = 16  # helper/rootfs.h SBX_PTYS_PER_DEVPTS
PINNED_FILE_BYTES = 384  # common/run_files.h SBX_PINNED_FILE_BYTES

# Each of PROCS processes opens a file, maps a page of it and closes the
# descriptor, PER_PROC times at most (below vm.max_map_count), or until
# refused; says how many and why it stopped, then holds its mappings for a
# while so that the host's fs.file-nr can be read at the peak. libc's mmap
# through ctypes: python's mmap module keeps a descriptor of its own.
PIN_FILES = r"""
import ctypes, errno, os, sys, time
PROCS, PER_PROC, HOLD = %d, %d, %d
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
FAILED = ctypes.c_void_p(-1).value
path = os.path.realpath(sys.executable)
kids = []
for _ in range(PROCS):
    pid = os.fork()
    if pid:
        kids.append(pid)
        continue
    n, why = 0, "none"
    while n < PER_PROC:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            why = errno.errorcode[e.errno]
            break
        if libc.mmap(None, 4096, 1, 2, fd, 0) == FAILED:  # PROT_READ, MAP_PRIVATE
            why = errno.errorcode[ctypes.get_errno()]
            os.close(fd)
            break
        os.close(fd)
        n += 1
    print("pinned", n, why, flush=True)
    time.sleep(HOLD)
    os._exit(0)
for pid in kids:
    os.waitpid(pid, 0)
print("done", flush=True)
"""

# Opens ptys until refused (at most a few past the bound, so that an
# unbounded tree does not take the host's pool), says how many and why it
# stopped, then holds them.
HOLD_PTYS = r"""
import errno, os, time
fds, why = [], "none"
for _ in range(%d):
    try:
        fds.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
    except OSError as e:
        why = errno.errorcode[e.errno]
        break
print(len(fds), why, flush=True)
time.sleep(60)
"""

ONE_PTY = r"""
import os
fd = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
print("pty ok", flush=True)
"""


def cgroup_root_dirs():
    try:
        with open("/etc/sbx/cgroup-root") as f:
            rel = f.read().strip()
    except OSError:
        return []
    return [d for d in (os.path.join("/sys/fs/cgroup", c, rel) for c in ("", "memory", "pids",
                                                                            "cpu"))
            if os.path.isdir(d)]


def children_of(pid):
    kids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(p))
    return kids


class KernelPools(ServerTestCase):
    def setUp(self):
        self.c = self.srv.conn()
        # First in, last out: the runs' Teardowns go before the connection.
        self.addCleanup(self.c.close)

    def ok(self, name, req, resp_type):
        code, msg, resp = self.c.call(name, req, resp_type)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def create(self, inputs=()):
        req = pb.CreateRunRequest(policy_json=policy_json())
        for path, data in inputs:
            req.inputs.add(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        run = self.ok("CreateRun", req, pb.CreateRunResponse).run_id
        self.addCleanup(self.c.call, "Teardown", pb.TeardownRequest(run_id=run),
                        pb.TeardownResponse)
        return run

    def exec(self, run, argv):
        return self.ok("Exec", pb.ExecRequest(run_id=run, argv=argv), pb.ExecResponse).exec_id

    def first_line(self, run, ex, timeout=30):
        data, off, deadline = b"", 0, time.monotonic() + timeout
        while b"\n" not in data and time.monotonic() < deadline:
            r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex,
                                                           stream=pb.STDOUT, offset=off,
                                                           timeout_ms=1000),
                        pb.ReadOutputResponse)
            data += r.data
            off = r.next_offset
            if r.eof:
                break
        return data.decode(errors="replace").split("\n")[0]

    def wait(self, run, ex):
        return self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=30000),
                       pb.WaitResponse).status

    # -- ptys (finding 6)
    def test_an_exec_gets_its_own_bounded_ptys_and_leaves_the_next_exec_some(self):
        run = self.create()
        hog = self.exec(run, ["/usr/bin/python3", "-c", HOLD_PTYS % (PTYS_PER_EXEC + 8)])
        # Before max=, all PTYS_PER_EXEC + 8 were granted: only the host's
        # shared pool (kernel.pty.max - kernel.pty.reserve) stopped an exec.
        self.assertEqual(self.first_line(run, hog), "%d ENOSPC" % PTYS_PER_EXEC)
        other = self.exec(run, ["/usr/bin/python3", "-c", ONE_PTY])
        st = self.wait(run, other)
        self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code), ("EXITED", 0), st)
        self.assertEqual(self.first_line(run, other), "pty ok")

    # -- NUL inside a request's strings (finding 7)
    def refused(self, name, req, resp_type, field):
        code, msg, _ = self.c.call(name, req, resp_type)
        self.assertEqual(code, "INVALID_ARGUMENT", "%s: %s" % (name, msg))
        self.assertTrue(msg.startswith(field + ":"), msg)
        self.assertIn("NUL", msg)

    def test_put_input_with_a_nul_in_its_path_writes_nothing(self):
        run = self.create()
        data = b"id,amount\n1,10\n"
        self.refused("PutInput", pb.PutInputRequest(run_id=run, path="report.csv\0.sig",
                                                    data=data, size=len(data), last=True,
                                                    sha256=hashlib.sha256(data).hexdigest()),
                     pb.PutInputResponse, "path")
        st = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual(list(st.execs), [])
        found = [os.path.join(d, f) for d, _, fs in os.walk(self.srv.state) for f in fs
                 if f.startswith("report.csv")]
        self.assertEqual(found, [])
        ex = self.exec(run, ["/bin/sh", "-c", "ls -A /data; echo end"])
        self.wait(run, ex)
        self.assertEqual(self.first_line(run, ex), "end")

    def test_create_run_with_a_nul_in_an_input_path_is_refused(self):
        req = pb.CreateRunRequest(policy_json=policy_json())
        req.inputs.add(path="a.csv\0.sig", size=1, sha256=hashlib.sha256(b"x").hexdigest())
        self.refused("CreateRun", req, pb.CreateRunResponse, "inputs[0].path")

    def test_exec_with_a_nul_in_an_argument_or_cwd_is_refused(self):
        run = self.create()
        self.refused("Exec", pb.ExecRequest(run_id=run, argv=["/bin/echo", "ok", "rm\0-rf"]),
                     pb.ExecResponse, "argv[2]")
        self.refused("Exec", pb.ExecRequest(run_id=run, argv=["/bin/pwd"], cwd="/tmp\0/x"),
                     pb.ExecResponse, "cwd")
        st = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual(list(st.execs), [])

    def test_fetch_artifact_with_a_nul_in_its_path_is_refused(self):
        run = self.create()
        ex = self.exec(run, ["/bin/sh", "-c", "echo secret > /out/a"])
        self.wait(run, ex)
        self.ok("FetchArtifact", pb.FetchArtifactRequest(run_id=run, path="a"),
                pb.FetchArtifactResponse)
        self.refused("FetchArtifact", pb.FetchArtifactRequest(run_id=run, path="a\0.public"),
                     pb.FetchArtifactResponse, "path")

    # -- the run's cgroups (finding 3)
    def test_the_runs_cgroups_are_closed_to_other_users(self):
        roots = cgroup_root_dirs()
        if not roots:
            self.skipTest("no delegated cgroup root (/etc/sbx/cgroup-root)")
        run = self.create()
        ex = self.exec(run, ["/bin/sh", "-c", "echo up; sleep 30"])
        self.assertEqual(self.first_line(run, ex), "up")
        helpers = children_of(self.srv.proc.pid)
        seen = []
        for root in roots:
            for name in os.listdir(root):
                parts = name.split("-")
                if len(parts) == 3 and parts[0] == "sbx" and parts[1].isdigit() and \
                        int(parts[1]) in helpers:
                    run_dir = os.path.join(root, name)
                    seen.append(run_dir)
                    dirs = [run_dir] + [os.path.join(run_dir, e) for e in os.listdir(run_dir)
                                        if os.path.isdir(os.path.join(run_dir, e))]
                    for d in dirs:
                        mode = stat.S_IMODE(os.stat(d).st_mode)
                        self.assertEqual(mode & 0o077, 0, "%s is %o" % (d, mode))
        self.assertTrue(seen, (roots, helpers))

    # -- the host's file table (finding 2)
    def test_an_execs_open_files_are_the_runs_budget_over_its_pids(self):
        with open("/proc/sys/fs/file-max") as f:
            share = int(f.read()) // 2
        # sbxdfix: runs_max 32; the default budget is 262144 per run, less
        # where 32 runs of it would pass half of fs.file-max.
        budget = min(262144, share // 32)
        run = self.create()
        ex = self.exec(run, ["/usr/bin/python3", "-c", "import resource; "
                             "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"])
        self.wait(run, ex)
        self.assertEqual(self.first_line(run, ex), str(min(4096, budget // 64)))

    def test_files_pinned_through_mappings_stop_at_the_runs_memory(self):
        h = self.ok("Health", pb.HealthRequest(), pb.HealthResponse)
        if h.cgroup == "none":
            self.skipTest("no memory cgroup: the rlimit fallback does not bound kernel memory")
        memory_mb, out_mb, tmp_mb, pids, procs, per_proc = 64, 1, 1, 16, 6, 60000
        # sbxdfix: limits_max.files 262144 over 16 pids is 4096 each; the
        # run's memory cgroup holds memory_mb + out_mb + 2 x tmp_mb.
        run_mb = memory_mb + out_mb + 2 * tmp_mb
        bound = pids * 4096 + (run_mb << 20) // PINNED_FILE_BYTES
        # Unbounded, the attack pins more than that: a run that could would fail.
        self.assertGreater(procs * per_proc, bound)
        req = pb.CreateRunRequest(policy_json=policy_json(memory_mb=memory_mb, out_mb=out_mb,
                                                          tmp_mb=tmp_mb, pids=pids))
        run = self.ok("CreateRun", req, pb.CreateRunResponse).run_id
        self.addCleanup(self.c.call, "Teardown", pb.TeardownRequest(run_id=run),
                        pb.TeardownResponse)

        def file_nr():
            with open("/proc/sys/fs/file-nr") as f:
                return int(f.read().split()[0])

        base, peak, stop = file_nr(), [0], threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], file_nr())
                time.sleep(0.01)

        poller = threading.Thread(target=sample)
        poller.start()
        try:
            ex = self.exec(run, ["/usr/bin/python3", "-c", PIN_FILES % (procs, per_proc, 3)])
            st = self.wait(run, ex)
        finally:
            stop.set()
            poller.join()
        out = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex,
                                                         stream=pb.STDOUT, offset=0),
                      pb.ReadOutputResponse).data.decode()
        lines = [ln.split() for ln in out.splitlines() if ln.startswith("pinned")]
        rose = peak[0] - base
        # The run's memory, not its descriptors, stopped it: the OOM killer
        # (reported as such) or a refused allocation, and far past what
        # RLIMIT_NOFILE would have let one process hold.
        stopped = [ln[2] for ln in lines if ln[2] != "none"]
        self.assertTrue(pb.ExitReason.Name(st.reason) == "OOM" or
                        set(stopped) & {"ENOMEM"}, (st, out))
        self.assertNotIn("EMFILE", stopped, out)
        self.assertNotIn("ENFILE", stopped, out)
        self.assertGreater(rose, 4 * 4096, (base, peak[0], out))
        self.assertLessEqual(rose, bound, (base, peak[0], out))

    def test_health_reports_the_file_table_and_a_runs_share(self):
        def proc_sys(name):
            with open("/proc/sys/" + name) as f:
                return int(f.read())

        h = self.ok("Health", pb.HealthRequest(), pb.HealthResponse)
        file_max, maps = proc_sys("fs/file-max"), proc_sys("vm/max_map_count")
        # sbxdfix writes no limits_max: memory_mb, out_mb and tmp_mb 1 TiB
        # (a run's cgroup holds memory + out + 2 x tmp), pids min(4096,
        # pid_max), files 262144 unless 32 runs of it would not fit.
        pids = min(4096, proc_sys("kernel/pid_max"))
        pinned = min((4 << 40) // PINNED_FILE_BYTES, pids * maps)
        self.assertEqual((h.file_max, h.run_pinned_files), (file_max, pinned))
        self.assertEqual(h.run_files, min(262144, file_max // 2 // 32 - pinned))
        self.assertEqual(h.runs_fit, file_max // 2 // (h.run_files + pinned))
        self.assertGreaterEqual(h.runs_fit, h.runs_max)
        if CLI:
            out = subprocess.run([CLI, "--endpoint", self.srv.ipc, "health"], check=True,
                                 capture_output=True, text=True, timeout=60).stdout
            self.assertIn("files %d per run, %d more pinned by mappings; %d runs fit in half "
                          "of fs.file-max %d\n" % (h.run_files, pinned, h.runs_fit, file_max),
                          out)

    def test_a_files_budget_past_half_the_hosts_file_max_is_refused(self):
        with open("/proc/sys/fs/file-max") as f:
            file_max = int(f.read())
        if file_max // 32 >= 1 << 40:
            self.skipTest("fs.file-max %d: no budget sbxd accepts is past it" % file_max)
        with self.assertRaises(RuntimeError) as e:
            Server(limits_max={"files": min(file_max // 32 + 1, 1 << 40)})
        self.assertIn("limits_max.files", str(e.exception))
        self.assertIn("fs.file-max", str(e.exception))


if __name__ == "__main__":
    import unittest
    unittest.main(verbosity=2)
