# SPDX-License-Identifier: Apache-2.0
"""A run's user namespace is made inside its host uid slot's
(server/runs/runs_slots.h, helper/supervisor.c clone_in_slot).

sbxd takes each run's slot itself and keeps, per slot, a user namespace
mapped once by newuidmap and newgidmap (0 to sbxd's uid, the sandbox user
to the slot's uid and gid); the helper makes the run's own namespace inside
it, mapped without the setuid tools. What must hold, and is tried here:
- a sandbox process's user namespaces, walked up from the host
  (NS_GET_PARENT): the exec's, the run's, the slot's (owned by sbxd's uid),
  the host's; the run's is the run's own: a later run of the same slot gets
  a new one inside the same slot namespace, and two live runs have two
  host uids and two slot namespaces;
- no process ever runs in a slot's namespace: while runs live and execs run,
  no readable process of the host has it as its user namespace;
- with "host_uids": "shared" there are no slot namespaces (the walk is one
  shorter): what makes the first test fail on a tree without them;
- `sbx-helper serve --host-slot UID,GID,LOCK_FD,USERNS_FD` takes the slot
  only when it is what it says: the lock file of that uid in the lock
  directory, its flock held through that fd (not another open's), a user
  namespace, and one that maps exactly 0 to the caller and the sandbox user
  to that uid and gid (another slot's namespace would run two runs as one
  host uid), and not a uid and gid of two different slots or a namespace
  that is not a child of the helper's; each refusal names what was wrong
  and builds nothing, and the option is for serve with subordinate host
  uids only; a joiner that dies right after it cloned pid 1 fails serve at
  once (pid 1 holds no copy of its report pipe) and pid 1 goes with it;
- `sbx-helper slot-userns UID,GID` (what sbxd runs to make a slot's
  namespace) sends back a user namespace of this uid whose maps are 0 to
  it and 1000 to the slot, or why not;
- review 35: sbxd started with SIGCHLD ignored still makes runs (the tools'
  exits are the helper's to reap); a slot-userns that hangs fails its
  CreateRun within its time, naming it, while Health answers, and its
  process is killed; one that refuses fails the CreateRun with its words;
- review 36: each other wrong answer (a namespace not made in sbxd's, a
  descriptor of another kind, two, none, a death, bytes that are not
  text) fails the CreateRun saying which and keeps nothing; a namespace
  the helper refuses (maps sbxd cannot see from outside) is dropped, and
  the slot's next run gets one made afresh."""
import fcntl
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

import sbxtest
from sbxdfix import Server, build_shim, policy_json, preload_env
from sbxrpc import sandbox_pb2 as pb

NS_GET_PARENT = 0xB702
NS_GET_OWNER_UID = 0xB704
SANDBOX_ID = 1000  # SBX_SANDBOX_UID (common/host_ids.h)
HELPER = os.environ.get("SBX_HELPER")


def ns_inode(fd):
    return os.fstat(fd).st_ino


def userns_chain(pid):
    """The inodes of pid's user namespace and each parent up to the
    host's (the last), walked with NS_GET_PARENT; and the fds, open."""
    fds = [os.open("/proc/%d/ns/user" % pid, os.O_RDONLY | os.O_CLOEXEC)]
    while True:
        try:
            fds.append(fcntl.ioctl(fds[-1], NS_GET_PARENT))
        except OSError:
            break
    return [ns_inode(fd) for fd in fds], fds


def owner_uid(fd):
    buf = bytearray(4)
    fcntl.ioctl(fd, NS_GET_OWNER_UID, buf)
    return int.from_bytes(buf, "little")


def alive(pid):
    """pid runs (exists and is not a zombie)."""
    try:
        return "\nState:\tZ" not in sbxtest.read_text("/proc/%d/status" % pid)
    except OSError:
        return False


def processes_left_in(inode, seconds=10):
    """processes_in(inode), given up to `seconds` to be empty: the run's
    /out reader ends once sbxd has closed its socket at the Teardown, a
    moment after the answer (review 39 saw it still exiting)."""
    deadline = time.monotonic() + seconds
    found = processes_in(inode)
    while found and time.monotonic() < deadline:
        time.sleep(0.05)
        found = processes_in(inode)
    return found


