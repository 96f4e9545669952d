#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""no_clone3.py CMD [ARG...]: runs CMD under a seccomp filter that makes
clone3 fail with ENOSYS, as a kernel before 5.3 does and as Docker's default
profile makes it (libseccomp through ctypes): what sbx-helper meets where
its exec inits cannot be cloned straight into their cgroup leaves
(CLONE_INTO_CGROUP). Used by the VM stage (check_cgroup.sh) and the
integration test test_clone3_refused.py.

As root the filter is loaded without no_new_privs (CAP_SYS_ADMIN allows
that), so the setuid programs under it (runuser, newuidmap) still work, as
in a container; otherwise no_new_privs comes with it, and a helper under it
needs --host-uids shared (newuidmap can no longer gain its privileges).
Exits 125 if the filter cannot be loaded or does not refuse clone3."""
import ctypes
import errno
import os
import sys

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_ERRNO_ENOSYS = 0x00050000 | errno.ENOSYS
SCMP_FLTATR_CTL_NNP = 3
SYS_CLONE3 = 435  # x86_64 and every architecture since 5.3


def die(msg):
    sys.stderr.write("no_clone3.py: %s\n" % msg)
    sys.exit(125)


def main():
    if len(sys.argv) < 2:
        die("usage: no_clone3.py CMD [ARG...]")
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    ctx = ctypes.c_void_p(lib.seccomp_init(SCMP_ACT_ALLOW))
    if not ctx:
        die("seccomp_init failed")
    if os.geteuid() == 0 and lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, ctypes.c_uint32(0)) < 0:
        die("seccomp_attr_set(NNP, 0) failed")
    nr = lib.seccomp_syscall_resolve_name(b"clone3")
    if nr < 0:
        die("libseccomp does not know clone3")
    rc = lib.seccomp_rule_add(ctx, ctypes.c_uint32(SCMP_ACT_ERRNO_ENOSYS), ctypes.c_int(nr),
                              ctypes.c_uint(0))
    if rc < 0:
        die("seccomp_rule_add(clone3): %s" % os.strerror(-rc))
    rc = lib.seccomp_load(ctx)
    if rc < 0:
        die("seccomp_load: %s" % os.strerror(-rc))
    # The filter must be what refuses: clone3 with no arguments is EINVAL
    # without it.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(ctypes.c_long(SYS_CLONE3), None, ctypes.c_size_t(0)) != -1 or \
            ctypes.get_errno() != errno.ENOSYS:
        die("clone3 is not refused with ENOSYS under the filter")
    try:
        os.execvp(sys.argv[1], sys.argv[1:])
    except OSError as e:
        die("%s: %s" % (sys.argv[1], e.strerror))


main()
