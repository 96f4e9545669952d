# SPDX-License-Identifier: Apache-2.0
"""Issue 16, finding 1: a host uid of each run's own (common/host_ids.h).

The kernel keeps some counters per host uid whatever the namespaces (the
user_struct's epoll watches, pipe buffer pages, unix sockets in flight).
When every sandbox ran as sbxd's uid, one sandbox filling one of them
stopped sbxd and every other run. Here:
- two live runs' processes have two different host uids, both from sbxd's
  user's subordinate range, neither sbxd's;
- the attack, from inside a run: its processes open pipes until its uid's
  pipe pages pass fs.pipe-user-pages-soft (from then on the kernel gives
  that uid's new pipes one page instead of sixteen). While it holds them,
  a second identity creates a run, executes in it and tears it down, every
  call answering; and a new pipe of sbxd's own uid still gets its full 64
  KiB. With "host_uids": "shared" (the documented weaker choice, and what
  every run was before) the same attack shrinks sbxd's uid's pipes: the
  test shows that it would fail on the old tree.
- what the kernel charges to the user namespace's maker (sbxd's uid)
  whatever uid the sandbox runs as, inotify instances, is bounded per run
  (helper/rootfs.h SBX_RUN_INOTIFY_INSTANCES): a run that takes all it can
  stops at its share and sbxd's uid can still make one."""
import fcntl
import os
import time
import unittest

import sbxtest
from sbxdfix import Server, policy_json
from sbxrpc import sandbox_pb2 as pb

F_GETPIPE_SZ = 1032
FULL_PIPE = 65536  # 16 pages: a pipe's default size

# Forks children that each open pipes up to their RLIMIT_NOFILE (the run's
# budget over its pids) until the kernel hands one of them a pipe of less
# than 16 pages: the uid's pipe pages are past the soft limit. Prints how
# many pipes that took and FULL (or ROOM when it stopped first), then holds
# them all.
HOLD_PIPES = r"""
import fcntl, os, resource, time
soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
per = max(1, (soft - 32) // 2)
total, full = 0, False
for k in range(48):
    rd, wr = os.pipe()
    if os.fork() == 0:
        os.close(rd)
        n, f, keep, margin = 0, False, [], 0
        for _ in range(per):
            try:
                p = os.pipe()
            except OSError:
                break
            keep.append(p)
            n += 1
            if not f and fcntl.fcntl(p[1], 1032) < 65536:
                # Over the soft limit: 256 shrunk pipes more on top, so that
                # a pipe its uid closes meanwhile (shared: one of sbxd's or
                # its helpers') does not bring it back under.
                f, margin = True, 256
            if f:
                margin -= 1
                if margin == 0:
                    break
        os.write(wr, b"%d %d" % (n, f))
        os.close(wr)
        time.sleep(120)
        os._exit(0)
    os.close(wr)
    n, f = map(int, os.read(rd, 64).split())
    os.close(rd)
    total += n
    if f:
        full = True
        break
print(total, "FULL" if full else "ROOM", flush=True)
time.sleep(120)
"""


def read_int(path):
    with open(path) as f:
        return int(f.read().split()[0])


def our_pipe_size():
    r, w = os.pipe()
    try:
        return fcntl.fcntl(w, F_GETPIPE_SZ)
    finally:
        os.close(r)
        os.close(w)


