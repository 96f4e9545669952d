# SPDX-License-Identifier: Apache-2.0
"""A real sbxd for the tests: certificates made with openssl, a config with
an ipc and a TLS listener and two bearer tokens, started as the invoking
user, with helpers to call it raw (sbxrpc) or through the sbxctl CLI."""
import atexit
import hashlib
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import sbxtest

import sbxrpc
from sbxrpc import sandbox_pb2 as pb

SBXD = os.environ.get("SBX_SBXD", "")
CLI = os.environ.get("SBX_CLI", "")
HELPER = os.environ.get("SBX_HELPER", "")
VALGRIND = os.environ.get("SBX_SBXD_VALGRIND") == "1"
SANITIZED = os.environ.get("SBX_SANITIZE") == "1"

POLICY = {
    "image": "host",
    "mounts": [{"path": "/data", "mode": "ro"}, {"path": "/out", "mode": "rw"}],
    "env": {},
    "egress": {"policy": "deny", "allow": []},
    "limits": {"cpu": 1, "memory_mb": 256, "script_seconds": 30, "run_seconds": 120,
               "pids": 64, "out_mb": 16, "tmp_mb": 16, "output_kb": 64},
    "lifetime": "per_run",
}


def policy_json(**limits):
    p = json.loads(json.dumps(POLICY))
    p["limits"].update(limits)
    return json.dumps(p)


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(d):
    """A CA, a server certificate for localhost/127.0.0.1, a client
    certificate, and a client certificate from a CA the server does not know."""
    for ca in ("ca", "rogue-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                "/CN=sbx test " + ca, "-keyout", ca + ".key", "-out", ca + ".pem", cwd=d)
    for name, ca, ext in (("server", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
                          ("client", "ca", "extendedKeyUsage=clientAuth"),
                          ("rogue", "rogue-ca", "extendedKeyUsage=clientAuth")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + name, "-keyout",
                name + ".key", "-out", name + ".csr", cwd=d)
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext + "\n")
        openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
                "-CAcreateserial", "-days", "2", "-extfile", name + ".ext", "-out",
                name + ".pem", cwd=d)
        # nng's client side takes certificate and key in one file.
        with open(os.path.join(d, name + ".both.pem"), "w") as out:
            for part in (name + ".pem", name + ".key"):
                with open(os.path.join(d, part)) as f:
                    out.write(f.read())


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, **config):
        if not SBXD or not os.path.exists(SBXD):
            raise RuntimeError("SBX_SBXD is not set to the built sbxd (run through ctest)")
        self.dir = tempfile.mkdtemp(prefix="sbxd-test-")
        os.chmod(self.dir, 0o755)
        make_certs(self.dir)
        self.tokens = {"alice": "a" + os.urandom(16).hex(), "bob": "b" + os.urandom(16).hex()}
        self.port = free_port()
        self.ipc = "ipc://" + os.path.join(self.dir, "sbxd.sock")
        self.tls = "tls+tcp://127.0.0.1:%d" % self.port
        self.state = os.path.join(self.dir, "state")
        self.audit = os.path.join(self.dir, "audit.log")
        cfg = {
            "listen": [self.ipc, self.tls],
            "state_dir": self.state,
            "helper": HELPER,
            "log": self.audit,
            "tls": {"cert": self.path("server.pem"), "key": self.path("server.key"),
                    "client_ca": self.path("ca.pem")},
            "tokens": [{"name": n, "sha256": hashlib.sha256(t.encode()).hexdigest()}
                       for n, t in self.tokens.items()],
            # Under valgrind's hard limit of 1024 descriptors, 8 runs: 32
            # would leave each run's execs no share beside the listeners'
            # (rpc_server.c, FD_RESERVE; sbxd would not start).
            "runs_max": 8 if VALGRIND else 32,
            "runs_max_per_identity": 8,
            # Admission by capacity is test_sbxd_capacity.py's: elsewhere
            # the runs of a test never wait for this machine's few CPUs.
            "capacity": {"cpu_overcommit_percent": 10000, "memory_overcommit_percent": 1000},
            # SIGTERM tears what is left down at once (as before drains
            # existed); test_sbxd_drain.py sets its own.
            "drain_seconds": 0,
        }
        cfg.update(config)
        self.config = self.path("sbxd.json")
        with open(self.config, "w") as f:
            json.dump(cfg, f)
        self.proc = None
        self.start()

    def wrap(self, cmd):
        """The command that starts sbxd (a subclass may run it elsewhere)."""
        return cmd

    def path(self, name):
        return os.path.join(self.dir, name)

    def start(self):
        self.stderr = open(self.path("sbxd.stderr"), "ab")
        cmd = self.wrap([SBXD, "--config", self.config])
        if VALGRIND:
            # Leaks and memory errors make sbxd's exit status 99, which
            # stop() reports; the helpers it starts run natively.
            cmd = ["valgrind", "--quiet", "--leak-check=full", "--show-leak-kinds=definite",
                   "--errors-for-leak-kinds=definite", "--error-exitcode=99",
                   "--log-file=" + self.path("valgrind.%p.log")] + cmd
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.stderr,
                                     stderr=self.stderr)
        deadline = time.time() + (60 if VALGRIND else 15)
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("sbxd exited: " + self.log_tail())
            try:
                with self.conn(timeout_ms=1000) as c:
                    code, _, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse)
                    if code == "OK":
                        return
            except sbxrpc.NngError:
                pass
            time.sleep(0.05)
        raise RuntimeError("sbxd did not answer Health: " + self.log_tail())

    def restart_with(self, **config):
        """Stops sbxd (which must exit 0), sets these keys of its config
        file, and starts it again."""
        rc = self.stop()
        assert rc == 0, "sbxd exited %s on SIGTERM: %s" % (rc, self.log_tail())
        with open(self.config) as f:
            cfg = json.load(f)
        cfg.update(config)
        with open(self.config, "w") as f:
            json.dump(cfg, f)
        self.start()

    def edit_config(self, **keys):
        """Sets keys in the config file (a reload or a restart reads it)."""
        with open(self.config) as f:
            cfg = json.load(f)
        cfg.update(keys)
        with open(self.config, "w") as f:
            json.dump(cfg, f)

    def log_tail(self):
        text = b""
        for name in sorted(os.listdir(self.dir)):
            if name == "sbxd.stderr" or name.startswith("valgrind."):
                with open(self.path(name), "rb") as f:
                    text += f.read()[-4000:]
        return text.decode(errors="replace")

    def conn(self, tls=False, cert="client", timeout_ms=30000):
        if not tls:
            return sbxrpc.Conn(self.ipc, timeout_ms=timeout_ms)
        return sbxrpc.Conn(self.tls, tls=(self.path(cert + ".both.pem") if cert else None,
                                          self.path("ca.pem")), timeout_ms=timeout_ms)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.stderr:
            self.stderr.close()
            self.stderr = None
        return self.proc.returncode if self.proc else None

    def cleanup(self):
        self.stop()
        # Under a sanitizer, a helper's report at its exit (a leak, an
        # error) reaches the teardown audit line's alerts: the judge of the
        # helpers sbxd served, as sbxd's exit status is sbxd's own.
        reports = self.sanitizer_reports() if SANITIZED else []
        shutil.rmtree(self.dir, ignore_errors=True)
        assert not reports, "a helper's sanitizer report: %s" % reports[:4]

    def sanitizer_reports(self):
        """Helpers' reports: in teardown lines' alerts (the runs torn down),
        and in sbxd's log (sandboxes no caller had: pool members, failed
        creates)."""
        judged = lambda text: "Sanitizer" in text or "runtime error" in text
        try:
            events = self.audit_events()
        except (OSError, ValueError):
            events = []
        reports = [a for e in events if e.get("event") == "teardown"
                   for a in e.get("alerts", []) if judged(a)]
        try:
            with open(self.path("sbxd.stderr"), errors="replace") as f:
                reports += [line.rstrip("\n") for line in f
                            if "sbx-helper said: " in line and judged(line)]
        except OSError:
            pass
        return reports

    def audit_events(self):
        with open(self.audit) as f:
            return [json.loads(line) for line in f if line.strip()]

    def metrics_port(self):
        """The port of metrics.listen (configured with port 0). Health may
        answer a moment before the metrics listener is up (it starts after
        the RPC listeners): this waits for sbxd's line saying where."""
        deadline = time.time() + 60
        while True:
            with open(self.path("sbxd.stderr"), errors="replace") as f:
                m = re.search(r"sbxd: metrics on http://127\.0\.0\.1:(\d+)/metrics", f.read())
            if m:
                return int(m.group(1))
            assert time.time() < deadline, "sbxd did not say where its metrics are: " + \
                self.log_tail()
            time.sleep(0.05)

    def fds(self):
        """sbxd's descriptors but the user namespaces it keeps, one per host
        uid slot its runs took (server/runs/runs_slots.h: kept for the slot's
        next run; sbxd.slot_userns counts them)."""
        found = set()
        for n in os.listdir("/proc/%d/fd" % self.proc.pid):
            try:
                if os.readlink("/proc/%d/fd/%s" % (self.proc.pid, n)).startswith("user:["):
                    continue
            except OSError:
                continue  # closed meanwhile
            found.add(int(n))
        return found

    def fd_count(self):
        return len(self.fds())

    def fd_count_at_most(self, n, timeout=10):
        """sbxd's descriptor count once it is n or fewer, or after timeout
        seconds: a run's removed directories are closed by a closer thread
        after its Teardown answered (server/runs/run.c close_removed_dir),
        as an ended exec's connect watch is."""
        deadline = time.monotonic() + timeout
        count = self.fd_count()
        while count > n and time.monotonic() < deadline:
            time.sleep(0.02)
            count = self.fd_count()
        return count

    def userns_fds(self):
        """The user namespaces sbxd holds: their inodes, one per fd."""
        found = []
        for n in os.listdir("/proc/%d/fd" % self.proc.pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (self.proc.pid, n))
            except OSError:
                continue
            if link.startswith("user:["):
                found.append(int(link[6:-1]))
        return found

    def settled_fds(self, quiet=1.0, timeout=20):
        """sbxd's descriptors once they stayed the same for `quiet` seconds.
        An exec's last ones go after its Wait has answered (its connect
        watch through a closer thread, its pipes with the monitor)."""
        deadline = time.monotonic() + timeout
        fds, since = self.fds(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = self.fds()
            if now != fds:
                fds, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return fds
        raise AssertionError("sbxd's descriptors did not settle in %d s" % timeout)

    def limit_fds_to_held(self):
        """Lowers sbxd's soft RLIMIT_NOFILE to its lowest free descriptor,
        so that every descriptor it would open fails with EMFILE; returns
        the limits to restore. Set on descriptors that have settled, and
        again if one closed meanwhile: a descriptor closed after the limit
        leaves sbxd room below it, and the shortage unmade (ci29, where
        sbxd.lease_retry's Teardown then answered OK)."""
        pid = self.proc.pid
        old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        for _ in range(10):
            held = self.settled_fds()
            lowest = next(i for i in range(len(held) + 1) if i not in held)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (lowest, old[1]))
            if self.fds() == held:
                return old
            resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
        raise AssertionError("sbxd's descriptors kept changing: no shortage could be made")

    def rss_kb(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def cli(self, *args, tls=False, token=None, input=None, timeout=120, env=None):
        cmd = [CLI]
        if tls:
            cmd += ["--endpoint", self.tls, "--tls-cert", self.path("client.pem"), "--tls-key",
                    self.path("client.key"), "--tls-ca", self.path("ca.pem"),
                    # mbedTLS matches names, not IP addresses, in certificates.
                    "--tls-server-name", "localhost"]
        else:
            cmd += ["--endpoint", self.ipc]
        if token:
            cmd += ["--token", token]
        e = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        e.update(env or {})
        return subprocess.run(cmd + list(args), input=input, capture_output=True, text=True,
                              timeout=timeout, env=e)


def children(pid):
    """The pids of pid's children (a set): a helper sbxd started, say."""
    found = set()
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/stat" % p) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.add(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return found


class HelperGate:
    """An sbx-helper wrapper for sbxd's `helper` key that, while armed,
    waits for the gate to open before it execs the real sbx-helper: a test
    holds every CreateRun of that sbxd before its sandbox exists, so no
    answer can leave until it opens the gate (no race with a fast sbxd)."""

    def __init__(self, dirname):
        self.arm_file = os.path.join(dirname, "helper-arm")
        self.gate_file = os.path.join(dirname, "helper-gate")
        self.helper = os.path.join(dirname, "helper-gate.sh")
        with open(self.helper, "w") as f:
            f.write("#!/bin/sh\n"
                    "if [ -e %s ]; then\n"
                    "    while [ ! -e %s ]; do /bin/sleep 0.01; done\n"
                    "fi\n"
                    "exec %s \"$@\"\n" % (self.arm_file, self.gate_file,
                                          os.path.realpath(HELPER)))
        os.chmod(self.helper, 0o755)

    def arm(self):
        open(self.arm_file, "w").close()

    def open(self):
        open(self.gate_file, "w").close()

    def reset(self):
        for f in (self.arm_file, self.gate_file):
            if os.path.exists(f):
                os.unlink(f)


METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
METRIC_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metrics_get(port, method="GET", path="/metrics"):
    """(status, Content-Type, body) of one request to sbxd's metrics listener."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, r.getheader("Content-Type") or "", r.read().decode()
    finally:
        c.close()


def metrics_scrape(port):
    """(status, Content-Type, body) of GET /metrics. The listener has 8
    slots and gives one back when nng has seen its peer hang up, in its own
    time: right after a storm (or many scrapes) all 8 may still be held,
    and the guard then closes a new connection at accept. That refusal is
    test_sbxd_metrics' storm test's subject; here it only means "not yet"."""
    deadline = time.time() + 30
    while True:
        try:
            return metrics_get(port)
        except ConnectionError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)


def metrics_parse(text):
    """{(name, ((label, value), ...)): float} of every sample."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_LINE.match(line)
        assert m, "not an exposition line: %r" % line
        labels = tuple(sorted(METRIC_LABEL.findall(m.group(3) or "")))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def metric_value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class ServerTestCase(unittest.TestCase):
    """Tests sharing one sbxd (started with SERVER_CONFIG), which must then
    exit 0 on SIGTERM."""
    SERVER_CONFIG = {}

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(**cls.SERVER_CONFIG)

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        try:
            assert rc == 0, "sbxd exited %s on SIGTERM: %s" % (rc, cls.srv.log_tail())
        finally:
            cls.srv.cleanup()


def accept_until(sock, over):
    """sbxd's connection to a test's listening socket, or None once the
    event over is set (the call ended without sbxd connecting: nobody is
    waited for)."""
    sock.settimeout(0.1)
    while True:
        try:
            return sock.accept()[0]
        except socket.timeout:
            if over.is_set():
                return None


def preload_env(so):
    """The environment that preloads the shim so into a program of ours.
    Under ASan (packaging/test.sh --sanitize) its runtime must come first
    among the preloads unless told not to check."""
    asan = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"), "verify_asan_link_order=0"]))
    return {"LD_PRELOAD": so, "ASAN_OPTIONS": asan}


def build_shim(source, name):
    """A shim to preload (preload_env), compiled from C source into a new
    directory others can read (removed when this process exits): the path
    of the .so."""
    d = tempfile.mkdtemp(prefix="sbx-test-shim-")
    atexit.register(shutil.rmtree, d, True)
    src, so = os.path.join(d, "shim.c"), os.path.join(d, name)
    with open(src, "w") as f:
        f.write(source)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", so, src, "-ldl"], check=True)
    os.chmod(d, 0o755)
    return so


class PreloadServer(Server):
    """An sbxd started with the shim shim_so preloaded (build_shim)."""

    def __init__(self, shim_so, **config):
        self.shim_so = shim_so
        super().__init__(**config)

    def wrap(self, cmd):
        return ["env"] + ["%s=%s" % kv for kv in preload_env(self.shim_so).items()] + cmd


def processes_with(needle):
    """(pid, command line) of processes of this uid or of its sandboxes
    (subordinate uids) whose command line contains needle."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if not sbxtest.is_ours(os.stat("/proc/" + p).st_uid):
                continue
            with open("/proc/%s/cmdline" % p, "rb") as f:
                cmdline = f.read().replace(b"\0", b" ")
                if needle.encode() in cmdline:
                    found.append((int(p), cmdline.decode(errors="replace")[:200]))
        except OSError:
            pass
    return found


def stale_run_cgroups():
    """Run cgroups (sbx-<helper pid>-<hex>) under the delegated root whose
    helper is gone: what a run that was not cleaned up leaves. Live runs of
    anyone else's are not counted. None without a delegated root."""
    try:
        with open("/etc/sbx/cgroup-root") as f:
            rel = f.read().strip()
    except OSError:
        return None
    found = set()
    for ctrl in ("", "memory", "pids", "cpu"):
        d = os.path.join("/sys/fs/cgroup", ctrl, rel)
        if not os.path.isdir(d):
            continue
        for e in os.listdir(d):
            parts = e.split("-")
            if len(parts) == 3 and parts[0] == "sbx" and parts[1].isdigit() and \
                    not os.path.exists("/proc/" + parts[1]):
                found.add(ctrl + ":" + e)
    return found
