"""The report: cells grouped into rows with statistics over seeds (mean ± std, steps and time to
target), the best sweep point per method and column, and report.md and cells.json."""
import contextlib
import datetime
import json
import math
import os

from .plots import write_plots
from .run import commit, machine
from .spec import ROOT, column, column_order, columns, fmt_metric, fmt_value, point_label


def fmt_time(s):
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


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


def fmt_spread(study, row):
    """A row's mean ± std over seeds; a single seed has no spread to show."""
    if row["seeds"] == 1 and row["mean"] is not None:
        return fmt_metric(study, row["mean"]) + " (1 seed)"
    return fmt_metric(study, row["mean"], row["std"])


def write_report(study, records, out_dir, argv, total_wall, planned):
    os.makedirs(out_dir, exist_ok=True)
    rows = aggregate(study, records)
    for r in rows:
        r["point_label"] = point_label(r["point"])
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
        L.append("- Common overrides: " + ", ".join(f"`{k}: {fmt_value(v)}`" for k, v in study.common.items()) + ".")
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
        sets = ", ".join(f"`{k}: {fmt_value(v)}`" for k, v in spec["set"].items())
        sweep = "; sweep " + ", ".join(f"`{k}` ∈ {{{', '.join(fmt_value(x) for x in v)}}}"
                                       for k, v in spec["sweep"].items()) + \
                " (the best mean per rank count is kept)" if spec["sweep"] else ""
        seeds = f"; seed{'s' if len(spec['seeds']) > 1 else ''} {', '.join(map(str, spec['seeds']))} only" \
            if spec["seeds"] != study.seeds else ""
        L.append(f"- **{spec['label']}** (`{m}`): {sets or 'the base config'}{sweep}{seeds}")
    L.append("")

    # Headlines: final metric (and time to target), method x column.
    cols_ = columns(study, best)
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
