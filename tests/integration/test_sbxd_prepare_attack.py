# SPDX-License-Identifier: Apache-2.0
"""The next exec's init made ahead while execs run (review of cccfd00),
attacked through the real sbxd and sbx-helper, as the sandbox's code: a
running exec that fills the run's pids so that the prepare fails (the run
goes on, nothing is leaked), that looks for the prepared (then claimed)
init and the next exec's argv, env and terminals, and an exec whose
deadline falls while pid 1 makes the next init."""
import os
import time
import unittest

from sbxdfix import processes_with
from sbxrpc import policy_pb2, sandbox_pb2 as pb
import test_sbxd_exec_release as er
from test_sbxd_exec_release import leaf_of, wait_for
from test_sbxd_out import OutTest

PY = "/usr/bin/python3"

# Forks sleepers until the run's pids are gone, says how many in /out/full,
# then holds them.
FILL_PIDS = """if 1:
    import os, time
    n = 0
    try:
        while n < 4096:
            if os.fork() == 0:
                time.sleep(300); os._exit(0)
            n += 1
    except OSError:
        pass
    open('/out/full', 'w').write(str(n))
    time.sleep(300)
    """

# Watches, for as long as it runs, everything of the run an exec can see:
# every /proc entry's cmdline and environ (the marker spelled in two
# halves, so that this script's own command line does not match; a child
# of its own does, to show the scan works), the terminals in /dev/pts, and
# every pid it can signal; what it found goes to /out/seen.
SNOOP = """if 1:
    import os, signal, subprocess, time
    seen = set()
    # One of its own to find: the scan works.
    own = subprocess.Popen(['/usr/bin/python3', '-c', 'import time; time.sleep(%f)',
                            'MARK' + '4711', 'OWN'])
    open('/out/snooping', 'w').close()
    end = time.time() + %f
    while time.time() < end:
        for p in os.listdir('/proc'):
            if not p.isdigit():
                continue
            for f in ('cmdline', 'environ'):
                try:
                    data = open('/proc/%%s/%%s' %% (p, f), 'rb').read()
                except OSError:
                    continue
                if b'MARK' + b'4711' in data:
                    seen.add('own' if b'OWN' in data else '%%s/%%s' %% (p, f))
        for t in os.listdir('/dev/pts'):
            if t != 'ptmx':
                seen.add('pts/' + t)
        for pid in range(2, 64):
            if pid in (os.getpid(), own.pid):
                continue
            try:
                os.kill(pid, 0)
                seen.add('kill %%d' %% pid)
            except OSError:
                pass
        time.sleep(0.01)
    own.wait()
    open('/out/seen', 'w').write('\\n'.join(sorted(seen)))
    """


