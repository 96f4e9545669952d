# SPDX-License-Identifier: Apache-2.0
"""Run by test_sbxd_sdk.py with a venv's python, where sbx_client is what
pip installed: drives the Sandbox API against sbxd and prints one JSON
object of what it saw (the test asserts on it). argv[1]: a JSON object with
the scenario's name, the endpoint and the TLS files or token."""
import asyncio
import hashlib
import io
import json
import os
import sys
import threading

import sbx_client
from sbx_client import AsyncSandbox, Sandbox

cfg = json.loads(sys.argv[1])
CONN = {"endpoint": cfg["endpoint"]}
if cfg.get("token"):
    CONN["token"] = cfg["token"]
if cfg.get("tls"):
    CONN["tls"] = cfg["tls"]
POLICY = cfg.get("policy")  # a small one, so that several runs fit the test's sbxd
report = {"module": sbx_client.__file__}


def basics():
    seen = []
    with Sandbox.create(POLICY, data={"/data/in.txt": b"input\n"}, labels={"t": "sdk"},
                        **CONN) as sbx:
        report["sandbox_id"] = sbx.sandbox_id
        r = sbx.commands.run("cat /data/in.txt; echo err >&2; exit 3")
        report["shell"] = [r.stdout, r.stderr, r.exit_code, r.exit_reason, r.error]
        r = sbx.commands.run(["/bin/echo", "argv", "$HOME"])
        report["argv"] = [r.stdout, r.exit_code, r.error]
        r = sbx.commands.run("for i in 1 2 3; do echo line$i; done; echo e1 >&2",
                             on_stdout=seen.append, on_stderr=lambda t: seen.append("E:" + t))
        report["callbacks"] = ["".join(x for x in seen if not x.startswith("E:")),
                               "".join(x[2:] for x in seen if x.startswith("E:")), r.stdout]
        r = sbx.commands.run("pwd; cat", cwd="/tmp", stdin="from stdin")
        report["cwd_stdin"] = r.stdout
        started = threading.Event()
        h = sbx.commands.run("echo started; sleep 60", background=True,
                             on_stdout=lambda t: started.set())
        report["background_running"] = h.is_running()
        started.wait(60)  # killed once it said so (a guard, not a duration)
        h.kill()
        r = h.wait(timeout=60)
        report["background"] = [r.exit_reason, r.exit_code, r.stdout]
        # files.write between commands: bytes, str and a file object, into /data
        sbx.files.write("late.bin", b"\x00\x01late")
        sbx.files.write("/data/sub/text.txt", "text\n")
        sbx.files.write("big.bin", io.BytesIO(b"z" * (3 << 20)))
        r = sbx.commands.run("sha256sum /data/late.bin /data/sub/text.txt /data/big.bin | "
                             "cut -d' ' -f1; mkdir -p /out/d; echo one > /out/d/a.txt; "
                             "head -c 2000000 /dev/urandom > /out/d/r.bin; echo top > /out/t.txt")
        report["written_digests"] = r.stdout.split()
        report["want_digests"] = [hashlib.sha256(b).hexdigest() for b in
                                  (b"\x00\x01late", b"text\n", b"z" * (3 << 20))]
        try:
            sbx.files.write("late.bin", b"again")
            report["rewrite"] = "allowed"
        except (sbx_client.FailedPrecondition, sbx_client.InvalidArgument) as e:
            report["rewrite"] = e.code
        try:
            sbx.files.write("/out/x", b"no")
            report["write_out"] = "allowed"
        except sbx_client.InvalidArgument as e:
            report["write_out"] = e.code
        report["read"] = sbx.files.read("/out/d/a.txt")
        report["read_bytes_len"] = len(sbx.files.read("d/r.bin", format="bytes"))
        report["list"] = sorted((e.path, e.size) for e in sbx.files.list("/out/d"))
        report["list_all"] = sorted(e.path for e in sbx.files.list())
        report["exists"] = [sbx.files.exists("/out/d"), sbx.files.exists("/out/nope")]
        dest = os.path.join(cfg["work"], "dl-" + cfg["name"])
        got = sbx.files.download("/out/d", dest)
        report["download"] = sorted((f.path, f.sha256) for f in got)
        local = {}
        for n in sorted(os.listdir(dest)):
            with open(os.path.join(dest, n), "rb") as f:
                local[n] = hashlib.sha256(f.read()).hexdigest()
        report["download_local"] = local
        report["listed_digests"] = {e.name: e.sha256 for e in sbx.files.list("/out/d")}
    report["killed"] = sbx.manifest is not None and sbx.manifest.run_id == sbx.run.id
    report["manifest_inputs"] = sorted(i.path for i in sbx.manifest.inputs)
    report["is_running_after"] = sbx.is_running()


