"""The command line: which cells to run (--only), running them with progress and an ETA, then
the report."""
import argparse
import json
import os
import subprocess
import sys
import time

from . import __doc__ as RUNNER_DOC
from .report import (aggregate, best_rows, bracket_needed, confirm_choices, grid_distance, select_steps,
                     write_report)
from .run import (CellBusy, Eta, Progress, busy_message, commit, identity, load_cached, load_published, lock_holder,
                  TrainerStopped, lock_study, run_cell, stale, trainer_identity)
from .spec import ROOT, Study, StudyError, column, fmt_metric, fmt_time, point_label


ONLY_KEYS = ("method", "ranks", "micro_batches", "variant", "seed", "point")


def shown(path):
    """A path as messages name it: relative to the repository inside it, else as it is."""
    path = os.path.abspath(path)
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


def parse_only(only):
    """--only method=a,b --only ranks=4 -> {'method': {'a','b'}, 'ranks': {'4'}}"""
    out = {}
    for o in only:
        if "=" not in o:
            raise StudyError(f"--only {o}: expected KEY=V1,V2 with KEY one of {', '.join(ONLY_KEYS)}")
        k, v = o.split("=", 1)
        if k not in ONLY_KEYS:
            raise StudyError(f"--only {o}: unknown key '{k}'; known: {', '.join(ONLY_KEYS)}")
        out.setdefault(k, set()).update(x.strip() for x in v.split(","))
    return out


def only_values(cell):
    """What --only's keys see of a cell."""
    return {"method": cell.method, "ranks": str(cell.ranks), "micro_batches": str(cell.mb), "variant": cell.variant,
            "seed": str(cell.seed), "point": cell.point_tag}


def selected(cell, only):
    vals = only_values(cell)
    return all(vals[k] in v for k, v in only.items())


def check_only(only, cells):
    """A value of --only that no cell of the study has is a typo, not a choice of no cells."""
    for k, want in only.items():
        known = {only_values(c)[k] for c in cells}
        missing = sorted(want - known)
        if missing:
            raise StudyError(f"--only {k}={','.join(missing)}: no cell of the study has "
                             f"{'this value' if len(missing) == 1 else 'these values'}; known: "
                             f"{', '.join(sorted(known, key=lambda v: (len(v), v)))}")


def cut_off_deadline(study, cell, records):
    """cut_off: (the fewest steps any other point of the cell's method, column and seed took to
    the target on the figure choices are made on, that point's label); None while none has
    reached it. A cell still short of the target by then can no longer be chosen."""
    best = None
    for r in records:
        if r["method"] != cell.method or column(r) != (cell.ranks, cell.mb, cell.variant) or \
                r["seed"] != cell.seed or r["point"] == cell.point:
            continue
        n = select_steps(study, r)
        if n is not None and (best is None or n < best[0]):
            best = (n, point_label(r["point"]))
    return best


def cut_off_order(study, cells, records):
    """cut_off: the cells in run order, each method's points of a column starting from the point
    chosen at the largest smaller size (at the smallest larger one where no smaller size has a
    choice: a size added below the grid) and going outwards through the sweep (nearest first), so
    that the deadline is tight early; the order of columns and methods is kept."""
    chosen = {}
    for row in best_rows(study, aggregate(study, records)):
        if row["select_reached"]:
            chosen.setdefault(row["method"], []).append((row["examples_per_step"], row["point"]))

    def distance(c):
        mine = chosen.get(c.method, [])
        below = [ep for ep in mine if ep[0] < c.examples_per_step]
        above = [ep for ep in mine if ep[0] > c.examples_per_step]
        start = max(below, key=lambda ep: ep[0]) if below else min(above, key=lambda ep: ep[0]) if above else None
        return grid_distance(study, c.method, c.point, start[1]) if start else 0

    group = {}
    for c in cells:
        group.setdefault((c.ranks, c.mb, c.variant, c.method), len(group))
    return sorted(cells, key=lambda c: (group[(c.ranks, c.mb, c.variant, c.method)], distance(c)))


