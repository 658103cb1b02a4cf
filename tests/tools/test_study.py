#!/usr/bin/python3
"""The study runner (tools/study.py, the package tools/study/): grid expansion, expressions, bad
study files, aggregation and divergence, choices on a validation figure with test figures for
the chosen points only, Welch's t-test against the baseline, provenance (pure), then tiny real
studies (LeNet-5 on synthetic data, a few steps, 1 and 2 ranks) for running, caching by
settings and trainer version, resuming, reruns after a change, divergence, failures and a
validation split choosing the sweep point; every committed study report against what its
committed cells.json regenerates; and the downstream study's reports
(tools/downstream_study.py --report-only: every committed one with its own command, the probe's
table, a study partly run).

    /usr/bin/python3 tests/tools/test_study.py TRAINER_BINARY   (CTest runs it)
"""
import contextlib
import difflib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import study.cli  # noqa: E402
import study.report  # noqa: E402
import study.run  # noqa: E402
import study.spec  # noqa: E402
import downstream_study  # noqa: E402

TRAINER = None  # set from argv

BASE = """\
model: {name: lenet5, num_classes: 10}
data: {name: synthetic, size: 256, eval_size: 64, workers: 0}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
schedule: {name: constant}
reducer: {name: average}
train: {batch_per_rank: 8, log_every: 1, checksum_every: 0}
checkpoint: {every: 1000000}
"""


def write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def read(path):
    with open(path) as f:
        return f.read()


def study_text(base, methods, extra=""):
    return f"""\
base: {base}
question: a test
train_size: 256
budget: {{steps: 4}}
metric: {{name: eval_top1, goal: max, target: 0.05, diverged: 0.0, chance: 0.1}}
ranks: [1, 2]
seeds: [1]
set: {{schedule.warmup_steps: "=min(2, steps_per_epoch)", train.eval_every: 2}}
methods:
{methods}
{extra}"""


TWO_METHODS = """\
  adasum: {label: Adasum, set: {reducer.name: adasum}}
  average: {label: average, set: {reducer.name: average}, sweep: {optimizer.lr: [0.05, 0.1]}}
"""


