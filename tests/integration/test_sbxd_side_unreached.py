# SPDX-License-Identifier: Apache-2.0
"""The same-host transfers when sbxd cannot reach the caller's socket.

The caller listens on an abstract unix socket whose name every local user
can read in /proc/net/unix; another user who keeps its listen backlog full
makes sbxd's connect fail EAGAIN (review 13 did it from a second identity:
30 of 485 downloads failed). sbxd then refuses the call FAILED_PRECONDITION
("same-host: connecting to the caller's socket_name", common/export_wire.h)
and the clients upload or fetch in chunks instead: such a user can slow a
caller's transfer, not stop it.

sbxd runs here with a preloaded shim whose connect() to an abstract
"sbx-..." name fails EAGAIN, as a full backlog makes it, and nothing else:
the refusal every time, so that what each client does with it is checked
every time, not when a race is won."""
import json
import os
import tempfile
import unittest

import sbxdfix
from sbxrpc import sandbox_pb2 as pb
import test_sbxd_export as te
from test_sbxd_out import OutTest

import sbx_client  # noqa: E402 (test_sbxd_export put it on the path)

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
int connect(int fd, const struct sockaddr *a, socklen_t len)
{
	static int (*real)(int, const struct sockaddr *, socklen_t);
	const struct sockaddr_un *u = (const struct sockaddr_un *)a;
	if (a->sa_family == AF_UNIX && len > sizeof(sa_family_t) + 5 && u->sun_path[0] == 0 &&
	    !memcmp(u->sun_path + 1, "sbx-", 4)) {
		errno = EAGAIN; /* the listener's backlog is full */
		return -1;
	}
	if (!real)
		real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
	return real(fd, a, len);
}
"""
class SideUnreached(OutTest):
    SERVER_CONFIG = {}

    @classmethod
    def setUpClass(cls):
        cls.srv = sbxdfix.PreloadServer(sbxdfix.build_shim(SHIM, "unreached.so"),
                                        **cls.SERVER_CONFIG)

    def events(self, name):
        return [e for e in self.srv.audit_events() if e.get("event") == name]

    def test_the_refusal_names_the_socket(self):
        run = self.create()
        rv = te.Receiver(n=1)
        code, msg, _ = self.c.call("ExportArtifacts", rv.request(run, ["a"]),
                                   pb.ExportArtifactsResponse)
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        self.assertIn("same-host: connecting to the caller's socket_name", msg)
        self.assertIn("Resource temporarily unavailable", msg)
        self.teardown(run)

    def test_sbxctl_fetches_and_uploads_in_chunks(self):
        run = self.create()
        self.run_py(run, "import os\nos.makedirs('/out/d')\nopen('/out/d/a','w').write('alpha')\n"
                         "open('/out/b','wb').write(os.urandom(3<<20))\n")
        want = self.digests(run)
        with tempfile.TemporaryDirectory() as top:
            out = os.path.join(top, "o")
            r = self.srv.cli("fetch", run, "--all", out)
            self.assertEqual(r.returncode, 0, r)
            self.assert_copied(out, want)
            local = os.path.join(top, "in")
            with open(local, "wb") as f:
                f.write(b"input" * 1000)
            r = self.srv.cli("put", run, local, "new/in")
            self.assertEqual(r.returncode, 0, r)
        self.assertEqual(self.events("artifacts_exported"), [])
        self.assertEqual(self.events("inputs_imported"), [])
        self.run_py(run, "import hashlib\nassert hashlib.sha256(open('/data/new/in','rb')"
                         ".read()).hexdigest() == %r\n" % te.sha(b"input" * 1000))
        self.teardown(run)

    def test_sbxctl_run_with_data_and_out(self):
        with tempfile.TemporaryDirectory() as top:
            data, out = os.path.join(top, "data"), os.path.join(top, "out")
            os.makedirs(data)
            with open(os.path.join(data, "x.csv"), "w") as f:
                f.write("a,b\n")
            r = self.srv.cli("run", "--data", data, "--out", out, "--", te.PY, "-c",
                             "open('/out/r','w').write(open('/data/x.csv').read()*2)")
            self.assertEqual(r.returncode, 0, r)
            with open(os.path.join(out, "r")) as f:
                self.assertEqual(f.read(), "a,b\na,b\n")

    def test_the_python_client_fetches_and_uploads_in_chunks(self):
        with sbx_client.connect(self.srv.ipc) as c, tempfile.TemporaryDirectory() as top:
            local = os.path.join(top, "l")
            with open(local, "wb") as f:
                f.write(b"py" * 5000)
            run = c.create_run(json.loads(sbxdfix.policy_json()), inputs={"/data/m": local})
            run.put("/data/n", b"later")
            run.exec([te.PY, "-c", "open('/out/r','w').write(open('/data/m').read()[:4]"
                                   "+open('/data/n').read())"])
            got = sbx_client.Sandbox(run).files.download("/out", os.path.join(top, "o"))
            self.assertEqual([f.path for f in got], ["r"])
            with open(os.path.join(top, "o", "r")) as f:
                self.assertEqual(f.read(), "pypylater")
            # Not turned off for good: the next transfer tries again.
            self.assertFalse(getattr(c, "_export_off", False))
            self.assertFalse(getattr(c, "_import_off", False))
            run.teardown()


if __name__ == "__main__":
    unittest.main()