def processes_in(inode):
    """Readable live processes whose user namespace is `inode` (a zombie
    keeps its credentials, so its namespace, until it is reaped: a helper's
    /out reader that outlived the helper by a moment is init's to reap)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if (os.stat("/proc/%s/ns/user" % pid).st_ino == inode and
                        "\nState:\tZ" not in sbxtest.read_text("/proc/%s/status" % pid)):
                    found.append(int(pid))
            except OSError:
                pass
    return found


class Slots(unittest.TestCase):
    SHARED = False

    @classmethod
    def setUpClass(cls):
        # A lock directory of this server's own: its runs take the lowest
        # slots in it whatever other tests hold in the user's default one.
        cls.ids = tempfile.mkdtemp(prefix="sbx-test-slot-ids-")
        config = {"host_id_dir": cls.ids}
        if cls.SHARED:
            config["host_uids"] = "shared"
        cls.srv = Server(**config)
        cls.token = cls.srv.tokens["alice"]

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.srv.cleanup()
        shutil.rmtree(cls.ids, ignore_errors=True)

    def call(self, c, name, req, resp_type):
        code, msg, resp = c.call(name, req, resp_type, token=self.token)
        self.assertEqual(code, "OK", "%s: %s" % (name, msg))
        return resp

    def create(self, c):
        return self.call(c, "CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                         pb.CreateRunResponse).run_id

    def teardown(self, c, run):
        self.call(c, "Teardown", pb.TeardownRequest(run_id=run), pb.TeardownResponse)

    def sleeper(self, c, run):
        """An exec that sleeps; its host pid and host uid."""
        marker = "%d.%s" % (os.getpid(), os.urandom(4).hex())
        self.call(c, "Exec", pb.ExecRequest(run_id=run, argv=[
            "/usr/bin/python3", "-c", "import time; time.sleep(60)", marker]), pb.ExecResponse)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for pid, _ in sbxtest.procs_with(marker):
                try:
                    return pid, os.stat("/proc/%d" % pid).st_uid
                except OSError:
                    pass
            time.sleep(0.05)
        self.fail("the exec with %s never showed" % marker)

    def walk(self, pid):
        inodes, fds = userns_chain(pid)
        for fd in fds:
            self.addCleanup(os.close, fd)
        self.assertEqual(inodes[-1], os.stat("/proc/self/ns/user").st_ino,
                         "the walk from pid %d ends at the host's namespace" % pid)
        return inodes, fds


class InSlot(Slots):
    def test_a_runs_namespace_is_its_own_inside_its_slots(self):
        with self.srv.conn() as c:
            first = self.create(c)
            pid, uid1 = self.sleeper(c, first)
            chain1, fds1 = self.walk(pid)
            # exec's, the run's, the slot's, the host's
            self.assertEqual(len(chain1), 4, chain1)
            self.assertEqual(owner_uid(fds1[2]), os.getuid(), "the slot's is sbxd's uid's")
            self.assertNotEqual(uid1, os.getuid())
            self.teardown(c, first)
            # fds1 holds the first run's namespace: its number is not reused.
            self.assertEqual(processes_left_in(chain1[1]), [], "nothing of the first run is left")
            second = self.create(c)
            pid, uid2 = self.sleeper(c, second)
            chain2, _ = self.walk(pid)
            self.assertEqual(uid2, uid1, "the lowest free slot again")
            # The joiner and pid 1 said nothing on the helper's stderr
            # (review 39: a sanitizer's warning about the joiner's stack
            # reached the run's alerts).
            st = self.call(c, "Status", pb.StatusRequest(run_id=second), pb.StatusResponse)
            self.assertEqual(list(st.alerts), [], "the run's alerts")
            self.assertEqual(chain2[2], chain1[2], "the slot's namespace is kept")
            self.assertNotEqual(chain2[1], chain1[1], "the run's namespace is new")
            # A second live run: another slot, another slot namespace.
            third = self.create(c)
            pid, uid3 = self.sleeper(c, third)
            chain3, _ = self.walk(pid)
            self.assertNotEqual(uid3, uid2)
            self.assertNotEqual(chain3[2], chain2[2])
            self.teardown(c, second)
            self.teardown(c, third)
            # sbxd holds one descriptor per slot it used, each the slot's.
            held = self.srv.userns_fds()
            self.assertEqual(len(held), len(set(held)), "one fd per slot: %s" % held)
            self.assertLessEqual({chain1[2], chain3[2]}, set(held))
            # Ten more runs one after another: the first slot each time,
            # nothing more held.
            for _ in range(10):
                self.teardown(c, self.create(c))
            self.assertEqual(sorted(self.srv.userns_fds()), sorted(held))

    def test_no_process_runs_in_a_slot_namespace(self):
        with self.srv.conn() as c:
            runs = [self.create(c) for _ in range(2)]
            slots = set()
            for run in runs:
                pid, _ = self.sleeper(c, run)
                chain, _ = self.walk(pid)
                slots.add(chain[2])
            for inode in slots:
                self.assertEqual(processes_in(inode), [],
                                 "a process in slot namespace %d" % inode)
            for run in runs:
                self.teardown(c, run)
            for inode in slots:
                self.assertEqual(processes_in(inode), [])


class Shared(Slots):
    SHARED = True

    def test_shared_host_uids_make_no_slot_namespace(self):
        with self.srv.conn() as c:
            run = self.create(c)
            pid, uid = self.sleeper(c, run)
            chain, _ = self.walk(pid)
            self.assertEqual(uid, os.getuid())
            self.assertEqual(len(chain), 3, "exec's, the run's, the host's: %s" % chain)
            self.teardown(c, run)


class IgnoredSigchld(Server):
    """sbxd started with SIGCHLD ignored (which exec keeps): the kernel
    reaps its children itself."""

    def wrap(self, cmd):
        # What the wrapper's process had when it exec'd sbxd: the test's proof
        # that sbxd started with SIGCHLD ignored.
        self.before = self.path("status-before-exec")
        return ["/usr/bin/python3", "-c", "import os, signal, sys; "
                "signal.signal(signal.SIGCHLD, signal.SIG_IGN); "
                "open(sys.argv[1], 'w').write(open('/proc/self/status').read()); "
                "os.execv(sys.argv[2], sys.argv[2:])", self.before] + cmd


# What the wrapper below runs for `slot-userns` while its mode file holds
# a mode: a slot-userns that misbehaves in that way.
FAKE_SLOT_USERNS = r"""
import fcntl, os, socket, subprocess, sys, time
mode_file, pid_file, real = sys.argv[1:4]
mode = open(mode_file).read().strip()
sock = socket.socket(fileno=3)