class Pure(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ada_test_study_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.base = write(self.tmp, "base.yaml", BASE)

    def load(self, text):
        return study.spec.Study(write(self.tmp, "s.yaml", text))

    def test_a_trainer_stopped_by_a_signal_is_told_from_a_failed_one(self):
        # Both runners (study.py, downstream_study.py): exit 128 + SIGTERM/SIGINT/SIGUSR1 with the
        # trainer's "stopped by" line is a stop (TrainerStopped, a KeyboardInterrupt); any other
        # exit, or such an exit without that line (killed outright), is left to the caller.
        log = "step 7/40 ...\nstopped by SIGUSR1 at step 7 of 40: checkpoint at step 7 written\n"
        with self.assertRaises(KeyboardInterrupt) as e:
            study.run.raise_if_stopped_by_signal("cell-a", 138, log, " (note)")
        self.assertEqual(str(e.exception), "cell-a: its trainer was stopped by SIGUSR1 from outside the runner "
                                           "(a scheduler's preemption?) at step 7, with a checkpoint there (note)")
        study.run.raise_if_stopped_by_signal("cell-a", 1, log)
        study.run.raise_if_stopped_by_signal("cell-a", 143, "step 7/40 ...\n")

    def test_the_downstream_runner_resumes_a_stopped_run_of_the_same_command_and_trainer(self):
        # A fake trainer: stopped by a signal at step 3 (checkpoint written, exit 143), then
        # given --resume auto it finishes; the runner must stop on the first and resume on the rerun.
        fake = write(self.tmp, "trainer", """#!/bin/bash
for a in "$@"; do [[ $a == output.dir=* ]] && out=${a#output.dir=}; done
echo "trainer built from commit abc (trainer version v1)"
echo "args: $*"
if [[ " $* " == *" --resume auto"* ]]; then
  echo '{"eval_accuracy": 0.9, "steps": 6}' > "$out/summary.json"; exit 0
fi
mkdir -p "$out/checkpoints"; echo {} > "$out/checkpoints/ckpt-00000003.json"
echo "stopped by SIGTERM at step 3 of 6: checkpoint at step 3 written"; exit 143
""")
        os.chmod(fake, 0o755)
        out = os.path.join(self.tmp, "run")
        os.makedirs(out)
        cmd = [fake, "--set", f"output.dir={out}"]
        cells, path = {}, os.path.join(self.tmp, "cells.json")
        with self.assertRaises(KeyboardInterrupt) as e:
            downstream_study.run_cell(cells, path, "pretrain a", cmd, out, "v1")
        self.assertIn("pretrain a: its trainer was stopped by SIGTERM", str(e.exception))
        self.assertEqual(cells, {})
        ckpts = os.path.join(out, "checkpoints")
        line = " ".join(cmd)
        self.assertTrue(downstream_study.resumable(out + ".log", ckpts, line, "v1"))
        self.assertFalse(downstream_study.resumable(out + ".log", ckpts, line, "v2"))  # another trainer
        self.assertFalse(downstream_study.resumable(out + ".log", ckpts, line, None))
        self.assertFalse(downstream_study.resumable(out + ".log", ckpts, line + " --set x=1", "v1"))  # another command
        self.assertFalse(downstream_study.resumable(out + ".log", self.tmp + "/none", line, "v1"))
        with contextlib.redirect_stdout(io.StringIO()):
            cell = downstream_study.run_cell(cells, path, "pretrain a", cmd, out, "v1")
        self.assertEqual(cell["eval_accuracy"], 0.9)
        self.assertEqual(json.load(open(path))["pretrain a"]["eval_accuracy"], 0.9)
        log = open(out + ".log").read()
        self.assertIn("an earlier attempt was interrupted; resuming it", log)
        self.assertIn(" --resume auto", log.split("resuming it")[1])

    def test_an_interrupted_runner_lets_its_trainer_run_stop_at_a_step(self):
        # Both runners run mpirun through call_stopping_at_a_step. A fake mpirun that stops on
        # SIGUSR1 (as the ranks do when mpirun forwards it) and dies on SIGINT or SIGTERM. Ctrl-C
        # (SIGINT to the runner's process group, as a terminal sends it) and `kill` (SIGTERM to the
        # runner) must reach the fake as one SIGUSR1 only; a fake that ignores it is killed after
        # the grace time.
        def fake(name, on_usr1):
            path = write(self.tmp, name, f"""#!/bin/bash
trap '{on_usr1}' USR1
echo $$ > "$1.tmp"; mv "$1.tmp" "$1"
while true; do sleep 0.05; done
""")
            os.chmod(path, 0o755)
            return path

        def interrupt(mpirun, grace_s, how, train_sh=False):
            started, log = os.path.join(self.tmp, "started"), os.path.join(self.tmp, "log")
            for f in (started, log):
                if os.path.exists(f):
                    os.remove(f)
            driver = ("import subprocess, sys; sys.path.insert(0, sys.argv[1]); import study.run as r\n"
                      "r.stop_on_sigterm()\n"
                      "try:\n"
                      "    r.call_stopping_at_a_step(sys.argv[2:4], grace_s=float(sys.argv[5]),\n"
                      "                              stdout=open(sys.argv[4], 'w'), stderr=subprocess.STDOUT)\n"
                      "except KeyboardInterrupt:\n"
                      "    sys.exit(5)\n")
            cmd = [sys.executable, "-c", driver, os.path.join(ROOT, "tools"), mpirun, started, log, str(grace_s)]
            if train_sh:  # tools/train.sh's way, with the default grace: the output also on stdout
                cmd = [sys.executable, os.path.join(ROOT, "tools", "mpirun_stopping.py"), log, mpirun, started]
            p = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, text=True)
            for _ in range(600):
                if os.path.exists(started) or p.poll() is not None:
                    break
                time.sleep(0.05)
            with open(started) as f:
                pid = int(f.read())
            if how == "ctrl-c":
                os.killpg(p.pid, signal.SIGINT)
            else:
                p.send_signal(signal.SIGTERM)
            out = p.communicate(timeout=60)[0]
            with self.assertRaises(ProcessLookupError):  # the fake mpirun is gone too
                os.kill(pid, 0)
            with open(log) as f:
                return p.returncode, f.read(), out

        stops = fake("mpirun", 'echo "stopped by SIGUSR1 at step 7"; exit 138')
        for how in ("ctrl-c", "kill"):
            rc, log, out = interrupt(stops, 60, how)
            self.assertEqual((rc, log), (5, "stopped by SIGUSR1 at step 7\n"), how)
            self.assertIn("stopping the trainer run at its next step, with a checkpoint there", out)
            rc, log, out = interrupt(stops, None, how, train_sh=True)
            self.assertEqual((rc, log), (130, "stopped by SIGUSR1 at step 7\n"), how)
            self.assertIn("stopped by SIGUSR1 at step 7\n", out)
            self.assertIn("stopping the trainer run at its next step, with a checkpoint there", out)
        t0 = time.time()
        rc, log, out = interrupt(fake("stuck", ""), 1, "kill")
        self.assertEqual((rc, log), (5, ""))
        self.assertIn("the trainer run did not stop in time: killing it", out)
        self.assertLess(time.time() - t0, 30)

    def test_a_cell_in_progress_says_how_far_it_has_come(self):
        # Progress (called every PROGRESS_S while a cell trains): a line under the cell's line with
        # its newest step of its budget, the newest validation figure (metric.select) against the
        # target and the rate, only when a step was logged since the last line.
        text = study_text(self.base, TWO_METHODS).replace("chance: 0.1}", "chance: 0.1, select: val_top1}")
        s, run = self.load(text), os.path.join(self.tmp, "run")
        os.makedirs(run)
        out = io.StringIO()
        p = study.run.Progress.of_cell(s, run, 40, out=out)
        p()  # no metrics.jsonl yet
        write(run, "metrics.jsonl", '{"step": 5, "loss": 2.3, "samples_per_s": 412.6}\n')
        p()
        with open(os.path.join(run, "metrics.jsonl"), "a") as f:
            f.write('{"step": 10, "loss": 2.1, "samples_per_s": 420.2}\n{"step": 10, "val_top1": 0.0312, "eval_top1": 0.9}\n')
        p()
        p()  # nothing new
        lines = out.getvalue().split("\n")
        self.assertEqual(lines[0], "")  # the first goes under the cell's line, which has no newline yet
        self.assertRegex(lines[1], r"^    step 5/40, 413 samples/s, \d+s so far$")
        self.assertRegex(lines[2], r"^    step 10/40: val_top1 3\.12% at step 10 \(target 5\.00%\), 420 samples/s, "
                                   r"\d+s so far$")
        self.assertEqual((len(lines), p.lines), (4, 2))
        # A run outside a study (the downstream runner's): the training loss, on lines of their own.
        out = io.StringIO()
        study.run.Progress(run, out=out)()
        self.assertRegex(out.getvalue(), r"^    step 10: loss 2\.1000 at step 10, 420 samples/s, \d+s so far\n$")
        # The runner calls it while the trainer runs, and returns the trainer's exit code.
        calls = []
        rc = study.run.call_stopping_at_a_step(["sh", "-c", "sleep 1; exit 3"], progress=lambda: calls.append(1),
                                               progress_s=0.1)
        self.assertEqual(rc, 3)
        self.assertGreaterEqual(len(calls), 3)

    def test_machine_names_the_cpu_generation(self):
        # Two AMD EPYCs that print the same model name and both have AVX-512 (a Zen 4 and a
        # Zen 5) must not read as one CPU model in a report, which takes the text before ", ".
        def cpu(name, family, model, flags):
            return write(self.tmp, name, f"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\n"
                         f"model\t\t: {model}\nmodel name\t: AMD EPYC\nflags\t\t: fpu {flags}\n\n"
                         f"processor\t: 1\nmodel name\t: AMD EPYC\n")
        zen4 = study.run.machine(cpu("zen4", 25, 17, "avx2 avx512f avx512_bf16"))
        zen5 = study.run.machine(cpu("zen5", 26, 2, "avx2 avx512f avx512_bf16"))
        zen3 = study.run.machine(cpu("zen3", 25, 1, "avx2"))
        self.assertEqual(zen4.split(", ")[0], "AMD EPYC (AVX-512; family 25 model 17)")
        self.assertEqual(zen5.split(", ")[0], "AMD EPYC (AVX-512; family 26 model 2)")
        self.assertEqual(zen3.split(", ")[0], "AMD EPYC (AVX2; family 25 model 1)")
        self.assertEqual(study.run.machine(os.path.join(self.tmp, "absent")).split(", ")[0], "?")

    def error(self, text):
        with self.assertRaises(study.spec.StudyError) as cm:
            self.load(text)
        return str(cm.exception)

    def test_grid_names_hashes_and_expressions(self):
        s = self.load(study_text(self.base, TWO_METHODS, "seeds: [1, 2]\n").replace("seeds: [1]\n", ""))
        cells = s.cells()
        # 2 ranks x (1 + 2 sweep points) x 2 seeds
        self.assertEqual(len(cells), 12)
        self.assertEqual(len({c.name for c in cells}), 12)
        self.assertEqual(len({c.hash for c in cells}), 12)
        c = next(c for c in cells if c.name == "average-lr0.1-np2-s2")
        self.assertEqual(c.overrides["optimizer.lr"], 0.1)
        self.assertEqual(c.overrides["train.seed"], 2)
        self.assertEqual(c.overrides["train.steps"], 4)
        self.assertEqual(c.examples_per_step, 16)
        # steps_per_epoch = 256 // 2 // 8 // 1 = 16 -> min(2, 16)
        self.assertEqual(c.overrides["schedule.warmup_steps"], 2)
        self.assertIn("optimizer.lr=0.1", c.trainer_sets())
        # The hash follows the settings, not the cell's place in the grid.
        again = {x.name: x.hash for x in self.load(study_text(self.base, TWO_METHODS)).cells()}
        self.assertEqual(again["average-lr0.1-np2-s1"],
                         next(x.hash for x in cells if x.name == "average-lr0.1-np2-s1"))

    def test_bad_study_files_name_the_key(self):
        self.assertIn("unknown key(s) rankz", self.error(study_text(self.base, TWO_METHODS, "rankz: [1]\n")))
        self.assertIn("'base' is required", self.error("budget: {steps: 1}\n"))
        self.assertIn("budget must be", self.error(study_text(self.base, TWO_METHODS).replace(
            "budget: {steps: 4}", "budget: {steps: 0}")))
        self.assertIn("'ranks' must be", self.error(study_text(self.base, TWO_METHODS).replace(
            "ranks: [1, 2]", "ranks: [0]")))
        self.assertIn("methods.x.sweep.optimizer.lr", self.error(study_text(
            self.base, "  x: {set: {}, sweep: {optimizer.lr: 0.1}}\n")))
        self.assertIn("set.train.seed", self.error(study_text(self.base, TWO_METHODS).replace(
            "train.eval_every: 2", "train.seed: 3")))
        self.assertIn("set.train.examples_per_step: the runner sets it", self.error(study_text(
            self.base, TWO_METHODS).replace("train.eval_every: 2", "train.examples_per_step: 64")))
        self.assertIn("cannot read", self.error(study_text(self.tmp + "/missing.yaml", TWO_METHODS)))
        self.assertIn("baseline 'nope'", self.error(study_text(self.base, TWO_METHODS, "baseline: nope\n")))
        # An expression that needs train_size without it, and one that does not evaluate.
        no_size = self.load(study_text(self.base, TWO_METHODS).replace("train_size: 256\n", ""))
        with self.assertRaises(study.spec.StudyError) as cm:
            no_size.cells()
        self.assertIn("needs 'train_size'", str(cm.exception))
        broken = self.load(study_text(self.base, TWO_METHODS).replace("min(2, steps_per_epoch)", "nope(1)"))
        with self.assertRaises(study.spec.StudyError) as cm:
            broken.cells()
        self.assertIn("schedule.warmup_steps: cannot evaluate", str(cm.exception))

    def test_study_files_of_the_wrong_shape_name_the_file_and_key(self):
        # Each of these crashed with AttributeError ('list' object has no attribute 'items'), or a
        # yaml traceback for the base config, instead of naming the file and the key.
        text = study_text(self.base, TWO_METHODS)
        path = os.path.join(self.tmp, "s.yaml")
        for bad, key in [
                (text.replace("{label: Adasum, set: {reducer.name: adasum}}", "{set: [reducer.name=adasum]}"),
                 "methods.adasum.set: must be a mapping"),
                (text.replace('set: {schedule.warmup_steps: "=min(2, steps_per_epoch)", train.eval_every: 2}',
                              "set: reducer.name=average"), "set: must be a mapping"),
                (text.replace("sweep: {optimizer.lr: [0.05, 0.1]}", "sweep: [0.05, 0.1]"),
                 "methods.average.sweep: must be a mapping"),
                (text + "variants:\n  v: {set: [a, b]}\n", "variants.v.set: must be a mapping")]:
            msg = self.error(bad)
            self.assertIn(f"study {path}: {key}", msg)
        write(self.tmp, "bad_base.yaml", "model: {name: lenet5\n")
        self.assertIn("base config " + os.path.join(self.tmp, "bad_base.yaml") + ": not valid YAML",
                      self.error(study_text(os.path.join(self.tmp, "bad_base.yaml"), TWO_METHODS)))
        write(self.tmp, "list_base.yaml", "- model\n")
        self.assertIn("list_base.yaml: must be a mapping of sections",
                      self.error(study_text(os.path.join(self.tmp, "list_base.yaml"), TWO_METHODS)))

    def test_lists_and_counts_of_the_wrong_type_are_refused(self):
        # A string where a list belongs was iterated into characters (fetch: mnist fetched 'm', 'n',
        # ...; trainer_args: --foo passed '-', '-', 'f', ...) and true counted as the number 1.
        text = study_text(self.base, TWO_METHODS)
        self.assertIn("'fetch' must be a list (e.g. [mnist]), got 'mnist'", self.error(text + "fetch: mnist\n"))
        self.assertIn("'trainer_args' must be a list", self.error(text + "trainer_args: --foo\n"))
        self.assertEqual(self.load(text + "fetch: [mnist]\ntrainer_args: [--threads, 2]\n").trainer_args,
                         ["--threads", "2"])
        self.assertIn("budget must be", self.error(text.replace("budget: {steps: 4}", "budget: {steps: true}")))
        self.assertIn("'seeds' must be", self.error(text.replace("seeds: [1]", "seeds: [true]")))
        self.assertIn("train_size must be", self.error(text.replace("train_size: 256", "train_size: true")))
        self.assertIn("metric must be", self.error(text.replace("target: 0.05", "target: true")))

    def test_a_step_budget_per_cell(self):
        # budget {steps: "=EXPR"}: e.g. fewer steps for more examples per step; the steps an
        # expression sees (steps_per_epoch, total_steps) follow each cell's own budget.
        text = study_text(self.base, TWO_METHODS, "micro_batches: [1, 2]\n").replace(
            "budget: {steps: 4}", 'budget: {steps: "=max(2, 512 // examples_per_step)"}').replace(
            "min(2, steps_per_epoch)", "total_steps // 2")
        steps = {(c.ranks, c.mb): (c.overrides["train.steps"], c.overrides["schedule.warmup_steps"])
                 for c in self.load(text).cells()}
        # 8 examples per rank and micro-batch: 512 // 8 = 64, // 16 = 32, // 32 = 16
        self.assertEqual(steps, {(1, 1): (64, 32), (1, 2): (32, 16), (2, 1): (32, 16), (2, 2): (16, 8)})
        for bad, why in (('"=nope"', "budget.steps: cannot evaluate '=nope'"),
                         ('"=0.5 * ranks"', "gives 0.5 for 1 ranks x 1 micro-batches; it must give a whole number"),
                         ('"10"', "budget must be")):
            with self.assertRaises(study.spec.StudyError) as cm:
                self.load(text.replace('"=max(2, 512 // examples_per_step)"', bad)).cells()
            self.assertIn(why, str(cm.exception))

    def test_a_budget_unsets_the_base_configs_other_length(self):
        # The trainer takes a run's length in epochs or in steps, not both: a steps budget on a
        # base trained by epochs sets train.epochs to 0, and the other way round; a base that
        # gives neither gets nothing more (its cells keep their names and hashes).
        cells = self.load(study_text(self.base, TWO_METHODS)).cells()
        self.assertNotIn("train.epochs", cells[0].overrides)
        by_epochs = write(self.tmp, "by_epochs.yaml", BASE.replace("train: {", "train: {epochs: 6, "))
        o = self.load(study_text(by_epochs, TWO_METHODS)).cells()[0].overrides
        self.assertEqual((o["train.steps"], o["train.epochs"]), (4, 0))
        by_steps = write(self.tmp, "by_steps.yaml", BASE.replace("train: {", "train: {steps: 100, "))
        o = self.load(study_text(by_steps, TWO_METHODS).replace("budget: {steps: 4}", "budget: {epochs: 1}")
                      ).cells()[0].overrides
        self.assertEqual((o["train.epochs"], o["train.steps"]), (1, 0))

    def test_aggregation_divergence_and_best_sweep_point(self):
        s = self.load(study_text(self.base, TWO_METHODS))

        def rec(method, lr, seed, final, status="ok", evals=()):
            return {"method": method, "point": {"optimizer.lr": lr} if lr else {}, "ranks": 2,
                    "micro_batches": 1, "seed": seed, "examples_per_step": 16, "status": status,
                    "final": final, "wall_s": 10.0 * seed, "evals": list(evals),
                    "eval_wall": [(st, 5.0 * st + seed) for st, _ in evals]}
        records = [
            rec("adasum", None, 1, 0.5, evals=[(2, 0.01), (4, 0.5)]),
            rec("adasum", None, 2, 0.7, evals=[(2, 0.06), (4, 0.7)]),
            rec("average", 0.05, 1, 0.3, evals=[(2, 0.2), (4, 0.3)]),
            rec("average", 0.05, 2, None, status="diverged"),  # NaN before any evaluation
            rec("average", 0.1, 1, 0.6, evals=[(4, 0.6)]),
            rec("average", 0.1, 2, 0.0, status="diverged", evals=[(2, 0.0)]),
            rec("average", 0.1, 3, None, status="failed"),
        ]
        rows = study.report.aggregate(s, records)
        by = {(r["method"], r["point"].get("optimizer.lr")): r for r in rows}
        a = by[("adasum", None)]
        self.assertAlmostEqual(a["mean"], 0.6)
        self.assertAlmostEqual(a["std"], (0.02 ** 0.5))  # sample std of 0.5, 0.7
        self.assertEqual((a["reached"], a["steps_to_target"]), (2, 3.0))  # steps 4 and 2
        self.assertEqual(a["time_to_target"], 16.5)  # seed 1 at step 4: 21 s; seed 2 at step 2: 12 s
        lo = by[("average", 0.05)]
        self.assertEqual(lo["diverged"], 1)
        self.assertAlmostEqual(lo["mean"], (0.3 + 0.1) / 2)  # the diverged seed counts at chance
        hi = by[("average", 0.1)]
        self.assertEqual((hi["seeds"], hi["failed"], hi["diverged"]), (2, 1, 1))
        self.assertAlmostEqual(hi["mean"], 0.3)
        best = study.report.best_rows(s, rows)
        # average: lr 0.05 has mean 0.2, lr 0.1 has 0.3: the best is 0.1 (and 0.05 for a min goal).
        self.assertEqual([(r["method"], r["point"].get("optimizer.lr")) for r in best],
                         [("adasum", None), ("average", 0.1)])
        s.goal = "min"
        self.assertEqual(study.report.best_rows(s, rows)[1]["point"]["optimizer.lr"], 0.05)
        self.assertTrue(study.run.is_diverged_value(s, float("nan")))
        s.goal, s.diverged = "max", 0.2
        self.assertTrue(study.run.is_diverged_value(s, 0.2))
        self.assertFalse(study.run.is_diverged_value(s, 0.21))

    def test_variants_cross_the_methods_and_one_column_reports_as_bars(self):
        variants = ("variants:\n  calm: {label: no straggler}\n"
                    "  slow: {label: a straggler, set: {train.straggler.delay_ms: 5, optimizer.lr: 0.3}}\n")
        s = self.load(study_text(self.base, TWO_METHODS, variants).replace("ranks: [1, 2]", "ranks: [2]"))
        cells = {c.name: c for c in s.cells()}
        self.assertEqual(len(cells), 6)  # 2 variants x (1 + 2 sweep points)
        self.assertEqual(cells["adasum-slow-np2-s1"].overrides["train.straggler.delay_ms"], 5)
        self.assertEqual(cells["adasum-slow-np2-s1"].overrides["optimizer.lr"], 0.3)  # the variant's
        self.assertEqual(cells["average-lr0.1-slow-np2-s1"].overrides["optimizer.lr"], 0.1)  # the sweep wins
        self.assertNotIn("train.straggler.delay_ms", cells["adasum-calm-np2-s1"].overrides)
        self.assertEqual(study.cli.parse_only(["variant=slow"]), {"variant": {"slow"}})
        records = []
        for c in cells.values():
            records.append({"name": c.name, "hash": c.hash, "method": c.method, "ranks": 2, "micro_batches": 1,
                            "variant": c.variant, "seed": 1, "point": c.point, "examples_per_step": 16,
                            "status": "ok", "reason": "", "final": 0.5 if c.variant == "calm" else 0.4,
                            "wall_s": 3.0, "evals": [(2, 0.3), (4, 0.5)], "eval_wall": [(2, 1.0), (4, 2.0)]})
        out = os.path.join(self.tmp, "report")
        study.report.write_report(s, records, out, [], len(cells))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("| method | 2 ranks, no straggler | 2 ranks, a straggler |", report)
        self.assertIn("| Adasum | 50.00% (1 seed) | 40.00% (1 seed) |", report)  # no spread from one seed
        self.assertIn("| Adasum | 2 steps, 1 s (1/1) |", report)
        for f in ("curves.png", "final_vs_examples.png", "steps_to_target.png", "time_to_target.png"):
            self.assertGreater(os.path.getsize(os.path.join(out, f)), 0, f)
        with self.assertRaises(study.spec.StudyError):
            self.load(study_text(self.base, TWO_METHODS, "variants: {a: {sett: {}}}\n"))

    def test_a_method_can_run_fewer_seeds(self):
        # An LR probe: one seed of a method while the others run the study's three.
        methods = TWO_METHODS.replace("set: {reducer.name: adasum}}", "set: {reducer.name: adasum}, seeds: [2]}")
        s = self.load(study_text(self.base, methods).replace("seeds: [1]", "seeds: [1, 2, 3]")
                      .replace("ranks: [1, 2]", "ranks: [2]"))
        self.assertEqual(sorted(c.name for c in s.cells()),
                         ["adasum-np2-s2"] + [f"average-lr{lr}-np2-s{k}" for lr in ("0.05", "0.1") for k in (1, 2, 3)])
        records = [{"name": c.name, "hash": c.hash, "method": c.method, "ranks": 2, "micro_batches": 1,
                    "variant": "", "seed": c.seed, "point": c.point, "examples_per_step": 16, "status": "ok",
                    "reason": "", "final": 0.5, "wall_s": 3.0, "evals": [(4, 0.5)], "eval_wall": [(4, 2.0)]}
                   for c in s.cells()]
        out = os.path.join(self.tmp, "report")
        study.report.write_report(s, records, out, [], len(records))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("- **Adasum** (`adasum`): `reducer.name: adasum`; seed 2 only", report)
        self.assertNotIn("only", report.split("- **average**")[1].split("\n")[0])
        self.assertIn("| Adasum | 50.00% (1 seed) |", report)
        self.assertIn("| average | 50.00% ± 0.00 (lr 0.05) |", report)
        self.assertIn("| Adasum | 4 steps, 2 s (1/1) |", report)
        # Cells from two CPU models: seconds would compare machines, so the report leaves them out.
        for r, cpu in zip(records, ["AMD EPYC (AVX-512)", "Intel(R) Xeon(R) Processor (AVX-512)"] * 4):
            r["machine"] = f"{cpu}, 2 cores, 24 GiB, Linux 6"
        study.report.write_report(s, records, out, [], len(records))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("| Adasum | 4 steps (1/1) |", report)
        self.assertIn("the cells ran on 2 CPU models (AMD EPYC (AVX-512); Intel(R) Xeon(R) Processor", report)
        self.assertFalse(os.path.exists(os.path.join(out, "time_to_target.png")))
        # A record from before the family and model were recorded may be the same CPU as a later one.
        records[2]["machine"] = "AMD EPYC (AVX-512; family 25 model 17), 2 cores, 24 GiB, Linux 6"
        study.report.write_report(s, records, out, [], len(records))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("the cells ran on 2 to 3 CPU models (AMD EPYC (AVX-512); AMD EPYC (AVX-512; family 25 model "
                      "17); Intel(R) Xeon(R) Processor (AVX-512); the older records without family and model (AMD "
                      "EPYC (AVX-512)) may be one of those with them)", report)
        self.assertIn("methods.adasum.seeds: must be", self.error(study_text(self.base, methods.replace(
            "seeds: [2]", "seeds: []"))))

    def test_choices_on_validation_and_test_figures_for_the_chosen_points_only(self):
        # metric.select: the best sweep point is the best mean of the validation figure, even
        # where another point has the better test figure; the report shows test figures for the
        # chosen points only, and the validation figure the choice was made on.
        text = study_text(self.base, TWO_METHODS).replace(
            "chance: 0.1}", "chance: 0.1, select: val_top1}").replace("ranks: [1, 2]", "ranks: [2]")
        s = self.load(text)
        self.assertEqual(s.select, "val_top1")
        val = {0.05: 0.8, 0.1: 0.6}  # lr 0.05 is better on validation ...
        test = {0.05: 0.4, 0.1: 0.9}  # ... and worse on test
        records = []
        for c in s.cells():
            lr = c.point.get("optimizer.lr")
            records.append({"name": c.name, "hash": c.hash, "method": c.method, "ranks": 2, "micro_batches": 1,
                            "variant": "", "seed": 1, "point": c.point, "examples_per_step": 16, "status": "ok",
                            "reason": "", "final": test.get(lr, 0.5), "select_final": val.get(lr, 0.7),
                            "select_evals": [(4, val.get(lr, 0.7))], "wall_s": 3.0,
                            "evals": [(4, test.get(lr, 0.5))], "eval_wall": [(4, 2.0)]})
        rows = study.report.aggregate(s, records)
        best = study.report.best_rows(s, rows)
        self.assertEqual([(r["method"], r["point"].get("optimizer.lr")) for r in best],
                         [("adasum", None), ("average", 0.05)])
        out = os.path.join(self.tmp, "report")
        study.report.write_report(s, records, out, [], len(records))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("Choices are made on the validation figure `val_top1`", report)
        self.assertIn("| average | 40.00% (1 seed) (lr 0.05) |", report)  # the chosen point's test figure
        self.assertNotIn("90.00%", report)  # the point not chosen: its test figure is not shown
        self.assertIn("## Validation val_top1 of the chosen points", report)
        # lr 0.05 is the smallest value the sweep tried: the report says the best may lie beyond.
        self.assertIn("## Choices at the edge of their sweep", report)
        self.assertIn("- average, 2 ranks: `optimizer.lr` 0.05, the smallest tried (0.05, 0.1)", report)
        self.assertIn("| average | 80.00% (1 seed) (lr 0.05) |", report)
        every = report.split("## Every cell")[1]
        self.assertIn("| average | lr 0.1 | 2 | 16 | 1 | 60.00% (1 seed) |  | · | 0 | · | · | · | · | 3 |", every)
        self.assertIn("| average | lr 0.05 | 2 | 16 | 1 | 80.00% (1 seed) | ✓ | 40.00% (1 seed) | 0 | 1/1 |", every)
        # Without select, the report says that choices were made on the test figure.
        plain = self.load(study_text(self.base, TWO_METHODS).replace("ranks: [1, 2]", "ranks: [2]"))
        study.report.write_report(plain, records, out, [], len(records))
        with open(os.path.join(out, "report.md")) as f:
            self.assertIn("**Choices were made on the test figure** `eval_top1`", f.read())
        self.assertIn("metric.select must name the validation figure", self.error(
            text.replace("select: val_top1", "select: eval_top1")))

    def test_choosing_by_steps_to_the_target_on_validation(self):
        # metric.choose_by: steps: the point that reaches the target (0.05) on val_top1 in every
        # seed, then in the fewest steps, wins even with a worse final validation figure.
        text = study_text(self.base, TWO_METHODS).replace(
            "chance: 0.1}", "chance: 0.1, select: val_top1, choose_by: steps}").replace("ranks: [1, 2]", "ranks: [2]")
        s = self.load(text)
        val = {0.05: [(2, 0.01), (4, 0.9)], 0.1: [(2, 0.06), (4, 0.5)]}  # 0.1 reaches at step 2, 0.05 at 4
        records = []
        for c in s.cells():
            lr = c.point.get("optimizer.lr")
            ev = val.get(lr, [(2, 0.0), (4, 0.0)])  # adasum never reaches it
            records.append({"name": c.name, "hash": c.hash, "method": c.method, "ranks": 2, "micro_batches": 1,
                            "variant": "", "seed": 1, "point": c.point, "examples_per_step": 16, "status": "ok",
                            "reason": "", "final": 0.5, "select_final": ev[-1][1], "select_evals": ev,
                            "wall_s": 3.0, "evals": [(2, 0.0), (4, 0.01)],  # test: never reaches it
                            "eval_wall": [(2, 1.0), (4, 2.0)],
                            # adasum's run gave up (train.stop_at.give_up_after) at step 4
                            "gave_up_at": 4 if c.method == "adasum" else None})
        best = study.report.best_rows(s, study.report.aggregate(s, records))
        self.assertEqual([(r["method"], r["point"].get("optimizer.lr"), r["select_steps"]) for r in best],
                         [("adasum", None, None), ("average", 0.1, 2)])
        out = os.path.join(self.tmp, "report")
        study.report.write_report(s, records, out, [], len(records))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("reached 5.00% on `val_top1` most often, then in the fewest steps", report)
        self.assertNotIn("Choices were made on the test figure", report)
        self.assertIn("## Validation steps to 5.00% on val_top1 of the chosen points", report)
        self.assertIn("| average | 2 steps (1/1) (lr 0.1) |", report)
        self.assertIn("| Adasum | not reached (final 0.00% (1 seed)); gave up at step 4 (train.stop_at.give_up_after) |", report)
        # Every cell's row shows its validation steps (or why it has none), not its final figure.
        self.assertIn("| average | lr 0.1 | 2 | 16 | 1 | 2 steps (1/1) | ✓ |", report)
        self.assertIn("| average | lr 0.05 | 2 | 16 | 1 | 4 steps (1/1) |  |", report)
        self.assertIn("## Where each method stops scaling (critical batch size)", report)
        # The scaling fit counts steps on the validation figure the runs stop on, not on test.
        self.assertIn("Steps to the target on `val_top1` (validation)", report)
        self.assertIn("| average | 16: 2 | – | not placed: 1 size reached the target (3 needed) | – |", report)
        self.assertNotIn("## Choices from an unfinished sweep", report)
        # With average's LR 0.1 not run yet, LR 0.05 is chosen from 1 of 2 sweep points: the report
        # says so, and the critical-batch fit leaves that size out.
        partial = [r for r in records if r["point"].get("optimizer.lr") != 0.1]
        study.report.write_report(s, partial, out, [], len(records))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("## Choices from an unfinished sweep", report)
        self.assertIn("- average, 2 ranks: 1 of 2 sweep points run", report)
        self.assertIn("| average | 16: 4 (sweep 1 of 2: not fitted) | – | not placed: 0 sizes reached the target "
                      "(3 needed); sizes with an unfinished sweep left out | – |", report)
        self.assertIn("metric.choose_by must be final", self.error(text.replace("choose_by: steps", "choose_by: fast")))
        self.assertIn("metric.choose_by must be final", self.error(
            text.replace("target: 0.05, ", "")))

    def test_a_variant_runs_its_own_micro_batches_and_the_fit_takes_each_sizes_fewest_steps(self):
        # A variant with its own micro_batches list (e.g. smaller per-rank batches at one
        # micro-batch) adds sizes to a method's curve; where two variants share a size, the fit
        # takes the one with fewer validation steps, in bold, and says which variant it was.
        variants = ("micro_batches: [1, 2, 4]\n"
                    "variants:\n  \"\": {label: main}\n"
                    "  half: {label: half batch, set: {train.batch_per_rank: 4}, micro_batches: [1, 2]}\n")
        text = study_text(self.base, TWO_METHODS.replace(", sweep: {optimizer.lr: [0.05, 0.1]}", ""), variants)
        text = text.replace("chance: 0.1}", "chance: 0.1, select: val_top1, choose_by: steps}").replace(
            "ranks: [1, 2]", "ranks: [2]")
        s = self.load(text)
        cells = {c.name: c for c in s.cells()}
        self.assertEqual(sorted(cells), sorted(f"{m}{v}-np2-mb{mb}-s1" for m in ("adasum", "average")
                                              for v, mbs in (("", (1, 2, 4)), ("-half", (1, 2))) for mb in mbs))
        self.assertEqual(cells["average-half-np2-mb2-s1"].examples_per_step, 16)  # 2 ranks x 2 x 4
        self.assertEqual(cells["average-np2-mb2-s1"].examples_per_step, 32)
        # The main variant's cells keep the names and hashes they had without the variant.
        plain = {c.name: c.hash for c in self.load(text.replace(
            text[text.index("variants:"):text.index("methods:")], "")).cells()}
        self.assertEqual(plain["average-np2-mb2-s1"], cells["average-np2-mb2-s1"].hash)
        self.assertEqual(s.column_label(2, 2, "half"), "2×2×4 = 16 a step, half batch")
        self.assertEqual(s.column_label(2, 1, ""), "2×1×8 = 16 a step, main")  # columns differ in shape
        self.assertIn("variants.half.micro_batches: must be a non-empty list", self.error(
            text.replace("micro_batches: [1, 2]}", "micro_batches: []}")))
        steps = {("", 1): 8, ("", 2): 6, ("", 4): 4, ("half", 1): 12, ("half", 2): 6}  # 16 twice: 8 and 6
        records = []
        for c in cells.values():
            n = steps[(c.variant, c.mb)] if c.method == "average" else 2
            ev = [(n, 0.06)]
            records.append({"name": c.name, "hash": c.hash, "method": c.method, "ranks": 2, "micro_batches": c.mb,
                            "variant": c.variant, "seed": 1, "point": c.point,
                            "examples_per_step": c.examples_per_step, "status": "ok", "reason": "", "final": 0.5,
                            "select_final": 0.06, "select_evals": ev, "wall_s": 3.0, "evals": ev,
                            "eval_wall": [], "gave_up_at": None})
        out = os.path.join(self.tmp, "report")
        study.report.write_report(s, records, out, [], len(records))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("| average | **8: 12** (half batch), 16: 8 (main), **16: 6** (half batch), **32: 6** (main), "
                      "**64: 4** (main) |", report)
        self.assertGreater(os.path.getsize(os.path.join(out, "critical_batch.png")), 0)  # the fits drawn
        self.assertIn("![where each method stops scaling](critical_batch.png)", report)
        # The variant is chosen on the method's seeds, as a sweep point is: another seed of the
        # half batch's 16 (20 steps) moves its mean to 13, past the main variant's 8, but not the
        # choice; the fit takes the mean.
        extra = dict(next(r for r in records if r["name"] == "average-half-np2-mb2-s1"), seed=2,
                     name="average-half-np2-mb2-s2", select_evals=[(20, 0.06)], evals=[(20, 0.06)])
        study.report.write_report(s, records + [extra], out, [], len(records) + 1)
        with open(os.path.join(out, "report.md")) as f:
            self.assertIn("16: 8 (main), **16: 13** (half batch), **32: 6**", f.read())

    def test_confirm_seeds_run_the_chosen_point_again_without_changing_the_choice(self):
        # confirm_seeds: once a column's sweep has run at the method's seeds, its chosen point runs
        # these seeds too. The choice reads the sweep's seeds alone (the other points never ran
        # the confirm seeds); the row and the critical-batch fit read them all, the fit per seed too.
        methods = TWO_METHODS.replace("[0.05, 0.1]}}", "[0.05, 0.1]}, confirm_seeds: [2, 3]}")
        text = study_text(self.base, methods, "micro_batches: [1, 2, 4]\nbaseline: average\n").replace(
            "chance: 0.1}", "chance: 0.1, select: val_top1, choose_by: steps}").replace("ranks: [1, 2]", "ranks: [2]")
        s = self.load(text)
        self.assertEqual(s.methods["average"]["confirm_seeds"], [2, 3])
        self.assertEqual(len(s.cells()), 9)  # 3 sizes x (1 + 2 points) at seed 1
        self.assertEqual(s.planned(), 9 + 3 * 2)
        self.assertIn("methods.adasum.confirm_seeds: the method has no sweep", self.error(
            text.replace("{reducer.name: adasum}}", "{reducer.name: adasum}, confirm_seeds: [2]}")))
        self.assertIn("methods.average.confirm_seeds: [2] already among its seeds [1, 2]", self.error(
            text.replace("confirm_seeds: [2, 3]", "seeds: [1, 2], confirm_seeds: [2, 3]")))
        self.assertIn("methods.average.confirm_seeds: must be a list of positive integers", self.error(
            text.replace("confirm_seeds: [2, 3]", "confirm_seeds: 2")))

        def rec(c, n):  # a cell whose validation figure reaches the target at step n (None: never)
            ev = [(n, 0.06)] if n else [(8, 0.01)]
            return {"name": c.name, "hash": c.hash, "method": c.method, "ranks": 2, "micro_batches": c.mb,
                    "variant": "", "seed": c.seed, "point": c.point, "examples_per_step": c.examples_per_step,
                    "status": "ok", "reason": "", "final": 0.5, "select_final": ev[-1][1], "select_evals": ev,
                    "wall_s": 3.0, "evals": ev, "eval_wall": [], "gave_up_at": None}

        cells = {c.name: c for c in s.cells()}
        # Seed 1: lr 0.1 is the faster point at every size; at 4 micro-batches lr 0.05 has not run.
        steps = {(1, 0.05): 12, (1, 0.1): 10, (2, 0.05): 8, (2, 0.1): 6, (4, 0.1): 4}
        records = [rec(c, steps[(c.mb, c.point["optimizer.lr"])]) for c in cells.values()
                   if c.method == "average" and (c.mb, c.point["optimizer.lr"]) in steps]
        records += [rec(c, 2) for c in cells.values() if c.method == "adasum"]
        chosen = study.report.confirm_choices(s, records)
        self.assertEqual(chosen, {("average", 2, 1, ""): {"optimizer.lr": 0.1},
                                  ("average", 2, 2, ""): {"optimizer.lr": 0.1}})  # not mb 4: unfinished
        more = {c.name: c for c in s.confirm_cells(chosen)}
        self.assertEqual(sorted(more), ["average-lr0.1-np2-mb1-s2", "average-lr0.1-np2-mb1-s3",
                                        "average-lr0.1-np2-mb2-s2", "average-lr0.1-np2-mb2-s3"])
        # The same settings as the sweep's cell but the seed.
        sweep_cell = cells["average-lr0.1-np2-mb1-s1"]
        self.assertEqual({k: v for k, v in more["average-lr0.1-np2-mb1-s2"].overrides.items() if k != "train.seed"},
                         {k: v for k, v in sweep_cell.overrides.items() if k != "train.seed"})
        # Seeds 2 and 3 of lr 0.1 are slow (mean 14 and 10 steps over three seeds, more than lr
        # 0.05's seed 1): the choice stays lr 0.1, made on seed 1 alone.
        confirm = {"average-lr0.1-np2-mb1-s2": 16, "average-lr0.1-np2-mb1-s3": 16,
                   "average-lr0.1-np2-mb2-s2": 12, "average-lr0.1-np2-mb2-s3": 12}
        records += [rec(more[n], st) for n, st in confirm.items()]
        self.assertEqual(study.report.confirm_choices(s, records), chosen)
        best = {r["micro_batches"]: r for r in study.report.best_rows(s, study.report.aggregate(s, records))
                if r["method"] == "average"}
        self.assertEqual(best[1]["point"], {"optimizer.lr": 0.1})
        self.assertEqual((best[1]["seeds"], best[1]["select_steps"]), (3, 14))
        self.assertEqual((best[2]["seeds"], best[2]["select_steps"]), (3, 10))
        # The fit takes the three-seed means; per seed only where a seed reached every fitted size.
        out = os.path.join(self.tmp, "report")
        study.report.write_report(s, records, out, [], s.planned())
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("then runs seeds 2, 3 too", report)
        self.assertIn("seeds 1 (`average`'s chosen points also 2, 3)", report)
        self.assertIn("Cells: 12 of 15 finished", report)
        row = next(line for line in report.splitlines() if line.startswith("| average | 16: 14, 32: 10, 64: 4 (sweep"))
        self.assertTrue(row.endswith("| – |"), row)  # two sizes: no fit, none per seed
        records.append(rec(cells["average-lr0.05-np2-mb4-s1"], 5))
        self.assertEqual(len(study.report.confirm_choices(s, records)), 3)
        records += [rec(c, n) for c, n in zip(s.confirm_cells({("average", 2, 4, ""): {"optimizer.lr": 0.1}}), (3, 4))]
        study.report.write_report(s, records, out, [], s.planned())
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        row = next(line for line in report.splitlines() if line.startswith("| average | 16: 14, 32: 10, 64: 4"))
        # A seed short of the target: that size is shown with k of n, not fitted (the mean over the
        # seeds that reached it would flatter it).
        short = [dict(r, select_evals=[(8, 0.01)], evals=[(8, 0.01)]) if r["name"] == "average-lr0.1-np2-mb2-s3"
                 else r for r in records]
        study.report.write_report(s, short, out, [], s.planned())
        with open(os.path.join(out, "report.md")) as f:
            self.assertIn("32: 9 (2 of 3 seeds reached: not fitted)", f.read())
        # Steps against the baseline are counted on the validation figure the runs stop on.
        self.assertIn("Steps to val_top1 ", report)
        self.assertIn("| Adasum | -12 (", report.split("Steps to val_top1 ")[1])
        per_seed = row.rsplit("|", 2)[1]
        fits = {int(seed): b for b, seed in re.findall(r"([\d,]+|not placed) \(seed (\d+)", per_seed)}
        self.assertEqual(sorted(fits), [1, 2, 3], row)
        self.assertTrue(per_seed.strip().endswith("over 16, 32, 64"), per_seed)
        # A seed not run at some size (seed 3 at 64): the two seeds that were keep their three
        # sizes; seed 3 would leave them two, too few to fit.
        no_s3 = [r for r in records if r["name"] != "average-lr0.1-np2-mb4-s3"]
        study.report.write_report(s, no_s3, out, [], s.planned())
        with open(os.path.join(out, "report.md")) as f:
            row3 = next(line for line in f.read().splitlines() if line.startswith("| average | 16: 14, 32: 10, 64: 4"))
        per_seed3 = row3.rsplit("|", 2)[1]
        self.assertEqual(re.findall(r"\(seed (\d+)", per_seed3), ["1", "2"], row3)
        self.assertTrue(per_seed3.strip().endswith("over 16, 32, 64"), per_seed3)
        # Two seeds sharing four sizes win over three sharing three of them (a fit on three sizes
        # can land outside them): seed 3 waits for its fourth size.
        fits4, sizes4 = study.report.seed_fits(s, [
            {"examples_per_step": e, "records": [{"seed": sd, "select_evals": [(n, 0.06)], "evals": [(n, 0.06)]}
                                                 for sd, n in seeds.items()]}
            for e, seeds in ((16, {1: 14, 2: 15, 3: 13}), (32, {1: 10, 2: 9, 3: 11}), (64, {1: 6, 2: 7, 3: 6}),
                             (128, {1: 5, 2: 5}))])
        self.assertEqual(([sd for sd, _, _ in fits4], sizes4), ([1, 2], [16, 32, 64, 128]))
        # Per-seed critical batch sizes against the baseline's: Welch over the fits that placed one,
        # both methods' seeds fitted over the same sizes. Adasum's seeds 2 and 3 have not run 128,
        # averaging's have: a fit over 16-128 against one over 16-64 would compare spans, not
        # methods, so both are fitted over 16-64.
        def fitted(steps):
            return {e: {"examples_per_step": e, "records": [
                {"seed": sd, "select_evals": [(n, 0.06)], "evals": [(n, 0.06)]} for sd, n in seeds.items()]}
                for e, seeds in steps.items()}
        # Each seed's steps are S_min (1 + B_crit / B) exactly: averaging's B_crit 16, 16, 24 over
        # 16-64, Adasum's 48, 32, 32.
        average = {16: {1: 16, 2: 8, 3: 20}, 32: {1: 12, 2: 6, 3: 14}, 64: {1: 10, 2: 5, 3: 11},
                   128: {1: 9, 2: 5, 3: 10}}
        adasum = {16: {1: 16, 2: 12, 3: 24}, 32: {1: 10, 2: 8, 3: 16}, 64: {1: 7, 2: 6, 3: 12}, 128: {1: 5}}
        lines = []
        study.report.write_critical_batch_significance(
            s, [{"method": "average", "fitted": fitted(average)}, {"method": "adasum", "fitted": fitted(adasum)}], lines)

        def seed_b(steps, sd, sizes):
            return study.report.critical_batch([(e, steps[e][sd]) for e in sizes])[1]
        over = (16, 32, 64)
        d, p = study.report.welch([seed_b(adasum, sd, over) for sd in (1, 2, 3)],
                                  [seed_b(average, sd, over) for sd in (1, 2, 3)])
        self.assertIn(f"- Adasum: B_crit {d:+,.0f} against average (3 and 3 seeds over 16, 32, 64; "
                      f"{study.report.fmt_p(p)}, {study.report.noise_verdict(p)})", lines)
        self.assertEqual(round(d), 19)  # (48 + 32 + 32 - 16 - 16 - 24) / 3
        # A seed whose fit lands outside the sizes (Adasum's seed 3 at 384) is left out of the test.
        adasum[64][3] = 5
        lines = []
        study.report.write_critical_batch_significance(
            s, [{"method": "average", "fitted": fitted(average)}, {"method": "adasum", "fitted": fitted(adasum)}], lines)
        self.assertEqual(round(seed_b(adasum, 3, over)), 384)
        self.assertTrue(any(line.startswith("- Adasum: B_crit ") and "(2 and 3 seeds over 16, 32, 64;" in line
                            for line in lines), lines)
        # Each seed's own points fit as S = S_min (1 + B_crit / examples), e.g. seed 1's 10, 6, 4.
        for seed, pts in ((1, (10, 6, 4)), (2, (16, 12, 3)), (3, (16, 12, 4))):
            b_crit = study.report.critical_batch(list(zip((16, 32, 64), pts)))[1]
            self.assertEqual(fits[seed], f"{b_crit:,.0f}", (seed, row))

    def test_bracket_runs_only_the_neighbours_of_the_best_point(self):
        # bracket: along one swept key, a point runs only while it neighbours (or is) its column's
        # best so far; the column is finished once the choice's neighbours have run, so a sweep
        # extended past its edge costs only the columns whose choice sits at that edge.
        methods = TWO_METHODS.replace("[0.05, 0.1]}", "[0.0125, 0.025, 0.05, 0.1, 0.2]}, confirm_seeds: [2]")
        text = study_text(self.base, methods, "bracket: true\n").replace(
            "chance: 0.1}", "chance: 0.1, select: val_top1, choose_by: steps}").replace("ranks: [1, 2]", "ranks: [2]")
        s = self.load(text)
        self.assertTrue(s.bracket)
        self.assertIn("bracket: methods.average.sweep.optimizer.lr: [0.1, 0.05, 0.2] must be distinct numbers in order",
                      self.error(text.replace("[0.0125, 0.025, 0.05, 0.1, 0.2]", "[0.1, 0.05, 0.2]")))
        self.assertIn("bracket: methods.average.sweep.optimizer.momentum: [0.9, 0.8, 0.95] must be distinct", self.error(
            text.replace("sweep: {optimizer.lr:", "sweep: {optimizer.momentum: [0.9, 0.8, 0.95], optimizer.lr:")))
        self.assertIn("bracket must be true or false", self.error(text.replace("bracket: true", "bracket: 1")))
        cells = {c.point.get("optimizer.lr"): c for c in s.cells() if c.method == "average"}
        self.assertEqual(len(cells), 5)

        def rec(lr, n):  # lr's cell, reaching the target at step n (None: not at all)
            c = cells[lr]
            ev = [(n, 0.06)] if n else [(8, 0.01)]
            return {"name": c.name, "hash": c.hash, "method": c.method, "ranks": 2, "micro_batches": 1,
                    "variant": "", "seed": 1, "point": c.point, "examples_per_step": c.examples_per_step,
                    "status": "ok", "reason": "", "final": 0.5, "select_final": ev[-1][1], "select_evals": ev,
                    "wall_s": 3.0, "evals": ev, "eval_wall": [], "gave_up_at": None}

        def needed(done):
            return [lr for lr, c in sorted(cells.items()) if study.report.bracket_needed(s, c, done)]

        def finished(done):
            rows = study.report.aggregate(s, done)
            return study.report.sweep_finished(s, rows, study.report.best_rows(s, rows)[0])
        self.assertEqual(needed([]), [0.0125, 0.025, 0.05, 0.1, 0.2])  # no choice yet: any point
        self.assertEqual(needed([rec(0.05, None)]), [0.0125, 0.025, 0.05, 0.1, 0.2])  # none reached
        done = [rec(0.05, 6)]
        self.assertEqual(needed(done), [0.025, 0.05, 0.1])
        self.assertFalse(finished(done))
        done.append(rec(0.1, 4))  # better: the bracket moves up
        self.assertEqual(needed(done), [0.05, 0.1, 0.2])
        done.append(rec(0.2, None))
        self.assertTrue(finished(done))  # 0.1's neighbours ran; 0.0125 and 0.025 never need to
        chosen = study.report.confirm_choices(s, done)
        self.assertEqual(chosen, {("average", 2, 1, ""): {"optimizer.lr": 0.1}})
        (seed2,) = s.confirm_cells(chosen)
        self.assertTrue(study.report.bracket_needed(s, seed2, done))  # a confirm seed always runs
        out = os.path.join(self.tmp, "report")
        study.report.write_report(s, done, out, [], len(s.cells()))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("- `bracket`: each column's sweep ran outwards", report)
        self.assertNotIn("Choices from an unfinished sweep", report)
        # At the list's edge the choice has one neighbour to run.
        self.assertTrue(finished([rec(0.2, 3), rec(0.1, 4)]))
        self.assertFalse(finished([rec(0.2, 3)]))

    def test_bracket_over_two_keys_and_points_that_do_not_fit_the_run(self):
        # Two swept keys: a point is needed while it is one key one value away from the column's
        # best; a warm-up as long as the run (4 steps) is left out of the grid, so the choice's
        # neighbours are the points that fit, and its edge is "the largest that fits the run".
        methods = TWO_METHODS.replace("sweep: {optimizer.lr: [0.05, 0.1]}",
                                      "sweep: {optimizer.lr: [0.025, 0.05, 0.1], schedule.warmup_steps: [1, 2, 4]}")
        s = self.load(study_text(self.base, methods, "bracket: true\n").replace("ranks: [1, 2]", "ranks: [2]")
                      .replace("chance: 0.1}", "chance: 0.1, select: val_top1}"))
        cells = {(c.point["optimizer.lr"], c.point["schedule.warmup_steps"]): c for c in s.cells()
                 if c.method == "average"}
        self.assertEqual(sorted(cells), [(lr, w) for lr in (0.025, 0.05, 0.1) for w in (1, 2)])
        unfit = s.unfit_cells()
        self.assertEqual(sorted(c.point["optimizer.lr"] for c in unfit), [0.025, 0.05, 0.1])
        self.assertEqual(unfit[0].unfit, "schedule.warmup_steps 4 is not shorter than the run (4 steps)")

        def rec(point, val):
            c = cells[point]
            ev = [(4, val)]
            return {"name": c.name, "hash": c.hash, "method": c.method, "ranks": 2, "micro_batches": 1,
                    "variant": "", "seed": 1, "point": c.point, "examples_per_step": c.examples_per_step,
                    "status": "ok", "reason": "", "final": val, "select_final": val, "select_evals": ev,
                    "wall_s": 3.0, "evals": ev, "eval_wall": [], "gave_up_at": None}
        done = [rec((0.05, 2), 0.9)]
        needed = sorted(p for p, c in cells.items() if study.report.bracket_needed(s, c, done))
        self.assertEqual(needed, [(0.025, 2), (0.05, 1), (0.05, 2), (0.1, 2)])

        def finished(done):
            rows = study.report.aggregate(s, done)
            best = [b for b in study.report.best_rows(s, rows) if b["method"] == "average"]
            return study.report.sweep_finished(s, rows, best[0]), study.report.sweep_edges(s, rows, best)
        self.assertFalse(finished(done)[0])
        done += [rec((0.025, 2), 0.8), rec((0.1, 2), 0.85), rec((0.05, 1), 0.7)]
        ok, edges = finished(done)
        self.assertTrue(ok)  # (0.05, 4) does not fit: three neighbours, all run
        self.assertEqual([(key, where) for _, key, _, where, _ in edges],
                         [("schedule.warmup_steps", "the largest tried, the largest that fits the run")])
        out = os.path.join(self.tmp, "report2")
        study.report.write_report(s, done, out, [], s.planned())
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertNotIn("Choices from an unfinished sweep", report)
        self.assertIn("- Left out of the grid: 3 sweep points that do not fit their column's run, e.g. "
                      "average-lr0.025-warmup_steps4-np2: schedule.warmup_steps 4 is not shorter than the run "
                      "(4 steps).", report)

    def test_cut_off_stops_points_that_can_no_longer_be_the_fastest(self):
        # cut_off: a cell's deadline is the fewest validation steps to the target of another point
        # of its method, column and seed; cells run from the point chosen at the largest smaller
        # size outwards; the report says which cell was cut and by what.
        sweep3 = TWO_METHODS.replace("[0.05, 0.1]", "[0.025, 0.05, 0.1]")
        text = study_text(self.base, sweep3, "cut_off: true\n").replace(
            "chance: 0.1}", "chance: 0.1, select: val_top1, choose_by: steps}").replace(
            "train.eval_every: 2}", "train.eval_every: 2, train.stop_at: {metric: val_top1, above: 0.05}}")
        s = self.load(text)
        self.assertTrue(s.cut_off)

        def rec(c, val, **kw):
            return {"name": c.name, "hash": c.hash, "method": c.method, "ranks": c.ranks, "micro_batches": 1,
                    "variant": "", "seed": 1, "point": c.point, "examples_per_step": c.examples_per_step,
                    "status": "ok", "reason": "", "final": 0.5, "select_final": val[-1][1], "select_evals": val,
                    "wall_s": 3.0, "evals": val, "eval_wall": [], "gave_up_at": None, **kw}

        cells = {c.name: c for c in s.cells()}
        # At 1 rank, average's LR 0.05 reached 5% in 4 steps and LR 0.1 in 2: 0.1 is chosen there.
        done = [rec(cells["average-lr0.05-np1-s1"], [(2, 0.01), (4, 0.06)]),
                rec(cells["average-lr0.1-np1-s1"], [(2, 0.07)])]
        self.assertEqual(study.cli.cut_off_deadline(s, cells["average-lr0.025-np1-s1"], done), (2, "lr 0.1"))
        # Another column, method or seed sets no deadline.
        self.assertIsNone(study.cli.cut_off_deadline(s, cells["average-lr0.025-np2-s1"], done))
        self.assertIsNone(study.cli.cut_off_deadline(s, cells["adasum-np1-s1"], done))
        # At 2 ranks the sweep starts at 1 rank's choice (0.1), then its neighbour, then 0.025.
        todo = [c for c in s.cells() if c.ranks == 2]
        self.assertEqual([c.name for c in study.cli.cut_off_order(s, todo, done)],
                         ["adasum-np2-s1", "average-lr0.1-np2-s1", "average-lr0.05-np2-s1",
                          "average-lr0.025-np2-s1"])
        # The smallest size, with no smaller size chosen, starts from the next size's choice: with
        # LR 0.1 chosen at 2 ranks, 1 rank runs 0.1, then 0.05, then 0.025.
        at2 = [rec(cells["average-lr0.05-np2-s1"], [(2, 0.01), (4, 0.06)]),
               rec(cells["average-lr0.1-np2-s1"], [(2, 0.07)])]
        self.assertEqual([c.name for c in study.cli.cut_off_order(s, [c for c in s.cells() if c.ranks == 1], at2)],
                         ["adasum-np1-s1", "average-lr0.1-np1-s1", "average-lr0.05-np1-s1",
                          "average-lr0.025-np1-s1"])
        # A cut cell in the report: not reached, cut off at its deadline (not "gave up").
        cut = rec(cells["average-lr0.025-np1-s1"], [(2, 0.0)], gave_up_at=2, cut_off={"at": 2, "by": "lr 0.1"})
        out = os.path.join(self.tmp, "report")
        study.report.write_report(s, done + [cut], out, [], len(cells))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("| average | lr 0.025 | 1 | 8 | 1 | not reached (final 0.00% (1 seed)); cut off at step 2 "
                      "(lr 0.1 reached it in 2) |", report)
        self.assertNotIn("give_up_after", report)
        self.assertIn("- `cut_off`: a cell still short of the target", report)
        self.assertNotIn("Choices were made on the test figure", report)
        # Bad uses are refused: without steps-to-target choices, several seeds per sweep point, no stop_at.
        self.assertIn("cut_off needs metric.choose_by: steps", self.error(text.replace(", choose_by: steps", "")))
        self.assertIn("cut_off: methods.average sweeps 3 points with 2 seeds", self.error(
            text.replace("seeds: [1]", "seeds: [1, 2]")))
        self.assertIn("cut_off needs train.stop_at in set", self.error(
            text.replace(", train.stop_at: {metric: val_top1, above: 0.05}", "")))
        self.assertIn("cut_off must be true or false", self.error(text.replace("cut_off: true", "cut_off: 1")))

    def test_critical_batch_size_fit(self):
        crit = study.report.critical_batch
        # Steps exactly 100 (1 + 8192 / B): S_min 100, B_crit 8192, every leave-one-out fit the same.
        exact = [(b, 100 * (1 + 8192 / b)) for b in (2048, 4096, 8192, 16384, 32768)]
        s_min, b_crit, (low, high), why = crit(exact)
        self.assertAlmostEqual(s_min, 100, places=6)
        self.assertAlmostEqual(b_crit, 8192, places=3)
        self.assertAlmostEqual(low, 8192, places=3)
        self.assertAlmostEqual(high, 8192, places=3)
        self.assertIsNone(why)
        # Noisy points: the range brackets the fit.
        noisy = [(b, st * f) for (b, st), f in zip(exact, (1.05, 0.97, 1.02, 0.96, 1.04))]
        s_min, b_crit, (low, high), why = crit(noisy)
        self.assertLessEqual(low, b_crit)
        self.assertLessEqual(b_crit, high)
        self.assertTrue(4000 < b_crit < 16000, b_crit)
        # What the data cannot place: too few sizes, steps that do not fall, a bend past the sizes.
        self.assertIn("3 needed", crit(exact[:2])[3])
        self.assertIn("do not fall as 1/B", crit([(2048, 100), (4096, 100), (8192, 100)])[3])
        far = crit([(b, 100 * (1 + 1e5 / b)) for b in (2048, 4096, 8192)])
        self.assertAlmostEqual(far[1], 1e5, places=0)
        self.assertIn("outside the sizes measured (2,048 to 8,192)", far[3])

    def test_welch_and_significance_against_the_baseline(self):
        # Against scipy.stats.ttest_ind(..., equal_var=False) (values computed with scipy 1.10).
        d, p = study.report.welch([1, 2, 3], [4, 5, 7])
        self.assertAlmostEqual(d, -10 / 3)
        self.assertAlmostEqual(p, 0.041914517471454, places=12)
        self.assertAlmostEqual(study.report.welch([0.5, 0.7, 0.6], [0.3, 0.35, 0.2])[1], 0.013981813937706233,
                               places=12)
        self.assertIsNone(study.report.welch([1], [2, 3]))
        self.assertEqual(study.report.welch([1, 1], [1, 1]), (0.0, 1.0))
        self.assertEqual(study.report.noise_verdict(0.0419), "beyond seed noise")
        self.assertEqual(study.report.noise_verdict(0.05), "within seed noise")
        self.assertEqual(study.report.noise_verdict(0.076), "within seed noise")
        s = self.load(study_text(self.base, TWO_METHODS, "baseline: adasum\nseeds: [1, 2, 3]\n")
                      .replace("seeds: [1]\n", "").replace("ranks: [1, 2]", "ranks: [2]"))
        records = []
        for c in s.cells():
            v = {1: 0.5, 2: 0.7, 3: 0.6}[c.seed] if c.method == "adasum" else {1: 0.3, 2: 0.35, 3: 0.2}[c.seed]
            steps = 2 if c.method == "adasum" else 4
            records.append({"name": c.name, "hash": c.hash, "method": c.method, "ranks": 2, "micro_batches": 1,
                            "variant": "", "seed": c.seed, "point": c.point, "examples_per_step": 16,
                            "status": "ok", "reason": "", "final": v, "wall_s": 3.0,
                            "evals": [(2, v if steps == 2 else 0.0), (4, v)], "eval_wall": [(2, 1.0), (4, 2.0)]})
        out = os.path.join(self.tmp, "report")
        study.report.write_report(s, records, out, [], len(records))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("## Against Adasum (difference of the final eval_top1 in points; Welch's t-test", report)
        self.assertIn("| average | -31.67 (p = 0.014, beyond seed noise) |", report)  # both LR points are the same: the first
        self.assertIn("| average | +2 (p < 0.001, beyond seed noise) |", report)  # steps to target, every seed reached it
        self.assertIn("counted at evaluations every 2 steps", report)
        # One seed a side: the difference is shown and said not to be judged against seed noise.
        one = [r for r in records if r["seed"] == 1]
        study.report.write_report(s, one, out, [], len(one))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("| average | -20.00 (fewer than 2 seeds on a side: not judged against seed noise) |",
                      report)
        self.assertIn("| average | +2 (fewer than 2 seeds on a side: not judged against seed noise) |", report)
        # The baseline's cells all failed: nothing to compare with (the report was a
        # ZeroDivisionError, which stopped the runner before its other cells).
        failed = [dict(r, status="failed", final=None, evals=[], eval_wall=[]) if r["method"] == "adasum" else r
                  for r in records]
        study.report.write_report(s, failed, out, [], len(failed))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertEqual(report.count("| average | – |"), 1, report)  # (no steps table: nothing to compare)

    def test_a_method_is_compared_with_its_own_baseline(self):
        # AdamW + Adasum against AdamW averaging in a study whose baseline is LAMB averaging: its
        # rows leave the study baseline's table for its own baseline's.
        methods = TWO_METHODS + "  adam_adasum: {label: AdamW Adasum, set: {reducer.name: adasum}, baseline: average}\n"
        s = self.load(study_text(self.base, methods, "baseline: adasum\nseeds: [1, 2]\n")
                      .replace("seeds: [1]\n", "").replace("ranks: [1, 2]", "ranks: [2]"))
        self.assertEqual({m: v["baseline"] for m, v in s.methods.items()},
                         {"adasum": "adasum", "average": "adasum", "adam_adasum": "average"})
        finals = {"adasum": (0.5, 0.6), "average": (0.3, 0.35), "adam_adasum": (0.8, 0.9)}
        records = [{"name": c.name, "hash": c.hash, "method": c.method, "ranks": 2, "micro_batches": 1,
                    "variant": "", "seed": c.seed, "point": c.point, "examples_per_step": 16, "status": "ok",
                    "reason": "", "final": finals[c.method][c.seed - 1], "wall_s": 3.0,
                    "evals": [(4, finals[c.method][c.seed - 1])], "eval_wall": [(4, 2.0)]} for c in s.cells()]
        out = os.path.join(self.tmp, "report")
        study.report.write_report(s, records, out, [], len(records))
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        against_adasum = report.split("## Against Adasum")[1].split("## ")[0]
        against_average = report.split("## Against average")[1].split("## ")[0]
        self.assertIn("| average | -22.50 (", against_adasum)
        self.assertNotIn("AdamW Adasum", against_adasum)
        self.assertIn("| AdamW Adasum | +52.50 (", against_average)
        self.assertIn("methods.adam_adasum.baseline: 'lamb' is not one of the methods", self.error(
            study_text(self.base, methods.replace("baseline: average", "baseline: lamb"))))

    def test_provenance_is_never_stamped_and_stale_cells_are_named(self):
        s = self.load(study_text(self.base, "  adasum: {set: {reducer.name: adasum}}\n").replace(
            "ranks: [1, 2]", "ranks: [2]"))
        c = s.cells()[0]
        rec = {"name": c.name, "hash": c.hash, "method": c.method, "ranks": 2, "micro_batches": 1, "variant": "",
               "seed": 1, "point": {}, "examples_per_step": 16, "status": "ok", "reason": "", "final": 0.5,
               "wall_s": 3.0, "evals": [(4, 0.5)], "eval_wall": [(4, 2.0)]}
        out = os.path.join(self.tmp, "report")
        study.report.write_report(s, [dict(rec)], out, [], 1)
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        # A cell that recorded neither gets no machine or commit of today's.
        self.assertIn("- Machine: machine not recorded.", report)
        self.assertIn("- Commit: not recorded;", report)
        noted = dict(rec, commit="unknown", commit_note="an older writer stamped its HEAD")
        study.report.write_report(s, [noted], out, [], 1)
        with open(os.path.join(out, "report.md")) as f:
            self.assertIn("- Commit: unknown (an older writer stamped its HEAD);", f.read())
        self.assertIsNone(study.run.stale(dict(rec, trainer_version="abc1234"), "abc1234"))
        self.assertIsNone(study.run.stale(rec, None))  # no version to compare against
        self.assertEqual(study.run.stale(dict(rec, trainer_version="abc1234"), "def5678"),
                         "ran on trainer abc1234, now def5678")
        self.assertEqual(study.run.stale(rec, "def5678"), "ran on trainer of unrecorded version, now def5678")

    def test_only_filter(self):
        s = self.load(study_text(self.base, TWO_METHODS))
        only = study.cli.parse_only(["method=average", "ranks=2"])
        self.assertEqual(sorted(c.name for c in s.cells() if study.cli.selected(c, only)),
                         ["average-lr0.05-np2-s1", "average-lr0.1-np2-s1"])
        only = study.cli.parse_only(["point=lr0.1", "ranks=2"])
        self.assertEqual([c.name for c in s.cells() if study.cli.selected(c, only)], ["average-lr0.1-np2-s1"])
        with self.assertRaises(study.spec.StudyError):
            study.cli.parse_only(["rank=2"])
        # A value no cell has is a typo, not a choice of no cells.
        with self.assertRaises(study.spec.StudyError) as cm:
            study.cli.check_only(study.cli.parse_only(["ranks=2,7", "method=average"]), s.cells())
        self.assertEqual(str(cm.exception), "--only ranks=7: no cell of the study has this value; known: 1, 2")
        study.cli.check_only(study.cli.parse_only(["method=adasum,average", "point=lr0.1"]), s.cells())


