# SPDX-License-Identifier: Apache-2.0
"""Review findings on `sbxd image import` (the real binary, $SBX_SBXD), each
a case that failed before its fix: layer blobs were bounded one at a time
(an OCI descriptor not at all), so one image could make the importer hash
far more than its limits allow -- a sparse blob of any size, or the same
bomb repeated as each of 128 layers."""
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import tarfile
import tempfile
import unittest

SBXD = os.environ.get("SBX_SBXD", "")
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
PIN = re.compile(r"^[a-z0-9._/-]+:[A-Za-z0-9_.-]+@sha256:[0-9a-f]{64}\n$")
MIB = 1024 * 1024
# Limits that leave n layers max_bytes + 4 KiB + 1 MiB + n * 16 KiB
# (img_layers_budget): 2 MiB and 4 KiB + n * 16 KiB.
SMALL = ["--max-bytes", str(MIB), "--max-entries", "1"]


def sha_hex(b):
    return hashlib.sha256(b).hexdigest()


def zeros_digest(n):
    h = hashlib.sha256()
    block = bytes(MIB)
    for _ in range(n // MIB):
        h.update(block)
    return h.hexdigest()


def empty_tar():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT):
        pass
    return buf.getvalue()


class ImageReviewTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not SBXD or not os.path.exists(SBXD):
            raise RuntimeError("SBX_SBXD is not set to the built sbxd (run through ctest)")

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sbx-test-image-review-")
        self.store = os.path.join(self.dir, "store")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def image(self, *args):
        return subprocess.run([SBXD, "image", "--images-dir", self.store, *args],
                              capture_output=True, text=True, timeout=120)

    def oci_layout(self, layers):
        """layers: (hex digest, size, writer(path)); one blob per distinct digest."""
        lay = os.path.join(self.dir, "layout")
        blobs = os.path.join(lay, "blobs", "sha256")
        os.makedirs(blobs)

        def put(b):
            with open(os.path.join(blobs, sha_hex(b)), "wb") as f:
                f.write(b)
            return {"digest": "sha256:" + sha_hex(b), "size": len(b)}

        for hexd, _, write in layers:
            if not os.path.exists(os.path.join(blobs, hexd)):
                write(os.path.join(blobs, hexd))
        config = put(json.dumps({"os": "linux", "architecture": ARCH,
                                 "rootfs": {"type": "layers", "diff_ids": []}}).encode())
        config["mediaType"] = "application/vnd.oci.image.config.v1+json"
        manifest = put(json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config,
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": "sha256:" + h, "size": n} for h, n, _ in layers]}).encode())
        manifest["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
        with open(os.path.join(lay, "index.json"), "w") as f:
            json.dump({"schemaVersion": 2, "manifests": [manifest]}, f)
        with open(os.path.join(lay, "oci-layout"), "w") as f:
            f.write('{"imageLayoutVersion":"1.0.0"}')
        return lay

    def test_oci_sparse_blob_refused_before_hashing(self):
        """A descriptor of 64 GiB, its blob a sparse file: refused from the
        descriptor, not hashed (the old reader read all 64 GiB first)."""
        size = 64 << 30

        def sparse(path):
            with open(path, "wb") as f:
                f.truncate(size)

        lay = self.oci_layout([("0" * 64, size, sparse)])
        r = self.image("import", "sparse:1", "--oci-layout", lay, *SMALL)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("the limits leave for the image's layers", r.stderr)

    def test_oci_layers_charged_together(self):
        """Eight layers of one 2 MiB blob (each within the old per-layer
        bound): 16 MiB of layers, past the 2.1 MiB the limits leave."""
        blob = empty_tar() + bytes(2 * MIB - len(empty_tar()))
        hexd = sha_hex(blob)

        def write(path):
            with open(path, "wb") as f:
                f.write(blob)

        lay = self.oci_layout([(hexd, len(blob), write)] * 8)
        r = self.image("import", "many:1", "--oci-layout", lay, *SMALL)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("layer 2/8", r.stderr)
        self.assertIn("the limits leave for the image's layers", r.stderr)
        # One such layer is within the limits and imports.
        shutil.rmtree(lay)
        lay = self.oci_layout([(hexd, len(blob), write)])
        r = self.image("import", "one:1", "--oci-layout", lay, *SMALL)
        self.assertEqual(r.returncode, 0, r)
        self.assertRegex(r.stdout, PIN)

    def test_docker_layers_charged_together(self):
        """A docker-archive naming one 2 MiB layer file eight times: each
        was hashed in full against a bound of its own (2 MiB + 4 KiB
        here, 20 GiB by default), so 128 repeats cost 128 times it."""
        layer = empty_tar() + bytes(2 * MIB - len(empty_tar()))
        diff_id = "sha256:" + sha_hex(layer)
        config = json.dumps({"os": "linux", "architecture": ARCH,
                             "rootfs": {"type": "layers", "diff_ids": [diff_id] * 8}}).encode()
        chex = sha_hex(config)
        manifest = json.dumps([{"Config": chex + ".json", "RepoTags": ["rep:1"],
                                "Layers": ["l/layer.tar"] * 8}]).encode()
        archive = os.path.join(self.dir, "docker.tar")
        with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as t:
            for name, data in (("manifest.json", manifest), (chex + ".json", config),
                               ("l/layer.tar", layer)):
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                ti.mode = 0o644
                t.addfile(ti, io.BytesIO(data))
        # The archive's own four entries and 2 MiB file fit; the layers
        # get 3 MiB + 16 KiB + 1 MiB + 128 KiB: two of them.
        r = self.image("import", "rep:1", "--docker-archive", archive,
                       "--max-bytes", str(3 * MIB), "--max-entries", "4")
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("layer 3/8", r.stderr)
        self.assertIn("the limits leave for the image's layers", r.stderr)

    def test_inspect_escapes_the_image_config(self):
        """An image's Env and User with a C1 CSI (U+009B) and a bidi
        override (U+202E): inspect prints them as \\uXXXX, never as the
        raw bytes a terminal acts on (jansson wrote UTF-8 as it was)."""
        layer = empty_tar()
        hexd = sha_hex(layer)

        def write(path):
            with open(path, "wb") as f:
                f.write(layer)

        lay = self.oci_layout([(hexd, len(layer), write)])
        # the config written by oci_layout has no config section: add one
        with open(os.path.join(lay, "index.json")) as f:
            index = json.load(f)
        blobs = os.path.join(lay, "blobs", "sha256")
        mhex = index["manifests"][0]["digest"][7:]
        with open(os.path.join(blobs, mhex)) as f:
            manifest = json.load(f)
        config = json.dumps({"os": "linux", "architecture": ARCH,
                             "config": {"Env": ["PS1=\u009b31m\u202eevil"],
                                        "User": "\u202eroot"},
                             "rootfs": {"type": "layers", "diff_ids": []}}).encode()
        with open(os.path.join(blobs, sha_hex(config)), "wb") as f:
            f.write(config)
        manifest["config"].update(digest="sha256:" + sha_hex(config), size=len(config))
        mb = json.dumps(manifest).encode()
        with open(os.path.join(blobs, sha_hex(mb)), "wb") as f:
            f.write(mb)
        index["manifests"][0].update(digest="sha256:" + sha_hex(mb), size=len(mb))
        with open(os.path.join(lay, "index.json"), "w") as f:
            json.dump(index, f)
        r = self.image("import", "esc:1", "--oci-layout", lay)
        self.assertEqual(r.returncode, 0, r)
        r = subprocess.run([SBXD, "image", "--images-dir", self.store, "inspect", "esc:1"],
                           capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r)
        self.assertTrue(all(b < 0x80 for b in r.stdout), "inspect prints ASCII only")
        doc = json.loads(r.stdout)
        self.assertEqual(doc["config"]["User"], "\u202eroot", "the same text, escaped")


if __name__ == "__main__":
    unittest.main()
