#!/usr/bin/python3
"""tools/compare.py and tools/runlog.py on odd run folders (written here, no trainer needed): a
damaged summary.json (or one whose label figures are not the trainer's types), a metrics line
without "step", a line that is not a JSON object, bytes that are not UTF-8, an empty metrics.jsonl
and an output path in no folder or naming a folder each stop compare.py with a message naming the
file (and line, or key) and a non-zero exit, not a traceback or a blank plot; -o NAME writes NAME
(NAME.png without an extension) and says so; a last line cut short (a crash) is left out with a
note, as runlog.py does for every tool."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import runlog  # noqa: E402

TRAIN = {"step": 2, "epoch": 0, "lr": 0.05, "loss": 2.3, "samples_per_s": 50.0, "compute_s": 0.1,
         "comm_s": 0.0, "exposed_comm_s": 0.0, "wall_s": 0.5}
EVAL = {"step": 2, "epoch": 0, "eval_loss": 2.3, "eval_top1": 0.1, "wall_s": 0.7}


class Compare(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ada_test_compare_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def run_folder(self, name, metrics, summary=None):
        """A run folder holding metrics.jsonl (bytes, or a list of objects) and summary.json (text)."""
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        if not isinstance(metrics, bytes):
            metrics = "".join(json.dumps(r) + "\n" for r in metrics).encode()
        with open(os.path.join(d, "metrics.jsonl"), "wb") as f:
            f.write(metrics)
        if summary is not None:
            with open(os.path.join(d, "summary.json"), "w") as f:
                f.write(summary)
        return d

    def compare(self, *runs, out=None):
        out = os.path.join(self.tmp, "out.png") if out is None else out
        p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "compare.py"), *runs, "-o", out],
                           capture_output=True, text=True)
        self.assertNotIn("Traceback", p.stderr)
        # matplotlib's one-off notice on a fresh HOME is not the tool's output.
        stderr = "".join(l for l in p.stderr.splitlines(keepends=True)
                         if not l.startswith("Matplotlib is building the font cache"))
        return p.returncode, p.stdout + stderr

    def refused(self, message, *runs, out=None):
        out = out or os.path.join(self.tmp, "out.png")
        rc, text = self.compare(*runs, out=out)
        self.assertNotEqual(rc, 0, text)
        self.assertIn(message, text)
        self.assertFalse(os.path.exists(out), "a refused comparison wrote its PNG")

    def test_good_runs_plot_without_warnings(self):
        a = self.run_folder("a", [TRAIN, EVAL], json.dumps({"sync": "adasum", "world_size": 2}))
        b = self.run_folder("b", [TRAIN])  # no eval line, no summary: the eval panels stay empty
        rc, text = self.compare(a, b)
        self.assertEqual(rc, 0, text)
        self.assertEqual(text, f"compare.py: wrote {self.tmp}/out.png (2 runs)\n")  # no "No artists" warning
        self.assertTrue(os.path.getsize(os.path.join(self.tmp, "out.png")) > 0)
        rc, text = self.compare(b)  # no eval line in any run: no legend on the eval panels
        self.assertEqual((rc, text), (0, f"compare.py: wrote {self.tmp}/out.png (1 runs)\n"))

    def test_damaged_files_are_named(self):
        good = json.dumps(TRAIN).encode() + b"\n"
        d = self.run_folder("badsummary", [TRAIN], '{"steps": 6,\n')
        self.refused(f"compare.py: {d}/summary.json: not JSON (", d)
        d = self.run_folder("listsummary", [TRAIN], "[1, 2]")
        self.refused(f"compare.py: {d}/summary.json: not a JSON object (a list)", d)
        # A label's figure that is not what the trainer writes (a traceback before: TypeError).
        for name, summary, said in (("strtop1", '{"eval_top1": "0.9"}', '"eval_top1" is "0.9", not a number'),
                                    ("nulltop1", '{"eval_top1": null}', '"eval_top1" is null, not a number'),
                                    ("nullranks", '{"world_size": null}', '"world_size" is null, not a number of ranks'),
                                    ("listsync", '{"sync": [1]}', '"sync" is [1], not text')):
            d = self.run_folder(name, [TRAIN], summary)
            self.refused(f"compare.py: {d}/summary.json: {said}", d)
        d = self.run_folder("nostep", [{"loss": 2.0}, {"eval_top1": 0.1}])
        self.refused(f"compare.py: {d}/metrics.jsonl:1: no integer \"step\"", d)
        d = self.run_folder("nonobj", good + b"[1, 2]\n" + good)
        self.refused(f"compare.py: {d}/metrics.jsonl:2: not a JSON object (a list)", d)
        d = self.run_folder("binary", good + b"\xff\xfe\n" + good)
        self.refused(f"compare.py: {d}/metrics.jsonl:2: not UTF-8 text", d)
        d = self.run_folder("empty", b"")
        self.refused(f"compare.py: {d}/metrics.jsonl holds no metrics line", d)
        d = self.run_folder("blank", b"\n\n")
        self.refused(f"compare.py: {d}/metrics.jsonl holds no metrics line", d)
        self.refused(f"compare.py: {self.tmp}/none/metrics.jsonl not found", os.path.join(self.tmp, "none"))
        # One bad run among good ones: refused all the same, naming the bad one.
        ok = self.run_folder("ok", [TRAIN, EVAL])
        self.refused(f"compare.py: {self.tmp}/empty/metrics.jsonl holds no metrics line", ok, f"{self.tmp}/empty")

    def test_a_cut_last_line_is_left_out_with_a_note(self):
        good = json.dumps(TRAIN).encode() + b"\n"
        for name, tail in (("cut", b'{"step":99,"lo'), ("cut_utf8", '{"step":9,"x":"\u00e9'.encode()[:-1])):
            d = self.run_folder(name, good + tail)
            rc, text = self.compare(d)
            self.assertEqual(rc, 0, text)
            self.assertIn(f"{d}/metrics.jsonl:2: the last line is cut short (a crash?): left out", text)

    def test_an_output_path_that_cannot_be_written(self):
        d = self.run_folder("ok", [TRAIN, EVAL])
        self.refused("compare.py: cannot write /nonexistent/x.png: No such file or directory", d,
                     out="/nonexistent/x.png")

    def test_the_output_is_the_file_named(self):
        # -o NAME writes NAME, or NAME.png for a name without an extension, and says which (it
        # said "wrote run" for run.png); a folder is refused (it wrote FOLDER/.png).
        d = self.run_folder("ok", [TRAIN, EVAL])
        rc, text = self.compare(d, out=os.path.join(self.tmp, "run"))
        self.assertEqual((rc, text), (0, f"compare.py: wrote {self.tmp}/run.png (1 runs)\n"))
        self.assertTrue(os.path.isfile(os.path.join(self.tmp, "run.png")))
        rc, text = self.compare(d, out=os.path.join(self.tmp, "cmp.svg"))
        self.assertEqual((rc, text), (0, f"compare.py: wrote {self.tmp}/cmp.svg (1 runs)\n"))
        folder = os.path.join(self.tmp, "plots")
        os.makedirs(folder)
        for out in (folder + "/", folder):
            rc, text = self.compare(d, out=out)
            self.assertNotEqual(rc, 0, text)
            self.assertIn(f"compare.py: -o {out} is a folder: give a file name, e.g. -o {folder}/compare.png", text)
            self.assertEqual(os.listdir(folder), [])
        rc, text = self.compare(d, out="")
        self.assertEqual((rc, text), (1, "compare.py: -o is empty: give a file name, e.g. -o compare.png\n"))

    def test_runlog_skips_what_is_not_a_metrics_line_unless_strict(self):
        good = json.dumps(TRAIN).encode() + b"\n"
        d = self.run_folder("mixed", good + b"[1]\n" + b'{"loss": 1}\n' + b"\xff\n" + b'{"step": true}\n' + good)
        self.assertEqual(runlog.read_metrics(d), [TRAIN, TRAIN])
        with self.assertRaisesRegex(runlog.BadLine, r"metrics\.jsonl:2: not a JSON object"):
            runlog.read_metrics(d, strict=True)
        self.assertIsNone(runlog.read_summary(d))
        with open(os.path.join(d, "summary.json"), "wb") as f:
            f.write(b'{"a": "\xff"}')
        with self.assertRaisesRegex(runlog.BadFile, r"summary\.json: not UTF-8 text"):
            runlog.read_summary(d)


if __name__ == "__main__":
    unittest.main()
