# SPDX-License-Identifier: Apache-2.0
"""The shape agent developers know from E2B and Modal, on top of the client:

    from sbx_client import Sandbox
    with Sandbox.create(data={"in.csv": b"a,b\\n1,2\\n"}) as sbx:
        r = sbx.commands.run("wc -l /data/in.csv > /out/n.txt; cat /out/n.txt")
        print(r.exit_code, r.stdout)
        print(sbx.files.read("/out/n.txt"))

A Sandbox is one run of sbxd (its sandbox_id is the run's handle); it is
torn down by kill() or by leaving the with block. Defaults are those of
`sbxctl run`: with no policy the document {"image": "host"} (egress deny,
every limit at its documented default). Endpoints as connect() and fleet()
take them: an argument, $SBX_ENDPOINTS, $SBX_ENDPOINT, else the local
socket; several (a list, a comma list) or dns+srv://_sbx._tcp.NAME place
the run on one host. The token and TLS files come from $SBX_TOKEN and
$SBX_TLS_CA / $SBX_TLS_CERT / $SBX_TLS_KEY / $SBX_TLS_SERVER_NAME when not
given, as sbxctl reads them."""
from __future__ import annotations

import codecs
import dataclasses
import json
import math
import os
import signal as _signal
import tempfile
import threading
import time
from typing import (IO, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional,
                    Sequence, Union)

from . import dest as _dest
from . import errors, files as _files, wire
from .client import Client, ExecStream, Process, Run
from .placement import SRV_SCHEME, Fleet
from .proto import policy_pb2, sandbox_pb2 as pb
from .results import ExecResult, Fetched, Manifest

#: The policy `sbxctl run` sends when given none: every other key takes
#: its documented default (image host, egress deny, the default limits).
DEFAULT_POLICY: Dict[str, Any] = {"image": "host"}
#: Pauses between WriteStdin calls while the command's stdin pipe is full
#: (seconds, doubling).
_STDIN_PAUSE_MIN, _STDIN_PAUSE_MAX = 0.002, 0.1
#: A WriteStdin chunk (WriteStdinRequest.data: at most 1 MiB).
STDIN_CHUNK = 1 << 20

OutputCallback = Callable[[str], Any]
StdinSource = Union[bytes, bytearray, memoryview, str, IO[bytes], IO[str], Iterable[bytes],
                    Iterable[str]]
DataSource = Union[bytes, bytearray, str, "os.PathLike[str]", IO[bytes], IO[str]]


def _env_default(name: str) -> Optional[str]:
    v = os.environ.get(name)
    return v if v else None


def _endpoints(endpoint: Union[str, Sequence[str], None]) -> List[str]:
    if endpoint is None:
        endpoint = (_env_default("SBX_ENDPOINTS") or _env_default("SBX_ENDPOINT")
                    or wire.DEFAULT_ENDPOINT)
    items = [endpoint] if isinstance(endpoint, str) else list(endpoint)
    out = []
    for item in items:
        out += [e.strip() for e in item.split(",")]
    return out


def _tls_default(endpoints: List[str], tls: Any) -> Any:
    if tls is not None or not any(e.startswith(("tls+tcp://", SRV_SCHEME)) for e in endpoints):
        return tls
    ca = _env_default("SBX_TLS_CA")
    if not ca:
        return None
    return wire.TLS(ca=ca, cert=_env_default("SBX_TLS_CERT"), key=_env_default("SBX_TLS_KEY"),
                    server_name=_env_default("SBX_TLS_SERVER_NAME"))


