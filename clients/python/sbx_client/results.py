# SPDX-License-Identifier: Apache-2.0
"""What calls return, as plain objects (each keeps the protobuf message it
came from as .raw, for fields not copied here)."""
import dataclasses
import signal as _signal

from .proto import policy_pb2, sandbox_pb2


def enum_name(enum, value):
    """"exited", "active", ...: the proto enum's name in lower case."""
    try:
        return enum.Name(value).lower()
    except ValueError:
        return "unknown_%d" % value


@dataclasses.dataclass
class Usage:
    cpu_ms: int
    peak_memory_bytes: int
    wall_ms: int


@dataclasses.dataclass
class ExecResult:
    """One exec: why it ended, its output (kept up to the policy's
    output_kb; *_truncated when more was written) and what it used."""
    exec_id: str
    argv: list
    # running, exited, signaled, timeout, oom, run_expired, idle (the run's
    # lease ran out: idle_seconds without a call), torn_down, setup_failed
    reason: str
    exit_code: int
    signal: int
    message: str
    stdout: bytes
    stderr: bytes
    stdout_bytes: int  # produced (kept or not)
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool
    stdout_cut: str    # non-empty: sbxd stopped keeping the stream early, and why
    stderr_cut: str
    usage: Usage
    started_unix_ms: int
    ended_unix_ms: int
    raw: object = dataclasses.field(default=None, repr=False)

    @classmethod
    def of(cls, s, stdout=None, stderr=None):
        """The ExecResult of an ExecStatus message and the output read."""
        wall = s.ended_unix_ms - s.started_unix_ms if s.ended_unix_ms and s.started_unix_ms else 0
        return cls(exec_id=s.exec_id, argv=list(s.argv),
                   reason=enum_name(sandbox_pb2.ExitReason, s.reason), exit_code=s.exit_code,
                   signal=s.signal, message=s.message, stdout=stdout, stderr=stderr,
                   stdout_bytes=s.stdout_bytes, stderr_bytes=s.stderr_bytes,
                   stdout_truncated=s.stdout_truncated, stderr_truncated=s.stderr_truncated,
                   stdout_cut=s.stdout_cut, stderr_cut=s.stderr_cut,
                   usage=Usage(s.cpu_ms, s.peak_memory_bytes, max(wall, 0)),
                   started_unix_ms=s.started_unix_ms, ended_unix_ms=s.ended_unix_ms, raw=s)

    @property
    def ok(self):
        """True when the command exited 0."""
        return self.reason == "exited" and self.exit_code == 0

    @property
    def returncode(self):
        """As a shell (and `sbxctl run`) would say it: the exit code, 128+signal,
        124 for a timeout or an expired or idle run, 137 for oom and torn_down, 125
        for an exec that could not start."""
        if self.reason == "exited":
            return self.exit_code & 0xFF
        if self.reason == "signaled":
            return 128 + (self.signal & 0x7F)
        if self.reason in ("timeout", "run_expired", "idle"):
            return 124
        if self.reason in ("oom", "torn_down"):
            return 128 + _signal.SIGKILL
        return 125

    def describe(self):
        """How it ended in words: "exited with 3", "killed by signal 9", "timeout: ..."."""
        if self.reason == "exited":
            what = "exited with %d" % self.exit_code
        elif self.reason == "signaled":
            what = "killed by signal %d" % self.signal
        else:
            what = self.reason
        return what + (": " + self.message if self.message else "")

    def check(self):
        """Raises CommandError unless the command exited 0; returns self."""
        if not self.ok:
            from .errors import CommandError
            raise CommandError(self)
        return self


@dataclasses.dataclass
class Artifact:
    path: str    # relative to /out
    size: int
    sha256: str
    mode: int    # permission bits


class Artifacts(list):
    """The files under /out. live: an exec was running, so the digests are of
    the bytes read then, not final. truncated/not_listed/note: what a bound
    left out; skipped: links, FIFOs, sockets, devices and the like."""

    def __init__(self, resp):
        super().__init__(Artifact(a.path, a.size, a.sha256, a.mode) for a in resp.artifacts)
        lst = resp.listing
        self.live = lst.live
        self.truncated = lst.truncated
        self.not_listed = lst.not_listed
        self.busy = lst.busy
        self.bad_names = lst.bad_names
        self.note = lst.note
        self.skipped = resp.skipped
        self.raw = resp

    def by_path(self):
        """{path: Artifact}."""
        return {a.path: a for a in self}


@dataclasses.dataclass
class Fetched:
    path: str
    size: int
    sha256: str
    live: bool           # an exec could still change the file: the digest is not final
    data: bytes = None   # the bytes, when fetch() was given no destination


