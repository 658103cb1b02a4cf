"""The study file: reading and checking it (Study), its grid of cells with their resolved
overrides, names and settings hashes (Cell), the report's columns, and how values are written."""
import hashlib
import itertools
import json
import math
import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPR_NAMES = ("ranks", "micro_batches", "batch_per_rank", "examples_per_step", "steps_per_epoch",
              "epochs", "total_steps")


class StudyError(Exception):
    """A bad study file or command line; the message names the file and key."""


def _flat(d, prefix="", where=None):
    """{'a': {'b': 1}} -> {'a.b': 1}; dotted keys stay as they are. `where` ("study FILE: methods.x.set"):
    d must be a mapping (None is an empty one), else StudyError naming it."""
    if where is not None and d is not None and not isinstance(d, dict):
        raise StudyError(f"{where}: must be a mapping of keys to values (e.g. {{optimizer.lr: 0.1}}), "
                         f"got {d!r}")
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def is_count(x):
    """A whole number >= 1 as YAML gives it (true and false are bools, which Python counts as ints)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


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
            "resume_cells", "cut_off", "bracket"}

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
        self.base_path = self.base if os.path.isabs(self.base) else os.path.join(ROOT, self.base)
        try:
            with open(self.base_path) as f:
                self.base_cfg = yaml.safe_load(f) or {}
        except OSError as e:
            raise StudyError(f"{where}: base config {self.base}: cannot read ({e.strerror})")
        except yaml.YAMLError as e:
            raise StudyError(f"{where}: base config {self.base}: not valid YAML: {e}")
        if not isinstance(self.base_cfg, dict):
            raise StudyError(f"{where}: base config {self.base}: must be a mapping of sections (model, data, "
                             f"train, ...), got {type(self.base_cfg).__name__}")
        self.question = str(doc.get("question", "")).strip()
        self.findings = self._findings(doc)
        def str_list(key, example):
            v = doc.get(key, [])
            if not isinstance(v, list) or not all(isinstance(x, (str, int, float)) and not isinstance(x, bool)
                                                  for x in v):
                raise StudyError(f"{where}: '{key}' must be a list (e.g. {example}), got {v!r}")
            return [str(x) for x in v]
        self.fetch = str_list("fetch", "[mnist]")
        self.trainer_args = str_list("trainer_args", '["--threads", 2]')
        self.resume_cells = doc.get("resume_cells", False)
        if not isinstance(self.resume_cells, bool):
            raise StudyError(f"{where}: resume_cells must be true or false, got {self.resume_cells!r}")

        budget = need("budget", dict)
        value = next(iter(budget.values())) if len(budget) == 1 else None
        expr = set(budget) == {"steps"} and isinstance(value, str) and value.startswith("=")
        if set(budget) not in ({"epochs"}, {"steps"}) or not (expr or is_count(value)):
            raise StudyError(f"{where}: budget must be {{epochs: N}} or {{steps: N}} with N >= 1, or {{steps: "
                             f"\"=EXPR\"}} over ranks, micro_batches, batch_per_rank, examples_per_step; got {budget!r}")
        self.budget_key, self.budget = next(iter(budget.items()))

        metric = need("metric", dict)
        self.metric = metric.get("name")
        self.goal = metric.get("goal", "max")
        self.target = metric.get("target")
        self.diverged = metric.get("diverged")
        self.chance = metric.get("chance")
        self.plot_range = metric.get("plot_range")
        # The figure choices are made on (the validation split's, e.g. val_top1; same goal): the
        # best sweep point per method and column is the best mean of it, and the test figure
        # (name) is reported for the chosen points only. None: choices on the test figure.
        self.select = metric.get("select")
        if self.select is not None and (not isinstance(self.select, str) or self.select == self.metric):
            raise StudyError(f"{where}: metric.select must name the validation figure choices are made on "
                             f"(e.g. val_top1, with data.validation_size in set), not the test figure, "
                             f"got {self.select!r}")
        # What a choice minimises or maximises: the final figure (default), or the steps it took
        # to reach the target (steps: for steps-to-target studies, e.g. with train.stop_at).
        self.choose_by = metric.get("choose_by", "final")
        if self.choose_by not in ("final", "steps") or self.choose_by == "steps" and self.target is None:
            raise StudyError(f"{where}: metric.choose_by must be final (the best final figure) or steps (the "
                             f"fewest steps to metric.target, which it needs), got {self.choose_by!r}")
        if self.plot_range is not None and not (isinstance(self.plot_range, list) and len(self.plot_range) == 2
                                                and all(isinstance(x, (int, float)) for x in self.plot_range)):
            raise StudyError(f"{where}: metric.plot_range must be [low, high], got {self.plot_range!r}")
        bad = sorted(set(metric) - {"name", "goal", "target", "diverged", "chance", "plot_range", "select",
                                    "choose_by"})
        if bad or not isinstance(self.metric, str) or self.goal not in ("max", "min") or \
                not all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool)
                        for v in (self.target, self.diverged, self.chance)):
            raise StudyError(f"{where}: metric must be {{name: eval_top1, goal: max|min, target: X, "
                             f"diverged: X, chance: X, select: val_top1}} (numbers but select; only name "
                             f"is required), got {metric!r}")

        self.train_size = doc.get("train_size")
        if self.train_size is not None and not is_count(self.train_size):
            raise StudyError(f"{where}: train_size must be a positive integer (examples in the training set)")

        def int_list(key, default):
            v = doc.get(key, default)
            if not isinstance(v, list) or not v or not all(is_count(x) for x in v):
                raise StudyError(f"{where}: '{key}' must be a non-empty list of positive integers, got {v!r}")
            return v

        self.ranks = int_list("ranks", None) if "ranks" in doc else need("ranks", list)
        self.micro_batches = int_list("micro_batches", [1])
        self.seeds = int_list("seeds", [1])
        self.common = _flat(doc.get("set", {}), where=f"{where}: set")
        for k in ("train.epochs", "train.steps", "train.seed", "train.micro_batches", "train.examples_per_step",
                  "output.dir"):
            if k in self.common:
                raise StudyError(f"{where}: set.{k}: the runner sets it (budget, seeds, micro_batches, --runs)")

        methods = need("methods", dict)
        if not methods:
            raise StudyError(f"{where}: methods is empty")
        self.methods = {}
        for mname, m in methods.items():
            mw = f"{where}: methods.{mname}"
            if not isinstance(m, dict) or not set(m) <= {"set", "sweep", "label", "seeds", "confirm_seeds",
                                                          "baseline"}:
                raise StudyError(f"{mw}: must be a mapping with 'set' (overrides), optional 'sweep' "
                                 f"(key: [values]), 'seeds', 'confirm_seeds', 'baseline' and 'label', got {m!r}")
            seeds = m.get("seeds", self.seeds)
            if not isinstance(seeds, list) or not seeds or not all(is_count(x) for x in seeds):
                raise StudyError(f"{mw}.seeds: must be a non-empty list of positive integers, got {seeds!r}")
            sweep = _flat(m.get("sweep", {}), where=f"{mw}.sweep")
            for k, vals in sweep.items():
                if not isinstance(vals, list) or not vals:
                    raise StudyError(f"{mw}.sweep.{k}: must be a non-empty list of values")
            # confirm_seeds: once a column's sweep has run at `seeds`, its chosen point runs these
            # seeds too; the choice stays the one made on `seeds` (cells planned from results).
            confirm = m.get("confirm_seeds", [])
            if not isinstance(confirm, list) or not all(is_count(x) for x in confirm):
                raise StudyError(f"{mw}.confirm_seeds: must be a list of positive integers, got {confirm!r}")
            if confirm and math.prod(len(v) for v in sweep.values()) < 2:
                raise StudyError(f"{mw}.confirm_seeds: the method has no sweep to choose a point from; give "
                                 f"its seeds as 'seeds'")
            if set(confirm) & set(seeds):
                raise StudyError(f"{mw}.confirm_seeds: {sorted(set(confirm) & set(seeds))} already among its "
                                 f"seeds {seeds}; give the chosen point's other seeds")
            self.methods[mname] = {"set": _flat(m.get("set", {}), where=f"{mw}.set"), "sweep": sweep, "seeds": seeds,
                                   "confirm_seeds": confirm, "label": str(m.get("label", mname)),
                                   "baseline": m.get("baseline")}
        variants = doc.get("variants", {"": {}})
        if not isinstance(variants, dict) or not variants:
            raise StudyError(f"{where}: variants must be a mapping name -> {{label, set}}, got {variants!r}")
        self.variants = {}
        for vname, v in variants.items():
            vw = f"{where}: variants.{vname}"
            if not isinstance(v, dict) or not set(v) <= {"set", "label", "micro_batches"}:
                raise StudyError(f"{vw}: must be a mapping with 'set' (overrides) and optional 'label' and "
                                 f"'micro_batches' (the study's list for this variant), got {v!r}")
            mbs = v.get("micro_batches", self.micro_batches)
            if not isinstance(mbs, list) or not mbs or not all(is_count(x) for x in mbs):
                raise StudyError(f"{vw}.micro_batches: must be a non-empty list of positive integers, got {mbs!r}")
            self.variants[str(vname)] = {"set": _flat(v.get("set", {}), where=f"{vw}.set"), "label": str(v.get("label", vname)),
                                         "micro_batches": mbs}
        self.baseline = doc.get("baseline")
        if self.baseline is not None and self.baseline not in self.methods:
            raise StudyError(f"{where}: baseline '{self.baseline}' is not one of the methods")
        # A method's own baseline (e.g. AdamW + Adasum against AdamW averaging where the study's
        # is LAMB averaging) replaces the study's for that method's comparisons.
        for mname, m in self.methods.items():
            if m["baseline"] is None:
                m["baseline"] = self.baseline
            elif m["baseline"] not in self.methods:
                raise StudyError(f"{where}: methods.{mname}.baseline: '{m['baseline']}' is not one of the "
                                 f"methods ({', '.join(self.methods)})")
        # Branch and bound over a steps-to-target sweep: a cell stops (train.stop_at.give_up_at_step)
        # once it has run as many steps as the fewest any other point of its method, column and seed
        # needed to reach the target: it can no longer be chosen. Sound only when each point has one
        # seed (with several, "reached by more seeds" comes before "fewer steps").
        self.cut_off = doc.get("cut_off", False)
        if not isinstance(self.cut_off, bool):
            raise StudyError(f"{where}: cut_off must be true or false, got {self.cut_off!r}")
        if self.cut_off:
            if self.choose_by != "steps":
                raise StudyError(f"{where}: cut_off needs metric.choose_by: steps (it stops the points that can "
                                 f"no longer be the fastest to metric.target)")
            for mname, m in self.methods.items():
                n_points = math.prod(len(v) for v in m["sweep"].values())
                if n_points > 1 and len(m["seeds"]) > 1:
                    raise StudyError(f"{where}: cut_off: methods.{mname} sweeps {n_points} points with "
                                     f"{len(m['seeds'])} seeds; cutting a seed short could change which point "
                                     f"reached the target most often. Sweep at one seed and give the chosen "
                                     f"point's other seeds as methods.{mname}.confirm_seeds")
            if "train.stop_at.metric" not in self.common:
                raise StudyError(f"{where}: cut_off needs train.stop_at in set (the trainer's deadline, "
                                 f"give_up_at_step, belongs to it), e.g. train.stop_at: {{metric: "
                                 f"{self.select or self.metric}, below: {self.target}}}")

        # A sweep searched as a bracket: each column's points run outwards from the previous size's
        # choice (the next size's for the smallest), and only while they neighbour the best point so
        # far (one swept key one value away; the figure assumed unimodal along each key's values); a
        # column is finished once its choice's neighbours have run.
        self.bracket = doc.get("bracket", False)
        if not isinstance(self.bracket, bool):
            raise StudyError(f"{where}: bracket must be true or false, got {self.bracket!r}")
        if self.bracket:
            for mname, m in self.methods.items():
                for k, vals in m["sweep"].items():
                    ordered = all(isinstance(v, (int, float)) for v in vals) and (
                        vals == sorted(vals) or vals == sorted(vals, reverse=True)) and len(set(vals)) == len(vals)
                    if not ordered:
                        raise StudyError(f"{where}: bracket: methods.{mname}.sweep.{k}: {vals} must be distinct "
                                         f"numbers in order (a value's neighbours in the list are the next ones "
                                         f"tried)")

    @staticmethod
    def _findings(doc):
        return str(doc.get("findings", "")).strip()

    def reload_findings(self):
        """Re-reads the findings from the study file, which may have been edited while the runner
        ran (each report written after that shows them); the other keys stay as read at the start,
        since they made the cells. Returns None, or why the file could not be read now (the
        findings read before are kept)."""
        try:
            with open(self.path) as f:
                doc = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as e:
            return f"study {self.path}: findings not reloaded ({e}); the report keeps those read before"
        if not isinstance(doc, dict):
            return f"study {self.path}: findings not reloaded (not a mapping now); the report keeps those read before"
        self.findings = self._findings(doc)
        return None

    # ---- grid ---------------------------------------------------------------------------------

    def batch_per_rank(self, overrides):
        return int(overrides.get("train.batch_per_rank", _get(self.base_cfg, "train.batch_per_rank", 32)))

    def cells(self):
        """Every cell of the grid, in run order: small rank counts first (quick feedback)."""
        out = []
        all_mbs = sorted({mb for v in self.variants.values() for mb in v["micro_batches"]})
        for ranks, mb, variant, (mname, m) in itertools.product(self.ranks, all_mbs, self.variants,
                                                                self.methods.items()):
            if mb not in self.variants[variant]["micro_batches"]:
                continue
            for point in self.points(mname):
                for seed in m["seeds"]:
                    cell = Cell(self, mname, ranks, mb, seed, point, variant)
                    if not cell.unfit:
                        out.append(cell)
        return out

    def points(self, method):
        """Every point of `method`'s sweep ({key: value}; one empty point without a sweep)."""
        sweep = self.methods[method]["sweep"]
        return [dict(zip(sweep, values)) for values in itertools.product(*sweep.values())]

    def sweep_cells(self, method, col):
        """One cell (the first seed) per sweep point of `method` in column col = (ranks,
        micro_batches, variant), unfit ones included."""
        seed = self.methods[method]["seeds"][0]
        return [Cell(self, method, col[0], col[1], seed, point, col[2]) for point in self.points(method)]

    def column_points(self, method, col):
        """The sweep points of `method` that fit column col: all but those whose run the trainer
        would refuse (Cell.unfit)."""
        return [c.point for c in self.sweep_cells(method, col) if not c.unfit]

    def unfit_cells(self):
        """The grid points left out because they do not fit their column's run (one cell each)."""
        return [c for col in self.columns() for m in self.methods for c in self.sweep_cells(m, col) if c.unfit]

    def columns(self):
        """Every (ranks, micro_batches, variant) the grid runs."""
        return [(ranks, mb, v) for ranks in self.ranks for v, spec in self.variants.items()
                for mb in spec["micro_batches"]]

    def planned(self):
        """How many cells the study plans: the grid, and each column's confirm_seeds cells."""
        return len(self.cells()) + len(self.columns()) * sum(len(m["confirm_seeds"]) for m in self.methods.values())

    def confirm_cells(self, chosen):
        """The confirm_seeds cells of the chosen points, {(method, ranks, mb, variant): point}: one
        per confirm seed, the same settings as the point's sweep cell but the seed."""
        return [Cell(self, method, ranks, mb, seed, point, variant)
                for (method, ranks, mb, variant), point in chosen.items()
                for seed in self.methods[method]["confirm_seeds"]]

    def variant_batch(self, variant):
        """The batch per rank of a variant's cells (the base config's where it sets none)."""
        return self.batch_per_rank(self.variants[variant]["set"] if variant in self.variants else {})

    def column_label(self, ranks, mb, variant, size=False):
        """A report column: ranks, or ranks x micro-batches x batch per rank and the examples a step
        that makes where the columns differ in those (or `size`), and the variant's label when there
        are several."""
        batch = self.variant_batch(variant)
        shapes = {(m, self.variant_batch(v)) for _, m, v in self.columns()}
        s = (f"{ranks}×{mb}×{batch} = {ranks * mb * batch:,} a step"
             if size or mb > 1 or len(shapes) > 1 else f"{ranks} ranks")
        return s + (f", {self.variants[variant]['label']}" if len(self.variants) > 1 else "")


