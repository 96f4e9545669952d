# SPDX-License-Identifier: Apache-2.0
"""Shared plumbing for the integration tests: run the real sbx-helper with a
policy, collect its exit status, output and --result JSON."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

HELPER = os.environ.get("SBX_HELPER", "")
PROBE = os.environ.get("SBX_PROBE", "")
SOURCE_DIR = os.environ.get("SBX_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PYTHON = "/usr/bin/python3"

BASE_POLICY = {
    "image": "host",
    "mounts": [{"path": "/data", "mode": "ro"}, {"path": "/out", "mode": "rw"}],
    "env": {},
    "egress": {"policy": "deny", "allow": []},
    "limits": {"cpu": 1, "memory_mb": 256, "script_seconds": 30, "run_seconds": 60,
               "pids": 64, "out_mb": 8, "tmp_mb": 16},
    "lifetime": "per_run",
}


def subordinate_uids(user_uid=None):
    """The host uids /etc/subuid gives this user (or user_uid): the ones its
    sandboxes run as, one per live run (common/host_ids.h)."""
    import pwd
    uid = os.getuid() if user_uid is None else user_uid
    names = {str(uid)}
    try:
        names.add(pwd.getpwuid(uid).pw_name)
    except KeyError:
        pass
    ranges = []
    try:
        with open("/etc/subuid") as f:
            for line in f:
                parts = line.strip().split(":")
                if len(parts) == 3 and parts[0] in names:
                    ranges.append(range(int(parts[1]), int(parts[1]) + int(parts[2])))
    except OSError:
        pass
    return ranges


def is_ours(uid):
    """This uid, or one its sandboxes run as."""
    return uid == os.getuid() or any(uid in r for r in subordinate_uids())


def procs_with(marker):
    """Processes of this uid or of its sandboxes (subordinate uids) whose
    command line contains `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if not is_ours(os.stat("/proc/" + pid).st_uid):
                continue
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            found.append((int(pid), cmd))
    return found


def read_text(path):
    with open(path) as f:
        return f.read()


def needed(path):
    """The sonames in an ELF file's DT_NEEDED (readelf -d)."""
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", out)


def ldconfig_path(soname):
    """Where ld.so.cache has the x86-64 soname, or None."""
    out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    m = re.search(re.escape(soname) + r" \(libc6,x86-64\) => (\S+)", out)
    return m.group(1) if m else None


# A shared library of a test's making: its constructor leaves PLANTED_MARK
# in the current directory of whatever process loads it.
PLANTED_MARK = "LOADED-BY-HELPER"
PLANTED_SOURCE = r"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void)
{
	int fd = open("LOADED-BY-HELPER", O_WRONLY | O_CREAT, 0644);
	if (fd >= 0)
		close(fd);
}
"""


def policy(**overrides):
    """BASE_POLICY with top-level keys replaced and limits merged."""
    p = json.loads(json.dumps(BASE_POLICY))
    for k, v in overrides.items():
        if k == "limits":
            p["limits"].update(v)
        else:
            p[k] = v
    return p


class Run:
    def __init__(self, rc, stdout, stderr, result):
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.result = result

    def __repr__(self):
        return f"Run(rc={self.rc}, stdout={self.stdout[-2000:]!r}, stderr={self.stderr[-2000:]!r}, result={self.result})"


class SandboxTest(unittest.TestCase):
    """A temp dir per test, plus run() around sbx-helper."""

    def setUp(self):
        if not HELPER or not os.path.exists(HELPER):
            self.fail("SBX_HELPER is not set to the built sbx-helper (run through ctest)")
        self.tmp = tempfile.mkdtemp(prefix="sbx-test-")
        self.data = os.path.join(self.tmp, "data")
        os.mkdir(self.data)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write_policy(self, pol, name="policy.json"):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            if isinstance(pol, str):
                f.write(pol)
            else:
                json.dump(pol, f)
        return path

    def run_sandbox(self, argv, pol=None, data=True, out=None, extra=(), env=None,
                    stdin=subprocess.DEVNULL, timeout=120, capture=True):
        pol_path = self.write_policy(pol if pol is not None else policy())
        result_path = os.path.join(self.tmp, "result.json")
        if os.path.exists(result_path):
            os.unlink(result_path)
        cmd = [HELPER, "run", "--policy", pol_path, "--result", result_path]
        if data:
            cmd += ["--data", self.data]
        if out:
            cmd += ["--out", out]
        cmd += list(extra) + ["--"] + list(argv)
        p = subprocess.run(cmd, stdin=stdin, capture_output=capture, timeout=timeout,
                           env=env if env is not None else os.environ)
        result = None
        if os.path.exists(result_path):
            with open(result_path) as f:
                result = json.load(f)
        dec = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return Run(p.returncode, dec(p.stdout), dec(p.stderr), result)

    def helper_loads_at_exec(self):
        """What the dynamic linker loads for sbx-helper at its exec, its
        libraries' own dependencies included (LD_TRACE_LOADED_OBJECTS)."""
        env = dict(os.environ, LD_TRACE_LOADED_OBJECTS="1")
        p = subprocess.run([HELPER, "--version"], env=env, capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("libc.so.6", p.stdout)  # the trace was made
        return p.stdout

    def plant_library(self, path):
        """PLANTED_SOURCE built as the shared library path; the test is
        skipped without a C compiler."""
        cc = shutil.which("cc") or shutil.which("gcc")
        if not cc:
            self.skipTest("no C compiler to make the planted library")
        src = path + ".planted.c"
        with open(src, "w") as f:
            f.write(PLANTED_SOURCE)
        subprocess.run([cc, "-shared", "-fPIC", "-o", path, src], check=True, timeout=60)

    def sh(self, script, **kw):
        return self.run_sandbox(["/bin/sh", "-c", script], **kw)

    def py(self, code, **kw):
        return self.run_sandbox([PYTHON, "-c", code], **kw)

    def probe(self, attack, **kw):
        """Copies sbx-probe into /data and runs one attack with it."""
        if not PROBE or not os.path.exists(PROBE):
            self.fail("SBX_PROBE is not set to the built sbx-probe")
        dst = os.path.join(self.data, "sbx-probe")
        if not os.path.exists(dst):
            shutil.copy2(PROBE, dst)
        return self.run_sandbox(["/data/sbx-probe", attack], **kw)


def run_tests():
    unittest.main(verbosity=2)
