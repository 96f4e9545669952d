# SPDX-License-Identifier: Apache-2.0
"""The egress proxy wired through the real sbxd and sbx-helper, end to end:
an exec's curl reaches a host HTTP server through the listener its exec
init made and sbxd's proxy accepts on; the proxy variables are all the env
adds; a host the allowlist does not name gets 403; Status and the teardown
manifest count the bytes the server saw. An sbxd whose proxy could not
start refuses allowlists and says why; a deny run has nothing on 3128, and
sbx-helper run alone refuses an allowlist, naming sbxd."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from egressfix import egress_config, write_hosts
from sbxdfix import HELPER, POLICY, Server, ServerTestCase
from sbxrpc import policy_pb2 as ppb
from sbxrpc import sandbox_pb2 as pb

BODY = b"hello from api.test\n"
PROXY_VARS = ["ALL_PROXY=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128",
              "HTTP_PROXY=http://127.0.0.1:3128", "NO_PROXY=",
              "http_proxy=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128",
              "no_proxy="]


class Origin:
    """An HTTP/1.1 server on the host's loopback that answers every request
    with BODY and counts, per connection, every byte it received and sent
    (what the proxy's records must say)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []  # (received, sent, request head)
        self.lock = threading.Lock()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.one, args=(c,), daemon=True).start()

    def one(self, c):
        c.settimeout(30)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = c.recv(4096)
                if not chunk:
                    break
                data += chunk
            resp = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                    b"Connection: close\r\n\r\n" % len(BODY)) + BODY
            c.sendall(resp)
            c.shutdown(socket.SHUT_WR)
            while True:  # the rest of what the client sends, to its end
                chunk = c.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            resp = b""
        finally:
            c.close()
        with self.lock:
            self.conns.append((len(data), len(resp), data.split(b"\r\n\r\n")[0]))

    def close(self):
        self.sock.close()


def allowlist_policy(port, env):
    p = json.loads(json.dumps(POLICY))
    p["env"] = env
    p["egress"] = {"policy": "allowlist",
                   "allow": [{"host": "api.test", "port": port, "allow_private": True}]}
    return json.dumps(p)


class Calls:
    """RPC helpers over self.c (an sbxrpc.Conn)."""

    def ok(self, name, req, resp_type):
        code, msg, resp = self.c.call(name, req, resp_type)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def run_argv(self, run, argv):
        """Runs argv to its end: (status, stdout, stderr)."""
        ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=argv), pb.ExecResponse).exec_id
        st = self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=30000),
                     pb.WaitResponse).status
        out = [b"", b""]
        for i, stream in enumerate((pb.STDOUT, pb.STDERR)):
            off = 0
            while True:
                r = self.ok("ReadOutput", pb.ReadOutputRequest(
                    run_id=run, exec_id=ex, stream=stream, offset=off, timeout_ms=5000),
                    pb.ReadOutputResponse)
                out[i] += r.data
                off = r.next_offset
                if r.eof:
                    break
        return st, out[0].decode(errors="replace"), out[1].decode(errors="replace")


