# SPDX-License-Identifier: Apache-2.0
"""python3 -m sbx_client run: what `sbx run` does, through this package.

Uploads --data DIR as /data, runs the command with live output, fetches /out
into --out DIR verifying every sha256, tears the run down and exits with the
command's status (124 timeout, 137 oom, 128+N for signal N, 125 when sbx
failed; errors as "sbx: CODE: message")."""
import argparse
import os
import signal
import sys

from . import dest, errors, files
from .client import connect
from .wire import DEFAULT_ENDPOINT

EXIT_SETUP = 125
_NOTES = {"timeout": "script_seconds ran out", "oom": "out of memory (limits.memory_mb)",
          "run_expired": "run_seconds ran out", "torn_down": "the run was torn down",
          "setup_failed": "could not be started"}


def _parser():
    env = os.environ.get
    ap = argparse.ArgumentParser(
        prog="python3 -m sbx_client",
        description="The sbx client in Python. Commands: run (as `sbx run`).")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    r = sub.add_parser(
        "run", help="create a run, upload /data, exec, fetch /out, tear down",
        description=__doc__.split("\n\n")[1],
        usage="python3 -m sbx_client run [--endpoint URL] --policy FILE [--data DIR] "
              "[--out DIR] [options] -- CMD [ARG...]")
    r.add_argument("--endpoint", default=env("SBX_ENDPOINT") or DEFAULT_ENDPOINT,
                   help="ipc://PATH, tls+tcp://HOST:PORT or tcp://HOST:PORT (default: "
                        "$SBX_ENDPOINT, else %s)" % DEFAULT_ENDPOINT)
    r.add_argument("--policy", required=True, help="the policy (JSON file)")
    r.add_argument("--data", metavar="DIR", help="upload every regular file under DIR as /data")
    r.add_argument("--out", metavar="DIR", help="fetch /out into DIR after the command")
    r.add_argument("--stdin", metavar="FILE",
                   help="the command's stdin (at most 1 MiB; - for ours)")
    r.add_argument("--label", action="append", default=[], metavar="K=V", help="a run label")
    r.add_argument("--token", default=env("SBX_TOKEN"), help="bearer token (default: $SBX_TOKEN)")
    r.add_argument("--tls-ca", default=env("SBX_TLS_CA"), metavar="FILE",
                   help="CA of the server's certificate (default: $SBX_TLS_CA)")
    r.add_argument("--tls-cert", default=env("SBX_TLS_CERT"), metavar="FILE",
                   help="client certificate (default: $SBX_TLS_CERT)")
    r.add_argument("--tls-key", default=env("SBX_TLS_KEY"), metavar="FILE",
                   help="its key (default: $SBX_TLS_KEY)")
    r.add_argument("--tls-server-name", default=env("SBX_TLS_SERVER_NAME"), metavar="NAME",
                   help="name the server's certificate must carry (default: the endpoint's host)")
    r.add_argument("--timeout", type=float, default=30.0,
                   help="seconds per call (default 30; long polls add their own)")
    r.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")
    return ap


