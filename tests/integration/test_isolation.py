# SPDX-License-Identifier: Apache-2.0
"""Invariants 1-3, attacked from inside: host files, the network, credentials."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time

from sbxtest import PYTHON, SandboxTest, policy, procs_with, read_text, run_tests

SECRET = "sbx-secret-7f3a9c-do-not-leak"


class FileSystem(SandboxTest):
    def test_host_sentinel_outside_mounts_is_not_readable(self):
        sentinel = os.path.join(self.tmp, "host-sentinel")
        with open(sentinel, "w") as f:
            f.write(SECRET)
        os.chmod(self.tmp, 0o755)
        home_sentinel = os.path.join(os.path.expanduser("~"), ".sbx-sentinel")
        try:
            with open(home_sentinel, "w") as f:
                f.write(SECRET)
        except OSError:
            home_sentinel = None
        code = (
            "import os,sys\n"
            "paths = sys.argv[1:]\n"
            "for p in paths:\n"
            "    try:\n"
            "        open(p).read(); print('READ', p)\n"
            "    except FileNotFoundError: print('ENOENT', p)\n"
            "    except PermissionError: print('EACCES', p)\n"
            "hits = []\n"
            "for root, dirs, files in os.walk('/', onerror=lambda e: None):\n"
            "    if root in ('/proc', '/usr'):\n"
            "        dirs[:] = []; continue\n"
            "    for n in files:\n"
            "        p = os.path.join(root, n)\n"
            "        try:\n"
            "            if os.path.isfile(p) and os.path.getsize(p) < 65536 and b'" + SECRET[::-1] + "'[::-1] in open(p,'rb').read(): hits.append(p)\n"
            "        except OSError: pass\n"
            "print('HITS', hits)\n")
        targets = [sentinel, "/etc/shadow", "/root/.bashrc", "/home", "/var/log/syslog"]
        if home_sentinel:
            targets.append(home_sentinel)
        try:
            r = self.run_sandbox([PYTHON, "-c", code] + targets,
                                 pol=policy(limits={"script_seconds": 60}))
        finally:
            if home_sentinel:
                os.unlink(home_sentinel)
        self.assertEqual(r.rc, 0, r)
        for t in targets:
            self.assertIn(f"ENOENT {t}", r.stdout)
        self.assertIn("HITS []", r.stdout)

    def test_root_has_only_the_declared_places(self):
        r = self.sh("ls -A /")
        self.assertEqual(r.rc, 0, r)
        entries = set(r.stdout.split())
        allowed = {"bin", "data", "dev", "etc", "lib", "lib32", "lib64", "libx32", "out",
                   "proc", "sbin", "tmp", "usr"}
        self.assertLessEqual(entries, allowed, r)
        self.assertLessEqual({"data", "out", "usr", "etc", "proc", "dev", "tmp"}, entries, r)
        for absent in ("home", "root", "var", "sys", "run", "mnt", "boot", "srv"):
            self.assertNotIn(absent, r.stdout.split())

    def test_data_is_read_only(self):
        with open(os.path.join(self.data, "input.csv"), "w") as f:
            f.write("a,b\n")
        r = self.sh("echo x > /data/new 2>&1; echo rc=$?; echo y >> /data/input.csv; echo rc=$?;"
                    " rm /data/input.csv; echo rc=$?; cat /data/input.csv")
        self.assertIn("Read-only file system", r.stderr + r.stdout)
        self.assertEqual(r.stdout.count("rc=1") + r.stdout.count("rc=2"), 3, r)
        self.assertIn("a,b", r.stdout)
        self.assertEqual(read_text(os.path.join(self.data, "input.csv")), "a,b\n")
        self.assertEqual(sorted(os.listdir(self.data)), ["input.csv"])

    def test_image_root_etc_and_dev_are_not_writable(self):
        code = ("import errno,os\n"
                "for p in ['/usr/bin/x', '/x', '/etc/passwd', '/etc/new', '/bin/x', '/dev/x', '/proc/sys/kernel/hostname']:\n"
                "    try:\n"
                "        open(p, 'a').write('x'); print('WROTE', p)\n"
                "    except OSError as e: print(errno.errorcode[e.errno], p)\n")
        r = self.py(code)
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("WROTE", r.stdout)
        for p in ("/usr/bin/x", "/x", "/etc/new", "/bin/x", "/dev/x"):
            self.assertIn(f"EROFS {p}", r.stdout)
        # An existing file of sbx's /etc belongs to the run's uid 0 (the
        # caller), not to the sandbox user, which runs as a host uid of its
        # own: permission fails before the read-only mount is reached.
        self.assertTrue("EACCES /etc/passwd" in r.stdout or "EROFS /etc/passwd" in r.stdout,
                        r.stdout)

    def test_read_only_cannot_be_undone(self):
        # The syscalls themselves, not mount(8), which gives up before asking.
        code = ("import ctypes,errno,os\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096\n"
                "for target in [b'/usr', b'/', b'/data']:\n"
                "    rc = libc.mount(None, target, None, MS_REMOUNT | MS_BIND, None)\n"
                "    print(target.decode(), rc, errno.errorcode[ctypes.get_errno()])\n"
                "rc = libc.umount2(b'/data', 2)\n"
                "print('umount', rc, errno.errorcode[ctypes.get_errno()])\n"
                "try:\n    open('/usr/x', 'w'); print('WROTE')\n"
                "except OSError as e: print(errno.errorcode[e.errno])\n")
        r = self.py(code)
        self.assertEqual(r.stdout.split("\n")[:5],
                         ["/usr -1 EPERM", "/ -1 EPERM", "/data -1 EPERM", "umount -1 EPERM", "EROFS"], r)

    def test_out_is_bounded_by_out_mb(self):
        r = self.sh("dd if=/dev/zero of=/out/big bs=1M count=20 2>&1; ls -l /out/big",
                    pol=policy(limits={"out_mb": 4}))
        self.assertIn("No space left on device", r.stdout)
        size = int(r.stdout.strip().split("\n")[-1].split()[4])
        self.assertLessEqual(size, 4 << 20)

    def test_mounts_are_nosuid_nodev(self):
        r = self.sh("cat /proc/self/mountinfo")
        self.assertEqual(r.rc, 0, r)
        for line in r.stdout.strip().split("\n"):
            fields = line.split()
            mnt, opts = fields[4], fields[5]
            self.assertIn("nosuid", opts, line)
            # Device nodes and ptys must allow devices; nothing else does.
            # (and the /dev/null binds that mask /proc files, which read as empty).
            if (not mnt.startswith("/dev/") or mnt == "/dev/shm") and fields[3] != "/null":
                self.assertIn("nodev", opts, line)
            if mnt in ("/", "/usr", "/data", "/etc/ld.so.cache", "/dev", "/proc/sys"):
                self.assertIn("ro", opts.split(","), line)

    def test_proc_hides_host_and_masks_kernel_views(self):
        r = self.sh("ls /proc | grep -c '^[0-9]'; cat /proc/kcore | wc -c; cat /proc/keys | wc -c;"
                    " test -e /proc/1/cmdline && echo pid1-visible || echo pid1-hidden;"
                    " (echo 1 > /proc/sys/vm/drop_caches) 2>&1; ls /sys 2>&1")
        lines = r.stdout.strip().split("\n")
        # Only this exec's own processes: sh and its pipeline. The sandbox's
        # pid 1 and the exec's init are privileged or not dumpable: hidden.
        self.assertLessEqual(int(lines[0]), 4, r)
        self.assertEqual(lines[1:4], ["0", "0", "pid1-hidden"], r)
        self.assertIn("Read-only file system", r.stdout)
        self.assertIn("cannot access '/sys'", r.stdout)

    def test_proc_masks_what_identifies_the_host_and_they_stay(self):
        # Empty (or absent) inside, and no way to take the mask off: umount
        # and a bind over are refused (seccomp, and no capabilities).
        files = ["cmdline", "config.gz", "diskstats", "partitions", "swaps", "modules",
                 "vmallocinfo", "sys/kernel/random/boot_id", "kallsyms", "kcore", "keys",
                 "timer_list", "sched_debug", "sysrq-trigger", "kmsg", "locks"]
        # fs/ names the host's disks (ext4/<disk>/mb_groups), bus/ holds
        # PCI configuration space.
        dirs = ["acpi", "scsi", "asound", "driver", "fs", "bus"]
        code = ("import ctypes, errno, os, sys\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "def err(rc): return 'OK' if rc == 0 else errno.errorcode[ctypes.get_errno()]\n"
                "for name in sys.argv[1:]:\n"
                "    p = '/proc/' + name\n"
                "    if not os.path.exists(p): print(name, 'absent'); continue\n"
                "    try:\n"
                "        n = len(os.listdir(p)) if os.path.isdir(p) else len(open(p, 'rb').read())\n"
                "    except OSError as e: n = errno.errorcode[e.errno]\n"
                "    print(name, n, err(libc.umount2(p.encode(), 2)),\n"
                "          err(libc.mount(b'/proc/self/status', p.encode(), None, 4096, None)))\n")
        r = self.run_sandbox([PYTHON, "-c", code] + files + dirs)
        self.assertEqual(r.rc, 0, r)
        lines = dict(l.split(" ", 1) for l in r.stdout.strip().split("\n"))
        for name in files + dirs:
            self.assertIn(name, lines, r)
            if lines[name] != "absent":
                self.assertEqual(lines[name], "0 EPERM EPERM", (name, r))
        # The host's own are not empty: the masks are what makes them so.
        with open("/proc/cmdline", "rb") as f:
            self.assertGreater(len(f.read()), 0)
        with open("/proc/sys/kernel/random/boot_id") as f:
            self.assertEqual(len(f.read().strip()), 36)
        self.assertNotEqual(lines["cmdline"], "absent")
        self.assertNotEqual(lines["sys/kernel/random/boot_id"], "absent")
        self.assertNotEqual(lines["fs"], "absent")
        self.assertGreater(len(os.listdir("/proc/fs")), 0)

    def test_proc_locks_shows_no_host_ofd_lock(self):
        # An open file description lock carries no pid, so the pid
        # namespace's filter of /proc/locks kept the host's: a sandbox read
        # the device and inode of what sbxd, other runs and other users held
        # locked (the VM stage's qemu disk images among them).
        import fcntl
        import struct
        with tempfile.NamedTemporaryFile(dir=self.tmp) as f:
            lock = struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0)
            fcntl.fcntl(f.fileno(), fcntl.F_OFD_SETLK, lock)
            ino = os.fstat(f.fileno()).st_ino
            with open("/proc/locks") as host:
                self.assertIn(":%d " % ino, host.read())
            r = self.sh("cat /proc/locks; echo end")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn(":%d " % ino, r.stdout, r)
        self.assertEqual(r.stdout.strip(), "end", r)

    def test_proc_pressure_is_read_only(self):
        # Host-wide, and its files take PSI triggers (kernel work per
        # trigger) from anyone who can open them for writing.
        if not os.path.exists("/proc/pressure/cpu"):
            self.skipTest("no PSI on this kernel")
        r = self.py("import errno\n"
                    "try:\n    open('/proc/pressure/cpu', 'w'); print('WRITABLE')\n"
                    "except OSError as e: print(errno.errorcode[e.errno])\n"
                    "print(len(open('/proc/pressure/cpu').read()) > 0)\n")
        self.assertEqual(r.stdout.split(), ["EROFS", "True"], r)

    def test_host_processes_are_invisible_and_unsignalable(self):
        me = os.getpid()
        r = self.py(f"import os\ntry:\n    os.kill({me}, 0); print('SIGNALED')\nexcept ProcessLookupError: print('ESRCH')\n"
                    "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("ESRCH", r.stdout)
        pids = eval(r.stdout.strip().split("\n")[-1])
        self.assertLess(max(pids), 100, pids)  # only the sandbox's own small pids


class Network(SandboxTest):
    def test_host_loopback_tcp_service_is_unreachable(self):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        port = srv.getsockname()[1]
        accepted = []

        def accept():
            srv.settimeout(5)
            try:
                c, _ = srv.accept()
                accepted.append(c)
            except OSError:
                pass
        t = threading.Thread(target=accept)
        t.start()
        try:
            r = self.py(f"import socket,errno\ns=socket.socket()\ns.settimeout(3)\n"
                        f"try:\n    s.connect(('127.0.0.1', {port})); print('CONNECTED')\n"
                        f"except OSError as e: print(errno.errorcode.get(e.errno, e))\n")
        finally:
            srv.close()
            t.join()
        self.assertEqual(r.stdout.strip(), "ECONNREFUSED", r)
        self.assertEqual(accepted, [])

    def test_host_unix_sockets_are_unreachable(self):
        path = os.path.join(self.tmp, "host.sock")
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(path)
        srv.listen(1)
        abstract = socket.socket(socket.AF_UNIX)
        abstract.bind(b"\0sbx-test-abstract-" + str(os.getpid()).encode())
        abstract.listen(1)
        try:
            r = self.py("import socket,errno,sys\n"
                        "for a in [sys.argv[1], b'\\0sbx-test-abstract-' + sys.argv[2].encode(), '/run/systemd/private', '/var/run/docker.sock']:\n"
                        "    s = socket.socket(socket.AF_UNIX)\n"
                        "    try:\n        s.connect(a); print('CONNECTED')\n"
                        "    except OSError as e: print(errno.errorcode.get(e.errno, e))\n"
                        .replace("sys.argv[1]", repr(path)).replace("sys.argv[2]", repr(str(os.getpid()))))
        finally:
            srv.close()
            abstract.close()
        self.assertEqual(r.stdout.split(), ["ENOENT", "ECONNREFUSED", "ENOENT", "ENOENT"], r)

    def test_no_dns(self):
        r = self.py("import socket\ntry:\n    print(socket.getaddrinfo('deb.debian.org', 443))\n"
                    "except socket.gaierror as e: print('GAIERROR', e.errno)\n")
        self.assertIn("GAIERROR", r.stdout, r)

    def test_one_shot_exec_makes_no_resolver_or_watch(self):
        # Only sbxd reads egress deny's resolver and connect watch; the
        # one-shot driver has no reader (helper/init.h), so its exec makes
        # neither: a resolver bound on 127.0.0.1:53 that nobody answers
        # would hold a lookup to its timeout, and the watch's close waits
        # for an RCU grace period on the run's path. Looked at first thing:
        # the exec's own network namespace, before its driver could have
        # closed what it was handed.
        r = self.run_sandbox(["/bin/cat", "/proc/net/udp", "/proc/net/packet"])
        self.assertEqual(r.rc, 0, r)
        lines = r.stdout.splitlines()
        self.assertFalse([l for l in lines if ":0035 " in l], r.stdout)  # port 53
        self.assertEqual([l for l in lines if l.split()[0] not in ("sl", "sk")], [], r.stdout)

    def test_no_route_outside(self):
        # 192.0.2.1 is TEST-NET-1. With egress deny every address is routed
        # to the exec's own loopback (so sbxd's connect watch sees attempts):
        # a connect is refused at once by the sandbox itself, and a listener
        # of the sandbox's own on 0.0.0.0 is what answers "192.0.2.1", i.e.
        # the packet never had anywhere else to go.
        r = self.py("import socket,errno\ns=socket.socket()\ns.settimeout(3)\n"
                    "try:\n    s.connect(('192.0.2.1', 80)); print('CONNECTED')\n"
                    "except OSError as e: print(errno.errorcode.get(e.errno, e))\n"
                    "s6=socket.socket(socket.AF_INET6)\ns6.settimeout(3)\n"
                    "try:\n    s6.connect(('2001:db8::1', 80)); print('CONNECTED')\n"
                    "except OSError as e: print(errno.errorcode.get(e.errno, e))\n"
                    "srv=socket.socket(); srv.bind(('0.0.0.0', 8080)); srv.listen(1)\n"
                    "c=socket.create_connection(('192.0.2.1', 8080), timeout=3)\n"
                    "a,peer=srv.accept(); print(a.getsockname()[0], peer[0])\n")
        self.assertEqual(r.stdout.split(),
                         ["ECONNREFUSED", "ECONNREFUSED", "192.0.2.1", "192.0.2.1"], r)

    def test_only_loopback_exists(self):
        r = self.sh("cat /proc/net/dev | tail -n +3 | cut -d: -f1; cat /proc/net/route | wc -l")
        self.assertEqual(r.stdout.split(), ["lo", "1"], r)  # route table: header only


class Credentials(SandboxTest):
    def test_helper_environment_never_reaches_the_sandbox(self):
        env = dict(os.environ, SBX_TEST_SECRET=SECRET, AWS_SECRET_ACCESS_KEY=SECRET)
        r = self.sh("cat /proc/self/environ; cat /proc/1/environ; cat /proc/*/environ;"
                    " env; echo END", env=env)
        self.assertIn("END", r.stdout)
        self.assertNotIn(SECRET, r.stdout + r.stderr)

    def test_secret_not_in_any_readable_process_memory_view(self):
        env = dict(os.environ, SBX_TEST_SECRET=SECRET)
        code = ("import os\nfound=[]\n"
                "for p in os.listdir('/proc'):\n"
                "    if not p.isdigit(): continue\n"
                "    for f in ('environ','cmdline'):\n"
                "        try:\n"
                "            if b'" + SECRET[::-1] + "'[::-1] in open(f'/proc/{p}/{f}','rb').read(): found.append((p,f))\n"
                "        except OSError: pass\n"
                "print('FOUND', found)\n")
        r = self.run_sandbox([PYTHON, "-c", code], env=env)
        self.assertIn("FOUND []", r.stdout, r)

    def test_stdin_is_never_the_callers_own_file_or_directory(self):
        victim = os.path.join(self.tmp, "input.txt")
        with open(victim, "w") as f:
            f.write("original\n")
        code = ("import os,stat\n"
                "st = os.fstat(0); print('FIFO' if stat.S_ISFIFO(st.st_mode) else 'NOT-A-PIPE')\n"
                "try:\n    open('/proc/self/fd/0', 'a').write('tampered'); print('WROTE')\n"
                "except OSError as e: print('ERR', e.errno)\n"
                "try:\n    os.fchmod(0, 0o4777); print('CHMOD')\n"
                "except OSError as e: print('ERR', e.errno)\n")
        for source in (victim, self.tmp):
            fd = os.open(source, os.O_RDONLY)
            try:
                r = self.run_sandbox([PYTHON, "-c", code], stdin=fd)
            finally:
                os.close(fd)
            self.assertEqual(r.rc, 0, r)
            self.assertTrue(r.stdout.startswith("FIFO\n"), r)
        self.assertEqual(read_text(victim), "original\n")
        self.assertEqual(os.stat(victim).st_mode & 0o7777, 0o644)
        self.assertEqual(os.stat(self.tmp).st_mode & 0o7000, 0)

    def test_helper_fds_are_not_inherited(self):
        extra = os.open(os.path.join(self.tmp, "leak"), os.O_RDWR | os.O_CREAT)
        os.set_inheritable(extra, True)
        try:
            p = subprocess.run([os.environ["SBX_HELPER"], "run", "--policy",
                                self.write_policy(policy()), "--", "/bin/ls", "/proc/self/fd"],
                               capture_output=True, text=True, pass_fds=(extra,), timeout=60)
        finally:
            os.close(extra)
        self.assertEqual(p.returncode, 0, p)
        # 0-2 and the fd ls opened for the directory listing.
        self.assertEqual(sorted(int(x) for x in p.stdout.split()), [0, 1, 2, 3], p)


# From inside an exec, at exec init (pid 1 of the exec's pid namespace, same
# uid as the command): lower its RLIMIT_CPU, starve it, signal it. Each call
# prints its errno name; then the script floods exec init with forwarded
# signals for FLOOD seconds, which with a 1 s RLIMIT_CPU had the kernel kill
# it (the exec then ended as sbx's own failure, setup_failed/125).
EXEC_INIT_ATTACK = r"""
import ctypes, errno, os, platform, resource, signal, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
NR_PRLIMIT64 = {"x86_64": 302, "aarch64": 261}[platform.machine()]
NR_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}[platform.machine()]
class RL(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_uint64), ("max", ctypes.c_uint64)]
def raw(nr, *args):
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    r = libc.syscall(ctypes.c_long(nr), *args)
    return "OK" if r >= 0 else errno.errorcode[ctypes.get_errno()]
