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

from runlog import METRICS, SUMMARY, BadFile, read_metrics, read_summary


def number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# The summary.json keys a curve's label shows, each with its check and what the trainer writes.
SUMMARY_LABEL = (("sync", lambda x: isinstance(x, str), "text such as \"gradients/average\""),
                 ("reducer", lambda x: isinstance(x, str), "text such as \"average\""),
                 ("world_size", lambda x: isinstance(x, int) and not isinstance(x, bool) and x > 0,
                  "a number of ranks"),
                 ("eval_top1", number, "a number (a fraction such as 0.75)"))


def load_run(path):
    """(label, training lines, eval lines) of one run folder; exits naming the file for a folder
    that is not a run, a damaged metrics.jsonl or summary.json, or a run with no metrics line."""
    try:
        rows = read_metrics(path, strict=True)
        s = read_summary(path)
        for key, ok, what in SUMMARY_LABEL:  # what the label shows: the trainer's types only
            if s is not None and key in s and not ok(s[key]):
                raise BadFile(f"{os.path.join(path, SUMMARY)}: \"{key}\" is {json.dumps(s[key])}, "
                              f"not {what}")
    except BadFile as e:
        sys.exit(f"compare.py: {e}")
    if rows is None:
        sys.exit(f"compare.py: {os.path.join(path, METRICS)} not found; is {path} a trainer output folder?")
    if not rows:
        sys.exit(f"compare.py: {os.path.join(path, METRICS)} holds no metrics line (a run that has logged "
                 "nothing yet?): nothing to plot for it")
    train, evals = {}, {}
    for row in rows:
        # Later lines win: a resumed run may repeat a step.
        if number(row.get("loss")):
            train[row["step"]] = row
        if any(k.startswith("eval_") for k in row):
            evals[row["step"]] = row
    label = os.path.basename(os.path.normpath(path))
    if s is not None:
        label = f"{label}: {s.get('sync', s.get('reducer', '?'))}, {s.get('world_size', '?')} ranks"
        if "eval_top1" in s:
            label += f", top-1 {100 * s['eval_top1']:.2f}%"
    return label, [train[k] for k in sorted(train)], [evals[k] for k in sorted(evals)]


def output_path(name):
    """The file -o NAME writes: NAME itself, or NAME.png when NAME has no extension (matplotlib
    would add it unsaid); exits for an empty name or a folder (it wrote FOLDER/.png)."""
    if not name:
        sys.exit("compare.py: -o is empty: give a file name, e.g. -o compare.png")
    if name.endswith(("/", os.sep)) or os.path.isdir(name):
        sys.exit(f"compare.py: -o {name} is a folder: give a file name, e.g. -o {os.path.join(name, 'compare.png')}")
    return name if os.path.splitext(name)[1] else name + ".png"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("runs", nargs="+", help="trainer output folders")
    ap.add_argument("-o", "--output", default="compare.png",
                    help="the image to write (default compare.png): a file name, its extension the format "
                         "(.png, .svg, .pdf, ...); .png is added to a name without one")
    args = ap.parse_args()
    out = output_path(args.output)
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
        timed = [r for r in train if number(r.get("wall_s"))]
        if train:
            axes[0][0].plot([r["step"] for r in train], [r["loss"] for r in train], label=label)
        if timed:
            axes[0][1].plot([r["wall_s"] for r in timed], [r["loss"] for r in timed], label=label)
        key = next((k for k in ("eval_top1", "eval_mlm_accuracy") if evals and k in evals[-1]), None)
        if key:
            evals = [r for r in evals if number(r.get(key))]
            timed = [r for r in evals if number(r.get("wall_s"))]
            axes[1][0].plot([r["step"] for r in evals], [r[key] for r in evals], marker="o", label=label)
            if timed:
                axes[1][1].plot([r["wall_s"] for r in timed], [r[key] for r in timed], marker="o", label=label)
    titles = [["training loss vs step", "training loss vs wall time (s)"],
              ["eval metric vs step", "eval metric vs wall time (s)"]]
    for i in range(2):
        for j in range(2):
            ax = axes[i][j]
            ax.set_title(titles[i][j])
            ax.set_xlabel("step" if j == 0 else "seconds")
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:  # an empty panel (no eval lines): no legend
                ax.legend(fontsize=8)
    axes[0][0].set_yscale("log")
    axes[0][1].set_yscale("log")
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=100)
    except (OSError, ValueError) as e:  # no such folder, not writable, an unknown image type
        sys.exit(f"compare.py: cannot write {out}: {getattr(e, 'strerror', None) or e}")
    print(f"compare.py: wrote {out} ({len(runs)} runs)")


if __name__ == "__main__":
    main()
