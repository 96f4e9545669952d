# SPDX-License-Identifier: Apache-2.0
"""Runs in pinned images of sbxd's store (issue 10): a busybox-static rootfs
made here, imported with `sbxd image import --rootfs` into the test server's
store (once before sbxd starts, once while it runs), then run over the RPC.
The image is the root's content, read-only; /etc is sbx's own for passwd,
group, hosts, hostname and resolv.conf; nothing of the host shows; the
environment is the policy's alone; the digest is reported everywhere; wrong
pins, absent digests and unpinned names are refused unless the config allows
them; `rm` of an image a live run holds is refused."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import unittest

from sbxdfix import HELPER, POLICY, SBXD, Server, ServerTestCase
from sbxrpc import sandbox_pb2 as pb

BUSYBOX = "/bin/busybox"
APPLETS = ("sh", "cat", "ls", "id", "env", "touch", "echo", "test", "mkdir", "rm", "grep",
           "printf", "chmod", "readlink", "true")
OS_RELEASE = "ID=sbxtest\nNAME=\"sbx test image\"\n"
FAKE_PASSWD = "evil:x:0:0:fake:/:/bin/sh\n"
FAKE_HOSTS = "10.66.66.66 evil.example\n"

# Every place of the image a script might try to write, and what it must
# meet there.
WRITES = ("/sbx-w", "/bin/sbx-w", "/etc/sbx-w", "/usr/sbx-w", "/usr/share/sbx-w", "/data/sbx-w")
PROBE = r"""
for p in %s; do
  if touch "$p" 2>/tmp/err; then echo "WROTE $p"; else echo "REFUSED $p $(cat /tmp/err)"; fi
done
if echo x >> /etc/os-release 2>/tmp/err; then echo "WROTE os-release"; else echo "REFUSED os-release $(cat /tmp/err)"; fi
if chmod 777 /bin/busybox 2>/tmp/err; then echo "WROTE chmod"; else echo "REFUSED chmod $(cat /tmp/err)"; fi
for f in /etc/debian_version /usr/bin/python3 /usr/lib/x86_64-linux-gnu /lib64 /etc/sbx; do
  if test -e "$f"; then echo "HOST $f"; fi