class HostUids(unittest.TestCase):
    SERVER_CONFIG = {}

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(**cls.SERVER_CONFIG)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.srv.cleanup()

    def call(self, c, name, req, resp_type, token):
        code, msg, resp = c.call(name, req, resp_type, token=token)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def create(self, c, token):
        run = self.call(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                        pb.CreateRunResponse, token).run_id
        self.addCleanup(self.teardown, run, token)
        return run

    def teardown(self, run, token):
        # A connection of its own: the test's has closed by now.
        with self.srv.conn(tls=True) as c:
            c.call("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse, token=token)

    def exec(self, c, run, argv, token):
        return self.call(c, "Exec", pb.ExecRequest(run_id=run, argv=argv), pb.ExecResponse,
                         token).exec_id

    def first_line(self, c, run, ex, token, timeout=60):
        data, off, deadline = b"", 0, time.monotonic() + timeout
        while b"\n" not in data and time.monotonic() < deadline:
            r = self.call(c, "ReadOutput",
                          pb.ReadOutputRequest(run_id=run, exec_id=ex, stream=pb.STDOUT,
                                               offset=off, timeout_ms=1000),
                          pb.ReadOutputResponse, token)
            data += r.data
            off = r.next_offset
            if r.eof:
                break
        return data.decode(errors="replace").split("\n")[0]

    def host_uids_of(self, marker, want, timeout=20):
        """The host uids of processes whose command line holds `marker`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            uids = {}
            for pid, _ in sbxtest.procs_with(marker):
                try:
                    uids[pid] = os.stat("/proc/%d" % pid).st_uid
                except OSError:
                    pass
            if len(uids) >= want:
                return uids
            time.sleep(0.05)
        self.fail("%d processes with %s never showed" % (want, marker))

    def attack(self):
        """Fills the run's uid's pipe pages from inside a run of alice's;
        then bob calls while it holds them. Returns our new pipe's size."""
        soft = read_int("/proc/sys/fs/pipe-user-pages-soft")
        if soft == 0:
            self.skipTest("fs.pipe-user-pages-soft is 0 (no soft limit on this host)")
        alice, bob = self.srv.tokens["alice"], self.srv.tokens["bob"]
        with self.srv.conn(tls=True) as c:
            run = self.create(c, alice)
            hog = self.exec(c, run, ["/usr/bin/python3", "-c", HOLD_PIPES], alice)
            line = self.first_line(c, run, hog, alice)
            self.assertTrue(line.endswith(" FULL"), line)
            # At least the soft limit's worth of 16-page pipes, unless its
            # uid held pipes before (shared: sbxd's own).
            pipes = int(line.split()[0])
            self.assertGreater(pipes, 0, line)
            size = our_pipe_size()
            # Another identity, meanwhile: every call answers.
            with self.srv.conn(tls=True) as c2:
                h = self.call(c2, "Health", pb.HealthRequest(), pb.HealthResponse, bob)
                self.assertTrue(h.identity, h)
                brun = self.call(c2, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                 pb.CreateRunResponse, bob).run_id
                ex = self.exec(c2, brun, ["/bin/echo", "bob ok"], bob)
                self.assertEqual(self.first_line(c2, brun, ex, bob), "bob ok")
                self.call(c2, "Teardown", pb.TeardownRequest(run_id=brun),
                          pb.TeardownResponse, bob)
            return size


class Subordinate(HostUids):
    def test_live_runs_never_share_a_host_uid_and_never_sbxds(self):
        alice = self.srv.tokens["alice"]
        ours = sbxtest.subordinate_uids()
        self.assertTrue(ours, "this user has no subordinate uids (packaging/setup.sh)")
        marker = "%d.%s" % (os.getpid(), os.urandom(3).hex())
        with self.srv.conn(tls=True) as c:
            a, b = self.create(c, alice), self.create(c, alice)
            for run in (a, b):
                self.exec(c, run, ["/usr/bin/python3", "-c", "import time; time.sleep(30)",
                                   marker], alice)
            uids = self.host_uids_of(marker, 2)
        self.assertEqual(len(set(uids.values())), 2, uids)
        for pid, uid in uids.items():
            self.assertNotEqual(uid, os.getuid(), "pid %d runs as sbxd's uid" % pid)
            self.assertTrue(any(uid in r for r in ours), "pid %d: uid %d" % (pid, uid))

    def test_health_says_each_run_has_its_own(self):
        with self.srv.conn(tls=True) as c:
            h = self.call(c, "Health", pb.HealthRequest(), pb.HealthResponse,
                          self.srv.tokens["alice"])
        self.assertEqual(h.host_uids, "subordinate")
        self.assertEqual(h.host_uid_slots, sum(len(r) for r in sbxtest.subordinate_uids()))

    def test_a_run_filling_its_uids_pipe_pages_leaves_sbxd_and_others_theirs(self):
        self.assertEqual(self.attack(), FULL_PIPE,
                         "sbxd's uid's new pipes shrank: the run's pipe pages are charged "
                         "to sbxd's uid")


class Shared(HostUids):
    """The documented weaker choice: the same attack reaches sbxd's uid."""
    SERVER_CONFIG = {"host_uids": "shared"}

    def test_health_says_shared(self):
        with self.srv.conn(tls=True) as c:
            h = self.call(c, "Health", pb.HealthRequest(), pb.HealthResponse,
                          self.srv.tokens["alice"])
        self.assertEqual((h.host_uids, h.host_uid_slots), ("shared", 0))

    def test_shared_uids_let_a_run_shrink_sbxds_pipes(self):
        self.assertLess(self.attack(), FULL_PIPE)


class LockDir(unittest.TestCase):
    """config host_id_dir: sbxd makes and checks it at start, and its
    helpers take their slots there."""

    def test_a_lock_dir_others_could_swap_stops_sbxd_at_start(self):
        import tempfile
        tmp = tempfile.mkdtemp(prefix="sbx-test-hostid-")
        self.addCleanup(lambda: __import__("shutil").rmtree(tmp, ignore_errors=True))
        open_dir = os.path.join(tmp, "open")
        os.mkdir(open_dir)
        os.chmod(open_dir, 0o777)  # writable by others, not sticky
        with self.assertRaises(RuntimeError) as e:
            Server(host_id_dir=os.path.join(open_dir, "locks"))
        self.assertIn("config host_id_dir", str(e.exception))
        self.assertIn("writable by others", str(e.exception))

    def test_runs_take_their_slots_in_the_configured_dir(self):
        import tempfile
        tmp = tempfile.mkdtemp(prefix="sbx-test-hostid-")
        self.addCleanup(lambda: __import__("shutil").rmtree(tmp, ignore_errors=True))
        locks = os.path.join(tmp, "locks")
        srv = Server(host_id_dir=locks)
        self.addCleanup(srv.cleanup)
        self.addCleanup(srv.stop)
        with srv.conn() as c:
            code, msg, r = c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                  pb.CreateRunResponse)
            self.assertEqual(code, "OK", msg)
            code, msg, _ = c.call("Exec", pb.ExecRequest(run_id=r.run_id, argv=["/bin/true"]),
                                  pb.ExecResponse)
            self.assertEqual(code, "OK", msg)
            c.call("Teardown", pb.TeardownRequest(run_id=r.run_id), pb.TeardownResponse)
        names = os.listdir(locks)
        ours = sbxtest.subordinate_uids()
        self.assertTrue(names and all(any(int(n) in rg for rg in ours) for n in names), names)
        self.assertEqual(os.stat(locks).st_mode & 0o777, 0o700)


