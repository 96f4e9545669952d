# SPDX-License-Identifier: Apache-2.0
"""SIGHUP reloads sbxd's config without touching a run: a rotated token
(the old one refused, the new one the same identity, a live run's exec
still running and waited for), limits_max and quotas for the next
CreateRun, a new server certificate for the next connection, the audit
log reopened after a rename (rotation); an invalid config is refused,
logged and audited, and the running one kept; keys that need a restart
are named."""
import hashlib
import os
import signal
import socket
import ssl
import time
import unittest

from sbxdfix import Server, openssl, policy_json
from sbxrpc import sandbox_pb2 as pb


def ok(conn, name, req, resp_type, token=None):
    code, msg, resp = conn.call(name, req, resp_type, token=token)
    assert code == "OK", "%s: %s %s" % (name, code, msg)
    return resp


class Reload(unittest.TestCase):
    def setUp(self):
        self.srv = Server()

    def tearDown(self):
        rc = self.srv.stop()
        log = self.srv.log_tail()
        self.srv.cleanup()
        self.assertEqual(rc, 0, log)

    def edit(self, **keys):
        self.srv.edit_config(**keys)

    def sighup(self, want="SIGHUP: reloaded"):
        """Sends SIGHUP and waits for the reload's last line (or want)."""
        before = self.srv.log_tail().count(want)
        self.srv.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30  # a hang bound; it takes milliseconds
        while time.monotonic() < deadline:
            log = self.srv.log_tail()
            if log.count(want) > before:
                return [line for line in log.splitlines() if "SIGHUP" in line]
            self.assertIsNone(self.srv.proc.poll(), "sbxd died of SIGHUP: " + log)
            time.sleep(0.02)
        raise AssertionError("no %r after SIGHUP: %s" % (want, self.srv.log_tail()))

    def test_a_rotated_token_and_a_live_run(self):
        srv = self.srv
        old = srv.tokens["alice"]
        new = "n" + os.urandom(16).hex()
        with srv.conn(tls=True) as c:
            run = ok(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                     pb.CreateRunResponse, token=old).run_id
            ex = ok(c, "Exec", pb.ExecRequest(run_id=run, argv=[
                "sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.05; done; echo after"]),
                pb.ExecResponse, token=old).exec_id
            self.edit(tokens=[
                {"name": "alice", "sha256": hashlib.sha256(new.encode()).hexdigest()},
                {"name": "bob", "sha256": hashlib.sha256(srv.tokens["bob"].encode()).hexdigest()}])
            lines = self.sighup()
            self.assertIn("tokens (2 changed)", lines[-1])
            code, msg, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse, token=old)
            self.assertEqual((code, msg), ("UNAUTHENTICATED",
                                           "invalid token in Request.credentials"))
            h = ok(c, "Health", pb.HealthRequest(), pb.HealthResponse, token=new)
            self.assertEqual((h.identity, h.runs_active), ("token:alice", 1))
            # The run is untouched: its exec is still running, and ends now.
            st = ok(c, "Status", pb.StatusRequest(run_id=run), pb.StatusResponse, token=new)
            self.assertEqual(pb.ExitReason.Name(st.execs[0].reason), "RUNNING")
            ok(c, "Exec", pb.ExecRequest(run_id=run, argv=["touch", "/tmp/go"]),
               pb.ExecResponse, token=new)
            w = ok(c, "Wait", pb.WaitRequest(run_id=run, exec_id=ex), pb.WaitResponse,
                   token=new).status
            self.assertEqual((pb.ExitReason.Name(w.reason), w.exit_code, w.stdout_bytes),
                             ("EXITED", 0, 6), w)
            ok(c, "Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse, token=new)
        ev = [e for e in srv.audit_events() if e["event"] == "config_reloaded"]
        self.assertEqual(len(ev), 1)
        self.assertIn("tokens", ev[0]["changed"])
        with open(srv.audit) as f:
            text = f.read() + srv.log_tail()
        self.assertNotIn(old, text)
        self.assertNotIn(new, text)

    def test_an_invalid_config_is_refused_and_the_old_kept(self):
        srv = self.srv
        with open(srv.config) as f:
            good = f.read()
        for bad, says in (("{\"runs_max\": 8, ", "sbxd.json"),
                          (good.replace("\"runs_max\": 32", "\"runs_max\": 0"),
                           "runs_max: must be 1.."),
                          (good.replace("server.pem", "missing.pem"), "missing.pem")):
            with open(srv.config, "w") as f:
                f.write(bad)
            lines = self.sighup("refused, the running config stays")
            self.assertIn(says, lines[-1])
            with srv.conn(tls=True) as c:
                h = ok(c, "Health", pb.HealthRequest(), pb.HealthResponse,
                       token=srv.tokens["bob"])
                self.assertEqual((h.identity, h.runs_max), ("token:bob", 32))
        refused = [e for e in srv.audit_events() if e["event"] == "config_reload_refused"]
        self.assertEqual(len(refused), 3)
        self.assertIn("missing.pem", refused[-1]["error"])
        with open(srv.config, "w") as f:
            f.write(good)

    def test_limits_and_quotas_apply_to_the_next_create_run(self):
        srv = self.srv
        with srv.conn() as c:
            first = ok(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                       pb.CreateRunResponse).run_id
            self.edit(limits_max={"memory_mb": 128}, runs_max_per_identity=1,
                      quotas={"identity_mb": 1})
            lines = self.sighup()
            for key in ("runs_max_per_identity", "limits_max", "quotas"):
                self.assertIn(key, lines[-1])
            code, msg, _ = c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json(
                memory_mb=256)), pb.CreateRunResponse)
            self.assertEqual(code, "FAILED_PRECONDITION", msg)
            self.assertIn("limits_max.memory_mb", msg)
            code, msg, _ = c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json(
                memory_mb=64)), pb.CreateRunResponse)
            self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
            self.assertIn("runs_max_per_identity", msg)
            # The run made before keeps its 256 MiB and goes on.
            st = ok(c, "Status", pb.StatusRequest(run_id=first), pb.StatusResponse)
            self.assertEqual(st.policy.limits.memory_mb, 256)
            ok(c, "Teardown", pb.TeardownRequest(run_id=first), pb.TeardownResponse)
            # A 2 MiB upload is over the new 1 MiB identity quota.
            code, msg, _ = c.call("CreateRun", pb.CreateRunRequest(
                policy_json=policy_json(memory_mb=64),
                inputs=[pb.InputFile(path="big", size=2 << 20, sha256="0" * 64)]), pb.CreateRunResponse)
            self.assertEqual(code, "RESOURCE_EXHAUSTED", msg)
            self.assertIn("identity_mb", msg)

    def test_the_audit_log_is_reopened_after_a_rename(self):
        srv = self.srv
        os.rename(srv.audit, srv.audit + ".1")
        self.sighup()  # nothing changed in the config: reopened all the same
        self.assertTrue(os.path.exists(srv.audit))
        names = [e["event"] for e in srv.audit_events()]
        self.assertIn("config_reloaded", names)
        with open(srv.audit + ".1") as f:
            self.assertNotIn("config_reloaded", f.read())
        self.assertEqual(os.stat(srv.audit).st_mode & 0o777, 0o600)

    def test_keys_that_need_a_restart_are_named_and_kept(self):
        srv = self.srv
        self.edit(runs_max=10, workers=3)
        lines = self.sighup()
        self.assertTrue(any("runs_max, workers changed" in line and "need a restart" in line
                            for line in lines), lines)
        with srv.conn() as c:
            self.assertEqual(ok(c, "Health", pb.HealthRequest(), pb.HealthResponse).runs_max, 32)

    def served_cert(self):
        ctx = ssl.create_default_context(cafile=self.srv.path("ca.pem"))
        ctx.load_cert_chain(self.srv.path("client.pem"), self.srv.path("client.key"))
        with socket.create_connection(("127.0.0.1", self.srv.port), timeout=10) as s:
            with ctx.wrap_socket(s, server_hostname="localhost") as t:
                return t.getpeercert(binary_form=True)

    def test_a_new_server_certificate_for_new_connections(self):
        srv = self.srv
        old = self.served_cert()
        d = srv.dir
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=server2", "-keyout",
                "server2.key", "-out", "server2.csr", cwd=d)
        openssl("x509", "-req", "-in", "server2.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out",
                "server2.pem", cwd=d)
        with srv.conn(tls=True) as c:  # open across the reload
            ok(c, "Health", pb.HealthRequest(), pb.HealthResponse, token=srv.tokens["bob"])
            os.replace(os.path.join(d, "server2.pem"), os.path.join(d, "server.pem"))
            os.replace(os.path.join(d, "server2.key"), os.path.join(d, "server.key"))
            lines = self.sighup()
            self.assertIn("tls", lines[-1])
            # nng 1.5.2 prepares each TLS accept ahead, with the config
            # of that moment: the connection it had ready may still get
            # the old certificate, every one after gets the new.
            served = [self.served_cert() for _ in range(2)]
            new = served[-1]
            self.assertNotEqual(new, old)
            with open(os.path.join(d, "server.pem")) as f:
                self.assertEqual(new, ssl.PEM_cert_to_DER_cert(f.read()))
            # The connection made before goes on with its session.
            ok(c, "Health", pb.HealthRequest(), pb.HealthResponse, token=srv.tokens["bob"])
        with srv.conn(tls=True) as c:
            ok(c, "Health", pb.HealthRequest(), pb.HealthResponse, token=srv.tokens["bob"])
        # The same files again: nothing to swap.
        lines = self.sighup()
        self.assertIn("nothing changed", lines[-1])


if __name__ == "__main__":
    unittest.main()
