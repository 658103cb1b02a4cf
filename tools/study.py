#!/usr/bin/python3
"""Study runner: trains every cell of a grid (method x ranks x micro-batches x seeds, plus LR
sweeps) under mpirun, caches finished cells, and writes a report with plots.

    /usr/bin/python3 tools/study.py studies/mnist_lenet_scaling.yaml          # run / resume
    /usr/bin/python3 tools/study.py studies/mnist_lenet_scaling.yaml --dry-run
    /usr/bin/python3 tools/study.py studies/mnist_lenet_scaling.yaml --report-only
    /usr/bin/python3 tools/study.py STUDY --only method=adasum_delta --only ranks=4,8

A study file (studies/*.yaml; the format is documented in studies/README.md) names a base
config, a budget, the metric and its target, the axes (ranks, micro_batches, seeds), common
overrides and the methods: each method is a set of trainer overrides, optionally with a sweep
(lists of values; the report keeps, per rank count, the sweep point with the best mean metric
and lists all of them) and its own seeds (fewer than the study's, for a probe). A value written
"=EXPR" is a Python expression over ranks, micro_batches, batch_per_rank, examples_per_step,
steps_per_epoch, epochs and total_steps (e.g. "=1/ranks" or "=steps_per_epoch").

A cell is one trainer run; its folder (under --runs, default runs/studies/<study>/) is named by
the cell and a hash of its resolved settings, and holds the run's output plus study_cell.json
once it has finished. A later invocation skips finished cells, so an interrupted study resumes
where it stopped (an unfinished cell starts again); changing a setting changes the hash and
reruns only the cells it touches. Diverged runs (NaN/Inf stop, or a final metric past
`metric.diverged`) are results, kept and counted; other failures are not cached, are reported,
and make the runner exit non-zero after the remaining cells ran.

Output in --results (default docs/results/<study>/): report.md, cells.json (every cell's
settings, status, final metric, eval curve), curves.png, final_vs_examples.png,
steps_to_target.png. Needs Debian's python3-yaml and python3-matplotlib (/usr/bin/python3).
"""
import argparse
import contextlib
import datetime
import hashlib
import itertools
import json
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time

import yaml

from runlog import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CELL_MARKER = "study_cell.json"
EXPR_NAMES = ("ranks", "micro_batches", "batch_per_rank", "examples_per_step", "steps_per_epoch",
              "epochs", "total_steps")


class StudyError(Exception):
    """A bad study file or command line; the message names the file and key."""


# ---------------------------------------------------------------------------------------------
# The study file


def _flat(d, prefix=""):
    """{'a': {'b': 1}} -> {'a.b': 1}; dotted keys stay as they are."""
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def _get(tree, dotted, default=None):
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


