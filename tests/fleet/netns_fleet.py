# SPDX-License-Identifier: Apache-2.0
"""Issue 19's "Done when", with real network namespaces (run as root by
tests/fleet/netns.sh, which also cleans up whatever this leaves).

Six namespaces PREFIX-{sw,h1,h2,h3,dns,par}: a bridge in sw, one veth pair
from it to each of the others (10.77.0.0/24). h1..h3 each run an sbxd (as
the unprivileged test user, its own server certificate from sbx-certs,
a tls+tcp listener on its veth address and an ipc socket for the
operator); dns runs Debian's dnsmasq serving _sbx._tcp.sbx.test SRV and the
hosts' A records; par is the parent: sbxctl (libsbxclient) and sbx_client
run there as the test user, with /etc/netns/PREFIX-par/resolv.conf naming
the dnsmasq (the system resolver path: no SBX_DNS_SERVER).

Asserted, in order: 30 runs through SRV discovery spread over the three
hosts (none more than half); two identities (client certificate + token
each) see only their own runs on every host and the other's run id is
NOT_FOUND there; a drained host gets no new runs; a SIGKILLed host gets no
new runs and calls for its runs fail UNAVAILABLE naming it; a CreateRun
whose reply is dropped (the parent's veth goes down after sbxd took the
request) and is retried yields exactly one run; a run orphaned by a
partition is ended by its lease; the killed host restarted comes back
clean (no runs, run directories, helpers or run cgroups of before) and is
used again, as is the undrained one."""
import argparse
import collections
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time

NET = "10.77.0."
HOSTS = {"h1": 11, "h2": 12, "h3": 13}
DNS_IP, PAR_IP = NET + "53", NET + "100"
PORT = 7443
SRV = "_sbx._tcp.sbx.test"
USER = "sbx-test"
USER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/var/lib/sbx-test",
            "TMPDIR": "/tmp", "LANG": "C.UTF-8"}


def say(*a):
    print("netns-fleet:", *a, flush=True)


def sh(*argv, check=True, timeout=30, **kw):
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv), r.returncode, r.stderr.strip()))
    return r


def check(ok, what):
    if not ok:
        raise AssertionError(what)
    say("ok:", what.split("\n")[0][:160])


