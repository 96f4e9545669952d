# SPDX-License-Identifier: Apache-2.0
"""The warm pool (config pool; docs/operator/pool.md): a CreateRun whose
policy has a pool shape's digest gets a sandbox built ahead, says so
(launch WARM) and works like a cold one; a member is never shared or
reused, its run clock starts at the claim, a size of 0 spends nothing, a
member that fails is destroyed and counted, members count in capacity, a
shape mismatch (or the caller's own /data) is cold, another identity's
warm run sees nothing of the first's, and a restart reclaims what a
killed sbxd's pool left."""
import hashlib
import http.client
import json
import os
import re
import signal
import tempfile
import time
import unittest

from sbxdfix import Server, policy_json, processes_with
from sbxrpc import sandbox_pb2 as pb

WARM, COLD = pb.LAUNCH_WARM, pb.LAUNCH_COLD


def shape(name="std", size=2, **limits):
    p = json.loads(policy_json(**limits))
    return {"name": name, "policy": p, "size": size}


def helpers(state):
    """sbx-helper serve processes of this sbxd (their --policy is under state)."""
    return [p for p in processes_with(state) if "serve" in p[1]]


def ppid_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def argv_of(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().decode(errors="replace").split("\0")


def wait_for_processes(needle, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = processes_with(needle)
        if found:
            return found
        time.sleep(0.01)
    raise AssertionError("no process with %r" % needle)


def sandboxes(state):
    """The run directories the helpers of this sbxd serve (one per sandbox,
    whatever processes each has)."""
    runs = os.path.join(state, "runs") + "/"
    return {cmd.split(runs, 1)[1].split("/", 1)[0] for _, cmd in helpers(state)}


class Pool(unittest.TestCase):
    def start(self, **config):
        # The test's own uid (its ipc calls) is an operator: Health's pool
        # counts are operators' only.
        config.setdefault("operators", ["uid:%d" % os.getuid()])
        self.srv = Server(**config)
        self.addCleanup(self.srv.cleanup)
        self.c = self.srv.conn()
        self.addCleanup(self.c.close)
        return self.srv

    def ok(self, name, req, resp_type, conn=None, token=None):
        code, msg, resp = (conn or self.c).call(name, req, resp_type, token=token)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def health(self):
        return self.ok("Health", pb.HealthRequest(), pb.HealthResponse)

    def wait_ready(self, n, shape_index=0, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            h = self.health()
            if h.pool[shape_index].ready >= n:
                return h
            time.sleep(0.05)
        self.fail("pool not ready: %s %s" % (self.health().pool, self.srv.log_tail()))

    def create(self, conn=None, token=None, inputs=(), **limits):
        req = pb.CreateRunRequest(policy_json=policy_json(**limits))
        for path, data in inputs:
            req.inputs.add(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        return self.ok("CreateRun", req, pb.CreateRunResponse, conn=conn, token=token)

    def run_sh(self, run, script, conn=None, token=None):
        ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=["/bin/sh", "-c", script]),
                     pb.ExecResponse, conn=conn, token=token).exec_id
        st = self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=60000),
                     pb.WaitResponse, conn=conn, token=token).status
        out = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex,
                                                         stream=pb.STDOUT, timeout_ms=5000),
                      pb.ReadOutputResponse, conn=conn, token=token).data
        return st, out

    def teardown(self, run, conn=None, token=None):
        return self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse,
                       conn=conn, token=token).manifest

    def scrape(self, srv):
        deadline = time.time() + 30
        while True:
            with open(srv.path("sbxd.stderr"), errors="replace") as f:
                m = re.search(r"sbxd: metrics on http://127\.0\.0\.1:(\d+)/metrics", f.read())
            if m:
                c = http.client.HTTPConnection("127.0.0.1", int(m.group(1)), timeout=30)
                try:
                    c.request("GET", "/metrics")
                    return c.getresponse().read().decode()
                finally:
                    c.close()
            self.assertLess(time.time(), deadline, srv.log_tail())
            time.sleep(0.05)

    def test_a_warm_create_says_warm_and_works_like_a_cold_one(self):
        d = tempfile.mkdtemp(prefix="pool-in-")
        self.addCleanup(os.rmdir, d)
        srv = self.start(pool=[shape()], input_dirs=[d], metrics={"listen": "127.0.0.1:0"})
        self.wait_ready(2)
        data = b"id,amount\n1,10\n"
        created = self.create(inputs=[("in/ledger.csv", data)])
        run = created.run_id
        self.assertEqual(created.launch, WARM)
        self.ok("PutInput", pb.PutInputRequest(run_id=run, path="in/ledger.csv", data=data,
                                               last=True), pb.PutInputResponse)
        st, out = self.run_sh(run, "cat /data/in/ledger.csv > /out/copy.csv; id -u; "
                                   "ls /out; echo x > /tmp/t")
        self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code), ("EXITED", 0), st)
        self.assertIn(b"copy.csv", out)
        self.assertNotEqual(out.split()[0], str(os.getuid()).encode(), "sandbox user is ours")
        fetched = self.ok("FetchArtifact", pb.FetchArtifactRequest(run_id=run, path="copy.csv"),
                          pb.FetchArtifactResponse)
        self.assertEqual(fetched.data, data)
        self.assertEqual(self.ok("Status", pb.StatusRequest(run_id=run),
                                 pb.StatusResponse).launch, WARM)
        listed = self.ok("ListRuns", pb.ListRunsRequest(), pb.ListRunsResponse)
        self.assertEqual([r.launch for r in listed.runs if r.run_id == run], [WARM])
        m = self.teardown(run)
        self.assertEqual(m.launch, WARM)
        self.assertEqual([a.path for a in m.artifacts], ["copy.csv"])
        # Teardown leaves nothing of it: its directory and its processes.
        self.assertFalse(os.path.exists(os.path.join(srv.state, "runs", run)))
        self.assertNotIn(run, sandboxes(srv.state))
        # A shape mismatch is cold, and so is a caller's own /data.
        other = self.create(memory_mb=200)
        self.assertEqual(other.launch, COLD)
        self.teardown(other.run_id)
        own = self.ok("CreateRun", pb.CreateRunRequest(policy_json=policy_json(), input_dir=d),
                      pb.CreateRunResponse)
        self.assertEqual(own.launch, COLD)
        self.teardown(own.run_id)
        created = [e for e in srv.audit_events() if e["event"] == "run_created"]
        self.assertEqual([e["launch"] for e in created], ["warm", "cold", "cold"])
        # The pool refilled the member it gave.
        h = self.wait_ready(2)
        text = self.scrape(srv)
        self.assertIn('sbx_runs_created_total{launch="LAUNCH_WARM"} 1', text)
        self.assertIn('sbx_runs_created_total{launch="LAUNCH_COLD"} 2', text)
        self.assertIn('sbx_pool_ready{shape="0"} 2', text)
        self.assertEqual((h.pool[0].name, h.pool[0].size, h.pool[0].claimed), ("std", 2, 1))
        # Another identity sees the shape and what is ready, not the counts
        # that would tell it when others create runs.
        with self.srv.conn(tls=True) as bob:
            code, msg, hb = bob.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                     token=self.srv.tokens["bob"])
        self.assertEqual(code, "OK", msg)
        self.assertEqual((hb.pool[0].name, hb.pool[0].size, hb.pool[0].claimed,
                          hb.pool[0].built, hb.pool[0].error), ("std", 2, 0, 0, ""))
        self.assertGreaterEqual(h.pool[0].built, 3)
        self.assertTrue(h.pool[0].shape_digest.startswith("sha256:"))

    def test_members_make_their_first_exec_init_before_ready(self):
        # sbxd serves members with --prepare-first (helper.serve checks what
        # the flag does): Ready comes once pid 1 made the first exec's init,
        # so a claim right after the member became ready does not start its
        # first exec cold. The claimed run's first exec runs in an init made
        # ahead (leaf prep-N). A cold run's helper has no such flag.
        srv = self.start(pool=[shape(size=1)])
        self.wait_ready(1)
        procs = dict(helpers(srv.state))
        helper = [p for p in procs if ppid_of(p) not in procs]
        self.assertEqual(len(helper), 1, procs)
        self.assertIn("--prepare-first", argv_of(helper[0]))
        created = self.create()
        self.assertEqual(created.launch, WARM)
        run = created.run_id
        ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=["sleep", "30.4375"]),
                     pb.ExecResponse).exec_id
        cmd = wait_for_processes("sleep 30.4375")
        with open("/proc/%d/cgroup" % cmd[0][0]) as f:
            paths = [line.rstrip("\n").split(":", 2)[2] for line in f]
        leaves = {p.rsplit("/", 1)[-1] for p in paths if p.count("/") > 1}
        self.assertTrue(leaves and all(l.startswith("prep-") for l in leaves), paths)
        self.ok("Signal", pb.SignalRequest(run_id=run, exec_id=ex, signal=9), pb.SignalResponse)
        self.teardown(run)
        cold = self.create(memory_mb=200)
        self.assertEqual(cold.launch, COLD)
        argvs = [argv_of(p) for p, c in helpers(srv.state) if cold.run_id in c]
        self.assertTrue(argvs)
        self.assertFalse([a for a in argvs if "--prepare-first" in a], argvs)
        self.teardown(cold.run_id)

    def test_two_runs_never_get_the_same_member_nor_see_each_other(self):
        self.start(pool=[shape(size=2)], pool_builds_per_second=1)
        self.wait_ready(2)
        tls = self.srv.conn(tls=True)
        self.addCleanup(tls.close)
        alice = self.create(conn=tls, token=self.srv.tokens["alice"])
        bob = self.create(conn=tls, token=self.srv.tokens["bob"])
        self.assertEqual((alice.launch, bob.launch), (WARM, WARM))
        self.assertNotEqual(alice.run_id, bob.run_id)
        st, _ = self.run_sh(alice.run_id, "echo secret > /out/a; echo secret > /tmp/a; "
                                          "sleep 999.375 &", conn=tls,
                            token=self.srv.tokens["alice"])
        self.assertEqual(st.exit_code, 0)
        # Bob's sandbox is another: nothing of alice's files or processes.
        st, out = self.run_sh(bob.run_id, "ls -A /out /tmp /data; ps -e -o args 2>/dev/null "
                                          "|| ls /proc", conn=tls, token=self.srv.tokens["bob"])
        self.assertEqual(st.exit_code, 0, out)
        self.assertNotIn(b"secret", out)
        self.assertNotIn(b"999.375", out)
        self.assertNotIn(b"a\n", out.split(b"/tmp:")[0])
        code, _, _ = tls.call("Status", pb.StatusRequest(run_id=alice.run_id), pb.StatusResponse,
                              token=self.srv.tokens["bob"])
        self.assertEqual(code, "NOT_FOUND")
        # A torn-down member is never handed out again: the next warm
        # create is a new run in a new sandbox.
        self.teardown(alice.run_id, conn=tls, token=self.srv.tokens["alice"])
        self.wait_ready(1)
        again = self.create(conn=tls, token=self.srv.tokens["alice"])
        self.assertEqual(again.launch, WARM)
        self.assertNotIn(again.run_id, (alice.run_id, bob.run_id))
        st, out = self.run_sh(again.run_id, "ls -A /out /tmp", conn=tls,
                              token=self.srv.tokens["alice"])
        self.assertNotIn(b"a\n", out)

    def test_the_run_clock_starts_at_the_claim(self):
        # run_seconds 10: a member is rebuilt after 5 s (half of it). One
        # 3.5 s old when claimed would, by a clock from its build, end an
        # exec of 7.5 s (3.5 + 7.5 > 10); from the claim it does not.
        self.start(pool=[shape(size=1, run_seconds=10, script_seconds=10)],
                   pool_max_age_seconds=60)
        self.wait_ready(1)
        seen = time.time()
        time.sleep(3.5)
        before_ms = int(time.time() * 1000)
        created = self.create(run_seconds=10, script_seconds=10)
        self.assertEqual(created.launch, WARM, "the member expired before the claim")
        self.assertGreaterEqual(created.deadline_unix_ms, before_ms + 10000)
        self.assertGreater(time.time() - seen, 3.4)
        st, out = self.run_sh(created.run_id, "sleep 7.5; echo lived")
        self.assertEqual((pb.ExitReason.Name(st.reason), out), ("EXITED", b"lived\n"), st)

    def test_refused_creates_leave_the_pool_alone(self):
        # A caller at its cap (or whose create is refused for its own
        # reasons) loops CreateRun of the pool's policy: refused before
        # the pool is looked at, so no member is taken and destroyed and
        # another caller's create is still warm (review: a loop of refused
        # creates emptied the pool for everyone).
        self.start(pool=[shape(size=2)], runs_max_per_identity=1)
        self.wait_ready(2)
        tls = self.srv.conn(tls=True)
        self.addCleanup(tls.close)
        held = self.create(conn=tls, token=self.srv.tokens["bob"], memory_mb=64)
        refused = 0
        for _ in range(40):
            code, msg, _ = tls.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                    pb.CreateRunResponse, token=self.srv.tokens["bob"])
            refused += code == "RESOURCE_EXHAUSTED"
        self.assertEqual(refused, 40)
        h = self.health()
        self.assertEqual((h.pool[0].ready, h.pool[0].claimed), (2, 0), h.pool)
        r = self.create(conn=tls, token=self.srv.tokens["alice"])
        self.assertEqual(r.launch, WARM)
        self.assertEqual(held.launch, COLD)

    def test_size_0_spends_nothing(self):
        srv = self.start(pool=[shape(size=0)])
        time.sleep(1)
        h = self.health()
        self.assertEqual((h.pool[0].ready, h.pool[0].built, h.pool[0].failed), (0, 0, 0))
        self.assertEqual(helpers(srv.state), [])
        self.assertEqual(os.listdir(os.path.join(srv.state, "runs")), [])
        self.assertEqual(self.create().launch, COLD)

    def test_a_member_that_fails_is_destroyed_and_counted(self):
        srv = self.start(pool=[shape(size=1), shape(name="too-big", size=1, memory_mb=4096)],
                         limits_max={"memory_mb": 1024})
        self.wait_ready(1)
        deadline = time.time() + 30
        while self.health().pool[1].failed < 1 and time.time() < deadline:
            time.sleep(0.05)
        h = self.health()
        self.assertGreaterEqual(h.pool[1].failed, 1)
        self.assertIn("memory_mb", h.pool[1].error)
        self.assertEqual(h.pool[1].ready, 0)
        # A ready member whose sandbox dies while it waits is destroyed
        # (its directory too), counted, and built again.
        runs_dir = os.path.join(srv.state, "runs")
        (member,) = os.listdir(runs_dir)
        # Its prepared exec init is another uid (the sandbox user) and
        # dies with pid 1: gone or out of reach by then, it is skipped.
        for pid in [p for p, cmd in helpers(srv.state) if member in cmd]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.time() + 30
        while (self.health().pool[0].failed < 1 or os.path.exists(
                os.path.join(runs_dir, member))) and time.time() < deadline:
            time.sleep(0.05)
        self.assertGreaterEqual(self.health().pool[0].failed, 1)
        self.assertFalse(os.path.exists(os.path.join(runs_dir, member)))
        h = self.wait_ready(1)
        self.assertGreaterEqual(h.pool[0].built, 2)
        created = self.create()
        self.assertEqual(created.launch, WARM)
        self.assertNotEqual(created.run_id, member)
        events = [e for e in srv.audit_events() if e["event"] == "pool_member_failed"]
        self.assertTrue(any(e["shape"] == "too-big" for e in events), events)

    def test_members_count_in_capacity_and_a_full_host_builds_no_more(self):
        # sbxdfix's policy commits 256 + 16 + 2 x 16 = 304 MiB: two fit in 700.
        srv = self.start(pool=[shape(size=3)],
                         capacity={"cpu_millis": 64000, "memory_mb": 700,
                                   "cpu_overcommit_percent": 100,
                                   "memory_overcommit_percent": 100, "memory_reserve_mb": 0})
        h = self.wait_ready(2)
        time.sleep(1.5)
        h = self.health()
        self.assertEqual(h.pool[0].ready, 2)
        self.assertEqual(len(sandboxes(srv.state)), 2)
        self.assertEqual(h.committed_memory_mb, 2 * 304)
        self.assertEqual(h.run_slots_free, 32 - 2)
        # A cold run that does not fit beside them is refused as on a full host.
        code, msg, _ = self.c.call("CreateRun", pb.CreateRunRequest(
            policy_json=policy_json(memory_mb=200)), pb.CreateRunResponse)
        self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
        # A warm claim moves its member's share to the run: still two.
        created = self.create()
        self.assertEqual(created.launch, WARM)
        self.assertEqual(self.health().committed_memory_mb, 2 * 304)

    def test_a_restart_reclaims_what_a_killed_sbxd_pool_left(self):
        srv = self.start(pool=[shape(size=2)])
        self.wait_ready(2)
        runs_dir = os.path.join(srv.state, "runs")
        self.assertEqual(len(os.listdir(runs_dir)), 2)
        srv.proc.kill()
        srv.proc.wait()
        deadline = time.time() + 10
        while helpers(srv.state) and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(helpers(srv.state), [], "pool members outlived sbxd")
        srv.stop()
        srv.edit_config(pool=[shape(size=0)])
        srv.start()
        self.assertEqual(os.listdir(runs_dir), [])
        self.assertEqual(helpers(srv.state), [])
        self.c = srv.conn()
        self.addCleanup(self.c.close)
        self.assertEqual(self.create().launch, COLD)

    def test_a_reload_resizes_and_replaces_the_pool(self):
        srv = self.start(pool=[shape(size=0)])
        srv.edit_config(pool=[shape(size=2)])
        srv.proc.send_signal(signal.SIGHUP)
        self.wait_ready(2)
        self.assertEqual(len(sandboxes(srv.state)), 2)
        # Another policy under the same name: the old members go.
        srv.edit_config(pool=[shape(size=1, memory_mb=200)])
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 30
        while len(sandboxes(srv.state)) != 1 and time.time() < deadline:
            time.sleep(0.05)
        h = self.wait_ready(1)
        self.assertEqual(len(sandboxes(srv.state)), 1)
        self.assertEqual(self.create(memory_mb=200).launch, WARM)
        self.assertEqual(self.create().launch, COLD)
        self.assertTrue(h.pool[0].shape_digest)
        srv.edit_config(pool=[])
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 30
        while self.health().pool and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(list(self.health().pool), [])

    def test_a_reload_that_changes_the_effective_digest_rebuilds_the_members(self):
        # The shape's policy is the same, but its effective digest holds
        # the lease sbxd fills in (idle_seconds_default): the member built
        # before the reload would match no CreateRun, and held its slot
        # until it aged out.
        srv = self.start(pool=[shape(size=1)], idle_seconds_default=300)
        old = self.wait_ready(1).pool[0].shape_digest
        before = sandboxes(srv.state)
        srv.edit_config(idle_seconds_default=400)
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 30
        while time.time() < deadline:
            h = self.health()
            if h.pool[0].shape_digest != old and h.pool[0].ready == 1:
                break
            time.sleep(0.05)
        self.assertNotEqual(h.pool[0].shape_digest, old, srv.log_tail())
        self.assertEqual(h.pool[0].ready, 1)
        self.assertFalse(before & sandboxes(srv.state), "the stale member is still there")
        r = self.create()
        self.assertEqual((r.launch, r.policy_digest), (WARM, h.pool[0].shape_digest))
        self.assertEqual(r.effective_policy.limits.idle_seconds, 400)
        self.teardown(r.run_id)

    def test_a_drain_destroys_the_members(self):
        srv = self.start(pool=[shape(size=2)])
        self.wait_ready(2)
        self.assertEqual(srv.stop(signal.SIGTERM), 0, srv.log_tail())
        self.assertEqual(helpers(srv.state), [])
        self.assertEqual(os.listdir(os.path.join(srv.state, "runs")), [])


if __name__ == "__main__":
    unittest.main()
