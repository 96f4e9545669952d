# SPDX-License-Identifier: Apache-2.0
"""Review 3 of issue 16, finding 1 (a host uid of each run's own,
common/host_ids.c): what another local user could do to the slot locks.

Two live runs share a uid only if two helpers lock two different files for
one slot. The lock directory must be this user's and writable by no one
else, but a directory above it that someone else can write (and that is not
sticky) lets them rename the lock directory away between two helpers: the
next helper makes a fresh, empty one (its own, so it passes), and takes a
slot a live run holds. Such a path is refused, naming the directory."""
import os
import stat
import subprocess

import sbxtest


class LockDirAncestors(sbxtest.SandboxTest):
    def test_a_lock_dir_below_a_directory_others_can_write_is_refused(self):
        if not sbxtest.subordinate_uids():
            self.skipTest("this user has no subordinate uids (packaging/setup.sh)")
        shared = os.path.join(self.tmp, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o777)  # writable by everyone, not sticky
        locks = os.path.join(shared, "locks")
        r = self.sh("echo ran", extra=["--host-id-dir", locks])
        self.assertNotEqual(r.rc, 0, r)
        self.assertNotIn("ran", r.stdout, r)
        self.assertIn("writable by others", r.stderr, r)
        self.assertIn(shared, r.stderr, r)

    def test_a_sticky_directory_above_is_fine(self):
        """/tmp's case: others can write it, but not rename what is ours."""
        if not sbxtest.subordinate_uids():
            self.skipTest("this user has no subordinate uids (packaging/setup.sh)")
        sticky = os.path.join(self.tmp, "sticky")
        os.mkdir(sticky)
        os.chmod(sticky, 0o1777)
        r = self.sh("echo ran", extra=["--host-id-dir", os.path.join(sticky, "locks")])
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.stdout.strip(), "ran", r)
        st = os.stat(os.path.join(sticky, "locks"))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o700)


class Stdio(sbxtest.SandboxTest):
    """The command's stdio are pipes its caller made (the helper, sbxd): the
    caller's, 0600, and the sandbox user is another uid. Opening them again
    by name is what scripts do (`> /dev/stderr`, `cat /dev/stdin`, curl's
    `-D /dev/stderr`, which crashed on EACCES: sbxd.egress_review2)."""

    def test_dev_stdin_stdout_stderr_open_again(self):
        pol = self.write_policy(sbxtest.policy())
        p = subprocess.run([sbxtest.HELPER, "run", "--policy", pol, "--", "/bin/sh", "-c",
                            "cat /dev/stdin && echo out > /dev/stdout && "
                            "echo err > /dev/stderr && echo fd > /proc/self/fd/1"],
                           input=b"in\n", capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p)
        self.assertEqual(p.stdout, b"in\nout\nfd\n", p)
        self.assertEqual(p.stderr, b"err\n", p)


if __name__ == "__main__":
    sbxtest.run_tests()