def build_policy(policy: Any = None, image: Optional[str] = None, timeout: Optional[float] = None,
                 env: Optional[Mapping[str, str]] = None,
                 allow: Optional[Sequence[str]] = None) -> Any:
    """The policy for CreateRun: `policy` (a dict, a JSON string, a path to
    a JSON file, a policy_pb2.Policy, or None for sbxctl run's default
    {"image": "host"}) with image, timeout (the sandbox's lifetime:
    limits.run_seconds, whole seconds), env (policy env, for every command)
    and allow (egress allowlist entries, HOST:PORT) written over it, as
    sbxctl run's --image, --run-timeout, -e and --allow do."""
    if image is None and timeout is None and not env and not allow:
        return dict(DEFAULT_POLICY) if policy is None else policy
    if isinstance(policy, policy_pb2.Policy):
        raise errors.InvalidArgument("image/timeout/env/allow: not with a Policy message "
                                     "(set its fields instead)")
    if policy is None:
        doc: Dict[str, Any] = dict(DEFAULT_POLICY)
    elif isinstance(policy, dict):
        doc = json.loads(json.dumps(policy))
    else:
        from .client import _policy_json
        try:
            doc = json.loads(_policy_json(policy))
        except ValueError as e:
            raise errors.InvalidArgument("policy: not JSON: %s" % e) from None
        if not isinstance(doc, dict):
            raise errors.InvalidArgument("policy: not a JSON object")
    if image is not None:
        doc["image"] = image
    if timeout is not None:
        secs = math.ceil(timeout)
        if secs < 1:
            raise errors.InvalidArgument("timeout %r: the sandbox's lifetime in seconds, >= 1"
                                         % timeout)
        doc.setdefault("limits", {})["run_seconds"] = secs
    if env:
        doc.setdefault("env", {}).update({str(k): str(v) for k, v in env.items()})
    if allow:
        eg = doc.setdefault("egress", {})
        eg["policy"] = "allowlist"
        eg.setdefault("allow", []).extend(allow)
    return doc


def _data_inputs(data: Any) -> Dict[str, Any]:
    """create(data=...) as create_run's inputs: a local directory (every
    regular file under it, as sbxctl run --data) or {path: bytes | str |
    local path | file}."""
    if data is None:
        return {}
    if isinstance(data, (str, os.PathLike)):
        found, _skipped = _files.scan_dir(os.fspath(data))
        return found
    if isinstance(data, Mapping):
        out = {}
        for path, src in data.items():
            out[path] = _source(path, src)
        return out
    raise errors.InvalidArgument("data: a local directory or {path: bytes | file}")


def _source(path: str, src: Any) -> Any:
    """bytes for Input: str is text, os.PathLike a local file, a file object
    is read."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src)
    if isinstance(src, str):
        return src.encode()
    if isinstance(src, os.PathLike):
        return os.fspath(src)
    if hasattr(src, "read"):
        return _spool(path, src)
    raise errors.InvalidArgument("%s: bytes, str, a path (pathlib) or a file, not %s"
                                 % (path, type(src).__name__))


class _Spooled(os.PathLike):
    """A file object copied into a private temporary file: Input hashes a
    local file and sends it in chunks, so a large stream never sits whole in
    memory. Removed when collected."""

    def __init__(self, path: str):
        self.path = path

    def __fspath__(self) -> str:
        return self.path

    def __del__(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass


def _spool(name: str, f: Any) -> Any:
    first = f.read(_files.CHUNK)
    if isinstance(first, str):
        first = first.encode()
        text = True
    else:
        text = False
    if len(first) < _files.CHUNK:
        return bytes(first)
    fd, tmp = tempfile.mkstemp(prefix=".sbx-write-")
    with os.fdopen(fd, "wb") as out:
        out.write(first)
        while True:
            b = f.read(_files.CHUNK)
            if not b:
                break
            out.write(b.encode() if text else b)
    return _Spooled(tmp)


@dataclasses.dataclass
class CommandResult:
    """What a command did, in E2B's names: stdout and stderr as text (UTF-8,
    undecodable bytes replaced; the bytes are in .result), exit_code as a
    shell says it (the exit code, 128+N for signal N, 124 for a timeout, 137
    out of memory, 125 when it could not start), exit_reason ("exited",
    "signaled", "timeout", "oom", ...), error (None when it exited 0, else
    what happened). .result is the full ExecResult (usage, byte counts,
    dropped output)."""
    stdout: str
    stderr: str
    exit_code: int
    exit_reason: str
    error: Optional[str]
    exec_id: str
    result: ExecResult = dataclasses.field(repr=False)

    @classmethod
    def of(cls, res: ExecResult) -> "CommandResult":
        """The CommandResult of an ExecResult."""
        return cls(stdout=(res.stdout or b"").decode("utf-8", "replace"),
                   stderr=(res.stderr or b"").decode("utf-8", "replace"),
                   exit_code=res.returncode, exit_reason=res.reason,
                   error=None if res.ok else res.describe(), exec_id=res.exec_id, result=res)

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.result.ok


class CommandHandle:
    """A command started with background=True: wait() for its
    CommandResult, kill() it, signal() it; callbacks keep being called from
    a thread of the handle while it runs."""

    def __init__(self, commands: "Commands", process: Process, on_stdout: Optional[OutputCallback],
                 on_stderr: Optional[OutputCallback], feeder: Optional[threading.Thread]):
        self.exec_id: str = process.exec_id
        self.process = process
        self._commands = commands
        self._feeder = feeder
        self._result: Optional[CommandResult] = None
        self._error: Optional[BaseException] = None
        self._done = threading.Event()
        self._pump = threading.Thread(target=self._run, args=(on_stdout, on_stderr),
                                      daemon=True)
        self._pump.start()

    def _run(self, on_stdout: Optional[OutputCallback],
             on_stderr: Optional[OutputCallback]) -> None:
        try:
            self._result = self._commands._collect(self.process, on_stdout, on_stderr,
                                                   self._feeder)
        except BaseException as e:  # given to wait()
            self._error = e
        finally:
            self._done.set()

    def wait(self, timeout: Optional[float] = None) -> CommandResult:
        """Blocks until the command ended and returns its CommandResult (an
        error that ended the watching is raised). timeout: seconds to wait;
        DeadlineExceeded when it ran longer (the command goes on)."""
        if not self._done.wait(timeout):
            raise errors.DeadlineExceeded("%s: still running after %gs" % (self.exec_id, timeout))
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def kill(self) -> None:
        """Kills the command (SIGKILL to its process tree); wait() then says
        it was signaled."""
        self.signal(_signal.SIGKILL)

    def signal(self, sig: int = _signal.SIGTERM) -> None:
        """Sends sig to the command's process group in the sandbox."""
        try:
            self.process.signal(sig)
        except errors.FailedPrecondition:
            pass  # it ended meanwhile: nothing to signal

    def is_running(self) -> bool:
        """True until the command ended and its output was read."""
        return not self._done.is_set()


