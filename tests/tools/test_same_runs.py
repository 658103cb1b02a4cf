#!/usr/bin/python3
"""tools/same_runs.py on real trainer runs (tiny LeNet runs on synthetic data, one process): two
runs of one config are the same but for timings; another learning rate is DIFFERENT; folders of
runs compare run by run, and a run on one side only, or an OLD folder holding no run, is not
"the same"; a metrics.jsonl cut short at its end or damaged inside is said so; a path that does
not exist or is no run is refused, and empty or damaged files are named, not "same"."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAINER = None  # set from argv
CONFIG = """\
model: {name: lenet5}
data: {name: synthetic, size: 32, eval_size: 8, workers: 0}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
schedule: {name: constant}
reducer: {name: average}
train: {steps: 3, batch_per_rank: 8, log_every: 1, eval_every: 3, seed: 1}
checkpoint: {every: 3}
"""


class SameRuns(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ada_test_same_runs_")
        config = os.path.join(cls.tmp, "tiny.yaml")
        with open(config, "w") as f:
            f.write(CONFIG)
        for side, lr in (("A", "0.05"), ("B", "0.05"), ("C", "0.1")):
            p = subprocess.run([TRAINER, "--config", config, "--set", f"optimizer.lr={lr}", "--set",
                                f"output.dir={cls.tmp}/{side}/run1"], capture_output=True, text=True,
                               env=dict(os.environ, OMP_NUM_THREADS="1"))
            # Its output, if it fails: a failure seen once under heavy load left no clue.
            assert p.returncode == 0, f"run {side} failed (exit {p.returncode}):\n{p.stdout}{p.stderr}"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def same_runs(self, a, b):
        p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "same_runs.py"), a, b],
                           capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr

    def test_runs_and_folders_of_runs(self):
        t = self.tmp
        self.assertEqual(self.same_runs(f"{t}/A/run1", f"{t}/B/run1"), (0, f"{t}/A/run1: same\n"))
        rc, out = self.same_runs(f"{t}/A/run1", f"{t}/C/run1")
        self.assertEqual(rc, 1)
        self.assertIn("DIFFERENT", out)
        self.assertEqual(self.same_runs(f"{t}/A", f"{t}/B"), (0, "run1: same\n"))
        # A run on one side only: not the same (it was left out when only NEW had it).
        shutil.copytree(f"{t}/C/run1", f"{t}/extra/B/run2")
        shutil.copytree(f"{t}/B/run1", f"{t}/extra/B/run1")
        rc, out = self.same_runs(f"{t}/A", f"{t}/extra/B")
        self.assertEqual((rc, out), (1, f"run2: only in {t}/extra/B\nrun1: same\n"))
        rc, out = self.same_runs(f"{t}/extra/B", f"{t}/A")
        self.assertEqual((rc, out), (1, f"run2: only in {t}/extra/B\nrun1: same\n"))
        os.makedirs(f"{t}/empty")
        rc, out = self.same_runs(f"{t}/empty", f"{t}/empty")
        self.assertEqual((rc, out), (2, f"same_runs.py: {t}/empty is neither a run folder (no metrics.jsonl, "
                                        "summary.json or checkpoints/) nor holds run folders\n"))

    def test_what_is_not_a_run_is_refused(self):
        t = self.tmp
        # A path that does not exist, on either side (it said "2 lines against 0").
        for a, b in ((f"{t}/A/run1", f"{t}/none"), (f"{t}/none", f"{t}/A/run1")):
            self.assertEqual(self.same_runs(a, b), (2, f"same_runs.py: {t}/none does not exist\n"))
        self.assertEqual(self.same_runs(f"{t}/A/run1/metrics.jsonl", f"{t}/B/run1/metrics.jsonl")[0], 2)
        # Folders holding only folders that are not runs (each an empty x/; the tools/ folder):
        # not "x: same".
        for side in ("P", "Q"):
            os.makedirs(f"{t}/{side}/x")
        rc, out = self.same_runs(f"{t}/P", f"{t}/Q")
        self.assertEqual(rc, 2)
        self.assertIn(f"same_runs.py: {t}/P is neither a run folder", out)
        rc, out = self.same_runs(os.path.join(ROOT, "tools"), os.path.join(ROOT, "tools"))
        self.assertEqual(rc, 2)
        self.assertNotIn("same", out.replace("same_runs.py", ""))
        # A run against a folder that is no run; a folder of runs' other folders are left out.
        rc, out = self.same_runs(f"{t}/A/run1", f"{t}/P")
        self.assertEqual((rc, out), (2, f"same_runs.py: {t}/A/run1 is a run folder but {t}/P is not (no "
                                        "metrics.jsonl, summary.json or checkpoints/)\n"))
        shutil.copytree(f"{t}/A", f"{t}/withx/A")
        shutil.copytree(f"{t}/B", f"{t}/withx/B")
        os.makedirs(f"{t}/withx/A/x")
        os.makedirs(f"{t}/withx/B/logs")
        self.assertEqual(self.same_runs(f"{t}/withx/A", f"{t}/withx/B"), (0, "run1: same\n"))

    def test_empty_and_damaged_files_are_named(self):
        t = self.tmp
        # Two empty metrics.jsonl are no run to call the same.
        for side in ("E", "F"):
            os.makedirs(f"{t}/{side}/run1")
            open(f"{t}/{side}/run1/metrics.jsonl", "w").close()
        rc, out = self.same_runs(f"{t}/E", f"{t}/F")
        self.assertEqual((rc, out), (1, f"run1: NOT COMPARED\n  {t}/E/run1/metrics.jsonl holds no metrics line "
                                        f"(a run that logged nothing?)\n  {t}/F/run1/metrics.jsonl holds no "
                                        "metrics line (a run that logged nothing?)\n"))
        # A summary.json that is not JSON; a checkpoint's .json and .safetensors cut short.
        for what, rel, cut in (("summary", "summary.json", 5),
                               ("ckjson", "checkpoints/ckpt-00000003.json", 5),
                               ("cktensors", "checkpoints/ckpt-00000003.safetensors", 20)):
            shutil.copytree(f"{t}/A/run1", f"{t}/{what}/run1")
            path = f"{t}/{what}/run1/{rel}"
            if not os.path.exists(path):  # the checkpoint's tensors may be in files per part
                rel = "checkpoints/" + next(f for f in sorted(os.listdir(f"{t}/{what}/run1/checkpoints"))
                                            if f.endswith(".safetensors"))
                path = f"{t}/{what}/run1/{rel}"
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(data[:cut])
            rc, out = self.same_runs(f"{t}/B/run1", f"{t}/{what}/run1")
            self.assertEqual(rc, 1, out)
            self.assertIn(f"{t}/B/run1: NOT COMPARED\n  {path}: not ", out)
            self.assertNotIn("Traceback", out)

    def test_damaged_metrics_lines(self):
        t = self.tmp
        with open(f"{t}/A/run1/metrics.jsonl") as f:
            lines = f.read().splitlines(True)
        # The last line cut short (a crash): left out with a note; then one line fewer than B's.
        shutil.copytree(f"{t}/A/run1", f"{t}/cut/run1")
        with open(f"{t}/cut/run1/metrics.jsonl", "w") as f:
            f.write("".join(lines[:-1]) + lines[-1][:10])
        rc, out = self.same_runs(f"{t}/B/run1", f"{t}/cut/run1")
        self.assertEqual(rc, 1)
        self.assertIn(f"metrics.jsonl:{len(lines)}: the last line is cut short (a crash?): left out", out)
        self.assertIn(f"metrics.jsonl: {len(lines)} lines against {len(lines) - 1}", out)
        # A damaged line inside: named, DIFFERENT (it stopped the tool with a traceback).
        shutil.copytree(f"{t}/A/run1", f"{t}/mid/run1")
        with open(f"{t}/mid/run1/metrics.jsonl", "w") as f:
            f.write(lines[0] + "{broken\n" + "".join(lines[1:]))
        rc, out = self.same_runs(f"{t}/B/run1", f"{t}/mid/run1")
        self.assertEqual(rc, 1)
        self.assertIn(f"{t}/mid/run1/metrics.jsonl:2: not JSON", out)
        self.assertNotIn("Traceback", out)


if __name__ == "__main__":
    TRAINER = sys.argv.pop(1)
    unittest.main()
