# SPDX-License-Identifier: Apache-2.0
"""The world the egress proxy's tests run in: servers on the host's loopback
that count every byte, a test CA, a hosts file, and a real sbxd whose
"egress" config points at them.

API (small on purpose; test_sbxd_egress*.py and the ticket-analysis example
use it):

  make_ca(dir, names)      -> {"ca": path, "cert": path, "key": path}: a CA
                              made with openssl and a server certificate
                              for `names` (DNS subjectAltNames) and 127.0.0.1.
  write_hosts(path, names, others=None)
                           -> writes "127.0.0.1 name..." and "addr name"
                              lines for others (the proxy's hosts_file).
  CountingServer(tls_files=None, name="http")
                           -> an HTTP/1.1 server on 127.0.0.1 (ephemeral
                              .port), TLS when tls_files (make_ca's dict) is
                              given. One request per connection, always
                              answered with Connection: close; then it reads
                              until the client's EOF, so that its counts are
                              final when both ends are closed. Routes:
                                GET /hello             "hello from NAME\\n"
                                GET /bytes/N           N bytes of b"x"
                                GET /hold/S            S bytes, one a second
                                                       (till the peer's close)
                                GET /idle/S            1 byte after S seconds
                                                       (or the peer's close)
                                POST /echo             the body's length
                              .conns: [ServerConn] in accept order, each with
                              bytes_in (received, raw: TLS records
                              included), bytes_out (sent, raw), heads (the
                              request heads it read, bytes), opened/closed
                              (time.monotonic()), error. .mark() and
                              .since(mark) select a test's connections;
                              .wait_count(mark, n), .wait_closed(conns,
                              timeout); .stop().
  egress_config(hosts_file, **over)
                           -> sbxd's "egress" section: that hosts file, no
                              resolv.conf (no nameserver), over's keys.
  EgressCase               -> unittest.TestCase whose setUpClass makes all
                              of the above (HOST_NAMES -> 127.0.0.1 and
                              PRIVATE_HOSTS in the hosts file, .hosts_file;
                              an HTTP server .http, an HTTPS one .https, a
                              second HTTP one .other; the CA's PEM .ca_pem)
                              and starts sbxd (.srv, sbxdfix.Server; .c a
                              connection to it) with egress_config();
                              EGRESS_CONFIG (class attribute) overrides
                              config keys, and may be a function of the
                              class (ports are known then). Helpers:
                              entry(host, port, **limits) (allow_private),
                              policy(allow, alert_bytes, max_bytes, env,
                              **limits) (the sandbox trusts the CA through
                              SSL_CERT_FILE and CURL_CA_BUNDLE, uploaded as
                              /data/ca.pem), create(policy, inputs), start(),
                              wait(), output(), run_sh() -> (rc, out, err),
                              status(), teardown() (runs a test leaves are
                              torn down after it), audit(run, event),
                              decisions()/closes()/wait_audit() of a run.
"""
import hashlib
import json
import os
import select
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest

from sbxdfix import POLICY, Server
from sbxrpc import sandbox_pb2 as pb

HOST_NAMES = ("api.test", "other.test", "loop.test", "wild.test", "a.wild.test",
              "b.wild.test", "shared.test", "rate.test", "bw.test", "b.test")
# Names whose only address is one the proxy must refuse without
# allow_private (nothing is ever connected to them).
PRIVATE_HOSTS = {"meta.test": "169.254.169.254", "ten.test": "10.1.2.3",
                 "cgnat.test": "100.64.0.1", "v6loop.test": "::1",
                 "mapped.test": "::ffff:127.0.0.1"}


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d, names):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=sbx egress test CA", "-keyout", "egress-ca.key", "-out", "egress-ca.pem", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + names[0], "-keyout",
            "egress-server.key", "-out", "egress-server.csr", cwd=d)
    with open(os.path.join(d, "egress-server.ext"), "w") as f:
        f.write("subjectAltName=" + ",".join(["DNS:" + n for n in names] + ["IP:127.0.0.1"]) +
                "\n")
    openssl("x509", "-req", "-in", "egress-server.csr", "-CA", "egress-ca.pem", "-CAkey",
            "egress-ca.key", "-CAcreateserial", "-days", "2", "-extfile", "egress-server.ext",
            "-out", "egress-server.pem", cwd=d)
    return {k: os.path.join(d, v) for k, v in (("ca", "egress-ca.pem"),
                                               ("cert", "egress-server.pem"),
                                               ("key", "egress-server.key"))}