class Study:
    KEYS = {"name", "base", "question", "budget", "metric", "train_size", "set", "ranks",
            "micro_batches", "seeds", "methods", "variants", "fetch", "findings", "baseline", "trainer_args",
            "resume_cells"}

    def __init__(self, path):
        self.path = path
        where = f"study {path}"
        try:
            with open(path) as f:
                doc = yaml.safe_load(f)
        except OSError as e:
            raise StudyError(f"{where}: cannot read ({e.strerror})")
        except yaml.YAMLError as e:
            raise StudyError(f"{where}: not valid YAML: {e}")
        if not isinstance(doc, dict):
            raise StudyError(f"{where}: must be a mapping of keys (name, base, budget, ...)")
        unknown = sorted(set(doc) - self.KEYS)
        if unknown:
            raise StudyError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(self.KEYS))}")

        def need(key, kind):
            if key not in doc:
                raise StudyError(f"{where}: '{key}' is required")
            if not isinstance(doc[key], kind):
                raise StudyError(f"{where}: '{key}' must be a {kind.__name__ if isinstance(kind, type) else 'list'}, "
                                 f"got {doc[key]!r}")
            return doc[key]

        self.name = doc.get("name") or os.path.splitext(os.path.basename(path))[0]
        self.base = need("base", str)
        base_path = self.base if os.path.isabs(self.base) else os.path.join(ROOT, self.base)
        try:
            with open(base_path) as f:
                self.base_cfg = yaml.safe_load(f) or {}
        except OSError as e:
            raise StudyError(f"{where}: base config {self.base}: cannot read ({e.strerror})")
        self.question = str(doc.get("question", "")).strip()
        self.findings = str(doc.get("findings", "")).strip()
        self.fetch = list(doc.get("fetch", []))
        self.trainer_args = [str(a) for a in doc.get("trainer_args", [])]
        self.resume_cells = doc.get("resume_cells", False)
        if not isinstance(self.resume_cells, bool):
            raise StudyError(f"{where}: resume_cells must be true or false, got {self.resume_cells!r}")

        budget = need("budget", dict)
        if set(budget) not in ({"epochs"}, {"steps"}) or not isinstance(next(iter(budget.values())), int) \
                or next(iter(budget.values())) < 1:
            raise StudyError(f"{where}: budget must be {{epochs: N}} or {{steps: N}} with N >= 1, got {budget!r}")
        self.budget_key, self.budget = next(iter(budget.items()))

        metric = need("metric", dict)
        self.metric = metric.get("name")
        self.goal = metric.get("goal", "max")
        self.target = metric.get("target")
        self.diverged = metric.get("diverged")
        self.chance = metric.get("chance")
        self.plot_range = metric.get("plot_range")
        if self.plot_range is not None and not (isinstance(self.plot_range, list) and len(self.plot_range) == 2
                                                and all(isinstance(x, (int, float)) for x in self.plot_range)):
            raise StudyError(f"{where}: metric.plot_range must be [low, high], got {self.plot_range!r}")
        bad = sorted(set(metric) - {"name", "goal", "target", "diverged", "chance", "plot_range"})
        if bad or not isinstance(self.metric, str) or self.goal not in ("max", "min") or \
                not all(v is None or isinstance(v, (int, float)) for v in (self.target, self.diverged, self.chance)):
            raise StudyError(f"{where}: metric must be {{name: eval_top1, goal: max|min, target: X, "
                             f"diverged: X, chance: X}} (numbers; only name is required), got {metric!r}")

        self.train_size = doc.get("train_size")
        if self.train_size is not None and (not isinstance(self.train_size, int) or self.train_size < 1):
            raise StudyError(f"{where}: train_size must be a positive integer (examples in the training set)")

        def int_list(key, default):
            v = doc.get(key, default)
            if not isinstance(v, list) or not v or not all(isinstance(x, int) and x >= 1 for x in v):
                raise StudyError(f"{where}: '{key}' must be a non-empty list of positive integers, got {v!r}")
            return v

        self.ranks = int_list("ranks", None) if "ranks" in doc else need("ranks", list)
        self.micro_batches = int_list("micro_batches", [1])
        self.seeds = int_list("seeds", [1])
        self.common = _flat(doc.get("set", {}))
        for k in ("train.epochs", "train.steps", "train.seed", "train.micro_batches", "output.dir"):
            if k in self.common:
                raise StudyError(f"{where}: set.{k}: the runner sets it (budget, seeds, micro_batches, --runs)")

        methods = need("methods", dict)
        if not methods:
            raise StudyError(f"{where}: methods is empty")
        self.methods = {}
        for mname, m in methods.items():
            mw = f"{where}: methods.{mname}"
            if not isinstance(m, dict) or not set(m) <= {"set", "sweep", "label", "seeds"}:
                raise StudyError(f"{mw}: must be a mapping with 'set' (overrides), optional 'sweep' "
                                 f"(key: [values]), 'seeds' and 'label', got {m!r}")
            seeds = m.get("seeds", self.seeds)
            if not isinstance(seeds, list) or not seeds or not all(isinstance(x, int) and x >= 1 for x in seeds):
                raise StudyError(f"{mw}.seeds: must be a non-empty list of positive integers, got {seeds!r}")
            sweep = _flat(m.get("sweep", {}))
            for k, vals in sweep.items():
                if not isinstance(vals, list) or not vals:
                    raise StudyError(f"{mw}.sweep.{k}: must be a non-empty list of values")
            self.methods[mname] = {"set": _flat(m.get("set", {})), "sweep": sweep, "seeds": seeds,
                                   "label": str(m.get("label", mname))}
        variants = doc.get("variants", {"": {}})
        if not isinstance(variants, dict) or not variants:
            raise StudyError(f"{where}: variants must be a mapping name -> {{label, set}}, got {variants!r}")
        self.variants = {}
        for vname, v in variants.items():
            vw = f"{where}: variants.{vname}"
            if not isinstance(v, dict) or not set(v) <= {"set", "label"}:
                raise StudyError(f"{vw}: must be a mapping with 'set' (overrides) and optional 'label', got {v!r}")
            self.variants[str(vname)] = {"set": _flat(v.get("set", {})), "label": str(v.get("label", vname))}
        self.baseline = doc.get("baseline")
        if self.baseline is not None and self.baseline not in self.methods:
            raise StudyError(f"{where}: baseline '{self.baseline}' is not one of the methods")

    # ---- grid ---------------------------------------------------------------------------------

    def batch_per_rank(self, overrides):
        return int(overrides.get("train.batch_per_rank", _get(self.base_cfg, "train.batch_per_rank", 32)))

    def cells(self):
        """Every cell of the grid, in run order: small rank counts first (quick feedback)."""
        out = []
        for ranks, mb, variant, (mname, m) in itertools.product(self.ranks, self.micro_batches, self.variants,
                                                                self.methods.items()):
            keys = list(m["sweep"])
            for values in itertools.product(*(m["sweep"][k] for k in keys)):
                point = dict(zip(keys, values))
                for seed in m["seeds"]:
                    out.append(Cell(self, mname, ranks, mb, seed, point, variant))
        return out

    def column_label(self, ranks, mb, variant):
        """A report column: ranks (x micro-batches), and the variant's label when there are several."""
        s = f"{ranks} ranks" if mb == 1 else f"{ranks}×{mb}×{self.batch_per_rank({})}"
        return s + (f", {self.variants[variant]['label']}" if len(self.variants) > 1 else "")


def _fmt_value(v):
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