class EndToEnd(unittest.TestCase):
    """Real runs: the trainer on synthetic data under mpirun."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ada_test_study_e2e_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.base = write(self.tmp, "base.yaml", BASE)
        self.runs = os.path.join(self.tmp, "runs")
        self.results = os.path.join(self.tmp, "results")

    def run_study(self, text, *extra):
        path = write(self.tmp, "s.yaml", text)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = study.cli.main([path, "--runs", self.runs, "--results", self.results, "--trainer", TRAINER,
                             "--no-build", *extra])
        return rc, out.getvalue()

    def cells(self):
        with open(os.path.join(self.results, "cells.json")) as f:
            return {c["name"]: c for c in json.load(f)["cells"]}

    def test_run_cache_resume_change_diverge_fail(self):
        methods = "  adasum: {set: {reducer.name: adasum}}\n  average: {set: {reducer.name: average}}\n"
        rc, out = self.run_study(study_text(self.base, methods))
        self.assertEqual(rc, 0, out)
        self.assertIn("4 cells (0 cached, 4 to run)", out)
        self.assertIn("[4/4]", out)
        self.assertIn("ETA", out)
        cells = self.cells()
        self.assertEqual(sorted(cells), ["adasum-np1-s1", "adasum-np2-s1", "average-np1-s1", "average-np2-s1"])
        for c in cells.values():
            self.assertEqual(c["status"], "ok", c)
            self.assertEqual(c["steps"], 4)
            self.assertEqual([s for s, _ in c["evals"]], [2, 4])
        # One cell a line, sorted by name (a new cell is a one-line diff), and no temporary file left.
        with open(os.path.join(self.results, "cells.json")) as f:
            lines = f.read().splitlines()
        self.assertEqual([json.loads(x.rstrip(","))["name"] for x in lines[1:-1]], sorted(cells))
        self.assertEqual(lines[-1], "]}")
        self.assertFalse(os.path.exists(os.path.join(self.results, "cells.json.tmp")))
        # Each cell records the commit and version its trainer was built from, as the binary names
        # them (summary.json, the same as `trainer --version`).
        built, version = study.run.trainer_identity(TRAINER)
        self.assertIsNotNone(built, "trainer --version names no commit")
        self.assertIsNotNone(version, "trainer --version names no version")
        for c in cells.values():
            self.assertEqual(c["commit"], built)
            self.assertEqual(c["trainer_version"], version)
        for f in ("report.md", "curves.png", "final_vs_examples.png", "steps_to_target.png"):
            self.assertTrue(os.path.getsize(os.path.join(self.results, f)) > 0, f)
        with open(os.path.join(self.results, "report.md")) as f:
            report = f.read()
        self.assertIn("tools/study.py", report)
        self.assertIn("Commit:", report)
        self.assertIn("| adasum | – | 2 | 16 | 1 |", report)
        for c in cells.values():  # the eval lines' wall times are kept for time to target
            self.assertEqual([s for s, _ in c["eval_wall"]], [2, 4])

        # Cached: nothing runs again.
        rc, out = self.run_study(study_text(self.base, methods))
        self.assertEqual(rc, 0, out)
        self.assertIn("4 cells (4 cached, 0 to run)", out)
        # A cell another trainer version ran is stale: it runs again (alone), unless --any-trainer.
        folder = next(d for d in os.listdir(self.runs) if d.startswith("adasum-np1-s1-"))
        marker = os.path.join(self.runs, folder, study.run.CELL_MARKER)
        with open(marker) as f:
            rec = json.load(f)
        rec["trainer_version"] = "0000000"
        with open(marker, "w") as f:
            json.dump(rec, f)
        rc, out = self.run_study(study_text(self.base, methods), "--dry-run")
        self.assertIn("(3 cached, 1 stale, 1 to run)", out)
        self.assertIn(f"ran on trainer 0000000, now {version}", out)
        rc, out = self.run_study(study_text(self.base, methods), "--any-trainer", "--dry-run")
        self.assertIn("(4 cached, 0 to run)", out)
        rc, out = self.run_study(study_text(self.base, methods))
        self.assertEqual(rc, 0, out)
        self.assertIn("[1/1] adasum-np1-s1", out)
        self.assertEqual(self.cells()["adasum-np1-s1"]["trainer_version"], version)
        # Interrupted: a cell without its marker runs again, alone.
        folder = next(d for d in os.listdir(self.runs) if d.startswith("average-np2-s1-"))
        os.remove(os.path.join(self.runs, folder, study.run.CELL_MARKER))
        rc, out = self.run_study(study_text(self.base, methods))
        self.assertIn("(3 cached, 1 to run)", out)
        self.assertIn("[1/1] average-np2-s1", out)
        # A changed setting reruns the cells it touches only.
        changed = methods.replace("{reducer.name: average}", "{reducer.name: average, optimizer.lr: 0.02}")
        rc, out = self.run_study(study_text(self.base, changed))
        self.assertEqual(rc, 0, out)
        self.assertIn("(2 cached, 2 to run)", out)
        # A fresh clone has the published cells.json but no runs: its cells count as finished.
        shutil.rmtree(self.runs)
        rc, out = self.run_study(study_text(self.base, changed))
        self.assertEqual(rc, 0, out)
        self.assertIn("4 finished cell(s) taken from", out)
        self.assertNotIn("more there are not cells of this run", out)
        self.assertIn("(4 cached, 0 to run)", out)
        self.assertEqual(len(self.cells()), 4)
        # --report-only with --results naming a folder without cells.json (and no runs): said so, exit 1.
        empty = os.path.join(self.tmp, "empty_results")
        os.makedirs(empty)
        rc, out = self.run_study(study_text(self.base, changed), "--report-only", "--results", empty)
        self.assertEqual(rc, 1, out)
        self.assertIn(f"no {empty}/cells.json: nothing to report", out)
        # A method the study no longer has: its published cells are counted apart, not taken.
        rc, out = self.run_study(study_text(self.base, changed.splitlines(True)[1]), "--dry-run")
        self.assertEqual(rc, 0, out)
        self.assertIn("2 finished cell(s) taken from", out)
        self.assertIn("(2 more there are not cells of this run", out)
        with open(os.path.join(self.results, "report.md")) as f:
            self.assertIn("Commit:", f.read())

        # Divergence is a result (cached); a failure is not, and the runner exits 1.
        bad = ("  blowup: {set: {optimizer.lr: 1.0e+30}}\n"
               "  typo: {set: {optimizer.lrr: 0.1}}\n")
        rc, out = self.run_study(study_text(self.base, bad), "--only", "ranks=2")
        self.assertEqual(rc, 1, out)
        self.assertIn("blowup-np2-s1 ... diverged", out)
        self.assertIn("typo-np2-s1 ... failed", out)
        self.assertIn("optimizer.lrr", out)  # the trainer's message, in the runner's output
        cells = self.cells()
        self.assertEqual(cells["blowup-np2-s1"]["status"], "diverged")
        self.assertEqual(cells["typo-np2-s1"]["status"], "failed")
        with open(os.path.join(self.results, "report.md")) as f:
            self.assertIn("## Failed cells", f.read())
        rc, out = self.run_study(study_text(self.base, bad), "--only", "ranks=2")
        self.assertIn("(1 cached, 1 to run)", out)  # the failed cell runs again, the diverged one not

    def test_a_validation_split_chooses_the_sweep_point(self):
        # The cells hold out 64 of the 256 training examples (data.validation_size) and the study
        # chooses on val_top1: every cell records it beside eval_top1, and the report says so.
        methods = "  average: {set: {reducer.name: average}, sweep: {optimizer.lr: [0.05, 0.1]}}\n"
        text = study_text(self.base, methods).replace("chance: 0.1}", "chance: 0.1, select: val_top1}").replace(
            "train.eval_every: 2}", "train.eval_every: 2, data.validation_size: 64}").replace(
            "ranks: [1, 2]", "ranks: [2]")
        rc, out = self.run_study(text)
        self.assertEqual(rc, 0, out)
        cells = self.cells()
        self.assertEqual(sorted(cells), ["average-lr0.05-np2-s1", "average-lr0.1-np2-s1"])
        for c in cells.values():
            self.assertEqual(c["status"], "ok", c)
            self.assertIsInstance(c["select_final"], float)
            self.assertEqual([st for st, _ in c["select_evals"]], [2, 4])
            self.assertEqual([st for st, _ in c["evals"]], [2, 4])
        vals = {c["point"]["optimizer.lr"]: c["select_final"] for c in cells.values()}
        chosen = max(vals, key=vals.get)
        with open(os.path.join(self.results, "report.md")) as f:
            report = f.read()
        self.assertIn("Choices are made on the validation figure `val_top1`", report)
        self.assertIn(f"(lr {chosen:g}) |", report.split("## Final eval_top1")[1].split("##")[0])
        # --chosen (tools/train.sh reads it): the same point from cells.json, with the overrides
        # its cell ran with; a rank count the study lacks is an error naming the ones it has.
        rc, out = self.run_study(text, "--chosen", "average@2")
        self.assertEqual(rc, 0, out)
        got = json.loads(out.strip().splitlines()[-1])
        self.assertEqual(got["point"], {"optimizer.lr": chosen})
        self.assertEqual(got["select_mean"], vals[chosen])
        self.assertEqual(got["chosen_on"], "val_top1")
        self.assertIn(f"optimizer.lr={chosen:g}", got["trainer_sets"])
        self.assertIn("data.validation_size=64", got["trainer_sets"])
        self.assertIn("reducer.name=average", got["trainer_sets"])
        rc, out = self.run_study(text, "--chosen", "average@3")
        self.assertEqual(rc, 2, out)
        self.assertIn("no finished cell of method average at 3 ranks (ranks studied: 2)", out)
        # Without a validation set the select figure is missing: the cell fails, saying how to fix it.
        rc, out = self.run_study(text.replace(", data.validation_size: 64", "").replace("0.05, 0.1", "0.07"))
        self.assertEqual(rc, 1, out)
        self.assertIn("without 'val_top1' (metric.select of study ", out)
        self.assertIn("whose figures are: eval_loss, eval_top1; set data.validation_size", out)

    def cut_off_text(self, methods):
        """A cut_off study at 2 ranks whose target (a validation loss below 1e9) every evaluation reaches."""
        return study_text(self.base, methods, "cut_off: true\n").replace(
            "metric: {name: eval_top1, goal: max, target: 0.05, diverged: 0.0, chance: 0.1}",
            "metric: {name: eval_loss, goal: min, target: 1.0e+9, select: val_loss, choose_by: steps}").replace(
            "train.eval_every: 2}", "train.eval_every: 2, data.validation_size: 64, "
            "train.stop_at: {metric: val_loss, below: 1.0e+9}}").replace("ranks: [1, 2]", "ranks: [2]")

    def test_cut_off_gives_the_trainer_its_deadline(self):
        # cut_off with a target every evaluation reaches: the first point reaches it at step 2, so
        # the second runs with train.stop_at.give_up_at_step=2 (the trainer takes it) and reaches
        # it there too: a deadline, not a cut.
        methods = "  average: {set: {reducer.name: average}, sweep: {optimizer.lr: [0.05, 0.1]}}\n"
        text = self.cut_off_text(methods)
        rc, out = self.run_study(text)
        self.assertEqual(rc, 0, out)
        self.assertIn("average-lr0.1-np2-s1 (cut off at step 2: lr 0.05 reached the target in 2) ... ok", out)
        cells = self.cells()
        self.assertNotIn("cut_off", cells["average-lr0.05-np2-s1"])
        second = cells["average-lr0.1-np2-s1"]
        self.assertEqual(second["cut_off"], {"at": 2, "by": "lr 0.05"})
        self.assertIn("train.stop_at.give_up_at_step=2", second["command"])
        self.assertEqual((second["steps"], second["gave_up_at"]), (2, None))

    def test_device_is_where_a_cell_runs_not_one_of_its_settings(self):
        # --device cuda hands the trainer train.device=cuda (this CPU build refuses it by name, a
        # failed cell) without changing which cell it is: the cells the CPU finished count as
        # finished under --device cuda, so a GPU machine runs only the cells still missing.
        methods = "  average: {set: {reducer.name: average}}\n"
        text = study_text(self.base, methods).replace("ranks: [1, 2]", "ranks: [1]")
        rc, out = self.run_study(text, "--device", "cuda", "--no-fetch")
        self.assertEqual(rc, 1, out)
        self.assertIn("average-np1-s1 ... failed", out)
        self.assertIn("train.device", out)  # the trainer's message: built without CUDA
        failed = self.cells()["average-np1-s1"]
        self.assertIn("--set train.device=cuda", failed["command"])
        self.assertEqual(failed["device"], "cuda")
        self.assertIn("GPU", failed["machine"])
        rc, out = self.run_study(text)
        self.assertEqual(rc, 0, out)
        cpu = self.cells()["average-np1-s1"]
        self.assertNotIn("train.device", cpu["command"])
        self.assertNotIn("device", cpu)
        self.assertEqual(cpu["hash"], failed["hash"])
        rc, out = self.run_study(text, "--device", "cuda", "--dry-run")
        self.assertIn("1 cells (1 cached, 0 to run)", out)

    def test_confirm_seeds_run_once_the_sweep_has_chosen(self):
        # The sweep's two points run at seed 1 under cut_off; lr 0.05 reaches the target first and
        # is chosen, so its seed 2 runs next, in the same invocation and without a deadline.
        methods = ("  average: {set: {reducer.name: average}, sweep: {optimizer.lr: [0.05, 0.1]}, "
                   "confirm_seeds: [2]}\n")
        text = self.cut_off_text(methods)
        rc, out = self.run_study(text)
        self.assertEqual(rc, 0, out)
        self.assertIn("3 cells (0 cached, 2 to run)", out)
        self.assertIn("1 confirm_seeds cell(s) of a point just chosen: average-lr0.05-np2-s2", out)
        self.assertIn("[3/3] average-lr0.05-np2-s2 ... ok", out)
        cells = self.cells()
        self.assertEqual(sorted(cells), ["average-lr0.05-np2-s1", "average-lr0.05-np2-s2", "average-lr0.1-np2-s1"])
        self.assertNotIn("give_up_at_step", cells["average-lr0.05-np2-s2"]["command"])
        self.assertIn("train.seed=2", cells["average-lr0.05-np2-s2"]["command"])
        rc, out = self.run_study(text)
        self.assertEqual(rc, 0, out)
        self.assertIn("3 cells (3 cached, 0 to run)", out)

    def test_bracket_stops_the_sweep_past_a_neighbour_that_is_no_better(self):
        # Every point reaches the target at the first evaluation: the first point run (0.025, the
        # list's first: no smaller size chose) stays the best, its neighbour 0.05 is no better, and
        # 0.1 and 0.2 never run.
        methods = "  average: {set: {reducer.name: average}, sweep: {optimizer.lr: [0.025, 0.05, 0.1, 0.2]}}\n"
        text = self.cut_off_text(methods).replace("cut_off: true", "cut_off: true\nbracket: true")
        rc, out = self.run_study(text)
        self.assertEqual(rc, 0, out)
        self.assertIn("[1/4] average-lr0.025-np2-s1 ... ok", out)
        self.assertIn("[2/4] average-lr0.05-np2-s1 (cut off at step 2", out)
        self.assertIn("bracket: 2 sweep point(s) not needed", out)
        self.assertEqual(sorted(self.cells()), ["average-lr0.025-np2-s1", "average-lr0.05-np2-s1"])
        rc, out = self.run_study(text, "--dry-run")  # nothing left that a choice needs
        self.assertIn("(2 cached, 0 to run)", out)
        self.assertRegex(out, r"average-lr0.2-np2-s1 +\w+ +not needed \(bracket\)")

    def test_a_renamed_method_or_a_setting_moved_into_a_variant_reuses_its_cells_under_the_new_names(self):
        rc, out = self.run_study(study_text(self.base, "  adasum: {set: {reducer.name: adasum}}\n"))
        self.assertEqual(rc, 0, out)
        # The same settings, now a method with another name and a variant: the hashes are the
        # same, so nothing runs, and the report and cells.json use the study's names as they are.
        moved = study_text(self.base, "  renamed: {label: Renamed, set: {}}\n",
                           "variants: {viavar: {label: via a variant, set: {reducer.name: adasum}}}\n")
        rc, out = self.run_study(moved)
        self.assertEqual(rc, 0, out)
        self.assertIn("2 cells (2 cached, 0 to run)", out)
        cells = self.cells()
        self.assertEqual(sorted(cells), ["renamed-viavar-np1-s1", "renamed-viavar-np2-s1"])
        for c in cells.values():
            self.assertEqual((c["method"], c["variant"], c["status"]), ("renamed", "viavar", "ok"), c)
        with open(os.path.join(self.results, "report.md")) as f:
            report = f.read()
        self.assertIn("| Renamed |", report)
        self.assertNotIn("adasum-np1-s1", report)

    def test_resume_cells_goes_on_from_the_interrupted_attempts_checkpoint(self):
        # resume_cells: a cell killed mid-run (rank 0 dies at its 25th gradient-ready hook: step 3
        # of LeNet's 10 parameters, after the checkpoint of step 2) is not cached; the next run
        # resumes it from that checkpoint instead of starting over.
        methods = "  average: {set: {reducer.name: average}}\n"
        text = study_text(self.base, methods, "resume_cells: true\n").replace(
            "train.eval_every: 2}", "train.eval_every: 2, checkpoint.every: 2}")
        os.environ["ADA_FAULT"] = "backward@0#25:kill"
        try:
            rc, out = self.run_study(text, "--only", "ranks=1")
        finally:
            del os.environ["ADA_FAULT"]
        self.assertEqual(rc, 1, out)
        self.assertIn("average-np1-s1 ... failed", out)
        rc, out = self.run_study(text, "--only", "ranks=1")
        self.assertEqual(rc, 0, out)
        self.assertIn("(0 cached, 1 to run)", out)
        folder = next(d for d in os.listdir(self.runs) if d.startswith("average-np1-s1-"))
        with open(os.path.join(self.runs, folder, "log.txt")) as f:
            log = f.read()
        self.assertIn("resuming it", log)
        self.assertRegex(log, r"resumed from .*ckpt-00000002\.json \(step 2")
        cell = self.cells()["average-np1-s1"]
        self.assertEqual(cell["status"], "ok", cell)
        self.assertTrue(cell["resumed"])
        self.assertEqual(cell["steps"], 4)
        self.assertEqual([s for s, _ in cell["evals"]], [2, 4])
        self.assertIn("--resume auto", cell["command"])
        self.assertIn("resume_cells must be true or false", self.run_study(text.replace(
            "resume_cells: true", "resume_cells: sometimes"))[1])

    def test_each_finished_cell_is_recorded_before_the_next_runs(self):
        # A session stopped mid-invocation (here: the runner interrupted as its second cell starts)
        # keeps the cells finished before it in cells.json and the report, not only in runs/.
        methods = "  average: {set: {reducer.name: average}}\n"
        real, calls = study.cli.run_cell, []

        def second_is_interrupted(*a, **k):
            calls.append(a[0].name)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return real(*a, **k)
        study.cli.run_cell = second_is_interrupted
        try:
            with self.assertRaises(KeyboardInterrupt):
                self.run_study(study_text(self.base, methods))
        finally:
            study.cli.run_cell = real
        self.assertEqual(calls, ["average-np1-s1", "average-np2-s1"])
        self.assertEqual(list(self.cells()), ["average-np1-s1"])
        self.assertEqual(self.cells()["average-np1-s1"]["status"], "ok")
        with open(os.path.join(self.results, "report.md")) as f:
            self.assertIn("Cells: 1 of 2 finished", f.read())

    def test_findings_edited_while_the_cells_run_reach_the_report(self):
        # A long study's findings are written while its later cells run: each report after the edit
        # shows the edited findings (only they are re-read; the cells stay as the runner started
        # them), and a study file left unreadable mid-edit keeps the findings read before.
        methods = "  average: {set: {reducer.name: average}}\n"
        path = os.path.join(self.tmp, "s.yaml")
        real, calls = study.cli.run_cell, []

        def edit_during_each_cell(*a, **k):
            calls.append(a[0].name)
            with open(path) as f:
                text = f.read()
            if len(calls) == 1:  # during cell 1: new findings (the report after it shows them)
                text = text.replace("findings: first", "findings: second")
            else:  # during cell 2: a half-written file
                text += "\nfindings: [unclosed\n"
            with open(path, "w") as f:
                f.write(text)
            return real(*a, **k)
        study.cli.run_cell = edit_during_each_cell
        try:
            rc, out = self.run_study(study_text(self.base, methods, "findings: first\n"))
        finally:
            study.cli.run_cell = real
        self.assertEqual(rc, 0, out)
        self.assertEqual(calls, ["average-np1-s1", "average-np2-s1"])
        self.assertIn("findings not reloaded", out)
        with open(os.path.join(self.results, "report.md")) as f:
            report = f.read()
        self.assertIn("## Findings\n\nsecond\n", report)
        self.assertNotIn("first", report.split("## Findings")[1].split("##")[0])

    def test_sigterm_stops_the_cell_in_progress_and_records_nothing_of_it(self):
        # `kill` of tools/study.py (SIGTERM) mid-cell is Ctrl-C's interruption: the cell's mpirun gets
        # SIGUSR1, its ranks stop at one step with a checkpoint there and end (none outlives the
        # runner; without the handler the runner died at once and left them training), it says so,
        # exits 130 and records no failed cell.
        methods = "  average: {set: {reducer.name: average}}\n"
        text = study_text(self.base, methods).replace("budget: {steps: 4}", "budget: {steps: 1000000}").replace(
            "ranks: [1, 2]", "ranks: [2]")
        path = write(self.tmp, "s.yaml", text)
        runner = subprocess.Popen([sys.executable, os.path.join(ROOT, "tools", "study.py"), path, "--runs", self.runs,
                                   "--results", self.results, "--trainer", TRAINER, "--no-build"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(lambda: runner.poll() is None and runner.kill())

        pattern = f"^{re.escape(TRAINER)} .*output\\.dir={re.escape(self.runs)}"
        # A failure must not leave the cell's ranks training (killing the runner does not end them).
        self.addCleanup(lambda: subprocess.run(["pkill", "-KILL", "-f", pattern]))

        def ranks():  # the trainer processes of this study (their command names its runs folder)
            return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
        deadline = time.time() + 120
        while len(ranks()) < 2 and time.time() < deadline and runner.poll() is None:
            time.sleep(0.2)
        self.assertEqual(len(ranks()), 2, "the cell's two ranks never started")

        def stepped():  # a training step logged: the ranks' stop handlers are in place
            for d in os.listdir(self.runs) if os.path.isdir(self.runs) else []:
                path = os.path.join(self.runs, d, "metrics.jsonl")
                if d.startswith("average-np2-s1-") and os.path.exists(path):
                    with open(path) as f:
                        if '"loss"' in f.read():
                            return True
            return False
        while not stepped() and time.time() < deadline and runner.poll() is None:
            time.sleep(0.2)
        self.assertTrue(stepped(), "the cell never logged a step")
        runner.send_signal(signal.SIGTERM)
        out, _ = runner.communicate(timeout=90)
        self.assertEqual(runner.returncode, 130, out)
        self.assertIn("stopping the trainer run at its next step, with a checkpoint there", out)
        self.assertIn("study.py: interrupted: the cell in progress was stopped (at a step, with a checkpoint "
                      "there, when it stopped in time) and is not recorded", out)
        cell = [os.path.join(self.runs, d) for d in os.listdir(self.runs) if d.startswith("average-np2-s1-")]
        with open(os.path.join(cell[0], "log.txt")) as f:
            stop = re.search(r"stopped by SIGUSR1 at step (\d+)", f.read())
        self.assertIsNotNone(stop, out)
        self.assertTrue(os.path.exists(os.path.join(cell[0], "checkpoints", f"ckpt-{int(stop[1]):08d}.json")))
        deadline = time.time() + 30
        while ranks() and time.time() < deadline:
            time.sleep(0.2)
        self.assertEqual(ranks(), [], "a rank outlived the runner")
        self.assertFalse(os.path.exists(os.path.join(self.results, "cells.json")), out)


    def test_a_trainer_stopped_by_a_signal_from_outside_stops_the_study_and_its_cell_resumes(self):
        # The ranks themselves get SIGTERM (a scheduler's preemption; here ADA_FAULT's :term on rank 1
        # at step 3): the trainer stops there with a checkpoint and exit 143; the runner records no
        # failed cell, names the cell, the signal and the step, and exits 130. The same command again
        # resumes the cell from that checkpoint (resume_cells) and finishes it.
        methods = "  average: {set: {reducer.name: average}}\n"
        text = study_text(self.base, methods, "resume_cells: true\n").replace("ranks: [1, 2]", "ranks: [2]")
        path = write(self.tmp, "s.yaml", text)
        cmd = [sys.executable, os.path.join(ROOT, "tools", "study.py"), path, "--runs", self.runs,
               "--results", self.results, "--trainer", TRAINER, "--no-build"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, ADA_FAULT="step@1#3:term"))
        self.assertEqual(r.returncode, 130, r.stdout + r.stderr)
        self.assertIn("average-np2-s1: its trainer was stopped by SIGTERM from outside the runner (a scheduler's "
                      "preemption?) at step 3, with a checkpoint there", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.results, "cells.json")), r.stdout)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        rec = self.cells()["average-np2-s1"]
        self.assertEqual((rec["status"], rec["steps"], rec["resumed"]), ("ok", 4, True))
        log = next(os.path.join(d, "log.txt") for d, _, files in os.walk(self.runs) if "log.txt" in files)
        with open(log) as f:
            self.assertIn("resumed from", f.read())


FAKE_MPIRUN = '#!/bin/bash\nwhile [[ $1 != --mca ]]; do shift; done\nshift 3\nexec "$@"\n'

# A trainer as the runner sees it: --version, and a run that holds <output.dir>/.lock as the real
# one does (base/dir_lock.cc), logs evaluations at steps 2 and 4 and writes summary.json. Its
# `--set fake.sleep=S` (or $FAKE_SLEEP) trains for S seconds first; `fake.fail=1` ends it with an error,
# `fake.term=1` as a trainer sent SIGTERM (a checkpoint at step 3, exit 143); `fake.slow_after_eval=S`
# logs its evaluation at step 2, then trains for S seconds, stopping at SIGUSR1 as the trainer does.
FAKE_TRAINER = """#!/usr/bin/python3
import fcntl, json, os, signal, sys, time
if sys.argv[1:] == ["--version"]:
    sys.exit(print("trainer built from commit abc1234 (trainer version v1)"))