def userns_depth(pid):
    fds = [os.open("/proc/%d/ns/user" % pid, os.O_RDONLY)]
    while True:
        try:
            fds.append(fcntl.ioctl(fds[-1], 0xB702))
        except OSError:
            break
    for fd in fds:
        os.close(fd)
    return len(fds) - 1


def namespace(levels):
    cmd = ["unshare", "--user", "--map-root-user"] + ["unshare", "--user"] * (levels - 1)
    p = subprocess.Popen(cmd + ["sleep", "30"])
    while userns_depth(p.pid) != levels:
        time.sleep(0.01)
    # One level: mapped 0 to us alone, which unshare writes after it forks.
    while levels == 1 and not open("/proc/%d/uid_map" % p.pid).read().strip():
        time.sleep(0.01)
    return p, os.open("/proc/%d/ns/user" % p.pid, os.O_RDONLY)


if mode == "hang":
    open(pid_file, "w").write(str(os.getpid()))
    time.sleep(60)
elif mode == "refuse":
    os.execv(real, [real, "slot-userns", "0,0"])
elif mode in ("badmaps", "nested", "twofds"):
    p, fd = namespace(2 if mode == "nested" else 1)
    socket.send_fds(sock, [b"Y"], [fd, fd] if mode == "twofds" else [fd])
    p.kill()
elif mode == "hostns":
    socket.send_fds(sock, [b"Y"], [os.open("/proc/self/ns/user", os.O_RDONLY)])
elif mode == "binary":
    sock.send(b"\x01\x02")
elif mode == "netns":
    socket.send_fds(sock, [b"Y"], [os.open("/proc/self/ns/net", os.O_RDONLY)])
elif mode == "garbage":
    sock.send(b"bad\x01\x1b[31mrest")
