#!/usr/bin/python3
"""Plots several training runs side by side: loss and the eval metric against step and against
wall time, one PNG. Each run is a trainer output folder (metrics.jsonl, summary.json,
config.yaml); curves are labelled by run folder, reducer and world size.

    /usr/bin/python3 tools/compare.py runs/mnist_lenet_adasum runs/mnist_lenet_average -o cmp.png

Needs Debian's python3-matplotlib (use /usr/bin/python3: the python3 first on PATH lacks it).
"""
import argparse
import json
import os
import sys

from runlog import METRICS, BadLine, read_metrics


def load_run(path):
    try:
        rows = read_metrics(path, strict=True)
    except BadLine as e:
        sys.exit(f"compare.py: {e}")
    if rows is None:
        sys.exit(f"compare.py: {os.path.join(path, METRICS)} not found; is {path} a trainer output folder?")
    train, evals = {}, {}
    for row in rows:
        # Later lines win: a resumed run may repeat a step.
        if "loss" in row:
            train[row["step"]] = row
        if any(k.startswith("eval_") for k in row):
            evals[row["step"]] = row
    label = os.path.basename(os.path.normpath(path))
    summary = os.path.join(path, "summary.json")
    if os.path.isfile(summary):
        with open(summary) as f:
            s = json.load(f)
        label = f"{label}: {s.get('sync', s.get('reducer', '?'))}, {s.get('world_size', '?')} ranks"
        if "eval_top1" in s:
            label += f", top-1 {100 * s['eval_top1']:.2f}%"
    return label, [train[k] for k in sorted(train)], [evals[k] for k in sorted(evals)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("runs", nargs="+", help="trainer output folders")
    ap.add_argument("-o", "--output", default="compare.png", help="PNG to write (default compare.png)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("compare.py: matplotlib is missing; install Debian's python3-matplotlib and run "
                 "with /usr/bin/python3")
    runs = [load_run(p) for p in args.runs]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for label, train, evals in runs:
        if train:
            axes[0][0].plot([r["step"] for r in train], [r["loss"] for r in train], label=label)
            axes[0][1].plot([r["wall_s"] for r in train], [r["loss"] for r in train], label=label)
        key = next((k for k in ("eval_top1", "eval_mlm_accuracy") if evals and k in evals[-1]), None)
        if key:
            axes[1][0].plot([r["step"] for r in evals], [r[key] for r in evals], marker="o", label=label)
            axes[1][1].plot([r["wall_s"] for r in evals], [r[key] for r in evals], marker="o", label=label)
    titles = [["training loss vs step", "training loss vs wall time (s)"],
              ["eval metric vs step", "eval metric vs wall time (s)"]]
    for i in range(2):
        for j in range(2):
            ax = axes[i][j]
            ax.set_title(titles[i][j])
            ax.set_xlabel("step" if j == 0 else "seconds")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    axes[0][0].set_yscale("log")
    axes[0][1].set_yscale("log")
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"compare.py: wrote {args.output} ({len(runs)} runs)")


if __name__ == "__main__":
    main()