def chosen(study, results, spec):
    """--chosen METHOD@RANKS: the method's chosen sweep point at that rank count in the committed
    report's cells.json, by the study's own rule (the best mean of metric.select, else of the test
    figure). Prints one JSON line: the point, the trainer overrides its first-seed cell ran with
    (`trainer_sets`, for --set), the figure it was chosen on and the test figure over the seeds."""
    method, _, ranks = spec.partition("@")
    if method not in study.methods or not ranks.isdigit():
        raise StudyError(f"--chosen {spec}: give METHOD@RANKS with METHOD one of {', '.join(study.methods)}")
    path = os.path.join(results, "cells.json")
    records = [r for r in load_published(path).values()
               if r["method"] == method and r["ranks"] == int(ranks) and r["status"] in ("ok", "diverged")]
    if not records:
        raise StudyError(f"--chosen {spec}: {shown(path)} has no finished cell of method "
                         f"{method} at {ranks} ranks (ranks studied: {', '.join(map(str, study.ranks))})")
    row = best_rows(study, aggregate(study, records))[0]
    # The trainer overrides of the chosen point's first-seed cell, resolved as the study ran it
    # (its common `set`, the method's, the point; the budget and seed), without output.dir.
    cell = next(c for c in study.cells() if c.method == method and c.ranks == int(ranks)
                and c.point == row["point"] and c.variant == row["variant"] and c.mb == row["micro_batches"])
    print(json.dumps({"study": study.name, "method": method, "ranks": int(ranks), "base": study.base,
                      "point": row["point"], "trainer_sets": cell.trainer_sets(),
                      "chosen_on": study.select or study.metric, "select_mean": row["select_mean"],
                      "metric": study.metric, "mean": row["mean"], "std": row["std"], "seeds": row["seeds"],
                      "diverged": row["diverged"], "cells": os.path.relpath(path, ROOT)}))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=RUNNER_DOC.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=RUNNER_DOC)
    ap.add_argument("study", help="study file (studies/*.yaml)")
    ap.add_argument("--runs", help="where cells run (default runs/studies/<study>)")
    ap.add_argument("--results", help="where the report goes (default docs/results/<study>)")
    ap.add_argument("--trainer", default=os.path.join(ROOT, "build", "bin", "trainer"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the cells train (train.device): cuda puts every rank of a cell on the machine's "
                         "GPU (ranks sharing one GPU through MPI staging). Not a setting of the cell (its hash "
                         "leaves it out, as the CPU model): each cell records its machine and device")
    ap.add_argument("--no-fetch", action="store_true",
                    help="the study's data is in place: do not run tools/fetch_data.sh for its `fetch:` list "
                         "(on a machine with neither its packages nor a registry)")
    ap.add_argument("--only", action="append", default=[], help="KEY=V1,V2: run only these cells "
                    "(method, ranks, micro_batches, variant, seed, point: the sweep point as cell names spell it, e.g. "
                    "lr0.02); the report covers every cached cell")
    ap.add_argument("--dry-run", action="store_true", help="list the cells and which are cached")
    ap.add_argument("--report-only", action="store_true", help="write the report from cached cells")
    ap.add_argument("--no-build", action="store_true", help="do not build the trainer first")
    ap.add_argument("--chosen", metavar="METHOD@RANKS",
                    help="print the method's chosen point at that rank count from the committed cells.json "
                         "(JSON: its overrides and figures) and exit; runs nothing")
    ap.add_argument("--any-trainer", action="store_true",
                    help="count finished cells of any trainer version as finished (by default a cell run by "
                         "another trainer version is stale and runs again; the report names each cell's commit)")
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
        if args.chosen:
            return chosen(study, results, args.chosen)
    except StudyError as e:
        print(f"study.py: {e}", file=sys.stderr)
        return 2

    # One runner at a time on the runs folder and the results folder (a second one would delete
    # the first's cell folders and overwrite its cells.json): held until this invocation ends.
    # --report-only writes the results only; --dry-run writes nothing and takes no lock.
    locks = []
    try:
        if not args.dry_run:
            if not args.report_only:
                locks.append(lock_study(runs, "--runs"))
            locks.append(lock_study(results, "--results"))
        return run_study(args, argv, study, only, runs, results, cells)
    except StudyError as e:
        print(f"study.py: {e}", file=sys.stderr)
        return 2
    finally:
        for fd in locks:
            os.close(fd)


def run_study(args, argv, study, only, runs, results, cells):
    """main's part under the study's locks."""
    # The trainer first: a finished cell counts only for the trainer version that ran it (its
    # code and defaults are part of what the cell measures), so the version decides what runs.
    # The binary says its commit and version (`trainer --version`; HEAD may move while cells
    # run, the binary does not); HEAD only for a trainer too old to say.
    args.build_commit = args.trainer_version = None
    if not args.report_only:
        if not args.no_build and not args.dry_run:
            subprocess.check_call(["cmake", "-S", ROOT, "-B", os.path.join(ROOT, "build"),
                                   "-DCMAKE_BUILD_TYPE=Release"], stdout=subprocess.DEVNULL)
            subprocess.check_call(["cmake", "--build", os.path.join(ROOT, "build"), "-j", str(os.cpu_count()),
                                   "--target", "trainer"], stdout=subprocess.DEVNULL)
        args.build_commit, args.trainer_version = trainer_identity(args.trainer)
        if args.trainer_version is None and os.access(args.trainer, os.X_OK):
            print(f"study.py: warning: {args.trainer} names no version (built before versions); finished "
                  f"cells count whatever trainer ran them", file=sys.stderr)
    version = None if args.any_trainer or args.report_only else args.trainer_version

    folder, cached = {}, {}
    # A fresh clone has no runs/ but has the committed report: its cells.json records count as
    # finished cells when their settings hash matches and no run folder says otherwise (an
    # unfinished attempt reruns), so a study can be extended or its findings rewritten without
    # rerunning what is already measured.
    published = load_published(os.path.join(results, "cells.json"))  # (main says a StudyError)
    from_report = 0

    def load(new_cells):
        nonlocal from_report
        for c in new_cells:
            folder[c.name] = os.path.join(runs, f"{c.name}-{c.hash}")
            cached[c.name] = load_cached(folder[c.name], c)
            if cached[c.name] is None and c.hash in published and not os.path.exists(folder[c.name]):
                cached[c.name] = {**published[c.hash], **identity(c)}
                from_report += 1
    load(cells)

    def finished():
        return [v for k, v in cached.items()
                if k != "__failed__" and v and k not in stale_why and v["status"] in ("ok", "diverged")]

    def confirm_new():
        """The confirm_seeds cells of the points chosen so far that are not in `cells` yet."""
        known = {c.name for c in cells}
        new = [c for c in study.confirm_cells(confirm_choices(study, finished())) if c.name not in known]
        load(new)
        cells.extend(new)
        return new

    # Stale cells (another trainer version) stay in the report until they run again; the
    # confirm_seeds cells follow from the choices the fresh cells make.
    def find_stale():
        why = {c.name: stale(cached[c.name], version) for c in cells if cached[c.name] is not None}
        return {k: v for k, v in why.items() if v}
    stale_why = find_stale()
    if confirm_new():
        stale_why = find_stale()
    if from_report:
        left = len(published) - from_report
        print(f"study.py: {from_report} finished cell(s) taken from {shown(results)}/cells.json"
              + (f" ({left} more there are not cells of this run: seeds of points not chosen yet here (stale cells "
                 f"choose nothing until they rerun; --any-trainer keeps them), or settings the study no longer has)"
                 if left > 0 else ""))
    if stale_why:
        print(f"study.py: {len(stale_why)} finished cell(s) are stale (another trainer version; e.g. "
              f"{next(iter(stale_why.values()))}): they run again when selected; --any-trainer keeps them")
    try:
        check_only(only, cells)  # (after confirm_new: seeds of confirm_seeds are values too)
    except StudyError as e:
        print(f"study.py: {e}", file=sys.stderr)
        return 2
    todo = [c for c in cells if (cached[c.name] is None or c.name in stale_why) and selected(c, only)]
    unneeded = set()
    if study.bracket:  # the points a choice cannot need even now are not counted (nor run)
        unneeded = {c.name for c in todo if not bracket_needed(study, c, finished())}
        todo = [c for c in todo if c.name not in unneeded]
    n_cached = len(cells) - sum(v is None for v in cached.values()) - len(stale_why)
    print(f"study.py: {study.name}: {study.planned()} cells ({n_cached} cached"
          + (f", {len(stale_why)} stale" if stale_why else "") + f", {len(todo) if not args.report_only else 0} "
          f"to run); runs in {shown(runs)}")
    # A cell whose folder a live trainer run holds (an earlier runner's, killed with -9, whose
    # mpirun trains on in its own session): the study stops before running anything, since that
    # run shares the machine (the wall times of cells beside it would not compare) and its folder
    # is neither deleted nor reused (run_cell refuses it too, for the cells planned later).
    busy = {c.name: lock_holder(folder[c.name]) for c in todo if os.path.isdir(folder[c.name])}
    busy = {k: v for k, v in busy.items() if v}
    if args.dry_run:
        for c in cells:
            state = ("stale" if c.name in stale_why else "cached") if cached[c.name] else \
                ("to run" if c in todo else "not needed (bracket)" if c.name in unneeded else "not selected")
            if c.name in busy:
                state = "busy: a live run holds its folder"
            if c.name in stale_why and c not in todo:
                state = "stale, not selected"
            print(f"  {c.name:40s} {c.hash}  {state:12s} {' '.join(c.trainer_sets())}")
        return 0

    if busy and not args.report_only:
        for name, holder in busy.items():
            print(f"study.py: {busy_message(name, folder[name], holder)}", file=sys.stderr)
        print(f"study.py: {len(busy)} cell(s) in use by a live trainer run: nothing run", file=sys.stderr)
        return 2
    if todo and not args.report_only:
        args.build_commit = args.build_commit or commit()
        if study.fetch and not args.no_fetch:
            subprocess.check_call(["bash", os.path.join(ROOT, "tools", "fetch_data.sh")] + study.fetch)
        if not os.access(args.trainer, os.X_OK):
            print(f"study.py: trainer {args.trainer} not found; build it (cmake --build build --target trainer)",
                  file=sys.stderr)
            return 2
    start = time.time()
    eta = Eta()
    failures = 0

    def publish():
        """Writes report.md and cells.json from every finished cell so far: after each cell, so a
        session stopped mid-invocation has its finished cells recorded (runs/ may not survive),
        with the study file's findings as they are now.
        Returns the records, or None when there are none."""
        records = [v for k, v in cached.items() if k != "__failed__" and v] + cached.get("__failed__", [])
        if records:
            why = study.reload_findings()  # findings edited while the cells ran
            if why:
                print(f"study.py: {why}", file=sys.stderr, flush=True)
            write_report(study, records, results, argv, study.planned())
        return records or None

    remaining = [] if args.report_only else list(todo)
    i = 0
    while remaining:
        if study.cut_off or study.bracket:
            remaining = cut_off_order(study, remaining, finished())
        if study.bracket:
            # Only a sweep point next to its column's best so far; the others wait (the best may move).
            c = next((x for x in remaining if bracket_needed(study, x, finished())), None)
            if c is None:
                print(f"study.py: bracket: {len(remaining)} sweep point(s) not needed (past a worse neighbour "
                      f"of their column's choice): not run", flush=True)
                break
            remaining.remove(c)
        else:
            c = remaining.pop(0)
        deadline = cut_off_deadline(study, c, finished()) if study.cut_off else None
        t0 = time.time()
        print(f"[{i + 1}/{len(todo)}] {c.name}" + (f" (cut off at step {deadline[0]}: {deadline[1]} reached "
                                                   f"the target in {deadline[0]})" if deadline else "") + " ...",
              end="", flush=True)
        i += 1
        progress = Progress.of_cell(study, folder[c.name], c.total_steps)
        try:
            rec = run_cell(c, args, folder[c.name], deadline, progress)
        except TrainerStopped:
            if not progress.lines:  # the cell's line is still open: the message goes under it
                print(flush=True)
            raise
        except (CellBusy, OSError) as e:
            # CellBusy: a cell planned after the start (confirm_seeds), stopped as at the start.
            # OSError: its run folder cannot be made or written (a full disk, a read-only --runs):
            # every cell after it would fail the same way, so the study stops.
            if isinstance(e, OSError):
                e = (f"{c.name}: {e.filename or folder[c.name]}: {e.strerror or e} (a full disk or a read-only "
                     f"--runs folder?): the study stops; the cells finished before it are in the report")
            print(f"\nstudy.py: {e}", file=sys.stderr)
            try:
                publish()
            except StudyError as e2:
                print(f"study.py: report not written: {e2}", file=sys.stderr)
            return 2
        eta.add(c.ranks, time.time() - t0)
        if rec["status"] == "failed":
            failures += 1
        else:
            cached[c.name] = rec
            stale_why.pop(c.name, None)
        rem = eta.remaining(remaining)
        print(("    done:" if progress.lines else "")
              + f" {rec['status']}, {study.metric} {fmt_metric(study, rec['final'])}, {fmt_time(rec['wall_s'])}"
              f" | elapsed {fmt_time(time.time() - start)}" + (f", ETA {fmt_time(rem)}" if rem is not None else "")
              + (f"\n    {rec['reason']}\n    log: {os.path.join(folder[c.name], 'log.txt')}"
                 if rec["status"] == "failed" else ""), flush=True)
        if rec["status"] == "failed":
            cached.setdefault("__failed__", [])
            cached["__failed__"].append(rec)
        # A column whose sweep this cell finished: its chosen point's confirm_seeds run next.
        more = [c for c in confirm_new() if cached[c.name] is None and selected(c, only)]
        if more:
            print(f"study.py: {len(more)} confirm_seeds cell(s) of a point just chosen: "
                  + ", ".join(c.name for c in more), flush=True)
            todo.extend(more)
            remaining.extend(more)
        if remaining:  # the last cell's report is the final one, below
            try:
                publish()
            except StudyError as e:  # the cells go on; the final report says it again
                print(f"study.py: report not written: {e}", file=sys.stderr, flush=True)
    try:
        records = publish()
    except StudyError as e:
        print(f"study.py: {e}", file=sys.stderr)
        return 2
    if not records:
        if args.report_only:  # a report is redrawn from cells.json and the run folders
            path = os.path.join(results, "cells.json")
            print(f"study.py: --report-only: no finished cells in {shown(runs)} and "
                  + (f"none of this study's in {shown(path)}" if os.path.exists(path) else f"no {shown(path)}")
                  + ": nothing to report (--results "
                  "names the folder the report is read from and written to: to redraw a published report "
                  "elsewhere, copy its cells.json there first)", file=sys.stderr)
            return 1
        print("study.py: no finished cells yet: nothing to report")
        return 1 if failures else 0
    print(f"study.py: report {shown(os.path.join(results, 'report.md'))} "
          f"({len([r for r in records if r['status'] != 'failed'])}/{study.planned()} cells)")
    if failures:
        print(f"study.py: {failures} cell(s) failed; see the report's 'Failed cells' and their logs", file=sys.stderr)
        return 1
    return 0
