# SPDX-License-Identifier: Apache-2.0
"""Across hosts (issue 19), on loopback: three real sbxd, each with its own
certificate (h1/h2/h3.sbx.test, one CA) and the same tokens, published as
SRV records by a real dnsmasq on a high port, which the clients ask through
SBX_DNS_SERVER. Through dns+srv:// discovery, sbxctl (libsbxclient) and
sbx_client place 30 runs over the three (none gets more than half); a run's
handle RUN_ID@HOST:PORT goes to its host only; identities stay apart on
every host; a SIGKILLed host gets no new runs and calls for its runs fail
UNAVAILABLE naming it; a drained host gets none; restarted and undrained,
both are used again. (The netns version with a dropped CreateRun reply is
issue 19's "Done when"; see docs/dev/testing.md.)"""
import collections
import hashlib
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import sbxtest  # noqa: F401  (sys.path for the generated protos)

import sbxdfix

SOURCE = os.environ.get("SBX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.dirname(os.environ.get("SBX_PYTHON_PROTO", "").rstrip("/"))
sys.path[:0] = [os.path.join(SOURCE, "clients", "python"), os.path.join(BUILD, "clients", "python")]
import sbx_client  # noqa: E402
from sbx_client import placement as sbx_fleet  # noqa: E402

DNSMASQ = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
SRV = "_sbx._tcp.sbx.test"
HOSTS = ("h1", "h2", "h3")


def host_certs(d):
    """One CA; a server certificate per host name; a client certificate."""
    sbxdfix.openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=sbx fleet ca", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    for name, ext in [(h, "subjectAltName=DNS:%s.sbx.test" % h) for h in HOSTS] + [
            ("client", "extendedKeyUsage=clientAuth")]:
        sbxdfix.openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + name,
                        "-keyout", name + ".key", "-out", name + ".csr", cwd=d)
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext + "\n")
        sbxdfix.openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey",
                        "ca.key", "-CAcreateserial", "-days", "2", "-extfile", name + ".ext",
                        "-out", name + ".pem", cwd=d)
    with open(os.path.join(d, "client.both.pem"), "w") as out:
        for part in ("client.pem", "client.key"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())