elif mode == "die":
    os.kill(os.getpid(), 9)
"""


class SlotUsernsHelper(Server):
    """sbxd's helper a wrapper whose `slot-userns` misbehaves as its mode
    file says (FAKE_SLOT_USERNS; empty: the real helper)."""

    def __init__(self, **config):
        self.wrapdir = tempfile.mkdtemp(prefix="sbx-test-slotwrap-")
        os.chmod(self.wrapdir, 0o755)
        self.mode = os.path.join(self.wrapdir, "mode")
        self.pidfile = os.path.join(self.wrapdir, "pid")
        fake = os.path.join(self.wrapdir, "fake.py")
        with open(fake, "w") as f:
            f.write(FAKE_SLOT_USERNS)
        open(self.mode, "w").close()
        script = os.path.join(self.wrapdir, "helper.sh")
        real = os.path.realpath(HELPER)
        with open(script, "w") as f:
            f.write('#!/bin/sh\n'
                    'if [ "$1" = slot-userns ] && [ -s %s ]; then\n'
                    '    exec /usr/bin/python3 %s %s %s %s\n'
                    'fi\n'
                    'exec %s "$@"\n' % (self.mode, fake, self.mode, self.pidfile, real, real))
        os.chmod(script, 0o755)
        super().__init__(helper=script, **config)

    def set_mode(self, mode):
        with open(self.mode, "w") as f:
            f.write(mode)

    def cleanup(self):
        super().cleanup()
        shutil.rmtree(self.wrapdir, ignore_errors=True)


class Making(unittest.TestCase):
    """How sbxd gets a slot's namespace made, and when that goes wrong."""

    def start(self, cls):
        ids = tempfile.mkdtemp(prefix="sbx-test-slot-ids-")
        self.addCleanup(shutil.rmtree, ids, ignore_errors=True)
        srv = cls(host_id_dir=ids)
        self.addCleanup(srv.cleanup)
        self.addCleanup(srv.stop)
        return srv

    def create(self, srv):
        with srv.conn() as c:
            code, msg, resp = c.call("CreateRun", pb.CreateRunRequest(policy_json=policy_json()),
                                     pb.CreateRunResponse, token=srv.tokens["alice"])
        if code == "OK":
            with srv.conn() as c:
                c.call("Teardown", pb.TeardownRequest(run_id=resp.run_id),
                       pb.TeardownResponse, token=srv.tokens["alice"])
        return code, msg

    def test_sbxd_with_sigchld_ignored_still_makes_runs(self):
        """It sets SIGCHLD back to its default (server/main.c): the kernel
        would otherwise reap its helpers, their statuses lost and their pids
        free for others while sbxd still means them (reviews 35, 37)."""
        srv = self.start(IgnoredSigchld)

        def sigign(path):
            with open(path) as f:
                return int([line for line in f if line.startswith("SigIgn:")][0].split()[1], 16)
        self.assertTrue(sigign(srv.before) & (1 << 16), "SIGCHLD (17) ignored at the exec")
        self.assertFalse(sigign("/proc/%d/status" % srv.proc.pid) & (1 << 16),
                         "SIGCHLD is no longer ignored in sbxd")
        for _ in range(2):
            code, msg = self.create(srv)
            self.assertEqual(code, "OK", msg)

    def test_a_hanging_slot_userns_fails_the_create_in_its_time(self):
        srv = self.start(SlotUsernsHelper)
        srv.set_mode("hang")
        code, msg = self.create(srv)
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        # The slot's own bound ended it, not Ready's (which says otherwise).
        self.assertIn("slot-userns", msg)
        self.assertIn("did not answer within its time", msg)
        with open(srv.pidfile) as f:
            hung = int(f.read())
        self.assertFalse(os.path.exists("/proc/%d" % hung) and
                         "\nState:\tZ" not in sbxtest.read_text("/proc/%d/status" % hung),
                         "the hung slot-userns was killed")
        self.assertEqual(srv.userns_fds(), [], "nothing kept")
        with srv.conn() as c:
            code, _, _ = c.call("Health", pb.HealthRequest(), pb.HealthResponse,
                                token=srv.tokens["alice"])
            self.assertEqual(code, "OK")
        # The slot was let go: the next create takes it and succeeds.
        srv.set_mode("")
        code, msg = self.create(srv)
        self.assertEqual(code, "OK", msg)
        self.assertEqual(len(srv.userns_fds()), 1)

    def test_each_wrong_answer_fails_the_create_naming_it_and_keeps_nothing(self):
        srv = self.start(SlotUsernsHelper)
        for mode, words in (
                ("refuse", "slot-userns 0,0: must be UID,GID"),
                ("nested", "sent a user namespace that is not a child of sbxd's"),
                ("hostns", "sent a user namespace that is not sbxd's uid's"),
                ("binary", "answered with bytes that are not text"),
                ("netns", "answered with a descriptor that is not a user namespace"),
                ("twofds", "answered without exactly one descriptor"),
                ("die", "ended without an answer (killed by signal 9)")):
            srv.set_mode(mode)
            code, msg = self.create(srv)
            self.assertEqual(code, "FAILED_PRECONDITION", "%s: %s" % (mode, msg))
            self.assertIn(words, msg, mode)
            self.assertEqual(srv.userns_fds(), [], "%s: nothing kept" % mode)
        srv.set_mode("garbage")
        code, msg = self.create(srv)
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        self.assertIn("user namespace: bad", msg)
        self.assertNotIn("rest", msg, "only text up to the first byte that is not")

    def test_a_namespace_the_helper_refuses_is_made_afresh_for_the_next_run(self):
        """Review 36: kept once, a namespace of other maps (0 to us alone:
        sbxd cannot see maps from outside) failed every run of its slot."""
        srv = self.start(SlotUsernsHelper)
        srv.set_mode("badmaps")
        code, msg = self.create(srv)
        self.assertEqual(code, "FAILED_PRECONDITION", msg)
        self.assertIn("the slot's user namespace maps /proc/self/uid_map as", msg)
        self.assertEqual(srv.userns_fds(), [], "the refused namespace is not kept")
        srv.set_mode("")
        for _ in range(2):
            code, msg = self.create(srv)
            self.assertEqual(code, "OK", msg)
        self.assertEqual(len(srv.userns_fds()), 1)