def _argv(cmd: Union[str, Sequence[str]]) -> List[str]:
    if isinstance(cmd, str):
        return ["/bin/sh", "-c", cmd]
    argv = list(cmd)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise errors.InvalidArgument("cmd: a shell string or a non-empty list of strings")
    return argv


def _stdin_chunks(stdin: Any) -> Iterator[bytes]:
    """bytes of at most STDIN_CHUNK from a file object or an iterator of
    bytes or str."""
    if hasattr(stdin, "read"):
        while True:
            b = stdin.read(STDIN_CHUNK)
            if not b:
                return
            yield b.encode() if isinstance(b, str) else bytes(b)
    for part in stdin:
        b = part.encode() if isinstance(part, str) else bytes(part)
        for off in range(0, len(b), STDIN_CHUNK):
            yield b[off:off + STDIN_CHUNK]


class Commands:
    """sbx.commands: run commands in the sandbox."""

    def __init__(self, sandbox: "Sandbox"):
        self._sbx = sandbox

    def run(self, cmd: Union[str, Sequence[str]], env: Optional[Mapping[str, str]] = None,
            cwd: Optional[str] = None, timeout: Optional[float] = None,
            stdin: Optional[StdinSource] = None, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, background: bool = False,
            check: bool = False) -> Any:
        """Runs cmd: a shell string (run by /bin/sh -c) or an argv list.

        env: variables set over the policy's env for this command only;
        cwd: its working directory; timeout: seconds it may run (whole
        seconds, at most the policy's script_seconds; default
        script_seconds), then it is killed and exit_reason is "timeout";
        stdin: bytes or str (sent with the exec when at most 1 MiB), or a
        file object or an iterator of bytes/str, streamed with WriteStdin
        while the command runs (end of file after the last chunk);
        on_stdout/on_stderr: called with each piece of output as text while
        it runs. Returns a CommandResult (a non-zero exit is not an
        exception unless check=True: CommandError). background=True returns
        a CommandHandle at once (wait(), kill())."""
        run = self._sbx.run
        req = pb.ExecRequest(run_id=run.id, argv=_argv(cmd))
        if cwd:
            req.cwd = cwd
        for k, v in (env or {}).items():
            req.env.add(name=str(k), value=str(v))
        if timeout is not None:
            secs = math.ceil(timeout)
            if secs < 1:
                raise errors.InvalidArgument("timeout %r: seconds, >= 1" % timeout)
            req.timeout_seconds = secs
        stream = None
        if stdin is not None:
            if isinstance(stdin, str):
                stdin = stdin.encode()
            if isinstance(stdin, (bytes, bytearray, memoryview)) and len(stdin) <= STDIN_CHUNK:
                req.stdin = bytes(stdin)
            else:
                req.stdin_stream = True
                stream = [bytes(stdin)] if isinstance(stdin, (bytes, bytearray, memoryview)) \
                    else stdin
        r = run.client.call("Exec", req, pb.ExecResponse)
        process = Process(run, r.exec_id)
        feeder = None
        if stream is not None:
            feeder = threading.Thread(target=self._feed, args=(process, stream), daemon=True)
            feeder.errors = []  # type: ignore[attr-defined]
            feeder.start()
        if background:
            return CommandHandle(self, process, on_stdout, on_stderr, feeder)
        try:
            res = self._collect(process, on_stdout, on_stderr, feeder)
        except BaseException:
            # Interrupted (Ctrl-C) or the connection failed: the command must
            # not run on unwatched.
            try:
                process.signal(_signal.SIGKILL)
            except errors.SbxError:
                pass
            raise
        if check:
            res.result.check()
        return res

    @staticmethod
    def _feed(process: Process, stdin: Any) -> None:
        """WriteStdin in order: each chunk at the offset accepted so far, eof
        after the last. sbxd takes what fits in the command's pipe and says
        how much (it never waits for the command): the rest of a chunk is
        sent again, after a pause while the command reads nothing."""
        run = process.run
        off = 0
        try:
            for chunk in _stdin_chunks(stdin):
                start, pause = off, _STDIN_PAUSE_MIN
                while off < start + len(chunk):
                    r = run.client.call("WriteStdin", pb.WriteStdinRequest(
                        run_id=run.id, exec_id=process.exec_id, offset=off,
                        data=chunk[off - start:]), pb.WriteStdinResponse)
                    if r.accepted > off:
                        off, pause = r.accepted, _STDIN_PAUSE_MIN
                    else:  # the pipe is full: the command has not read yet
                        time.sleep(pause)
                        pause = min(pause * 2, _STDIN_PAUSE_MAX)
            run.client.call("WriteStdin", pb.WriteStdinRequest(
                run_id=run.id, exec_id=process.exec_id, offset=off, eof=True),
                pb.WriteStdinResponse)
        except errors.FailedPrecondition:
            pass  # the command ended (or closed its stdin) before reading it all
        except BaseException as e:  # said by wait()
            threading.current_thread().errors.append(e)  # type: ignore[attr-defined]

    @staticmethod
    def _collect(process: Process, on_stdout: Optional[OutputCallback],
                 on_stderr: Optional[OutputCallback],
                 feeder: Optional[threading.Thread]) -> CommandResult:
        if on_stdout is None and on_stderr is None:
            res = process.wait()
        else:
            decoders = {n: codecs.getincrementaldecoder("utf-8")("replace")
                        for n in ("stdout", "stderr")}
            calls = {"stdout": on_stdout, "stderr": on_stderr}
            s = ExecStream(process)
            for name, data in s:
                cb = calls[name]
                if cb is not None:
                    text = decoders[name].decode(data)
                    if text:
                        cb(text)
            for name, dec in decoders.items():
                rest = dec.decode(b"", final=True)
                if rest and calls[name] is not None:
                    calls[name](rest)
            res = s.result
            assert res is not None
        if feeder is not None:
            feeder.join()
            errs = feeder.errors  # type: ignore[attr-defined]
            if errs:
                raise errs[0]
        return CommandResult.of(res)

    def kill(self, exec_id: str) -> None:
        """Kills a command of this sandbox by its exec_id."""
        self._sbx.run.signal(exec_id, _signal.SIGKILL)