done
echo hi > /out/ok && echo "OUT ok"
""" % " ".join(WRITES)


def make_rootfs(root, marker):
    """A busybox-static root file system: bin/ with the applets as links,
    usr/share with a marker, and an etc/ whose passwd, hosts and hostname
    are deliberately fake (sbx must show its own)."""
    for d in ("bin", "usr/share", "etc/extra.d", "tmp", "proc"):
        os.makedirs(os.path.join(root, d))
    shutil.copy(BUSYBOX, os.path.join(root, "bin/busybox"))
    for a in APPLETS:
        os.symlink("busybox", os.path.join(root, "bin", a))
    os.symlink("bin", os.path.join(root, "sbin"))
    files = {"etc/os-release": OS_RELEASE, "etc/profile": "export FROM_PROFILE=1\n",
             "etc/passwd": FAKE_PASSWD, "etc/group": "evil:x:0:\n", "etc/hosts": FAKE_HOSTS,
             "etc/hostname": "evil-host\n", "etc/resolv.conf": "nameserver 10.66.66.66\n",
             "etc/extra.d/conf": "extra\n", "usr/share/marker": marker + "\n",
             "tmp/image-tmp": "the image's /tmp must not show\n"}
    for name, text in files.items():
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    os.symlink("../proc/self/mounts", os.path.join(root, "etc/mtab"))


def image_cmd(srv, *args):
    """`sbxd image` on srv's store, as the same user (the store's owner)."""
    return subprocess.run([SBXD, "image", "--state-dir", srv.state, *args],
                          capture_output=True, text=True, timeout=60)


def import_image(srv, tmp, name_tag, marker):
    """A rootfs made under tmp, imported as name_tag: its pin."""
    root = tempfile.mkdtemp(prefix="sbx-test-rootfs-", dir=tmp)
    make_rootfs(root, marker)
    r = image_cmd(srv, "import", name_tag, "--rootfs", root)
    assert r.returncode == 0, "import %s: %s" % (name_tag, r.stderr)
    pin = r.stdout.strip()
    assert pin.startswith(name_tag + "@sha256:") and len(pin) == len(name_tag) + 72, pin
    return pin


class ImageRun(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sbx-test-image-run-")
        super().setUpClass()
        try:
            # Imported while sbxd is stopped: its start must find (and keep)
            # the store. The second one arrives while it runs.
            cls.srv.stop()
            cls.pin_a = import_image(cls.srv, cls.tmp, "sbxtest:1", "image a")
            cls.srv.start()
            cls.pin_b = import_image(cls.srv, cls.tmp, "sbxtest:2", "image b")
        except Exception:
            cls.tearDownClass()
            raise
        cls.digest_a = cls.pin_a.split("@", 1)[1]
        cls.digest_b = cls.pin_b.split("@", 1)[1]

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def image_cmd(self, *args):
        return image_cmd(self.srv, *args)

    def setUp(self):
        self.c = self.srv.conn()

    def tearDown(self):
        self.c.close()

    def call(self, name, req, resp_type, conn=None):
        return (conn or self.c).call(name, req, resp_type)

    def ok(self, name, req, resp_type, conn=None):
        code, msg, resp = self.call(name, req, resp_type, conn)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def policy(self, image, **extra):
        p = json.loads(json.dumps(POLICY))
        p["image"] = image
        p.update(extra)
        return json.dumps(p)

    def create(self, image, conn=None, **extra):
        return self.ok("CreateRun", pb.CreateRunRequest(policy_json=self.policy(image, **extra)),
                       pb.CreateRunResponse, conn)

    def refused(self, image, conn=None):
        code, msg, _ = self.call("CreateRun", pb.CreateRunRequest(policy_json=self.policy(image)),
                                 pb.CreateRunResponse, conn)
        self.assertEqual(code, "FAILED_PRECONDITION", "%s: %s" % (image, msg))
        return msg

    def run_cmd(self, run, argv, conn=None):
        ex = self.ok("Exec", pb.ExecRequest(run_id=run, argv=argv), pb.ExecResponse,
                     conn).exec_id
        st = self.ok("Wait", pb.WaitRequest(run_id=run, exec_id=ex, timeout_ms=30000),
                     pb.WaitResponse, conn).status
        out = {}
        for stream in (pb.STDOUT, pb.STDERR):
            data, off = b"", 0
            while True:
                r = self.ok("ReadOutput", pb.ReadOutputRequest(
                    run_id=run, exec_id=ex, stream=stream, offset=off, timeout_ms=5000),
                    pb.ReadOutputResponse, conn)
                data, off = data + r.data, r.next_offset
                if r.eof:
                    break
            out[stream] = data.decode(errors="replace")
        self.assertEqual((pb.ExitReason.Name(st.reason), st.exit_code), ("EXITED", 0),
                         "%s: %s" % (argv, out[pb.STDERR]))
        return out[pb.STDOUT]

    def teardown(self, run, conn=None):
        return self.ok("Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse,
                       conn).manifest

    # -- the run

    def test_the_image_is_the_root_read_only_with_sbx_etc(self):
        created = self.create(self.pin_a)
        run = created.run_id
        self.assertEqual(created.image_digest, self.digest_a)
        self.assertEqual(created.effective_policy.image, self.pin_a)
        cat = lambda path: self.run_cmd(run, ["/bin/cat", path])
        self.assertEqual(cat("/etc/os-release"), OS_RELEASE)
        self.assertEqual(cat("/usr/share/marker"), "image a\n")
        self.assertEqual(cat("/etc/extra.d/conf"), "extra\n")
        self.assertEqual(cat("/etc/profile"), "export FROM_PROFILE=1\n")
        # sbx's own files, never the image's fake ones.
        passwd = cat("/etc/passwd")
        self.assertIn("sbx:x:1000:1000:", passwd)
        self.assertNotIn("evil", passwd)
        self.assertNotIn("evil", cat("/etc/group"))
        self.assertNotIn("10.66.66.66", cat("/etc/hosts"))
        self.assertIn("localhost", cat("/etc/hosts"))
        self.assertEqual(cat("/etc/hostname"), "sbx\n")
        self.assertNotIn("10.66.66.66", cat("/etc/resolv.conf"))
        self.assertEqual(self.run_cmd(run, ["/bin/readlink", "/etc/mtab"]),
                         "../proc/self/mounts\n")
        self.assertEqual(self.run_cmd(run, ["/bin/id", "-un"]), "sbx\n")
        # The image's /tmp is the sandbox's tmpfs.
        self.assertEqual(self.run_cmd(run, ["/bin/ls", "-A", "/tmp"]), "")
        # Exactly the policy's environment (and HOME=/tmp, as it sets no
        # HOME): nothing of the image's.
        self.assertEqual(self.run_cmd(run, ["/bin/env"]), "HOME=/tmp\n")

        lines = self.run_cmd(run, ["/bin/sh", "-c", PROBE]).splitlines()
        for p in WRITES + ("os-release", "chmod"):
            line = [ln for ln in lines if ln.split()[1:2] == [p]]
            self.assertEqual(len(line), 1, (p, lines))
            self.assertTrue(line[0].startswith("REFUSED ") and "Read-only file system" in line[0],
                            line[0])
        self.assertFalse([ln for ln in lines if ln.startswith(("WROTE", "HOST"))], lines)
        self.assertIn("OUT ok", lines)
        ls = self.ok("ListArtifacts", pb.ListArtifactsRequest(run_id=run),
                     pb.ListArtifactsResponse)
        self.assertEqual([a.path for a in ls.artifacts], ["ok"])

        st = self.ok("Status", pb.StatusRequest(run_id=run), pb.StatusResponse)
        self.assertEqual(st.image_digest, self.digest_a)
        self.assertEqual(st.policy.image, self.pin_a)
        m = self.teardown(run)
        self.assertEqual(m.image_digest, self.digest_a)
        self.assertEqual(m.policy.image, self.pin_a)
        created_lines = [e for e in self.srv.audit_events()
                         if e.get("event") == "run_created" and e.get("run_id") == run]
        self.assertEqual(len(created_lines), 1, created_lines)
        self.assertEqual(created_lines[0].get("image_digest"), self.digest_a, created_lines[0])

    def test_each_run_mounts_its_own_read_only_overlay(self):
        """The image's entries come from an overlay instance of this run's
        own (its inodes are no other run's), read-only with nosuid and
        nodev, no upper layer, and no xattr of the image interpreted (no
        userxattr, redirects not followed, no metacopy)."""
        first = self.create(self.pin_a).run_id
        second = self.create(self.pin_a).run_id
        try:
            devs = []
            for run in (first, second):
                mounts = {}
                lines = self.run_cmd(run, ["/bin/cat", "/proc/self/mountinfo"]).splitlines()
                for ln in lines:
                    f = ln.split(" ")
                    sep = f.index("-")
                    mounts[f[4]] = (f[2], f[5].split(","), f[sep + 1], f[sep + 3].split(","))
                # The layers are named as /proc/thread-self/fd links
                # (helper/overlay.c): the overlay's options and the binds'
                # roots name no path of the store.
                ovl = [ln for ln in lines if " - overlay " in ln]
                self.assertTrue(ovl, lines)
                self.assertFalse([ln for ln in ovl if self.srv.state in ln], ovl)
                self.assertFalse([ln for ln in ovl if "lowerdir=/proc/thread-self/fd/" not in ln],
                                 ovl)
                for point in ("/bin", "/usr", "/etc/os-release", "/etc/extra.d"):
                    _, opts, fstype, sopts = mounts[point]
                    self.assertEqual(fstype, "overlay", (point, mounts[point]))
                    for o in ("ro", "nosuid", "nodev"):
                        self.assertIn(o, opts, (point, mounts[point]))
                    self.assertIn("ro", sopts, (point, mounts[point]))
                    self.assertNotIn("userxattr", sopts, (point, mounts[point]))
                    self.assertIn("redirect_dir=nofollow", sopts, (point, mounts[point]))
                    self.assertFalse([o for o in sopts if o.startswith("metacopy=on")], sopts)
                    self.assertFalse([o for o in sopts if o.startswith("upperdir")], sopts)
                devs.append({mounts[p][0] for p in ("/bin", "/usr", "/etc/os-release")})
                self.assertEqual(len(devs[-1]), 1, devs)
            self.assertNotEqual(devs[0], devs[1], "two runs share one overlay")
        finally:
            self.teardown(first)
            self.teardown(second)

    def test_policy_env_is_the_only_environment(self):
        run = self.create(self.pin_b, env={"ONLY": "this"}).run_id
        self.assertEqual(self.run_cmd(run, ["/bin/env"]), "ONLY=this\nHOME=/tmp\n")
        self.assertEqual(self.run_cmd(run, ["/bin/cat", "/usr/share/marker"]), "image b\n")
        self.teardown(run)

    def test_sbxctl_shows_the_digest(self):
        r = self.srv.cli("run", "--json", "--image", self.pin_a, "--", "/bin/cat",
                         "/etc/os-release")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["image_digest"], self.digest_a)
        r = self.srv.cli("create", "--json", "--image", self.pin_b)
        self.assertEqual(r.returncode, 0, r.stderr)
        created = json.loads(r.stdout)
        self.assertEqual(created["image_digest"], self.digest_b)
        r = self.srv.cli("status", created["run_id"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("image %s\n" % self.digest_b, r.stdout)
        r = self.srv.cli("health")
        self.assertIn("image %s\n" % self.pin_a, r.stdout)
        self.teardown(created["run_id"])

    def test_health_lists_the_pins(self):
        h = self.ok("Health", pb.HealthRequest(), pb.HealthResponse)
        self.assertIn(self.pin_a, list(h.images))
        self.assertIn(self.pin_b, list(h.images))
        self.assertEqual(list(h.images), sorted(h.images))
        self.assertEqual(h.images_not_listed, 0)

    # -- refusals

    def test_a_pin_to_another_digest_names_both(self):
        msg = self.refused("sbxtest:1@" + self.digest_b)
        self.assertIn(self.digest_a, msg)
        self.assertIn(self.digest_b, msg)

    def test_a_digest_not_in_the_store(self):
        absent = "sha256:" + "0" * 64
        for ref in ("nosuch:1@" + absent, "sbxtest:1@" + absent):
            msg = self.refused(ref)
            self.assertIn(absent, msg)
            self.assertIn("not in this host's image store", msg)

    def test_unpinned_is_refused_by_default(self):
        msg = self.refused("sbxtest:1")
        self.assertIn("sbxtest:1", msg)
        self.assertIn("allow_unpinned", msg)

    def test_rootfs_directories_stay_refused(self):
        root = tempfile.mkdtemp(prefix="sbx-test-rootfs-", dir=self.tmp)
        make_rootfs(root, "dir")
        for image in (root, self.srv.state + "/images/sha256/" + self.digest_a[7:] + "/rootfs"):
            self.assertIn("image", self.refused(image))

    def test_host_still_runs_unpinned(self):
        created = self.create("host")
        self.assertEqual(created.image_digest, "unpinned")
        self.assertEqual(self.run_cmd(created.run_id, ["/bin/sh", "-c", "test -e /usr/bin/env"]),
                         "")
        self.assertEqual(self.teardown(created.run_id).image_digest, "unpinned")

    # -- the store while runs hold it

    def test_rm_of_an_image_in_use_is_refused(self):
        pin = import_image(self.srv, self.tmp, "sbxtest:rm", "image rm")
        run = self.create(pin).run_id
        r = self.image_cmd("rm", "sbxtest:rm")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("in use", r.stderr)
        # Nothing changed: the run still sees its image, and a new run of
        # the same pin still starts.
        self.assertEqual(self.run_cmd(run, ["/bin/cat", "/usr/share/marker"]), "image rm\n")
        h = self.ok("Health", pb.HealthRequest(), pb.HealthResponse)
        self.assertIn(pin, list(h.images))
        self.teardown(run)
        r = self.image_cmd("rm", "sbxtest:rm")
        self.assertEqual(r.returncode, 0, r.stderr)
        h = self.ok("Health", pb.HealthRequest(), pb.HealthResponse)
        self.assertNotIn(pin, list(h.images))
        msg = self.refused(pin)
        self.assertIn("not in this host's image store", msg)


class Unpinned(unittest.TestCase):
    """images.allow_unpinned: a name:tag alone runs, and everything records
    the pin it resolved to."""

    def test_allowed_unpinned_records_the_resolved_digest(self):
        tmp = tempfile.mkdtemp(prefix="sbx-test-image-run-")
        srv = Server(images={"allow_unpinned": True})
        try:
            pin = import_image(srv, tmp, "sbxtest:latest", "unpinned")
            digest = pin.split("@", 1)[1]
            with srv.conn() as c:
                code, msg, created = c.call("CreateRun", pb.CreateRunRequest(
                    policy_json=json.dumps(dict(POLICY, image="sbxtest:latest"))),
                    pb.CreateRunResponse)
                self.assertEqual(code, "OK", msg)
                self.assertEqual(created.image_digest, digest)
                self.assertEqual(created.effective_policy.image, pin)
                code, msg, st = c.call("Status", pb.StatusRequest(run_id=created.run_id),
                                       pb.StatusResponse)
                self.assertEqual((code, st.image_digest), ("OK", digest), msg)
                code, msg, t = c.call("Teardown", pb.TeardownRequest(run_id=created.run_id),
                                      pb.TeardownResponse)
                self.assertEqual(code, "OK", msg)
                self.assertEqual(t.manifest.image_digest, digest)
                self.assertEqual(t.manifest.policy.image, pin)
                # Still: a name the store does not have.
                code, msg, _ = c.call("CreateRun", pb.CreateRunRequest(
                    policy_json=json.dumps(dict(POLICY, image="nosuch:latest"))),
                    pb.CreateRunResponse)
                self.assertEqual(code, "FAILED_PRECONDITION", msg)
                self.assertIn("not in this host's image store", msg)
            self.assertEqual(srv.stop(), 0, srv.log_tail())
        finally:
            srv.cleanup()
            shutil.rmtree(tmp, ignore_errors=True)


class StoreDir(unittest.TestCase):
    """images.dir: a link to the store is followed once, by sbxd (the helper
    follows none); a store inside runs/ (which every start empties) is
    refused before anything is removed."""

    def test_a_store_through_a_link_runs(self):
        srv = Server()
        try:
            real = os.path.join(srv.dir, "real-store")
            os.mkdir(real, 0o700)
            os.symlink(real, os.path.join(srv.dir, "store"))
            srv.restart_with(images={"dir": os.path.join(srv.dir, "store")})
            root = os.path.join(srv.dir, "rootfs")
            os.mkdir(root)
            make_rootfs(root, "linked")
            r = subprocess.run([SBXD, "image", "--config", srv.config, "import", "linked:1",
                                "--rootfs", root], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            pin = r.stdout.strip()
            self.assertTrue(os.path.isdir(os.path.join(real, "sha256", pin[-64:])))
            with srv.conn() as c:
                code, msg, created = c.call("CreateRun", pb.CreateRunRequest(
                    policy_json=json.dumps(dict(POLICY, image=pin))), pb.CreateRunResponse)
                self.assertEqual(code, "OK", msg)
                code, msg, _ = c.call("Teardown", pb.TeardownRequest(run_id=created.run_id),
                                      pb.TeardownResponse)
                self.assertEqual(code, "OK", msg)
            self.assertEqual(srv.stop(), 0, srv.log_tail())
        finally:
            srv.cleanup()

    def test_a_store_inside_runs_is_refused(self):
        srv = Server()
        try:
            inside = os.path.join(srv.state, "runs", "images")
            with self.assertRaises(RuntimeError) as e:
                srv.restart_with(images={"dir": inside})
            self.assertIn("which every start of sbxd empties", str(e.exception))
        finally:
            srv.cleanup()


class HealthBound(unittest.TestCase):
    """Health lists at most 256 pins and at most a quarter of
    max_message_bytes of them, and counts the rest."""
    TAGS = 270

    def health(self, srv):
        with srv.conn() as c:
            code, msg, h = c.call("Health", pb.HealthRequest(), pb.HealthResponse)
        self.assertEqual(code, "OK", msg)
        return h

    def test_the_list_is_bounded(self):
        srv = Server()
        try:
            root = os.path.join(srv.dir, "tiny")
            os.makedirs(os.path.join(root, "bin"))
            with open(os.path.join(root, "bin", "x"), "w") as f:
                f.write("x\n")
            pins = []
            for i in range(self.TAGS):
                r = image_cmd(srv, "import", "bound:t%03d" % i, "--rootfs", root)
                self.assertEqual(r.returncode, 0, r.stderr)
                pins.append(r.stdout.strip())
            pins.sort()
            h = self.health(srv)
            self.assertEqual(list(h.images), pins[:256])
            self.assertEqual(h.images_not_listed, self.TAGS - 256)
            # The smallest answer sbxd may be given: 16 KiB for the list.
            srv.restart_with(max_message_bytes=65536)
            h = self.health(srv)
            listed = list(h.images)
            self.assertEqual(listed, pins[:len(listed)])
            self.assertLess(len(listed), 256)
            self.assertLessEqual(sum(len(p) + 3 for p in listed), 65536 // 4)
            self.assertEqual(len(listed) + h.images_not_listed, self.TAGS)
            self.assertEqual(srv.stop(), 0, srv.log_tail())
        finally:
            srv.cleanup()


def tree_id(path):
    """What sbxd passes as --image-root-id: the directory's st_dev:st_ino."""
    st = os.lstat(path)
    return "%d:%d" % (st.st_dev, st.st_ino)


class HelperImageRoot(unittest.TestCase):
    """sbx-helper's side: --image-root goes with a pin and only with one,
    for serve only, never names the host's root, and always comes with the
    identity (--image-root-id) of the tree sbxd holds: another directory at
    the path is refused."""
    PIN = "sbxtest:1@sha256:" + "ab" * 32

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sbx-test-image-root-")
        self.root = os.path.join(self.tmp, "rootfs")
        os.mkdir(self.root)
        make_rootfs(self.root, "helper")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def helper(self, mode, image, image_root, *args, image_id=None):
        """(exit status, stderr, what pid 1 said on the control socket).
        image_id: --image-root-id (default: image_root's own; "" leaves it
        out)."""
        policy = os.path.join(self.tmp, "policy.json")
        with open(policy, "w") as f:
            json.dump(dict(POLICY, image=image), f)
        if image_id is None:
            image_id = tree_id(image_root)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with ours:
            cmd = [HELPER, mode, "--policy", policy, "--image-root", image_root]
            if image_id:
                cmd += ["--image-root-id", image_id]
            if mode == "serve":
                cmd += ["--control-fd", str(theirs.fileno())]
            with theirs:
                p = subprocess.Popen(cmd + list(args), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     pass_fds=(theirs.fileno(),))
            said = b""
            ours.settimeout(30)
            try:
                said = ours.recv(65536)
            except OSError:
                pass
            _, err = p.communicate(timeout=30)
        return p.returncode, err.decode(errors="replace"), said

    def test_run_refuses_image_root(self):
        rc, err, _ = self.helper("run", self.PIN, self.root, "--", "/bin/true")
        self.assertEqual(rc, 125, err)
        self.assertIn("--image-root is for serve", err)

    def test_image_root_needs_a_pin(self):
        for image in ("host", self.root):
            rc, err, _ = self.helper("serve", image, self.root)
            self.assertEqual(rc, 125, err)
            self.assertIn("not a pinned store image", err)

    def test_image_root_is_never_the_host_root(self):
        _, err, said = self.helper("serve", self.PIN, "/")
        self.assertIn(b"--image-root /: is the host's root", said, err)

    def test_image_root_through_a_link_is_refused(self):
        link = os.path.join(self.tmp, "link")
        os.symlink(self.root, link)
        _, err, said = self.helper("serve", self.PIN, link)
        self.assertIn(b"--image-root " + link.encode(), said, err)
        self.assertIn(b"Too many levels of symbolic links", said, err)

    def test_image_root_goes_with_its_id(self):
        rc, err, _ = self.helper("serve", self.PIN, self.root, image_id="")
        self.assertEqual(rc, 2, err)
        self.assertIn("--image-root and --image-root-id DEV:INO go together", err)
        policy = os.path.join(self.tmp, "policy.json")
        r = subprocess.run([HELPER, "serve", "--policy", policy, "--control-fd", "3",
                            "--image-root-id", tree_id(self.root)],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("go together", r.stderr)
        for bad in ("1", "1:", ":1", "a:1", "1:b", "-1:2", "1:-2", "+1:2", "1: 2", "1:2:3",
                    "1:18446744073709551616", "18446744073709551616:1"):
            rc, err, _ = self.helper("serve", self.PIN, self.root, image_id=bad)
            self.assertEqual(rc, 2, bad + ": " + err)
            self.assertIn("--image-root-id %s: must be DEV:INO" % bad, err)

    def test_another_tree_at_the_path_is_refused(self):
        # The id of another directory (the one above): what a tree put at
        # the path since sbxd's hold would look like to the helper.
        _, err, said = self.helper("serve", self.PIN, self.root, image_id=tree_id(self.tmp))
        self.assertIn(b"--image-root " + self.root.encode() + b": not the tree sbxd holds",
                      said, err)
        self.assertIn(("--image-root-id %s" % tree_id(self.tmp)).encode(), said, err)
        self.assertIn(b"nothing was mounted", said, err)


if __name__ == "__main__":
    unittest.main()
