#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora in corpus/<target>/ (committed; run again only to
change them). Needs the build's Python protobuf modules:

    /usr/bin/python3 tests/fuzz/make_corpus.py BUILD/python

Each file is one input in the target's own format (see the target's comment:
a leading byte picks the method, type or fd count where the target has one).
"""
import json
import os
import sys

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "build/python")
from sbx.v1 import helper_pb2 as hp  # noqa: E402
from sbx.v1 import policy_pb2 as pp  # noqa: E402
from sbx.v1 import sandbox_pb2 as sp  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
D64 = "0123456789abcdef" * 4
PINNED = "recon-runtime:2026.08.1@sha256:" + D64


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- policies: the example, the DESIGN.md document, the unit tests' shapes
with open(os.path.join(ROOT, "packaging/examples/reconcile/policy.json")) as f:
    EXAMPLE = f.read()
POLICIES = {
    "example": json.loads(EXAMPLE),
    "host": {"image": "host"},
    "design": {"image": PINNED,
               "mounts": [{"path": "/data", "mode": "ro"}, {"path": "/out", "mode": "rw"}],
               "env": {}, "egress": {"policy": "deny", "allow": []},
               "limits": {"cpu": 2, "memory_mb": 4096, "script_seconds": 120,
                          "run_seconds": 3600}, "lifetime": "per_run"},
    "allowlist": {"image": "host", "egress": {"policy": "allowlist", "allow": [
        "b.example:443", "A.Example:80",
        {"host": "a.example", "port": 22, "connections_per_minute": 5,
         "bytes_per_second": 1000, "allow_private": True},
        "*.Svc.Internal:8443", "10.0.0.1:5432"]}},
    "full": {"image": PINNED, "env": {"LANG": "C.UTF-8", "B": "two", "M": "\u00e9"},
             "mounts": [{"path": "/out", "mode": "rw"}, {"path": "/data", "mode": "ro"}],
             "egress": {"policy": "allowlist", "allow": ["API.internal:443"]},
             "limits": {"cpu": 1.5, "memory_mb": 512, "pids": 64, "out_mb": 16, "tmp_mb": 8,
                        "output_kb": 64}},
    "image_path": {"image": "/srv/images/rootfs", "mounts": []},
    # every egress field, IDNA and the forms that normalize to one entry
    "egress_limits": {"image": "host", "egress": {
        "policy": "allowlist", "alert_bytes": 1048576, "max_bytes": 4611686018427387904,
        "allow": ["B\u00dccher.example.:443", "*.xn--fa-hia.de:443", "127.0.0.1:8080",
                  {"host": "*.API.example", "port": 8443, "connections_per_minute": 600000,
                   "max_concurrent": 4096, "bytes_per_second": 1099511627776,
                   "allow_private": False},
                  {"host": "a\u3002example", "port": 1, "connections_per_minute": 1,
                   "max_concurrent": 1}]}},
    "egress_deny_zeros": {"image": "host", "egress": {"policy": "deny", "allow": [],
                                                      "alert_bytes": 0, "max_bytes": 0}},
}
for name, doc in POLICIES.items():
    write("policy", name + ".json", json.dumps(doc, indent=1))
write("policy", "bad-nul.json", '{"image": "/srv/a\\u0000b"}')
write("policy", "bad-type.json", '{"image": "host", "limits": {"cpu": true}}')
write("policy", "bad-idna.json", '{"image": "host", "egress": {"policy": "allowlist", '
      '"allow": ["\\ud83d\\ude42.example:443", "A.example:443", "a.example.:443"]}}')
write("policy", "bad-numeric-host.json", '{"image": "host", "egress": {"policy": "allowlist", '
      '"allow": ["0x7f.1:80"], "max_bytes": 1}}')

# ---- sbxd configs: the integration fixture's shape and the unit test's full one
CONFIGS = {
    "minimal": {},
    "fixture": {"listen": ["ipc:///tmp/sbx-test/sbxd.sock", "tls+tcp://127.0.0.1:7443"],
                "state_dir": "/tmp/sbx-test/state", "helper": "/usr/lib/sbx/sbx-helper",
                "log": "/tmp/sbx-test/audit.log",
                "tls": {"cert": "/tmp/s.pem", "key": "/tmp/s.key", "client_ca": "/tmp/ca.pem"},
                "tokens": [{"name": "alice", "sha256": D64}],
                "runs_max": 32, "runs_max_per_identity": 8},
    "full": {"listen": ["ipc:///run/sbx/a.sock", "tls+tcp://0.0.0.0:7443",
                        "tcp://127.0.0.1:7000", "tls+tcp://[::1]:7444"],
             "state_dir": "/srv/sbx", "helper": "/usr/lib/sbx/sbx-helper",
             "cgroup_root": "/sbx", "rlimit_fallback": True, "log": "/var/log/sbx/audit.log",
             "tls": {"cert": "/etc/sbx/c.pem", "key": "/etc/sbx/k.pem",
                     "client_ca": "/etc/sbx/ca.pem"},
             "tokens": [{"name": "alice", "sha256": D64},
                        {"name": "ci.bot-2", "sha256": "fedcba9876543210" * 4}],
             "input_dirs": ["/srv/inputs", "/home/shared"], "insecure": True,
             "runs_max": 100, "runs_max_per_identity": 10, "workers": 8, "ipc_mode": 432,
             "max_message_bytes": 8388608},
    "egress": {"egress": {"hosts_file": "/srv/hosts", "resolv_conf": "", "head_seconds": 2,
                          "lookup_seconds": 3, "connect_seconds": 4, "idle_seconds": 60,
                          "connections_per_run": 16, "connections_max": 64,
                          "records_per_run": 32, "accepts_per_run_per_second": 5,
                          "destinations": {
                              "API.Internal.:443": {"bytes_per_second": 1048576,
                                                    "connections_per_minute": 60,
                                                    "max_concurrent": 4},
                              "*.B\u00fccher.example:8443": {"max_concurrent": 1},
                              "10.0.0.1:5432": {}}}},
}
for name, doc in CONFIGS.items():
    write("config", name + ".json", json.dumps(doc, indent=1))

# ---- requests: one of each method's body, and envelopes carrying them
SVC = sp.DESCRIPTOR.services_by_name["Sandbox"]
RUN = "r-0123456789abcdef"
BODIES = {
    "Health": sp.HealthRequest(),
    "CreateRun": sp.CreateRunRequest(
        policy_json=json.dumps(POLICIES["design"]),
        inputs=[sp.InputFile(path="ledger.csv", size=1234, sha256=D64),
                sp.InputFile(path="sub/dir/x", size=0, sha256=D64)],
        labels={"job": "42", "owner": "ci"}, input_dir="/srv/inputs/job42"),
    "PutInput": sp.PutInputRequest(run_id=RUN, path="ledger.csv", offset=4096,
                                   data=b"a,b,c\n1,2,3\n", last=True),
    "Exec": sp.ExecRequest(run_id=RUN, argv=["python3", "-c", "print(1)"], cwd="/out",
                           stdin=b"input\n"),
    "Wait": sp.WaitRequest(run_id=RUN, exec_id="e-1", timeout_ms=60000),
    "ReadOutput": sp.ReadOutputRequest(run_id=RUN, exec_id="e-1", offset=10, max_bytes=65536,
                                       timeout_ms=100),
    "Signal": sp.SignalRequest(run_id=RUN, exec_id="e-1", signal=15),
    "Status": sp.StatusRequest(run_id=RUN),
    "ListArtifacts": sp.ListArtifactsRequest(run_id=RUN),
    "FetchArtifact": sp.FetchArtifactRequest(run_id=RUN, path="report.txt", offset=0,
                                            max_bytes=1 << 20),
    "Teardown": sp.TeardownRequest(run_id=RUN),
    "ListRuns": sp.ListRunsRequest(),
}
for i, m in enumerate(SVC.methods):
    body = BODIES[m.name].SerializeToString()
    write("request", "body-%s" % m.name, bytes([i]) + body)
    env = sp.Request(method="/sbx.v1.Sandbox/" + m.name, body=body, request_id="req-%d" % i,
                     deadline_ms=30000, credentials="token:" + "x" * 16 if i % 2 else "")
    write("request", "envelope-%s" % m.name, b"\xff" + env.SerializeToString())
write("request", "envelope-unknown-method",
      b"\xff" + sp.Request(method="/sbx.v1.Sandbox/Nope", body=b"\x0a\x00").SerializeToString())
# What the envelope scan refuses and protobuf-c would take: unknown fields
# (issue 7's flood), a repeated field, a non-minimal key and varint.
HEALTH = sp.Request(method="/sbx.v1.Sandbox/Health").SerializeToString()
write("request", "envelope-unknown-fields", b"\xff" + HEALTH + b"\x30\x01" * 64)
write("request", "envelope-repeated-field", b"\xff" + HEALTH + HEALTH)
write("request", "envelope-long-varints",
      b"\xff" + HEALTH + b"\xa0\x80\x00" + b"\xe8\x87\x80\x80\x80\x80\x80\x80\x80\x00")

# ---- pbjson: the index of a type is its place in fuzz_pbjson.c's list
TYPES = [sp.Request, sp.Response, pp.Policy]
for m in SVC.methods:
    TYPES += [getattr(sp, m.input_type.name), getattr(sp, m.output_type.name)]
TYPE_INDEX = {t.DESCRIPTOR.full_name: i for i, t in enumerate(TYPES)}
EXEC_STATUS = sp.ExecStatus(exec_id="e-1", argv=["sh", "-c", "exit 3"], exit_code=3,
                            started_unix_ms=1760000000000, ended_unix_ms=1760000000500,
                            cpu_ms=12, peak_memory_bytes=1 << 20, stdout_bytes=5,
                            stdout_truncated=True, message="caf\u00e9")
MESSAGES = [
    sp.CreateRunRequest(policy_json='{"image": "host"}',
                        inputs=[sp.InputFile(path="a", size=1, sha256=D64)],
                        labels={"k": "v", "job": "42"}),
    sp.ExecRequest(run_id=RUN, argv=["echo", "hi"], stdin=b"\x00\xff binary"),
    sp.StatusResponse(run_id=RUN, policy_digest="sha256:" + D64, image_digest="unpinned",
                      execs=[EXEC_STATUS],
                      egress=[sp.EgressRecord(time_unix_ms=1, host="api.internal", port=443,
                                              allowed=True, bytes_out=10, bytes_in=20)],
                      alerts=["memory near limit"], created_unix_ms=-1,
                      labels={"owner": "ci"}),
    sp.WaitResponse(),
    sp.ReadOutputResponse(data=b"out\n", next_offset=4, eof=True),
    sp.ListArtifactsResponse(artifacts=[sp.Artifact(path="r.txt", size=9, mode=0o644,
                                                    sha256=D64)], skipped=2),
    sp.HealthResponse(version="0.1.0", runs_active=1, runs_max=64, userns=True,
                      seccomp=True, cgroup="v1", images=[PINNED], identity="uid:1000"),
    sp.Response(code=3, message="limits.memory_mb: must be 16..1048576", body=b"\x01\x02"),
]
try:
    from google.protobuf import json_format
except ImportError:
    json_format = None
for m in MESSAGES:
    i = TYPE_INDEX[m.DESCRIPTOR.full_name]
    name = m.DESCRIPTOR.name
    write("pbjson", "pb-" + name, bytes([i, 1]) + m.SerializeToString())
    if json_format:
        text = json_format.MessageToJson(m)
        write("pbjson", "json-" + name, bytes([i, 0]) + text.encode())
write("pbjson", "json-Policy", bytes([TYPE_INDEX["sbx.v1.Policy"], 0])
      + b'{"image": "host", "limits": {"cpuMillis": 1500, "memory_mb": 512},'
      b' "egress": {"policy": "ALLOWLIST", "allow": [{"host": "a", "port": 1}]}}')

# ---- helper protocol: byte 0 = fds sent (low 3 bits) | fds accepted (next 3)
HELPER = {
    "exec": hp.HelperMessage(exec=hp.HelperExecRequest(exec_id=7, argv=["sh", "-c", "true"],
                                                       cwd="/out")),
    "signal": hp.HelperMessage(signal=hp.HelperSignalRequest(exec_id=7, signal=9)),
    "destroy": hp.HelperMessage(destroy=hp.HelperDestroyRequest()),
    "ready": hp.HelperMessage(ready=hp.Ready(cgroup="v1", seccomp=True, userns=True,
                                             sandbox_pid=4242)),
    "started": hp.HelperMessage(started=hp.ExecStarted(exec_id=7)),
    "ended": hp.HelperMessage(ended=hp.ExecEnded(exec_id=7, exit_code=1, wall_ms=10,
                                                 cpu_ms=3, peak_memory_bytes=4096)),
    "failure": hp.HelperMessage(failure=hp.Failure(message="pivot_root: EPERM")),
}
for name, m in HELPER.items():
    write("ctlmsg", name, bytes([0 | (4 << 3)]) + m.SerializeToString())
# exec and ready carry fds in the real protocol (stdio pipes, the listener)
write("ctlmsg", "exec-3fds", bytes([3 | (4 << 3)]) + HELPER["exec"].SerializeToString())
write("ctlmsg", "ready-too-many-fds", bytes([2 | (1 << 3)]) + HELPER["ready"].SerializeToString())

print("corpus written:", ", ".join(
    "%s %d" % (t, len(os.listdir(os.path.join(HERE, "corpus", t))))
    for t in sorted(os.listdir(os.path.join(HERE, "corpus")))))
