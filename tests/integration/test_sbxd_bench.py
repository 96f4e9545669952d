# SPDX-License-Identifier: Apache-2.0
"""The one benchmark command of issue 21 (`sbx-bench`, bench/bench_all.c) in
its --quick mode: it runs every stage, prints a line for every row of its
table (each with its figure, or the reason it has none: a part not landed
yet, runsc not installed), exits 0, and leaves no process or file of its
own behind (its sbxd stopped, every run of its 20 idle ones torn down).
A stage that fails makes it exit 1 naming the stage. Properties only:
nothing here looks at a duration."""
import json
import os
import subprocess
import tempfile
import unittest

BUILD = os.environ.get("SBX_BUILD_DIR", "")
BENCH = os.path.join(BUILD, "bench", "sbx-bench")
SCALE = os.path.join(BUILD, "bench", "sbx-bench-scale")
SBXD = os.path.join(BUILD, "bench", "sbx-bench-sbxd")
# A row is either measured or says why not; "missing" (its path is not in
# its stage's output) and "failed" are the benchmark's own faults.
FINE = {"measured", "absent", "skipped"}


def processes_mentioning(text):
    """Pids of this user's processes whose command line holds text."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@unittest.skipUnless(os.access(BENCH, os.X_OK), "sbx-bench not built")
class BenchCommand(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sbx-test-bench-")
        self.env = dict(os.environ, TMPDIR=self.tmp)

    def tearDown(self):
        for pid in processes_mentioning(self.tmp):
            try:
                os.kill(pid, 9)
            except OSError:  # gone, or a prepared exec init (the sandbox user)
                pass
        subprocess.run(["rm", "-rf", self.tmp], check=False)

    def run_bench(self, *args):
        out = os.path.join(self.tmp, "rows.json")
        p = subprocess.run([BENCH, "--quick", "--json-file", out] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=self.env, timeout=500)
        rows = None
        if os.path.exists(out):
            with open(out) as f:
                rows = json.load(f)
            os.unlink(out)
        return p, rows

    def test_quick_prints_every_row_and_cleans_up(self):
        p, doc = self.run_bench()
        self.assertEqual(p.returncode, 0, "stderr tail:\n" + p.stderr[-3000:])
        self.assertIsNotNone(doc)
        table = p.stdout.splitlines()
        self.assertTrue(table[0].startswith("measure"), p.stdout)
        labels = [r["measure"] for r in doc["rows"]]
        # Every figure of the issue has its row (at least one per item).
        for needle in ("one-shot true", "vs gVisor", "CreateRun+Exec+Wait+Teardown, ipc",
                       "CreateRun, warm", "Exec(true)+Wait", "FetchArtifact", "export /out",
                       "PutInput", "idle runs at once", "memory per idle run",
                       "Health with the runs idle", "creates/s"):
            self.assertTrue(any(needle in l for l in labels), (needle, labels))
        for r in doc["rows"]:
            self.assertIn(r["state"], FINE, r)
            line = [l for l in table if l.startswith(r["measure"] + " ")]
            self.assertEqual(len(line), 1, (r["measure"], p.stdout))
            if r["state"] != "measured":
                # Said in the row's place, with the reason.
                self.assertIn(r["why"], line[0])
                if r["state"] == "skipped":
                    self.assertEqual(r["stage"], "runsc")
                continue
            self.assertGreater(r["p50"], 0, r)
            if "peer" in r:
                self.assertGreater(r["peer"]["p50"], 0, r)
                # Relative: 6 significant digits of each in the JSON.
                self.assertAlmostEqual(r["ratio"] / (r["p50"] / r["peer"]["p50"]), 1.0,
                                       places=4)
            if "target" in r:
                self.assertIn(r["target"], line[0])
                self.assertTrue(line[0].rstrip().endswith("met" if r["met"] else "MISSED"),
                                line[0])
        # The scale stage held its idle runs and measured their memory.
        scale = doc["stages"]["scale"]["output"]
        self.assertEqual(scale["counts"]["reached"], scale["counts"]["runs"])
        self.assertGreaterEqual(scale["counts"]["helper_processes"], scale["counts"]["runs"])
        self.assertEqual(scale["counts"]["unreadable"], 0)
        # Nothing of it left: no process started from its scratch
        # directories (sbxd, helpers, sandboxes), no file.
        self.assertEqual(processes_mentioning(self.tmp), [])
        self.assertEqual(os.listdir(self.tmp), [])

    def test_a_failing_stage_fails_the_command_naming_it(self):
        p, doc = self.run_bench("--only", "helper", "--helper", "/bin/false")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("stage helper failed", p.stdout)
        rows = [r for r in doc["rows"] if r["stage"] == "helper"]
        self.assertTrue(rows)
        self.assertTrue(all(r["state"] == "failed" for r in rows), rows)
        # The others were not chosen, and say so.
        self.assertTrue(all(r["state"] == "not run" for r in doc["rows"]
                            if r["stage"] != "helper"))

    def test_scale_says_how_many_runs_and_which_limit_stopped_it(self):
        # A config that holds 4 of the 6 idle runs asked for: the benchmark
        # measures the 4, says so and names the refusal, exits 0.
        p = subprocess.run([SCALE, "--quick", "--json", "--runs", "6", "--sbxd-config",
                            '{"runs_max": 4, "runs_max_per_identity": 4}'],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=self.env, timeout=500)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        doc = json.loads(p.stdout)
        self.assertEqual((doc["counts"]["runs"], doc["counts"]["reached"]), (6, 4))
        idle = [r for r in doc["results"] if r["measure"] == "idle_runs"][0]
        self.assertFalse(idle["met"])
        self.assertIn("RESOURCE_EXHAUSTED", idle["note"])
        self.assertIn("(runs_max)", idle["note"])
        self.assertEqual(processes_mentioning(self.tmp), [])
        self.assertEqual(os.listdir(self.tmp), [])

    def test_exec_is_measured_next_to_the_floor(self):
        # sbx-bench-sbxd's exec measure: every Exec+Wait sample has a floor
        # sample beside it (a bare posix_spawn+waitpid of /bin/true), in
        # the same shape as the other peers, and the pauses asked for are
        # the ones reported; the second series (each Exec a pause after the
        # last Wait) has the same shape and target.
        p = subprocess.run([SBXD, "--quick", "--only", "exec", "--json", "--exec-gap-ms", "5",
                            "--exec-apart-ms", "7"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=self.env, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        doc = json.loads(p.stdout)
        self.assertEqual(doc["counts"]["exec_gap_ms"], 5)
        self.assertEqual(doc["counts"]["exec_apart_ms"], 7)
        rows = {r["transport"]: r for r in doc["results"] if r["measure"] == "exec"}
        apart = {r["transport"]: r for r in doc["results"] if r["measure"] == "exec_apart"}
        self.assertEqual(sorted(rows), ["ipc", "tls"])
        self.assertEqual(sorted(apart), ["ipc", "tls"])
        self.assertEqual(apart["ipc"]["label"], "Exec+Wait, 7 ms apart")
        self.assertEqual(apart["ipc"]["target"], "p50 <= 2 ms")
        for r in list(rows.values()) + list(apart.values()):
            peer = r["peer"]
            self.assertEqual((peer["name"], peer["argv"]), ("floor", ["/bin/true"]))
            self.assertEqual(peer["n"], doc["counts"]["execs"])
            self.assertEqual(len(peer["samples"]), r["n"])
            self.assertTrue(all(v > 0 for v in peer["samples"]), peer)
            self.assertLessEqual(peer["p50"], peer["p90"])
            # Relative: the JSON has 6 significant digits of each, so a
            # ratio of 105 (a loaded machine's floor) has 3 decimals only.
            self.assertAlmostEqual(r["ratio"] / (r["p50"] / peer["p50"]), 1.0, places=4)
        self.assertEqual(rows["ipc"]["target"], "p50 <= 2 ms")
        self.assertEqual(processes_mentioning(self.tmp), [])
        self.assertEqual(os.listdir(self.tmp), [])
        # 0 leaves the second series out.
        p = subprocess.run([SBXD, "--quick", "--only", "exec", "--json", "--exec-apart-ms", "0"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=self.env, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        doc = json.loads(p.stdout)
        self.assertEqual(sorted(r["measure"] for r in doc["results"]), ["exec", "exec"])

    def test_a_bad_exec_gap_is_a_usage_error(self):
        for flag in ("--exec-gap-ms", "--exec-apart-ms"):
            for bad in ("-1", "10001", "5ms", ""):
                p = subprocess.run([SBXD, "--only", "exec", flag, bad],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=self.env, timeout=60)
                self.assertEqual(p.returncode, 2, (flag, bad, p.stderr))
                self.assertIn("%s: expected an integer in 0..10000, got '%s'" % (flag, bad),
                              p.stderr)

    def test_an_unknown_stage_is_a_usage_error(self):
        p = subprocess.run([BENCH, "--only", "helper,nosuch"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=self.env, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("no stage 'nosuch'", p.stderr)


if __name__ == "__main__":
    unittest.main()