def _same_sink():
    """Whether our stdout and stderr land in one place (a terminal, 2>&1)."""
    try:
        a, b = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return (sys.stdout.isatty() and sys.stderr.isatty()) or (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def say(*parts):
    print("sbx:", *parts, file=sys.stderr, flush=True)


def fail(e):
    if isinstance(e, errors.SbxError) and e.code:
        say("%s: %s" % (e.code, e.message))
    else:
        say(str(e))


def _note_end(res):
    why = _NOTES.get(res.reason)
    if why is None:
        return
    say("%s: %s" % (res.reason, why + (": " + res.message if res.message else "")))


def _note_listing(a):
    if a.live:
        say("artifacts: live: an exec is running; digests are not final")
    if a.truncated or a.not_listed:
        say("artifacts: truncated: %d regular files not listed%s"
            % (a.not_listed, " (%s)" % a.note if a.note else ""))


def fetch_all(run, out_fd, out):
    """Every artifact beneath out_fd (dest.open_dest's), never through a link."""
    listing = run.artifacts()
    _note_listing(listing)
    mask = files.current_umask()
    for a in listing:
        # The server names the files; it does not get to name one outside out.
        if not files.safe_relative(a.path):
            raise errors.DataLoss("artifact path %r would leave %s: refused" % (a.path, out))
        try:
            run.fetch_at(out_fd, a.path, (a.mode & 0o777 or 0o666) & ~mask, sha256=a.sha256,
                         live=listing.live)
        except errors.FailedPrecondition as e:
            # A refusal names what is in the way relative to out: say out.
            raise errors.FailedPrecondition("%s: %s" % (out, e.message)) from None


def cmd_run(a):
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    if not argv:
        say("run: no command (put it after --)")
        return 2
    labels = {}
    for kv in a.label:
        k, eq, v = kv.partition("=")
        if not eq or not k:
            say("--label %s: must be KEY=VALUE" % kv)
            return 2
        labels[k] = v
    tls = None
    if a.endpoint.startswith("tls+tcp://"):
        tls = {"ca": a.tls_ca, "cert": a.tls_cert, "key": a.tls_key,
               "server_name": a.tls_server_name}
    stdin = b""
    interrupted = []

    def on_signal(sig, frame):
        interrupted.append(sig)
        raise KeyboardInterrupt
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    status = EXIT_SETUP
    out_fd = None
    try:
        if a.stdin:
            f = sys.stdin.buffer if a.stdin == "-" else open(a.stdin, "rb")
            with f:
                stdin = f.read((1 << 20) + 1)
            if len(stdin) > 1 << 20:
                raise errors.InvalidArgument("--stdin %s: larger than 1048576 bytes" % a.stdin)
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
        with connect(a.endpoint, token=a.token, tls=tls, timeout=a.timeout) as c:
            run = c.create_run(a.policy, inputs=inputs, labels=labels)
            try:
                s = run.stream(argv, stdin=stdin)
                ends = {}
                try:
                    for name, data in s:
                        out = sys.stdout if name == "stdout" else sys.stderr
                        out.buffer.write(data)
                        out.flush()
                        ends[name] = data[-1:]
                except KeyboardInterrupt:
                    run.signal(s.exec_id, signal.SIGKILL)
                    raise
                res = s.result
                for name, cut, trunc in (("stdout", res.stdout_cut, res.stdout_truncated),
                                         ("stderr", res.stderr_cut, res.stderr_truncated)):
                    # A notice is a line of its own, also after a partial one.
                    if (cut or trunc) and ends.get(name, b"\n") != b"\n" and (
                            name == "stderr" or _same_sink()):
                        sys.stderr.write("\n")
                    if s.dropped[name] and not cut:
                        say("%d bytes of the exec's %s were dropped (limits.output_kb keeps "
                            "its head and its tail)" % (s.dropped[name], name))
                    elif cut:
                        say("the exec's %s was cut after %d bytes: %s"
                            % (name, len(getattr(res, name)), cut))
                    elif trunc:
                        say("the exec's %s was truncated (limits.output_kb)" % name)
                _note_end(res)
                status = res.returncode
                if a.out:
                    fetch_all(run, out_fd, a.out)
            finally:
                for sig in old:  # teardown must not be skipped
                    signal.signal(sig, signal.SIG_IGN)
                try:
                    run.teardown()
                except errors.SbxError as e:
                    say("Teardown %s: %s: %s" % (run.id, e.code, e.message))
                    status = EXIT_SETUP
    except KeyboardInterrupt:
        return 128 + (interrupted[0] if interrupted else signal.SIGINT)
    except (errors.SbxError, OSError) as e:
        fail(e)
        return EXIT_SETUP
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if out_fd is not None:
            os.close(out_fd)
    return status


def main(argv):
    ap = _parser()
    a = ap.parse_args(argv)
    if a.command == "run":
        return cmd_run(a)
    ap.print_help(sys.stderr if a.command else sys.stdout)
    return 0 if not argv else 2
