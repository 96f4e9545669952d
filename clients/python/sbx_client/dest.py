# SPDX-License-Identifier: Apache-2.0
"""A local directory that artifacts are written into, as libsbxclient's
sbx_dest_open and sbx_fetch_at do it (clients/c/dest.c): opened once,
refused unless it is the caller's own and no one else can write it, and
every directory and file beneath it made or opened by fd (dir_fd=) without
following a link. Whoever can write a directory can plant a link in it
(keys -> ~/.ssh), and a client that follows it writes a sandbox's bytes
wherever the link points. The directories above it are held to OpenSSH's
rule (check_ancestors)."""
import os
import secrets
import stat

from . import errors

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_REFUSED = "is in the way: refused (never followed or replaced)"


def _kind(mode):
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISREG, "a regular file"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a device"


def _check_own(fd, what):
    """Only the owner may add or swap names in a directory written through; a
    sticky bit stops others removing our names, not adding their own."""
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise errors.FailedPrecondition("%s: not a directory: refused" % what)
    if st.st_uid != os.geteuid():
        raise errors.FailedPrecondition(
            "%s: owned by uid %d, not by you (uid %d): refused, since its owner could plant "
            "links in it" % (what, st.st_uid, os.geteuid()))
    if st.st_mode & 0o022:
        raise errors.FailedPrecondition(
            "%s: writable by %s (mode %04o): refused, since they could plant links in it "
            "(chmod go-w it)" % (what, "others" if st.st_mode & 0o002 else "its group",
                                 stat.S_IMODE(st.st_mode)))


_ANCESTORS_MAX = 2048  # deeper than any path a caller could have named


def _name_of(fd, depth):
    try:
        name = os.readlink("/proc/self/fd/%d" % fd)
        if name.startswith("/"):
            return name
    except OSError:
        pass
    return "the directory %d levels up" % depth


def check_ancestors(fd, what):
    """fd's directory and every one above it, up to the root, held to
    OpenSSH's rule for the paths it trusts (misc.c safe_path), as
    clients/c/dest_ancestors.c does: owned by root or the caller, writable by
    no one else unless sticky (/tmp lets no one rename a name they do not
    own). Whoever can write one could rename our directory beneath it away
    and swap a link in. Walked up by "..": what is checked is where the files
    go, not the words of the path."""
    me = os.geteuid()
    # O_PATH: a parent we may only search (0711) is still walked through.
    try:
        cur = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    except OSError as e:
        raise errors.FailedPrecondition("%s: %s" % (what, e.strerror)) from None
    try:
        st = os.fstat(cur)
        for depth in range(1, _ANCESTORS_MAX + 1):
            if st.st_uid not in (0, me):
                raise errors.FailedPrecondition(
                    "%s: its ancestor %s is owned by uid %d, neither root nor you (uid %d): "
                    "refused, since its owner could swap a link in on the way"
                    % (what, _name_of(cur, depth), st.st_uid, me))
            if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
                raise errors.FailedPrecondition(
                    "%s: its ancestor %s is writable by %s (mode %04o) and not sticky: "
                    "refused, since they could swap a link in on the way (chmod go-w or +t "
                    "it)" % (what, _name_of(cur, depth),
                             "others" if st.st_mode & 0o002 else "its group",
                             stat.S_IMODE(st.st_mode)))
            up = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
            try:
                up_st = os.fstat(up)
            except OSError:
                os.close(up)
                raise
            # The root (of the file system, or of a chroot) is its own parent.
            if (up_st.st_dev, up_st.st_ino) == (st.st_dev, st.st_ino):
                os.close(up)
                return
            os.close(cur)
            cur, st = up, up_st
        raise errors.FailedPrecondition("%s: more than %d directories deep: refused"
                                        % (what, _ANCESTORS_MAX))
    except OSError as e:
        raise errors.FailedPrecondition("%s: %s" % (what, e.strerror)) from None
    finally:
        os.close(cur)


def _open_dir_at(parent, name, what):
    """name (one component) beneath parent as a directory, never through a link."""
    try:
        return os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as e:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError:
            st = None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise errors.FailedPrecondition("%s: %s %s" % (what, _kind(st.st_mode), _REFUSED)) \
                from None
        raise errors.FailedPrecondition("%s: %s" % (what, e.strerror)) from None


