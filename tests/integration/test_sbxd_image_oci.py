# SPDX-License-Identifier: Apache-2.0
"""`sbxd image import` of OCI and docker sources, against the real tools:
a busybox-static image with two layers (tar+gzip, then tar+zstd holding a
whiteout and an opaque directory) written here as an OCI layout; its
digest must be what `skopeo inspect` says, a second import the same, and
the unpacked tree what `umoci unpack --rootless` makes of the same layout
(files, modes, link targets, content; not owners or times). skopeo's
docker-archive and oci-archive copies and an image umoci made itself
import with skopeo's digests. Broken layouts (a corrupted blob, a size
mismatch, a wrong manifest digest in the index, an unknown media type)
are refused: exit 1, one error line, nothing in the store."""
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import stat
import subprocess
import tarfile
import tempfile
import unittest

# `sbxd image` needs no running sbxd (it works on the store directly), so
# no sbxdfix.Server: only the binary ctest names, as sbxdfix reads it.
SBXD = os.environ.get("SBX_SBXD", "")

BUSYBOX = "/usr/bin/busybox"
ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386",
        "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}.get(
            platform.machine(), platform.machine())
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"
GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def tar_of(entries):
    """A tar (bytes) of (name, kind, mode, data-or-target) in order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, mode, data in entries:
            ti = tarfile.TarInfo(name)
            ti.mode = mode
            ti.mtime = 1700000000
            if kind == "dir":
                ti.type = tarfile.DIRTYPE
                t.addfile(ti)
            elif kind in ("sym", "hard"):
                ti.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                ti.linkname = data
                t.addfile(ti)
            else:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def zstd(b):
    return subprocess.run(["zstd", "-q", "-c"], input=b, capture_output=True,
                          check=True).stdout


class Layout:
    """An OCI layout written blob by blob."""

    def __init__(self, path):
        self.path = path
        os.makedirs(os.path.join(path, "blobs", "sha256"))
        with open(os.path.join(path, "oci-layout"), "w") as f:
            f.write('{"imageLayoutVersion":"1.0.0"}')

    def blob(self, b):
        d = sha(b)
        with open(os.path.join(self.path, "blobs", "sha256", d[7:]), "wb") as f:
            f.write(b)
        return d

    def desc(self, media_type, b):
        return {"mediaType": media_type, "digest": self.blob(b), "size": len(b)}

    def index(self, manifests):
        with open(os.path.join(self.path, "index.json"), "w") as f:
            json.dump({"schemaVersion": 2, "manifests": manifests}, f)

    def blob_path(self, digest):
        return os.path.join(self.path, "blobs", "sha256", digest[7:])


def busybox_layers():
    with open(BUSYBOX, "rb") as f:
        bb = f.read()
    lower = [
        ("bin", "dir", 0o755, None),
        ("bin/busybox", "file", 0o755, bb),
        ("bin/sh", "sym", 0o777, "busybox"),
        ("bin/ls", "sym", 0o777, "/bin/busybox"),
        ("bin/cat", "hard", 0o755, "bin/busybox"),
        ("etc", "dir", 0o755, None),
        ("etc/motd", "file", 0o644, b"lower motd\n"),
        ("etc/gone", "file", 0o644, b"whited out by the upper layer\n"),
        ("opt", "dir", 0o755, None),
        ("opt/keep", "dir", 0o755, None),
        ("opt/keep/a", "file", 0o644, b"a, hidden by the opaque directory\n"),
        ("opt/keep/sub", "dir", 0o700, None),
        ("opt/keep/sub/b", "file", 0o600, b"b\n"),
        ("tmp", "dir", 0o1777, None),
    ]
    upper = [
        ("etc", "dir", 0o755, None),
        ("etc/.wh.gone", "file", 0o644, b""),
        ("etc/motd", "file", 0o640, b"upper motd\n"),
        ("opt", "dir", 0o755, None),
        ("opt/keep", "dir", 0o750, None),
        ("opt/keep/.wh..wh..opq", "file", 0o644, b""),
        ("opt/keep/c", "file", 0o600, b"c, the only child left\n"),
        ("usr", "dir", 0o755, None),
        ("usr/share", "dir", 0o555, None),
        ("usr/share/readme", "file", 0o444, b"read only\n"),
    ]
    return tar_of(lower), tar_of(upper)


def write_image(layout, layers, ref="v1", arch=ARCH, layer_types=None):
    """Config, manifest and index.json for layers [(media_type, blob, tar)]."""
    config = json.dumps({
        "created": "2026-01-02T03:04:05Z", "architecture": arch, "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [sha(t) for _, _, t in layers]},
    }, separators=(",", ":")).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": layout.desc(OCI_CONFIG, config),
        "layers": [layout.desc(mt, b) for mt, b, _ in layers],
    }, separators=(",", ":")).encode()
    m = layout.desc(OCI_MANIFEST, manifest)
    m["annotations"] = {REF_NAME: ref}
    layout.index([m])
    return m, json.loads(manifest)


def tree(root):
    """{path: (type, permission bits, target or content sha256)}, owners and
    times left out."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            perm = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", 0, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", perm, None)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("f", perm, hashlib.sha256(f.read()).hexdigest())
    return out