def reconcile():
    ex = cfg["example"]
    out = os.path.join(cfg["work"], "recon-" + cfg["name"])
    with Sandbox.create(os.path.join(ex, "policy.json"), data=ex, **CONN) as sbx:
        r = sbx.commands.run(["/usr/bin/python3", "/data/reconcile.py"])
        report["stdout"] = r.stdout
        report["exit_code"] = r.exit_code
        sbx.files.download("/out", out)
    report["out"] = {n: open(os.path.join(out, n)).read() for n in sorted(os.listdir(out))}


def three_steps():
    """Step 2 reads step 1's /out, step 3 step 2's: copied into /data with
    files.write between the steps."""
    with Sandbox.create(POLICY, **CONN) as sbx:
        r1 = sbx.commands.run("seq 1 10 > /out/step1.txt")
        sbx.files.write("step1.txt", sbx.files.read("/out/step1.txt"))
        r2 = sbx.commands.run("awk '{s+=$1} END {print s}' /data/step1.txt > /out/step2.txt")
        sbx.files.write("step2.txt", sbx.files.read("/out/step2.txt", format="bytes"))
        r3 = sbx.commands.run("echo total=$(cat /data/step2.txt) from $(wc -l < /data/step1.txt)"
                              " lines")
        report["codes"] = [r1.exit_code, r2.exit_code, r3.exit_code]
        report["final"] = r3.stdout
    report["inputs"] = sorted(i.path for i in sbx.manifest.inputs)


def per_exec():
    """Needs part B's server: per-exec env, timeout and streamed stdin."""
    with Sandbox.create(POLICY, **CONN) as sbx:
        r = sbx.commands.run("echo $GREETING-$HOME", env={"GREETING": "hi"})
        report["env"] = r.stdout
        r = sbx.commands.run("sleep 30", timeout=1)
        report["timeout"] = [r.exit_reason, r.exit_code]
        big = os.urandom(3 * (1 << 20) + 5)
        r = sbx.commands.run("sha256sum | cut -d' ' -f1", stdin=io.BytesIO(big))
        report["stdin_stream"] = [r.stdout.strip(), hashlib.sha256(big).hexdigest()]
        r = sbx.commands.run("wc -c", stdin=iter([b"ab", "cd", b"e"]))
        report["stdin_iter"] = r.stdout.strip()


async def asyncio_twin():
    lines = []
    async with await AsyncSandbox.create(POLICY, **CONN) as sbx:
        await sbx.files.write("a.txt", b"A")
        rs = await asyncio.gather(*(sbx.commands.run("cat /data/a.txt; echo %d" % i)
                                    for i in range(3)))
        report["gather"] = [r.stdout for r in rs]
        await sbx.commands.run("echo x; echo y", on_stdout=lines.append)
        report["async_callback"] = "".join(lines)
        h = await sbx.commands.run("sleep 60", background=True)
        await h.kill()
        report["async_background"] = (await h.wait()).exit_reason
        await sbx.commands.run("echo made > /out/m.txt")
        report["async_read"] = await sbx.files.read("m.txt")
        report["async_list"] = [e.path for e in await sbx.files.list()]
    report["async_killed"] = sbx.manifest is not None and sbx.manifest.run_id == sbx.sync.run.id


{"basics": basics, "reconcile": reconcile, "three_steps": three_steps, "per_exec": per_exec,
 "asyncio": lambda: asyncio.run(asyncio_twin())}[cfg["scenario"]]()
print(json.dumps(report))