class Cell:
    def __init__(self, study, method, ranks, micro_batches, seed, point, variant=""):
        self.study, self.method, self.ranks, self.mb, self.seed, self.point, self.variant = \
            study, method, ranks, micro_batches, seed, point, variant
        self.overrides = self._resolve()
        self.examples_per_step = ranks * micro_batches * study.batch_per_rank(self.overrides)
        settings = {"base": study.base_cfg, "overrides": self.overrides, "ranks": ranks,
                    "trainer_args": study.trainer_args}
        self.hash = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:10]
        sweep = "".join(f"-{k.split('.')[-1]}{_fmt_value(v)}" for k, v in point.items())
        mb = f"-mb{micro_batches}" if len(study.micro_batches) > 1 or micro_batches != 1 else ""
        self.name = f"{method}{sweep}" + (f"-{variant}" if variant else "") + f"-np{ranks}{mb}-s{seed}"
        self.point_label = ", ".join(f"{k.split('.')[-1]} {_fmt_value(v)}" for k, v in point.items())

    def _resolve(self):
        s = self.study
        raw = {}
        raw.update(s.common)
        raw.update(s.variants[self.variant]["set"])
        raw.update(s.methods[self.method]["set"])
        raw.update(self.point)
        raw[f"train.{s.budget_key}"] = s.budget
        raw["train.seed"] = self.seed
        raw["train.micro_batches"] = self.mb
        batch = s.batch_per_rank(raw)
        env = {"ranks": self.ranks, "micro_batches": self.mb, "batch_per_rank": batch,
               "examples_per_step": self.ranks * self.mb * batch, "epochs": None, "steps_per_epoch": None,
               "total_steps": None}
        if s.train_size:
            spe = s.train_size // self.ranks // batch // self.mb
            env["steps_per_epoch"] = spe
            env["epochs"] = s.budget if s.budget_key == "epochs" else None
            env["total_steps"] = s.budget * spe if s.budget_key == "epochs" else s.budget
        elif s.budget_key == "steps":
            env["total_steps"] = s.budget
        names = {"sqrt": math.sqrt, "log2": math.log2, "max": max, "min": min, "round": round, "int": int,
                 "ceil": math.ceil, "floor": math.floor}
        out = {}
        for k, v in raw.items():
            if isinstance(v, str) and v.startswith("="):
                missing = [n for n in EXPR_NAMES if n in v[1:] and env[n] is None]
                if missing:
                    raise StudyError(f"study {s.path}: {k}: '{v}' uses {', '.join(missing)}, which needs "
                                     f"'train_size' in the study (and an epochs budget for epochs)")
                try:
                    v = eval(v[1:], {"__builtins__": {}}, {**names, **env})  # noqa: S307 (our own files)
                except Exception as e:  # noqa: BLE001
                    raise StudyError(f"study {s.path}: {k}: cannot evaluate '{v}': {e}")
                if isinstance(v, float) and v.is_integer() and ("steps" in k or "every" in k):
                    v = int(v)
            out[k] = v
        return out

    def trainer_sets(self):
        def text(v):
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, (list, dict)):
                return json.dumps(v)
            return _fmt_value(v) if isinstance(v, float) else str(v)
        return [f"{k}={text(v)}" for k, v in sorted(self.overrides.items())]


# ---------------------------------------------------------------------------------------------
# Running cells


def read_curve(folder, metric):
    """From a run's metrics.jsonl: eval points [(step, value)], loss points [(step, loss)] and
    the wall time of each evaluation [(step, seconds since the run started)]."""
    rows = read_metrics(folder)
    if rows is None:
        return [], [], []
    evals, losses, walls = {}, {}, {}
    for row in rows:
        if metric in row and isinstance(row.get("step"), int):
            evals[row["step"]] = row[metric]
            if isinstance(row.get("wall_s"), (int, float)):
                walls[row["step"]] = row["wall_s"]
        if "loss" in row and isinstance(row.get("step"), int):
            losses[row["step"]] = row["loss"]
    return sorted(evals.items()), sorted(losses.items()), sorted(walls.items())


def first_error(log_text):
    """The first error the trainer logged (with its indented continuation lines), else the log's
    last lines: what to show for a failed cell instead of mpirun's abort banner."""
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        if " error: " in line:
            more = list(itertools.takewhile(lambda l: l.startswith("  "), lines[i + 1:i + 4]))
            return " ".join([line.split(" error: ", 1)[1]] + [m.strip() for m in more])
    return " | ".join([l for l in lines if l.strip()][-4:])


def is_diverged_value(study, value):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return True
    if study.diverged is None:
        return False
    return value <= study.diverged if study.goal == "max" else value >= study.diverged