sets = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a and not a.startswith("-"))
out = sets["output.dir"]
os.makedirs(out, exist_ok=True)
lock = open(os.path.join(out, ".lock"), "a+")
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    sys.exit(print("config error: output.dir: " + out + " is in use by another run") or 1)
lock.truncate(0)
lock.write("process %d on testhost since 2024-01-01 00:00:00 UTC\\n" % os.getpid())
lock.flush()
print("trainer version v1", flush=True)
time.sleep(float(sets.get("fake.sleep", os.environ.get("FAKE_SLEEP", 0))))
if sets.get("fake.slow_after_eval"):
    signal.signal(signal.SIGUSR1, lambda *a: sys.exit(print("stopped by SIGUSR1 at step 3 of 4: checkpoint at step 3 "
                                                            "written") or 138))
    with open(os.path.join(out, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"step": 2, "loss": 1.0, "eval_top1": 0.5, "eval_loss": 1.0, "wall_s": 0.2}) + "\\n")
    time.sleep(float(sets["fake.slow_after_eval"]))
if sets.get("fake.fail"):
    sys.exit(print("rank 0 error: boom") or 1)
if sets.get("fake.term"):
    sys.exit(print("stopped by SIGTERM at step 3 of 4: checkpoint at step 3 written") or 143)