class Fleet(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # A set-up that fails halfway (sbxctl finds no host) leaves no
        # sbxd or dnsmasq behind: unittest runs no tearDownClass then.
        try:
            cls.set_up()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def set_up(cls):
        cls.dir = tempfile.mkdtemp(prefix="sbx-test-fleet-")
        os.chmod(cls.dir, 0o755)
        host_certs(cls.dir)
        cls.tokens = {n: n[0] + os.urandom(16).hex() for n in ("alice", "bob", "ops")}
        tokens = [{"name": n, "sha256": hashlib.sha256(t.encode()).hexdigest()}
                  for n, t in cls.tokens.items()]
        cls.srv = {}
        for h in HOSTS:
            p = lambda name: os.path.join(cls.dir, name)  # noqa: E731
            cls.srv[h] = sbxdfix.Server(
                tls={"cert": p(h + ".pem"), "key": p(h + ".key"), "client_ca": p("ca.pem")},
                tokens=tokens, operators=["token:ops"], runs_max=40,
                runs_max_per_identity=40)
        cls.dns_port = sbxdfix.free_port()
        cls.dns_log = open(os.path.join(cls.dir, "dnsmasq.log"), "wb")
        cls.start_dns(HOSTS)
        cls.name = {h: "%s.sbx.test:%d" % (h, cls.srv[h].port) for h in HOSTS}
        deadline = time.time() + 15
        while cls.run_cli("health").returncode != 0:
            if time.time() > deadline or cls.dns.poll() is not None:
                raise RuntimeError("no fleet health through dnsmasq: " +
                                   cls.run_cli("health").stderr)
            time.sleep(0.2)

    @classmethod
    def start_dns(cls, hosts):
        """dnsmasq publishing these hosts (TTL 1 s), on cls.dns_port."""
        args = [DNSMASQ, "--keep-in-foreground", "--log-facility=-", "--port=%d" % cls.dns_port,
                "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts",
                "--conf-file=/dev/null", "--pid-file=", "--local-ttl=1"]
        for h in hosts:
            args += ["--srv-host=%s,%s.sbx.test,%d,0,10" % (SRV, h, cls.srv[h].port),
                     "--host-record=%s.sbx.test,127.0.0.1" % h]
        cls.dns = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=cls.dns_log)

    @classmethod
    def restart_dns(cls, hosts):
        cls.dns.terminate()
        cls.dns.wait()
        cls.start_dns(hosts)

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "dns", None):
            cls.dns.terminate()
            cls.dns.wait()
        if getattr(cls, "dns_log", None):
            cls.dns_log.close()
        for s in getattr(cls, "srv", {}).values():
            s.cleanup()
        if getattr(cls, "dir", None):
            shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def run_cli(cls, *args, token="alice", endpoint=None):
        p = lambda name: os.path.join(cls.dir, name)  # noqa: E731
        cmd = [sbxdfix.CLI, "--endpoint", endpoint or "dns+srv://" + SRV, "--tls-cert",
               p("client.pem"), "--tls-key", p("client.key"), "--tls-ca", p("ca.pem"),
               "--token", cls.tokens[token]] + list(args)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        env["SBX_DNS_SERVER"] = "127.0.0.1:%d" % cls.dns_port
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)

    def create(self, token="alice"):
        r = self.run_cli("create", "--policy", self.policy, token=token)
        self.assertEqual(r.returncode, 0, r.stderr)
        handle = r.stdout.strip()
        run_id, _, host = handle.partition("@")
        self.assertIn(host, self.name.values(), handle)
        return handle

    def host_of(self, handle):
        return [h for h in HOSTS if handle.endswith("@" + self.name[h])][0]

    def on_host(self, h, *args, token="ops"):
        """sbxctl against one host by address (a plain URL's name is the
        system resolver's: the certificate's name given apart)."""
        p = lambda name: os.path.join(self.dir, name)  # noqa: E731
        cmd = [sbxdfix.CLI, "--endpoint", "tls+tcp://127.0.0.1:%d" % self.srv[h].port,
               "--tls-server-name", h + ".sbx.test", "--tls-cert", p("client.pem"),
               "--tls-key", p("client.key"), "--tls-ca", p("ca.pem"), "--token",
               self.tokens[token]] + list(args)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)

    def test_fleet(self):
        self.policy = os.path.join(self.dir, "policy.json")
        with open(self.policy, "w") as f:
            f.write(sbxdfix.policy_json(memory_mb=64))
        # Spread: 30 runs through SRV discovery, none on a host more than half.
        handles = [self.create() for _ in range(30)]
        spread = collections.Counter(self.host_of(h) for h in handles)
        self.assertEqual(set(spread), set(HOSTS), spread)
        self.assertLessEqual(max(spread.values()), 15, spread)

        # A handle goes to its host: found there, and never looked up elsewhere.
        one = handles[0]
        r = self.run_cli("status", one)
        self.assertEqual(r.returncode, 0, r.stderr)
        run_id, home = one.split("@")[0], self.host_of(one)
        other = [h for h in HOSTS if h != home][0]
        r = self.run_cli("status", run_id + "@" + self.name[other])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("NOT_FOUND", r.stderr, "asked on the named host only")

        # Identities stay apart on every host: bob sees none of alice's runs.
        r = self.run_cli("runs", token="bob")
        self.assertEqual((r.returncode, r.stdout), (0, ""), r.stderr)
        r = self.run_cli("runs")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(line.split()[0] for line in r.stdout.splitlines()),
                         sorted(handles), "every run listed as its handle")
        r = self.run_cli("status", one, token="bob")
        self.assertIn("NOT_FOUND", r.stderr)

        # A host SIGKILLed: new creates go elsewhere; its runs' calls fail
        # UNAVAILABLE naming it, and are not tried on another host.
        dead = "h1"
        self.srv[dead].proc.kill()
        self.srv[dead].proc.wait()
        later = [self.create() for _ in range(6)]
        self.assertNotIn(dead, [self.host_of(h) for h in later])
        on_dead = [h for h in handles if self.host_of(h) == dead][0]
        r = self.run_cli("status", on_dead)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("UNAVAILABLE", r.stderr)
        self.assertIn("host " + self.name[dead], r.stderr)
        self.assertNotIn("NOT_FOUND", r.stderr)

        # A drained host (an operator's Drain) gets no new runs either.
        drained = "h2"
        r = self.on_host(drained, "drain")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("state DRAINING", r.stdout)
        after = [self.create() for _ in range(4)]
        self.assertEqual({self.host_of(h) for h in after}, {"h3"})

        # Restarted and undrained: both used again.
        self.srv[dead].start()
        r = self.on_host(drained, "undrain")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.run_cli("status", on_dead)
        self.assertIn("NOT_FOUND", r.stderr, "the restarted host came back clean")
        # Teardown through the handles, each on its host (the dead host's
        # runs went with it).
        for h in handles + later + after:
            if self.host_of(h) != dead:
                r = self.run_cli("teardown", h)
                self.assertEqual(r.returncode, 0, h + ": " + r.stderr)
        r = self.run_cli("health")
        self.assertEqual(r.stdout.count("state SERVING"), 3, r.stdout)
        # Every host empty again: the restarted one and the undrained one
        # take runs as the third does.
        back = [self.create() for _ in range(9)]
        used = collections.Counter(self.host_of(h) for h in back)
        self.assertEqual(set(used), set(HOSTS), used)
        for h in back:
            r = self.run_cli("teardown", h)
            self.assertEqual(r.returncode, 0, h + ": " + r.stderr)


    def test_python_pure_parts(self):
        f = sbx_fleet
        self.assertEqual(f.split_endpoints(" tls+tcp://a:1, tls+tcp://b:2"),
                         ["tls+tcp://a:1", "tls+tcp://b:2"])
        self.assertEqual(f.split_endpoints(["ipc:///x", "dns+srv://_sbx._tcp.a"]),
                         ["ipc:///x", "dns+srv://_sbx._tcp.a"])
        for bad in ("tls+tcp://a:1,,tls+tcp://b:2", "http://a:1", "dns+srv://sbx.test"):
            with self.assertRaises(sbx_client.InvalidArgument, msg=bad):
                f.split_endpoints(bad)
        self.assertEqual(f.parse_handle("r-1@h1.test:7443"), ("r-1", "h1.test:7443"))
        self.assertEqual(f.parse_handle("r-1"), ("r-1", None))
        for bad in ("@h:1", "r@", "r@a@b"):
            with self.assertRaises(sbx_client.InvalidArgument, msg=bad):
                f.parse_handle(bad)
        self.assertEqual(f.srv_targets([(1, 10, 7444, "h2.t.", 5), (0, 10, 7443, "h1.t.", 30),
                                        (0, 10, 0, "h3.t.", 30), (0, 10, 7445, ".", 30)]),
                         [(0, "h1.t", 7443, 30), (1, "h2.t", 7444, 5)])
        idle = sbx_client.Health("v", "i", 0, 10, 8, True, True, "v2", [], 0, state="serving",
                                 identity_run_slots_free=8, allowed_cpu_millis=4000,
                                 allowed_memory_mb=4000, run_slots_free=10)
        busy = sbx_client.Health("v", "i", 3, 10, 8, True, True, "v2", [], 0, state="serving",
                                 identity_run_slots_free=8, allowed_cpu_millis=4000,
                                 allowed_memory_mb=4000, run_slots_free=7,
                                 committed_cpu_millis=3000, committed_memory_mb=1000)
        self.assertLess(f.score(idle), f.score(busy))
        self.assertGreater(f.score(idle, pending=5), f.score(idle))
        draining = sbx_client.Health("v", "i", 0, 10, 8, True, True, "v2", [], 0,
                                     state="draining", run_slots_free=10,
                                     identity_run_slots_free=8)
        self.assertLess(f.score(draining), 0)

    def test_python_fleet(self):
        p = lambda name: os.path.join(self.dir, name)  # noqa: E731
        os.environ["SBX_DNS_SERVER"] = "127.0.0.1:%d" % self.dns_port
        try:
            self.python_fleet(p)
        finally:
            del os.environ["SBX_DNS_SERVER"]

    def python_fleet(self, p):
        tls = {"ca": p("ca.pem"), "cert": p("client.pem"), "key": p("client.key")}
        policy = sbxdfix.policy_json(memory_mb=64)
        with sbx_client.fleet("dns+srv://" + SRV, token=self.tokens["alice"], tls=tls) as f:
            self.assertEqual(sorted(f.hosts()), sorted(self.name.values()))
            runs = [f.create_run(policy) for _ in range(12)]
            spread = collections.Counter(r.host for r in runs)
            self.assertEqual(set(spread), set(self.name.values()), spread)
            self.assertLessEqual(max(spread.values()), 6, spread)
            for r in runs:
                self.assertEqual(r.handle, "%s@%s" % (r.id, r.host))
            # The handle goes to its host.
            self.assertEqual(f.run(runs[0].handle).status().run_id, runs[0].id)
            # A killed host: its runs Unavailable naming it, new runs elsewhere.
            dead = "h3"
            self.srv[dead].proc.kill()
            self.srv[dead].proc.wait()
            mine = [r for r in runs if r.host == self.name[dead]][0]
            with self.assertRaises(sbx_client.Unavailable) as cm:
                f.run(mine.handle).status()
            self.assertIn("host " + self.name[dead], str(cm.exception))
            more = [f.create_run(policy) for _ in range(4)]
            self.assertNotIn(self.name[dead], {r.host for r in more})
            for r in runs + more:
                if r.host != self.name[dead]:
                    f.run(r.handle).teardown()
        self.srv[dead].start()

    def test_srv_records_followed_by_long_lived_clients(self):
        """One libsbxclient fleet handle (test_client_fleet --drive, over a
        pipe) and one sbx_client Fleet live while dnsmasq publishes h1 only,
        then h2 only, then both, then stops answering: each follows the
        records once their TTL has passed, h1's runs stay reachable by their
        handles after h1 left DNS, and a silent DNS server leaves the hosts
        of the last answer."""
        p = lambda name: os.path.join(self.dir, name)  # noqa: E731
        tls = {"ca": p("ca.pem"), "cert": p("client.pem"), "key": p("client.key")}
        policy = sbxdfix.policy_json(memory_mb=64)
        a, b = self.name["h1"], self.name["h2"]
        self.restart_dns(("h1",))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        env.update(SBX_DNS_SERVER="127.0.0.1:%d" % self.dns_port, SBX_TOKEN=self.tokens["alice"])
        c = subprocess.Popen([os.environ["SBX_CLIENT_FLEET"], "--drive", "dns+srv://" + SRV,
                              p("ca.pem"), p("client.pem"), p("client.key")], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        os.environ["SBX_DNS_SERVER"] = env["SBX_DNS_SERVER"]
        py = sbx_client.fleet("dns+srv://" + SRV, token=self.tokens["alice"], tls=tls)
        silent = None
        try:
            def ask(line):
                c.stdin.write(line + "\n")
                c.stdin.flush()
                ready, _, _ = select.select([c.stdout], [], [], 60)
                self.assertTrue(ready, "test_client_fleet answers %r" % line.split()[0])
                return c.stdout.readline().rstrip("\n")

            def c_hosts():
                out = ask("hosts").split()
                self.assertEqual(out[:1], ["hosts"], "the driver answers")
                return sorted(out[1:])

            def hosts():
                return c_hosts(), sorted(py.hosts())

            def create():
                """A run made by each client: its two handles."""
                out = ask("create " + policy)
                self.assertTrue(out.startswith("run "), out)
                return out[4:], py.create_run(policy).handle

            def follow(want):
                deadline = time.time() + 20  # TTL 1 s, a failed lookup tried after 5 s
                while hosts() != (sorted(want), sorted(want)):
                    self.assertLess(time.time(), deadline, "hosts %r, want %r" % (hosts(), want))
                    time.sleep(0.3)

            def host(handle):
                return handle.partition("@")[2]

            follow([a])
            on_a = [h for _ in range(2) for h in create()]
            self.assertEqual({host(h) for h in on_a}, {a})

            # h1 leaves DNS, h2 comes: past the TTL no run on h1, h2 used.
            self.restart_dns(("h2",))
            follow([b])
            on_b = [h for _ in range(2) for h in create()]
            self.assertEqual({host(h) for h in on_b}, {b}, "h1 no longer published")
            # h1's runs, made before, are still reached by their handles.
            for h in on_a:
                self.assertEqual(ask("status " + h), "ok " + h.partition("@")[0])
                self.assertEqual(py.run(h).status().run_id, h.partition("@")[0])

            # Both published again: both listed, h1 taken again (it holds
            # fewer of these runs than h2 and placement fills the emptier).
            self.restart_dns(("h1", "h2"))
            follow([a, b])
            both = [h for _ in range(3) for h in create()]
            self.assertEqual({host(h) for h in both} - {a, b}, set())
            self.assertIn(a, {host(h) for h in both})

            # The DNS server stops answering (a socket that reads queries
            # and never replies): each client's lookup after the TTL fails,
            # and it keeps the hosts of the last answer and places on them.
            self.dns.terminate()
            self.dns.wait()
            silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            silent.bind(("127.0.0.1", self.dns_port))
            silent.setblocking(False)

            def asked():
                """Whether the silent server got an SRV query since last time."""
                seen = False
                while True:
                    try:
                        q = silent.recv(512)
                    except BlockingIOError:
                        return seen
                    seen = seen or b"\x04_sbx\x04_tcp\x03sbx\x04test" in q

            for who, listed in (("libsbxclient", c_hosts),
                                ("sbx_client", lambda: sorted(py.hosts()))):
                asked()
                deadline = time.time() + 20  # the TTL, then a lookup timing out
                while True:
                    self.assertEqual(listed(), sorted([a, b]), who + ": the last answer's hosts")
                    if asked():
                        break
                    self.assertLess(time.time(), deadline, who + " never asked the DNS server")
                    time.sleep(0.2)
            last = create()
            self.assertEqual({host(h) for h in last} - {a, b}, set())
            for h in on_a + on_b + both + list(last):
                self.assertEqual(ask("teardown " + h), "ok " + h.partition("@")[0])
        finally:
            py.close()
            c.stdin.close()
            self.assertEqual(c.wait(timeout=30), 0)
            del os.environ["SBX_DNS_SERVER"]
            if silent:
                silent.close()
            else:
                self.dns.terminate()
                self.dns.wait()
            self.start_dns(HOSTS)
        # sbxctl too: a new process, the records as they are now.
        deadline = time.time() + 15
        while self.run_cli("health").stdout.count("state SERVING") != 3:
            self.assertLess(time.time(), deadline, "dnsmasq did not come back")
            time.sleep(0.3)

if __name__ == "__main__":
    unittest.main()