def run_cell(cell, args, folder):
    """Runs one cell; returns its record (also written as study_cell.json unless it failed)."""
    study = cell.study
    # An unfinished earlier attempt starts again, unless the study resumes cells: then the
    # trainer goes on from the attempt's newest checkpoint (--resume auto; fresh if it has none).
    resumed = study.resume_cells and os.path.isdir(folder)
    if os.path.isdir(folder) and not resumed:
        shutil.rmtree(folder)
    os.makedirs(folder, exist_ok=True)
    mpirun = [args.mpirun, "-np", str(cell.ranks), "--oversubscribe", "--bind-to", "none",
              "--mca", "mpi_yield_when_idle", "1"]
    base = study.base if os.path.isabs(study.base) else os.path.join(ROOT, study.base)
    cmd = mpirun + [args.trainer, "--config", base]
    for s in cell.trainer_sets() + [f"output.dir={folder}", "checkpoint.overwrite=true"]:
        cmd += ["--set", s]
    cmd += study.trainer_args
    if study.resume_cells:
        cmd += ["--resume", "auto"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    start = time.time()
    with open(os.path.join(folder, "log.txt"), "a" if resumed else "w") as log:
        if resumed:
            log.write("\n# study.py: an earlier attempt of this cell was interrupted; resuming it\n")
        log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        log.flush()
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    wall = time.time() - start
    with open(os.path.join(folder, "log.txt"), errors="replace") as f:
        log_text = f.read()
    if resumed:  # this attempt's part of the log: an earlier attempt's error is not this one's
        log_text = log_text[log_text.rfind("# study.py: an earlier attempt"):]
    evals, losses, walls = read_curve(folder, study.metric)
    summary = {}
    if os.path.isfile(os.path.join(folder, "summary.json")):
        with open(os.path.join(folder, "summary.json")) as f:
            summary = json.load(f)
    final = summary.get(study.metric, evals[-1][1] if evals else None) if rc == 0 else (evals[-1][1] if evals else None)
    nonfinite = "is NaN/Inf" in log_text  # the trainer's stop on a non-finite loss or gradient
    if rc == 0 and study.metric not in summary:
        status = "failed"
        reason = f"the run ended without '{study.metric}' in summary.json (no evaluation set?)"
    elif rc == 0:
        status, reason = ("diverged", f"final {study.metric} {final}") if is_diverged_value(study, final) else ("ok", "")
    elif nonfinite:
        status, reason = "diverged", "stopped on NaN/Inf"
    else:
        status = "failed"
        reason = f"exit code {rc}: " + first_error(log_text)
    rec = {**identity(cell), "hash": cell.hash, "status": status,
           "reason": reason, "exit_code": rc, "final": final,
           # A resumed cell: the trainer's own count over its attempts (up to each one's last checkpoint).
           "wall_s": round(summary.get("wall_seconds", wall) if resumed else wall, 2),
           "resumed": resumed,
           "steps": summary.get("steps", evals[-1][0] if evals else None),
           "evals": evals, "eval_wall": walls, "losses": losses[:: max(1, len(losses) // 200)],
           "command": " ".join(shlex.quote(c) for c in cmd), "machine": machine(),
           "commit": args.build_commit or commit()}
    if status != "failed":
        with open(os.path.join(folder, CELL_MARKER), "w") as f:
            json.dump(rec, f)
    return rec


def identity(cell):
    """What a cell is called and where it sits in the grid. The names (cell, method, variant)
    are not in its settings hash, so a cached record gets all of these from the study as it is
    now (a method renamed, a setting moved into a variant): a report never shows a name or
    column the study file no longer has."""
    return {"name": cell.name, "method": cell.method, "ranks": cell.ranks, "micro_batches": cell.mb,
            "variant": cell.variant, "seed": cell.seed, "point": cell.point,
            "examples_per_step": cell.examples_per_step, "overrides": cell.overrides}


def load_cached(folder, cell):
    path = os.path.join(folder, CELL_MARKER)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            rec = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
    if rec.get("hash") != cell.hash:
        return None
    if "eval_wall" not in rec:  # written by an older runner
        rec["eval_wall"] = read_curve(folder, cell.study.metric)[2]
    return {**rec, **identity(cell)}


def load_published(path):
    """Finished cells of an earlier report's cells.json by settings hash ({} when there is none)."""
    if not os.path.isfile(path):
        return {}
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"study.py: warning: {path} is unreadable ({e}); its cells are not reused", file=sys.stderr)
        return {}
    out = {}
    for rec in doc.get("cells", []):
        if not isinstance(rec, dict) or rec.get("status") == "failed" or "hash" not in rec:
            continue
        out[rec["hash"]] = rec
    return out


def fmt_time(s):
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class Eta:
    """Remaining time from the cells run so far, per rank count where known (runs at the same
    rank count cost about the same), else the mean over all."""

    def __init__(self):
        self.by_ranks = {}

    def add(self, ranks, seconds):
        self.by_ranks.setdefault(ranks, []).append(seconds)

    def remaining(self, cells):
        all_t = [t for ts in self.by_ranks.values() for t in ts]
        if not all_t:
            return None
        mean_all = sum(all_t) / len(all_t)
        return sum(sum(self.by_ranks[c.ranks]) / len(self.by_ranks[c.ranks]) if c.ranks in self.by_ranks
                   else mean_all for c in cells)


# ---------------------------------------------------------------------------------------------
# Aggregation


def mean_std(xs):
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def steps_to_target(study, evals):
    if study.target is None:
        return None
    for step, v in evals:
        if (v >= study.target) if study.goal == "max" else (v <= study.target):
            return step
    return None


def column(r):
    """The report column of a record or row: (ranks, micro_batches, variant)."""
    return r["ranks"], r["micro_batches"], r.get("variant", "")


def column_order(study, col):
    ranks, mb, variant = col
    return ranks, mb, list(study.variants).index(variant) if variant in study.variants else len(study.variants)


def aggregate(study, records):
    """Groups records into rows: one per (method, sweep point, ranks, micro_batches, variant)."""
    groups = {}
    for r in records:
        key = (r["method"], json.dumps(r["point"], sort_keys=True)) + column(r)
        groups.setdefault(key, []).append(r)
    rows = []
    for (method, point, ranks, mb, variant), recs in groups.items():
        done = [r for r in recs if r["status"] in ("ok", "diverged")]
        finals = []
        for r in done:
            v = r["final"]
            if v is None or not math.isfinite(v):
                v = study.chance  # diverged before any evaluation: counted at chance
            if v is not None:
                finals.append(v)
        mean, sd = mean_std(finals)
        hits = [(steps_to_target(study, r["evals"]), dict(r.get("eval_wall", []))) for r in done]
        reached = [h for h, _ in hits if h is not None]
        times = [w[h] for h, w in hits if h is not None and h in w]
        rows.append({"method": method, "point": json.loads(point), "ranks": ranks, "micro_batches": mb,
                     "variant": variant,
                     "examples_per_step": recs[0]["examples_per_step"], "seeds": len(done),
                     "failed": sum(r["status"] == "failed" for r in recs),
                     "diverged": sum(r["status"] == "diverged" for r in done),
                     "mean": mean, "std": sd, "reached": len(reached),
                     "steps_to_target": mean_std(reached)[0] if reached else None,
                     "time_to_target": mean_std(times)[0] if times else None,
                     "wall_s": mean_std([r["wall_s"] for r in done])[0],
                     "records": done})
    rows.sort(key=lambda r: (column_order(study, column(r)), list(study.methods).index(r["method"]),
                             json.dumps(r["point"], sort_keys=True)))
    return rows


def better(study, a, b):
    """Is row a better than row b (mean metric; a row with no result never is)?"""
    if a["mean"] is None:
        return False
    if b["mean"] is None:
        return True
    return a["mean"] > b["mean"] if study.goal == "max" else a["mean"] < b["mean"]


def best_rows(study, rows):
    """Per (method, column): the sweep point with the best mean metric."""
    best = {}
    for r in rows:
        key = (r["method"],) + column(r)
        if key not in best or better(study, r, best[key]):
            best[key] = r
    return [best[k] for k in sorted(best, key=lambda k: (column_order(study, k[1:]),
                                                          list(study.methods).index(k[0])))]


# ---------------------------------------------------------------------------------------------
# Report


def machine():
    cpu, flags = "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and cpu == "?":
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    # The model name is often just "AMD EPYC": the vector width says which kernels ran.
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
    cpu += f" ({isa})" if isa else ""
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {mem}, {platform.system()} {platform.release()}"


def trainer_commit(trainer):
    """The commit `trainer --version` names, or None (no such binary, or one without --version)."""
    try:
        out = subprocess.run([trainer, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"built from commit (\S+)", out)
    if not m or m.group(1) == "unknown":
        return None
    sha = m.group(1)
    return sha.replace("+changes", " (built with uncommitted changes)")


def commit():
    try:
        sha = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                      stderr=subprocess.DEVNULL).strip()
        # Changes to reports and study files do not change what a cell runs (its settings are
        # recorded with it); any other uncommitted file is named.
        status = subprocess.check_output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                         text=True, stderr=subprocess.DEVNULL).splitlines()
        dirty = [l[3:] for l in status if not l[3:].startswith(("docs/results/", "studies/"))]
        if not dirty:
            return sha
        return sha + " (with uncommitted changes to " + ", ".join(dirty[:3]) + (" ..." if len(dirty) > 3 else "") + ")"
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def fmt_metric(study, v, sd=None):
    if v is None:
        return "–"
    pct = study.metric.endswith(("top1", "accuracy"))
    if pct:
        s = f"{100 * v:.2f}%"
        return s + (f" ± {100 * sd:.2f}" if sd is not None else "")
    return f"{v:.4f}" + (f" ± {sd:.4f}" if sd is not None else "")


def fmt_spread(study, row):
    """A row's mean ± std over seeds; a single seed has no spread to show."""
    if row["seeds"] == 1 and row["mean"] is not None:
        return fmt_metric(study, row["mean"]) + " (1 seed)"
    return fmt_metric(study, row["mean"], row["std"])


def write_plots(study, rows, best, out_dir, seconds_compare=True):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise StudyError("matplotlib is missing: install Debian's python3-matplotlib "
                         "(tools/setup.sh --train) and run with /usr/bin/python3")
    methods = list(study.methods)
    colors = {m: plt.cm.tab10(i % 10) for i, m in enumerate(methods)}
    label = {m: study.methods[m]["label"] for m in methods}
    scale = 100.0 if study.metric.endswith(("top1", "accuracy")) else 1.0
    ylab = study.metric + (" (%)" if scale == 100 else "")

    # 1. Metric against step, one panel per column (ranks, micro-batches, variant), mean over
    # seeds (band: min-max).
    cols_ = sorted({column(r) for r in best}, key=lambda c: column_order(study, c))
    n = len(cols_)
    ncols = min(3, n)
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(5 * ncols, 3.6 * nrows), squeeze=False)
    for ax, col in zip(axes.flat, cols_):
        for r in best:
            if column(r) != col or not r["records"]:
                continue
            steps = sorted({s for rec in r["records"] for s, _ in rec["evals"]})
            ys = []
            for s in steps:
                vals = [dict(rec["evals"]).get(s) for rec in r["records"]]
                vals = [v for v in vals if v is not None and math.isfinite(v)]
                ys.append((sum(vals) / len(vals), min(vals), max(vals)) if vals else (math.nan,) * 3)
            if not steps:
                continue
            lab = label[r["method"]] + (f" ({r['point_label']})" if r.get("point_label") else "")
            ax.plot(steps, [scale * y[0] for y in ys], color=colors[r["method"]], label=lab, marker=".", ms=3)
            ax.fill_between(steps, [scale * y[1] for y in ys], [scale * y[2] for y in ys],
                            color=colors[r["method"]], alpha=0.15)
        if study.target is not None:
            ax.axhline(scale * study.target, color="grey", lw=0.8, ls="--")
        eps = next(r["examples_per_step"] for r in best if column(r) == col)
        ax.set_title(f"{study.column_label(*col)} ({eps} examples/step)", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(ylab)
        if study.plot_range:
            ax.set_ylim(scale * study.plot_range[0], scale * study.plot_range[1])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(f"{study.name}: {study.metric} against step (mean over seeds, band min-max)")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "curves.png"), dpi=110)
    plt.close(fig)

    # 2. Final metric, 3. steps to target: against examples per step (a line per method and
    # variant), or, when every cell has the same examples per step, as bars per method.
    styles = {v: ls for v, ls in zip(study.variants, ["-", "--", ":", "-."] * 8)}
    hatches = {v: h for v, h in zip(study.variants, ["", "//", "..", "xx"] * 8)}
    one_x = len({r["examples_per_step"] for r in best}) == 1
    panels = [("final_vs_examples.png", "mean", f"final {ylab}", f"final {study.metric} (mean ± std over seeds)")]
    if study.target is not None:
        what = f"{study.metric} {fmt_metric(study, study.target)}"
        panels.append(("steps_to_target.png", "steps_to_target", f"steps to {what}",
                       "steps to target, mean over the k/n seeds that reached it (no bar: none did)" if one_x
                       else "steps to target, mean over the seeds that reached it (x: none did)"))
        if one_x and seconds_compare:
            panels.append(("time_to_target.png", "time_to_target", f"seconds to {what}",
                           "wall time to target, mean over the seeds that reached it"))
    for fname, field, ytitle, title in panels:
        fig, ax = plt.subplots(figsize=(8 if one_x else 7, 4.5))
        val = (lambda r: scale * r["mean"] if r["mean"] is not None else None) if field == "mean" else \
            (lambda r, f=field: r[f])
        if one_x:
            width = 0.8 / len(study.variants)
            for j, v in enumerate(study.variants):
                for i, m in enumerate(methods):
                    r = next((x for x in best if x["method"] == m and x.get("variant", "") == v), None)
                    if r is None or val(r) is None:
                        continue
                    err = scale * (r["std"] or 0) if field == "mean" else None
                    x = i + (j - (len(study.variants) - 1) / 2) * width
                    ax.bar(x, val(r), width, yerr=err,
                           color=colors[m], hatch=hatches[v], edgecolor="black", capsize=3,
                           label=study.variants[v]["label"] if i == 0 and len(study.variants) > 1 else None)
                    if field != "mean":  # a mean over the seeds that reached the target: say how many
                        ax.annotate(f"{r['reached']}/{r['seeds']}", (x, val(r)), ha="center", va="bottom",
                                    fontsize=8, xytext=(0, 2), textcoords="offset points")
            ax.set_xticks(range(len(methods)), [label[m] for m in methods], rotation=20, ha="right", fontsize=8)
            if field == "mean" and study.plot_range:
                ax.set_ylim(scale * study.plot_range[0], scale * study.plot_range[1])
        else:
            for v in study.variants:
                for m in methods:
                    pts = sorted((r["examples_per_step"], r) for r in best
                                 if r["method"] == m and r.get("variant", "") == v)
                    got = [(x, r) for x, r in pts if val(r) is not None]
                    lab = label[m] + (f" [{study.variants[v]['label']}]" if len(study.variants) > 1 else "")
                    if field == "mean":
                        ax.errorbar([x for x, _ in got], [val(r) for _, r in got],
                                    yerr=[scale * (r["std"] or 0) for _, r in got], color=colors[m],
                                    ls=styles[v], label=lab, marker="o", capsize=3)
                        if study.plot_range:  # means below the zoomed axis: a triangle on its floor
                            lo = scale * min(study.plot_range)
                            off = [x for x, r in got if val(r) < lo]
                            ax.plot(off, [lo] * len(off), "v", color=colors[m], ms=10, clip_on=False)
                    else:
                        ax.plot([x for x, _ in got], [val(r) for _, r in got], color=colors[m], ls=styles[v],
                                label=lab, marker="o")
                        miss = [x for x, r in pts if val(r) is None]
                        if miss and got:
                            ax.plot(miss, [max(val(r) for _, r in got)] * len(miss), "x", color=colors[m], ms=9)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("examples per step (ranks x micro-batches x batch per rank)")
            if field != "mean":
                ax.set_yscale("log")
            elif study.plot_range:
                ax.set_ylim(scale * study.plot_range[0], scale * study.plot_range[1])
                title += "; ▼ mean below the axis"
        ax.set_ylabel(ytitle)
        ax.set_title(f"{study.name}: {title}", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, fname), dpi=110)
        plt.close(fig)


