# SPDX-License-Identifier: Apache-2.0
"""A CreateRun that times out is tried again on the same host with the same
idempotency key (issue 19), on loopback: of two serving sbxd, the one that
got the request is stopped (SIGSTOP) while its sbx-helper for the run is
held at a gate (a wrapper that waits for a file before it execs the real
helper, so the run cannot be Ready before the stop), so sbxctl's first try
times out (--call-timeout 1); it is let go on while the client's next try
waits. The client must get the run that host made, no host may have
made a second one (a client that went to the other host after the timeout
would leave two runs, one orphaned), and that host's sbx_rpc_repeats_total
must show the retry (a client that only waited longer than --call-timeout
would send none). The netns version, with the reply
dropped by the network, is tests/fleet/netns.sh."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import sbxdfix


class FleetRetry(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sbx-test-fleet-retry-")
        os.chmod(cls.dir, 0o755)
        sbxdfix.make_certs(cls.dir)  # one CA, a server certificate for localhost
        cls.token = "a" + os.urandom(16).hex()
        cls.ops = "o" + os.urandom(16).hex()
        tokens = [{"name": n, "sha256": hashlib.sha256(t.encode()).hexdigest()}
                  for n, t in (("alice", cls.token), ("ops", cls.ops))]
        p = lambda name: os.path.join(cls.dir, name)  # noqa: E731
        # While armed, a helper either sbxd starts waits for the gate.
        cls.gate = sbxdfix.HelperGate(cls.dir)
        cls.srv = [sbxdfix.Server(tls={"cert": p("server.pem"), "key": p("server.key"),
                                       "client_ca": p("ca.pem")},
                                  tokens=tokens, operators=["token:ops"], helper=cls.gate.helper,
                                  metrics={"listen": "127.0.0.1:0"})
                   for _ in range(2)]

    @classmethod
    def tearDownClass(cls):
        for s in cls.srv:
            s.cleanup()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def runs(self, s):
        r = s.cli("--json", "runs", "--all", token=self.ops)
        self.assertEqual(r.returncode, 0, r.stderr)
        return {x["run_id"] for x in json.loads(r.stdout or "{}").get("runs", [])}

    def repeats(self, s):
        """sbx_rpc_repeats_total of s, parked and replayed: tries that came
        with a request id s had seen (the first try's)."""
        status, _, text = sbxdfix.metrics_scrape(s.metrics_port())
        self.assertEqual(status, 200, text)
        samples = sbxdfix.metrics_parse(text)
        return sum(sbxdfix.metric_value(samples, "sbx_rpc_repeats_total", outcome=o)
                   for o in ("parked", "replayed"))

    def cli_args(self, eps):
        p = lambda name: os.path.join(self.dir, name)  # noqa: E731
        return [sbxdfix.CLI, "--endpoint", eps, "--tls-cert", p("client.pem"), "--tls-key",
                p("client.key"), "--tls-ca", p("ca.pem"), "--token", self.token]

    def test_a_timed_out_create_is_retried_on_its_host_into_one_run(self):
        policy = os.path.join(self.dir, "policy.json")
        with open(policy, "w") as f:
            f.write(sbxdfix.policy_json(memory_mb=64))
        eps = ",".join("tls+tcp://localhost:%d" % s.port for s in self.srv)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        before = [self.runs(s) for s in self.srv]
        repeats_before = [self.repeats(s) for s in self.srv]
        known = {s.proc.pid: sbxdfix.children(s.proc.pid) for s in self.srv}
        self.gate.arm()
        client = subprocess.Popen(
            self.cli_args(eps) + ["--call-timeout", "1", "create", "--policy", policy],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        stopped = None
        try:
            deadline = time.monotonic() + 30
            while stopped is None and time.monotonic() < deadline and client.poll() is None:
                for s in self.srv:
                    if sbxdfix.children(s.proc.pid) - known[s.proc.pid]:
                        s.proc.send_signal(signal.SIGSTOP)
                        stopped = s
                        break
                time.sleep(0.01)
            # The helper waits at the gate: no answer can have left.
            self.assertIsNotNone(stopped, "no sbxd started a helper for the create (client "
                                 "status %s)" % client.poll())
            self.gate.open()
            # Past the first try's 1 s: the client's next try is waiting.
            time.sleep(1.6)
            self.assertIsNone(client.poll(), "the client still waits for its host (it did not "
                              "give it up after one timeout)")
        finally:
            for s in self.srv:
                s.proc.send_signal(signal.SIGCONT)
            self.gate.reset()
        out, err = client.communicate(timeout=60)
        self.assertEqual(client.returncode, 0, err)
        handle = out.strip()
        run_id, _, host = handle.partition("@")
        self.assertEqual(host, "localhost:%d" % stopped.port, "the retry went to the same host")
        made = [self.runs(s) - b for s, b in zip(self.srv, before)]
        self.assertEqual(sorted(len(m) for m in made), [0, 1],
                         "exactly one run on the two hosts: %s" % made)
        self.assertEqual(made[self.srv.index(stopped)], {run_id})
        # The client did not merely wait longer than its --call-timeout: a
        # second try, with the first one's request id (so one CreateRun
        # for sbxd), reached the stopped host. (A try that went to the other
        # host instead would be a first there, no repeat: the one run
        # above is what rules that out.)
        repeats = [self.repeats(s) - b for s, b in zip(self.srv, repeats_before)]
        self.assertGreaterEqual(repeats[self.srv.index(stopped)], 1,
                                "the retry reached the host that had the first try")
        r = subprocess.run(self.cli_args(eps) + ["teardown", handle],
                           capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)

if __name__ == "__main__":
    unittest.main()