class PrepareAttackTest(OutTest):
    # ExecReleaseTest's calls, not its tests.
    exec = er.ExecReleaseTest.exec
    wait = er.ExecReleaseTest.wait
    output = er.ExecReleaseTest.output
    teardown = er.ExecReleaseTest.teardown
    helper_procs = er.ExecReleaseTest.helper_procs

    def run_cgroup(self, needle):
        """The run's cgroup (pids hierarchy): the parent of the leaf of the
        exec whose command line has needle."""
        found = wait_for(lambda: processes_with(needle))
        self.assertTrue(found, needle)
        return os.path.dirname(leaf_of(found[0][0]))

    def run_leaves(self, base):
        """The names of the run's cgroup leaves."""
        return sorted(n for n in os.listdir(base) if n.startswith(("prep-", "exec-")))

    def fd_count(self, pid):
        return len(os.listdir("/proc/%d/fd" % pid))

    def cat(self, run, path):
        return self.ok("FetchArtifact", pb.FetchArtifactRequest(run_id=run, path=path),
                       pb.FetchArtifactResponse).data.decode()

    def test_pids_filled_by_a_running_exec_fail_the_prepare_not_the_run(self):
        run = self.create(pids=16)
        try:
            self.assertEqual(self.wait(run, self.exec(run, "true")).exit_code, 0)
            pid1, _ = self.helper_procs(run)
            time.sleep(0.3)
            fds = self.fd_count(pid1)
            hog = self.ok("Exec", pb.ExecRequest(run_id=run, argv=[PY, "-c", FILL_PIDS]),
                          pb.ExecResponse).exec_id
            self.wait_for(run, "full")
            # Claims the init made ahead, then pid 1's next prepare finds
            # no pid left: the exec fails to fork, the prepare fails.
            st = self.wait(run, self.exec(run, "echo starved"))
            self.assertEqual(pb.ExitReason.Name(st.reason), "SETUP_FAILED", st)
            self.ok("Signal", pb.SignalRequest(run_id=run, exec_id=hog, signal=9),
                    pb.SignalResponse)
            self.assertEqual(self.wait(run, hog).reason, pb.SIGNALED)
            # The run works again, and makes its execs' inits ahead again
            # (the first one fresh when the prepare failed, or claimed
            # ahead when the starved init's end freed a pid in time).
            kinds = []
            for i in range(3):
                ex = self.exec(run, "echo ok%d; sleep 0.5%d" % (i, i))
                kinds.append(os.path.basename(leaf_of(
                    wait_for(lambda: processes_with("sleep 0.5%d" % i))[0][0])).split("-")[0])
                self.assertEqual(self.wait(run, ex).exit_code, 0)
                self.assertEqual(self.output(run, ex), "ok%d\n" % i)
            self.assertEqual(kinds[1:], ["prep", "prep"], kinds)
            ex = self.exec(run, "sleep 2.40625")
            base = self.run_cgroup("sleep 2.40625")
            self.wait(run, ex)
            # Nothing left over: at most the one init made ahead (and
            # leaves whose removal is put off until pid 1 is idle).
            time.sleep(0.5)
            self.assertLessEqual(len([n for n in self.run_leaves(base)
                                      if n.startswith("prep-")]), 1, self.run_leaves(base))
            self.assertLessEqual(len(self.helper_procs(run)[1]), 1)
            self.assertLessEqual(self.fd_count(pid1), fds + 1)
        finally:
            self.teardown(run)

    def test_a_running_exec_sees_nothing_of_the_init_made_meanwhile(self):
        run = self.create()
        try:
            snoop = self.ok("Exec", pb.ExecRequest(run_id=run, argv=[PY, "-c", SNOOP % (3.0, 3.0)]),
                            pb.ExecResponse).exec_id
            self.wait_for(run, "snooping")
            # Made while the snoop ran, claimed now: argv, env and a
            # terminal of the next exec's.
            nxt = self.ok("Exec", pb.ExecRequest(
                run_id=run, env=[policy_pb2.EnvVar(name="SECRET", value="MARK4711")],
                argv=[PY, "-c", "import pty, time; m, s = pty.openpty(); time.sleep(2)",
                      "MARK4711"]), pb.ExecResponse).exec_id
            self.assertEqual(self.wait(run, nxt).exit_code, 0)
            self.assertEqual(self.wait(run, snoop).exit_code, 0)
            self.assertEqual(self.cat(run, "seen"), "own")
        finally:
            self.teardown(run)

    def test_a_deadline_is_not_put_off_by_the_prepare(self):
        run = self.create(script_seconds=1)
        try:
            worst = 0
            for i in range(5):
                ex = self.exec(run, "sleep 30.%d" % i)
                st = self.wait(run, ex)
                self.assertEqual(st.reason, pb.TIMEOUT)
                worst = max(worst, st.ended_unix_ms - st.started_unix_ms)
            self.assertLess(worst, 1500)
        finally:
            self.teardown(run)

    def test_signal_and_teardown_storm_leaves_nothing(self):
        # Many execs at once, each claiming the init made while the last
        # ran, killed as they start, then the run torn down mid-way: no
        # process, leaf or pid 1 is left, and sbxd goes on answering.
        for _ in range(2):
            run = self.create()
            pid1, _ = self.helper_procs(run)
            execs = [self.exec(run, "sleep 77.%d" % i) for i in range(12)]
            base = self.run_cgroup("sleep 77.0")
            for ex in execs[::2]:
                self.ok("Signal", pb.SignalRequest(run_id=run, exec_id=ex, signal=9),
                        pb.SignalResponse)
            for ex in execs[::2][:3]:
                self.wait(run, ex)
            self.teardown(run)
            self.assertTrue(wait_for(lambda: not processes_with("sleep 77.")
                                      and not os.path.exists("/proc/%d" % pid1)
                                      and not os.path.exists(base), 10),
                             (processes_with("sleep 77."), os.path.exists(base)))
        run = self.create()
        self.assertEqual(self.wait(run, self.exec(run, "true")).exit_code, 0)
        self.teardown(run)

    def test_run_expiring_amid_back_to_back_execs(self):
        # run_seconds ends while pid 1 keeps making the next init: every
        # exec ends, none after the run, and nothing is left.
        run = self.create(run_seconds=2, script_seconds=2)
        pid1, _ = self.helper_procs(run)
        self.exec(run, "sleep 0.4375")
        base = self.run_cgroup("sleep 0.4375")
        reasons = set()
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            code, msg, resp = self.c.call("Exec", pb.ExecRequest(
                run_id=run, argv=["/bin/sh", "-c", "sleep 0.05"]), pb.ExecResponse)
            if code != "OK":
                reasons.add(code)
                break
            st = self.wait(run, resp.exec_id)
            reasons.add(pb.ExitReason.Name(st.reason))
        self.assertTrue(wait_for(lambda: not os.path.exists("/proc/%d" % pid1), 10))
        self.assertTrue(wait_for(lambda: not os.path.exists(base), 10), base)
        self.assertIn("EXITED", reasons)
        self.teardown(run)


if __name__ == "__main__":
    unittest.main()