class Fleet:
    def __init__(self, args):
        self.a = args
        self.p = args.prefix
        self.d = args.dir
        self.build = os.path.abspath(args.build_dir)
        self.src = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
        self.sbxd = os.path.join(self.build, "server", "sbxd")
        self.cli_bin = os.path.join(self.build, "clients", "sbxctl")
        self.helper = os.path.join(self.build, "helper", "sbx-helper")
        # sbxd starts the helper through a gate (dropped_reply): while `arm`
        # exists, a helper waits for `gate` before it execs sbx-helper.
        self.arm, self.gate = self.path("helper-arm"), self.path("helper-gate")
        self.gated_helper = self.path("helper-gate.sh")
        self.procs = {}
        self.dns = None

    def ns(self, name):
        return "%s-%s" % (self.p, name)

    def path(self, *parts):
        return os.path.join(self.d, *parts)

    # ------------------------------------------------------------ network
    def network(self):
        for n in ("sw", "h1", "h2", "h3", "dns", "par"):
            sh("ip", "netns", "add", self.ns(n))
            sh("ip", "-n", self.ns(n), "link", "set", "dev", "lo", "up")
        sw = self.ns("sw")
        sh("ip", "-n", sw, "link", "add", "name", "br0", "type", "bridge")
        sh("ip", "-n", sw, "link", "set", "dev", "br0", "up")
        addrs = dict(HOSTS)
        addrs.update(dns=53, par=100)
        for n, last in addrs.items():
            # Made inside sw, its peer moved to n: the root namespace's
            # links are never touched.
            sh("ip", "-n", sw, "link", "add", "name", "v" + n, "type", "veth", "peer", "name",
               "eth0", "netns", self.ns(n))
            sh("ip", "-n", sw, "link", "set", "dev", "v" + n, "master", "br0", "up")
            sh("ip", "-n", self.ns(n), "addr", "add", "%s%d/24" % (NET, last), "dev", "eth0")
            sh("ip", "-n", self.ns(n), "link", "set", "dev", "eth0", "up")
        etc = "/etc/netns/" + self.ns("par")
        os.makedirs(etc, exist_ok=True)
        with open(os.path.join(etc, "resolv.conf"), "w") as f:
            f.write("nameserver %s\noptions timeout:2 attempts:2\n" % DNS_IP)

    def parent_link(self, up):
        sh("ip", "-n", self.ns("par"), "link", "set", "dev", "eth0", "up" if up else "down")

    def start_dns(self):
        args = ["ip", "netns", "exec", self.ns("dns"), "dnsmasq", "--keep-in-foreground",
                "--log-facility=-", "--port=53", "--listen-address=" + DNS_IP,
                "--bind-interfaces", "--no-resolv", "--no-hosts", "--conf-file=/dev/null",
                "--pid-file=", "--local-ttl=1"]
        for h, last in HOSTS.items():
            args += ["--srv-host=%s,%s.sbx.test,%d,0,10" % (SRV, h, PORT),
                     "--host-record=%s.sbx.test,%s%d" % (h, NET, last)]
        self.dns = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=open(self.path("dnsmasq.log"), "ab"))

    # ------------------------------------------------------------ files
    def files(self):
        certs = os.path.join(self.src, "packaging", "certs", "sbx-certs")
        sh("sh", certs, "ca", "--dir", self.d, "--cn", "sbx netns fleet CA", "--days", "2")
        for h, last in HOSTS.items():
            sh("sh", certs, "server", "--dir", self.d, "--days", "2", h, "--dns",
               h + ".sbx.test", "--ip", "%s%d" % (NET, last))
        for who in ("alice", "bob"):
            sh("sh", certs, "client", "--dir", self.d, "--days", "2", who)
        self.tokens = {}
        for who in ("alice", "bob", "ops"):
            self.tokens[who] = who[0] + secrets.token_hex(16)
            with open(self.path(who + ".token"), "w") as f:
                f.write(self.tokens[who] + "\n")
        tokens = [{"name": n, "sha256": hashlib.sha256(t.encode()).hexdigest()}
                  for n, t in self.tokens.items()]
        for h, last in HOSTS.items():
            os.makedirs(self.path(h, "state"))
            cfg = {
                "listen": ["ipc://" + self.path(h, "sbxd.sock"),
                           "tls+tcp://%s%d:%d" % (NET, last, PORT)],
                "state_dir": self.path(h, "state"),
                "helper": self.gated_helper,
                "log": self.path(h, "audit.log"),
                "tls": {"cert": self.path(h + ".pem"), "key": self.path(h + ".key"),
                        "client_ca": self.path("ca.pem")},
                "tokens": tokens,
                "operators": ["token:ops"],
                "runs_max": 40,
                "runs_max_per_identity": 40,
                "capacity": {"cpu_overcommit_percent": 10000,
                             "memory_overcommit_percent": 1000},
                "drain_seconds": 0,
                "expired_keep_seconds": 2,
            }
            with open(self.path(h, "sbxd.json"), "w") as f:
                json.dump(cfg, f, indent=1)
        for name, idle in (("policy.json", 600), ("lease.json", 3)):
            with open(self.path(name), "w") as f:
                json.dump(policy(idle), f)
        with open(self.gated_helper, "w") as f:
            f.write("#!/bin/sh\n"
                    "if [ -e %s ]; then\n"
                    "    while [ ! -e %s ]; do /bin/sleep 0.01; done\n"
                    "fi\n"
                    "exec %s \"$@\"\n" % (self.arm, self.gate, self.helper))
        os.chmod(self.gated_helper, 0o755)
        sh("chown", "-R", "%s:%s" % (USER, USER), self.d)
        os.chmod(self.d, 0o755)

    # ------------------------------------------------------------ processes
    def as_user(self, ns, argv):
        # The parent's commands through ip netns exec, which binds
        # /etc/netns/NS/resolv.conf over /etc/resolv.conf; a host's through
        # nsenter --net, as ip netns exec also mounts a new /sys, without
        # the cgroup hierarchies sbx-helper needs.
        enter = (["ip", "netns", "exec", self.ns(ns)] if ns == "par" else
                 ["nsenter", "--net=/run/netns/" + self.ns(ns)])
        return (enter + ["setpriv", "--reuid=" + USER,
                 "--regid=" + USER, "--init-groups", "env", "-i"] +
                ["%s=%s" % kv for kv in USER_ENV.items()] + list(argv))

    def start_host(self, h):
        log = open(self.path(h, "sbxd.stderr"), "ab")
        # nsenter, setpriv and env each exec the next: the pid is sbxd's.
        p = subprocess.Popen(self.as_user(h, [self.sbxd, "--config", self.path(h, "sbxd.json")]),
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self.procs[h] = p
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise RuntimeError("%s: sbxd exited %s" % (h, p.returncode))
            if self.op(h, "health").returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("%s: sbxd did not answer Health" % h)

    def op(self, h, *args, timeout=30):
        """sbxctl as the operator, on h's ipc socket (from h's namespace)."""
        argv = [self.cli_bin, "--endpoint", "ipc://" + self.path(h, "sbxd.sock"), "--token-file",
                self.path("ops.token")] + list(args)
        return subprocess.run(self.as_user(h, argv), capture_output=True, text=True,
                              timeout=timeout)

    def runs_on(self, h):
        """{run id: (owner, state)} of every identity on h."""
        r = self.op(h, "--json", "runs", "--all")
        if r.returncode != 0:
            raise RuntimeError("%s: runs --all: %s" % (h, r.stderr))
        return {x["run_id"]: (x.get("owner", ""), x.get("state", ""))
                for x in json.loads(r.stdout or "{}").get("runs", [])}

    def cli_argv(self, who, *args, call_timeout=None):
        argv = [self.cli_bin, "--endpoint", "dns+srv://" + SRV, "--tls-cert",
                self.path(who + ".pem"), "--tls-key", self.path(who + ".key"), "--tls-ca",
                self.path("ca.pem"), "--token-file", self.path(who + ".token")]
        if call_timeout:
            argv += ["--call-timeout", str(call_timeout)]
        return self.as_user("par", argv + list(args))

    def cli(self, who, *args, timeout=120):
        return subprocess.run(self.cli_argv(who, *args), capture_output=True, text=True,
                              timeout=timeout)

    def create(self, who="alice", policy_file="policy.json"):
        r = self.cli(who, "create", "--policy", self.path(policy_file))
        check_rc(r, "create as " + who)
        handle = r.stdout.strip()
        return handle

    def stop_all(self):
        for p in list(self.procs.values()) + ([self.dns] if self.dns else []):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in list(self.procs.values()) + ([self.dns] if self.dns else []):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def policy(idle):
    return {
        "image": "host",
        "mounts": [{"path": "/data", "mode": "ro"}, {"path": "/out", "mode": "rw"}],
        "env": {},
        "egress": {"policy": "deny", "allow": []},
        "limits": {"cpu": 1, "memory_mb": 64, "script_seconds": 30, "run_seconds": 300,
                   "idle_seconds": idle, "pids": 64, "out_mb": 16, "tmp_mb": 16,
                   "output_kb": 64},
        "lifetime": "per_run",
    }


def check_rc(r, what):
    if r.returncode != 0:
        raise AssertionError("%s: exit %d: %s" % (what, r.returncode, r.stderr.strip()))


def host_of(handle):
    return handle.split("@", 1)[1].split(".", 1)[0]


def run_id(handle):
    return handle.split("@", 1)[0]


def ns_pids(nsname):
    r = sh("ip", "netns", "pids", nsname, check=False)
    return {int(x) for x in r.stdout.split()}


def exe_of(pid):
    try:
        return os.readlink("/proc/%d/exe" % pid)
    except OSError:
        return ""


def run_cgroups_of(pids):
    """Run cgroups (sbx-<helper pid>-<hex>) under the delegated root that
    belong to one of these helper pids."""
    try:
        rel = open("/etc/sbx/cgroup-root").read().strip()
    except OSError:
        return set()
    found = set()
    for ctrl in ("", "memory", "pids", "cpu"):
        d = os.path.join("/sys/fs/cgroup", ctrl, rel)
        if os.path.isdir(d):
            for e in os.listdir(d):
                parts = e.split("-")
                if len(parts) == 3 and parts[0] == "sbx" and parts[1].isdigit() and \
                        int(parts[1]) in pids:
                    found.add(os.path.join(d, e))
    return found


def audit(f, h):
    with open(f.path(h, "audit.log")) as fh:
        return [json.loads(x) for x in fh if x.strip()]


def wait_for(pred, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def py_argv(f, code, *args):
    """python3 -c code as the test user in the parent, with sbx_client."""
    env = ["PYTHONPATH=%s:%s" % (os.path.join(f.src, "clients", "python"),
                                 os.path.join(f.build, "clients", "python"))]
    return f.as_user("par", env + ["python3", "-c", code, f.d] + list(args))


# sbx_client's create through discovery, 5 s per call, printing the handle.
PY_CREATE = ("import sys\n"
             "import sbx_client\n"
             "d = sys.argv[1]\n"
             "tls = {'ca': d + '/ca.pem', 'cert': d + '/alice.pem', 'key': d + '/alice.key'}\n"
             "tok = open(d + '/alice.token').read().strip()\n"
             "with sbx_client.fleet('dns+srv://%s', token=tok, tls=tls, timeout=5) as f:\n"
             "    print(f.create_run(open(d + '/policy.json').read()).handle)\n") % SRV


def dropped_reply(f, h, argv):
    """One create whose reply the parent never gets: the run's helper is
    held at its gate (Fleet.gated_helper) while sbxd is stopped (SIGSTOP)
    and the parent's veth goes down, so no reply can leave before the link
    is gone; then the helper and sbxd go on, sbxd answers into the dead
    link, and its end of the connection is destroyed (ss -K) so that no TCP
    retransmission brings the reply later. The link comes back while the
    client still waits; its retry after the call timeout (same host, same
    idempotency key) must get the run sbxd made, not a second one."""
    sbxd = f.procs[h].pid
    before = set(f.runs_on(h))
    known = ns_pids(f.ns(h))
    open(f.arm, "w").close()
    client = subprocess.Popen(argv,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        started = False
        while not started and time.monotonic() < deadline and client.poll() is None:
            # Anything new in h's namespace is the gated helper (or its sleep).
            started = bool(ns_pids(f.ns(h)) - known)
            time.sleep(0.01)
        if not started:
            raise AssertionError("no sbx-helper started on %s for the create (client: %s)"
                                 % (h, client.poll()))
        os.kill(sbxd, signal.SIGSTOP)
        try:
            f.parent_link(False)
            open(f.gate, "w").close()
            still_waiting = client.poll() is None
        finally:
            os.kill(sbxd, signal.SIGCONT)
        if not still_waiting:
            f.parent_link(True)
            out, err = client.communicate(timeout=30)
            raise AssertionError("the client ended before any reply could leave %s: %s %s"
                                 % (h, out.strip(), err.strip()))
        made = wait_for(lambda: set(f.runs_on(h)) - before, 20)
        check(len(made) == 1, "%s made the run while the parent was cut off: %s" % (h, made))
        check(bool(wait_for(lambda: [e for e in audit(f, h) if e.get("event") == "run_created" and
                                     e.get("run_id") in made], 20)),
              "%s logged the create" % h)
        time.sleep(0.5)  # its reply is in the socket's queue by now
        sh("nsenter", "--net=/run/netns/" + f.ns(h), "ss", "-K", "dst", PAR_IP)
        check(client.poll() is None, "the client is still waiting (no answer came back)")
        f.parent_link(True)
        out, err = client.communicate(timeout=60)
    finally:
        f.parent_link(True)
        for gate_file in (f.arm, f.gate):
            if os.path.exists(gate_file):
                os.unlink(gate_file)
        if client.poll() is None:
            client.kill()
            client.communicate()
    check(client.returncode == 0, "the retried create succeeded: %s" % err.strip())
    handle = out.strip()
    after = set(f.runs_on(h))
    check(host_of(handle) == h, "the retry went to the same host %s: %s" % (h, handle))
    check(after - before == made and run_id(handle) in made,
          "exactly one run made, the one the client got: %s vs %s" % (handle, after - before))
    keys = [e.get("idempotency_key") for e in audit(f, h)
            if e.get("event") == "run_created" and e.get("run_id") == run_id(handle)]
    check(len(keys) == 1 and keys[0], "one create in %s's audit log, with its idempotency key"
          % h)
    return handle


def scenario(f):
    all_handles = {"alice": [], "bob": []}

    # 1. Spread: 30 runs through SRV discovery.
    handles = [f.create() for _ in range(30)]
    all_handles["alice"] += handles
    spread = collections.Counter(host_of(x) for x in handles)
    say("spread of 30 creates:", dict(sorted(spread.items())))
    check(set(spread) == set(HOSTS) and max(spread.values()) <= 15,
          "30 runs over the three hosts, none more than half: %s" % dict(spread))

    # 2. Identities: bob (his certificate and token) on every host too.
    bobs = []
    for _ in range(30):
        bobs.append(f.create("bob"))
        if {host_of(x) for x in bobs} == set(HOSTS) and len(bobs) >= 3:
            break
    all_handles["bob"] += bobs
    check({host_of(x) for x in bobs} == set(HOSTS), "bob has runs on every host")
    for who, mine in (("alice", handles), ("bob", bobs)):
        r = f.cli(who, "runs")
        check_rc(r, who + " runs")
        listed = sorted(line.split()[0] for line in r.stdout.splitlines())
        check(listed == sorted(mine), "%s lists exactly its own runs on the 3 hosts" % who)
    for h in HOSTS:
        owners = collections.Counter(o for o, _ in f.runs_on(h).values())
        check(owners == collections.Counter(
            {"token:alice": spread[h], "token:bob": sum(host_of(x) == h for x in bobs)}),
            "%s holds both identities' runs, owned apart: %s" % (h, dict(owners)))
        a = [x for x in handles if host_of(x) == h][0]
        b = [x for x in bobs if host_of(x) == h][0]
        for who, other in (("bob", a), ("alice", b)):
            r = f.cli(who, "status", other)
            check(r.returncode == 1 and "NOT_FOUND" in r.stderr,
                  "%s asking for the other's run %s on %s: NOT_FOUND" % (who, other, h))

    # 3. A draining host gets no new runs.
    check_rc(f.op("h2", "drain"), "drain h2")
    after_drain = [f.create() for _ in range(6)]
    all_handles["alice"] += after_drain
    check("h2" not in {host_of(x) for x in after_drain},
          "no run on draining h2: %s" % sorted(host_of(x) for x in after_drain))

    # 4. h1 SIGKILLed: new runs elsewhere; its runs' calls UNAVAILABLE naming it.
    dead_pids = ns_pids(f.ns("h1"))
    dead_helpers = {p for p in dead_pids if exe_of(p) == f.helper}
    dead_runs = set(f.runs_on("h1"))
    check(bool(dead_helpers) and bool(dead_runs), "h1 has runs and their helpers")
    f.procs["h1"].kill()
    f.procs["h1"].wait()
    later = [f.create() for _ in range(4)]
    all_handles["alice"] += later
    check({host_of(x) for x in later} == {"h3"},
          "with h1 dead and h2 draining, every new run is on h3: %s" % later)
    on_dead = [x for x in handles if host_of(x) == "h1"][0]
    r = f.cli("alice", "status", on_dead)
    check(r.returncode == 1 and "UNAVAILABLE" in r.stderr and
          "host h1.sbx.test:%d" % PORT in r.stderr and "NOT_FOUND" not in r.stderr,
          "status of a run on dead h1: UNAVAILABLE naming it: " + r.stderr.strip())

    # 5. A dropped CreateRun reply, retried: exactly one run (on h3, the
    # only host serving).
    for name, argv in (("sbxctl", f.cli_argv("alice", "create", "--policy",
                                              f.path("policy.json"), call_timeout=5)),
                       ("sbx_client", py_argv(f, PY_CREATE))):
        say("dropped reply, retried by %s" % name)
        all_handles["alice"].append(dropped_reply(f, "h3", argv))

    # 6. A run orphaned by a partition is ended by its lease.
    orphan = f.create(policy_file="lease.json")
    oh = host_of(orphan)
    f.parent_link(False)
    try:
        idle = wait_for(lambda: [e for e in audit(f, oh) if e.get("event") == "run_idle" and
                                 e.get("run_id") == run_id(orphan)], 20, 0.2)
        check(bool(idle), "the orphaned run %s ended by its lease (run_idle)" % orphan)
        gone = wait_for(lambda: [e for e in audit(f, oh) if e.get("event") == "teardown" and
                                 e.get("run_id") == run_id(orphan)], 20, 0.2)
        check(bool(gone) and gone[0].get("final_state") == "expired",
              "then torn down by sbxd itself (final_state expired)")
    finally:
        f.parent_link(True)

    # 7. h1 restarted: clean, and used again; h2 undrained: used again.
    f.start_host("h1")
    check(f.runs_on("h1") == {}, "restarted h1 has no runs")
    check(os.listdir(f.path("h1", "state", "runs")) == [], "no run directories left on h1")
    check(not any(os.path.exists("/proc/%d" % p) for p in dead_helpers),
          "no helper of h1's old runs is alive")
    check(wait_for(lambda: not run_cgroups_of(dead_helpers), 10) is True,
          "no run cgroup of h1's old runs is left: %s" % run_cgroups_of(dead_helpers))
    r = f.cli("alice", "status", on_dead)
    check(r.returncode == 1 and "NOT_FOUND" in r.stderr, "h1's old run is NOT_FOUND there")
    check_rc(f.op("h2", "undrain"), "undrain h2")
    for who, hs in all_handles.items():
        for x in hs:
            if host_of(x) != "h1":
                check_rc(f.cli(who, "teardown", x), "teardown " + x)
    back = [f.create() for _ in range(9)]
    used = collections.Counter(host_of(x) for x in back)
    check(set(used) == set(HOSTS), "all three used again: %s" % dict(used))

    # 8. sbx_client (Python) through the same discovery: spread, handles.
    code = ("import collections, json, sys\n"
            "import sbx_client\n"
            "d = sys.argv[1]\n"
            "tls = {'ca': d + '/ca.pem', 'cert': d + '/alice.pem', 'key': d + '/alice.key'}\n"
            "pol = open(d + '/policy.json').read()\n"
            "tok = open(d + '/alice.token').read().strip()\n"
            "with sbx_client.fleet('dns+srv://%s', token=tok, tls=tls) as f:\n"
            "    runs = [f.create_run(pol) for _ in range(6)]\n"
            "    print(json.dumps([r.handle for r in runs]))\n"
            "    for r in runs: f.run(r.handle).teardown()\n") % SRV
    r = subprocess.run(py_argv(f, code), capture_output=True, text=True, timeout=120)
    check_rc(r, "sbx_client fleet")
    py = json.loads(r.stdout.strip().splitlines()[-1])
    check(len({host_of(x) for x in py}) >= 2,
          "sbx_client placed 6 runs over several hosts: %s" % sorted(host_of(x) for x in py))
    for x in back:
        check_rc(f.cli("alice", "teardown", x), "teardown " + x)
    for h in HOSTS:
        check(f.runs_on(h) == {}, "%s is empty at the end" % h)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--prefix", required=True, help="namespace name prefix")
    ap.add_argument("--dir", required=True, help="an empty directory for certificates and state")
    args = ap.parse_args()
    f = Fleet(args)
    t0 = time.monotonic()
    try:
        f.network()
        f.files()
        f.start_dns()
        for h in HOSTS:
            f.start_host(h)
        r = wait_for(lambda: f.cli("alice", "health"), 15, 0.3)
        check(r.returncode == 0 and r.stdout.count("state SERVING") == 3,
              "health through dns+srv:// from the parent: three hosts serving")
        scenario(f)
    except Exception as e:  # noqa: BLE001 (reported, then the logs)
        say("FAILED:", "%s: %s" % (type(e).__name__, e))
        for h in HOSTS:
            try:
                say("--- %s sbxd.stderr (tail)" % h)
                print(open(f.path(h, "sbxd.stderr")).read()[-2000:])
            except OSError:
                pass
        return 1
    finally:
        f.stop_all()
    say("passed in %.0f s" % (time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
