#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Kubernetes manifests (packaging/kubernetes/) and the Nomad job
(packaging/nomad/), checked offline: each parses (python3-yaml, json) and
carries what a reviewer looks for: a DaemonSet / system job, its network
choice, a grace period past sbxd's drain, the Secrets mounted read-only,
the SRV port name, readiness from Health, the drain before stop, the
settings user namespaces and a delegated cgroup need, and a config whose
keys sbxd knows and whose paths and ports agree with the manifests."""
import json
import os
import re
import sys
import unittest

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(ROOT, "packaging", "kubernetes")
NOMAD = os.path.join(ROOT, "packaging", "nomad", "sbxd.nomad.json")


def config_keys():
    """The top-level keys of docs/reference/config.md's first table, and
    the documented default of drain_seconds."""
    with open(os.path.join(ROOT, "docs", "reference", "config.md")) as f:
        text = f.read()
    top = text.split("\n## The document's root\n")[1].split("\n## ")[0]
    keys = set(re.findall(r"^\| `([a-z_]+)` \|", top, re.M))
    drain = re.search(r"^\| `drain_seconds` \|[^|]*\|[^|]*\| (\d+) \|", top, re.M)
    return keys, int(drain.group(1))


def load_k8s():
    docs = {}
    for name in sorted(os.listdir(K8S)):
        if name.endswith(".yaml"):
            with open(os.path.join(K8S, name)) as f:
                for d in yaml.safe_load_all(f):
                    docs.setdefault(d["kind"], []).append((name, d))
    return docs


class Kubernetes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = load_k8s()
        cls.ds = cls.docs["DaemonSet"][0][1]
        cls.pod = cls.ds["spec"]["template"]["spec"]
        cls.ctr = cls.pod["containers"][0]
        cm = cls.docs["ConfigMap"][0][1]
        cls.cm = cm
        cls.cfg = json.loads(cm["data"]["sbxd.json"])
        cls.volumes = {v["name"]: v for v in cls.pod["volumes"]}
        cls.mounts = {m["name"]: m for m in cls.ctr["volumeMounts"]}

    def test_every_manifest_is_in_the_kustomization(self):
        kust = self.docs["Kustomization"][0][1]
        files = {n for docs in self.docs.values() for n, _ in docs} - {"kustomization.yaml"}
        self.assertEqual(set(kust["resources"]), files)
        for kind in ("Namespace", "ConfigMap", "Service", "DaemonSet", "RuntimeClass"):
            self.assertEqual(len(self.docs.get(kind, [])), 1, kind)

    def test_a_daemonset_whose_pods_its_selector_and_service_select(self):
        labels = self.ds["spec"]["template"]["metadata"]["labels"]
        for sel in (self.ds["spec"]["selector"]["matchLabels"],
                    self.docs["Service"][0][1]["spec"]["selector"]):
            self.assertTrue(sel.items() <= labels.items(), sel)
        self.assertEqual(self.ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"], 1)

    def test_network_and_grace_period(self):
        self.assertIs(self.pod["hostNetwork"], False, "said explicitly, with its reason")
        drain = self.cfg["drain_seconds"]
        self.assertGreaterEqual(self.pod["terminationGracePeriodSeconds"], drain + 30)

    def test_user_namespaces_seccomp_apparmor_and_proc(self):
        sc = self.ctr["securityContext"]
        self.assertIs(self.pod["hostUsers"], False)
        self.assertEqual(sc["procMount"], "Unmasked")
        self.assertEqual(sc["seccompProfile"]["type"], "Unconfined")
        self.assertTrue(sc["allowPrivilegeEscalation"], "newuidmap is setuid")
        self.assertIn("ALL", sc["capabilities"]["drop"])
        ann = self.ds["spec"]["template"]["metadata"]["annotations"]
        key = "container.apparmor.security.beta.kubernetes.io/" + self.ctr["name"]
        self.assertEqual(ann[key], "localhost/sbx-helper")
        self.assertEqual(sc["appArmorProfile"], {"type": "Localhost",
                                                 "localhostProfile": "sbx-helper"})
        with open(os.path.join(ROOT, "packaging", "apparmor", "sbx-helper")) as f:
            self.assertRegex(f.read(), r"(?m)^profile sbx-helper ")

    def test_a_runtime_class_for_the_writable_cgroup(self):
        rc = self.docs["RuntimeClass"][0][1]
        self.assertEqual(self.pod["runtimeClassName"], rc["metadata"]["name"])
        script = self.cm["data"]["entrypoint.sh"]
        self.assertIn("chown sbx:sbx", script)
        for f in ("cgroup.procs", "cgroup.subtree_control", "cgroup.threads"):
            self.assertIn(f, script)
        self.assertIn("setpriv --reuid=sbx", script)

    def test_secrets_and_config_are_mounted_read_only(self):
        secrets = [n for n, v in self.volumes.items() if "secret" in v]
        self.assertEqual(sorted(secrets), ["tls", "tokens"])
        for name, v in self.volumes.items():
            if "secret" in v or "configMap" in v:
                self.assertIs(self.mounts[name].get("readOnly"), True, name)
            if "secret" in v:
                self.assertEqual(v["secret"]["defaultMode"] & 0o007, 0, name)
        tls_dir = self.mounts["tls"]["mountPath"] + "/"
        for k in ("cert", "key", "client_ca"):
            self.assertTrue(self.cfg["tls"][k].startswith(tls_dir), k)
        self.assertNotIn("tokens", self.cfg, "tokens come from the Secret")

    def test_the_config_is_one_sbxd_knows(self):
        keys, _ = config_keys()
        self.assertLessEqual(set(self.cfg), keys)
        self.assertIn("uid:0", self.cfg["operators"], "the probe's and preStop's identity")
        self.assertEqual(self.ctr["securityContext"]["runAsUser"], 0)

    def test_srv_port_and_listeners_agree(self):
        svc = self.docs["Service"][0][1]["spec"]
        self.assertEqual(svc["clusterIP"], "None", "headless: SRV records per pod")
        sbx = [p for p in svc["ports"] if p["name"] == "sbx"]
        self.assertEqual(len(sbx), 1)
        self.assertEqual(sbx[0]["protocol"], "TCP")
        ports = {p["name"]: p for p in self.ctr["ports"]}
        self.assertEqual(sbx[0]["targetPort"], "sbx")
        self.assertEqual(ports["sbx"]["protocol"], "TCP")
        tls = [u for u in self.cfg["listen"] if u.startswith("tls+tcp://")]
        self.assertEqual([int(u.rsplit(":", 1)[1]) for u in tls],
                         [ports["sbx"]["containerPort"]])
        self.assertEqual(int(self.cfg["metrics"]["listen"].rsplit(":", 1)[1]),
                         ports["metrics"]["containerPort"])

    def test_readiness_from_health_and_a_drain_before_stop(self):
        ipc = [u for u in self.cfg["listen"] if u.startswith("ipc://")][0]
        probe = " ".join(self.ctr["readinessProbe"]["exec"]["command"])
        self.assertIn("sbxctl --endpoint " + ipc + " health", probe)
        self.assertIn("state SERVING", probe)
        stop = self.ctr["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(stop, ["sbxctl", "--endpoint", ipc, "drain"])
        self.assertTrue(ipc.startswith("ipc://" + self.mounts["run"]["mountPath"] + "/"))

    def test_resources(self):
        res = self.ctr["resources"]
        for part in ("requests", "limits"):
            self.assertEqual(set(res[part]), {"cpu", "memory"}, part)


class Nomad(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(NOMAD) as f:
            cls.job = json.load(f)["Job"]
        cls.group = cls.job["TaskGroups"][0]
        cls.task = cls.group["Tasks"][0]

    def test_a_system_job(self):
        self.assertEqual(self.job["Type"], "system")
        self.assertEqual(self.job["Update"]["MaxParallel"], 1)

    def test_the_kill_timeout_passes_the_drain(self):
        _, default = config_keys()
        drain = int(self.task["Meta"]["drain_seconds"])
        self.assertEqual(drain, default, "the packaged config keeps the default")
        self.assertEqual(self.task["KillSignal"], "SIGTERM")
        self.assertGreaterEqual(self.task["KillTimeout"], (drain + 30) * 10**9)

    def test_a_delegated_scope_as_sbx(self):
        args = self.task["Config"]["args"]
        self.assertEqual(self.task["Config"]["command"], "/usr/bin/systemd-run")
        for a in ("--scope", "--property=Delegate=yes", "--uid=sbx"):
            self.assertIn(a, args)

    def test_srv_name_port_and_health_check(self):
        svc = self.group["Services"][0]
        self.assertEqual((svc["Name"], svc["Tags"]), ("sbx", ["tcp"]),
                         "Consul answers _sbx._tcp.service.consul")
        ports = {p["Label"]: p["Value"] for p in self.group["Networks"][0]["ReservedPorts"]}
        self.assertIn(svc["PortLabel"], ports)
        check = svc["Checks"][0]
        self.assertEqual(check["Type"], "script")
        self.assertIn("sbxctl --endpoint ipc:///run/sbx/sbxd.sock health",
                      " ".join(check["Args"]))


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=sys.argv[:1])