with open(os.path.join(out, "metrics.jsonl"), "w") as f:
    for step in (2, 4):
        f.write(json.dumps({"step": step, "loss": 1.0, "eval_top1": 0.5, "wall_s": 0.1 * step}) + "\\n")
json.dump({"steps": 4, "eval_top1": 0.5, "eval_loss": 1.0, "wall_seconds": 0.4, "commit": "abc1234",
           "trainer_version": "v1"}, open(os.path.join(out, "summary.json"), "w"))
"""


class Guards(unittest.TestCase):
    """The runner against what goes wrong around it (a fake mpirun and trainer, quick): live runs
    in its folders, a second runner, damaged cells.json, a full disk, a metric no run writes."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ada_test_study_guards_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.base = write(self.tmp, "base.yaml", BASE)
        self.runs = os.path.join(self.tmp, "runs")
        self.results = os.path.join(self.tmp, "results")
        self.mpirun = write(self.tmp, "mpirun", FAKE_MPIRUN)
        self.trainer = write(self.tmp, "trainer", FAKE_TRAINER)
        os.chmod(self.mpirun, 0o755)
        os.chmod(self.trainer, 0o755)
        self.methods = "  average: {set: {reducer.name: average}}\n"

    def args(self, path, *extra):
        return [path, "--runs", self.runs, "--results", self.results, "--trainer", self.trainer,
                "--mpirun", self.mpirun, "--no-build", "--no-fetch", *extra]

    def run_study(self, text, *extra):
        path = write(self.tmp, "s.yaml", text)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = study.cli.main(self.args(path, *extra))
        return rc, out.getvalue()

    def cells(self):
        with open(os.path.join(self.results, "cells.json")) as f:
            return {c["name"]: c for c in json.load(f)["cells"]}

    def test_a_metric_no_run_writes_names_the_study_file_the_key_and_the_figures_there_were(self):
        text = study_text(self.base, self.methods).replace("name: eval_top1", "name: eval_top2")
        rc, out = self.run_study(text, "--only", "ranks=1")
        self.assertEqual(rc, 1, out)
        path = os.path.join(self.tmp, "s.yaml")
        self.assertIn(f"the run ended without 'eval_top2' (metric.name of study {path}) in summary.json, whose "
                      f"figures are: eval_loss, eval_top1", out)
        text = study_text(self.base, self.methods).replace("chance: 0.1}", "chance: 0.1, select: val_top1}")
        rc, out = self.run_study(text, "--only", "ranks=1")
        self.assertEqual(rc, 1, out)
        self.assertIn(f"without 'val_top1' (metric.select of study {path}) in summary.json, whose figures are: "
                      f"eval_loss, eval_top1; set data.validation_size", out)

    def test_a_metric_missing_from_the_first_evaluation_stops_the_run_there(self):
        # The figures are checked at the run's first evaluation (each PROGRESS_S while it trains),
        # not only in its summary.json: a misspelt metric.name, or a metric.select without a
        # validation set, no longer costs each cell its whole budget.
        path = os.path.join(self.tmp, "s.yaml")
        methods = "  average: {set: {reducer.name: average, fake.slow_after_eval: 60}}\n"
        with mock.patch.object(study.run, "PROGRESS_S", 0.2):
            rc, out = self.run_study(study_text(self.base, methods).replace("name: eval_top1", "name: eval_top2"),
                                     "--only", "ranks=1")
            self.assertEqual(rc, 1, out)
            self.assertIn(f"the run's first evaluation (step 2) gave no 'eval_top2' (metric.name of study {path}), "
                          f"only: eval_loss, eval_top1 (a misspelt metric.name, or no evaluation set?); the runner "
                          f"stopped the run there", out)
            rec = self.cells()["average-np1-s1"]
            self.assertEqual((rec["status"], rec["exit_code"]), ("failed", 138))
            text = study_text(self.base, methods).replace("chance: 0.1}", "chance: 0.1, select: val_top1}")
            rc, out = self.run_study(text, "--only", "ranks=1")
            self.assertEqual(rc, 1, out)
            self.assertIn(f"gave no 'val_top1' (metric.select of study {path}), only: eval_loss, eval_top1 (set "
                          f"data.validation_size, or correct metric.select)", out)
            # A run whose first evaluation has the figures trains on.
            methods = "  average: {set: {reducer.name: average, fake.slow_after_eval: 1}}\n"
            rc, out = self.run_study(study_text(self.base, methods), "--only", "ranks=1")
            self.assertEqual(rc, 0, out)
            self.assertEqual(self.cells()["average-np1-s1"]["status"], "ok", out)

    def start_runner(self, text, *extra):
        """tools/study.py on `text` in the background, its cells' trainers sleeping 60 s, once its
        first cell's trainer holds its folder's .lock: (the runner, that folder, the trainer's PID)."""
        path = write(self.tmp, "s.yaml", text)
        runner = subprocess.Popen([sys.executable, os.path.join(ROOT, "tools", "study.py"), *self.args(path, *extra)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=dict(os.environ, FAKE_SLEEP="60"))
        self.addCleanup(runner.stdout.close)
        self.addCleanup(lambda: runner.poll() is None and runner.kill())
        deadline = time.time() + 60
        while time.time() < deadline:
            locks = [os.path.join(self.runs, d, ".lock") for d in os.listdir(self.runs)] \
                if os.path.isdir(self.runs) else []
            held = [p for p in locks if os.path.isfile(p) and read(p).startswith("process ")]
            if held:
                pid = int(read(held[0]).split()[1])
                self.addCleanup(lambda: subprocess.run(["kill", "-9", str(pid)], capture_output=True))
                return runner, os.path.dirname(held[0]), pid
            self.assertIsNone(runner.poll(), runner.stdout.read() if runner.poll() is not None else "")
            time.sleep(0.1)
        self.fail("the cell's trainer never took its folder's lock")

    def test_a_cell_whose_run_outlived_its_runner_is_neither_deleted_nor_run_again(self):
        # kill -9 of study.py leaves its mpirun (a session of its own) training the cell. The rerun
        # used to delete that folder, lock and all, and start a second trainer there; now it refuses
        # (exit 2) naming the folder and the holder, runs nothing, and --dry-run says "busy".
        text = study_text(self.base, self.methods).replace("ranks: [1, 2]", "ranks: [1]")
        runner, cell, pid = self.start_runner(text)
        runner.kill()
        runner.wait()
        os.kill(pid, 0)  # the orphan trains on
        rc, out = self.run_study(text, "--dry-run")
        self.assertEqual(rc, 0, out)
        self.assertIn("busy: a live run holds its folder", out)
        rc, out = self.run_study(text)
        self.assertEqual(rc, 2, out)
        self.assertIn(f"average-np1-s1: its folder {cell} is in use by a live trainer run (process {pid} on testhost "
                      f"since 2024-01-01 00:00:00 UTC, which holds {cell}/.lock)", out)
        self.assertIn("wait for that run to end, or kill it", out)
        self.assertIn("nothing run", out)
        self.assertEqual(read(os.path.join(cell, ".lock")).split()[1], str(pid))
        os.kill(pid, 0)
        # run_cell itself refuses too (a cell planned after the start: confirm_seeds).
        c = study.spec.Study(os.path.join(self.tmp, "s.yaml")).cells()[0]
        with self.assertRaises(study.run.CellBusy):
            study.run.run_cell(c, None, cell)
        # Once that run has ended (killed here), the folder is the cell's unfinished attempt again.
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 30
        while study.run.lock_holder(cell) and time.time() < deadline:
            time.sleep(0.1)
        rc, out = self.run_study(text)
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.cells()["average-np1-s1"]["status"], "ok")

    def test_a_second_runner_on_the_same_runs_or_results_folder_is_refused(self):
        # Two runners on one study deleted each other's running cell folders and overwrote each
        # other's cells.json. The second is refused at once (exit 2), naming the lock file and the
        # first's PID and host; --report-only too (it writes the results); --dry-run is not.
        text = study_text(self.base, self.methods).replace("ranks: [1, 2]", "ranks: [1]")
        runner, cell, pid = self.start_runner(text)
        other_runs, other_results = os.path.join(self.tmp, "runs2"), os.path.join(self.tmp, "results2")
        host = __import__("platform").node()
        for extra, lock in [([], os.path.join(self.runs, ".study.lock")),
                            (["--results", other_results], os.path.join(self.runs, ".study.lock")),
                            (["--runs", other_runs], os.path.join(self.results, ".study.lock")),
                            (["--report-only"], os.path.join(self.results, ".study.lock"))]:
            with self.subTest(extra=extra):
                rc, out = self.run_study(text, *extra)
                self.assertEqual(rc, 2, out)
                self.assertRegex(out, rf"is in use by another study.py \(process {runner.pid} on {re.escape(host)} "
                                      rf"since \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC, which holds {re.escape(lock)}\): "
                                      rf"wait for it to end, or stop it \(kill {runner.pid}")
        self.assertEqual(os.listdir(other_runs), [".study.lock"])  # no cell ran there
        self.assertTrue(os.path.isdir(cell))
        os.kill(pid, 0)  # its cell trains on
        rc, out = self.run_study(text, "--dry-run")
        self.assertEqual(rc, 0, out)
        runner.send_signal(signal.SIGTERM)  # its cell stops (SIGUSR1), it exits and lets go of the locks
        self.assertEqual(runner.wait(timeout=60), 130)
        rc, out = self.run_study(text)
        self.assertEqual(rc, 0, out)

    @contextlib.contextmanager
    def full_disk(self, module, names, after=4096):
        """`module`'s open() (study.report's, study.run's) as on a full disk for files whose name
        starts with one of `names`: the first `after` bytes are written, then ENOSPC."""
        class Full:
            def __init__(self, f):
                self.f, self.left = f, after

            def write(self, text):
                self.f.write(text[:self.left])
                self.f.flush()
                self.left -= min(self.left, len(text))
                if len(text) > self.left:
                    raise OSError(28, "No space left on device")

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

        def full_open(path, mode="r", *a, **k):
            f = open(path, mode, *a, **k)
            return Full(f) if "w" in mode and os.path.basename(path).startswith(names) else f
        module.open = full_open
        try:
            yield
        finally:
            del module.open

    def test_a_full_disk_leaves_the_report_whole_names_the_file_and_the_cells_go_on(self):
        text = study_text(self.base, self.methods)
        rc, out = self.run_study(text)
        self.assertEqual(rc, 0, out)
        report, cells_json = os.path.join(self.results, "report.md"), os.path.join(self.results, "cells.json")
        before = {p: read(p) for p in (report, cells_json)}
        # report.md was written in place (cut at 4096 bytes) and the error was a traceback;
        # cells.json.tmp was left behind. Now each is written whole or not at all.
        for name in ("report.md", "cells.json"):
            with self.subTest(name=name), self.full_disk(study.report, (name,)):
                rc, out = self.run_study(text, "--report-only")
                self.assertEqual(rc, 2, out)
                self.assertIn(f"study.py: cannot write the report: {self.results}/{name}.tmp: No space left on "
                              f"device (a full disk or a read-only --results folder?)", out)
                self.assertNotIn("Traceback", out)
                self.assertEqual({p: read(p) for p in (report, cells_json)}, before)
                self.assertFalse(os.path.exists(os.path.join(self.results, name + ".tmp")))
        # Mid-study: the report after a cell cannot be written; the cells go on (their records stay in
        # runs/), the runner says so and exits 2; --report-only writes it once it can.
        shutil.rmtree(self.runs)
        with self.full_disk(study.report, ("report.md",)):
            rc, out = self.run_study(text.replace("reducer.name: average", "reducer.name: adasum"))
        self.assertEqual(rc, 2, out)
        self.assertIn("study.py: report not written: cannot write the report: ", out)
        self.assertIn("[2/2] average-np2-s1", out)
        self.assertNotIn("Traceback", out)
        rc, out = self.run_study(text.replace("reducer.name: average", "reducer.name: adasum"), "--report-only")
        self.assertEqual(rc, 0, out)
        self.assertEqual([c["overrides"]["reducer.name"] for c in self.cells().values()], ["adasum", "adasum"])
        # A full --runs folder: the cell's log cannot be written; the study stops with the path, no traceback.
        with self.full_disk(study.run, ("log.txt",), after=0):
            rc, out = self.run_study(text.replace("reducer.name: average", "reducer.name: sum"))
        self.assertEqual(rc, 2, out)
        self.assertRegex(out, r"study.py: average-np1-s1: \S+/runs/average-np1-s1-\w+/log.txt: No space left on device "
                              r"\(a full disk or a read-only --runs folder\?\): the study stops")
        self.assertNotIn("[2/2]", out)
        self.assertNotIn("Traceback", out)

    def test_a_report_of_failed_cells_only(self):
        # No finished cell: no legend without artists (matplotlib warned "No artists with labels");
        # a method without a sweep whose cells failed is said to have failed, not listed as an
        # unfinished sweep of "0 of 1 sweep points".
        methods = ("  broken: {set: {reducer.name: average, fake.fail: 1}}\n"
                   "  swept: {set: {fake.fail: 1}, sweep: {optimizer.lr: [0.05, 0.1]}}\n")
        text = study_text(self.base, methods).replace("ranks: [1, 2]", "ranks: [1]")
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rc, out = self.run_study(text)
        self.assertEqual(rc, 1, out)
        self.assertEqual([str(w.message) for w in caught if "artists" in str(w.message)], [])
        self.assertNotIn("No artists", out)
        report = read(os.path.join(self.results, "report.md"))
        self.assertNotIn("broken, 1 ranks: 0 of 1 sweep points run", report)
        self.assertIn("swept, 1 ranks: 0 of 2 sweep points run", report)
        self.assertIn("## Methods whose every cell failed", report)
        self.assertIn("- broken, 1 ranks: 1 failed cell(s)", report)

    def test_a_trainer_stopped_from_outside_ends_the_open_cell_line_first(self):
        text = study_text(self.base, "  stopped: {set: {fake.term: 1}}\n").replace("ranks: [1, 2]", "ranks: [1]")
        path = write(self.tmp, "s.yaml", text)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            with self.assertRaises(study.run.TrainerStopped):
                study.cli.main(self.args(path))
        self.assertTrue(out.getvalue().endswith("[1/1] stopped-np1-s1 ...\n"), out.getvalue())

    def test_a_damaged_cells_json_is_refused_and_never_overwritten(self):
        # Published cells first; then each damage: the run, --report-only and --chosen refuse it
        # (exit 2, the file, the line or cell and the field, no traceback) and leave it as it was.
        text = study_text(self.base, self.methods)
        rc, out = self.run_study(text)
        self.assertEqual(rc, 0, out)
        path = os.path.join(self.results, "cells.json")
        good = read(path)
        lines = good.splitlines()
        second = json.loads(lines[2].rstrip(","))

        def with_cell(**change):
            rec = {k: v for k, v in {**second, **change}.items() if v != "DROP"}
            return "\n".join(lines[:2] + [json.dumps(rec)] + lines[3:]) + "\n"
        for damaged, says in [
                (good[:-40], "cells.json: not valid JSON"),
                ("[]\n", "cells.json: not an object (a JSON list)"),
                ('{"study": "s", "cells": {}}\n', "cells.json: 'cells' is not a list"),
                (with_cell(status="DROP"), "cells.json: line 3 (cell average-np2-s1): no 'status'"),
                (with_cell(final="DROP"), "cells.json: line 3 (cell average-np2-s1): no 'final'"),
                (with_cell(evals="DROP"), "cells.json: line 3 (cell average-np2-s1): no 'evals'"),
                (with_cell(evals=[[2]]), "line 3 (cell average-np2-s1): 'evals' must be a list of [step, value]"),
                (with_cell(evals="[[2, 0.5]]"), "'evals' must be a list of [step, value] pairs"),
                (with_cell(status="done"), "'status' must be one of ok, diverged, failed")]:
            for extra in ([], ["--report-only"], ["--chosen", "average@1"]):
                with self.subTest(says=says, extra=extra):
                    write(self.results, "cells.json", damaged)
                    shutil.rmtree(self.runs, ignore_errors=True)  # the cells must come from cells.json
                    rc, out = self.run_study(text, *extra)
                    self.assertEqual(rc, 2, out)
                    self.assertIn(f"study.py: {path}: ", out)
                    self.assertIn(says, out)
                    self.assertIn("the runner neither reads nor overwrites it", out)
                    self.assertNotIn("Traceback", out)
                    self.assertEqual(read(path), damaged)
        # A cells.json with no cell of this study: --report-only says it has none, not that it is missing.
        write(self.results, "cells.json", '{"study": "s", "metric": "eval_top1", "cells": [\n]}\n')
        rc, out = self.run_study(text, "--report-only")
        self.assertEqual(rc, 1, out)
        self.assertIn(f"none of this study's in {path}: nothing to report", out)


