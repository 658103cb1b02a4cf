#!/usr/bin/python3
"""tools/downstream_study.py's command line, refused before any cell runs (no trainer needed): a
--ranks or --pretrain-steps below 1 (mpirun -np 0 ran on every slot), an --out or --runs that is a
file or cannot be made (a FileExistsError or PermissionError traceback), a --trainer that is not
there (the study started and every cell "failed (exit 3)"), likewise an --mpirun, a seed below 0
(every cell refused by the trainer) or given twice (its cells counted twice in the means): each a
message naming the flag and
the value, exit 2, mpirun never started and no cells.json written."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "downstream_study.py")


class DownstreamArgs(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ada_test_downstream_args_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.started = os.path.join(self.tmp, "started")  # what the fakes leave when they run
        for name in ("mpirun", "trainer"):
            path = os.path.join(self.tmp, name)
            with open(path, "w") as f:
                f.write(f'#!/bin/sh\n[ "$1" = --version ] && exit 0\necho {name} >> {self.started}\nexit 3\n')
            os.chmod(path, 0o755)
        self.out = os.path.join(self.tmp, "out")
        self.file = os.path.join(self.tmp, "a_file.txt")
        with open(self.file, "w") as f:
            f.write("not a folder\n")

    def refused(self, message, *args):
        argv = ["--out", self.out, "--runs", os.path.join(self.tmp, "runs"), "--trainer",
                os.path.join(self.tmp, "trainer"), "--mpirun", os.path.join(self.tmp, "mpirun"),
                "--seeds", "1", "--ft-seeds", "1"] + list(args)  # the later of a flag given twice wins
        p = subprocess.run([sys.executable, TOOL] + argv, capture_output=True, text=True, timeout=60)
        self.assertNotIn("Traceback", p.stderr)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn(message, p.stderr)
        self.assertFalse(os.path.exists(self.started), "a trainer or mpirun ran")
        self.assertFalse(os.path.exists(os.path.join(self.out, "cells.json")))

    def test_counts_below_one(self):
        self.refused("argument --ranks: must be 1 or more, got 0", "--ranks", "0")
        self.refused("argument --ranks: must be 1 or more, got -3", "--ranks", "-3")
        self.refused("argument --ranks: needs a whole number, got '2x'", "--ranks", "2x")
        self.refused("argument --pretrain-steps: must be 1 or more, got -5", "--pretrain-steps", "-5")
        self.refused("argument --pretrain-steps: must be 1 or more, got 0", "--pretrain-steps", "0")

    def test_folders_that_cannot_be_written(self):
        self.refused(f"--out {self.file} is a file, not a folder", "--out", self.file)
        self.refused(f"--out {self.file} is a file, not a folder", "--out", self.file, "--report-only")
        self.refused("--out /proc/ada_no_such/x cannot create the folder (", "--out", "/proc/ada_no_such/x")
        self.refused(f"--runs {self.file} is a file, not a folder", "--runs", self.file)
        self.refused("--runs /proc/ada_no_such/r cannot create the folder (", "--runs", "/proc/ada_no_such/r")

    def test_a_trainer_that_is_not_there(self):
        self.refused("--trainer /nonexistent/trainer: no such executable; build it", "--trainer",
                     "/nonexistent/trainer")
        self.refused(f"--trainer {self.file}: no such executable", "--trainer", self.file)  # not executable
        self.refused(f"--trainer build/ada_no_such: no such executable (a relative path is from the repository, "
                     f"{ROOT})", "--trainer", "build/ada_no_such")

    def test_an_mpirun_that_is_not_there(self):
        self.refused("--mpirun /nonexistent/mpirun: no such executable; install OpenMPI", "--mpirun",
                     "/nonexistent/mpirun")
        self.refused("--mpirun ada_no_such_mpirun: no such executable", "--mpirun", "ada_no_such_mpirun")

    def test_seeds_below_zero_or_twice(self):
        self.refused("argument --seeds: must be 0 or more, got -1", "--seeds", "1", "-1")
        self.refused("argument --ft-seeds: needs a whole number, got '1.5'", "--ft-seeds", "1.5")
        self.refused("argument --seeds: seed 2 given more than once", "--seeds", "2", "3", "2")
        self.refused("argument --ft-seeds: seed 1, 3 given more than once", "--ft-seeds", "1", "3", "1", "3")

    def test_good_arguments_start_the_study(self):
        # The same command with nothing wrong runs the (failing) fake: the checks refuse only what is bad.
        argv = ["--out", self.out, "--runs", os.path.join(self.tmp, "runs"), "--trainer",
                os.path.join(self.tmp, "trainer"), "--mpirun", os.path.join(self.tmp, "mpirun"),
                "--seeds", "0", "--ft-seeds", "1", "2", "--ranks", "1", "--pretrain-steps", "2"]
        p = subprocess.run([sys.executable, TOOL] + argv, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("downstream: pretrain lamb_average seed 0 ranks 1 steps 2 failed (exit 3)", p.stderr)
        self.assertTrue(os.path.exists(self.started))


if __name__ == "__main__":
    unittest.main()
