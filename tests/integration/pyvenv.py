# SPDX-License-Identifier: Apache-2.0
"""Fresh venvs that get sbx_client as a user gets it: `pip install` of the
wheel or the sdist packaging/build-python.sh made, with no package index,
no system site-packages, no protoc on PATH and nothing of the checkout on
sys.path. Where no index is reachable (here), the dependencies come from a
local wheelhouse made of what Debian installed: protobuf (python3-protobuf),
setuptools (python3-setuptools-whl) and wheel (python3-wheel), which an
sdist's isolated build installs. A wheel is a zip of the files and a
.dist-info directory (PEP 427); the ones made here are exactly that."""
import base64
import csv
import glob
import hashlib
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

SOURCE = os.environ.get("SBX_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
PY = "/usr/bin/python3"
DIST = "/usr/lib/python3/dist-packages"


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, "sha256=" + digest, str(len(data))]


def make_wheel(out_dir, name, version, tag, files, top_level, entry_points=None):
    """A wheel of {arcname: local path} as NAME-VERSION-TAG.whl in out_dir;
    entry_points: the text of entry_points.txt (wheel's bdist_wheel command
    is registered there)."""
    info = "%s-%s.dist-info" % (name, version)
    meta = {
        info + "/METADATA": ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s from "
                             "Debian's installed files (tests/integration/pyvenv.py)\n"
                             % (name, version, name)).encode(),
        info + "/WHEEL": ("Wheel-Version: 1.0\nGenerator: sbx-tests\nRoot-Is-Purelib: %s\n"
                          "Tag: %s\n" % ("true" if tag.startswith("py3") else "false",
                                         tag)).encode(),
        info + "/top_level.txt": ("\n".join(top_level) + "\n").encode(),
    }
    if entry_points:
        meta[info + "/entry_points.txt"] = entry_points.encode()
    path = os.path.join(out_dir, "%s-%s-%s.whl" % (name, version, tag))
    rows = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, local in sorted(files.items()):
            with open(local, "rb") as f:
                data = f.read()
            z.writestr(arc, data)
            rows.append(_record_line(arc, data))
        for arc, data in meta.items():
            z.writestr(arc, data)
            rows.append(_record_line(arc, data))
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerows(rows + [[info + "/RECORD", "", ""]])
        z.writestr(info + "/RECORD", buf.getvalue())
    return path


def _tree(top, prefix):
    out = {}
    for d, dirs, names in os.walk(top):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for n in names:
            if n.endswith(".pyc"):
                continue
            local = os.path.join(d, n)
            out[prefix + "/" + os.path.relpath(local, top)] = local
    return out


def _version(egg_glob):
    hits = glob.glob(os.path.join(DIST, egg_glob))
    if not hits:
        raise RuntimeError("%s not found under %s" % (egg_glob, DIST))
    return os.path.basename(hits[0]).split("-")[1].replace(".egg", "").replace(".dist", "")


def wheelhouse(out_dir):
    """protobuf, setuptools and wheel as wheels in out_dir, from Debian's
    packages."""
    os.makedirs(out_dir, exist_ok=True)
    tag = "cp%d%d-cp%d%d-%s" % (sys.version_info[:2] * 2 +
                                (sysconfig.get_platform().replace("-", "_").replace(".", "_"),))
    make_wheel(out_dir, "protobuf", _version("protobuf-*"), tag,
               _tree(os.path.join(DIST, "google", "protobuf"), "google/protobuf"), ["google"])
    eps = glob.glob(os.path.join(DIST, "wheel-*", "entry_points.txt"))
    with open(eps[0]) as f:
        make_wheel(out_dir, "wheel", _version("wheel-*"), "py3-none-any",
                   _tree(os.path.join(DIST, "wheel"), "wheel"), ["wheel"], f.read())
    for w in glob.glob("/usr/share/python-wheels/setuptools-*.whl"):
        shutil.copy(w, out_dir)
    return out_dir


def build_dist(out_dir):
    """packaging/build-python.sh OUT: (sdist, wheel)."""
    r = subprocess.run(["bash", os.path.join(SOURCE, "packaging", "build-python.sh"), out_dir],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("build-python.sh failed: %s%s" % (r.stdout, r.stderr))
    sdist = glob.glob(os.path.join(out_dir, "*.tar.gz"))
    wheel = glob.glob(os.path.join(out_dir, "*.whl"))
    assert len(sdist) == 1 and len(wheel) == 1, os.listdir(out_dir)
    return sdist[0], wheel[0]


def clean_env(venv, home):
    """An environment with nothing of the checkout, no index, and a PATH that
    holds the venv only (Debian's protoc is in /usr/bin)."""
    env = {"PATH": os.path.join(venv, "bin"), "HOME": home, "LANG": "C.UTF-8",
           "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PROTOC": "/nonexistent",
           "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
    return env


def make_venv(venv, package, wheels, home):
    """A venv (no system site-packages) with package (a wheel or an sdist)
    installed by pip from the wheelhouse only. Returns its python."""
    subprocess.run([PY, "-m", "venv", venv], check=True, timeout=300, capture_output=True)
    env = clean_env(venv, home)
    assert shutil.which("protoc", path=env["PATH"]) is None
    r = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--no-index",
                        "--find-links", wheels, package], capture_output=True, text=True,
                       env=env, timeout=600, cwd=home)
    if r.returncode != 0:
        raise RuntimeError("pip install %s: %s%s" % (package, r.stdout, r.stderr))
    return os.path.join(venv, "bin", "python")
