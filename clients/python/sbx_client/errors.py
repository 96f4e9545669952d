# SPDX-License-Identifier: Apache-2.0
"""Typed exceptions, one per sbx.v1.Code (gRPC's numbers and names).

Every error the library raises is an SbxError: `.code` is the status name
("NOT_FOUND", ...), `.code_value` its number, `.message` what sbxd (or the
client) said. A command that ran and failed is not an RPC error: CommandError
(raised only with check=True) carries the result instead."""

CODE_NAMES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}


class SbxError(Exception):
    """Base of every sbx_client error. `.in_progress` (an Unavailable's
    only): an earlier attempt of the request still runs on the host that
    answered (Response.in_progress), so retry that host, never another."""
    code = None
    code_value = None
    in_progress = False

    def __init__(self, message, code=None, result=None):
        if code is not None:
            self.code_value = code
            self.code = CODE_NAMES.get(code, "CODE_%d" % code)
        self.message = message
        self.result = result  # an ExecResult, where one exists (a timeout's kill)
        super().__init__("%s: %s" % (self.code, message) if self.code else message)


def _typed(name, value, *bases, doc=""):
    cls = type(name, (SbxError,) + bases, {"__doc__": doc, "code": CODE_NAMES[value],
                                            "code_value": value})

    def init(self, message, code=value, result=None):
        SbxError.__init__(self, message, code, result)
    cls.__init__ = init
    return cls


Cancelled = _typed("Cancelled", 1, doc="The call was cancelled.")
Unknown = _typed("Unknown", 2)
InvalidArgument = _typed("InvalidArgument", 3, ValueError,
                         doc="The caller's mistake; the message names the field or JSON path.")
DeadlineExceeded = _typed("DeadlineExceeded", 4, doc="No answer (or no end) in time.")
NotFound = _typed("NotFound", 5,
                  doc="No such run or exec, or it belongs to another identity.")
AlreadyExists = _typed("AlreadyExists", 6)
PermissionDenied = _typed("PermissionDenied", 7,
                          doc="Not allowed to this caller (an operator's call).")
ResourceExhausted = _typed("ResourceExhausted", 8, doc="A cap or quota; the message names it.")
FailedPrecondition = _typed("FailedPrecondition", 9,
                            doc="Not in this state, or the host cannot enforce the policy.")
Aborted = _typed("Aborted", 10, doc="Changed meanwhile (a live artifact): try again later.")
OutOfRange = _typed("OutOfRange", 11)
Unimplemented = _typed("Unimplemented", 12)
Internal = _typed("Internal", 13, doc="sbxd's own fault (or a reply that is not what the wire says).")
Unavailable = _typed("Unavailable", 14, doc="No server, a lost connection, a short shortage.")
DataLoss = _typed("DataLoss", 15, doc="Bytes received do not match their sha256.")
Unauthenticated = _typed("Unauthenticated", 16, doc="No or a wrong token.")

BY_CODE = {cls.code_value: cls for cls in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
    PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
    Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)}


def from_code(code, message, in_progress=False):
    """The exception for a Response's code, message and in_progress."""
    cls = BY_CODE.get(code)
    e = SbxError(message, code) if cls is None else cls(message)
    e.in_progress = bool(in_progress) and cls is Unavailable
    return e


class CommandError(SbxError):
    """A command that did not exit 0 (raised by exec(check=True)); .result is
    its ExecResult. Not an RPC status: .code is None."""

    def __init__(self, result):
        what = result.describe()
        super().__init__("%s: %s" % (" ".join(result.argv) or result.exec_id, what),
                         result=result)
