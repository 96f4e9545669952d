# SPDX-License-Identifier: Apache-2.0
"""`sbxd image` (the real binary, $SBX_SBXD) on a store under a temp dir:
a busybox-static rootfs imported as a directory and as tars (python's
tarfile, GNU tar) to one digest, reuse, list/inspect/rm, an import killed
with SIGKILL half-way, two imports of one name:tag at once, the store's
config and permissions, and usage errors."""
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import unittest

# sbxd image needs no running server (and so no sbxdfix, whose protobuf
# modules only ctest's environment has).
SBXD = os.environ.get("SBX_SBXD", "")

PIN = re.compile(r"^([a-z0-9._/-]+:[A-Za-z0-9_.-]+)@(sha256:[0-9a-f]{64})\n$")
APPLETS = ["sh", "ls", "cat", "echo", "true", "env"]


def make_busybox_tree(root):
    """bin/busybox and applet links, an etc/ with files, a usr/ dir."""
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
    os.chmod(os.path.join(root, "bin", "busybox"), 0o755)
    for a in APPLETS:
        os.symlink("busybox", os.path.join(root, "bin", a))
    os.makedirs(os.path.join(root, "etc"))
    with open(os.path.join(root, "etc", "os-release"), "w") as f:
        f.write("NAME=sbx-test-busybox\n")
    os.chmod(os.path.join(root, "etc", "os-release"), 0o644)
    os.makedirs(os.path.join(root, "usr", "bin"))
    for d in ("", "bin", "etc", "usr", "usr/bin"):
        os.chmod(os.path.join(root, d), 0o755)


class ImageStoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not SBXD or not os.path.exists(SBXD):
            raise RuntimeError("SBX_SBXD is not set to the built sbxd (run through ctest)")
        cls.top = tempfile.mkdtemp(prefix="sbx-test-image-store-")
        cls.tree = os.path.join(cls.top, "busybox")
        os.mkdir(cls.tree)
        make_busybox_tree(cls.tree)

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["chmod", "-R", "u+rwx", cls.top], check=False)
        shutil.rmtree(cls.top, ignore_errors=True)

    def setUp(self):
        self.store = tempfile.mkdtemp(prefix="sbx-test-store-", dir=self.top)
        os.rmdir(self.store)  # import makes it

    def image(self, *args, store=True, timeout=60):
        pre = ["--images-dir", self.store] if store else []
        return subprocess.run([SBXD, "image", *pre, *args], capture_output=True, text=True,
                              timeout=timeout)

    def ok(self, *args, **kw):
        r = self.image(*args, **kw)
        self.assertEqual(r.returncode, 0, r)
        return r

    def import_ok(self, name_tag, *source):
        r = self.ok("import", name_tag, *source)
        m = PIN.match(r.stdout)
        self.assertTrue(m, "stdout must be the pinned reference alone: %r" % r.stdout)
        self.assertEqual(m.group(1), name_tag)
        return m.group(2), r

    def trees(self):
        return sorted(os.listdir(os.path.join(self.store, "sha256")))

    def tmp_entries(self):
        return os.listdir(os.path.join(self.store, "tmp"))

    def refs(self):
        with open(os.path.join(self.store, "refs.json")) as f:
            return json.load(f)

    def assert_consistent(self):
        """Every ref names a complete tree (rootfs/ and image.json)."""
        p = os.path.join(self.store, "refs.json")
        refs = self.refs() if os.path.exists(p) else {}
        for ref, digest in refs.items():
            d = os.path.join(self.store, "sha256", digest[len("sha256:"):])
            self.assertTrue(os.path.isdir(os.path.join(d, "rootfs")), (ref, digest))
            with open(os.path.join(d, "image.json")) as f:
                self.assertEqual(json.load(f)["digest"], digest)
        for hexd in self.trees():
            self.assertTrue(os.path.isfile(os.path.join(self.store, "sha256", hexd, "image.json")))
            self.assertFalse(os.path.exists(os.path.join(self.store, "sha256", hexd, "scratch")))
        return refs

    # -- import of a directory, reuse
    def test_import_rootfs_then_reuse(self):
        digest, r = self.import_ok("busy:1", "--rootfs", self.tree)
        self.assertRegex(r.stderr, r"sbxd image: .*MiB")
        self.assertRegex(r.stderr, r"\d+ entries")
        for line in r.stderr.splitlines():
            self.assertTrue(line.startswith("sbxd image: "), line)
        st = os.stat(self.store)
        self.assertEqual(st.st_mode & 0o7777, 0o700)
        root = os.path.join(self.store, "sha256", digest[7:], "rootfs")
        self.assertEqual(os.readlink(os.path.join(root, "bin", "sh")), "busybox")
        with open(os.path.join(root, "etc", "os-release")) as f:
            self.assertEqual(f.read(), "NAME=sbx-test-busybox\n")
        self.assertTrue(os.path.isdir(os.path.join(root, "usr", "bin")))
        out = subprocess.run([os.path.join(root, "bin", "busybox"), "echo", "ran"],
                             capture_output=True, text=True)
        self.assertEqual(out.stdout, "ran\n")
        self.assertEqual(self.refs(), {"busy:1": digest})

        again, r = self.import_ok("busy:1", "--rootfs", self.tree)
        self.assertEqual(again, digest)
        self.assertIn("reusing %s (already in the store)" % digest, r.stderr)
        self.assertEqual(self.trees(), [digest[7:]])
        self.assertEqual(self.tmp_entries(), [])

    # -- tars of the same tree: one digest
    def python_tar(self, path):
        """Entries in another order than GNU tar's, other owners and times."""
        entries = []
        for dirpath, dirnames, filenames in os.walk(self.tree):
            for n in sorted(dirnames + filenames, reverse=True):
                entries.append(os.path.join(dirpath, n))
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
            def attrs(ti):
                ti.uid, ti.gid, ti.uname, ti.gname, ti.mtime = 4242, 4343, "x", "y", 123456
                return ti
            t.add(self.tree, arcname=".", recursive=False, filter=attrs)
            # parents before children, siblings reversed
            for p in sorted(entries, key=lambda e: (e.count("/"), [-ord(c) for c in e])):
                t.add(p, arcname=os.path.relpath(p, self.tree), recursive=False,
                      filter=attrs)

    def test_rootfs_tar_gives_the_rootfs_digest(self):
        digest, _ = self.import_ok("busy:dir", "--rootfs", self.tree)
        py = os.path.join(self.top, "py.tar")
        self.python_tar(py)
        d_py, _ = self.import_ok("busy:pytar", "--rootfs-tar", py)
        self.assertEqual(d_py, digest, "python tarfile")
        gnu = os.path.join(self.top, "gnu.tar.gz")
        subprocess.run(["tar", "-C", self.tree, "--owner=0", "--group=0", "--numeric-owner",
                        "--mtime=@0", "-czf", gnu, "."], check=True)
        d_gnu, r = self.import_ok("busy:gnutar", "--rootfs-tar", gnu)
        self.assertEqual(d_gnu, digest, "GNU tar, gzip")
        self.assertIn("reusing", r.stderr)
        self.assertEqual(self.trees(), [digest[7:]])
        self.assertEqual(self.assert_consistent(),
                         {"busy:dir": digest, "busy:pytar": digest, "busy:gnutar": digest})

    # -- list, inspect, rm
    def test_list_inspect_rm(self):
        r = self.ok("list", "--json")
        self.assertEqual(json.loads(r.stdout), [], "a store not made yet lists as empty")
        digest, _ = self.import_ok("busy:1", "--rootfs", self.tree)
        self.import_ok("busy:2", "--rootfs", self.tree)
        listed = json.loads(self.ok("list", "--json").stdout)
        self.assertEqual([e["ref"] for e in listed], ["busy:1@" + digest, "busy:2@" + digest])
        self.assertEqual(listed[0]["kind"], "rootfs")
        self.assertGreater(listed[0]["size_bytes"], 1 << 20)
        table = self.ok("list").stdout.splitlines()
        self.assertEqual(table[0].split(), ["REF", "DIGEST", "SIZE", "IMPORTED"])
        self.assertEqual(table[1].split()[:2], ["busy:1", digest[:19]])
        self.assertRegex(table[1], r"\d+\.\d MiB +\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$")

        doc = json.loads(self.ok("inspect", "busy:1").stdout)
        self.assertEqual(doc["digest"], digest)
        self.assertEqual(sorted(doc["refs"]), ["busy:1", "busy:2"])
        self.assertTrue(doc["rootfs"].endswith("/sha256/%s/rootfs" % digest[7:]))
        self.assertEqual(json.loads(self.ok("inspect", digest).stdout)["digest"], digest)
        r = self.image("inspect", "busy:1@sha256:" + "0" * 64)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("the store's busy:1 is " + digest, r.stderr)

        self.ok("rm", "busy:1")
        self.assertEqual(self.trees(), [digest[7:]], "busy:2 keeps the tree")
        r = self.image("rm", "busy:1")
        self.assertEqual(r.returncode, 1, r)
        self.assertRegex(r.stderr, r"^sbxd image: error: busy:1: not in the image store")
        r = self.image("rm", "nope:9")
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("nope:9: not in the image store", r.stderr)
        self.assertEqual(r.stdout, "")
        self.ok("rm", "busy:2@" + digest)
        self.assertEqual(self.trees(), [], "the last tag took the tree")
        self.assertEqual(self.tmp_entries(), [])
        self.assertEqual(json.loads(self.ok("list", "--json").stdout), [])

    def test_rm_of_a_held_image_is_refused(self):
        """sbxd holds a run's image as a shared flock on its sha256/<hex>
        directory (images.h); this test takes the same flock."""
        digest, _ = self.import_ok("busy:1", "--rootfs", self.tree)
        with open(os.path.join(self.store, "refs.json")) as f:
            before = f.read()
        fd = os.open(os.path.join(self.store, "sha256", digest[7:]), os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            for ref in ("busy:1", digest):
                r = self.image("rm", ref)
                self.assertEqual(r.returncode, 1, r)
                self.assertIn("in use by a live run", r.stderr)
                self.assertIn("nothing was removed", r.stderr)
            with open(os.path.join(self.store, "refs.json")) as f:
                self.assertEqual(f.read(), before)
            self.assertEqual(self.trees(), [digest[7:]])
            self.assertEqual(self.tmp_entries(), [])
        finally:
            os.close(fd)
        self.ok("rm", "busy:1")
        self.assertEqual(self.trees(), [])

    # -- SIGKILL half-way
    def big_tree(self):
        big = os.path.join(self.top, "big")
        if not os.path.exists(big):
            shutil.copytree(self.tree, big, symlinks=True)
            blob = os.urandom(64 << 10)
            for i in range(40):
                d = os.path.join(big, "usr", "share", "d%02d" % i)
                os.makedirs(d)
                for j in range(25):
                    with open(os.path.join(d, "f%03d" % j), "wb") as f:
                        f.write(blob[j:] + blob[:j])
        return big

    def test_import_killed_half_way(self):
        digest, _ = self.import_ok("busy:1", "--rootfs", self.tree)
        big = self.big_tree()
        killed_mid = 0
        for attempt in range(3):
            p = subprocess.Popen([SBXD, "image", "--images-dir", self.store, "import", "big:1",
                                  "--rootfs", big], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            first = p.stderr.readline()
            self.assertTrue(first.startswith("sbxd image: "), first)
            p.send_signal(signal.SIGKILL)
            out, _ = p.communicate(timeout=60)
            refs = self.assert_consistent()
            if p.returncode == -signal.SIGKILL and not out:
                killed_mid += 1
                self.assertNotIn("big:1", refs, "a killed import names nothing")
                self.assertEqual(self.trees(), [digest[7:]])
            listed = json.loads(self.ok("list", "--json").stdout)
            self.assertEqual([e["ref"] for e in listed][:1], ["busy:1@" + digest])
        self.assertGreater(killed_mid, 0, "no import was killed before it finished")
        self.assertTrue(self.tmp_entries(), "the killed imports' stages are still there")
        d_big, _ = self.import_ok("big:1", "--rootfs", big)
        self.assertEqual(self.tmp_entries(), [], "the next import cleaned tmp/")
        self.assertEqual(self.trees(), sorted([digest[7:], d_big[7:]]))
        self.assert_consistent()

    # -- two imports of one name:tag at once
    def test_concurrent_imports_of_one_tag(self):
        big = self.big_tree()
        procs = [subprocess.Popen([SBXD, "image", "--images-dir", self.store, "import",
                                   "same:1", "--rootfs", big], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outs):
            self.assertEqual(p.returncode, 0, err)
            self.assertTrue(PIN.match(out), out)
        self.assertEqual(outs[0][0], outs[1][0])
        digest = PIN.match(outs[0][0]).group(2)
        self.assertEqual(self.assert_consistent(), {"same:1": digest})
        self.assertEqual(self.trees(), [digest[7:]])
        self.assertEqual(self.tmp_entries(), [])

    # -- where the store is, and whose
    def test_config_and_state_dir_place_the_store(self):
        state = os.path.join(self.top, "state-cfg")
        cfg = os.path.join(self.top, "sbxd.json")
        with open(cfg, "w") as f:
            json.dump({"state_dir": state}, f)
        r = self.image("--config", cfg, "import", "busy:1", "--rootfs", self.tree, store=False)
        self.assertEqual(r.returncode, 0, r)
        self.assertTrue(os.path.isfile(os.path.join(state, "images", "refs.json")))
        state2 = os.path.join(self.top, "state-flag")
        r = self.image("--config", cfg, "--state-dir", state2, "list", store=False)
        self.assertEqual(r.returncode, 0, r)
        r = self.image("--state-dir", state2, "import", "busy:1", "--rootfs", self.tree,
                       store=False)
        self.assertEqual(r.returncode, 0, r)
        self.assertTrue(os.path.isdir(os.path.join(state2, "images", "sha256")))
        r = self.image("--state-dir", "relative/dir", "list", store=False)
        self.assertEqual(r.returncode, 2, r)

    def test_a_store_others_may_write_is_refused(self):
        self.import_ok("busy:1", "--rootfs", self.tree)
        os.chmod(self.store, 0o770)
        try:
            for args in (["list"], ["import", "busy:2", "--rootfs", self.tree]):
                r = self.image(*args)
                self.assertEqual(r.returncode, 1, r)
                self.assertIn("lets group or others write it", r.stderr)
        finally:
            os.chmod(self.store, 0o700)
        self.assertEqual(list(self.refs()), ["busy:1"])

    # -- usage
    def test_usage(self):
        for args in ([], ["frob"], ["import", "x:1"], ["import", "x:1", "--rootfs", "a",
                                                       "--rootfs-tar", "b"],
                     ["list", "extra"], ["inspect"], ["rm", "a:1", "b:1"], ["list", "--rootfs",
                                                                             "x"],
                     ["import", "x:1", "--rootfs", self.tree, "--max-entries", "0"],
                     ["import", "x:1", "--rootfs", self.tree, "--ref", "latest"],
                     ["inspect", "--json", "a:1"], ["--bogus", "list"]):
            r = self.image(*args)
            self.assertEqual(r.returncode, 2, (args, r))
            self.assertIn("usage: sbxd image", r.stderr, args)
            self.assertEqual(r.stdout, "")
        self.assertFalse(os.path.exists(self.store), "usage errors touch nothing")
        r = self.ok("--help")
        self.assertIn("import NAME:TAG SOURCE", r.stdout)
        for cmd, word in (("import", "--rootfs-tar"), ("list", "--json"), ("inspect", "JSON"),
                          ("rm", "live run")):
            r = self.ok(cmd, "--help")
            self.assertIn("usage: sbxd image [OPTIONS] " + cmd, r.stdout)
            self.assertIn(word, r.stdout)
        r = subprocess.run([SBXD, "--help"], capture_output=True, text=True, timeout=30)
        self.assertIn("sbxd image", r.stdout)
        r = self.image("import", "x:1@sha256:" + "0" * 64, "--rootfs", self.tree)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("import names NAME:TAG", r.stderr)
        r = self.image("import", "x:1", "--rootfs", os.path.join(self.top, "missing"))
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("error:", r.stderr)


if __name__ == "__main__":
    unittest.main()
