# SPDX-License-Identifier: Apache-2.0
"""The reconciliation example in the pinned recon-runtime image: the image is
built by packaging/images/recon-runtime/build.sh (mmdebstrap, unprivileged as
this user) and imported into a real sbxd's store; the example then runs through
sbxctl with the design's policy (the image pinned, /data ro, /out rw, env {},
egress deny, the design's limits), once in that image and once in `host`, and
the two reports must be equal, byte for byte.

The rootfs tar is cached in the build directory, keyed by the sha256 of
packages.txt and build.sh (build.sh --cache-dir): a clean clone builds it once
(~35 s here), later runs import the cached tar."""
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import unittest

from sbxdfix import CLI, SBXD, Server

SOURCE_DIR = os.environ.get("SBX_SOURCE_DIR", "")
EXAMPLE = os.path.join(SOURCE_DIR, "packaging", "examples", "reconcile")
BUILD_SH = os.path.join(SOURCE_DIR, "packaging", "images", "recon-runtime", "build.sh")
PIN = re.compile(r"^recon-runtime:test@sha256:([0-9a-f]{64})$")
COMMAND = ["/usr/bin/python3", "/data/reconcile.py"]


def design_policy(image):
    """DESIGN.md's policy, with this image."""
    return {
        "image": image,
        "mounts": [{"path": "/data", "mode": "ro"}, {"path": "/out", "mode": "rw"}],
        "env": {},
        "egress": {"policy": "deny", "allow": []},
        "limits": {"cpu": 2, "memory_mb": 4096, "script_seconds": 120, "run_seconds": 3600},
        "lifetime": "per_run",
    }


class ExampleImage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for what, path in (("SBX_CLI", CLI), ("SBX_SBXD", SBXD)):
            if not path or not os.path.exists(path):
                raise RuntimeError("%s is not set to the built binary (run through ctest)" % what)
        build = os.path.dirname(os.path.dirname(os.path.realpath(CLI)))
        cls.tmp = tempfile.mkdtemp(prefix="sbx-test-example-image-", dir="/tmp")
        # mmdebstrap --mode=unshare enters its temporary root (under TMPDIR) as
        # a subordinate id: the directory must let others search it.
        os.chmod(cls.tmp, 0o711)
        cls.srv = Server()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        env["TMPDIR"] = cls.tmp
        cls.build = subprocess.run(
            ["bash", BUILD_SH, "--config", cls.srv.config, "--sbxd", SBXD, "--tag", "test",
             "--cache-dir", os.path.join(build, "recon-runtime-cache")],
            capture_output=True, text=True, timeout=400, env=env)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.cleanup()
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def pin(self):
        self.assertEqual(self.build.returncode, 0, "build.sh failed:\n" + self.build.stderr)
        pin = self.build.stdout.strip()
        self.assertRegex(pin, PIN, "build.sh's stdout is the pin alone")
        return pin

    def run_in(self, image, name, argv, json_out=False):
        pol = os.path.join(self.tmp, name + ".policy.json")
        with open(pol, "w") as f:
            json.dump(design_policy(image), f)
        out = os.path.join(self.tmp, name + ".out")
        args = ["run", "--policy", pol, "--data", EXAMPLE, "--out", out]
        if json_out:
            args.append("--json")
        r = self.srv.cli(*args, "--", *argv, timeout=180)
        return r, out

    def test_build_prints_only_the_pin(self):
        pin = self.pin()
        self.assertEqual(self.build.stdout, pin + "\n")
        # the store has it, under that name and digest
        r = subprocess.run([SBXD, "image", "--config", self.srv.config, "inspect", pin],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(PIN.match(pin).group(1), r.stdout)

    def test_what_a_reviewer_checks(self):
        """REVIEW.md's checks on what build.sh left: dpkg -l beside the tar
        names python3 and no network tool, and no file in the tar is set-id."""
        self.pin()
        m = re.search(r"their dpkg -l is in (\S+)\n", self.build.stderr)
        self.assertTrue(m, self.build.stderr)
        with open(m.group(1)) as f:
            installed = [line.split()[1].split(":")[0] for line in f if line.startswith("ii ")]
        self.assertIn("python3", installed)
        self.assertIn("libpython3.11-stdlib", installed)
        net = re.compile(r"^(curl|wget|iproute2|iputils-.*|netcat.*|ncat|openssh-.*|dnsutils|"
                         r"bind9.*|socat|apt)$")
        self.assertEqual([p for p in installed if net.match(p)], [])
        with tarfile.open(m.group(1)[:-len(".dpkg-l")]) as t:
            setid = [e.name for e in t if e.isfile() and e.mode & 0o6000]
        self.assertEqual(setid, [])

    def test_report_in_the_image_equals_host(self):
        pin = self.pin()
        digest = PIN.match(pin).group(1)
        r_host, out_host = self.run_in("host", "host", COMMAND)
        self.assertEqual(r_host.returncode, 0, r_host)
        r_img, out_img = self.run_in(pin, "image", COMMAND, json_out=True)
        self.assertEqual(r_img.returncode, 0, r_img)
        # the run resolved to the pinned image, and said so
        self.assertIn(digest, r_img.stdout)
        for name in ("report.csv", "summary.json"):
            with open(os.path.join(out_host, name), "rb") as f:
                want = f.read()
            with open(os.path.join(out_img, name), "rb") as f:
                got = f.read()
            self.assertGreater(len(want), 100, name)
            self.assertEqual(got, want, "%s differs between host and %s" % (name, pin))
        self.assertIn("reconciled 25 ledger entries", r_host.stdout)

    def test_the_root_is_the_image(self):
        """Not the host's /usr by another way: the image has no cmake (the
        host that built this test has) and carries its own dpkg database
        with python3 in it, which host mode does not show."""
        pin = self.pin()
        probe = ["/bin/sh", "-c",
                 "test ! -e /usr/bin/cmake && "
                 "grep -qx 'Package: python3' /var/lib/dpkg/status && "
                 "test ! -u /usr/bin/su && echo image-root"]
        r, _ = self.run_in(pin, "probe-image", probe)
        self.assertEqual(r.returncode, 0, r)
        self.assertIn("image-root", r.stdout)
        r, _ = self.run_in("host", "probe-host", probe)
        self.assertNotEqual(r.returncode, 0, "the probe cannot tell host from the image")


if __name__ == "__main__":
    unittest.main()
