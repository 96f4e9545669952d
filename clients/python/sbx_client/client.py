# SPDX-License-Identifier: Apache-2.0
"""The client: connect(), runs, execs, files."""
import collections
import concurrent.futures
import hashlib
import json
import os
import queue
import signal as _signal
import tempfile
import threading
import time

from google.protobuf.message import DecodeError

from . import dest, errors, files, wire
from .proto import SERVICE, policy_pb2, sandbox_pb2 as pb
from .results import (Artifacts, Drained, ExecResult, Fetched, Health, Manifest, RunStatus,
                      RunSummary)

DEFAULT_TIMEOUT = 30.0   # seconds per call (as libsbxclient)
POLL_MS = 5000           # long polls (Wait, ReadOutput) while the caller waits
STREAM_POLL_MS = 1000    # ReadOutput polls of a stream, so it notices a close
DEFAULT_RETRIES = 2      # UNAVAILABLE answers retried (same request id)
# Calls that only read: safe to repeat as they are. The others carry a
# request_id, so that a retried one happens once.
_READS = {"Health", "Wait", "ReadOutput", "Status", "ListArtifacts", "FetchArtifact",
          "ListRuns", "Drain"}  # Drain sets a flag: repeated, it finds it set


def connect(endpoint=None, token=None, tls=None, timeout=DEFAULT_TIMEOUT, **options):
    """A Client for endpoint (default: $SBX_ENDPOINT, else
    ipc:///run/sbx/sbxd.sock). token: the bearer token (tls+tcp); tls: a
    sbx_client.TLS or a dict with ca, cert, key (and server_name). options:
    retries, max_message_bytes, resend_interval, pool_size. Use it as a
    context manager, or close() it."""
    return Client(endpoint, token=token, tls=tls, timeout=timeout, **options)