class CommittedReports(unittest.TestCase):
    """Every study with committed cells: its cells.json regenerates its committed report.md, but
    for the time the report was written, so a change to the report generator (or a hand edit of a
    report) shows up here instead of in a reader's diff months later."""

    def test_each_committed_report_regenerates_from_its_cells(self):
        written = re.compile(r"report written \d{4}-\d{2}-\d{2} \d{2}:\d{2}")
        studies = sorted(f[:-len(".yaml")] for f in os.listdir(os.path.join(ROOT, "studies")) if f.endswith(".yaml"))
        checked = 0
        for name in studies:
            results = os.path.join(ROOT, "docs", "results", name)
            if not os.path.exists(os.path.join(results, "cells.json")):
                continue
            with self.subTest(study=name), tempfile.TemporaryDirectory() as out:
                shutil.copy(os.path.join(results, "cells.json"), out)
                subprocess.run([sys.executable, os.path.join(ROOT, "tools", "study.py"),
                                os.path.join(ROOT, "studies", name + ".yaml"), "--report-only", "--any-trainer",
                                "--no-fetch", "--runs", os.path.join(out, "runs"), "--results", out],
                               check=True, capture_output=True, cwd=ROOT)
                checked += 1
                fresh = read(os.path.join(out, "report.md")).replace(os.path.relpath(out, ROOT), "OUT")
                committed = read(os.path.join(results, "report.md"))
                diff = list(difflib.unified_diff(written.sub("report written", committed).splitlines(),
                                                 written.sub("report written", fresh).splitlines(),
                                                 "committed", "regenerated", n=0, lineterm=""))
                if diff:
                    self.fail(f"docs/results/{name}/report.md is not what its cells.json gives (regenerate it: "
                              f"/usr/bin/python3 tools/study.py studies/{name}.yaml --report-only --any-trainer):\n"
                              + "\n".join(diff[:20]))
        self.assertGreaterEqual(checked, 8)