RUN_INOTIFY_INSTANCES = 16  # helper/rootfs.h

# inotify instances until refused; says how many and why, then holds them.
HOLD_INOTIFY = r"""
import ctypes, errno, os, time
libc = ctypes.CDLL(None, use_errno=True)
n, why = 0, "none"
while n < 1000:
    if libc.inotify_init1(0) < 0:
        why = errno.errorcode[ctypes.get_errno()]
        break
    n += 1
print(n, why, flush=True)
time.sleep(60)
"""


def our_inotify_ok():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    if fd >= 0:
        os.close(fd)
    return fd >= 0


class InotifyShare(HostUids):
    def test_a_run_takes_its_inotify_share_and_no_more(self):
        alice = self.srv.tokens["alice"]
        with self.srv.conn(tls=True) as c:
            run = self.create(c, alice)
            hogs = [self.exec(c, run, ["/usr/bin/python3", "-c", HOLD_INOTIFY], alice)
                    for _ in range(2)]
            got = [self.first_line(c, run, h, alice) for h in hogs]
            # Two execs of one run: one share between them (before, each
            # took what sbxd's uid had left: 128 by default, all of it).
            total = sum(int(g.split()[0]) for g in got)
            self.assertEqual(total, RUN_INOTIFY_INSTANCES, got)
            self.assertTrue(any(g.endswith(" EMFILE") for g in got), got)
            self.assertTrue(our_inotify_ok(), "sbxd's uid has no inotify instance left")


if __name__ == "__main__":
    unittest.main()