def call(f):
    try:
        f(); return "OK"
    except OSError as e:
        return errno.errorcode[e.errno]
one = RL(1, 1)
print("prlimit-init", raw(NR_PRLIMIT64, 1, resource.RLIMIT_CPU, ctypes.byref(one), None))
# The kernel reads the pid as 32 bits: 1 << 32 | 1 is pid 1 too.
print("prlimit-init-highbits", raw(NR_PRLIMIT64, (1 << 32) | 1, resource.RLIMIT_CPU, ctypes.byref(one), None))
print("prlimit-python", call(lambda: resource.prlimit(1, resource.RLIMIT_CPU, (1, 1))))
print("affinity-init", call(lambda: os.sched_setaffinity(1, {0})))
print("scheduler-init", call(lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0))))
print("nice-init", call(lambda: os.setpriority(os.PRIO_PROCESS, 1, 19)))
print("nice-user", call(lambda: os.setpriority(os.PRIO_USER, os.getuid(), 19)))
print("ioprio-init", raw(NR_IOPRIO_SET, 1, 1, 3 << 13))  # IOPRIO_WHO_PROCESS, CLASS_IDLE
print("ioprio-user", raw(NR_IOPRIO_SET, 3, os.getuid(), 3 << 13))
# Signals from inside its namespace do not reach exec init unless it
# handles them (it only forwards the few SignalRequest may carry).
for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGSEGV, signal.SIGXCPU):
    os.kill(1, sig)