class Client:
    """A connection to one sbxd (a pool of them, shared safely between threads); connect() makes
    one. Use it as a context manager, or close() it."""
    def __init__(self, endpoint=None, token=None, tls=None, timeout=DEFAULT_TIMEOUT,
                 retries=DEFAULT_RETRIES, max_message_bytes=wire.DEFAULT_MAX_MESSAGE,
                 resend_interval=wire.DEFAULT_RESEND_SECONDS, pool_size=4):
        endpoint = endpoint or os.environ.get("SBX_ENDPOINT") or wire.DEFAULT_ENDPOINT
        if token is not None and not 1 <= len(token.encode()) <= 256:
            raise errors.InvalidArgument("token: must be 1..256 bytes")
        self.endpoint = endpoint
        # Uploads on ipc:// go over a unix socket (ImportInputs) unless
        # this is False; sbxd saying UNIMPLEMENTED turns it to chunks.
        self.same_host_import = True
        # Artifacts on ipc:// come over a unix socket (ExportArtifacts)
        # unless this is False; sbxd saying UNIMPLEMENTED turns it to chunks.
        self.same_host_export = True
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.transport = wire.Transport(endpoint, tls=tls, max_message=max_message_bytes,
                                 resend_interval=resend_interval, pool_size=pool_size)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Closes every pooled connection."""
        self.transport.close()

    # ---- one call
    # The host's name when a Fleet made this client ("h1.example:7443"):
    # a host that does not answer is named in the error.
    host_name = None

    def call(self, name, request, response_type, request_id=None, timeout=None):
        """Calls /sbx.v1.Sandbox/<name> with a request message; returns the
        response message or raises the status code's SbxError. Non-idempotent
        calls get a fresh request_id unless given one; retries reuse it."""
        try:
            return self._call(name, request, response_type, request_id, timeout)
        except (errors.Unavailable, errors.DeadlineExceeded) as e:
            if not self.host_name:
                raise
            named = type(e)("host %s: %s" % (self.host_name, e.message))
            named.in_progress = e.in_progress
            raise named from None

    def _call(self, name, request, response_type, request_id, timeout):
        timeout = timeout or self.timeout
        env = pb.Request(method=SERVICE + name, body=request.SerializeToString(),
                         deadline_ms=int(timeout * 1000))
        if self.token:
            env.credentials = self.token
        if request_id is None and name not in _READS:
            request_id = wire.new_request_id()
        if request_id:
            if not 1 <= len(request_id.encode()) <= 64:
                raise errors.InvalidArgument("request_id: must be 1..64 bytes")
            env.request_id = request_id
        data = env.SerializeToString()
        for attempt in range(self.retries + 1):
            try:
                reply = self.transport.exchange(data, timeout)
            except errors.Unavailable:
                if attempt >= self.retries:
                    raise
                time.sleep(0.1 * 2 ** attempt)
                continue
            try:
                resp = pb.Response.FromString(reply)
            except DecodeError:
                raise errors.Internal("%s sent a reply that is not an sbx.v1.Response"
                                      % self.endpoint) from None
            if resp.code == pb.UNAVAILABLE and attempt < self.retries:
                time.sleep(0.1 * 2 ** attempt)
                continue
            if resp.code != pb.OK:
                raise errors.from_code(resp.code, resp.message or errors.CODE_NAMES.get(resp.code),
                                       resp.in_progress)
            try:
                return response_type.FromString(resp.body)
            except DecodeError:
                raise errors.Internal("%s sent a body that is not an %s"
                                      % (self.endpoint, response_type.DESCRIPTOR.full_name)) \
                    from None

    # ---- the host
    def health(self):
        """The host's Health: version, capacity, what it can enforce, the caller's identity."""
        return Health.of(self.call("Health", pb.HealthRequest(), pb.HealthResponse))

    def list_runs(self, all=False):
        """This caller's runs; all=True: every identity's, each with its
        owner (operators only: PERMISSION_DENIED otherwise)."""
        r = self.call("ListRuns", pb.ListRunsRequest(all=all), pb.ListRunsResponse)
        return [RunSummary.of(s) for s in r.runs]

    def drain(self, undrain=False):
        """Operators only: sbxd stops taking new runs (undrain=True: takes
        them again; SIGTERM's drain stays). Returns a Drained."""
        return Drained.of(self.call("Drain", pb.DrainRequest(undrain=undrain),
                                    pb.DrainResponse))

    def run(self, run_id):
        """A handle on an existing run of this caller (no call is made)."""
        return Run(self, run_id)

    def create_run(self, policy, inputs=None, labels=None, upload=True, request_id=None,
                   input_dir=None, idempotency_key=None):
        """Creates a run from policy (a dict, a JSON string, a path to a JSON
        file, or a sbx_client.policy_pb2.Policy). inputs: {"/data/x.csv":
        local path or bytes}, declared with size and sha256 in CreateRun's
        manifest and uploaded with PutInput in 1 MiB chunks (upload=False:
        declared only, sent later with run.put()). labels: {str: str}.
        request_id: makes a retried CreateRun create one run. idempotency_key:
        CreateRunRequest.idempotency_key (sbx_client.Fleet makes one per
        create): the same call again gets the first run, its inputs sent
        again from the start unless already whole; with a key a run whose
        upload failed is kept for that retry (it may be an earlier call's)."""
        return self._create_run(policy, inputs, labels, upload, request_id, input_dir,
                                idempotency_key, keep_on_failure=bool(idempotency_key))

    def _create_run(self, policy, inputs, labels, upload, request_id, input_dir,
                    idempotency_key, keep_on_failure):
        # keep_on_failure False: a run whose inputs did not arrive is torn
        # down (the Fleet's way: its key is its own, and it may place the
        # create on another host next).
        req = pb.CreateRunRequest()
        if isinstance(policy, policy_pb2.Policy):
            req.policy.CopyFrom(policy)
        else:
            req.policy_json = _policy_json(policy)
        declared = [files.Input(p, src) for p, src in (inputs or {}).items()]
        for i in declared:
            req.inputs.add(path=i.path, size=i.size, sha256=i.sha256)
        for k, v in (labels or {}).items():
            req.labels[k] = v
        if input_dir:
            req.input_dir = os.fspath(input_dir)
        if idempotency_key:
            req.idempotency_key = idempotency_key
        r = self.call("CreateRun", req, pb.CreateRunResponse, request_id=request_id)
        run = Run(self, r.run_id, r)
        run._declared = {i.path: i for i in declared}
        if upload:
            self._upload_declared(run, idempotency_key, keep_on_failure)
        return run

    def _upload_declared(self, run, idempotency_key, keep_on_failure):
        """Uploads run's declared inputs; on failure the run is torn down
        unless keep_on_failure (a keyed create's retry is to finish it)."""
        try:
            for i in run._declared.values():
                try:
                    run._upload(i)
                except errors.FailedPrecondition as e:
                    # With a key the run may be an earlier create's that
                    # uploaded it: sbxd checked those bytes against this
                    # sha256 (the key's request is the same, inputs and all).
                    if not idempotency_key or "is already complete" not in e.message:
                        raise
        except BaseException as e:
            # A run whose inputs did not arrive is of no use: do not leave
            # it, unless a retry with its key is to finish it.
            if not keep_on_failure:
                try:
                    run.teardown()
                except errors.SbxError:
                    pass
            if isinstance(e, errors.SbxError):
                # An upload's in_progress was its own, not the create's.
                e.in_progress = False
                if keep_on_failure:
                    e.message = ("%s (run %s is kept: the same create_run with "
                                 "idempotency_key %s on this host finishes it)"
                                 % (e.message, run.id, idempotency_key))
                    e.args = ("%s: %s" % (e.code, e.message) if e.code else e.message,)
            raise

def _policy_json(policy):
    if isinstance(policy, dict):
        return json.dumps(policy)
    if isinstance(policy, bytes):
        policy = policy.decode()
    if isinstance(policy, str) and policy.lstrip().startswith("{"):
        return policy
    if isinstance(policy, (str, os.PathLike)):
        try:
            with open(policy) as f:
                return f.read()
        except OSError as e:
            raise errors.InvalidArgument("policy %s: %s" % (policy, e.strerror)) from None
    raise errors.InvalidArgument("policy: a dict, a JSON string, a path or a Policy message")


class Run:
    """One run (a sandbox and its files). Leaving a `with run:` block tears
    it down."""

    def __init__(self, client, run_id, created=None):
        self.client = client
        self.id = run_id
        self.host = None  # the host's name when a Fleet placed or named it
        self.manifest = None
        self._declared = {}
        self.effective_policy = created.effective_policy if created else None
        self.policy_digest = created.policy_digest if created else None
        self.image_digest = created.image_digest if created else None
        self.deadline_unix_ms = created.deadline_unix_ms if created else None

    @property
    def handle(self):
        """RUN_ID@HOST:PORT with a host (sbxctl takes it), else the id."""
        return "%s@%s" % (self.id, self.host) if self.host else self.id

    def __repr__(self):
        return "Run(%r)" % self.handle

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.manifest is not None:
            return
        if exc_type is None:
            self.teardown()
            return
        # Leaving on an error: tear down, but let that error be the one seen.
        try:
            self.teardown()
        except errors.SbxError:
            pass

    # ---- inputs
    def _upload(self, inp, mode=None):
        # On sbxd's own host the bytes go over a unix socket of ours
        # (ImportInputs, files.import_input); an sbxd that says UNIMPLEMENTED
        # (turned off, a kernel without SO_PASSRIGHTS, older) gets chunks,
        # from then on.
        if (self.client.endpoint.startswith("ipc://") and self.client.same_host_import
                and not getattr(self.client, "_import_off", False)):
            try:
                return files.import_input(self.client, self.id, inp, mode)
            except errors.Unimplemented:
                self.client._import_off = True
            except errors.FailedPrecondition as e:
                # Our socket out of sbxd's reach: this file in chunks.
                if not files.same_host_unreached(e):
                    raise
        for off, data, last in inp.chunks():
            req = pb.PutInputRequest(run_id=self.id, path=inp.path, offset=off, data=data,
                                     last=last)
            if off == 0:
                # The first chunk declares the file: a path the run's
                # manifest did not name is added by it (between execs too);
                # for a declared one sbxd checks these repeat it.
                req.size, req.sha256 = inp.size, inp.sha256
                if mode:
                    req.mode = mode
            r = self.client.call("PutInput", req, pb.PutInputResponse)
            if r.received != off + len(data) or (last and not r.complete):
                raise errors.Internal("PutInput %s: the server has %d bytes, expected %d%s"
                                      % (inp.path, r.received, off + len(data),
                                         " and the file complete" if last else ""))

    def put(self, path, data, mode=None):
        """Uploads one input (bytes or a local path) with PutInput. A path
        declared at CreateRun (create_run(upload=False)) must get the bytes
        declared (not hashed here: sbxd checks them against the declared
        sha256, and a mismatch lands nothing); another one is declared by its
        first chunk and may be added between execs. The file appears in /data whole, once its sha256
        matched, with `mode` (permission bits, e.g. 0o755; default: a local
        file's own, else 0644); a path is never replaced."""
        # A path this client declared at CreateRun is sent with that digest,
        # not hashed again: sbxd checks the bytes against it as they arrive.
        want = self._declared.get(files.input_path(path))
        inp = files.Input(path, data, sha256=want.sha256 if want is not None else None)
        if want is not None and want.size != inp.size:
            raise errors.InvalidArgument("input %s: not the bytes declared at CreateRun (size %d "
                                         "sha256 %s): %d bytes" % (inp.path, want.size,
                                                                   want.sha256, inp.size))
        if mode is None and inp.local is not None:
            mode = os.stat(inp.local).st_mode & 0o777
        self._upload(inp, mode)

    # ---- execs
    def start(self, argv, stdin=b"", cwd=None, request_id=None, env=None, timeout=None,
              stdin_stream=False):
        """Starts argv in the run; returns a Process (exec_id, wait(),
        signal(), write_stdin()). env: a dict set over the policy's env for
        this exec (recorded in its status and the manifest); timeout: sbxd's
        wall clock for it in whole seconds (ends it "timeout"; at most the
        policy's script_seconds, its default); stdin_stream: stdin comes by
        write_stdin (then stdin must be empty)."""
        if isinstance(argv, str):
            raise errors.InvalidArgument("argv: a list of strings (e.g. ['/bin/sh', '-c', cmd])")
        req = pb.ExecRequest(run_id=self.id, argv=list(argv), stdin=stdin or b"",
                             stdin_stream=bool(stdin_stream))
        if cwd:
            req.cwd = cwd
        for name, value in (env or {}).items():
            req.env.add(name=name, value=value)
        if timeout:
            req.timeout_seconds = int(timeout)
        r = self.client.call("Exec", req, pb.ExecResponse, request_id=request_id)
        return Process(self, r.exec_id)

    def exec(self, argv, stdin=b"", timeout=None, cwd=None, check=False, request_id=None,
             env=None, exec_timeout=None):
        """Runs argv to its end and returns an ExecResult. A non-zero exit is
        not an error unless check=True (CommandError). timeout (seconds): the
        exec is killed when it runs longer and DeadlineExceeded is raised
        (its .result says how it ended); the policy's script_seconds holds
        anyway (reason "timeout"). env, exec_timeout: start's env and
        timeout (sbxd's own clock for the exec)."""
        p = self.start(argv, stdin=stdin, cwd=cwd, request_id=request_id, env=env,
                       timeout=exec_timeout)
        res = p.wait(timeout=timeout)
        return res.check() if check else res

    def stream(self, argv, stdin=b"", timeout=None, cwd=None, env=None, exec_timeout=None,
               stdin_stream=False):
        """Starts argv; iterate the returned ExecStream for ("stdout" |
        "stderr", bytes) while it runs; its .result is the ExecResult after.
        Past output_kb a stream skips its middle: .dropped counts, per
        stream, the bytes this iteration did not get."""
        return ExecStream(self.start(argv, stdin=stdin, cwd=cwd, env=env, timeout=exec_timeout,
                                     stdin_stream=stdin_stream), timeout)

    def write_stdin(self, exec_id, data, offset, eof=False):
        """One chunk (at most 1 MiB) of a streamed stdin at offset (the bytes
        taken so far); eof ends it after data. Returns the bytes sbxd has
        taken in all: less than offset + len(data) when the exec's pipe was
        full (sbxd never waits for the command): send the rest again."""
        return self.client.call("WriteStdin", pb.WriteStdinRequest(
            run_id=self.id, exec_id=exec_id, offset=offset, data=data, eof=eof),
            pb.WriteStdinResponse).accepted

    def signal(self, exec_id, sig=_signal.SIGKILL):
        """Sends sig (default SIGKILL) to an exec's process group."""
        self.client.call("Signal", pb.SignalRequest(run_id=self.id, exec_id=exec_id,
                                                    signal=int(sig)), pb.SignalResponse)

    # ---- state
    def status(self):
        """The run's RunStatus: state, digests, every exec, egress records."""
        return RunStatus.of(self.client.call("Status", pb.StatusRequest(run_id=self.id),
                                             pb.StatusResponse))

    def artifacts(self):
        """The regular files under /out (path, size, sha256, mode), with the
        listing's live/truncated flags."""
        return Artifacts(self.client.call("ListArtifacts",
                                          pb.ListArtifactsRequest(run_id=self.id),
                                          pb.ListArtifactsResponse))

    def fetch(self, path, dest=None, sha256=None, live=False):
        """Fetches /out/<path> in 1 MiB chunks and verifies its sha256 against
        the server's (and against sha256, e.g. a listing's, when given):
        DataLoss on a mismatch (Aborted when an exec could have changed it).
        dest: a local path (written beside it and renamed into place only once
        verified), a binary file object, or None (Fetched.data has the bytes)."""
        rel = files.out_path(path)
        if dest is None:
            buf = _Buffer()
            f = self._fetch_into(rel, buf, sha256, live)
            f.data = buf.getvalue()
            return f
        if hasattr(dest, "write"):
            return self._fetch_into(rel, dest, sha256, live)
        dest = os.fspath(dest)
        fd, tmp = tempfile.mkstemp(prefix=".sbx-fetch-", suffix=".tmp",
                                   dir=os.path.dirname(os.path.abspath(dest)))
        try:
            with os.fdopen(fd, "wb") as out:
                got = self._fetch_into(rel, out, sha256, live)
                out.flush()
                # mkstemp makes 0600; a fetched file gets what the umask
                # says, set on the fd (the name could have been swapped).
                mask = files.current_umask()
                os.fchmod(out.fileno(), 0o666 & ~mask)
                os.fsync(out.fileno())
            os.replace(tmp, dest)
            tmp = None
            return got
        finally:
            if tmp is not None:
                os.unlink(tmp)

    def fetch_at(self, dir_fd, path, mode, sha256=None, live=False):
        """Fetches /out/<path> to the same relative path beneath dir_fd (from
        dest.open_dest), as fetch does, but never through a link: every
        directory on the way made or opened by fd and held to open_dest's
        rule, the file made under a temporary name, given mode (the caller
        applies its umask) with fchmod and renamed into place once verified.
        A link, a directory or a FIFO in the way is FailedPrecondition."""
        rel = files.out_path(path)
        return dest.write_file(dir_fd, rel, mode,
                               lambda out: self._fetch_into(rel, out, sha256, live))

    def fetch_many_at(self, dir_fd, items, live=False, export=True):
        """Fetches artifacts beneath dir_fd (from dest.open_dest), each as
        fetch_at does: items is [(path in /out, path beneath dir_fd, mode,
        sha256 or None)]. On sbxd's own host (ipc://) they come over a unix
        socket of ours (ExportArtifacts, 256 a call; files.export_files)
        unless export or the client's same_host_export is False; an sbxd that
        says UNIMPLEMENTED (turned off, older) gets chunks, from then on, and
        one that could not reach our socket (another local user can keep its
        backlog full) gets them for the rest of this call.
        Returns [Fetched], in order."""
        out, i = [], 0
        if (export and self.client.same_host_export
                and self.client.endpoint.startswith("ipc://")
                and not getattr(self.client, "_export_off", False)):
            try:
                while i < len(items):
                    batch = items[i:i + files.EXPORT_MAX_PATHS]
                    out += files.export_files(self.client, self.id, dir_fd, batch, live)
                    i += len(batch)
            except errors.Unimplemented:
                if i:
                    raise
                self.client._export_off = True
            except errors.FailedPrecondition as e:
                # Our socket out of sbxd's reach: this batch and the rest
                # in chunks.
                if not files.same_host_unreached(e):
                    raise
        for path, local, mode, sha256 in items[i:]:
            rel = files.out_path(path)
            out.append(dest.write_file(dir_fd, local, mode,
                                       lambda f, rel=rel, sha256=sha256:
                                       self._fetch_into(rel, f, sha256, live)))
        return out

    def _fetch_chunk(self, rel, offset):
        return self.client.call("FetchArtifact", pb.FetchArtifactRequest(
            run_id=self.id, path=rel, offset=offset, max_bytes=files.CHUNK),
            pb.FetchArtifactResponse)

    def _chunks(self, rel):
        """The file's chunks in order: the first alone (it says the size),
        then files.FETCH_WINDOW at once, each on a connection of its own
        from the client's pool (sbxd answers them in any order)."""
        first = self._fetch_chunk(rel, 0)
        yield first
        if first.eof:
            return
        offsets = iter(range(files.CHUNK, first.size, files.CHUNK))
        with concurrent.futures.ThreadPoolExecutor(max_workers=files.FETCH_WINDOW) as ex:
            ahead = collections.deque()
            try:
                for off in offsets:
                    ahead.append(ex.submit(self._fetch_chunk, rel, off))
                    if len(ahead) >= files.FETCH_WINDOW:
                        yield ahead.popleft().result()
                while ahead:
                    yield ahead.popleft().result()
            finally:
                for f in ahead:
                    f.cancel()

    def _fetch_into(self, rel, out, expected, expect_live):
        h = hashlib.sha256()
        offset, size = 0, None
        for r in self._chunks(rel):
            if size is None:
                size = r.size
            if len(r.data) > files.CHUNK or (r.size == size and offset + len(r.data) > size):
                raise errors.DataLoss("%s: the server sent %d bytes at %d of %d"
                                      % (rel, len(r.data), offset, size))
            if r.size != size:
                raise errors.Aborted("%s: changed while being fetched (size %d, then %d at %d)"
                                     % (rel, size, r.size, offset))
            out.write(r.data)
            h.update(r.data)
            offset += len(r.data)
            if not r.eof:
                if not r.data or offset >= size:
                    raise errors.DataLoss("%s: the server sent %s at %d of %d"
                                          % (rel, "no end" if r.data else "no bytes",
                                             offset, size))
                continue
            if offset != size:
                cls = errors.Aborted if r.live else errors.DataLoss
                raise cls("%s: got %d bytes of %d" % (rel, offset, size))
            got = h.hexdigest()
            files.check_digest(rel, got, r.sha256, expected, r.live or expect_live)
            return Fetched(rel, size, got, r.live)
        raise errors.DataLoss("%s: the server sent no end at %d of %d" % (rel, offset, size))

    def teardown(self, request_id=None):
        """Kills everything, destroys the sandbox and returns its Manifest
        (again on later calls)."""
        if self.manifest is None:
            r = self.client.call("Teardown", pb.TeardownRequest(run_id=self.id),
                                 pb.TeardownResponse, request_id=request_id)
            self.manifest = Manifest.of(r.manifest)
        return self.manifest


class _Buffer:
    def __init__(self):
        self.parts = []

    def write(self, b):
        self.parts.append(bytes(b))

    def getvalue(self):
        return b"".join(self.parts)


class Process:
    """One started exec."""

    def __init__(self, run, exec_id):
        self.run = run
        self.exec_id = exec_id
        self.result = None

    def __repr__(self):
        return "Process(%r, %r)" % (self.run.id, self.exec_id)

    def signal(self, sig=_signal.SIGKILL):
        """Sends sig (default SIGKILL) to this exec's process group."""
        self.run.signal(self.exec_id, sig)

    def write_stdin(self, data, offset, eof=False):
        """Run.write_stdin for this exec."""
        return self.run.write_stdin(self.exec_id, data, offset, eof)

    def poll(self, timeout_ms):
        """The exec's status after waiting at most timeout_ms for its end."""
        c = self.run.client
        r = c.call("Wait", pb.WaitRequest(run_id=self.run.id, exec_id=self.exec_id,
                                          timeout_ms=timeout_ms),
                   pb.WaitResponse, timeout=c.timeout + timeout_ms / 1000)
        return r.status

    def wait_status(self, timeout=None):
        """Long-polls until the exec ends; timeout (seconds): kill it then,
        and raise DeadlineExceeded with the ended result."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            ms = POLL_MS
            if end is not None:
                left = end - time.monotonic()
                if left <= 0:
                    self.signal(_signal.SIGKILL)
                    s = self.poll(POLL_MS)
                    while s.reason == pb.RUNNING:
                        s = self.poll(POLL_MS)
                    res = self._result(s)
                    raise errors.DeadlineExceeded(
                        "%s did not end within %gs: killed" % (self.exec_id, timeout),
                        result=res)
                ms = max(1, min(POLL_MS, int(left * 1000)))
            s = self.poll(ms)
            if s.reason != pb.RUNNING:
                return s

    def wait(self, timeout=None):
        """The ExecResult, with the output sbxd kept."""
        if self.result is None:
            self.result = self._result(self.wait_status(timeout))
        return self.result

    def _result(self, status):
        out, _ = self.read_all(pb.STDOUT)
        err, _ = self.read_all(pb.STDERR)
        return ExecResult.of(status, out, err)

    def read(self, stream, offset, timeout_ms=0, max_bytes=files.CHUNK):
        """One ReadOutput call: up to max_bytes of stream (pb.STDOUT or pb.STDERR) from offset,
        waiting up to timeout_ms for new bytes."""
        c = self.run.client
        return c.call("ReadOutput", pb.ReadOutputRequest(
            run_id=self.run.id, exec_id=self.exec_id, stream=stream, offset=offset,
            max_bytes=max_bytes, timeout_ms=timeout_ms), pb.ReadOutputResponse,
            timeout=c.timeout + timeout_ms / 1000)

    def read_all(self, stream):
        """(every byte sbxd kept of stream, truncated) once the exec ended."""
        parts, off, truncated = [], 0, False
        while True:
            r = self.read(stream, off, timeout_ms=POLL_MS)
            parts.append(r.data)
            truncated |= r.truncated
            off = max(r.next_offset, off + len(r.data))
            if r.eof:
                return b"".join(parts), truncated


class ExecStream:
    """Iterates ("stdout" | "stderr", bytes) of a running exec, each stream in
    order (the two interleave as they arrive); .result is the ExecResult
    once the iteration ended. close() (or leaving the loop) stops reading,
    not the exec."""
    _END = object()

    def __init__(self, process, timeout=None):
        self.process = process
        self.exec_id = process.exec_id
        self.result = None
        self._timeout = timeout
        self._q = queue.Queue()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._pump, args=(s, n), daemon=True)
                         for s, n in ((pb.STDOUT, "stdout"), (pb.STDERR, "stderr"))]
        self._kept = {"stdout": [], "stderr": []}
        self.dropped = {"stdout": 0, "stderr": 0}
        for t in self._threads:
            t.start()

    def _pump(self, stream, name):
        off = 0
        try:
            while not self._stop.is_set():
                r = self.process.read(stream, off, timeout_ms=STREAM_POLL_MS)
                self.dropped[name] += r.dropped
                if r.data:
                    self._q.put((name, r.data))
                off = max(r.next_offset, off + len(r.data))
                if r.eof:
                    break
        except BaseException as e:  # handed to the iterating thread
            self._q.put((None, e))
        self._q.put((None, self._END))

    def signal(self, sig=_signal.SIGKILL):
        """Sends sig (default SIGKILL) to the exec."""
        self.process.signal(sig)

    def __iter__(self):
        ended = 0
        end = None if self._timeout is None else time.monotonic() + self._timeout
        killed = False
        try:
            while ended < 2:
                wait = None if end is None or killed else max(0.0, end - time.monotonic())
                try:
                    name, item = self._q.get(timeout=wait)
                except queue.Empty:
                    self.process.signal(_signal.SIGKILL)
                    killed = True
                    continue
                if name is None:
                    if item is self._END:
                        ended += 1
                        continue
                    raise item
                self._kept[name].append(item)
                yield name, item
            if self._stop.is_set():  # closed from another thread: no result
                return
            s = self.process.wait_status()
            self.result = ExecResult.of(s, b"".join(self._kept["stdout"]),
                                        b"".join(self._kept["stderr"]))
            self.process.result = self.result
            if killed:
                raise errors.DeadlineExceeded("%s did not end within %gs: killed"
                                              % (self.exec_id, self._timeout), result=self.result)
        finally:
            self.close()

    def close(self):
        """Stops reading (the exec goes on)."""
        self._stop.set()

    def wait(self):
        """Reads the rest (discarding it) and returns the result."""
        if self.result is None:
            for _ in self:
                pass
        return self.result
