# SPDX-License-Identifier: Apache-2.0
"""python3 -m sbx_client run: what `sbxctl run` does, through this package,
with the same flags, defaults, messages (after their "sbx:") and interrupts.

Uploads --data DIR as /data, runs the command with live output, fetches /out
into --out DIR verifying every sha256, tears the run down and exits with the
command's status (124 timeout, 137 oom, 128+N for signal N, 125 when sbx
failed; errors as "sbx: CODE: message")."""
import argparse
import json
import math
import os
import re
import signal
import sys
import threading

from . import __version__, dest, errors, files
from .client import connect
from .placement import SRV_SCHEME, fleet
from .proto import sandbox_pb2 as pb
from .sandbox import DEFAULT_POLICY
from .wire import DEFAULT_ENDPOINT

EXIT_SETUP = 125
EXIT_USAGE = 2
_NOTES = {"timeout": "script_seconds ran out", "oom": "out of memory (limits.memory_mb)",
          "run_expired": "run_seconds ran out",
          "idle": "idle_seconds ran out (no call on the run)",
          "torn_down": "the run was torn down", "setup_failed": "could not be started"}
#: What `sbxctl run` says when /out will not be kept (the same words).
NO_OUT_WARNING = ("warning: no --out given: the run's /out is dropped at teardown "
                  "(give --out DIR to keep it)")
STDIN_MAX = 1 << 20

# The policy's ranges the flags are checked against (common/policy.h).
MEMORY_MB_MAX = 1048576
SCRIPT_SECONDS_MAX = 86400
RUN_SECONDS_MAX = 7 * 86400
PIDS_MAX = 1 << 22
OUT_MB_MAX = 1 << 20
TMP_MB_MAX = 1 << 20
_SIZE_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_TIME_UNITS = {"s": 1, "m": 60, "h": 3600}


class _Usage(Exception):
    pass