def write_hosts(path, names, others=None):
    """names -> 127.0.0.1; others: {name: address}."""
    with open(path, "w") as f:
        f.write("127.0.0.1 " + " ".join(names) + "\n")
        for name, addr in (others or {}).items():
            f.write("%s %s\n" % (addr, name))


class ServerConn:
    """One accepted connection, counted below TLS."""

    def __init__(self, sock, peer):
        self.sock = sock
        self.peer = peer
        self.bytes_in = 0
        self.bytes_out = 0
        self.heads = []
        self.opened = time.monotonic()
        self.closed = None
        self.error = None
        self.tls = None
        self.inbio = self.outbio = None
        self.eof = False

    # Raw I/O, counted.
    def _recv_raw(self, n=65536):
        data = self.sock.recv(n)
        self.bytes_in += len(data)
        return data

    def _send_raw(self, data):
        view = memoryview(data)
        while view:
            n = self.sock.send(view)
            self.bytes_out += n
            view = view[n:]

    def _flush(self):
        out = self.outbio.read()
        if out:
            self._send_raw(out)

    def start_tls(self, ctx):
        self.inbio, self.outbio = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.inbio, self.outbio, server_side=True)
        while True:
            try:
                self.tls.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                data = self._recv_raw()
                if not data:
                    raise ConnectionError("EOF in the TLS handshake")
                self.inbio.write(data)

    def recv(self):
        """Application bytes; b"" at EOF."""
        if not self.tls:
            return self._recv_raw()
        while True:
            try:
                return self.tls.read(65536)
            except ssl.SSLWantReadError:
                self._flush()
                data = self._recv_raw()
                if not data:
                    return b""
                self.inbio.write(data)
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    def send(self, data):
        if not self.tls:
            return self._send_raw(data)
        for i in range(0, len(data), 16384):
            self.tls.write(data[i:i + 16384])
            self._flush()