@dataclasses.dataclass
class Health:
    version: str
    identity: str
    runs_active: int
    runs_max: int
    runs_max_per_identity: int
    userns: bool
    seccomp: bool
    cgroup: str
    images: list
    audit_lines_lost: int
    # The host's file table and a run's share of it (HealthResponse says how).
    file_max: int = 0
    run_files: int = 0
    run_pinned_files: int = 0
    runs_fit: int = 0
    # Whose host uid sandboxes run as: "subordinate" (host_uid_slots runs at
    # once, each its own) or "shared" (sbxd's; weaker).
    host_uids: str = ""
    host_uid_slots: int = 0
    # "serving" or "draining" (SIGTERM's drain or an operator's).
    state: str = ""
    identity_run_slots_free: int = 0
    # Operators only (0 and "" for others): the drains in force and the
    # capacity (CPU in millis, memory in MiB; HealthResponse says how).
    operator: bool = False
    operator_drain: bool = False
    shutdown_drain: bool = False
    capacity_cpu_millis: int = 0
    capacity_memory_mb: int = 0
    capacity_source: str = ""
    committed_cpu_millis: int = 0
    committed_memory_mb: int = 0
    allowed_cpu_millis: int = 0
    allowed_memory_mb: int = 0
    run_slots_free: int = 0
    raw: object = dataclasses.field(default=None, repr=False)

    @classmethod
    def of(cls, h):
        """The Health of a HealthResponse."""
        return cls(h.version, h.identity, h.runs_active, h.runs_max, h.runs_max_per_identity,
                   h.userns, h.seccomp, h.cgroup, list(h.images), h.audit_lines_lost,
                   h.file_max, h.run_files, h.run_pinned_files, h.runs_fit, h.host_uids,
                   h.host_uid_slots,
                   enum_name(sandbox_pb2.ServingState, h.state) if h.state else "",
                   h.identity_run_slots_free, h.operator, h.operator_drain, h.shutdown_drain,
                   h.capacity_cpu_millis, h.capacity_memory_mb, h.capacity_source,
                   h.committed_cpu_millis, h.committed_memory_mb, h.allowed_cpu_millis,
                   h.allowed_memory_mb, h.run_slots_free, raw=h)


@dataclasses.dataclass
class RunStatus:
    run_id: str
    state: str  # created, active, expired, torn, failed
    policy_digest: str
    image_digest: str
    policy: policy_pb2.Policy
    execs: list  # ExecResult, without output (stdout/stderr None)
    alerts: list
    labels: dict
    created_unix_ms: int
    deadline_unix_ms: int
    egress: list
    raw: object = dataclasses.field(default=None, repr=False)
    # Exec records sbxd left out of the middle to fit max_message_bytes.
    execs_not_listed: int = 0

    @classmethod
    def of(cls, s):
        """The RunStatus of a StatusResponse."""
        return cls(s.run_id, enum_name(sandbox_pb2.RunState, s.state), s.policy_digest,
                   s.image_digest, s.policy, [ExecResult.of(e) for e in s.execs],
                   list(s.alerts), dict(s.labels), s.created_unix_ms, s.deadline_unix_ms,
                   list(s.egress), raw=s, execs_not_listed=s.execs_not_listed)


@dataclasses.dataclass
class RunSummary:
    run_id: str
    state: str
    policy_digest: str
    created_unix_ms: int
    execs: int
    labels: dict
    owner: str = ""          # the identity the run belongs to
    age_ms: int = 0
    cpu_ms: int = 0          # of the ended execs, as the helper reported them
    peak_memory_bytes: int = 0
    execs_running: int = 0

    @classmethod
    def of(cls, r):
        """The RunSummary of a ListRunsResponse entry."""
        return cls(r.run_id, enum_name(sandbox_pb2.RunState, r.state), r.policy_digest,
                   r.created_unix_ms, r.execs, dict(r.labels), r.owner, r.age_ms, r.cpu_ms,
                   r.peak_memory_bytes, r.execs_running)


@dataclasses.dataclass
class Drained:
    """What Drain returns: the state after the call."""
    state: str           # "serving" or "draining"
    operator_drain: bool
    shutdown_drain: bool
    runs_active: int

    @classmethod
    def of(cls, d):
        """The Drained of a DrainResponse."""
        return cls(enum_name(sandbox_pb2.ServingState, d.state), d.operator_drain,
                   d.shutdown_drain, d.runs_active)


@dataclasses.dataclass
class Manifest:
    """What Teardown returns: the run's record once every trace is gone."""
    run_id: str
    identity: str
    final_state: str
    policy: policy_pb2.Policy
    policy_digest: str
    image_digest: str
    inputs: list     # sandbox_pb2.InputFile (path, size, sha256)
    execs: list      # ExecResult without output
    artifacts: list  # Artifact
    created_unix_ms: int
    ended_unix_ms: int
    execs_not_listed: int
    raw: object = dataclasses.field(default=None, repr=False)

    @classmethod
    def of(cls, m):
        """The Manifest of a RunManifest message."""
        return cls(m.run_id, m.identity, enum_name(sandbox_pb2.RunState, m.final_state),
                   m.policy, m.policy_digest, m.image_digest, list(m.inputs),
                   [ExecResult.of(e) for e in m.execs],
                   [Artifact(a.path, a.size, a.sha256, a.mode) for a in m.artifacts],
                   m.created_unix_ms, m.ended_unix_ms, m.execs_not_listed, raw=m)

    def to_dict(self):
        """The manifest as JSON-ready data (protobuf's JSON mapping)."""
        from google.protobuf import json_format
        return json_format.MessageToDict(self.raw, preserving_proto_field_name=True)