class DownstreamReport(unittest.TestCase):
    """tools/downstream_study.py --report-only: the committed cells regenerate the committed
    report (its command naming --out only for a folder other than the default), --kinds finetune
    probe adds the probe's table from 'probe' cells, and --kinds probe gives that table alone; a
    damaged cells.json is refused and left as it was, and an empty one has nothing to report."""

    def report(self, cells, *extra):
        with tempfile.TemporaryDirectory() as out:
            json.dump(cells, open(os.path.join(out, "cells.json"), "w"))
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "downstream_study.py"), "--report-only",
                            "--out", out] + list(extra), check=True, capture_output=True)
            # The folder is a temporary one: "OUT" in the regenerating command.
            return open(os.path.join(out, "report.md")).read().replace(os.path.relpath(out, ROOT), "OUT")

    def test_committed_report_and_the_probe_section(self):
        base = os.path.join(ROOT, "docs", "results", "bert_tiny_downstream")
        cells = json.load(open(os.path.join(base, "cells.json")))
        text = self.report(cells)
        self.assertIn("--pretrain-steps 300 --out OUT` (cells cached", text)
        self.assertEqual(text.replace(" --out OUT", ""), open(os.path.join(base, "report.md")).read())
        self.assertIn("## Fine-tuning (every parameter trained)", text)
        self.assertNotIn("## Probe", text)
        probe = dict(cells)
        for k, v in cells.items():
            if k.startswith("finetune "):
                acc = 0.75 if "lamb_adasum" in k else 0.70 if "lamb_average" in k else 0.686
                probe["probe " + k[len("finetune "):]] = dict(v, eval_accuracy=acc)
        text = self.report(probe, "--kinds", "finetune", "probe")
        self.assertIn("## Fine-tuning (every parameter trained)", text)
        section = text[text.index("## Probe (embeddings and encoder frozen, a classifier on the mean of the "
                                  "outputs trained)"):]
        self.assertIn("| lamb_adasum | 6.6004 ± 0.0238 | 75.00 ± 0.00 | 9 |", section)
        self.assertIn("| scratch | — | 68.60 ± 0.00 | 3 |", section)
        self.assertIn("Adasum minus averaging, test accuracy: +5.00 points", section)
        self.assertIn("the probe: the same with the embeddings and encoder frozen", text)
        self.assertIn("(`model.pooling: mean`)", text)
        self.assertIn("--out OUT --kinds finetune probe` (cells cached", text)
        alone = self.report(probe, "--kinds", "probe")
        self.assertNotIn("## Fine-tuning", alone)
        self.assertIn("| lamb_adasum | 6.6004 ± 0.0238 | 75.00 ± 0.00 | 9 |", alone)
        self.assertIn("--pretrain-steps 300 --out OUT --kinds probe` (cells cached", alone)

    def test_a_damaged_or_empty_cells_json_is_refused_and_left_as_it_was(self):
        # A damaged cache stops the runner before anything runs (a JSONDecodeError traceback
        # before), naming the file and leaving it untouched; an empty one has nothing to report
        # (it wrote a report of no cells, "Machine: . ... the cells ran more than one trainer").
        tmp = tempfile.mkdtemp(prefix="ada_test_downstream_")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        path = os.path.join(tmp, "cells.json")
        tool = [sys.executable, os.path.join(ROOT, "tools", "downstream_study.py"), "--out", tmp,
                "--runs", os.path.join(tmp, "runs")]
        for text, why in (('{"pretrain lamb_average seed 1 ranks 2 steps 300": {"eval_m', "not JSON"),
                          (b'{"a": "\xff"}', "not JSON"),
                          ("[]", "not a JSON object of cells (a list)"),
                          ('{"finetune scratch seed 0 ft 1": {"eval_loss": 0.2}}',
                           "cell 'finetune scratch seed 0 ft 1' is not an object with a number eval_accuracy")):
            with open(path, "wb") as f:
                f.write(text if isinstance(text, bytes) else text.encode())
            for extra in (["--report-only"], ["--trainer", os.path.join(tmp, "no_trainer")]):
                p = subprocess.run(tool + extra, capture_output=True, text=True)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn(f"downstream: {path} is damaged: {why}", p.stderr)
                self.assertIn("it is left as it was", p.stderr)
                self.assertNotIn("Traceback", p.stderr)
                self.assertEqual(open(path, "rb").read(), text if isinstance(text, bytes) else text.encode())
                self.assertFalse(os.path.exists(os.path.join(tmp, "report.md")))
        for cells, said in ("{}", f"no cells in {path}"), (None, f"no {path}"):
            if cells is None:
                os.remove(path)
            else:
                with open(path, "w") as f:
                    f.write(cells)
            p = subprocess.run(tool + ["--report-only"], capture_output=True, text=True)
            self.assertEqual((p.returncode, p.stdout), (1, ""), p.stderr)
            self.assertIn(f"downstream: --report-only: {said}: nothing to report", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(tmp, "report.md")))
        # Cells, but none of this command's fine-tunings: nothing to report either.
        with open(path, "w") as f:
            json.dump({"pretrain lamb_average seed 1 ranks 2 steps 300": {"eval_mlm_loss": 6.5}}, f)
        p = subprocess.run(tool + ["--report-only"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(f"downstream: --report-only: no fine-tuning cell in {path} for this command", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(tmp, "report.md")))

    def test_choose_lr_picks_each_checkpoints_lr_on_dev_and_reads_test_only_there(self):
        # The whole runner with a fake mpirun and trainer (run folders under a temporary --runs):
        # dev accuracy peaks, for fine-tuning, at LR 2e-4 from the Adasum checkpoint (the start
        # window's top: one rung more, 4e-4, brackets it), 1e-4 from the averaging one (inside),
        # 2.5e-5 from scratch (two rungs below the window: 1.25e-5 brackets it); for every probe
        # at 1e-2 (the window's top: 3e-2 brackets it).
        tmp = tempfile.mkdtemp(prefix="ada_test_downstream_")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        mpirun = write(tmp, "mpirun", '#!/bin/bash\nwhile [[ $1 != -np ]]; do shift; done\nshift 2\nexec "$@"\n')
        trainer = write(tmp, "trainer", """#!/usr/bin/python3
import json, math, os, sys
if sys.argv[1:] == ["--version"]:
    sys.exit(print("trainer built from commit abc1234\\ntrainer version v1"))
sets = dict(x.split("=", 1) for x in sys.argv[1:] if "=" in x and not x.startswith("-"))
out = sets["output.dir"]
os.makedirs(os.path.join(out, "checkpoints"), exist_ok=True)
if "train.steps" in sets:
    s = {"eval_mlm_loss": 6.0 + int(sets["train.seed"]) / 100}
else:
    lr, probe = float(sets.get("optimizer.lr", "1e-4")), "model.pooling" in sets
    init = sets.get("train.init_from", "")
    best = 1e-2 if probe else 2e-4 if "adasum" in init else 1e-4 if init else 2.5e-5
    split = os.path.basename(sets["data.eval_path"]).split(".")[0]
    s = {"eval_accuracy": 0.9 - abs(math.log10(lr / best)) / 10 + (0.001 if split == "test" else 0),
         "eval_loss": 0.3}
json.dump(s, open(os.path.join(out, "summary.json"), "w"))
""")
        os.chmod(mpirun, 0o755)
        os.chmod(trainer, 0o755)
        out = os.path.join(tmp, "out")
        args = [sys.executable, os.path.join(ROOT, "tools", "downstream_study.py"), "--trainer", trainer,
                "--mpirun", mpirun, "--runs", os.path.join(tmp, "runs"), "--out", out, "--seeds", "1",
                "--ft-seeds", "1", "2", "--pretrain-steps", "10", "--kinds", "finetune", "probe", "--choose-lr"]
        subprocess.run(args, check=True, capture_output=True)
        cells = json.loads(read(os.path.join(out, "cells.json")))
        dev = sorted(k for k in cells if k.startswith("dev "))
        self.assertEqual(len(dev), (3 + 4 + 5 + 3 * 5) * 2)  # the LRs tried x 2 fine-tuning seeds
        self.assertIn("dev finetune lamb_adasum seed 1 lr 5e-05 ft 2 ranks 2 steps 10", dev)
        self.assertIn("dev probe scratch seed 0 lr 0.0003 ft 1", dev)
        self.assertTrue(all("data/spam/dev.jsonl" in cells[k]["command"] for k in dev))
        tested = sorted(k for k in cells if " lr " in k and not k.startswith("dev "))
        self.assertEqual(tested, sorted(f"{kind} {m} seed {s} lr {lr} ft {ft}{tail}"
                                        for kind, m, s, lr, tail in [
                                            ("finetune", "lamb_adasum", 1, "0.0002", " ranks 2 steps 10"),
                                            ("finetune", "scratch", 0, "2.5e-05", ""),
                                            ("probe", "lamb_adasum", 1, "0.01", " ranks 2 steps 10"),
                                            ("probe", "lamb_average", 1, "0.01", " ranks 2 steps 10"),
                                            ("probe", "scratch", 0, "0.01", "")] for ft in (1, 2)))
        self.assertTrue(all("data/spam/test.jsonl" in cells[k]["command"] for k in tested))
        text = read(os.path.join(out, "report.md"))
        fixed, chosen = text.split("## Fine-tuning (every parameter trained), LR chosen on the dev split")
        self.assertIn("| lamb_adasum | — | 87.09 ± 0.00 | 2 |", fixed)  # the fixed 1e-4, on test
        self.assertIn("| checkpoint | LR 1.25e-05 | LR 2.5e-05 | LR 5e-05 | LR 0.0001 | LR 0.0002 | LR 0.0004 | chosen |",
                      chosen)
        self.assertIn("| lamb_average s1 | — | — | 86.99 | **90.00** | 86.99 | — | 0.0001 |", chosen)
        self.assertIn("| lamb_adasum s1 | — | — | 83.98 | 86.99 | **90.00** | 86.99 | 0.0002 |", chosen)
        self.assertIn("| scratch s0 | 86.99 | **90.00** | 86.99 | 83.98 | 80.97 | — | 2.5e-05 |", chosen)
        self.assertIn("| lamb_adasum | — | 90.10 ± 0.00 | 2 |", chosen)  # 2e-4, on test
        self.assertIn("| scratch s0 | 74.77 | 80.00 | 84.77 | **90.00** | 85.23 | 0.01 |",
                      chosen[chosen.index("## Probe (embeddings and encoder frozen, a classifier on the mean of the "
                                          "outputs trained), LR chosen"):])
        self.assertIn("--out " + os.path.relpath(out, ROOT) + " --kinds finetune probe --choose-lr`", text)
        self.assertIn("the test split was read only at the chosen LR", text)
        # A rerun runs nothing new, and --report-only redraws the same report.
        before = os.stat(os.path.join(out, "cells.json")).st_mtime_ns
        subprocess.run(args, check=True, capture_output=True)
        self.assertEqual(os.stat(os.path.join(out, "cells.json")).st_mtime_ns, before)
        subprocess.run(args + ["--report-only"], check=True, capture_output=True)
        self.assertEqual(read(os.path.join(out, "report.md")), text)

    def test_a_partial_study_names_the_seeds_not_run_yet(self):
        cells = json.loads(read(os.path.join(downstream_study.DEFAULT_OUT, "cells.json")))
        part = {k: v for k, v in cells.items() if " seed 1 " in k or k.startswith("finetune scratch ")}
        text = self.report(part)
        self.assertIn("seeds 1 so far (2, 3 not run yet); fine-tuning: ", text)
        self.assertIn("2 epochs, seeds 1, 2, 3, evaluated once", text)
        self.assertIn("| lamb_average | — |", text)  # one checkpoint: no spread
        self.assertIn("--pretrain-steps 300 --out OUT` (cells cached", text)
        text = self.report(part, "--seeds", "1")
        self.assertIn("seeds 1; fine-tuning: ", text)
        self.assertIn("--pretrain-steps 300 --seeds 1 --out OUT` (cells cached", text)
        # Unequal pre-training seeds a method: the per-checkpoint test names both counts.
        self.assertIn("(the pre-training seed as the unit, n = 3 a side)", self.report(cells))
        uneven = {k: v for k, v in cells.items()
                  if not k.startswith(("finetune lamb_adasum seed 3 ", "pretrain lamb_adasum seed 3 "))}
        self.assertIn("(the pre-training seed as the unit, n = 3 averaging, 2 Adasum)", self.report(uneven))

    def test_every_committed_downstream_report_is_what_its_cells_and_command_give(self):
        # Each docs/results folder holding a downstream report (by its title), regenerated from its
        # cells.json with its own Regenerate command plus --report-only: seeds, step counts, kinds.
        checked = 0
        for name in sorted(os.listdir(os.path.join(ROOT, "docs", "results"))):
            base = os.path.join(ROOT, "docs", "results", name)
            try:
                text = read(os.path.join(base, "report.md"))
            except OSError:
                continue
            if not text.startswith("# Does Adasum keep downstream quality?"):
                continue
            m = re.search(r"Regenerate: `/usr/bin/python3 tools/downstream_study.py ([^`]*)`", text)
            self.assertIsNotNone(m, f"{name}/report.md names no regenerating command")
            args = shlex.split(m.group(1))
            out = f" --out {os.path.relpath(base, ROOT)}" if base != downstream_study.DEFAULT_OUT else ""
            if out:
                i = args.index("--out")
                self.assertEqual(" --out " + args[i + 1], out, name)
                del args[i:i + 2]
            got = self.report(json.loads(read(os.path.join(base, "cells.json"))), *args).replace(" --out OUT", out)
            self.assertEqual(got, text, f"{name}: the committed report is not what its cells give; regenerate it "
                             f"with {m.group(1)} --report-only")
            checked += 1
        self.assertGreaterEqual(checked, 2)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_study.py TRAINER_BINARY [unittest args]")
    TRAINER = os.path.abspath(sys.argv.pop(1))
    unittest.main()