class CountingServer:
    def __init__(self, tls_files=None, name="http"):
        self.name = name
        self.ctx = None
        if tls_files:
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ctx.load_cert_chain(tls_files["cert"], tls_files["key"])
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(1024)
        self.port = self.lsock.getsockname()[1]
        self.conns = []
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopping:
            try:
                s, peer = self.lsock.accept()
            except OSError:
                return
            c = ServerConn(s, peer)
            with self.lock:
                self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def mark(self):
        with self.lock:
            return len(self.conns)

    def since(self, mark):
        with self.lock:
            return list(self.conns[mark:])

    def wait_closed(self, conns, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(c.closed is not None for c in conns):
                return True
            time.sleep(0.02)
        return False

    def wait_count(self, mark, n, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.since(mark)) < n:
            time.sleep(0.02)
        return self.since(mark)

    def stop(self):
        self.stopping = True
        self.lsock.close()
        for c in self.since(0):
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _serve(self, c):
        try:
            c.sock.settimeout(120)
            if self.ctx:
                c.start_tls(self.ctx)
            self._one_request(c)
            # Read to the client's EOF: both ends closed, the counts are final.
            while not self.stopping and c.recv():
                pass
        except (OSError, ssl.SSLError, ValueError) as e:
            c.error = repr(e)
        finally:
            c.closed = time.monotonic()
            c.sock.close()

    def _one_request(self, c):
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = c.recv()
            if not data:
                raise ConnectionError("EOF before a whole head")
            buf += data
            if len(buf) > 65536:
                raise ValueError("head too long")
        head, body = buf.split(b"\r\n\r\n", 1)
        c.heads.append(head + b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            data = c.recv()
            if not data:
                raise ConnectionError("EOF in the body")
            body += data
        parts = target.split("/")
        if method == "GET" and target == "/hello":
            self._answer(c, ("hello from %s\n" % self.name).encode())
        elif method == "GET" and len(parts) == 3 and parts[1] == "bytes":
            n = int(parts[2])
            c.send(self._head(n))
            chunk = b"x" * 65536
            while n > 0:
                c.send(chunk[:min(n, len(chunk))])
                n -= min(n, len(chunk))
        elif method == "GET" and len(parts) == 3 and parts[1] == "hold":
            n = int(parts[2])
            c.send(self._head(n))
            for _ in range(n):
                # A byte a second (never idle), until the peer closes.
                r, _, _ = select.select([c.sock], [], [], 1.0)
                if r:
                    return
                c.send(b"h")
        elif method == "GET" and len(parts) == 3 and parts[1] == "idle":
            c.send(self._head(1))
            # Wait for the time or the peer's close, whichever comes first.
            r, _, _ = select.select([c.sock], [], [], float(parts[2]))
            if not r:
                c.send(b"i")
        elif method == "POST" and target == "/echo":
            self._answer(c, b"%d\n" % len(body))
        else:
            c.send(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    @staticmethod
    def _head(n):
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n" % n)

    def _answer(self, c, body):
        c.send(self._head(len(body)) + body)


def egress_config(hosts_file, **over):
    cfg = {"hosts_file": hosts_file, "resolv_conf": ""}
    cfg.update(over)
    return cfg


class TokenConn:
    """A connection whose every call carries one bearer token: another
    identity for the tests, as `conn=` of EgressCase's helpers."""

    def __init__(self, conn, token):
        self.conn, self.token = conn, token

    def call(self, name, request, response_type, token=None, request_id=None):
        return self.conn.call(name, request, response_type, token=token or self.token,
                              request_id=request_id)

    def close(self):
        self.conn.close()


class EgressCase(unittest.TestCase):
    EGRESS_CONFIG = {}

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sbx-test-egress-test-")
        os.chmod(cls.dir, 0o755)
        cls.tls_files = make_ca(cls.dir, list(HOST_NAMES))
        with open(cls.tls_files["ca"], "rb") as f:
            cls.ca_pem = f.read()
        cls.hosts_file = os.path.join(cls.dir, "hosts")
        write_hosts(cls.hosts_file, HOST_NAMES, PRIVATE_HOSTS)
        cls.http = CountingServer(name="http")
        cls.https = CountingServer(cls.tls_files, name="https")
        cls.other = CountingServer(name="other")
        extra = cls.EGRESS_CONFIG(cls) if callable(cls.EGRESS_CONFIG) else cls.EGRESS_CONFIG
        try:
            cls.srv = Server(egress=egress_config(cls.hosts_file, **extra))
        except Exception:
            cls._stop_servers()
            raise
        cls.c = cls.srv.conn(timeout_ms=90000)
        # A second caller (token "bob" over TLS): shares are per identity.
        cls.bob = TokenConn(cls.srv.conn(tls=True, timeout_ms=90000), cls.srv.tokens["bob"])

    @classmethod
    def _stop_servers(cls):
        for s in (cls.http, cls.https, cls.other):
            s.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls.bob.close()
        cls.c.close()
        rc = cls.srv.stop()
        log = cls.srv.log_tail()
        cls.srv.cleanup()
        cls._stop_servers()
        assert rc == 0, "sbxd exited %s on SIGTERM: %s" % (rc, log)

    # -- calls
    def ok(self, name, req, resp_type, conn=None):
        code, msg, resp = (conn or self.c).call(name, req, resp_type)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    @staticmethod
    def entry(host, port, **kw):
        """An allowlist entry for a test server: allow_private, since
        every test name is loopback."""
        e = {"host": host, "port": port, "allow_private": True}
        e.update(kw)
        return e

    def policy(self, allow, alert_bytes=0, max_bytes=0, env=None, **limits):
        """A policy JSON with this allowlist; the test CA in /data/ca.pem is
        what the sandbox's TLS clients trust (SSL_CERT_FILE for OpenSSL's
        default paths: python3, pip; CURL_CA_BUNDLE for curl)."""
        p = json.loads(json.dumps(POLICY))
        p["limits"].update(limits)
        p["egress"] = {"policy": "allowlist", "allow": allow}
        if alert_bytes:
            p["egress"]["alert_bytes"] = alert_bytes
        if max_bytes:
            p["egress"]["max_bytes"] = max_bytes
        # curl 7.88 reads CURL_CA_BUNDLE, not SSL_CERT_FILE.
        p["env"] = {"SSL_CERT_FILE": "/data/ca.pem", "CURL_CA_BUNDLE": "/data/ca.pem"}
        p["env"].update(env or {})
        return json.dumps(p)

    def create(self, policy_json, inputs=None, conn=None):
        """A run with /data/ca.pem and `inputs` ({path: bytes}) uploaded."""
        files = {"ca.pem": self.ca_pem}
        files.update(inputs or {})
        req = pb.CreateRunRequest(policy_json=policy_json)
        for path, data in files.items():
            req.inputs.add(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        run = self.ok("CreateRun", req, pb.CreateRunResponse, conn=conn).run_id
        self._runs.append(run)
        for path, data in files.items():
            self.ok("PutInput", pb.PutInputRequest(run_id=run, path=path, data=data, last=True),
                    pb.PutInputResponse, conn=conn)
        return run

    def start(self, run, script, conn=None):
        return self.ok("Exec", pb.ExecRequest(run_id=run, argv=["/bin/sh", "-c", script]),
                       pb.ExecResponse, conn=conn).exec_id

    def wait(self, run, ex, timeout_ms=60000, conn=None):
        return self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=timeout_ms),
                       pb.WaitResponse, conn=conn).status

    def output(self, run, ex, stream=pb.STDOUT, conn=None):
        data, off = b"", 0
        while True:
            r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex, stream=stream,
                                                           offset=off, timeout_ms=5000),
                        pb.ReadOutputResponse, conn=conn)
            data += r.data
            off = r.next_offset
            if r.eof:
                return data.decode(errors="replace")

    def run_sh(self, run, script, timeout_ms=60000, conn=None):
        """(exit code, stdout, stderr) of one exec."""
        ex = self.start(run, script, conn=conn)
        st = self.wait(run, ex, timeout_ms, conn=conn)
        self.assertEqual(pb.ExitReason.Name(st.reason), "EXITED", st)
        return (st.exit_code, self.output(run, ex, conn=conn),
                self.output(run, ex, pb.STDERR, conn=conn))

    def status(self, run, conn=None):
        return self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse, conn=conn)

    def teardown(self, run, conn=None):
        if run in self._runs:
            self._runs.remove(run)
        return self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse,
                       conn=conn).manifest

    def setUp(self):
        self._runs = []

    def tearDown(self):
        # Runs a failed test left: the identity's run quota is shared.
        for run in self._runs:
            for conn in (self.c, self.bob):
                conn.call("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)

    # -- the audit log
    def audit(self, run, event):
        return [e for e in self.srv.audit_events()
                if e.get("run_id") == run and e.get("event") == event]

    def decisions(self, run):
        return sorted(self.audit(run, "egress_decision"), key=lambda e: e["connection"])

    def closes(self, run):
        return sorted(self.audit(run, "egress_close"), key=lambda e: e["connection"])

    def wait_audit(self, run, event, n, timeout=10):
        """The run's `event` lines once there are at least n (or the timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.audit(run, event)
            if len(found) >= n or time.monotonic() > deadline:
                return sorted(found, key=lambda e: e.get("connection", 0))
            time.sleep(0.05)
