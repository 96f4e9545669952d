# SPDX-License-Identifier: Apache-2.0
"""The clients' destination directory (issue 16, finding 4): `sbxctl run
--out`, `sbxctl fetch --all`, `python3 -m sbx_client run --out` and the Python
API's Run.fetch_at never write through a link planted in the destination
(keys -> the victim's ~/.ssh, with the sandbox writing
/out/keys/authorized_keys), and refuse a destination that is not the
caller's own or that others can write: /tmp, a 0777 or 0770 directory, and
one a second local user (sbx-test2, made by packaging/setup.sh) pre-created
for the victim. The directories above the destination are held to OpenSSH's
rule (owned by root or the caller, writable by no one else unless sticky): a
destination of the caller's own beneath the second user's writable directory
is refused naming that directory, since its owner can rename the caller's
away and swap a link in. Also: a missing destination is made 0700, and the
files' modes are the artifacts' less the umask."""
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

from sbxdfix import POLICY, ServerTestCase

SOURCE = os.environ.get("SBX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
PKG_SRC = os.path.join(SOURCE, "clients", "python")
BUILD = os.path.dirname(os.environ.get("SBX_PYTHON_PROTO", "").rstrip("/"))
PKG_GEN = os.path.join(BUILD, "clients", "python")
sys.path[:0] = [PKG_SRC, PKG_GEN]
import sbx_client  # noqa: E402

PY = "/usr/bin/python3"
OTHER_USER = "sbx-test2"
OTHER_DROP = "/var/lib/sbx-test2/drop"
ORIGINAL = b"ssh-ed25519 AAAA the victim's own key\n"
ATTACK = "ssh-ed25519 AAAA the attacker key"


def plant(script_dir):
    """The sandbox's side: what it writes into /out."""
    return ("mkdir -p /out/%s && echo '%s' > /out/%s/authorized_keys && echo ok > /out/%s.ok"
            % (script_dir, ATTACK, script_dir, script_dir))


class Dest(ServerTestCase):
    def setUp(self):
        self.home = tempfile.mkdtemp(prefix="victim-", dir=self.srv.dir)
        self.ssh = os.path.join(self.home, ".ssh")
        os.mkdir(self.ssh, 0o700)
        self.keys = os.path.join(self.ssh, "authorized_keys")
        with open(self.keys, "wb") as f:
            f.write(ORIGINAL)
        self.policy = os.path.join(self.home, "policy.json")
        with open(self.policy, "w") as f:
            f.write(json.dumps(POLICY))

    def assertKeysIntact(self, what):
        with open(self.keys, "rb") as f:
            self.assertEqual(f.read(), ORIGINAL, "%s wrote through the planted link" % what)
        self.assertEqual(sorted(os.listdir(self.ssh)), ["authorized_keys"], what)

    def results(self, name="results"):
        """The victim's results directory (theirs, 0700) with keys -> ~/.ssh in it."""
        out = os.path.join(self.home, name)
        os.mkdir(out, 0o700)
        os.symlink(self.ssh, os.path.join(out, "keys"))
        return out

    # -- the three clients, each as a function of the destination
    def sbxctl_run(self, out, script):
        return self.srv.cli("run", "--out", out, "--", "/bin/sh", "-c", script, timeout=60)

    def sbxctl_fetch_all(self, out, script):
        r = self.srv.cli("create", "--policy", self.policy)
        self.assertEqual(r.returncode, 0, r)
        run = r.stdout.strip()
        self.addCleanup(self.srv.cli, "teardown", run)
        e = self.srv.cli("exec", run, "--", "/bin/sh", "-c", script)
        self.assertEqual(e.returncode, 0, e)
        return self.srv.cli("fetch", run, "--all", out)

    def module_run(self, out, script):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        env["PYTHONPATH"] = os.pathsep.join([PKG_SRC, PKG_GEN])
        return subprocess.run([PY, "-m", "sbx_client", "run", "--endpoint", self.srv.ipc,
                               "--policy", self.policy, "--out", out, "--", "/bin/sh", "-c",
                               script], capture_output=True, text=True, timeout=60, env=env)

    def api_fetch_at(self, out, script):
        """Run.fetch_at under a destination from dest.open_dest, as the module's
        run does; the outcome as a CompletedProcess-like triple."""
        class R:
            returncode, stdout, stderr = 0, "", ""
        r = R()
        with sbx_client.connect(self.srv.ipc) as c:
            with c.create_run(self.policy) as run:
                run.exec(["/bin/sh", "-c", script], check=True)
                try:
                    fd = sbx_client.dest.open_dest(out)
                    try:
                        for a in run.artifacts():
                            run.fetch_at(fd, a.path, a.mode & 0o777, sha256=a.sha256)
                    finally:
                        os.close(fd)
                except sbx_client.SbxError as e:
                    r.returncode, r.stderr = 1, str(e)
        return r

    CLIENTS = ("sbxctl_run", "sbxctl_fetch_all", "module_run", "api_fetch_at")

    def refused(self, r, *words):
        self.assertNotEqual(r.returncode, 0, r)
        for w in words:
            self.assertIn(w, r.stderr)

    # -- the attack: a link planted in the destination
    def test_a_planted_directory_link_is_refused_not_followed(self):
        for client in self.CLIENTS:
            with self.subTest(client=client):
                out = self.results("results-" + client)
                r = getattr(self, client)(out, plant("keys"))
                self.assertKeysIntact(client)
                self.refused(r, "keys: a symbolic link is in the way: refused")
                self.assertTrue(os.path.islink(os.path.join(out, "keys")), client)

    def test_a_planted_file_link_is_refused_not_replaced(self):
        for client in self.CLIENTS:
            with self.subTest(client=client):
                out = os.path.join(self.home, "flat-" + client)
                os.mkdir(out, 0o700)
                os.symlink(self.keys, os.path.join(out, "authorized_keys"))
                r = getattr(self, client)(out, "echo '%s' > /out/authorized_keys" % ATTACK)
                self.assertKeysIntact(client)
                self.refused(r, "authorized_keys: a symbolic link is in the way: refused")
                self.assertTrue(os.path.islink(os.path.join(out, "authorized_keys")), client)

    def test_the_destination_itself_a_link_is_refused(self):
        for client in self.CLIENTS:
            with self.subTest(client=client):
                link = os.path.join(self.home, "to-ssh-" + client)
                os.symlink(self.ssh, link)
                # "link/": the trailing slash must not make it followed.
                for dest in (link, link + "/"):
                    r = getattr(self, client)(dest, "echo '%s' > /out/authorized_keys" % ATTACK)
                    self.assertKeysIntact(client)
                    self.refused(r, "a symbolic link is in the way: refused")

    # -- destinations others can write, or that are not ours
    def test_tmp_and_shared_directories_are_refused(self):
        wide = os.path.join(self.home, "wide")
        group = os.path.join(self.home, "group")
        for d, m in ((wide, 0o777), (group, 0o770)):
            os.mkdir(d)
            os.chmod(d, m)
        cases = (("/tmp", "/tmp: owned by uid 0, not by you (uid %d): refused" % os.geteuid()),
                 (wide, "writable by others (mode 0777): refused"),
                 (group, "writable by its group (mode 0770): refused"))
        for client in self.CLIENTS:
            for d, why in cases:
                with self.subTest(client=client, dest=d):
                    r = getattr(self, client)(d, "echo x > /out/x")
                    self.refused(r, why)
                    if d != "/tmp":  # others' tests write there meanwhile
                        self.assertEqual(os.listdir(d), [])
        # run --out is refused before a run exists (the work is not lost).
        r = self.srv.cli("run", "--out", "/tmp", "--", "/bin/sh", "-c", "echo never")
        self.assertEqual(r.returncode, 125, r)
        self.assertNotIn("never", r.stdout)

    def other_user(self):
        """The second local user's uid, once its drop directory (theirs, which
        we may write through its group) is there; else the test is skipped."""
        try:
            other = pwd.getpwnam(OTHER_USER).pw_uid
        except KeyError:
            self.skipTest("no second local user %s: run packaging/setup.sh as root"
                          % OTHER_USER)
        if not os.access(OTHER_DROP, os.W_OK | os.X_OK):
            self.skipTest("%s is missing or not writable by uid %d: run packaging/setup.sh "
                          "as root" % (OTHER_DROP, os.geteuid()))
        return other

    def test_a_directory_another_local_user_made_is_refused(self):
        other = self.other_user()
        self.assertEqual(os.stat(OTHER_DROP).st_uid, other)
        for client in self.CLIENTS:
            with self.subTest(client=client):
                # The other user's directory, with the link planted in it
                # beforehand (its group lets us plant it: the effect is the
                # one the other user's own link would have).
                name = "keys-%d-%s" % (os.getpid(), client)
                link = os.path.join(OTHER_DROP, name)
                os.symlink(self.ssh, link)
                try:
                    r = getattr(self, client)(OTHER_DROP, plant(name))
                finally:
                    os.unlink(link)
                    for e in os.listdir(OTHER_DROP):  # what an old client wrote
                        p = os.path.join(OTHER_DROP, e)
                        if e.startswith(name) and os.path.isdir(p) and not os.path.islink(p):
                            shutil.rmtree(p)
                        elif e.startswith(name):
                            os.unlink(p)
                self.assertKeysIntact(client)
                self.refused(r, "owned by uid %d, not by you (uid %d): refused"
                             % (other, os.geteuid()))

    # -- the directories above the destination (OpenSSH's rule)
    def test_a_destination_beneath_another_users_writable_directory_is_refused(self):
        other = self.other_user()
        for client in self.CLIENTS:
            for made in (False, True):
                with self.subTest(client=client, made=made):
                    # Ours, 0700, and so is the destination: only the
                    # directory above, the other user's, is not.
                    mine = os.path.join(OTHER_DROP, "mine-%d-%s-%d" % (os.getpid(), client,
                                                                         made))
                    os.mkdir(mine, 0o700)
                    self.addCleanup(shutil.rmtree, mine, True)
                    out = os.path.join(mine, "results")
                    if made:
                        os.mkdir(out, 0o700)
                    r = getattr(self, client)(out, "echo x > /out/x")
                    self.refused(r, "its ancestor %s is owned by uid %d, neither root nor you "
                                 "(uid %d): refused" % (OTHER_DROP, other, os.geteuid()))
                    self.assertEqual(os.listdir(mine), ["results"] if made else [])
                    if made:
                        self.assertEqual(os.listdir(out), [])

    def test_a_group_writable_ancestor_is_refused_a_sticky_one_is_not(self):
        shared, sticky = os.path.join(self.home, "shared"), os.path.join(self.home, "sticky")
        for d, m in ((shared, 0o770), (sticky, 0o1777)):
            os.mkdir(d)
            os.chmod(d, m)
        for client in self.CLIENTS:
            with self.subTest(client=client):
                below = os.path.join(shared, client)
                os.mkdir(below, 0o700)
                r = getattr(self, client)(os.path.join(below, "out"), "echo x > /out/x")
                self.refused(r, "its ancestor %s is writable by its group (mode 0770) and not "
                             "sticky: refused" % shared)
                self.assertEqual(os.listdir(below), [])
                # As in /tmp: a sticky directory lets no one rename our names.
                below = os.path.join(sticky, client)
                os.mkdir(below, 0o700)
                r = getattr(self, client)(os.path.join(below, "out"), "echo x > /out/x")
                self.assertEqual(r.returncode, 0, r)
                with open(os.path.join(below, "out", "x")) as f:
                    self.assertEqual(f.read(), "x\n")

    # -- what is made
    def test_a_missing_destination_is_made_0700_and_modes_are_kept(self):
        script = ("mkdir -p /out/sub/deeper && echo a > /out/a && chmod 0640 /out/a && "
                  "echo b > /out/sub/deeper/b && chmod 0755 /out/sub/deeper/b")
        old = os.umask(0o022)
        try:
            for client in self.CLIENTS:
                with self.subTest(client=client):
                    out = os.path.join(self.home, "new-" + client)
                    r = getattr(self, client)(out, script)
                    self.assertEqual(r.returncode, 0, r)
                    self.assertEqual(stat.S_IMODE(os.stat(out).st_mode), 0o700)
                    self.assertEqual(stat.S_IMODE(os.stat(os.path.join(out, "a")).st_mode),
                                     0o640)
                    b = os.path.join(out, "sub", "deeper", "b")
                    self.assertEqual(stat.S_IMODE(os.stat(b).st_mode), 0o755)
                    with open(b) as f:
                        self.assertEqual(f.read(), "b\n")
                    self.assertEqual(
                        stat.S_IMODE(os.stat(os.path.join(out, "sub")).st_mode), 0o755)
                    # Again into the same directory: its files are replaced.
                    r = getattr(self, client)(out, script)
                    self.assertEqual(r.returncode, 0, r)
                    self.assertFalse([n for n in os.listdir(out) if n.startswith(".sbx")])
        finally:
            os.umask(old)

    def test_set_id_bits_passed_to_fetch_at_are_dropped(self):
        """A hostile server lists an artifact 06755; a caller that hands
        Run.fetch_at the listed mode must not get a set-id file of its own
        (before: fchmod with mode & 0o7777 kept both bits)."""
        out = os.path.join(self.home, "setid")
        os.mkdir(out, 0o700)
        with sbx_client.connect(self.srv.ipc) as c:
            with c.create_run(self.policy) as run:
                run.exec(["/bin/sh", "-c", "echo x > /out/tool && chmod 0755 /out/tool"],
                         check=True)
                fd = sbx_client.dest.open_dest(out)
                try:
                    for a in run.artifacts():
                        run.fetch_at(fd, a.path, a.mode | 0o6000, sha256=a.sha256)
                finally:
                    os.close(fd)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(out, "tool")).st_mode), 0o755)


if __name__ == "__main__":
    unittest.main(verbosity=2)