libc.syscall(ctypes.c_long(424), os.pidfd_open(1), signal.SIGKILL, None, 0)  # pidfd_send_signal
# What must keep working: the process's own limits and scheduling, and a
# thread's (by tid, as pthread_setaffinity_np does).
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
resource.getrlimit(resource.RLIMIT_NOFILE)
resource.prlimit(0, resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE))
os.sched_setaffinity(0, os.sched_getaffinity(0))
# Its own nice value, made no lower (a test run under `nice` starts above 1).
os.setpriority(os.PRIO_PROCESS, 0, max(1, os.getpriority(os.PRIO_PROCESS, 0)))
tids = []
t = threading.Thread(target=lambda: (tids.append(threading.get_native_id()), time.sleep(0.2)))
t.start(); time.sleep(0.05)
os.sched_setaffinity(tids[0], os.sched_getaffinity(0)); t.join()
print("own-limits OK", flush=True)
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    os.kill(1, signal.SIGUSR1)
print("flood survived", flush=True)
"""


class ExecInit(SandboxTest):
    def test_command_cannot_limit_starve_or_kill_exec_init(self):
        r = self.run_sandbox([PYTHON, "-c", EXEC_INIT_ATTACK, "4"],
                             pol=policy(limits={"script_seconds": 20}))
        got = dict(l.split(" ", 1) for l in r.stdout.strip().split("\n"))
        for name in ("prlimit-init", "prlimit-init-highbits", "prlimit-python", "affinity-init",
                     "scheduler-init", "nice-init", "nice-user", "ioprio-init", "ioprio-user"):
            self.assertEqual(got.get(name), "EPERM", (name, r))
        self.assertEqual(got.get("own-limits"), "OK", r)
        # Exec init lived to report the command's own end.
        self.assertEqual(got.get("flood"), "survived", r)
        self.assertEqual((r.rc, r.result["exit_reason"]), (0, "exited"), r)

    def test_exec_init_killed_while_the_command_runs_is_not_setup_failed(self):
        # The host (this uid) kills exec init: the command was running, so
        # the end is "signaled", never setup_failed/125, which says nothing
        # ran and invites a retry of what may have half happened.
        marker = "1002.%d" % os.getpid()
        p = subprocess.Popen([os.environ["SBX_HELPER"], "run", "--policy",
                              self.write_policy(policy()), "--result",
                              os.path.join(self.tmp, "result.json"), "--", "/bin/sleep", marker],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            init = None
            deadline = time.monotonic() + 10
            while init is None and time.monotonic() < deadline:
                # host, sandbox, exec: exec init is pid 1 of the third
                # namespace, the command (already running) pid 2.
                inits, commands = [], []
                for pid, _ in procs_with("sleep " + marker):
                    try:
                        status = read_text("/proc/%d/status" % pid)
                    except OSError:
                        continue
                    nspid = [l for l in status.split("\n") if l.startswith("NSpid:")]
                    levels = nspid[0].split()[1:] if nspid else []
                    if len(levels) == 3:
                        (inits if levels[2] == "1" else commands).append(pid)
                if inits and commands:
                    init = inits[0]
                time.sleep(0.05)
            self.assertIsNotNone(init, "exec init not found")
            os.kill(init, signal.SIGKILL)
            out, err = p.communicate(timeout=30)
        finally:
            p.kill()
            p.wait()
        with open(os.path.join(self.tmp, "result.json")) as f:
            res = json.load(f)
        self.assertEqual((p.returncode, res["exit_reason"], res["signal"]), (137, "signaled", 9),
                         (res, err))
        self.assertIn("exec init was killed by signal 9 while the command ran", err)


if __name__ == "__main__":
    run_tests()