def make_readable(root):
    """umoci and the store keep a 0555 or 0700 directory as the image says:
    open them up so the temporary directory can be removed."""
    for d, dirs, _ in os.walk(root):
        for name in dirs:
            p = os.path.join(d, name)
            if not os.path.islink(p):
                os.chmod(p, 0o755)


class ImageOciTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not SBXD or not os.path.exists(SBXD):
            raise RuntimeError("SBX_SBXD is not set to the built sbxd (run through ctest)")
        cls.dir = tempfile.mkdtemp(prefix="sbx-test-image-oci-")
        cls.lower, cls.upper = busybox_layers()
        cls.layout = Layout(os.path.join(cls.dir, "layout"))
        cls.layers = [
            ("application/vnd.oci.image.layer.v1.tar+gzip",
             gzip.compress(cls.lower, mtime=0), cls.lower),
            ("application/vnd.oci.image.layer.v1.tar+zstd", zstd(cls.upper), cls.upper),
        ]
        cls.mdesc, cls.manifest = write_image(cls.layout, cls.layers)

    @classmethod
    def tearDownClass(cls):
        make_readable(cls.dir)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        self.store = tempfile.mkdtemp(prefix="sbx-test-store-", dir=self.dir)
        os.chmod(self.store, 0o700)

    def sbxd_image(self, *args):
        return subprocess.run([SBXD, "image", "--images-dir", self.store, *args],
                              capture_output=True, text=True, timeout=120)

    def imported(self, name, *source):
        r = self.sbxd_image("import", name, *source)
        self.assertEqual(r.returncode, 0, r)
        pinned = r.stdout.strip()
        self.assertEqual(r.stdout, pinned + "\n", "stdout is the pinned reference alone")
        self.assertTrue(pinned.startswith(name + "@sha256:"), pinned)
        return pinned.split("@", 1)[1]

    def store_state(self):
        trees = os.path.join(self.store, "sha256")
        refs = os.path.join(self.store, "refs.json")
        state = sorted(os.listdir(trees)) if os.path.isdir(trees) else []
        if os.path.exists(refs):
            with open(refs) as f:
                state.append(f.read())
        return state

    def refused(self, source, needle):
        before = self.store_state()
        r = self.sbxd_image("import", "bad:1", *source)
        self.assertEqual(r.returncode, 1, r)
        self.assertEqual(r.stdout, "", r)
        self.assertIn("sbxd image: error: ", r.stderr)
        self.assertIn(needle, r.stderr)
        self.assertEqual(self.store_state(), before, "nothing tagged, nothing committed")
        return r

    def skopeo_digest(self, transport):
        r = subprocess.run(["skopeo", "inspect", transport], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r)
        return json.loads(r.stdout)["Digest"]

    def rootfs(self, digest):
        return os.path.join(self.store, "sha256", digest[7:], "rootfs")

    def umoci_tree(self, layout, ref):
        bundle = tempfile.mkdtemp(prefix="sbx-test-bundle-", dir=self.dir)
        os.rmdir(bundle)
        subprocess.run(["umoci", "unpack", "--rootless", "--image", layout + ":" + ref, bundle],
                       check=True, capture_output=True, timeout=120)
        return tree(os.path.join(bundle, "rootfs"))

    # -- the image written here
    def test_layout_digest_is_skopeos_and_stable(self):
        digest = self.imported("bb:1", "--oci-layout", self.layout.path)
        self.assertEqual(digest, self.mdesc["digest"])
        self.assertEqual(digest, self.skopeo_digest("oci:%s:v1" % self.layout.path))
        again = self.imported("bb:1", "--oci-layout", self.layout.path, "--ref", "v1")
        self.assertEqual(again, digest, "imported twice: the same digest")
        self.assertEqual(os.listdir(os.path.join(self.store, "sha256")), [digest[7:]])

    def test_tree_is_umocis(self):
        digest = self.imported("bb:1", "--oci-layout", self.layout.path)
        ours = tree(self.rootfs(digest))
        # umoci 0.4.7 reads no zstd layer: its tree is made from the gzip
        # copy of the same tars.
        theirs = self.umoci_tree(self.gzip_layout(), "v1")
        self.assertEqual(ours, theirs)
        # What the layers meant, said once more by hand.
        self.assertNotIn("etc/gone", ours)
        self.assertEqual(sorted(k for k in ours if k.startswith("opt/keep/")), ["opt/keep/c"])
        self.assertEqual(ours["opt/keep"][:2], ("d", 0o750))
        self.assertEqual(ours["bin/sh"], ("l", 0, "busybox"))
        self.assertEqual(ours["bin/cat"], ours["bin/busybox"])
        self.assertEqual(ours["etc/motd"][:2], ("f", 0o640))

    def gzip_layout(self):
        """The same image with both layers gzip'ed: skopeo 1.9 cannot turn
        a zstd layer into a docker-archive one."""
        path = os.path.join(self.dir, "layout-gz")
        if not os.path.exists(path):
            layout = Layout(path)
            write_image(layout, [(GZIP, gzip.compress(t, mtime=0), t) for t in
                                 (self.lower, self.upper)])
        return path

    def test_docker_archive_digest_is_skopeos(self):
        archive = os.path.join(self.dir, "docker.tar")
        subprocess.run(["skopeo", "copy", "oci:%s:v1" % self.gzip_layout(),
                        "docker-archive:%s:bb:1" % archive],
                       check=True, capture_output=True, timeout=120)
        digest = self.imported("bbd:1", "--docker-archive", archive)
        self.assertEqual(digest, self.skopeo_digest("docker-archive:" + archive))
        self.assertEqual(self.imported("bbd:1", "--docker-archive", archive, "--ref", "bb:1"),
                         digest)
        oci = self.imported("bb:1", "--oci-layout", self.layout.path)
        self.assertNotEqual(digest, oci)
        self.assertEqual(tree(self.rootfs(digest)), tree(self.rootfs(oci)))
        self.refused(["--docker-archive", archive, "--ref", "bb:2"], "is no RepoTags entry")

    def test_docker_archive_holding_a_layout(self):
        """docker 25 and later save an OCI layout with manifest.json beside
        it: the layout is read, and the digest is its manifest's (what
        `docker pull name@` shows), not one generated from manifest.json."""
        src = os.path.join(self.dir, "docker25")
        shutil.copytree(self.gzip_layout(), src)
        with open(os.path.join(src, "index.json")) as f:
            index = json.load(f)
        mdesc = index["manifests"][0]
        # What docker 25 writes: the full name for containerd, the tag alone
        # as the OCI ref.
        mdesc["annotations"] = {"io.containerd.image.name": "docker.io/library/bb:1",
                                REF_NAME: "1"}
        with open(os.path.join(src, "index.json"), "w") as f:
            json.dump(index, f)
        with open(os.path.join(src, "blobs", "sha256", mdesc["digest"][7:])) as f:
            manifest = json.load(f)
        with open(os.path.join(src, "manifest.json"), "w") as f:
            json.dump([{"Config": "blobs/sha256/" + manifest["config"]["digest"][7:],
                        "RepoTags": ["bb:1"],
                        "Layers": ["blobs/sha256/" + l["digest"][7:]
                                   for l in manifest["layers"]]}], f)
        archive = os.path.join(self.dir, "docker25.tar")
        with tarfile.open(archive, "w") as t:
            for name in sorted(os.listdir(src)):
                t.add(os.path.join(src, name), name)
        self.assertEqual(self.imported("bb25:1", "--docker-archive", archive), mdesc["digest"])
        for ref in ("bb:1", "docker.io/library/bb:1", "1"):
            self.assertEqual(self.imported("bb25:1", "--docker-archive", archive, "--ref", ref),
                             mdesc["digest"])
        self.refused(["--docker-archive", archive, "--ref", "bb:2"], "no manifest has ref bb:2")

    def hand_archive(self, name, corrupt=False):
        """A docker-archive as skopeo reads but does not write: a gzip'ed
        layer (its manifest entry has the uncompressed size) and a layer
        repeated as a symlink to the first copy (as docker save writes
        it). corrupt: the gzip'ed layer is not its diff_id."""
        src = os.path.join(self.dir, name)
        os.makedirs(src)
        l0 = tar_of([("a", "file", 0o644, b"a\n")])
        l1 = tar_of([("b", "file", 0o600, b"b\n" * 1000), ("a", "file", 0o640, b"a2\n")])
        with open(os.path.join(src, "l0.tar"), "wb") as f:
            f.write(l0)
        with open(os.path.join(src, "l1.tar.gz"), "wb") as f:
            f.write(gzip.compress(l1 + (b"\0" * 512 if corrupt else b""), mtime=0))
        os.symlink("l0.tar", os.path.join(src, "l2.tar"))
        config = json.dumps({"architecture": ARCH, "os": "linux", "rootfs": {
            "type": "layers", "diff_ids": [sha(l0), sha(l1), sha(l0)]}}).encode()
        with open(os.path.join(src, sha(config)[7:] + ".json"), "wb") as f:
            f.write(config)
        with open(os.path.join(src, "manifest.json"), "w") as f:
            json.dump([{"Config": sha(config)[7:] + ".json", "RepoTags": ["hand:1"],
                        "Layers": ["l0.tar", "l1.tar.gz", "l2.tar"]}], f)
        archive = src + ".tar"
        with tarfile.open(archive, "w") as t:
            for entry in sorted(os.listdir(src)):
                t.add(os.path.join(src, entry), entry)
        return archive, sha(l1)

    def test_docker_archive_by_hand_is_skopeos(self):
        archive, _ = self.hand_archive("docker-hand")
        digest = self.imported("hand:1", "--docker-archive", archive)
        self.assertEqual(digest, self.skopeo_digest("docker-archive:" + archive))
        ours = tree(self.rootfs(digest))
        self.assertEqual(ours["a"], ("f", 0o644, hashlib.sha256(b"a\n").hexdigest()))
        self.assertEqual(ours["b"][:2], ("f", 0o600))
        bad, diff_id = self.hand_archive("docker-corrupt", corrupt=True)
        self.refused(["--docker-archive", bad], "the config's diff_id is " + diff_id)

    def test_oci_archive_digest_is_skopeos(self):
        archive = os.path.join(self.dir, "oci.tar")
        subprocess.run(["skopeo", "copy", "oci:%s:v1" % self.layout.path,
                        "oci-archive:%s:v1" % archive],
                       check=True, capture_output=True, timeout=120)
        digest = self.imported("bbo:1", "--oci-archive", archive)
        self.assertEqual(digest, self.skopeo_digest("oci-archive:" + archive))
        self.assertEqual(digest, self.mdesc["digest"])

    def test_image_made_by_umoci(self):
        """umoci's own workflow: new, unpack, change, repack, change again
        (a file removed: umoci writes the whiteout), repack, config. (Not
        `umoci insert`: 0.4.7 writes its layer without the tar's padding
        and end blocks, which GNU tar refuses as well.)"""
        layout = os.path.join(self.dir, "umoci-layout")
        bundle = os.path.join(self.dir, "umoci-bundle")
        image = layout + ":u"
        umoci = ["umoci", "--log", "error"]
        for cmd in (["init", "--layout", layout], ["new", "--image", image],
                    ["unpack", "--rootless", "--image", image, bundle]):
            subprocess.run(umoci + cmd, check=True, capture_output=True, timeout=120)
        rootfs = os.path.join(bundle, "rootfs")
        os.makedirs(os.path.join(rootfs, "bin"))
        shutil.copy(BUSYBOX, os.path.join(rootfs, "bin", "busybox"))
        os.symlink("busybox", os.path.join(rootfs, "bin", "sh"))
        for name in ("hello", "goodbye"):
            with open(os.path.join(rootfs, name), "w") as f:
                f.write(name + ", by umoci\n")
        subprocess.run(umoci + ["repack", "--image", image, bundle], check=True,
                       capture_output=True, timeout=120)
        os.unlink(os.path.join(rootfs, "goodbye"))
        os.chmod(os.path.join(rootfs, "hello"), 0o600)
        for cmd in (["repack", "--image", image, bundle],
                    ["config", "--image", image, "--config.env", "A=1"]):
            subprocess.run(umoci + cmd, check=True, capture_output=True, timeout=120)
        digest = self.imported("u:1", "--oci-layout", layout, "--ref", "u")
        self.assertEqual(digest, self.skopeo_digest("oci:%s:u" % layout))
        ours = tree(self.rootfs(digest))
        self.assertEqual(ours, self.umoci_tree(layout, "u"))
        self.assertEqual(ours["hello"][:2], ("f", 0o600))
        self.assertNotIn("goodbye", ours)

    # -- refusals
    def broken(self, name):
        dst = os.path.join(self.dir, name)
        if os.path.exists(dst):
            shutil.rmtree(dst)
        shutil.copytree(self.layout.path, dst)
        return dst

    def test_corrupted_blob_refused(self):
        dst = self.broken("corrupt")
        layer = self.manifest["layers"][1]["digest"]
        p = os.path.join(dst, "blobs", "sha256", layer[7:])
        with open(p, "r+b") as f:
            f.seek(10)
            b = f.read(1)
            f.seek(10)
            f.write(bytes([b[0] ^ 0xff]))
        self.refused(["--oci-layout", dst], "hashes to")

    def test_size_mismatch_refused(self):
        dst = self.broken("resized")
        layer = self.manifest["layers"][0]["digest"]
        with open(os.path.join(dst, "blobs", "sha256", layer[7:]), "ab") as f:
            f.write(b"\0")
        self.refused(["--oci-layout", dst], "its descriptor says %d"
                     % self.manifest["layers"][0]["size"])

    def test_wrong_manifest_digest_in_index_refused(self):
        dst = self.broken("wrongindex")
        with open(os.path.join(dst, "index.json")) as f:
            index = json.load(f)
        real = index["manifests"][0]["digest"]
        # The index names the manifest by a digest one hex digit off, and a
        # blob of that name holds the manifest: its content is not what
        # the index names.
        fake = real[:-1] + ("0" if real[-1] != "0" else "1")
        shutil.copy(os.path.join(dst, "blobs", "sha256", real[7:]),
                    os.path.join(dst, "blobs", "sha256", fake[7:]))
        index["manifests"][0]["digest"] = fake
        with open(os.path.join(dst, "index.json"), "w") as f:
            json.dump(index, f)
        self.refused(["--oci-layout", dst], "manifest %s: hashes to %s" % (fake, real))
        # And one that names no blob at all.
        index["manifests"][0]["digest"] = "sha256:" + "0" * 64
        with open(os.path.join(dst, "index.json"), "w") as f:
            json.dump(index, f)
        self.refused(["--oci-layout", dst], "is missing")

    def test_unknown_media_type_refused(self):
        dst = self.broken("mediatype")
        lay = Layout.__new__(Layout)
        lay.path = dst
        layers = [("application/vnd.example.layer.v1.tar+lz4", b, t) for _, b, t in self.layers]
        write_image(lay, layers)
        self.refused(["--oci-layout", dst], "unknown layer media type "
                     "application/vnd.example.layer.v1.tar+lz4")


if __name__ == "__main__":
    unittest.main()