def open_dest(path):
    """The destination directory's fd: its last component never followed,
    made (0700: what a sandbox left is the caller's until they share it)
    beneath its parent when missing, and held to _check_own."""
    p = os.fspath(path)
    if not p:
        raise errors.InvalidArgument("an empty directory name")
    # "out/" would follow a link named out: the slash asks for what it points to.
    trimmed = p.rstrip("/") or "/"
    parent, base = os.path.split(trimmed)
    if trimmed == "/" or base in (".", ".."):
        try:
            fd = os.open(trimmed, _DIR)
        except OSError as e:
            raise errors.FailedPrecondition("%s: %s" % (p, e.strerror)) from None
    else:
        # The parents are the caller's words, followed as any tool does.
        try:
            pfd = os.open(parent or ".", _DIR)
        except OSError as e:
            raise errors.FailedPrecondition("%s: %s" % (p, e.strerror)) from None
        try:
            try:
                os.stat(base, dir_fd=pfd, follow_symlinks=False)
                missing = False
            except FileNotFoundError:
                missing = True
            except OSError as e:
                raise errors.FailedPrecondition("%s: %s" % (p, e.strerror)) from None
            if missing:  # nothing is made where others could swap it away
                check_ancestors(pfd, p)
            try:
                os.mkdir(base, 0o700, dir_fd=pfd)
            except FileExistsError:
                pass
            except OSError as e:
                raise errors.FailedPrecondition("%s: %s" % (p, e.strerror)) from None
            fd = _open_dir_at(pfd, base, p)
            try:
                # One that was there is named for what it is first, then its parents.
                _check_own(fd, p)
                if not missing:
                    check_ancestors(pfd, p)
            except BaseException:
                os.close(fd)
                raise
            return fd
        finally:
            os.close(pfd)
    try:
        _check_own(fd, p)
        check_ancestors(fd, p)  # its parents, walked from it
    except BaseException:
        os.close(fd)
        raise
    return fd


def _subdir(top, rel):
    """The directory of rel beneath top, each component made (0755 less the
    umask, never writable by others) or opened without following a link and
    held to _check_own: (its fd, the file's name)."""
    parts = rel.split("/")
    if any(c in ("", ".", "..") for c in parts):
        raise errors.DataLoss("%s: would leave the directory: refused" % rel)
    cur = os.dup(top)
    try:
        for i, name in enumerate(parts[:-1]):
            what = "/".join(parts[:i + 1])
            try:
                os.mkdir(name, 0o755, dir_fd=cur)
            except FileExistsError:
                pass
            except OSError as e:
                raise errors.FailedPrecondition("%s: %s" % (what, e.strerror)) from None
            nxt = _open_dir_at(cur, name, what)
            os.close(cur)
            cur = nxt
            _check_own(cur, what)
        return cur, parts[-1]
    except BaseException:
        os.close(cur)
        raise


def _check_slot(d, name, rel):
    """A regular file is replaced by the rename, never written through (it may
    be a hard link to something else); anything else was put there by
    someone, and the caller should see it."""
    try:
        st = os.stat(name, dir_fd=d, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise errors.FailedPrecondition("%s: %s %s" % (rel, _kind(st.st_mode), _REFUSED))


class Staged:
    """A file being written beneath top (open_dest's fd) at rel: made under a
    new temporary name in rel's directory (O_EXCL, never through a link;
    open for reading too, so that its digest can be read back), renamed
    over rel by commit() only, removed by discard(). A link, a directory, a
    FIFO where the file goes is refused, never followed or removed (asked
    now and again before the rename); a regular file is replaced."""

    def __init__(self, top, rel):
        self.rel, self.fd, self.tmp = rel, -1, None
        self.dir, self.base = _subdir(top, rel)
        try:
            _check_slot(self.dir, self.base, rel)
            for _ in range(16):
                name = ".sbx-fetch-%s.tmp" % secrets.token_hex(6)
                try:
                    self.fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                      | os.O_CLOEXEC, 0o600, dir_fd=self.dir)
                except FileExistsError:
                    continue
                self.tmp = name
                return
            raise errors.Internal("%s: no free temporary name" % rel)
        except BaseException:
            self.discard()
            raise

    def commit(self, mode):
        """The mode on the fd, never on a name someone could have swapped;
        the permission bits only: a caller that passes on what a server
        listed must not get a set-id file of its own from a hostile one.
        Synced, then renamed into place."""
        os.fchmod(self.fd, mode & 0o777)
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        _check_slot(self.dir, self.base, self.rel)
        os.rename(self.tmp, self.base, src_dir_fd=self.dir, dst_dir_fd=self.dir)
        self.tmp = None
        self.discard()

    def discard(self):
        """The temporary file removed (unless committed) and every fd closed."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.tmp is not None:
            try:
                os.unlink(self.tmp, dir_fd=self.dir)
            except OSError:
                pass  # already gone is what we want
            self.tmp = None
        if self.dir >= 0:
            os.close(self.dir)
            self.dir = -1


def write_file(top, rel, mode, fill):
    """Writes rel beneath top (open_dest's fd) as a Staged file: fill(binary
    file) writes and verifies the bytes and returns what write_file
    returns; only then is it given mode and renamed over rel."""
    f = Staged(top, rel)
    try:
        with os.fdopen(os.dup(f.fd), "wb") as out:
            got = fill(out)
        f.commit(mode)
        return got
    finally:
        f.discard()