@dataclasses.dataclass
class EntryInfo:
    """One file of /out: name (the last component), path (absolute, under
    /out), size, sha256 and mode (permission bits); type is "file" (only
    regular files are listed)."""
    name: str
    path: str
    size: int
    sha256: str
    mode: int
    type: str = "file"


def _out_rel(path: str) -> str:
    p = os.fspath(path)
    if p in ("/out", "/out/", "", "."):
        return ""
    if p.startswith("/") and not p.startswith("/out/"):
        raise errors.InvalidArgument("%s: files are read from /out only (inputs go to /data "
                                     "with files.write)" % p)
    return _files.out_path(p).strip("/")


class Files:
    """sbx.files: inputs into /data (write), results from /out (read, list,
    download), every fetched byte checked against the sha256 sbxd reports."""

    def __init__(self, sandbox: "Sandbox"):
        self._sbx = sandbox

    def write(self, path: str, data: DataSource, mode: Optional[int] = None) -> str:
        """Writes a new file into /data (path "/data/x" or "x"): data is
        bytes, str (its UTF-8), a file object (read to its end) or a local
        path (pathlib.Path or os.PathLike). Allowed before and between
        commands; /data only grows (an existing path is FailedPrecondition).
        mode: permission bits (e.g. 0o755). Returns the path in the
        sandbox."""
        src = _source(path, data)
        self._sbx.run.put(path, src, mode=mode)
        return "/data/" + _files.input_path(path)

    def write_files(self, files: Mapping[str, DataSource]) -> List[str]:
        """write() for each {path: data}; returns their paths."""
        return [self.write(p, d) for p, d in files.items()]

    def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        """The contents of a file of /out ("/out/r.csv" or "r.csv"),
        verified against its sha256: str (UTF-8) by default, bytes with
        format="bytes"."""
        if format not in ("text", "bytes"):
            raise errors.InvalidArgument("format: 'text' or 'bytes'")
        rel = _out_rel(path)
        if not rel:
            raise errors.InvalidArgument("%s: a file under /out" % path)
        data = self._sbx.run.fetch(rel).data or b""
        return data.decode() if format == "text" else data

    def list(self, path: str = "/out") -> List[EntryInfo]:
        """The regular files under a directory of /out (all of it by
        default), recursively, with size and sha256."""
        rel = _out_rel(path)
        pre = rel + "/" if rel else ""
        out = []
        for a in self._sbx.run.artifacts():
            if a.path.startswith(pre):
                out.append(EntryInfo(os.path.basename(a.path), "/out/" + a.path, a.size,
                                     a.sha256, a.mode))
        return out

    def exists(self, path: str) -> bool:
        """Whether path is a regular file of /out, or a directory holding one."""
        rel = _out_rel(path)
        return any(a.path == rel or a.path.startswith(rel + "/") or not rel
                   for a in self._sbx.run.artifacts())

    def download(self, path: str = "/out", dest: Union[str, "os.PathLike[str]"] = ".") \
            -> List[Fetched]:
        """Fetches every file under path (a directory of /out, or one file)
        into the local directory dest, keeping their paths relative to path,
        each verified against its sha256 before it is put in place. dest is
        held to sbxctl run --out's rules: made 0700 if missing, refused when
        it is a link, not yours, or writable by others; nothing is written
        through a link. Returns what was fetched."""
        rel = _out_rel(path)
        listing = self._sbx.run.artifacts()
        chosen = [a for a in listing if not rel or a.path == rel or a.path.startswith(rel + "/")]
        fd = _dest.open_dest(os.fspath(dest))
        try:
            mask = _files.current_umask()
            items = []
            for a in chosen:
                if not _files.safe_relative(a.path):
                    raise errors.DataLoss("artifact path %r would leave %s: refused"
                                          % (a.path, dest))
                local = os.path.basename(a.path) if a.path == rel else \
                    a.path[len(rel) + 1:] if rel else a.path
                items.append((a.path, local, (a.mode & 0o777 or 0o666) & ~mask, a.sha256))
            # On sbxd's own host the files come over a unix socket of ours.
            return self._sbx.run.fetch_many_at(fd, items, live=listing.live)
        finally:
            os.close(fd)


