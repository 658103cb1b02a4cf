"""The report's plots (matplotlib): the metric against step per column; the final metric and
the steps (and seconds) to target against examples per step, or as bars when that is the same
for every cell."""
import math
import os

from .spec import StudyError, column, columns, fmt_metric, in_percent


def write_plots(study, rows, best, out_dir, seconds_compare=True, fits=None):
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
    scale = 100.0 if in_percent(study) else 1.0
    ylab = study.metric + (" (%)" if scale == 100 else "")

    # 1. Metric against step, one panel per column (ranks, micro-batches, variant), mean over
    # seeds (band: min-max).
    cols_ = columns(study, best)
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
        ax.set_title(study.column_label(*col, size=True), fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(ylab)
        if study.plot_range:
            ax.set_ylim(scale * study.plot_range[0], scale * study.plot_range[1])
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # (no finished cell in the column: no curve to name)
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
    # Steps to the target on the figure the choices are made on: a steps-to-target study's runs
    # stop when the validation figure reaches it (train.stop_at), the test figure need not have.
    on_select = study.select is not None and study.choose_by == "steps"
    steps_field, reached_field = ("select_steps", "select_reached") if on_select else ("steps_to_target", "reached")
    if study.target is not None:
        what = f"{study.select if on_select else study.metric} {fmt_metric(study, study.target)}" + \
            (" (validation)" if on_select else "")
        panels.append(("steps_to_target.png", steps_field, f"steps to {what}",
                       "steps to target, mean over the k/n seeds that reached it (no bar: none did)" if one_x
                       else "steps to target, mean over the k/n seeds that reached it\n"
                            "(filled: every seed did; hollow: only k of n; x: none did)"))
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
                        ax.annotate(f"{r[reached_field]}/{r['seeds']}", (x, val(r)), ha="center", va="bottom",
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
                        # The line joins only points that every seed reached: a mean over the few
                        # seeds that did is not the method's figure, so it is a hollow marker,
                        # and every point says how many of its seeds reached the target.
                        full = [(x, r) for x, r in got if r[reached_field] == r["seeds"]]
                        part = [(x, r) for x, r in got if r[reached_field] < r["seeds"]]
                        if full:
                            ax.plot([x for x, _ in full], [val(r) for _, r in full], color=colors[m], ls=styles[v],
                                    label=lab, marker="o")
                        if part:
                            ax.plot([x for x, _ in part], [val(r) for _, r in part], "o", mfc="none", mew=1.5,
                                    color=colors[m], ms=8, label=None if full else lab)
                        for x, r in got:
                            ax.annotate(f"{r[reached_field]}/{r['seeds']}", (x, val(r)), ha="center", va="bottom",
                                        fontsize=7, xytext=(0, 4), textcoords="offset points", color=colors[m])
                        miss = [(x, r) for x, r in pts if val(r) is None]
                        if miss and got:
                            top = max(val(r) for _, r in got)
                            ax.plot([x for x, _ in miss], [top] * len(miss), "x", color=colors[m], ms=9)
                            for x, r in miss:
                                ax.annotate(f"0/{r['seeds']}", (x, top), ha="center", va="bottom", fontsize=7,
                                            xytext=(0, 6), textcoords="offset points", color=colors[m])
            ax.set_xscale("log", base=2)
            ax.set_xlabel("examples per step (ranks x micro-batches x batch per rank)")
            if field != "mean":
                ax.set_yscale("log")
                ax.margins(y=0.15)  # room for the k/n labels
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
    path = os.path.join(out_dir, "critical_batch.png")
    if os.path.exists(path):  # an earlier report's: the report links the file only when drawn now
        os.remove(path)
    if fits is not None and len({r["examples_per_step"] for r in best}) > 1:
        write_critical_batch_plot(study, fits, colors, label, plt, path)


def write_critical_batch_plot(study, fits, colors, label, plt, path):
    """critical_batch.png (a steps-to-target study over several sizes): per method, the steps of
    the points the fit takes (mean over seeds, joined; each seed a dot), the other chosen points
    (another variant, an unfinished sweep, or a seed short of the target) hollow, the fit S_min (1 + B_crit / B) dashed with
    B_crit marked, and perfect scaling (the steps halving per doubling) from the smallest fitted size."""
    from matplotlib.lines import Line2D
    fig, ax = plt.subplots(figsize=(9, 5))
    sizes = sorted({r["examples_per_step"] for f in fits for r in f["chosen"]})
    shown = []  # every step count drawn, for the y range
    for f in fits:
        m, key, fitted = f["method"], f["key"], f["fitted"]
        c = colors[m]
        pts = sorted(fitted.items())
        others = [r for r in f["chosen"] if fitted.get(r["examples_per_step"]) is not r]
        if pts:
            ax.plot([e for e, _ in pts], [r[key] for _, r in pts], "o-", color=c, zorder=3)
        for e, seeds in f["seed_steps"].items():  # each seed's own steps
            ax.plot([e] * len(seeds), seeds, ".", color=c, ms=5, alpha=0.6, zorder=2)
            shown += seeds
        if others:
            ax.plot([r["examples_per_step"] for r in others], [r[key] for r in others], "o", mfc="none",
                    color=c, ms=7, alpha=0.7, zorder=2)
        shown += [r[key] for r in f["chosen"]]
        if f["b_crit"] is not None and pts:
            xs = [pts[0][0] * 2 ** (i / 8) for i in range(int(8 * math.log2(pts[-1][0] / pts[0][0])) + 1)]
            ax.plot(xs, [f["s_min"] * (1 + f["b_crit"] / x) for x in xs], "--", color=c, lw=1)
            if not f["why"]:
                ax.axvline(f["b_crit"], color=c, ls=":", lw=1)
                ax.annotate(f"B_crit {f['b_crit']:,.0f}", (f["b_crit"], f["s_min"]), color=c, fontsize=8,
                            rotation=90, ha="right", va="bottom", xytext=(-2, 2), textcoords="offset points")
        if pts:  # perfect scaling from the smallest fitted size
            e0, s0 = pts[0][0], pts[0][1][key]
            xs = [e for e in sizes if e >= e0]
            ax.plot(xs, [s0 * e0 / e for e in xs], ":", color=c, lw=1, alpha=0.6)
    if not shown:
        plt.close(fig)
        return
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(min(shown) / 1.6, max(shown) * 1.3)
    ax.set_xlabel("examples per step")
    figure = f"{study.select} (validation)" if study.select else study.metric
    ax.set_ylabel(f"steps to {figure} {fmt_metric(study, study.target)}")
    ax.set_title(f"{study.name}: where each method stops scaling", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    handles = [Line2D([], [], color=colors[f["method"]], marker="o", label=label[f["method"]]) for f in fits
               if f["chosen"]]
    grey = "0.4"
    handles += [Line2D([], [], color=grey, marker="o", label="fitted sizes: mean over seeds"),
                Line2D([], [], color=grey, marker=".", ls="", label="a seed"),
                Line2D([], [], color=grey, marker="o", mfc="none", ls="", label="not fitted (another variant,\n"
                       "an unfinished sweep, or a seed\nshort of the target)"),
                Line2D([], [], color=grey, ls="--", label="fit S_min (1 + B_crit / B)"),
                Line2D([], [], color=grey, ls=":", label="perfect scaling\n(steps halve per doubling)")]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