def _units(flag, s, units, divisor, maximum, what):
    """sbxctl's parse_units: "512m", "1.5g", "90s", "2m" as a whole number
    of MiB (or seconds), 1..maximum."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([A-Za-z]*)", s)
    if not m or float(m.group(1)) <= 0:
        raise _Usage("%s %s: not a positive number" % (flag, s))
    v, suffix = float(m.group(1)), m.group(2).lower()
    factor = 1
    if suffix:
        if suffix[0] not in units:
            raise _Usage("%s %s: unknown unit '%s'" % (flag, s, m.group(2)))
        factor = units[suffix[0]]
        rest = suffix[1:]
        if units is _SIZE_UNITS and suffix[0] != "b" and rest in ("b", "ib"):
            rest = ""
        if rest:
            raise _Usage("%s %s: unknown unit '%s'" % (flag, s, m.group(2)))
    total = v * factor / divisor
    if total < 1 or total > maximum or total != math.floor(total):
        raise _Usage("%s %s: must come to a whole number of %s, 1..%d" % (flag, s, what, maximum))
    return int(total)


def _count(flag, maximum):
    def parse(s):
        if not s.isdigit() or not 1 <= int(s) <= maximum:
            raise argparse.ArgumentTypeError("%s %s: must be a whole number, 1..%d"
                                             % (flag, s, maximum))
        return int(s)
    return parse


def _typed(fn):
    def parse(s):
        try:
            return fn(s)
        except _Usage as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def _cpus(s):
    try:
        v = float(s)
    except ValueError:
        v = -1
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError("--cpus %s: not a positive number" % s)
    return v


def _call_timeout(s):
    try:
        v = float(s)
    except ValueError:
        v = -1
    if not math.isfinite(v) or v <= 0 or v > 86400:
        raise argparse.ArgumentTypeError(
            "--call-timeout %s: must be seconds, more than 0 and at most 86400" % s)
    return v


def _label(s):
    k, eq, _v = s.partition("=")
    if not eq or not k:
        raise argparse.ArgumentTypeError("--label %s: must be KEY=VALUE with a non-empty KEY" % s)
    return s


def _env(s):
    if not s or s.startswith("="):
        raise argparse.ArgumentTypeError("--env %s: must be NAME=VALUE or NAME" % s)
    return s


class _Tty(argparse.Action):
    def __call__(self, parser, ns, values, option_string=None):
        parser.error("--tty: not supported yet: sbxd keeps an exec's stdout and stderr as two "
                     "pipes (no pseudo-terminal inside the sandbox); for line-buffered output "
                     "use -e PYTHONUNBUFFERED=1 or stdbuf -oL")


RUN_DESCRIPTION = """\
Creates a run from the policy, uploads every regular file under --data (to
/data, with its sha256 in the run's manifest), runs CMD with its stdout and
stderr streamed here as they come, fetches and verifies every file of /out into
the --out DIR (nothing is fetched without --out, and a warning says so), and
tears the run down: always, also after an error or an interrupt. Options end at
CMD (its own flags stay its own); '--' before CMD works too. The same flags and
results as `sbxctl run` (messages start "sbx:" where sbxctl's start "sbxctl:").

The policy: --policy FILE, else the documented defaults (image host, egress
deny, every limit at its default); the policy flags write over either."""

RUN_EPILOG = """\
Interrupts: the first SIGINT or SIGTERM is passed to CMD's process group in the
sandbox; a second SIGINT kills it. What it left in /out is still fetched (said on
stderr), the run is torn down, and this exits 128+N (130 for SIGINT, 143 for
SIGTERM), as a shell does.

Exit status: CMD's own; 128+N if a signal N killed it or interrupted this; 124 if
script_seconds or run_seconds ran out; 137 out of memory; 127 if CMD was not
found, 126 if it could not be executed; 125 if sbx failed (the reason on stderr)."""


def _parser():
    ap = argparse.ArgumentParser(
        prog="python3 -m sbx_client",
        description="The sbx client in Python. Commands: run (as `sbxctl run`).")
    ap.add_argument("--version", action="version", version="sbx_client " + __version__)
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    r = sub.add_parser(
        "run", help="create a run, upload /data, exec, fetch /out, tear down",
        description=RUN_DESCRIPTION, epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="python3 -m sbx_client run [OPTIONS] CMD [ARG...]")
    g = r.add_argument_group("global options (as sbxctl's)")
    g.add_argument("--endpoint", action="append", default=[], metavar="URL",
                   help="sbxd's address: ipc://PATH, tls+tcp://HOST:PORT, tcp://HOST:PORT "
                        "(default: $SBX_ENDPOINTS, $SBX_ENDPOINT, else %s); several hosts: "
                        "repeat it, a comma list, or dns+srv://_sbx._tcp.NAME" % DEFAULT_ENDPOINT)
    g.add_argument("--tls-cert", metavar="FILE",
                   help="client certificate for tls+tcp (default: $SBX_TLS_CERT)")
    g.add_argument("--tls-key", metavar="FILE", help="its private key (default: $SBX_TLS_KEY)")
    g.add_argument("--tls-ca", metavar="FILE",
                   help="CA of the server's certificate (default: $SBX_TLS_CA)")
    g.add_argument("--tls-server-name", metavar="NAME",
                   help="name the server's certificate must carry (default: the endpoint's "
                        "host, or $SBX_TLS_SERVER_NAME)")
    g.add_argument("--token", metavar="T", help="bearer token (default: $SBX_TOKEN)")
    g.add_argument("--token-file", metavar="FILE", help="read the bearer token from FILE")
    g.add_argument("--call-timeout", metavar="S", type=_call_timeout, default=30.0,
                   help="seconds to wait for each answer (default 30)")
    g.add_argument("--json", action="store_true",
                   help="print the result as one JSON object on stdout (CMD's stdout goes to "
                        "stderr)")
    o = r.add_argument_group("run's options")
    o.add_argument("--data", metavar="DIR", help="files for /data (read-only inside)")
    o.add_argument("--out", metavar="DIR",
                   help="where /out is copied at the end (made 0700 if missing); refused before "
                        "the run is created when it is a link, is not yours, or others can "
                        "write it")
    o.add_argument("--no-export", action="store_true",
                   help="fetch /out in chunks over the RPC, not over the same-host export "
                        "(ExportArtifacts) an ipc:// endpoint otherwise uses")
    o.add_argument("--no-import", action="store_true",
                   help="upload --data in chunks over the RPC, not over the same-host "
                        "upload (ImportInputs) an ipc:// endpoint otherwise uses")
    o.add_argument("--label", action="append", default=[], metavar="K=V", type=_label,
                   help="a label of the run (repeatable)")
    o.add_argument("--stdin", metavar="FILE",
                   help="CMD's standard input ('-': ours; at most 1 MiB); default empty")
    o.add_argument("--cwd", metavar="DIR",
                   help="CMD's working directory (default /out); a missing one ends the exec "
                   "setup_failed, naming it")
    o.add_argument("-t", "--tty", nargs=0, action=_Tty, help="refused: sbx(1) says why")
    p = r.add_argument_group("the policy (flags write over --policy or the defaults)")
    p.add_argument("--policy", metavar="FILE", help="the run policy (JSON)")
    p.add_argument("-e", "--env", action="append", default=[], metavar="NAME=VALUE", type=_env,
                   help="set a variable of the command's environment (repeatable); -e NAME "
                        "alone takes this shell's value, left out when unset")
    p.add_argument("--env-file", action="append", default=[], metavar="FILE",
                   help="NAME=VALUE lines (docker's format), applied before -e")
    p.add_argument("--image", metavar="REF",
                   help="image: host, a rootfs directory, or name:tag@sha256:...")
    p.add_argument("--memory", metavar="SIZE", type=_typed(
        lambda s: _units("--memory", s, _SIZE_UNITS, 1 << 20, MEMORY_MB_MAX, "MiB")),
        help="limits.memory_mb: bytes with a k, m or g suffix (512m, 1.5g)")
    p.add_argument("--cpus", metavar="N", type=_cpus, help="limits.cpu (fractions allowed)")
    p.add_argument("--timeout", metavar="T", type=_typed(
        lambda s: _units("--timeout", s, _TIME_UNITS, 1, SCRIPT_SECONDS_MAX, "seconds")),
        help="limits.script_seconds: seconds, or with an s, m or h suffix")
    p.add_argument("--run-timeout", metavar="T", type=_typed(
        lambda s: _units("--run-timeout", s, _TIME_UNITS, 1, RUN_SECONDS_MAX, "seconds")),
        help="limits.run_seconds (as --timeout)")
    p.add_argument("--idle-timeout", metavar="T", type=_typed(
        lambda s: _units("--idle-timeout", s, _TIME_UNITS, 1, RUN_SECONDS_MAX, "seconds")),
        help="limits.idle_seconds: the run ends after T without a call")
    p.add_argument("--pids", metavar="N", type=_count("--pids", PIDS_MAX), help="limits.pids")
    p.add_argument("--out-mb", metavar="N", type=_count("--out-mb", OUT_MB_MAX),
                   help="limits.out_mb (the /out tmpfs)")
    p.add_argument("--tmp-mb", metavar="N", type=_count("--tmp-mb", TMP_MB_MAX),
                   help="limits.tmp_mb (the /tmp and /dev/shm tmpfs)")
    p.add_argument("--allow", action="append", default=[], metavar="HOST:PORT",
                   help="add an egress.allow entry and set egress.policy allowlist")
    p.add_argument("--print-policy", action="store_true",
                   help="print the policy document that would be sent (flags applied) on "
                        "stdout and do nothing else")
    r.add_argument("argv", nargs=argparse.REMAINDER, help="CMD [ARG...]")
    return ap


def _same_sink():
    """Whether our stdout and stderr land in one place (a terminal, 2>&1)."""
    try:
        a, b = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return (sys.stdout.isatty() and sys.stderr.isatty()) or (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


_POLICY_FLAGS = ("env", "env_file", "image", "memory", "cpus", "timeout", "run_timeout",
                 "idle_timeout", "pids", "out_mb", "tmp_mb", "allow")


def _put_env(env, what, line):
    name, eq, value = line.partition("=")
    if not name:
        raise _Usage("%s: an empty variable name" % what)
    if eq:
        env[name] = value
    elif os.environ.get(name) is not None:
        env[name] = os.environ[name]


def policy_document(a):
    """sbxctl's cli_policy_document: --policy's file as written when no flag
    writes over it, else the file (or {"image": "host"}) with the flags
    applied."""
    text = None
    if a.policy:
        try:
            with open(a.policy, "rb") as f:
                text = f.read(256 * 1024 + 1).decode()
        except (OSError, UnicodeDecodeError) as e:
            raise errors.InvalidArgument("--policy %s: %s" % (a.policy, getattr(e, "strerror", e)))
    if not any(getattr(a, k) for k in _POLICY_FLAGS):
        return text if text is not None else json.dumps(DEFAULT_POLICY)
    try:
        doc = json.loads(text) if text is not None else dict(DEFAULT_POLICY)
    except ValueError as e:
        raise errors.InvalidArgument("--policy %s: %s" % (a.policy, e)) from None
    if not isinstance(doc, dict):
        raise errors.InvalidArgument("--policy %s: not a JSON object" % a.policy)

    def obj(key, flag):
        o = doc.setdefault(key, {})
        if not isinstance(o, dict):
            raise _Usage("%s: the policy's %s is not an object" % (flag, key))
        return o
    if a.image:
        doc["image"] = a.image
    if a.env or a.env_file:
        env = obj("env", "--env")
        for path in a.env_file:
            try:
                with open(path, encoding="utf-8-sig") as f:
                    for no, line in enumerate(f, 1):
                        line = line.rstrip("\r\n").lstrip()
                        if not line or line.startswith("#"):
                            continue
                        what = "--env-file %s:%d" % (path, no)
                        name = line.partition("=")[0]
                        if any(c.isspace() for c in name):
                            raise _Usage("%s: the name '%s' contains white space" % (what, name))
                        _put_env(env, what, line)
            except OSError as e:
                raise _Usage("--env-file %s: %s" % (path, e.strerror)) from None
        for e in a.env:
            _put_env(env, "--env", e)
    limits = {"memory_mb": a.memory, "script_seconds": a.timeout, "run_seconds": a.run_timeout,
              "idle_seconds": a.idle_timeout, "pids": a.pids, "out_mb": a.out_mb,
              "tmp_mb": a.tmp_mb}
    if any(v for v in limits.values()) or a.cpus:
        lim = obj("limits", "limits flags")
        lim.update({k: v for k, v in limits.items() if v})
        if a.cpus:
            lim["cpu"] = int(a.cpus) if a.cpus == math.floor(a.cpus) else a.cpus
    if a.allow:
        eg = obj("egress", "--allow")
        eg["policy"] = "allowlist"
        allow = eg.setdefault("allow", [])
        if not isinstance(allow, list):
            raise _Usage("--allow: the policy's egress.allow is not an array")
        allow.extend(a.allow)
    return json.dumps(doc, indent=2)


def say(*parts):
    """One line on stderr, "sbx: ..." (sbxctl says "sbxctl: ...")."""
    print("sbx:", *parts, file=sys.stderr, flush=True)


# A policy document's problems as sbxd names them: by the policy's key, or
# all of them under "policy: N problems:" (sbxd joins them with "; ").
_POLICY_PROBLEM = re.compile(r"^(policy|image|mounts|env|egress|limits|lifetime)\b")
_PROBLEMS_HEAD = re.compile(r"^(policy: \d+ problems:) (.*)$", re.S)


def policy_problems(message):
    """sbxd's one-line list of a policy's problems as sbxctl shows its own
    check's: one problem per line below the first."""
    m = _PROBLEMS_HEAD.match(message)
    return m.group(1) + "\n" + m.group(2).replace("; ", "\n") if m else message


def fail(e):
    """An error as sbxctl prints it: "sbx: CODE: message", a message's later
    lines indented below the first (as sbxctl's cli_error)."""
    if isinstance(e, errors.SbxError) and e.code:
        text = "%s: %s" % (e.code, e.message)
    else:
        text = str(e)
    first, *rest = text.split("\n")
    say(first)
    for line in rest:
        print("  " + line, file=sys.stderr, flush=True)


def _note_end(res, argv):
    """Why the exec ended, when that is not simply its exit (sbxctl's note_end)."""
    if res.reason == "exited" and res.message and res.exit_code in (126, 127):
        name = res.argv[0] if res.argv else argv[0]
        if res.exit_code == 127 and "/" not in name:
            say("run: %s: command not found" % name)
        else:
            say("run: %s: %s%s" % (name, "cannot execute: " if res.exit_code == 126 else "",
                                   res.message))
        return
    why = _NOTES.get(res.reason)
    if why is None:
        return
    name = res.reason.upper()  # as sbxctl names the reason
    if res.reason == "oom" and res.message:
        say("%s: %s" % (name, res.message))
    else:
        say("%s: %s" % (name, why + (": " + res.message if res.message else "")))


def _note_listing(a):
    if a.live:
        say("artifacts: live: an exec is running; digests are not final")
    if a.truncated or a.not_listed:
        say("artifacts: truncated: %s%s" % (
            "%d regular files not listed" % a.not_listed if a.not_listed
            else "some files are not listed", " (%s)" % a.note if a.note else ""))
    if a.busy:
        say("artifacts: %d files busy (a lease is held): not listed" % a.busy)
    if a.bad_names:
        say("artifacts: %d names are not UTF-8: skipped, never served" % a.bad_names)
    other = max(a.skipped - (a.not_listed + a.busy + a.bad_names), 0)
    if other:
        say("artifacts: %d entries are links or special files: never served" % other)


def fetch_all(run, out_fd, out, export=True):
    """Every artifact beneath out_fd (dest.open_dest's), never through a link;
    on sbxd's own host by the same-host export unless export is False."""
    listing = run.artifacts()
    _note_listing(listing)
    mask = files.current_umask()
    for a in listing:
        # The server names the files; it does not get to name one outside out.
        if not files.safe_relative(a.path):
            raise errors.DataLoss("artifact path %r would leave %s: refused" % (a.path, out))
    try:
        run.fetch_many_at(out_fd, [(a.path, a.path, (a.mode & 0o777 or 0o666) & ~mask, a.sha256)
                                   for a in listing], live=listing.live, export=export)
    except errors.FailedPrecondition as e:
        # A refusal names what is in the way relative to out: say out.
        raise errors.FailedPrecondition("%s: %s" % (out, e.message)) from None


class _Signals:
    """sbxctl's interrupts: outside an exec a signal stops what is being
    done (KeyboardInterrupt, caught by cmd_run: no traceback); while an exec
    runs the first SIGINT or SIGTERM is passed to the command's process
    group and any after it kills the command, by a thread of its own (a
    handler never makes a call itself: it could interrupt one)."""

    def __init__(self):
        self.first = 0
        self.count = 0
        self.forwarding = None  # the Process while an exec runs
        self._wake = threading.Event()
        self._old = {}
        self._thread = None

    def install(self):
        for s in (signal.SIGINT, signal.SIGTERM):
            self._old[s] = signal.signal(s, self._on_signal)

    def restore(self):
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}

    def ignore(self):
        """Nothing may interrupt the teardown."""
        for s in self._old:
            signal.signal(s, signal.SIG_IGN)

    def _on_signal(self, sig, frame):
        if not self.first:
            self.first = sig
        self.count += 1
        if self.forwarding is None:
            raise KeyboardInterrupt
        self._wake.set()

    def forward(self, process):
        """Passes signals on to process until stop()."""
        self.forwarding = process
        self._stop = False
        self._thread = threading.Thread(target=self._forward, args=(process,), daemon=True)
        self._thread.start()

    def _forward(self, process):
        sent = 0
        while True:
            self._wake.wait()
            self._wake.clear()
            while sent < self.count:
                sig = signal.SIGKILL if sent else self.first
                if sent == 0:
                    say("%s: passed to the command (another one kills it)"
                        % signal.Signals(sig).name)
                elif sent == 1:
                    say("killing the command")
                try:
                    process.signal(sig)
                except errors.SbxError:
                    pass  # an exec that just ended needs no signal
                sent += 1
            if self._stop:
                return

    def stop(self):
        if self._thread is not None:
            self._stop = True
            self._wake.set()
            self._thread.join()
            self._thread = None
        self.forwarding = None


def _result_json(run_id, res, status, interrupted, image_digest, listing):
    """run --json's object, as sbxctl's cli_exec_result: the run's id, the
    exec's status fields, what was made of them, and /out at the end."""
    from google.protobuf import json_format
    st = json_format.MessageToDict(res.raw, preserving_proto_field_name=True,
                                   including_default_value_fields=True)
    for k, v in list(st.items()):
        if k == "reason":
            st[k] = v.lower()
    out = {"run_id": run_id}
    out.update(st)
    out["wall_ms"] = res.usage.wall_ms
    out["exit_status"] = status
    out["interrupted_by_signal"] = interrupted
    out["image_digest"] = image_digest
    lj = json_format.MessageToDict(listing.raw, preserving_proto_field_name=True,
                                   including_default_value_fields=True)
    out["artifacts"] = lj.get("artifacts", [])
    out["artifacts_listing"] = lj.get("listing", {})
    out["artifacts_skipped"] = lj.get("skipped", 0)
    return out


def _endpoints(a):
    eps = a.endpoint or [os.environ.get("SBX_ENDPOINTS") or os.environ.get("SBX_ENDPOINT")
                         or DEFAULT_ENDPOINT]
    return eps


def _token(a):
    if a.token_file:
        try:
            with open(a.token_file, "rb") as f:
                t = f.read(300).decode().rstrip(" \t\r\n")
        except (OSError, UnicodeDecodeError) as e:
            raise errors.InvalidArgument("--token-file %s: %s"
                                         % (a.token_file, getattr(e, "strerror", e))) from None
        if not t:
            raise errors.InvalidArgument("--token-file %s: empty" % a.token_file)
        return t
    return a.token or os.environ.get("SBX_TOKEN") or None


def cmd_run(a):
    """`run`: returns the exit status."""
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    try:
        doc = policy_document(a)
    except (_Usage, errors.SbxError) as e:
        fail(e)
        return EXIT_SETUP
    if a.print_policy:
        print(doc if doc.endswith("\n") else doc + "\n", end="")
        return 0
    if not argv:
        say("run: missing the command to run")
        return EXIT_USAGE
    labels = dict(kv.split("=", 1) for kv in a.label)
    env = os.environ.get
    eps = _endpoints(a)
    several = len(eps) > 1 or "," in eps[0] or eps[0].startswith(SRV_SCHEME)
    tls = None
    if any(e.startswith(("tls+tcp://", SRV_SCHEME)) for e in eps) or several:
        ca = a.tls_ca or env("SBX_TLS_CA")
        if ca:
            tls = {"ca": ca, "cert": a.tls_cert or env("SBX_TLS_CERT"),
                   "key": a.tls_key or env("SBX_TLS_KEY"),
                   "server_name": a.tls_server_name or env("SBX_TLS_SERVER_NAME")}
    if not a.out:
        say(NO_OUT_WARNING)
    stdin = b""
    sigs = _Signals()
    sigs.install()
    status = EXIT_SETUP
    out_fd = None
    run = None
    try:
        token = _token(a)
        if a.stdin:
            f = sys.stdin.buffer if a.stdin == "-" else open(a.stdin, "rb")
            with f:
                stdin = f.read(STDIN_MAX + 1)
            if len(stdin) > STDIN_MAX:
                raise errors.InvalidArgument("--stdin %s: larger than %d bytes"
                                             % (a.stdin, STDIN_MAX))
        inputs = {}
        if a.data:
            found, skipped = files.scan_dir(a.data)
            for p in skipped:
                say("%s: not a regular file or directory, not uploaded" % p)
            inputs = found
        if a.out:
            # Refused now, not after the run's work is lost; opened once, so
            # the directory fetched into is the one checked.
            try:
                out_fd = dest.open_dest(a.out)
            except errors.SbxError as e:
                raise type(e)("--out: %s" % e.message) from None
        if several:
            owner = fleet(eps, token=token, tls=tls, timeout=a.call_timeout)
        else:
            owner = connect(eps[0], token=token,
                            tls=tls if eps[0].startswith("tls+tcp://") else None,
                            timeout=a.call_timeout)
        with owner as c:
            if a.no_import and not several:
                c.same_host_import = False
            try:
                run = c.create_run(doc, inputs=inputs, labels=labels)
            except errors.SbxError as e:
                if e.code == "INVALID_ARGUMENT" and _POLICY_PROBLEM.match(e.message):
                    # sbxctl finds these in its own check, before any call
                    raise type(e)(policy_problems(e.message)) from None
                if several:
                    raise
                raise type(e)("CreateRun: %s" % e.message) from None  # as sbxctl says it
            try:
                status = _exec(a, run, argv, stdin, sigs, out_fd)
            finally:
                sigs.stop()
                sigs.ignore()
                try:
                    run.teardown()
                except errors.SbxError as e:
                    say("Teardown %s: %s: %s" % (run.id, e.code, e.message))
                    status = EXIT_SETUP
    except KeyboardInterrupt:
        pass
    except (errors.SbxError, OSError) as e:
        fail(e)
        status = EXIT_SETUP
    finally:
        sigs.restore()
        if out_fd is not None:
            os.close(out_fd)
    # As a shell reports an interrupted script, whatever the command did
    # with the signal.
    return 128 + sigs.first if sigs.first else status


def _exec(a, run, argv, stdin, sigs, out_fd):
    """The exec with live output, signals passed on, /out fetched (also after
    an interrupt); returns its exit status."""
    if a.cwd and not a.cwd.startswith("/"):
        raise _Usage("--cwd %s: must be an absolute path" % a.cwd)
    r = run.client.call("Exec", pb.ExecRequest(run_id=run.id, argv=argv, stdin=stdin,
                                               cwd=a.cwd or ""), pb.ExecResponse)
    from .client import ExecStream, Process
    process = Process(run, r.exec_id)
    sigs.forward(process)
    s = ExecStream(process)
    stdout = sys.stderr if a.json else sys.stdout
    writable = True
    ends = {}
    try:
        for name, data in s:
            if not writable:
                continue
            out = stdout if name == "stdout" else sys.stderr
            ends[name] = data[-1:]
            try:
                out.buffer.write(data)
                out.flush()
            except (BrokenPipeError, OSError):
                writable = False  # a reader that went away stops our writing, not the run
    except BaseException:
        try:
            process.signal(signal.SIGKILL)  # not left running unwatched
        except errors.SbxError:
            pass
        raise
    finally:
        sigs.stop()
    res = s.result
    for name, cut, trunc in (("stdout", res.stdout_cut, res.stdout_truncated),
                             ("stderr", res.stderr_cut, res.stderr_truncated)):
        if s.dropped[name] and not cut:
            note = ("%d bytes of the exec's %s dropped (policy limits.output_kb keeps its head "
                    "and its tail)" % (s.dropped[name], name))
        elif cut:
            note = "the exec's %s was cut after %d bytes: %s" % (name, len(getattr(res, name)), cut)
        elif trunc and writable:  # no gap, every byte written: sbxd's record lost its middle
            note = ("all of the exec's %s was shown here; sbxd's record of it keeps its head "
                    "and its tail (policy limits.output_kb)" % name)
        else:
            continue
        # A notice is a line of its own, also after a partial last line.
        if ends.get(name, b"\n") != b"\n" and (name == "stderr" or _same_sink()):
            sys.stderr.write("\n")
        say(note)
    status = res.returncode
    _note_end(res, argv)
    if sigs.first:
        status = 128 + sigs.first
    if a.out:
        if sigs.first:
            say("interrupted: fetching what is in /out into %s before the teardown" % a.out)
        fetch_all(run, out_fd, a.out, export=not a.no_export)
    if a.json:
        print(json.dumps(_result_json(run.id, res, status, sigs.first, run.image_digest,
                                      run.artifacts()), indent=2), flush=True)
    return status


def main(argv):
    """python3 -m sbx_client ARGS: returns the exit status."""
    ap = _parser()
    a = ap.parse_args(argv)
    if a.command == "run":
        return cmd_run(a)
    ap.print_help(sys.stderr if a.command else sys.stdout)
    return 0 if not argv else EXIT_USAGE