def write_report(study, records, out_dir, argv, total_wall, planned):
    os.makedirs(out_dir, exist_ok=True)
    rows = aggregate(study, records)
    for r in rows:
        r["point_label"] = ", ".join(f"{k.split('.')[-1]} {_fmt_value(v)}" for k, v in r["point"].items())
    best = best_rows(study, rows)
    # Each record knows where it ran: cells run now carry this machine and commit, cells taken
    # from an earlier report's cells.json carry theirs.
    here = (machine(), commit())
    for r in records:
        r.setdefault("machine", here[0])
        r.setdefault("commit", here[1])
    # Wall seconds compare methods only when every cell ran on the same CPU model.
    cpus = sorted({r["machine"].split(", ")[0] for r in records})
    seconds_compare = len(cpus) <= 1
    if not seconds_compare:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(out_dir, "time_to_target.png"))  # an earlier report's, now misleading
    write_plots(study, rows, best, out_dir, seconds_compare)

    L = []
    L.append(f"# Study `{study.name}`\n")
    if study.question:
        L.append(study.question + "\n")
    L.append("## How it was made\n")
    L.append(f"- Regenerate: `/usr/bin/python3 tools/study.py {os.path.relpath(study.path, ROOT)}` "
             f"(finished cells are cached in `runs/studies/{study.name}/`; `--report-only` redraws this "
             f"report from them; `cells.json` here holds every cell's settings, status and eval curve, and a "
             f"fresh clone reuses its cells instead of rerunning them).")
    L.append(f"- Base config `{study.base}`; budget {study.budget} {study.budget_key} per run; seeds "
             f"{', '.join(map(str, study.seeds))}; metric `{study.metric}` ({study.goal}"
             + (f", target {fmt_metric(study, study.target)}" if study.target is not None else "")
             + (f", diverged if {'≤' if study.goal == 'max' else '≥'} {fmt_metric(study, study.diverged)}"
                if study.diverged is not None else "") + ").")
    if study.common:
        L.append("- Common overrides: " + ", ".join(f"`{k}: {_fmt_value(v)}`" for k, v in study.common.items()) + ".")
    origins = {}
    for r in records:
        origins[(r["machine"], r["commit"])] = origins.get((r["machine"], r["commit"]), 0) + 1
    if len(origins) == 1:
        (m, c), = origins
        L.append(f"- Machine: {m}.")
        L.append(f"- Commit: {c}; report written {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}.")
    else:
        L.append(f"- Cells ran on several machines/commits; report written "
                 f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}:")
        for (m, c), n in sorted(origins.items(), key=lambda kv: -kv[1]):
            L.append(f"  - {n} cell{'s' if n != 1 else ''}: {m}, commit {c}")
    done = [r for r in records if r["status"] != "failed"]
    L.append(f"- Cells: {len(done)} of {planned} finished; compute time of the finished runs "
             f"{fmt_time(sum(r['wall_s'] for r in done))}"
             + (f" (this invocation: {fmt_time(total_wall)})" if total_wall else "") + ".")
    L.append("- Ranks run oversubscribed on this machine (`mpirun --oversubscribe --mca "
             "mpi_yield_when_idle 1`): wall times compare methods at one rank count, not machines.\n")
    L.append("Methods:\n")
    for m, spec in study.methods.items():
        sets = ", ".join(f"`{k}: {_fmt_value(v)}`" for k, v in spec["set"].items())
        sweep = "; sweep " + ", ".join(f"`{k}` ∈ {{{', '.join(_fmt_value(x) for x in v)}}}"
                                       for k, v in spec["sweep"].items()) + \
                " (the best mean per rank count is kept)" if spec["sweep"] else ""
        seeds = f"; seed{'s' if len(spec['seeds']) > 1 else ''} {', '.join(map(str, spec['seeds']))} only" \
            if spec["seeds"] != study.seeds else ""
        L.append(f"- **{spec['label']}** (`{m}`): {sets or 'the base config'}{sweep}{seeds}")
    L.append("")

    # Headlines: final metric (and time to target), method x column.
    cols_ = sorted({column(r) for r in best}, key=lambda c: column_order(study, c))
    head = ["method"] + [study.column_label(*c) for c in cols_]

    def table(title, cell_text):
        L.append(title + "\n")
        L.append("| " + " | ".join(head) + " |")
        L.append("|" + "---|" * len(head))
        for m in study.methods:
            cells = []
            for c in cols_:
                r = next((x for x in best if x["method"] == m and column(x) == c), None)
                cells.append("–" if r is None else cell_text(r))
            L.append(f"| {study.methods[m]['label']} | " + " | ".join(cells) + " |")
        L.append("")

    def final_text(r):
        if r["mean"] is None:
            return "–"
        s = fmt_spread(study, r) + (" †" if r["diverged"] else "")
        return s + (f" ({r['point_label']})" if r["point_label"] else "")

    table(f"## Final {study.metric} (mean ± std over seeds; † = some seeds diverged)", final_text)
    if study.target is not None:
        def to_target(r):
            if r["steps_to_target"] is None:
                return "–"
            secs = f", {r['time_to_target']:.0f} s" if seconds_compare and r["time_to_target"] is not None else ""
            return f"{r['steps_to_target']:.0f} steps{secs} ({r['reached']}/{r['seeds']})"
        table(f"## Steps{' and wall seconds' if seconds_compare else ''} to {study.metric} "
              f"{fmt_metric(study, study.target)} (mean over the seeds that reached it; k/n = seeds that did)",
              to_target)
        if not seconds_compare:
            L.append(f"Wall seconds are left out of this table and its plot: the cells ran on {len(cpus)} CPU "
                     f"models ({'; '.join(cpus)}), so seconds would compare machines, not methods.\n")
    L.append("![final metric](final_vs_examples.png)\n")
    if study.target is not None:
        L.append("![steps to target](steps_to_target.png)\n")
        if os.path.isfile(os.path.join(out_dir, "time_to_target.png")):
            L.append("![time to target](time_to_target.png)\n")
    L.append("![curves](curves.png)\n")
    if study.findings:
        L.append("## Findings\n")
        L.append(study.findings + "\n")

    L.append("## Every cell\n")
    L.append("One row per method, sweep point and column. Steps to target: mean over the seeds "
             "that reached it (first evaluation at or past the target); examples to target = steps × "
             "examples per step; time to target: the trainer's wall seconds at that evaluation (mean over "
             "the same seeds). Wall: mean seconds per run, mpirun start-up included"
             + ("; the cells ran on several CPU models, so compare seconds only between rows that ran on one"
                if not seconds_compare else "") + ".\n")
    L.append("| method | sweep | ranks | examples/step | seeds | final | diverged | reached | steps to target | "
             "examples to target | time to target s | wall s |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s2t = f"{r['steps_to_target']:.0f}" if r["steps_to_target"] is not None else "–"
        e2t = f"{r['steps_to_target'] * r['examples_per_step']:.0f}" if r["steps_to_target"] is not None else "–"
        t2t = f"{r['time_to_target']:.1f}" if r["time_to_target"] is not None else "–"
        wall = f"{r['wall_s']:.0f}" if r["wall_s"] is not None else "–"
        ranks = f"{r['ranks']}" + (f"×{r['micro_batches']}" if r["micro_batches"] > 1 else "")
        if len(study.variants) > 1:
            ranks += f", {study.variants[r['variant']]['label']}" if r["variant"] in study.variants else f", {r['variant']}"
        seeds = f"{r['seeds']}" + (f" (+{r['failed']} failed)" if r["failed"] else "")
        L.append(f"| {study.methods[r['method']]['label']} | {r['point_label'] or '–'} | {ranks} "
                 f"| {r['examples_per_step']} | {seeds} | {fmt_spread(study, r)} "
                 f"| {r['diverged']} | {r['reached']}/{r['seeds']} | {s2t} | {e2t} | {t2t} | {wall} |")
    failed = [r for r in records if r["status"] == "failed"]
    if failed:
        L.append("\n## Failed cells (not counted above)\n")
        for r in failed:
            L.append(f"- `{r['name']}`: {r['reason']}")
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    with open(os.path.join(out_dir, "cells.json"), "w") as f:
        json.dump({"study": study.name, "metric": study.metric, "cells": sorted(records, key=lambda r: r["name"])},
                  f, indent=1)
    return rows, best


# ---------------------------------------------------------------------------------------------
# Main


def parse_only(only):
    """--only method=a,b --only ranks=4 -> {'method': {'a','b'}, 'ranks': {'4'}}"""
    out = {}
    for o in only:
        if "=" not in o:
            raise StudyError(f"--only {o}: expected KEY=V1,V2 with KEY one of method, ranks, micro_batches, "
                             "variant, seed")
        k, v = o.split("=", 1)
        if k not in ("method", "ranks", "micro_batches", "variant", "seed"):
            raise StudyError(f"--only {o}: unknown key '{k}'; known: method, ranks, micro_batches, variant, seed")
        out.setdefault(k, set()).update(x.strip() for x in v.split(","))
    return out


def selected(cell, only):
    vals = {"method": cell.method, "ranks": str(cell.ranks), "micro_batches": str(cell.mb), "variant": cell.variant,
            "seed": str(cell.seed)}
    return all(vals[k] in v for k, v in only.items())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("study", help="study file (studies/*.yaml)")
    ap.add_argument("--runs", help="where cells run (default runs/studies/<study>)")
    ap.add_argument("--results", help="where the report goes (default docs/results/<study>)")
    ap.add_argument("--trainer", default=os.path.join(ROOT, "build", "bin", "trainer"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--only", action="append", default=[], help="KEY=V1,V2: run only these cells "
                    "(method, ranks, micro_batches, variant, seed); the report covers every cached cell")
    ap.add_argument("--dry-run", action="store_true", help="list the cells and which are cached")
    ap.add_argument("--report-only", action="store_true", help="write the report from cached cells")
    ap.add_argument("--no-build", action="store_true", help="do not build the trainer first")
    args = ap.parse_args(argv)
    try:
        study = Study(args.study)
        only = parse_only(args.only)
        runs = args.runs or os.path.join(ROOT, "runs", "studies", study.name)
        results = args.results or os.path.join(ROOT, "docs", "results", study.name)
        cells = study.cells()
        names = [c.name for c in cells]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise StudyError(f"study {study.path}: two cells share the name {sorted(dup)[0]}; give methods distinct names")
    except StudyError as e:
        print(f"study.py: {e}", file=sys.stderr)
        return 2

    folder = {c.name: os.path.join(runs, f"{c.name}-{c.hash}") for c in cells}
    cached = {c.name: load_cached(folder[c.name], c) for c in cells}
    # A fresh clone has no runs/ but has the committed report: its cells.json records count as
    # finished cells when their settings hash matches and no run folder says otherwise (an
    # unfinished attempt reruns), so a study can be extended or its findings rewritten without
    # rerunning what is already measured.
    published = load_published(os.path.join(results, "cells.json"))
    from_report = 0
    for c in cells:
        if cached[c.name] is None and c.hash in published and not os.path.exists(folder[c.name]):
            cached[c.name] = {**published[c.hash], **identity(c)}
            from_report += 1
    if from_report:
        print(f"study.py: {from_report} finished cell(s) taken from {os.path.relpath(results, ROOT)}/cells.json")
    todo = [c for c in cells if cached[c.name] is None and selected(c, only)]
    print(f"study.py: {study.name}: {len(cells)} cells ({len(cells) - sum(v is None for v in cached.values())} "
          f"cached, {len(todo)} to run); runs in {os.path.relpath(runs, ROOT)}")
    if args.dry_run:
        for c in cells:
            state = "cached" if cached[c.name] else ("to run" if c in todo else "not selected")
            print(f"  {c.name:40s} {c.hash}  {state:12s} {' '.join(c.trainer_sets())}")
        return 0

    # The commit the trainer was built from, recorded with every cell of this invocation (HEAD
    # may move while cells run; the binary does not): the binary says which (`trainer
    # --version`); HEAD now only for a trainer too old to say.
    args.build_commit = None
    if todo and not args.report_only:
        if not args.no_build:
            subprocess.check_call(["cmake", "-S", ROOT, "-B", os.path.join(ROOT, "build"),
                                   "-DCMAKE_BUILD_TYPE=Release"], stdout=subprocess.DEVNULL)
            subprocess.check_call(["cmake", "--build", os.path.join(ROOT, "build"), "-j", str(os.cpu_count()),
                                   "--target", "trainer"], stdout=subprocess.DEVNULL)
        args.build_commit = trainer_commit(args.trainer) or commit()
        if study.fetch:
            subprocess.check_call(["bash", os.path.join(ROOT, "tools", "fetch_data.sh")] + study.fetch)
        if not os.access(args.trainer, os.X_OK):
            print(f"study.py: trainer {args.trainer} not found; build it (cmake --build build --target trainer)",
                  file=sys.stderr)
            return 2
    start = time.time()
    eta = Eta()
    failures = 0
    for i, c in enumerate([] if args.report_only else todo):
        t0 = time.time()
        print(f"[{i + 1}/{len(todo)}] {c.name} ...", end="", flush=True)
        rec = run_cell(c, args, folder[c.name])
        eta.add(c.ranks, time.time() - t0)
        if rec["status"] == "failed":
            failures += 1
        else:
            cached[c.name] = rec
        rem = eta.remaining(todo[i + 1:])
        print(f" {rec['status']}, {study.metric} {fmt_metric(study, rec['final'])}, {fmt_time(rec['wall_s'])}"
              f" | elapsed {fmt_time(time.time() - start)}" + (f", ETA {fmt_time(rem)}" if rem is not None else "")
              + (f"\n    {rec['reason']}\n    log: {os.path.join(folder[c.name], 'log.txt')}"
                 if rec["status"] == "failed" else ""), flush=True)
        if rec["status"] == "failed":
            cached.setdefault("__failed__", [])
            cached["__failed__"].append(rec)
    records = [v for k, v in cached.items() if k != "__failed__" and v] + cached.get("__failed__", [])
    if not records:
        print("study.py: no finished cells yet: nothing to report")
        return 1 if failures else 0
    try:
        write_report(study, records, results, argv, time.time() - start if todo else 0, len(cells))
    except StudyError as e:
        print(f"study.py: {e}", file=sys.stderr)
        return 2
    print(f"study.py: report {os.path.relpath(os.path.join(results, 'report.md'), ROOT)} "
          f"({len([r for r in records if r['status'] != 'failed'])}/{len(cells)} cells)")
    if failures:
        print(f"study.py: {failures} cell(s) failed; see the report's 'Failed cells' and their logs", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