class SlotUsernsCommand(unittest.TestCase):
    """sbx-helper slot-userns, run the way sbxd runs it (the socket at fd 3)."""

    def run_it(self, spec):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            p = subprocess.Popen(
                ["/bin/sh", "-c", 'exec "$@" 3<&%d' % theirs.fileno(), "sh", HELPER,
                 "slot-userns", spec], pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        ours.settimeout(30)
        msg, fds, _, _ = socket.recv_fds(ours, 4096, 4)
        ours.close()
        err = p.stderr.read().decode(errors="replace")
        p.stderr.close()
        return p.wait(timeout=30), msg, fds, err

    def test_it_sends_a_namespace_mapped_for_the_slot(self):
        # A slot high in the range, gid the same (packaging/setup.sh gives
        # one range of both).
        slot = sbxtest.subordinate_uids()[0][-3]
        rc, msg, fds, err = self.run_it("%d,%d" % (slot, slot))
        self.assertEqual((rc, msg, len(fds)), (0, b"Y", 1), err)
        ns = fds[0]
        self.addCleanup(os.close, ns)
        self.assertEqual(owner_uid(ns), os.getuid())
        parent = fcntl.ioctl(ns, NS_GET_PARENT)
        self.addCleanup(os.close, parent)
        self.assertEqual(ns_inode(parent), os.stat("/proc/self/ns/user").st_ino)
        maps = subprocess.run(["nsenter", "--user=/proc/self/fd/%d" % ns, "--", "/bin/sh", "-c",
                               "cat /proc/self/uid_map /proc/self/gid_map"],
                              pass_fds=(ns,), capture_output=True, text=True)
        self.assertEqual(maps.returncode, 0, maps.stderr)
        lines = [line.split() for line in maps.stdout.splitlines()]
        self.assertEqual(lines, [["0", str(os.getuid()), "1"], [str(SANDBOX_ID), str(slot), "1"],
                                 ["0", str(os.getgid()), "1"], [str(SANDBOX_ID), str(slot), "1"]])
        self.assertEqual(processes_in(ns_inode(ns)), [], "nothing left in it")

    def test_it_says_why_not(self):
        rc, msg, fds, err = self.run_it("0,0")
        self.assertEqual((rc, fds), (2, []), err)
        self.assertIn(b"slot-userns 0,0: must be UID,GID", msg)
        # Ids that are not this user's: the tool's refusal comes back.
        rc, msg, fds, err = self.run_it("1,1")
        self.assertEqual((rc, fds), (1, []), err)
        self.assertIn(b"newuidmap", msg)


# Preloaded into `serve --host-slot`: the joiner (the one caller of clone
# with CLONE_PARENT) dies by SIGKILL right after it cloned pid 1, before its
# report, having written pid 1's pid to $SHIM_PID1. Only the kernel or the
# host can do that to it; review 35 found the helper then waited for a
# report that pid 1 (holding the pipe) kept from ending.
JOINER_DIES = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static char pid_file[4096];

__attribute__((constructor)) static void init(void)
{
	const char *f = getenv("SHIM_PID1");
	if (f)
		snprintf(pid_file, sizeof(pid_file), "%s", f);
}

long syscall(long n, ...)
{
	static long (*real)(long, ...);
	long a[6];
	va_list ap;
	va_start(ap, n);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (!real)
		real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	long r = real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
	if (n == SYS_clone && (a[0] & CLONE_PARENT) && r > 0) {
		int fd = open(pid_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			char b[32];
			int len = snprintf(b, sizeof(b), "%ld", r);
			if (write(fd, b, (size_t)len) != len)
				abort();
			close(fd);
		}
		raise(SIGKILL);
	}
	return r;
}
"""


class HostSlotOption(unittest.TestCase):
    """sbx-helper serve --host-slot, given what sbxd gives and worse."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sbx-test-host-slot-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.policy = os.path.join(self.dir, "policy.json")
        with open(self.policy, "w") as f:
            f.write(policy_json())
        self.ids = os.path.join(self.dir, "ids")
        os.mkdir(self.ids, 0o700)
        ranges = sbxtest.subordinate_uids()
        self.assertTrue(ranges, "this user has no subordinate uids (packaging/setup.sh)")
        # Two slots of the range, well above what any run of this user takes.
        self.slot, self.other = ranges[0][-1], ranges[0][-2]

    def lock(self, uid, take=True):
        fd = os.open(os.path.join(self.ids, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o600)
        self.addCleanup(os.close, fd)
        if take:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd

    def userns(self, uid_map, gid_map):
        """A user namespace with nothing but a sleeper in it, mapped by the
        setuid tools as given ([] leaves it unmapped); its fd."""
        holder = subprocess.Popen(["unshare", "--user", "sleep", "60"])
        self.addCleanup(holder.wait)
        self.addCleanup(holder.kill)
        deadline = time.monotonic() + 10
        ours = os.stat("/proc/self/ns/user").st_ino
        while os.stat("/proc/%d/ns/user" % holder.pid).st_ino == ours:
            self.assertLess(time.monotonic(), deadline, "unshare --user never ran")
            time.sleep(0.01)
        for tool, m in (("newuidmap", uid_map), ("newgidmap", gid_map)):
            if m:
                subprocess.run([tool, str(holder.pid)] + [str(x) for x in m], check=True)
        fd = os.open("/proc/%d/ns/user" % holder.pid, os.O_RDONLY | os.O_CLOEXEC)
        self.addCleanup(os.close, fd)
        return fd

    def slot_userns(self, uid):
        return self.userns([0, os.getuid(), 1, SANDBOX_ID, uid, 1],
                           [0, os.getgid(), 1, SANDBOX_ID, uid, 1])

    def serve(self, slot_text, fds, extra=(), env=None):
        """serve with --host-slot; (exit status or None if it got as far as
        Ready, what the control socket said first, stderr)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        args = [HELPER, "serve", "--policy", self.policy, "--control-fd", str(theirs.fileno()),
                "--host-id-dir", self.ids, "--host-slot", slot_text] + list(extra)
        p = subprocess.Popen(args, pass_fds=(theirs.fileno(),) + tuple(fds),
                             stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=dict(os.environ, **env) if env else None)
        theirs.close()
        ours.settimeout(30)
        try:
            try:
                said = ours.recv(65536)
            finally:
                ours.close()  # a served sandbox ends with its socket
            err = p.stderr.read().decode(errors="replace")
            rc = p.wait(timeout=30)
        finally:
            # A helper that failed to answer (the test fails) is not left
            # behind: its pid 1 dies with it (PR_SET_PDEATHSIG).
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stderr.close()
        return rc, said, err

    def test_the_slot_sbxd_would_give_is_taken_and_the_run_made_inside_it(self):
        lock, ns = self.lock(self.slot), self.slot_userns(self.slot)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        p = subprocess.Popen([HELPER, "serve", "--policy", self.policy, "--control-fd",
                              str(theirs.fileno()), "--host-id-dir", self.ids, "--host-slot",
                              "%d,%d,%d,%d" % (self.slot, self.slot, lock, ns)],
                             pass_fds=(theirs.fileno(), lock, ns), stdin=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        theirs.close()
        ours.settimeout(30)
        said = ours.recv(65536)
        self.assertTrue(said.startswith(b"R"), "Ready: %r" % said[:80])
        ours_ns = os.stat("/proc/self/ns/user").st_ino
        with open("/proc/%d/task/%d/children" % (p.pid, p.pid)) as f:
            pid1 = [int(c) for c in f.read().split()
                    if os.stat("/proc/%s/ns/user" % c).st_ino != ours_ns][0]
        chain, fds = userns_chain(pid1)
        for fd in fds:
            self.addCleanup(os.close, fd)
        self.assertEqual(chain[1], ns_inode(ns), "pid 1's namespace is a child of the slot's")
        self.assertEqual(len(chain), 3, chain)
        ours.close()
        self.assertEqual(p.wait(timeout=30), 0, p.stderr.read())
        p.stderr.close()
        self.assertEqual(processes_in(chain[0]), [], "the sandbox is gone")

    def refused(self, slot_text, fds, why, extra=(), status=125, env=None):
        rc, said, err = self.serve(slot_text, fds, extra, env)
        self.assertEqual(rc, status, "refused: %s" % err)
        self.assertFalse(said.startswith(b"R"), "no Ready: %r" % said[:80])
        self.assertIn(why, err)
        return err

    def test_a_lock_of_another_slot_is_refused(self):
        self.lock(self.slot, take=False)  # its file is there too
        lock, ns = self.lock(self.other), self.slot_userns(self.slot)
        self.refused("%d,%d,%d,%d" % (self.slot, self.slot, lock, ns), (lock, ns),
                     "is not the lock file %s/%d" % (self.ids, self.slot))

    def test_a_lock_another_open_holds_is_refused(self):
        self.lock(self.slot)  # held here, through another open
        lock, ns = self.lock(self.slot, take=False), self.slot_userns(self.slot)
        self.refused("%d,%d,%d,%d" % (self.slot, self.slot, lock, ns), (lock, ns),
                     "slot %d is not locked through fd %d" % (self.slot, lock))

    def test_a_namespace_fd_that_is_not_a_user_namespace_is_refused(self):
        lock = self.lock(self.slot)
        net = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.addCleanup(os.close, net)
        self.refused("%d,%d,%d,%d" % (self.slot, self.slot, lock, net), (lock, net),
                     "fd %d is not a user namespace" % net)

    def test_another_slots_namespace_is_refused(self):
        lock, ns = self.lock(self.slot), self.slot_userns(self.other)
        err = self.refused("%d,%d,%d,%d" % (self.slot, self.slot, lock, ns), (lock, ns),
                           "the slot's user namespace maps /proc/self/uid_map as")
        self.assertIn("not 0 to %d and %d to %d alone" % (os.getuid(), SANDBOX_ID, self.slot),
                      err)

    def test_a_namespace_of_other_maps_is_refused(self):
        lock = self.lock(self.slot)
        # The caller's uid alone (what "shared" maps), and an unmapped one.
        for ns in (self.userns([0, os.getuid(), 1], [0, os.getgid(), 1]), self.userns([], [])):
            self.refused("%d,%d,%d,%d" % (self.slot, self.slot, lock, ns), (lock, ns),
                         "the slot's user namespace maps /proc/self/uid_map as")

    def test_a_uid_and_gid_of_two_slots_are_refused(self):
        lock = self.lock(self.slot)
        ns = self.userns([0, os.getuid(), 1, SANDBOX_ID, self.slot, 1],
                         [0, os.getgid(), 1, SANDBOX_ID, self.other, 1])
        self.refused("%d,%d,%d,%d" % (self.slot, self.other, lock, ns), (lock, ns),
                     "uid %d and gid %d are not one slot" % (self.slot, self.other))

    def test_a_namespace_not_made_in_ours_is_refused(self):
        lock = self.lock(self.slot)
        # unshare execs the next: one process, two namespaces down.
        holder = subprocess.Popen(["unshare", "--user", "--map-root-user", "unshare", "--user",
                                   "sleep", "60"])
        self.addCleanup(holder.wait)
        self.addCleanup(holder.kill)
        deadline = time.monotonic() + 10
        while True:
            chain, fds = userns_chain(holder.pid)
            for fd in fds:
                os.close(fd)
            if len(chain) == 3:
                break
            self.assertLess(time.monotonic(), deadline, "the nested unshare never ran")
            time.sleep(0.01)
        ns = os.open("/proc/%d/ns/user" % holder.pid, os.O_RDONLY | os.O_CLOEXEC)
        self.addCleanup(os.close, ns)
        self.refused("%d,%d,%d,%d" % (self.slot, self.slot, lock, ns), (lock, ns),
                     "is not a child of this helper's")

    def test_a_joiner_killed_after_the_clone_fails_the_run_at_once(self):
        """Review 35: pid 1 closes the joiner's report pipe at once, so the
        helper sees the joiner's death rather than wait for a report pid 1
        would hold open (with the close taken out, serve never exits and
        the wait below fails)."""
        lock, ns = self.lock(self.slot), self.slot_userns(self.slot)
        pid_file = os.path.join(self.dir, "pid1")
        env = dict(preload_env(build_shim(JOINER_DIES, "joiner_dies.so")), SHIM_PID1=pid_file)
        err = self.refused("%d,%d,%d,%d" % (self.slot, self.slot, lock, ns), (lock, ns),
                           "the process joining the slot's user namespace died",
                           extra=(), status=125, env=env)
        with open(pid_file) as f:
            pid1 = int(f.read())
        self.assertNotIn("Ready", err)
        # pid 1 (the helper's child by CLONE_PARENT) reads the end of its
        # start pipe once the helper is gone: it does not outlive it.
        deadline = time.monotonic() + 30
        while alive(pid1):
            self.assertLess(time.monotonic(), deadline, "pid 1 %d outlived the helper" % pid1)
            time.sleep(0.01)
        # The slot is free again: the same lock and namespace make a run.
        rc, said, err = self.serve("%d,%d,%d,%d" % (self.slot, self.slot, lock, ns), (lock, ns))
        self.assertTrue(said.startswith(b"R"), "Ready after the failure: %r %s" % (said[:80], err))

    def test_the_option_is_for_serve_with_subordinate_uids(self):
        lock, ns = self.lock(self.slot), self.slot_userns(self.slot)
        text = "%d,%d,%d,%d" % (self.slot, self.slot, lock, ns)
        self.refused(text, (lock, ns), "--host-slot is for serve with --host-uids subordinate",
                     extra=("--host-uids", "shared"), status=2)
        rc = subprocess.run([HELPER, "run", "--policy", self.policy, "--host-id-dir", self.ids,
                             "--host-slot", text, "--", "/bin/true"], pass_fds=(lock, ns),
                            stderr=subprocess.PIPE, text=True)
        self.assertEqual(rc.returncode, 125, rc.stderr)  # run's usage errors
        self.assertIn("--host-slot is for serve", rc.stderr)
        for bad in ("", "1,1,3", "0,1,3,4", "1,1,2,4", "1,1,4,4", "1,1,3,4,5", "1,x,3,4",
                    "-1,1,3,4", "1,1,3,4 "):
            rc, _, err = self.serve(bad, ())
            self.assertEqual(rc, 2, "%r: %s" % (bad, err))
            self.assertIn("must be UID,GID,LOCK_FD,USERNS_FD", err)


if __name__ == "__main__":
    unittest.main()