class EgressWire(ServerTestCase, Calls):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sbx-test-egress-wire-")
        hosts = os.path.join(cls.tmp, "hosts")
        write_hosts(hosts, ["api.test", "other.test"])
        cls.SERVER_CONFIG = {"egress": egress_config(hosts)}
        cls.origin = Origin()
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.origin.close()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.c = self.srv.conn()

    def tearDown(self):
        self.c.close()

    def status_settled(self, run, n_records):
        """Status once the run has n_records records and none is open (a
        close record follows the exec's end by a moment)."""
        deadline = time.time() + 10
        while True:
            s = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
            if (len(s.egress) >= n_records and not any(e.open for e in s.egress)) or \
                    time.time() > deadline:
                return s

    def test_curl_through_the_proxy_then_a_denied_host(self):
        port = self.origin.port
        before = len(self.origin.conns)
        run = self.ok("CreateRun", pb.CreateRunRequest(
            policy_json=allowlist_policy(port, {"GREETING": "hi"})), pb.CreateRunResponse).run_id

        st, out, err = self.run_argv(run, ["env"])
        self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code), ("EXITED", 0), err)
        self.assertEqual(sorted(out.splitlines()), sorted(["GREETING=hi", "HOME=/tmp"] + PROXY_VARS))

        st, out, err = self.run_argv(run, ["curl", "-sS", "http://api.test:%d/x" % port])
        self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code), ("EXITED", 0), err)
        self.assertEqual(out, BODY.decode())
        # The origin records a connection once the proxy has closed its
        # side, which may come after curl's exit is reported (seen under
        # TSan, 2026-12-04): wait for that, then count.
        deadline = time.time() + 30
        while time.time() < deadline and len(self.origin.conns) == before:
            time.sleep(0.05)
        with self.origin.lock:
            self.assertEqual(len(self.origin.conns), before + 1)
            received, sent, head = self.origin.conns[before]
        # Rewritten to origin form: the server never sees the proxy's URL.
        self.assertTrue(head.startswith(b"GET /x HTTP/1.1\r\n"), head)

        st, out, err = self.run_argv(run, ["curl", "-sS", "-o", "/dev/null", "-D", "-", "-w",
                                           "%{http_code}", "http://other.test:%d/x" % port])
        self.assertEqual(st.exit_code, 0, err)
        self.assertTrue(out.endswith("403"), out)
        self.assertIn("x-sbx-egress-reason: not_allowed", out.lower())
        with self.origin.lock:
            self.assertEqual(len(self.origin.conns), before + 1, "a denied host was reached")

        s = self.status_settled(run, 2)
        by_host = {e.host: e for e in s.egress}
        self.assertEqual(sorted(by_host), ["api.test", "other.test"], s.egress)
        ok, denied = by_host["api.test"], by_host["other.test"]
        self.assertTrue(ok.allowed and not ok.open, ok)
        self.assertEqual((ok.port, ok.address, ok.method), (port, "127.0.0.1:%d" % port, "GET"))
        self.assertEqual((ok.bytes_out, ok.bytes_in), (received, sent), ok)
        self.assertFalse(denied.allowed, denied)
        self.assertEqual((denied.port, denied.reason, denied.status, denied.bytes_out,
                          denied.bytes_in), (port, "not_allowed", 403, 0, 0), denied)
        dests = {(d.host, d.port): d for d in s.egress_destinations}
        self.assertEqual(sorted(dests), [("api.test", port), ("other.test", port)])
        d = dests[("api.test", port)]
        self.assertEqual((d.connections, d.denied, d.bytes_out, d.bytes_in),
                         (1, 0, received, sent))
        d = dests[("other.test", port)]
        self.assertEqual((d.connections, d.denied, d.bytes_out, d.bytes_in), (0, 1, 0, 0))

        m = self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse).manifest
        sums = {(d.host, d.port): (d.connections, d.denied, d.bytes_out, d.bytes_in)
                for d in m.egress}
        self.assertEqual(sums, {("api.test", port): (1, 0, received, sent),
                                ("other.test", port): (0, 1, 0, 0)})
        decisions = [e for e in self.srv.audit_events()
                     if e.get("run_id") == run and e["event"] == "egress_decision"]
        self.assertEqual(len(decisions), 2, decisions)

    def test_every_exec_has_its_own_listener_and_teardown_closes_it(self):
        """Two execs at once each reach the server (each exec's namespace has
        its own 127.0.0.1:3128); a connection left open by a running exec is
        closed by Teardown, with its record."""
        port = self.origin.port
        run = self.ok("CreateRun", pb.CreateRunRequest(
            policy_json=allowlist_policy(port, {})), pb.CreateRunResponse).run_id
        # A CONNECT tunnel that stays open: the exec holds it until killed.
        holder = ("import socket, time\n"
                  "s = socket.create_connection(('127.0.0.1', 3128))\n"
                  "s.sendall(b'CONNECT api.test:%d HTTP/1.1\\r\\nHost: api.test:%d\\r\\n\\r\\n')\n"
                  "print(s.recv(200).split(b'\\r\\n')[0].decode(), flush=True)\n"
                  "time.sleep(60)\n" % (port, port))
        ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=["python3", "-c", holder]),
                     pb.ExecResponse).exec_id
        r = self.ok("ReadOutput", pb.ReadOutputRequest(run_id=run, exec_id=ex, stream=pb.STDOUT,
                                                       timeout_ms=10000), pb.ReadOutputResponse)
        self.assertEqual(r.data, b"HTTP/1.1 200 Connection established\n")
        with self.origin.lock:
            mark = len(self.origin.conns)
        st, out, err = self.run_argv(run, ["curl", "-sS", "http://api.test:%d/y" % port])
        self.assertEqual((st.exit_code, out), (0, BODY.decode()), err)
        s = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual([e.open for e in s.egress if e.method == "CONNECT"], [True], s.egress)
        # curl's connection is counted once the origin read it to its end,
        # which may come a moment after curl exited: wait for it, so that
        # what Teardown adds is the tunnel's alone.
        deadline = time.time() + 5
        while time.time() < deadline:
            with self.origin.lock:
                before = len(self.origin.conns)  # the tunnel's is not among them: still open
            if before == mark + 1:
                break
            time.sleep(0.05)
        self.assertEqual(before, mark + 1, "curl's connection")
        self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
        # Teardown returns with every relayed connection closed and its
        # close record written: the proxy cuts the tunnel before the sandbox
        # goes (torn_down). curl's ended before Teardown, by one of two
        # paths that race: the proxy read the origin's FIN and curl's before
        # sbxd told it curl's exec ended (closed), or after (exec_ended:
        # the proxy ends an ended exec's connections, egress.h). Either is
        # a record written before Teardown; torn_down would not be.
        records = [e for e in self.srv.audit_events()
                   if e.get("run_id") == run and e["event"] == "egress_close"]
        closes = {e["connection"]: e["reason"] for e in records}
        self.assertEqual(sorted(e["connection"] for e in records), [1, 2], records)
        self.assertEqual(closes[1], "torn_down", closes)
        self.assertIn(closes[2], ("closed", "exec_ended"), closes)
        deadline = time.time() + 5
        while time.time() < deadline and len(self.origin.conns) == before:
            time.sleep(0.05)
        self.assertEqual(len(self.origin.conns), before + 1, "the tunnel outlived its run")

    def test_the_message_form_gets_the_documents_defaults(self):
        """proto3 cannot tell an unset limit from 0: an entry given as a
        message with only host, port and allow_private is the JSON entry
        with the parser's defaults, digest and all."""
        port = self.origin.port
        msg = ppb.Policy(image="host", egress=ppb.Egress(
            policy=ppb.Egress.ALLOWLIST,
            allow=[ppb.EgressRule(host="api.test", port=port, allow_private=True)]))
        a = self.ok("CreateRun", pb.CreateRunRequest(policy=msg), pb.CreateRunResponse)
        b = self.ok("CreateRun", pb.CreateRunRequest(policy_json=json.dumps({
            "image": "host", "egress": {"policy": "allowlist", "allow": [
                {"host": "api.test", "port": port, "allow_private": True}]}})),
            pb.CreateRunResponse)
        try:
            self.assertEqual(a.effective_policy.egress, b.effective_policy.egress)
            rule = a.effective_policy.egress.allow[0]
            self.assertEqual((rule.connections_per_minute, rule.max_concurrent,
                              rule.bytes_per_second), (600, 32, 0))
            st, out, err = self.run_argv(a.run_id, ["curl", "-sS", "http://api.test:%d/m" % port])
            self.assertEqual((st.exit_code, out), (0, BODY.decode()), err)
        finally:
            for r in (a, b):
                self.ok("Teardown", pb.TeardownRequest(run_id=r.run_id), pb.TeardownResponse)

    def test_an_expired_run_keeps_its_records_and_lets_nothing_out(self):
        port = self.origin.port
        p = json.loads(allowlist_policy(port, {}))
        p["limits"].update(run_seconds=3, script_seconds=3)
        run = self.ok("CreateRun", pb.CreateRunRequest(policy_json=json.dumps(p)),
                      pb.CreateRunResponse).run_id
        st, out, err = self.run_argv(run, ["curl", "-sS", "http://api.test:%d/e" % port])
        self.assertEqual((st.exit_code, out), (0, BODY.decode()), err)
        deadline = time.time() + 15
        while time.time() < deadline:
            s = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
            if pb.RunState.Name(s.state) == "EXPIRED":
                break
            time.sleep(0.2)
        self.assertEqual(pb.RunState.Name(s.state), "EXPIRED")
        self.assertEqual([(e.host, e.allowed, e.open) for e in s.egress],
                         [("api.test", True, False)], s.egress)
        self.assertEqual([(d.host, d.connections) for d in s.egress_destinations],
                         [("api.test", 1)])
        m = self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse).manifest
        self.assertEqual([(d.host, d.connections) for d in m.egress], [("api.test", 1)])

    def test_deny_has_nothing_on_3128_and_no_proxy_variables(self):
        p = json.loads(json.dumps(POLICY))
        p["env"] = {"GREETING": "hi"}
        run = self.ok("CreateRun", pb.CreateRunRequest(policy_json=json.dumps(p)),
                      pb.CreateRunResponse).run_id
        st, out, err = self.run_argv(run, ["env"])
        self.assertEqual(out, "GREETING=hi\nHOME=/tmp\n", err)
        probe = ("import errno, socket\n"
                 "try: socket.create_connection(('127.0.0.1', 3128), timeout=5); print('OPEN')\n"
                 "except OSError as e: print(errno.errorcode[e.errno])\n")
        st, out, err = self.run_argv(run, ["python3", "-c", probe])
        self.assertEqual(out, "ECONNREFUSED\n", err)
        s = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual((len(s.egress), len(s.egress_destinations)), (0, 0))
        m = self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse).manifest
        self.assertEqual(len(m.egress), 0)


