# SPDX-License-Identifier: Apache-2.0
"""What the execlat change puts off, attacked through the real sbxd and
sbx-helper (review of execlat): a done exec's deny resolver and connect
watch closed after the run's lock (sbxd's descriptors), an ended exec's
cgroup leaf and mount namespace let go later by pid 1 (its descriptors, the
run's cgroup, teardown), and the bounding set dropped before a prepared
exec init's claim (the command's credentials on the prepared and the fresh
path alike)."""
import contextlib
import os
import threading
import time
import unittest

from sbxdfix import Server, processes_with
from sbxrpc import sandbox_pb2 as pb
from test_sbxd_out import OutTest

STATUS_KEYS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp",
               "Uid", "Gid")


def status_fields(text):
    got = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k in STATUS_KEYS:
            got[k] = v.split()
    return got


def ns_pids(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("NSpid:"):
                return line.split()[1:]
    return []


def leaf_of(pid):
    """The pids hierarchy's cgroup path of host pid (v1), or v2's."""
    with open("/proc/%d/cgroup" % pid) as f:
        lines = f.read().splitlines()
    for line in lines:
        _, ctrl, path = line.split(":", 2)
        if "pids" in ctrl.split(","):
            return os.path.join("/sys/fs/cgroup/pids", path.lstrip("/"))
    for line in lines:
        if line.startswith("0::"):
            return os.path.join("/sys/fs/cgroup", line[3:].lstrip("/"))
    return None


def ancestors(pid):
    """The host pids above pid, up to the host's init."""
    while pid > 1:
        with open("/proc/%d/status" % pid) as f:
            pid = next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
        yield pid


def wait_for(probe, timeout=5):
    """probe's first true value within timeout seconds, else its last."""
    deadline = time.time() + timeout
    while True:
        got = probe()
        if got or time.time() >= deadline:
            return got
        time.sleep(0.02)


def mnt_fds(pid):
    """How many of pid's descriptors are mount namespaces; None if its
    fds cannot be read."""
    try:
        names = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return None
    n = 0
    for fd in names:
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("mnt:["):
                n += 1
        except OSError:
            pass
    return n


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None


def exec_processes(pid1):
    """The processes of pid1's execs but their exec inits (host pids),
    dying ones included: below pid 1, not the init of their namespace."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            ns = ns_pids(pid)
            if len(ns) < 3 or ns[-1] == "1" or pid1 not in ancestors(pid):
                continue
        except (OSError, StopIteration):
            continue
        found.append(pid)
    return found


class ExecReleaseTest(OutTest):
    """OutTest's calls (ok, create) on one sbxd."""

    def exec(self, run, script, conn=None):
        return self.ok("Exec", pb.ExecRequest(run_id=run, argv=["/bin/sh", "-c", script]),
                       pb.ExecResponse, conn=conn).exec_id

    def wait(self, run, ex, conn=None):
        st = self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=30000),
                     pb.WaitResponse, conn=conn).status
        self.assertNotEqual(st.reason, pb.RUNNING, st)
        return st

    def output(self, run, ex, stream=pb.STDOUT):
        data, off = b"", 0
        while True:
            r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex,
                                                           stream=stream, offset=off,
                                                           timeout_ms=5000),
                        pb.ReadOutputResponse)
            data += r.data
            off = r.next_offset
            if r.eof:
                return data.decode()

    def teardown(self, run):
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)

    def helper_procs(self, run):
        """(pid 1, [exec inits]) of run, by their namespace depth."""
        pid1, inits = None, []
        for pid, _ in processes_with(os.path.join(self.srv.state, "runs", run) + "/"):
            try:
                ns = ns_pids(pid)
            except OSError:
                continue
            if len(ns) == 2 and ns[-1] == "1":
                pid1 = pid
            elif len(ns) == 3 and ns[-1] == "1":
                inits.append(pid)
        return pid1, inits

    def kill_and_wait(self, run, ex):
        self.ok("Signal", pb.SignalRequest(run_id=run, exec_id=ex, signal=9),
                pb.SignalResponse)
        self.assertEqual(self.wait(run, ex).reason, pb.SIGNALED)

    def running_and_prepared(self, run, script):
        """An exec of script (a command line of its own), its command's
        host pid, and the one exec init pid 1 made meanwhile, waiting
        beside it for its claim ([pid])."""
        ex = self.exec(run, script)
        cmd = wait_for(lambda: processes_with(script))[0][0]
        above = set(ancestors(cmd))
        waiting = wait_for(lambda: [p for p in self.helper_procs(run)[1] if p not in above])
        self.assertEqual(len(waiting), 1, "an exec init beside the running one's")
        return ex, cmd, waiting

    # -- item 3: no capability in any set, on the prepared and the fresh path
    def assert_confined(self, text, where, ids=("1000", "1000")):
        f = status_fields(text)
        for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            self.assertIn(k, f, "%s: %r" % (where, text))
            self.assertEqual(int(f[k][0], 16), 0, "%s: %s %s" % (where, k, f[k]))
        self.assertEqual(f["NoNewPrivs"], ["1"], where)
        self.assertEqual(f["Seccomp"], ["2"], where)
        self.assertEqual(set(f["Uid"]), {ids[0]}, where)
        self.assertEqual(set(f["Gid"]), {ids[1]}, where)

    @contextlib.contextmanager
    def without_prepare(self):
        """This test's calls go to a second sbxd whose config says
        exec_prepare false (sbx-helper --no-prepare): every exec's init is
        made at its request."""
        with self.other_server(exec_prepare=False):
            yield

    @contextlib.contextmanager
    def other_server(self, **config):
        """This test's calls go to a second sbxd of that config."""
        srv, c = self.srv, self.c
        self.srv = Server(**config)
        self.c = self.srv.conn(timeout_ms=15000)
        try:
            yield
        finally:
            self.c.close()
            rc = self.srv.stop()
            log = self.srv.log_tail()
            self.srv.cleanup()
            self.srv, self.c = srv, c
            self.assertEqual(rc, 0, log)

    def leaves_of_execs(self, run, scripts):
        """Each script run one after the other, the command's confinement
        checked; the kinds of leaf their commands ran in (prep, exec)."""
        leaves = []
        # Tags of this call only: a command of an earlier call's run may
        # still be dying (review: the fresh half once found the prepared
        # half's sleep).
        ExecReleaseTest.calls = getattr(ExecReleaseTest, "calls", 0) + 1
        for i, script in enumerate(scripts):
            tag = "1.%d%d25" % (ExecReleaseTest.calls, i)
            ex = self.exec(run, "cat /proc/self/status; %s; sleep %s" % (script, tag))
            found = wait_for(lambda: processes_with("sleep " + tag))
            self.assertTrue(found)
            leaves.append(os.path.basename(leaf_of(found[0][0])).split("-")[0])
            self.wait(run, ex)
            self.assert_confined(self.output(run, ex), "exec %d" % i)
        return leaves

    def test_command_has_no_capability_prepared_or_fresh(self):
        # Back to back: every exec but perhaps the first claims an init
        # pid 1 made ahead (prep-N), also while the last exec still ran;
        # with exec_prepare false each starts fresh (exec-N). The command
        # is confined the same on both paths.
        run = self.create()
        try:
            leaves = self.leaves_of_execs(run, ["true"] * 4)
            self.assertEqual(leaves[1:], ["prep"] * 3, leaves)
        finally:
            self.teardown(run)
        with self.without_prepare():
            run = self.create()
            try:
                self.assertEqual(self.leaves_of_execs(run, ["true"] * 3), ["exec"] * 3)
                # Idle, pid 1 holds no exec init: nothing is made ahead.
                time.sleep(0.5)
                self.assertEqual(self.helper_procs(run)[1], [])
            finally:
                self.teardown(run)

    def test_prepared_init_is_locked_before_its_claim(self):
        # The init made ahead is the sandbox user already, with no
        # capability, no_new_privs and the filter: what it then reads of
        # its claim, it reads confined. pid 1 opened its mount namespace
        # before that (it could not after): it holds the running exec's
        # and the prepared one's.
        run = self.create()
        try:
            ex, cmd, waiting = self.running_and_prepared(run, "sleep 60.3125")
            # Seen from the host: the command's host ids, whatever they are.
            with open("/proc/%d/status" % cmd) as f:
                c = status_fields(f.read())
            # Found as soon as it exists, the init locks itself within
            # milliseconds and then waits for its claim, which this test
            # never sends: read until the filter is on and no capability
            # is left (at most 10 s; an init that locks only at its claim
            # never gets there), then check all of it.
            def locked():
                with open("/proc/%d/status" % waiting[0]) as f:
                    text = f.read()
                g = status_fields(text)
                done = g.get("Seccomp") == ["2"] and g.get("CapPrm", ["1"]) == ["0" * 16]
                return text if done else None

            text = wait_for(locked, timeout=10)
            if text is None:
                with open("/proc/%d/status" % waiting[0]) as f:
                    text = f.read()
            self.assert_confined(text, "the prepared exec init", (c["Uid"][0], c["Gid"][0]))
            pid1, _ = self.helper_procs(run)
            held = mnt_fds(pid1)
            if held is not None:
                self.assertEqual(held, 2, "pid 1's mount namespaces of its exec inits")
            self.kill_and_wait(run, ex)
        finally:
            self.teardown(run)

    def test_stdio_opens_again_prepared_or_fresh(self):
        # The stdio pipes are sbxd's, 0600: opened to the sandbox user by
        # exec init on the fresh path and by pid 1 at a claim (the
        # prepared init is that user already). Scripts open them again by
        # name on both.
        script = "cat /dev/stdin; echo out > /dev/stdout && echo err > /dev/stderr"

        def check(paths):
            run = self.create()
            try:
                for i in range(3):
                    ex = self.exec(run, script)
                    st = self.wait(run, ex)
                    self.assertEqual((st.reason, st.exit_code), (pb.EXITED, 0), (paths, i, st))
                    self.assertEqual(self.output(run, ex), "out\n", (paths, i))
                    self.assertEqual(self.output(run, ex, pb.STDERR), "err\n", (paths, i))
            finally:
                self.teardown(run)
        check("prepared")
        with self.without_prepare():
            check("fresh")

    def test_connect_watch_is_the_execs_own_prepared_or_fresh(self):
        # Egress deny's connect watch: a fresh exec's is made by its exec
        # init, a prepared exec's by pid 1 at the claim, in the exec's own
        # network namespace (helper/exec.h: one made ahead would go with
        # an unclaimed init, its close a grace period in pid 1's exit).
        # Either way the command finds one packet socket in its namespace,
        # bound before it ran, and its attempt is recorded.
        script = ("tail -n +2 /proc/net/packet | wc -l; python3 -c 'import socket; "
                  "socket.socket().connect_ex((\"192.0.2.1\", 443))'; sleep %s")

        def check(paths):
            kinds = []
            ExecReleaseTest.calls = getattr(ExecReleaseTest, "calls", 0) + 1
            run = self.create()
            try:
                for i in range(3):
                    tag = "1.%d%d75" % (ExecReleaseTest.calls, i)
                    ex = self.exec(run, script % tag)
                    found = wait_for(lambda: processes_with("sleep " + tag))
                    self.assertTrue(found)
                    kinds.append(os.path.basename(leaf_of(found[0][0])).split("-")[0])
                    st = self.wait(run, ex)
                    self.assertEqual((st.reason, st.exit_code), (pb.EXITED, 0), (paths, st))
                    self.assertEqual(self.output(run, ex).split(), ["1"], (paths, i))
                    self.assertEqual(list(st.network_denied_names), ["192.0.2.1:443"],
                                     (paths, i, st))
            finally:
                self.teardown(run)
            return kinds
        self.assertIn("prep", check("prepared"))
        with self.without_prepare():
            self.assertEqual(check("fresh"), ["exec"] * 3)

    def test_next_init_is_made_while_an_exec_runs(self):
        # Once an exec claimed the init made ahead, pid 1 makes the next
        # one while the command still runs (it runs for the whole test): a
        # process of its own with a leaf of its own, which the next Exec
        # claims.
        run = self.create()
        try:
            ex, cmd, waiting = self.running_and_prepared(run, "sleep 60.1875")
            # Found as soon as it exists: on v1 it joins its leaf itself,
            # within a millisecond of its birth (at most 10 s here).
            def prep_leaf():
                path = leaf_of(waiting[0])
                return path if os.path.basename(path).startswith("prep-") else None

            leaf = wait_for(prep_leaf, timeout=10) or leaf_of(waiting[0])
            self.assertTrue(os.path.basename(leaf).startswith("prep-"), leaf)
            self.assertNotEqual(leaf, leaf_of(cmd))
            nxt = self.exec(run, "sleep 0.5625")
            self.assertEqual(leaf_of(wait_for(lambda: processes_with("sleep 0.5625"))[0][0]),
                             leaf, "the next exec runs in the init made meanwhile")
            self.assertEqual(self.wait(run, nxt).reason, pb.EXITED)
            self.kill_and_wait(run, ex)
        finally:
            self.teardown(run)

    # -- item 4 and 2: what pid 1 holds, and what exec inits inherit
    def test_pid1_holds_no_more_than_the_prepared_exec_mount_namespace(self):
        run = self.create()
        try:
            for _ in range(3):
                self.wait(run, self.exec(run, "true"))
            time.sleep(0.5)
            pid1, _ = self.helper_procs(run)
            self.assertIsNotNone(pid1)
            if mnt_fds(pid1) is None:
                self.skipTest("pid 1's descriptors are not readable from the host")
            base = len(os.listdir("/proc/%d/fd" % pid1))
            # More than the 64 leaves pid 1 puts off, some of them at once.
            for i in range(70):
                self.wait(run, self.exec(run, "exit %d" % (i % 3)))
            exs = [self.exec(run, "sleep 0.3") for _ in range(16)]
            for ex in exs:
                self.wait(run, ex)
            deadline = time.time() + 5
            while time.time() < deadline:
                pid1, inits = self.helper_procs(run)
                held = mnt_fds(pid1)
                if held <= 1 and len(os.listdir("/proc/%d/fd" % pid1)) <= base:
                    break
                time.sleep(0.1)
            self.assertLessEqual(held, 1, "pid 1 holds ended execs' mount namespaces")
            self.assertLessEqual(len(os.listdir("/proc/%d/fd" % pid1)), base)
            # The prepared exec init, waiting for its claim: nothing of
            # pid 1's namespaces came along.
            # Only root reads them: a prepared exec init is the sandbox
            # user, not dumpable, before its claim
            # (test_prepared_init_is_locked_before_its_claim).
            self.assertTrue(inits, "no exec init waits for its claim")
            seen = [mnt_fds(pid) for pid in inits]
            self.assertTrue(all(n in (0, None) for n in seen),
                            "an exec init holds a mount namespace: %s" % seen)
            # And its leaves: the run's cgroup holds the prepared one only.
            ex = self.exec(run, "sleep 2.4375")
            time.sleep(0.3)
            found = processes_with("sleep 2.4375")
            self.assertTrue(found)
            run_cg = os.path.dirname(leaf_of(found[0][0]))
            self.wait(run, ex)
            deadline = time.time() + 5
            while time.time() < deadline:
                kids = [d for d in os.listdir(run_cg)
                        if os.path.isdir(os.path.join(run_cg, d))]
                if len(kids) <= 1:
                    break
                time.sleep(0.1)
            self.assertLessEqual(len(kids), 1, kids)
        finally:
            self.teardown(run)

    # -- the exec's end on exec init's report, before exec init's reap
    def test_nothing_of_an_exec_runs_once_it_ended(self):
        # exec init reports only after it killed and reaped what the
        # command left behind, and pid 1 ends the exec on that report:
        # the moment Wait answers, no process of the exec is left but
        # exec init (looked at at once, from the host; a process with
        # 30000 mappings takes ~75 ms to die here, so a report sent before
        # the kill is seen) and /out no longer changes. Left behind: a new session writing to /out, a double
        # fork, SIGHUP/SIGTERM ignored, a child subreaper with children of
        # its own, the slow one.
        marker = "7.%d" % os.getpid()
        # The last thing the script runs, once all of it is there: the
        # host's snapshot waits for it (made in the script, so that the
        # script's own command line does not match).
        ready = "2.%d5" % os.getpid()
        script = r"""
            (setsid sh -c 'while :; do echo x >> /out/bg; done; sleep %(m)s' &)
            (trap '' HUP TERM; exec sleep %(m)s) &
            python3 -c '
import ctypes, os, subprocess
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
for _ in range(3):
    if os.fork() == 0:
        subprocess.Popen(["sleep", "%(m)s"]); os._exit(0)
os.execvp("sleep", ["sleep", "%(m)s"])' &
            python3 -c '
import mmap, time
maps = [mmap.mmap(-1, 4096, prot=mmap.PROT_READ | (i %% 2 and mmap.PROT_WRITE))
        for i in range(30000)]
open("/tmp/big", "w").close()
time.sleep(1000)' &
            while [ ! -e /tmp/big ] || [ ! -s /out/bg ]; do sleep 0.02; done
            rm /tmp/big
            r=%(ready)s
            sleep ${r}5
            exit 3
        """ % {"m": marker, "ready": ready[:-1]}
        run = self.create(memory_mb=768)
        try:
            # What exec_processes sees of a running exec: its command.
            alive = "sleep 61.%d" % os.getpid()
            ex = self.exec(run, "exec " + alive)
            cmd = wait_for(lambda: processes_with(alive))
            pid1, _ = self.helper_procs(run)
            self.assertEqual(exec_processes(pid1), [cmd[0][0]])
            self.ok("Signal", pb.SignalRequest(run_id=run, exec_id=ex, signal=9),
                    pb.SignalResponse)
            self.wait(run, ex)
            for i in range(3):
                ex = self.exec(run, script)
                # All of it: sh, its last sleep, the writer, the trap, the
                # subreaper (a sleep by now) and its 3 sleeps, the slow one.
                self.assertTrue(wait_for(lambda: processes_with("sleep " + ready), 30))
                procs = exec_processes(pid1)
                self.assertGreaterEqual(len(procs), 9, [cmdline(p) for p in procs])
                st = self.wait(run, ex)
                left = [p for p in procs if os.path.exists("/proc/%d" % p)]
                self.assertEqual((st.reason, st.exit_code), (pb.EXITED, 3), st)
                self.assertEqual(left, [], "round %d: running after the exec's end" % i)
                ex = self.exec(run, "a=$(stat -c %s /out/bg); sleep 0.3; "
                                    "echo $a $(stat -c %s /out/bg)")
                self.wait(run, ex)
                a, b = self.output(run, ex).split()
                self.assertGreater(int(a), 0)
                self.assertEqual(a, b, "round %d: /out/bg grew after the exec's end" % i)
        finally:
            self.teardown(run)

    def test_an_ended_execs_slot_is_free_for_the_next(self):
        # The slot of an exec that ended on its report is held until its
        # exec init is reaped: with every other slot taken (64 execs at
        # once: sbxd's own share of descriptors raised to allow it), an
        # Exec right after an end still gets one.
        with self.other_server(exec_fds_per_run=448):
            self.check_slot_after_end()

    def exec_when_sbxd_has_room(self, run, script):
        """Exec, asked again while sbxd's own share of descriptors is
        still charged to the exec that just ended (its monitor gives it
        back a round later: RESOURCE_EXHAUSTED, "wait for one to end");
        pid 1's refusal, SETUP_FAILED at the Wait, is not retried."""
        req = pb.ExecRequest(run_id=run, argv=["/bin/sh", "-c", script])
        for _ in range(100):
            code, msg, resp = self.c.call("Exec", req, pb.ExecResponse)
            if code != "RESOURCE_EXHAUSTED":
                break
            time.sleep(0.02)
        self.assertEqual(code, "OK", msg)
        return resp.exec_id

    def check_slot_after_end(self):
        run = self.create(pids=512)
        try:
            sleepers = [self.exec(run, "exec sleep 400.%d" % i) for i in range(63)]
            for i in range(8):
                st = self.wait(run, self.exec_when_sbxd_has_room(run, "exit %d" % i))
                self.assertEqual((st.reason, st.exit_code), (pb.EXITED, i), st)
            for ex in sleepers:
                self.ok("Signal", pb.SignalRequest(run_id=run, exec_id=ex, signal=9),
                        pb.SignalResponse)
            for ex in sleepers:
                self.assertEqual(self.wait(run, ex).reason, pb.SIGNALED)
        finally:
            self.teardown(run)

    def test_command_reaches_no_other_mount_namespace(self):
        run = self.create()
        try:
            # An earlier exec that opened a terminal and ended; one that
            # runs beside: neither's namespaces, terminals or pid 1's fds.
            self.wait(run, self.exec(run, "exec 3<>/dev/ptmx; ls /dev/pts > /out/pts1"))
            other = self.exec(run, "sleep 3.8125")
            time.sleep(0.3)
            ex = self.exec(run, r"""
                own=$(readlink /proc/self/ns/mnt)
                ls /proc/1/fd >/dev/null 2>&1 && echo "PID1_FD_VISIBLE"
                readlink /proc/1/ns/mnt >/dev/null 2>&1 && echo "PID1_NS_VISIBLE"
                for p in /proc/[0-9]*; do
                    m=$(readlink $p/ns/mnt 2>/dev/null) || continue
                    [ "$m" = "$own" ] || echo "FOREIGN_NS $p $m"
                    for f in $p/fd/*; do
                        l=$(readlink $f 2>/dev/null) || continue
                        case "$l" in mnt:*|*ns:*) echo "NS_FD $f $l";; esac
                    done
                done
                ls /dev/pts
            """)
            self.wait(run, ex)
            out = self.output(run, ex)
            self.assertNotIn("VISIBLE", out)
            self.assertNotIn("FOREIGN_NS", out)
            self.assertNotIn("NS_FD", out)
            self.assertEqual(out.split(), ["ptmx"], out)
            self.ok("Signal", pb.SignalRequest(run_id=run, exec_id=other, signal=9),
                    pb.SignalResponse)
        finally:
            self.teardown(run)

    # -- item 1: the deny resolver and connect watch of done execs
    def test_done_execs_deny_sockets_are_closed_while_the_run_lives(self):
        run = self.create()
        try:
            lookup = ("getent hosts example.invalid; "
                      "(exec 3<>/dev/tcp/192.0.2.1/80) 2>/dev/null; "
                      "python3 -c 'import socket; socket.socket().connect_ex((\"192.0.2.1\", 81))'"
                      " 2>/dev/null; true")
            self.wait(run, self.exec(run, lookup))
            time.sleep(1.5)
            base = self.srv.fd_count()
            for _ in range(24):
                self.wait(run, self.exec(run, lookup))
            # Many done at once (beyond one round's 16 put-off closes),
            # while new Execs come from another connection.
            c2 = self.srv.conn()
            try:
                exs = [self.exec(run, "sleep 0.5; " + lookup) for _ in range(20)]
                more = []
                for _ in range(20):
                    more.append(self.exec(run, lookup, conn=c2))
                for ex in exs:
                    self.wait(run, ex)
                for ex in more:
                    self.wait(run, ex, conn=c2)
            finally:
                c2.close()
            st = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
            denied = [e for e in st.execs if e.network_denied_attempts]
            self.assertTrue(denied, "no exec recorded its attempts: the watch never read")
            deadline = time.time() + 5
            while self.srv.fd_count() > base + 2 and time.time() < deadline:
                time.sleep(0.1)
            self.assertLessEqual(self.srv.fd_count(), base + 2,
                                 "done execs' deny sockets stay open in sbxd")
        finally:
            self.teardown(run)

    def test_teardown_amid_put_off_leaves_leaves_nothing(self):
        run = self.create()
        ex = self.exec(run, "sleep 3.6875")
        time.sleep(0.3)
        found = processes_with("sleep 3.6875")
        self.assertTrue(found)
        run_cg = os.path.dirname(leaf_of(found[0][0]))
        self.ok("Signal", pb.SignalRequest(run_id=run, exec_id=ex, signal=9), pb.SignalResponse)
        self.wait(run, ex)
        exs = [self.exec(run, "sleep 0.2") for _ in range(24)]
        # Requests that keep pid 1's control socket busy: its put-off
        # rmdirs wait for a quiet moment that this never gives.
        stop = threading.Event()

        def flood():
            c = self.srv.conn()
            try:
                while not stop.is_set():
                    c.call("Signal", pb.SignalRequest(run_id=run, exec_id=exs[0], signal=15),
                           pb.SignalResponse)
            finally:
                c.close()

        t = threading.Thread(target=flood)
        t.start()
        try:
            for e in exs:
                self.wait(run, e)
        finally:
            stop.set()
            t.join()
        self.teardown(run)
        deadline = time.time() + 5
        while os.path.exists(run_cg) and time.time() < deadline:
            time.sleep(0.1)
        self.assertFalse(os.path.exists(run_cg), os.listdir(run_cg) if os.path.exists(run_cg)
                         else None)
        self.assertEqual(processes_with(os.path.join(self.srv.state, "runs", run) + "/"), [])


if __name__ == "__main__":
    unittest.main()
