# SPDX-License-Identifier: Apache-2.0
"""sbx_client: the Python client of sbxd (sbx's sandbox service).

    from sbx_client import Sandbox
    with Sandbox.create() as sbx:          # sbxctl run's default policy
        r = sbx.commands.run("echo hi; echo made > /out/r.txt")
        print(r.exit_code, r.stdout, sbx.files.read("/out/r.txt"))

The run-level API beneath it:

    import sbx_client
    with sbx_client.connect("ipc:///run/sbx/sbxd.sock") as c:
        with c.create_run("policy.json", inputs={"/data/x.csv": "x.csv"}) as run:
            res = run.exec(["/usr/bin/python3", "-c", "print(open('/data/x.csv').read())"])
            print(res.reason, res.exit_code, res.stdout)

Only dependency: protobuf. The nng SP REQ/REP wire (ipc://, tcp://,
tls+tcp://) is written in Python (wire.py); the message classes are generated
by protoc at build time (sbx_client/_pb)."""
import pkgutil

# In a source tree, the generated sbx_client/_pb lives in the build tree
# (<build>/clients/python/sbx_client/_pb): a second sbx_client directory on
# sys.path joins this package. Installed, _pb is right here.
__path__ = pkgutil.extend_path(__path__, __name__)

from .errors import (  # noqa: E402
    Aborted, AlreadyExists, Cancelled, CommandError, DataLoss, DeadlineExceeded,
    FailedPrecondition, Internal, InvalidArgument, NotFound, OutOfRange, PermissionDenied,
    ResourceExhausted, SbxError, Unauthenticated, Unavailable, Unimplemented, Unknown)
from .wire import TLS, DEFAULT_ENDPOINT  # noqa: E402
from .proto import policy_pb2, sandbox_pb2  # noqa: E402
from .files import check_digest  # noqa: E402
from .results import (  # noqa: E402
    Artifact, Artifacts, Drained, ExecResult, Fetched, Health, Manifest, RunStatus, RunSummary,
    Usage)
from .client import Client, ExecStream, Process, Run, connect  # noqa: E402
from .placement import Fleet, fleet  # noqa: E402
from . import aio  # noqa: E402,F401
from .sandbox import (CommandHandle, CommandResult, EntryInfo, Sandbox,  # noqa: E402
                      DEFAULT_POLICY)
from .aio_sandbox import AsyncSandbox  # noqa: E402

__version__ = "0.1.0"
__all__ = [
    "Sandbox", "AsyncSandbox", "CommandResult", "CommandHandle", "EntryInfo", "DEFAULT_POLICY",
    "connect", "fleet", "Fleet", "Client", "Run", "Process", "ExecStream", "TLS", "DEFAULT_ENDPOINT",
    "ExecResult", "Usage", "Artifact", "Artifacts", "Fetched", "Health", "Manifest",
    "RunStatus", "RunSummary", "Drained", "check_digest", "policy_pb2", "sandbox_pb2",
    "SbxError", "CommandError", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded",
    "NotFound", "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
    "Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
    "Unauthenticated",
]