class EgressDown(unittest.TestCase, Calls):
    """An sbxd whose proxy did not start (its resolv.conf does not exist)
    serves deny policies and refuses allowlists, saying why."""

    def test_allowlist_refused_with_the_reason(self):
        missing = "/nonexistent/sbx-egress-wire/resolv.conf"
        srv = Server(egress={"hosts_file": "", "resolv_conf": missing})
        try:
            self.c = srv.conn()
            code, msg, _ = self.c.call("CreateRun", pb.CreateRunRequest(
                policy_json=allowlist_policy(443, {})), pb.CreateRunResponse)
            self.assertEqual(code, "FAILED_PRECONDITION", msg)
            self.assertIn("egress proxy did not start", msg)
            self.assertIn(missing, msg)
            run = self.ok("CreateRun", pb.CreateRunRequest(policy_json=json.dumps(POLICY)),
                          pb.CreateRunResponse).run_id
            st, out, err = self.run_argv(run, ["echo", "deny works"])
            self.assertEqual(out, "deny works\n", err)
            self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)
            self.c.close()
            self.assertIn("egress proxy", srv.log_tail())
            self.assertEqual(srv.stop(), 0, srv.log_tail())
        finally:
            srv.cleanup()


class EgressDrain(unittest.TestCase, Calls):
    """SIGTERM with a run relaying: the run is torn down (its connection's
    close record written), then the proxy stops, and sbxd exits 0."""

    def test_sigterm_with_an_open_tunnel(self):
        tmp = tempfile.mkdtemp(prefix="sbx-test-egress-wire-")
        origin = Origin()
        hosts = os.path.join(tmp, "hosts")
        write_hosts(hosts, ["api.test"])
        srv = Server(egress=egress_config(hosts))
        try:
            self.c = srv.conn()
            run = self.ok("CreateRun", pb.CreateRunRequest(
                policy_json=allowlist_policy(origin.port, {})), pb.CreateRunResponse).run_id
            holder = ("import socket, time\n"
                      "s = socket.create_connection(('127.0.0.1', 3128))\n"
                      "s.sendall(b'CONNECT api.test:%d HTTP/1.1\\r\\n\\r\\n')\n"
                      "print(s.recv(200).split(b'\\r\\n')[0].decode(), flush=True)\n"
                      "time.sleep(60)\n" % origin.port)
            ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=["python3", "-c", holder]),
                         pb.ExecResponse).exec_id
            r = self.ok("ReadOutput", pb.ReadOutputRequest(
                run_id=run, exec_id=ex, stream=pb.STDOUT, timeout_ms=10000),
                pb.ReadOutputResponse)
            self.assertEqual(r.data, b"HTTP/1.1 200 Connection established\n")
            self.c.close()
            self.assertEqual(srv.stop(timeout=60), 0, srv.log_tail())
            events = [e["event"] for e in srv.audit_events() if e.get("run_id") == run]
            self.assertEqual(events.count("egress_close"), 1, events)
            self.assertLess(events.index("egress_close"), events.index("teardown"), events)
        finally:
            srv.cleanup()
            origin.close()
            shutil.rmtree(tmp, ignore_errors=True)


class HelperAlone(unittest.TestCase):
    def test_sbx_helper_run_refuses_an_allowlist_naming_sbxd(self):
        d = tempfile.mkdtemp(prefix="sbx-test-egress-wire-")
        try:
            path = os.path.join(d, "policy.json")
            with open(path, "w") as f:
                f.write(allowlist_policy(443, {}))
            r = subprocess.run([HELPER, "run", "--policy", path, "--", "/bin/true"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 125, r.stderr)
            self.assertIn("egress: an allowlist needs sbxd's egress proxy", r.stderr)
            self.assertIn("sbxctl run", r.stderr)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