def fmt_value(v):
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def point_label(point):
    """A sweep point as the report writes it: {'optimizer.lr': 0.1} -> 'lr 0.1'."""
    return ", ".join(f"{k.split('.')[-1]} {fmt_value(v)}" for k, v in point.items())


class Cell:
    def __init__(self, study, method, ranks, micro_batches, seed, point, variant=""):
        self.study, self.method, self.ranks, self.mb, self.seed, self.point, self.variant = \
            study, method, ranks, micro_batches, seed, point, variant
        self.total_steps = None  # the run's length in steps, where the budget and train_size give it
        self.overrides = self._resolve()
        # A point that does not fit this column's run: a warm-up as long as the run leaves no step
        # at the schedule's LR (and the trainer refuses it for a decaying schedule), e.g. warm-up
        # 200 where 64 ranks make a 156-step run. Such a cell is left out of the grid (the report
        # lists it), so a sweep can hold values that fit only its smaller rank counts.
        warmup = self.overrides.get("schedule.warmup_steps")
        self.unfit = (f"schedule.warmup_steps {warmup} is not shorter than the run ({self.total_steps} steps)"
                      if isinstance(warmup, (int, float)) and self.total_steps and warmup >= self.total_steps
                      else None)
        self.examples_per_step = ranks * micro_batches * study.batch_per_rank(self.overrides)
        settings = {"base": study.base_cfg, "overrides": self.overrides, "ranks": ranks,
                    "trainer_args": study.trainer_args}
        self.hash = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:10]
        # The sweep point as the name spells it ("lr0.02", "adasum_lr_factor2"; several joined by "-").
        self.point_tag = "-".join(f"{k.split('.')[-1]}{fmt_value(v)}" for k, v in point.items())
        sweep = f"-{self.point_tag}" if point else ""
        mb = f"-mb{micro_batches}" if len(study.micro_batches) > 1 or micro_batches != 1 else ""
        self.name = f"{method}{sweep}" + (f"-{variant}" if variant else "") + f"-np{ranks}{mb}-s{seed}"

    def _resolve(self):
        s = self.study
        raw = {}
        raw.update(s.common)
        raw.update(s.variants[self.variant]["set"])
        raw.update(s.methods[self.method]["set"])
        raw.update(self.point)
        raw[f"train.{s.budget_key}"] = s.budget  # its place in the order; an expression's value below
        # A run is either epochs or steps long (the trainer takes one): a base config giving the
        # other length gets it set to 0 (unset), e.g. {steps: N} on a config trained by epochs.
        other = "train.steps" if s.budget_key == "epochs" else "train.epochs"
        if _get(s.base_cfg, other):
            raw[other] = 0
        raw["train.seed"] = self.seed
        raw["train.micro_batches"] = self.mb
        batch = s.batch_per_rank(raw)
        env = {"ranks": self.ranks, "micro_batches": self.mb, "batch_per_rank": batch,
               "examples_per_step": self.ranks * self.mb * batch, "epochs": None, "steps_per_epoch": None,
               "total_steps": None}
        names = {"sqrt": math.sqrt, "log2": math.log2, "max": max, "min": min, "round": round, "int": int,
                 "ceil": math.ceil, "floor": math.floor}
        budget = s.budget
        if isinstance(budget, str):  # {steps: "=EXPR"}: a step budget per cell, e.g. by examples per step
            try:
                budget = eval(budget[1:], {"__builtins__": {}}, {**names, **env})  # noqa: S307 (our own files)
            except Exception as e:  # noqa: BLE001
                raise StudyError(f"study {s.path}: budget.steps: cannot evaluate '{s.budget}' (it may use ranks, "
                                 f"micro_batches, batch_per_rank, examples_per_step): {e}")
            if not isinstance(budget, (int, float)) or budget < 1 or budget != int(budget):
                raise StudyError(f"study {s.path}: budget.steps: '{s.budget}' gives {budget!r} for {self.ranks} "
                                 f"ranks x {self.mb} micro-batches; it must give a whole number >= 1")
            budget = int(budget)
        raw[f"train.{s.budget_key}"] = budget
        if s.train_size:
            spe = s.train_size // self.ranks // batch // self.mb
            env["steps_per_epoch"] = spe
            env["epochs"] = budget if s.budget_key == "epochs" else None
            env["total_steps"] = budget * spe if s.budget_key == "epochs" else budget
        elif s.budget_key == "steps":
            env["total_steps"] = budget
        self.total_steps = env["total_steps"]
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
            return fmt_value(v) if isinstance(v, float) else str(v)
        return [f"{k}={text(v)}" for k, v in sorted(self.overrides.items())]


def column(r):
    """The report column of a record or row: (ranks, micro_batches, variant)."""
    return r["ranks"], r["micro_batches"], r.get("variant", "")


def column_order(study, col):
    """Report order: by ranks, then examples a step (micro-batches x a variant's batch per rank),
    then the variants' order in the study file."""
    ranks, mb, variant = col
    order = list(study.variants).index(variant) if variant in study.variants else len(study.variants)
    return ranks, mb * study.variant_batch(variant), order


def columns(study, rows):
    """The columns the rows fill, in report order."""
    return sorted({column(r) for r in rows}, key=lambda c: column_order(study, c))


def in_percent(study):
    """Whether the metric is shown in percent (an accuracy: *top1, *accuracy)."""
    return study.metric.endswith(("top1", "accuracy"))


def fmt_time(s):
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def fmt_metric(study, v, sd=None):
    if v is None:
        return "–"
    if in_percent(study):
        s = f"{100 * v:.2f}%"
        return s + (f" ± {100 * sd:.2f}" if sd is not None else "")
    return f"{v:.4f}" + (f" ± {sd:.4f}" if sd is not None else "")
