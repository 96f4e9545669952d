#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints docs/reference/python.md: the API reference of the Python package
sbx_client, from its docstrings and signatures (inspect; no dependency).
Fails naming every public name (in a module's __all__, and the public
methods and properties of its classes) that has no docstring, so that the
reference cannot silently lose one.

    python_reference.py PKG_DIR GEN_DIR
PKG_DIR: clients/python; GEN_DIR: <build>/clients/python (the generated
sbx_client/_pb)."""
import inspect
import sys

# The modules of the reference, in its order: (module, title, names or None
# for its __all__).
SECTIONS = [
    ("sbx_client.sandbox", "Sandbox: E2B's shape", None),
    ("sbx_client.aio_sandbox", "AsyncSandbox: the asyncio twin", None),
    ("sbx_client.client", "The run API: connect, Client, Run",
     ["connect", "Client", "Run", "Process", "ExecStream"]),
    ("sbx_client.placement", "Several hosts", ["fleet", "Fleet"]),
    ("sbx_client.aio", "The run API for asyncio", ["connect", "AsyncClient", "AsyncRun",
                                                   "AsyncExecStream"]),
    ("sbx_client.results", "Results", ["ExecResult", "Usage", "Artifact", "Artifacts",
                                       "Fetched", "Health", "RunStatus", "RunSummary",
                                       "Drained", "Manifest"]),
    ("sbx_client.wire", "Transport", ["TLS", "DEFAULT_ENDPOINT"]),
    ("sbx_client.files", "Files", ["check_digest"]),
    ("sbx_client.errors", "Errors", ["SbxError", "CommandError", "InvalidArgument",
                                     "DeadlineExceeded", "NotFound", "PermissionDenied",
                                     "ResourceExhausted", "FailedPrecondition", "Aborted",
                                     "Unavailable", "DataLoss", "Unauthenticated", "Internal"]),
]


def doc(obj):
    d = inspect.getdoc(obj)
    return d.strip() if d else ""


def sig(obj):
    try:
        s = str(inspect.signature(obj, eval_str=True))
    except (TypeError, ValueError, NameError):
        try:
            s = str(inspect.signature(obj))
        except (TypeError, ValueError):
            return "(...)"
    return s.replace("typing.", "").replace("sbx_client.results.", "").replace(
        "sbx_client.client.", "").replace("sbx_client.sandbox.", "")


def own_members(cls):
    """Public methods and properties defined by cls itself (not inherited
    from object, Exception or a dataclass' machinery)."""
    out = []
    for name, member in cls.__dict__.items():
        if name.startswith("_") and name not in ("__enter__", "__aenter__"):
            continue
        if name in ("__enter__", "__aenter__"):
            continue
        if isinstance(member, (classmethod, staticmethod)):
            out.append((name, member.__func__, "classmethod"
                        if isinstance(member, classmethod) else "staticmethod"))
        elif isinstance(member, property):
            out.append((name, member.fget, "property"))
        elif inspect.isfunction(member):
            out.append((name, member, "method"))
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    sys.path[:0] = argv
    import importlib
    missing = []
    lines = ["# Python API reference (sbx_client)", "",
             "Generated from the package's docstrings by `docs/gen/python_reference.py`",
             "(`tests/docs/generated.py --write python BUILD_DIR`); do not edit by hand.",
             "How to install and start: [../user/python.md](../user/python.md); E2B's and",
             "Modal's calls and ours: [../user/python-sdk.md](../user/python-sdk.md).", ""]
    for modname, title, names in SECTIONS:
        mod = importlib.import_module(modname)
        names = names or list(mod.__all__)
        lines += ["## %s" % title, "", "`%s`" % modname, ""]
        if modname in ("sbx_client.sandbox", "sbx_client.aio_sandbox"):
            if doc(mod):
                lines += [doc(mod), ""]
        for name in names:
            obj = getattr(mod, name)
            full = "%s.%s" % (modname, name)
            if inspect.isclass(obj):
                lines += ["### class `%s%s`" % (name, "" if issubclass(obj, BaseException)
                                                 else sig(obj)), ""]
                d = doc(obj)
                if not d or (d == doc(obj.__mro__[1]) and not issubclass(obj, BaseException)):
                    missing.append(full)
                lines += [d, ""]
                for mname, fn, kind in own_members(obj):
                    shown = getattr(obj, mname) if kind == "classmethod" else fn
                    md = inspect.getdoc(fn)
                    if not md:
                        missing.append("%s.%s" % (full, mname))
                        md = ""
                    head = "`%s.%s`" % (name, mname) if kind == "property" else \
                        "`%s%s.%s%s`" % ("async " if inspect.iscoroutinefunction(fn) else "",
                                         name, mname, sig(shown))
                    lines += ["- %s%s: %s" % (head, " (%s)" % kind if kind != "method" else "",
                                              " ".join(md.split()))]
                lines += [""]
            elif callable(obj):
                d = doc(obj)
                if not d:
                    missing.append(full)
                lines += ["### `%s%s`" % (name, sig(obj)), "", d, ""]
            else:
                lines += ["### `%s = %r`" % (name, obj), ""]
    if missing:
        sys.stderr.write("python_reference: no docstring: %s\n" % ", ".join(missing))
        return 1
    text = "\n".join(lines).rstrip() + "\n"
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