class Sandbox:
    """One sandbox (a run of sbxd) in E2B's shape: Sandbox.create(), then
    .commands.run(), .files.write/read/list/download, .kill(). A context
    manager: leaving the with block kills it."""

    def __init__(self, run: Run, owner: Any = None):
        self.run: Run = run
        self._owner = owner  # the Client or Fleet this sandbox made and closes
        self.commands = Commands(self)
        self.files = Files(self)

    @classmethod
    def create(cls, policy: Any = None, image: Optional[str] = None, data: Any = None,
               timeout: Optional[float] = None, endpoint: Union[str, Sequence[str], None] = None,
               env: Optional[Mapping[str, str]] = None, allow: Optional[Sequence[str]] = None,
               labels: Optional[Mapping[str, str]] = None, token: Optional[str] = None,
               tls: Any = None, **options: Any) -> "Sandbox":
        """Creates a sandbox and uploads its /data.

        policy: a dict, a JSON string, a path to a JSON file or a Policy
        message (default: sbxctl run's, {"image": "host"}); image: the image
        (host, or name:tag@sha256:... from the host's store); data: a local
        directory (every regular file under it becomes /data/<its path>) or
        {"/data/x.csv": bytes | str | path | file}; timeout: the sandbox's
        lifetime in seconds (limits.run_seconds); env: the policy's env
        (every command's); allow: egress allowlist entries (HOST:PORT);
        labels: the run's labels; endpoint: one, several, or
        dns+srv://_sbx._tcp.NAME (default $SBX_ENDPOINTS, $SBX_ENDPOINT,
        else the local socket); token, tls: as connect() (default
        $SBX_TOKEN, $SBX_TLS_*). options: connect()'s (timeout of a call is
        call_timeout here, retries, ...)."""
        eps = _endpoints(endpoint)
        token = token if token is not None else _env_default("SBX_TOKEN")
        tls = _tls_default(eps, tls)
        call_timeout = options.pop("call_timeout", None)
        if call_timeout is not None:
            options["timeout"] = call_timeout
        doc = build_policy(policy, image=image, timeout=timeout, env=env, allow=allow)
        inputs = _data_inputs(data)
        fleet = len(eps) > 1 or eps[0].startswith(SRV_SCHEME)
        owner: Any = Fleet(eps, token=token, tls=tls, **options) if fleet else \
            Client(eps[0], token=token, tls=tls if eps[0].startswith("tls+tcp://") else None,
                   **options)
        try:
            run = owner.create_run(doc, inputs=inputs, labels=dict(labels or {}))
        except BaseException:
            owner.close()
            raise
        return cls(run, owner)

    @classmethod
    def connect(cls, sandbox_id: str, endpoint: Union[str, Sequence[str], None] = None,
                token: Optional[str] = None, tls: Any = None, **options: Any) -> "Sandbox":
        """A Sandbox for an existing run of this caller: sandbox_id is its
        id or RUN_ID@HOST:PORT (what .sandbox_id says). No call is made."""
        eps = _endpoints(endpoint)
        token = token if token is not None else _env_default("SBX_TOKEN")
        tls = _tls_default(eps, tls)
        if "@" in sandbox_id:
            owner: Any = Fleet(eps, token=token, tls=tls, **options)
            return cls(owner.run(sandbox_id), owner)
        owner = Client(eps[0], token=token, tls=tls if eps[0].startswith("tls+tcp://") else None,
                       **options)
        return cls(owner.run(sandbox_id), owner)

    @property
    def sandbox_id(self) -> str:
        """The run's handle: RUN_ID, or RUN_ID@HOST:PORT when placed among
        several hosts (sbxctl takes either)."""
        return self.run.handle

    @property
    def manifest(self) -> Optional[Manifest]:
        """The run's manifest once killed (None before)."""
        return self.run.manifest

    def status(self) -> Any:
        """The run's RunStatus (state, digests, every command)."""
        return self.run.status()

    def is_running(self) -> bool:
        """True while the sandbox exists and takes commands."""
        if self.run.manifest is not None:
            return False
        try:
            return self.run.status().state in ("created", "active")
        except errors.NotFound:
            return False

    def kill(self) -> Manifest:
        """Kills every command, destroys the sandbox and returns the run's
        Manifest (again on later calls); closes the connection it made."""
        try:
            return self.run.teardown()
        finally:
            self.close()

    def close(self) -> None:
        """Closes the connection this Sandbox made (the sandbox stays until
        kill() or its lease)."""
        if self._owner is not None:
            self._owner.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.run.manifest is not None:
            self.close()
            return
        if exc_type is None:
            self.kill()
            return
        try:  # leaving on an error: that error is the one seen
            self.kill()
        except errors.SbxError:
            pass

    def __repr__(self) -> str:
        return "Sandbox(%r)" % self.sandbox_id


__all__ = ["Sandbox", "Commands", "Files", "CommandResult", "CommandHandle", "EntryInfo",
           "DEFAULT_POLICY", "build_policy"]
