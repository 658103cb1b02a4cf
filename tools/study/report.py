"""The report: cells grouped into rows with statistics over seeds (mean ± std, steps and time to
target), the best sweep point per method and column (chosen on the validation figure when the
study names one, metric.select), differences from the baseline with Welch's t-test, and
report.md and cells.json."""
import contextlib
import datetime
import itertools
import json
import math
import os

from .plots import write_plots
from .spec import ROOT, StudyError, column, column_order, columns, fmt_metric, fmt_time, fmt_value, in_percent, point_label


def mean_std(xs):
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def _betacf(a, b, x):
    """The continued fraction of the incomplete beta function (Numerical Recipes' betacf)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b), x in [0, 1]."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1.0 - x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def welch(xs, ys):
    """Welch's t-test of mean(xs) - mean(ys): (difference, two-sided p), or None with fewer than
    two values on a side. Equal values on both sides give p 1; a difference with no spread at
    all, p 0."""
    if len(xs) < 2 or len(ys) < 2:
        return None
    mx, sx = mean_std(xs)
    my, sy = mean_std(ys)
    va, vb = sx * sx / len(xs), sy * sy / len(ys)
    diff = mx - my
    if va + vb == 0.0:
        return diff, (1.0 if diff == 0 else 0.0)
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va * va / (len(xs) - 1) if va else 0.0) + (vb * vb / (len(ys) - 1) if vb else 0.0))
    return diff, betainc(df / 2.0, 0.5, df / (df + t * t))


def seed_finals(study, recs, key="final"):
    """Each finished seed's final figure; a seed diverged before any evaluation counts at
    metric.chance (and is left out without one)."""
    out = []
    for r in recs:
        if r["status"] not in ("ok", "diverged"):
            continue
        v = r.get(key)
        if v is None or not math.isfinite(v):
            v = study.chance
        if v is not None:
            out.append(v)
    return out


def steps_to_target(study, evals):
    if study.target is None:
        return None
    for step, v in evals:
        if (v >= study.target) if study.goal == "max" else (v <= study.target):
            return step
    return None


def select_steps(study, rec):
    """The steps a cell took to the target on the figure choices are made on (None: not reached)."""
    return steps_to_target(study, rec.get("select_evals", []) if study.select else rec["evals"])


def aggregate(study, records):
    """Groups records into rows: one per (method, sweep point, ranks, micro_batches, variant)."""
    groups = {}
    for r in records:
        key = (r["method"], json.dumps(r["point"], sort_keys=True)) + column(r)
        groups.setdefault(key, []).append(r)
    rows = []
    for (method, point, ranks, mb, variant), recs in groups.items():
        done = [r for r in recs if r["status"] in ("ok", "diverged")]
        finals = seed_finals(study, done)  # diverged before any evaluation: counted at chance
        mean, sd = mean_std(finals)
        # The validation figure choices are made on (metric.select), when the cells have it.
        sel = seed_finals(study, [r for r in done if "select_final" in r], "select_final") if study.select else []
        sel_mean, sel_sd = mean_std(sel)
        # Steps to the target on the figure choices are made on (metric.choose_by: steps).
        sel_hits = [select_steps(study, r) for r in done]
        sel_reached = [h for h in sel_hits if h is not None]
        # What the choice of a sweep point reads: the method's own seeds only, not the chosen
        # point's confirm_seeds (which the other points never ran).
        sweep_seeds = study.methods[method]["seeds"]
        mine = [r for r in done if r["seed"] in sweep_seeds]
        c_reached = [h for h in (select_steps(study, r) for r in mine) if h is not None]
        c_sel = seed_finals(study, [r for r in mine if "select_final" in r], "select_final") if study.select else []
        choice = {"mean": mean_std(seed_finals(study, mine))[0], "select_mean": mean_std(c_sel)[0],
                  "select_reached": len(c_reached),
                  "select_steps": mean_std(c_reached)[0] if c_reached else None}
        hits = [(steps_to_target(study, r["evals"]), dict(r.get("eval_wall", []))) for r in done]
        reached = [h for h, _ in hits if h is not None]
        times = [w[h] for h, w in hits if h is not None and h in w]
        rows.append({"method": method, "point": json.loads(point), "ranks": ranks, "micro_batches": mb,
                     "variant": variant,
                     "examples_per_step": recs[0]["examples_per_step"], "seeds": len(done),
                     "failed": sum(r["status"] == "failed" for r in recs),
                     "diverged": sum(r["status"] == "diverged" for r in done),
                     "mean": mean, "std": sd, "finals": finals, "reached": len(reached),
                     "select_mean": sel_mean, "select_std": sel_sd, "select_seeds": len(sel),
                     "select_reached": len(sel_reached),
                     "select_steps": mean_std(sel_reached)[0] if sel_reached else None,
                     "steps_to_target": mean_std(reached)[0] if reached else None,
                     "time_to_target": mean_std(times)[0] if times else None,
                     "wall_s": mean_std([r["wall_s"] for r in done])[0],
                     "choice": choice, "records": done})
    rows.sort(key=lambda r: (column_order(study, column(r)), list(study.methods).index(r["method"]),
                             json.dumps(r["point"], sort_keys=True)))
    return rows


def choice_key(study):
    """The row field choices are made on: the validation figure's mean (metric.select), else
    the test figure's."""
    return "select_mean" if study.select else "mean"


def better(study, a, b):
    """Is row a better than row b (on the figure choices are made on; a row with no result
    never is)? With metric.choose_by: steps, the row whose seeds reached the target more often
    on that figure, then in fewer steps on average. Only the method's own seeds count, not a
    chosen point's confirm_seeds."""
    a, b = a["choice"], b["choice"]
    if study.choose_by == "steps":
        ka = (-a["select_reached"], a["select_steps"] if a["select_steps"] is not None else math.inf)
        kb = (-b["select_reached"], b["select_steps"] if b["select_steps"] is not None else math.inf)
        return a["select_reached"] > 0 and ka < kb
    k = choice_key(study)
    if a[k] is None:
        return False
    if b[k] is None:
        return True
    return a[k] > b[k] if study.goal == "max" else a[k] < b[k]


def best_rows(study, rows):
    """Per (method, column): the sweep point with the best mean of the validation figure
    (metric.select), or of the test figure in a study without one."""
    best = {}
    for r in rows:
        key = (r["method"],) + column(r)
        if key not in best or better(study, r, best[key]):
            best[key] = r
    return [best[k] for k in sorted(best, key=lambda k: (column_order(study, k[1:]),
                                                          list(study.methods).index(k[0])))]


def confirm_choices(study, records):
    """{(method, ranks, micro_batches, variant): point} for each method with confirm_seeds and
    each column whose sweep has run every point: the chosen point, whose confirm_seeds then run.
    With metric.choose_by: steps, only a point that reached the target (else nothing is chosen)."""
    rows = aggregate(study, [r for r in records if r["status"] in ("ok", "diverged")])
    out = {}
    for b in best_rows(study, rows):
        if not study.methods[b["method"]]["confirm_seeds"]:
            continue
        if sweep_finished(study, rows, b) and has_choice(study, b):
            out[(b["method"],) + column(b)] = b["point"]
    return out


def fmt_spread(study, row):
    """A row's mean ± std over seeds; a single seed has no spread to show."""
    if row["seeds"] == 1 and row["mean"] is not None:
        return fmt_metric(study, row["mean"]) + " (1 seed)"
    return fmt_metric(study, row["mean"], row["std"])


def noise_verdict(p):
    """Whether a difference with Welch's p is beyond the seed noise (p < 0.05) or within it."""
    return "beyond seed noise" if p < 0.05 else "within seed noise"


# A difference between points with fewer than two seeds on a side: no spread to test it against.
NOT_JUDGED = "fewer than 2 seeds on a side: not judged against seed noise"


def fmt_p(p):
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def critical_batch(points):
    """McCandlish et al. (2018): steps to a target S(B) = S_min (1 + B_noise / B). Least squares of
    S against 1/B over [(B, S)] gives S_min and B_noise, the critical batch size (where a
    method needs twice its fewest steps). Returns (S_min, B_noise, (low, high), why): the range
    is the spread of the fits leaving out one point at a time; why (else None) says why the data
    cannot place it (fewer than 3 points, a fit without positive S_min and B_noise, or B_noise
    outside the sizes measured)."""
    if len(points) < 3:
        n = len(points)
        return None, None, None, f"{n} size{'' if n == 1 else 's'} reached the target (3 needed)"

    def fit(pts):
        xs, ys = [1.0 / b for b, _ in pts], [float(st) for _, st in pts]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        a = my - slope * mx
        return a, (slope / a if a > 0 else None)

    s_min, b_noise = fit(points)
    if b_noise is None or b_noise <= 0:
        return s_min, None, None, "the steps do not fall as 1/B (no positive S_min and B_noise fit them)"
    loo = [fit(points[:i] + points[i + 1:]) for i in range(len(points))] if len(points) > 3 else []
    loo = [bn for _, bn in loo if bn is not None and bn > 0]
    low, high = (min(loo), max(loo)) if loo else (None, None)
    sizes = [b for b, _ in points]
    why = None
    if not min(sizes) <= b_noise <= max(sizes):
        why = f"the fit puts it at {b_noise:,.0f}, outside the sizes measured ({min(sizes):,} to {max(sizes):,})"
    return s_min, b_noise, (low, high), why


def seed_fits(study, fitted):
    """The critical-batch fit of each seed on its own, over the fitted sizes (rows) that every
    such seed brought to the target: (fits [(seed, B_crit or None, why it is not placed or None)],
    those sizes). The seeds are the two or more that share the most sizes (three at least), the
    most seeds among equals: a seed not yet run at some size waits rather than shrink the others'
    fits to fewer sizes than the fit of the means has (with three sizes a seed's fit can land
    outside them). Empty when no two seeds share three sizes."""
    per = {}
    for r in fitted:
        for rec in r["records"]:
            n = select_steps(study, rec)
            if n is not None:
                per.setdefault(rec["seed"], {})[r["examples_per_step"]] = n
    best = None  # (sizes shared, seeds)
    for k in range(2, len(per) + 1):
        for seeds in itertools.combinations(sorted(per), k):
            common = set.intersection(*(set(per[s]) for s in seeds))
            if len(common) >= 3 and (best is None or (len(common), k) > (len(best[0]), len(best[1]))):
                best = (common, seeds)
    if best is None:
        return [], []
    common, seeds = best
    return [(s, *critical_batch(sorted((e, per[s][e]) for e in common))[1::2]) for s in seeds], sorted(common)


def fmt_seed_fits(fits, sizes=()):
    """seed_fits as the table writes them: 'B_crit (seed s), ... over SIZES', or '–'."""
    text = ", ".join(f"not placed (seed {s})" if b is None else
                     f"{b:,.0f} (seed {s}" + (": outside the sizes run)" if why else ")")
                     for s, b, why in fits)
    return text + (f" over {', '.join(f'{e:,}' for e in sizes)}" if text and sizes else "") or "–"


def write_critical_batch_significance(study, fits, L):
    """Each method's per-seed critical batch sizes against the baseline's (Welch's t-test), where
    both have two or more seeds whose fit placed one. A fit's B_crit depends on the sizes it spans
    (a slow smallest size bends it), so both methods' seeds are fitted again over the same sizes:
    those both fitted and both methods' seeds share (seed_fits on each, narrowed until they agree)."""
    by_method = {f["method"]: f for f in fits}
    lines = []
    for f in fits:
        m, base = f["method"], study.methods[f["method"]]["baseline"]
        if m == base or base not in by_method:
            continue
        b = by_method[base]
        sizes = set(f["fitted"]) & set(b["fitted"])
        while True:
            (fa, sa), (fb, sb) = (seed_fits(study, [g["fitted"][e] for e in sorted(sizes)]) for g in (f, b))
            if set(sa) == set(sb) or not sa or not sb:
                break
            sizes = set(sa) & set(sb)
        # (a side without seed fits places none: the test below skips it)
        placed, placed_base = ([bc for _, bc, why in x if bc is not None and not why] for x in (fa, fb))
        if len(placed) < 2 or len(placed_base) < 2:
            continue
        d, p = welch(placed, placed_base)
        lines.append(f"- {study.methods[m]['label']}: B_crit {d:+,.0f} against {study.methods[base]['label']} "
                     f"({len(placed)} and {len(placed_base)} seeds over {', '.join(f'{e:,}' for e in sorted(sa))}; "
                     f"{fmt_p(p)}, {noise_verdict(p)})")
    if lines:
        L.append("B_crit per seed against each method's baseline (difference of the means; Welch's t-test "
                 "over the seeds' own fits, both methods fitted over the same sizes; a fit outside them is left out):\n")
        L.extend(lines)
        L.append("")


def critical_batch_fits(study, rows, best):
    """Per method (in the study's order): {"method", "chosen": its chosen rows that reached the
    target, by size; "fitted": {examples per step: the row that enters the fit, one whose seeds all
    reached the target}; "seed_steps":
    {examples per step: each of its seeds' steps}; "finished": the chosen rows whose sweep
    finished; "s_min", "b_crit", "range", "why", "per_seed", "per_seed_sizes"} (see
    critical_batch, seed_fits). The steps are counted on the validation figure when the study has
    one: runs that stop at the target (train.stop_at) stop on it, so the test figure need not have
    reached the target by then. A size run in several variants enters with the one whose sweep
    seeds needed the fewest steps (chosen as a sweep point is); the fit takes its mean over all
    its seeds."""
    key = "select_steps" if study.select else "steps_to_target"
    reached = "select_reached" if study.select else "reached"

    def choice_steps(r):
        n = r["choice"]["select_steps"]
        return math.inf if n is None else n
    out = []
    for m in study.methods:
        chosen = sorted((r for r in best if r["method"] == m and r[key] is not None),
                        key=lambda r: (r["examples_per_step"], column_order(study, column(r))))
        finished = [r for r in chosen if sweep_finished(study, rows, r)]
        fitted = {}  # examples per step -> the row that enters the fit
        # A point some seed never brought to the target has no mean steps (the mean over the seeds
        # that did flatters it): shown, not fitted.
        for r in (x for x in finished if x[reached] == x["seeds"]):
            e = r["examples_per_step"]
            if e not in fitted or choice_steps(r) < choice_steps(fitted[e]):
                fitted[e] = r
        s_min, b_crit, rng, why = critical_batch([(e, r[key]) for e, r in sorted(fitted.items())])
        steps = {e: [n for n in (select_steps(study, rec) for rec in r["records"]) if n is not None]
                 for e, r in fitted.items()}
        per_seed, per_seed_sizes = seed_fits(study, list(fitted.values()))
        out.append({"method": m, "key": key, "reached": reached, "chosen": chosen, "finished": finished,
                    "fitted": fitted,
                    "seed_steps": steps,
                    "s_min": s_min, "b_crit": b_crit, "range": rng, "why": why,
                    "per_seed": per_seed, "per_seed_sizes": per_seed_sizes})
    return out


def write_critical_batch(study, rows, fits, L):
    """The critical-batch table of a steps-to-target study (metric.choose_by steps), one row per
    method of critical_batch_fits."""
    figure = f"`{study.select}` (validation)" if study.select else f"`{study.metric}`"
    L.append("## Where each method stops scaling (critical batch size)\n")
    L.append(f"Steps to the target on {figure} of each method's chosen point per size, fitted as "
             "S(B) = S_min (1 + B_crit / B) (McCandlish et al. 2018; perfect scaling halves the steps per doubling "
             "of B, and B_crit is where the steps are twice the fewest possible); the range is the spread of the "
             "fits leaving out one size at a time (4 or more sizes). A size whose sweep has not finished, or "
             "whose chosen point some seed did not bring to the target, is shown but left out of the fit. Per seed: the same fit of each seed on its own, "
             "over the fitted sizes those seeds all brought to the target (the seeds that share the most sizes, three or "
             "more; a seed not yet run at a size waits): the spread over seeds. "
             "`critical_batch.png` draws the fits.\n")
    several = len(study.variants) > 1
    if several:
        L.append("A size run in several variants enters the fit with the fewest steps among those whose sweep "
                 "finished (in bold): the variant is chosen on validation, as the sweep point is (on the sweep's "
                 "seeds; the fit then takes the mean over all its seeds).\n")
    L.append("| method | sizes (examples per step: steps) | S_min | B_crit | leave-one-out range | B_crit per seed |")
    L.append("|---|---|---|---|---|---|")
    for f in fits:
        key, fitted = f["key"], f["fitted"]
        # Not a reason the fit cannot place B_crit, but what the fit left out.
        out = [r for r in f["chosen"] if r["examples_per_step"] not in fitted]  # sizes not in the fit
        why_out = (["sizes with an unfinished sweep"] if any(r not in f["finished"] for r in out) else []) + \
            (["sizes a seed did not bring to the target"] if any(r in f["finished"] for r in out) else [])
        left_out = " and ".join(why_out) + " left out" if why_out else None

        def size(r):
            run, planned = sweep_progress(study, rows, r)
            text = f"{r['examples_per_step']:,}: {r[key]:.0f}"
            if several:
                text = f"**{text}**" if fitted.get(r["examples_per_step"]) is r else text
                text += f" ({study.variants[r['variant']]['label']})" if r["variant"] in study.variants else ""
            if r not in f["finished"]:
                return text + f" (sweep {run} of {planned}: not fitted)"
            k = r[f["reached"]]
            return text + (f" ({k} of {r['seeds']} seeds reached: not fitted)" if k < r["seeds"] else "")
        sizes = ", ".join(size(r) for r in f["chosen"]) or "none reached"
        label = study.methods[f["method"]]["label"]
        if f["b_crit"] is None:
            L.append(f"| {label} | {sizes} | – | not placed: "
                     f"{'; '.join(x for x in (f['why'], left_out) if x)} | – | {fmt_seed_fits(f['per_seed'], f['per_seed_sizes'])} |")
            continue
        rng = f["range"]
        rtext = f"{rng[0]:,.0f} to {rng[1]:,.0f}" if rng and rng[0] is not None else "–"
        notes = ([f"not placed: {f['why']}"] if f["why"] else []) + ([left_out] if left_out else [])
        L.append(f"| {label} | {sizes} | {f['s_min']:.0f} | {f['b_crit']:,.0f}"
                 + (f" ({'; '.join(notes)})" if notes else "") + f" | {rtext} | {fmt_seed_fits(f['per_seed'], f['per_seed_sizes'])} |")
    L.append("")
    write_critical_batch_significance(study, fits, L)


def sweep_edges(study, rows, best):
    """The chosen points that lie at the edge of what their sweep tried in their column: per
    swept key with two or more values run there, the chosen value is the smallest or the
    largest of them, so the best may lie beyond. [(row, key, value, where, tried)], where e.g.
    'the largest tried' (', the largest that fits the run' added when no further value fits it)"""
    out = []
    for b in best:
        if not b["point"]:
            continue
        peers = [r for r in rows if r["method"] == b["method"] and column(r) == column(b) and r["seeds"] > 0]
        for key, value in b["point"].items():
            tried = sorted({r["point"][key] for r in peers if key in r["point"]})
            if len(tried) < 2 or value not in (tried[0], tried[-1]):
                continue
            side = "smallest" if value == tried[0] else "largest"
            where = f"the {side} tried"
            # No value beyond it fits the column's run (e.g. a warm-up as long as the run): an
            # edge the sweep cannot be extended past here.
            fits = [p[key] for p in study.column_points(b["method"], column(b))
                    if all(p[k] == v for k, v in b["point"].items() if k != key)]
            if value == (min(fits) if side == "smallest" else max(fits)) and len(fits) < len(
                    study.methods[b["method"]]["sweep"][key]):
                where += f", the {side} that fits the run"
            out.append((b, key, value, where, tried))
    return out


def sweep_progress(study, rows, b):
    """(points run, points planned) of chosen row b's sweep in its column (the points that fit
    the column's run)."""
    planned = {json.dumps(p, sort_keys=True) for p in study.column_points(b["method"], column(b))}
    run = {json.dumps(r["point"], sort_keys=True) for r in rows
           if r["method"] == b["method"] and column(r) == column(b) and r["seeds"] > 0}
    return len(run & planned), len(planned)


def grid_distance(study, method, p, q):
    """How many steps along the sweep's lists point p lies from point q (one step: one key one
    value away); a key whose value in either is not in the sweep's list (an earlier sweep's
    point) does not count."""
    return sum(abs(vals.index(p[k]) - vals.index(q[k])) for k, vals in study.methods[method]["sweep"].items()
               if p.get(k) in vals and q.get(k) in vals)


def has_choice(study, b):
    """Does best row b make a choice (with metric.choose_by: steps, one its seeds reached)?"""
    return study.choose_by != "steps" or b["choice"]["select_reached"] > 0


def sweep_finished(study, rows, b):
    """Has chosen row b's column run enough of its sweep for the choice to stand: every point, or
    (bracket) the neighbours of a choice on each side."""
    run, planned = sweep_progress(study, rows, b)
    if run >= planned:
        return True
    if not study.bracket or not has_choice(study, b):
        return False
    ran = {json.dumps(r["point"], sort_keys=True) for r in rows
           if r["method"] == b["method"] and column(r) == column(b) and r["seeds"] > 0}
    return all(json.dumps(p, sort_keys=True) in ran for p in study.column_points(b["method"], column(b))
               if grid_distance(study, b["method"], p, b["point"]) == 1)


def bracket_needed(study, cell, records):
    """bracket: does `cell` still need to run? Yes for a method without a sweep, a seed beyond
    the sweep's (confirm_seeds) and a column with no choice yet; else only a point next to (or
    at) the column's best so far."""
    m = study.methods[cell.method]
    if not m["sweep"] or cell.seed not in m["seeds"]:
        return True
    mine = [r for r in records if r["method"] == cell.method and column(r) == (cell.ranks, cell.mb, cell.variant)
            and r["status"] in ("ok", "diverged")]
    if not mine:
        return True
    b = best_rows(study, aggregate(study, mine))[0]
    if not has_choice(study, b):
        return True
    return grid_distance(study, cell.method, cell.point, b["point"]) <= 1


def unfinished_sweeps(study, rows, best):
    """The chosen rows whose column has not run enough of their sweep yet: [(row, run, planned)]."""
    out = []
    for b in best:
        if not sweep_finished(study, rows, b):
            out.append((b, *sweep_progress(study, rows, b)))
    return out


def write_list_section(L, title, intro, items):
    """A section of one paragraph and a list (nothing when there are no items)."""
    if not items:
        return
    L.append(f"## {title}\n")
    L.append(intro + "\n")
    L.extend(f"- {item}" for item in items)
    L.append("")


def write_unfinished_sweeps(study, rows, best, L):
    """A section naming every choice made before its sweep finished (else nothing), and one naming
    the methods without a sweep whose every cell in a column failed (they have no sweep to finish)."""
    unfinished = unfinished_sweeps(study, rows, best)
    write_list_section(
        L, "Choices from an unfinished sweep",
        "These columns have not run every point of the method's sweep yet"
        + (" (nor, `bracket`, every neighbour of their best point)" if study.bracket else "")
        + ": the chosen point is the best of those run, and may change when the rest have run.",
        [f"{study.methods[b['method']]['label']}, {study.column_label(*column(b))}: {run} of {planned} sweep "
         "points run" for b, run, planned in unfinished if study.methods[b["method"]]["sweep"]])
    write_list_section(
        L, "Methods whose every cell failed",
        "These methods (without a sweep) have no finished cell in these columns: see the failed cells below.",
        [f"{study.methods[b['method']]['label']}, {study.column_label(*column(b))}: {b['failed']} failed cell(s)"
         for b, run, planned in unfinished if not study.methods[b["method"]]["sweep"]])


def write_sweep_edges(study, rows, best, L):
    """A section naming every choice at the edge of its sweep (else nothing)."""
    write_list_section(
        L, "Choices at the edge of their sweep",
        "These chosen points are the smallest or largest value their sweep tried at that column, so the "
        "best may lie beyond it; until the sweep is extended past it, a comparison with that method "
        "there may understate it.",
        [f"{study.methods[b['method']]['label']}, {study.column_label(*column(b))}: `{key}` {fmt_value(value)}, "
         f"{where} ({', '.join(fmt_value(t) for t in tried)})"
         for b, key, value, where, tried in sweep_edges(study, rows, best)])


def write_significances(study, best, cols_, L):
    """One table per baseline (the study's, or a method's own), of the methods compared with it."""
    groups = {}
    for m, spec in study.methods.items():
        if spec["baseline"] is not None and spec["baseline"] != m:
            groups.setdefault(spec["baseline"], []).append(m)
    for base, members in groups.items():
        write_significance(study, best, cols_, L, base, members)


def write_significance(study, best, cols_, L, base, members):
    """A table: each of `members`' chosen point against `base`'s in the same column, the
    difference of the final test figure and Welch's two-sided p over the seeds."""
    head = ["method"] + [study.column_label(*c) for c in cols_]
    unit = "points" if in_percent(study) else ""
    scale = 100.0 if in_percent(study) else 1.0
    L.append(f"## Against {study.methods[base]['label']} (difference of the final {study.metric}"
             + (f" in {unit}" if unit else "") + "; Welch's t-test over seeds, two-sided)\n")
    L.append("| " + " | ".join(head) + " |")
    L.append("|" + "---|" * len(head))

    def pick(method, c):  # the best point of `method` in column c, or None (also where every cell failed)
        return next((x for x in best if x["method"] == method and column(x) == c and x["seeds"]), None)

    for m in members:
        cells = []
        for c in cols_:
            r, b = pick(m, c), pick(base, c)
            if r is None or b is None:
                cells.append("–")
                continue
            w = welch(r["finals"], b["finals"])
            d = w[0] if w else sum(r["finals"]) / len(r["finals"]) - sum(b["finals"]) / len(b["finals"])
            cells.append((f"{scale * d:+.2f}" if unit else f"{d:+.4f}")
                         + (f" ({fmt_p(w[1])}, {noise_verdict(w[1])})" if w else f" ({NOT_JUDGED})"))
        L.append(f"| {study.methods[m]['label']} | " + " | ".join(cells) + " |")
    L.append("")
    if study.target is not None:
        # Steps to target: compared only where every seed of both reached it (a seed that did not
        # has no number of steps, only a lower bound). A steps-to-target study with a validation
        # figure counts them on it: its runs stop there (train.stop_at), before the test figure
        # need have reached the target.
        on_select = study.choose_by == "steps" and study.select
        figure = study.select if on_select else study.metric

        def steps_of(x):
            return select_steps(study, x) if on_select else steps_to_target(study, x["evals"])
        lines, gaps = [], {c: [] for c in cols_}
        for m in members:
            cells = []
            for c in cols_:
                r, b = pick(m, c), pick(base, c)
                if r is None or b is None:
                    cells.append("–")
                    continue
                sr = [steps_of(x) for x in r["records"]]
                sb = [steps_of(x) for x in b["records"]]
                for x in r["records"] + b["records"]:
                    steps = [st for st, _ in (x.get("select_evals", []) if on_select else x["evals"])]
                    gaps[c] += [b_ - a_ for a_, b_ in zip(steps, steps[1:])]
                if None in sr or None in sb:
                    cells.append("–")
                    continue
                w = welch(sr, sb)
                d = w[0] if w else sum(sr) / len(sr) - sum(sb) / len(sb)
                cells.append(f"{d:+.0f} " + (f"({fmt_p(w[1])}, {noise_verdict(w[1])})" if w else f"({NOT_JUDGED})"))
            lines.append(f"| {study.methods[m]['label']} | " + " | ".join(cells) + " |")
        if any("(p" in line or NOT_JUDGED in line for line in lines):  # a comparison to show
            # The evaluation interval (its most common gap) per column: the resolution of steps.
            every = [max(set(g), key=g.count) if g else None for g in gaps.values()]
            known = {e for e in every if e is not None}
            every_text = ""
            if known:
                every_text = (f"every {known.pop()} steps" if len(known) == 1 else
                              "every " + " / ".join("–" if e is None else str(e) for e in every)
                              + " steps in the columns from left to right")
            L.append(f"Steps to {figure} {fmt_metric(study, study.target)}"
                     + (" (validation: the figure the runs stop on; the seeds beyond the sweep's are fresh)"
                        if on_select else "") + " against the same baseline "
                     "(difference of the mean steps; Welch's t-test; – where a seed of either did not reach "
                     "it)" + (f", counted at evaluations {every_text}: a smaller difference is not resolved"
                               if every_text else "") + ":\n")
            L.append("| " + " | ".join(head) + " |")
            L.append("|" + "---|" * len(head))
            L.extend(lines)
            L.append("")
    L.append("Beyond seed noise: Welch's p < 0.05; within seed noise: p >= 0.05, the seeds cannot tell the "
             "two apart. A diverged "
             "seed counts at the figure it ended at (or `metric.chance`), so a spread that large makes any "
             "difference hard to establish.\n")


def select_figure(study, r):
    """A row's figure on the validation metric choices are made on: its final value, or with
    metric.choose_by: steps, the steps to the target (k/n seeds that reached it) or "not
    reached", with the step each seed that gave up (train.stop_at.give_up_after) stopped at."""
    if r["select_mean"] is None:
        return "–"
    one = r["select_seeds"] == 1
    s = fmt_metric(study, r["select_mean"], None if one else r["select_std"]) + (" (1 seed)" if one else "")
    if study.choose_by != "steps":
        return s
    if r["select_steps"] is not None:
        s = f"{r['select_steps']:.0f} steps ({r['select_reached']}/{r['seeds']})"
    else:
        s = f"not reached (final {s})"
    ended = [x for x in r["records"] if x.get("gave_up_at") is not None]
    # A deadline (cut_off) ends a run at its first evaluation from the deadline on; before it,
    # only give_up_after can have.
    cut = [x for x in ended if x.get("cut_off") and x["gave_up_at"] >= x["cut_off"]["at"]]
    gave = sorted(x["gave_up_at"] for x in ended if x not in cut)
    if gave:
        s += f"; gave up at step {', '.join(str(g) for g in gave)} (train.stop_at.give_up_after)"
    for x in cut:
        s += f"; cut off at step {x['gave_up_at']} ({x['cut_off']['by']} reached it in {x['cut_off']['at']})"
    return s


def write_report(study, records, out_dir, argv, planned):
    """report.md, cells.json and the plots: a function of the records alone (and of the argv that
    regenerates it). A file that cannot be written (a full disk, a read-only folder) is StudyError
    naming it; report.md and cells.json are then left as they were (each is written whole or not
    at all)."""
    try:
        return _write_report(study, records, out_dir, argv, planned)
    except OSError as e:
        raise StudyError(f"cannot write the report: {e.filename or out_dir}: {e.strerror or e} (a full disk or a "
                         f"read-only --results folder?); the finished cells stay recorded in their run folders: "
                         f"once it can be written, --report-only writes it") from None


def write_atomically(path, text):
    """Writes `text` to a temporary file beside `path` and renames it over `path`, so a session
    stopped mid-write, or a full disk, leaves the previous file whole; the temporary file does not
    outlive a failure."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if isinstance(e, OSError) and not e.filename:  # a write's ENOSPC names no file
            raise OSError(e.errno, e.strerror, tmp) from e
        raise


def _write_report(study, records, out_dir, argv, planned):
    os.makedirs(out_dir, exist_ok=True)
    rows = aggregate(study, records)
    for r in rows:
        r["point_label"] = point_label(r["point"])
    best = best_rows(study, rows)
    # Each record knows where it ran: cells run now carry the machine and the binary's commit,
    # cells taken from an earlier report's cells.json carry theirs. One that never recorded them
    # says so: the report never stamps today's machine or HEAD on an old cell.
    for r in records:
        r.setdefault("machine", "machine not recorded")
        r.setdefault("commit", "not recorded")
    # Wall seconds compare methods only when every cell ran on the same CPU model.
    cpus = sorted({r["machine"].split(", ")[0] for r in records})
    seconds_compare = len(cpus) <= 1
    if not seconds_compare:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(out_dir, "time_to_target.png"))  # an earlier report's, now misleading
    fits = critical_batch_fits(study, rows, best) if study.choose_by == "steps" else None
    write_plots(study, rows, best, out_dir, seconds_compare, fits)

    L = []
    L.append(f"# Study `{study.name}`\n")
    if study.question:
        L.append(study.question + "\n")
    L.append("## How it was made\n")
    L.append(f"- Regenerate: `/usr/bin/python3 tools/study.py {os.path.relpath(study.path, ROOT)}` "
             f"(finished cells are cached in `runs/studies/{study.name}/`; `--report-only` redraws this "
             f"report from them; `cells.json` here holds every cell's settings, status, eval curve, machine and "
             f"trainer commit and version, and a fresh clone reuses its cells instead of rerunning them while the "
             f"trainer's version is theirs: a cell run by another trainer version is stale and runs again, unless "
             f"`--any-trainer`).")
    L.append(f"- Base config `{study.base}`; budget {study.budget} {study.budget_key} per run; seeds "
             f"{', '.join(map(str, study.seeds))}"
             + "".join(f" (`{m}`'s chosen points also {', '.join(map(str, spec['confirm_seeds']))})"
                       for m, spec in study.methods.items() if spec["confirm_seeds"])
             + f"; metric `{study.metric}` ({study.goal}"
             + (f", target {fmt_metric(study, study.target)}" if study.target is not None else "")
             + (f", diverged if {'≤' if study.goal == 'max' else '≥'} {fmt_metric(study, study.diverged)}"
                if study.diverged is not None else "") + ").")
    if study.common:
        L.append("- Common overrides: " + ", ".join(f"`{k}: {fmt_value(v)}`" for k, v in study.common.items()) + ".")
    if study.select:
        rule = (f"the point whose seeds reached {fmt_metric(study, study.target)} on `{study.select}` most often, "
                f"then in the fewest steps on average" if study.choose_by == "steps" else
                f"the best mean `{study.select}`")
        L.append(f"- Choices are made on the validation figure `{study.select}` (the held-out part of the training "
                 f"set, `data.validation_size`): the best sweep point per method and column is {rule}; the test "
                 f"figure `{study.metric}` is reported for the chosen points only.")
    else:
        chosen_what = [w for w, present in (("its best sweep point per method and column",
                                             any(m["sweep"] for m in study.methods.values())),
                                            ("the choices its findings draw (an LR, a factor, a threshold)",
                                             bool(study.findings))) if present]
        if chosen_what:
            L.append(f"- **Choices were made on the test figure** `{study.metric}`: this study has no validation "
                     f"split (`metric.select`), so {' and '.join(chosen_what)} were made on the figures it "
                     f"reports, which flatters the chosen points. Rerunning with `data.validation_size` and "
                     f"`metric.select` chooses on held-out training data instead.")
    if study.bracket:
        L.append("- `bracket`: each column's sweep ran outwards from the previous size's choice (the next size's "
                 "for the smallest) and only as far as the neighbours of its best point (the points one swept key "
                 "one value away; the figure taken as unimodal along each key's values): a choice stands once all "
                 "its neighbours have run, so a column may have run fewer points than its sweep lists.")
    if study.cut_off:
        L.append("- `cut_off`: a cell still short of the target when another point of its method, column and seed "
                 "had reached it in fewer steps stopped there (`train.stop_at.give_up_at_step`: it could no longer "
                 "be chosen; its row says \"cut off\"), each column's points running from the previous size's "
                 "choice (the next size's for the smallest) outwards.")
    origins = {}
    for r in records:
        c = r["commit"] + (f" ({r['commit_note']})" if r.get("commit_note") else "")
        origins[(r["machine"], c)] = origins.get((r["machine"], c), 0) + 1
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
    L.append(f"- Cells: {len(done)} of {'up to ' if study.bracket else ''}{planned} finished"
             + (" (`bracket` runs only the sweep points a choice needs)" if study.bracket else "")
             + "; compute time of the finished runs "
             f"{fmt_time(sum(r['wall_s'] for r in done))}.")
    unfit = study.unfit_cells()
    if unfit:
        L.append(f"- Left out of the grid: {len(unfit)} sweep point{'s' if len(unfit) != 1 else ''} that do not fit "
                 f"their column's run, e.g. {unfit[0].name.rsplit('-s', 1)[0]}: {unfit[0].unfit}.")
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
        if spec["confirm_seeds"]:
            seeds += (f"; the point chosen per column (on seed{'s' if len(spec['seeds']) > 1 else ''} "
                      f"{', '.join(map(str, spec['seeds']))} alone) then runs seeds "
                      f"{', '.join(map(str, spec['confirm_seeds']))} too")
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

    table(f"## Final {study.metric} (mean ± std over seeds; † = some seeds diverged)"
          + (f" of the points chosen on {study.select}" if study.select else ""), final_text)
    if study.select:
        def select_text(r):
            s = select_figure(study, r)
            return s + (f" ({r['point_label']})" if r["point_label"] and s != "–" else "")
        what = f"steps to {fmt_metric(study, study.target)} on " if study.choose_by == "steps" else ""
        table(f"## Validation {what}{study.select} of the chosen points (what the choice was made on)", select_text)
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
            # Records from before the CPU family and model were recorded may name one of the later ones.
            vague = [c for c in cpus if c.endswith(")") and any(d.startswith(c[:-1] + "; ") for d in cpus)]
            count = f"{len(cpus) - len(vague)} to {len(cpus)}" if vague else f"{len(cpus)}"
            L.append(f"Wall seconds are left out of this table and its plot: the cells ran on {count} CPU "
                     f"models ({'; '.join(cpus)}"
                     + (f"; the older records without family and model ({'; '.join(vague)}) may be one of those "
                        f"with them" if vague else "") + "), so seconds would compare machines, not methods.\n")
    write_unfinished_sweeps(study, rows, best, L)
    write_sweep_edges(study, rows, best, L)
    write_significances(study, best, cols_, L)
    if study.choose_by == "steps":
        write_critical_batch(study, rows, fits, L)
    L.append("![final metric](final_vs_examples.png)\n")
    if study.target is not None:
        L.append("![steps to target](steps_to_target.png)\n")
        if os.path.isfile(os.path.join(out_dir, "time_to_target.png")):
            L.append("![time to target](time_to_target.png)\n")
        if fits is not None and os.path.isfile(os.path.join(out_dir, "critical_batch.png")):
            L.append("![where each method stops scaling](critical_batch.png)\n")
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
                if not seconds_compare else "")
             + (f". Test figures (`{study.metric}`: final, reached, steps and time to target) are shown for the "
                f"chosen points only (✓, chosen on `{study.select}`); the others show `·`" if study.select else "")
             + ".\n")
    chosen = {id(r) for r in best}
    sel_col = ([study.select + (" steps to target" if study.choose_by == "steps" else ""), "chosen"]
               if study.select else [])
    head_ = (["method", "sweep", "ranks", "examples/step", "seeds"] + sel_col
             + ["final", "diverged", "reached", "steps to target", "examples to target", "time to target s", "wall s"])
    L.append("| " + " | ".join(head_) + " |")
    L.append("|" + "---|" * len(head_))
    for r in rows:
        shown = not study.select or id(r) in chosen
        s2t = f"{r['steps_to_target']:.0f}" if r["steps_to_target"] is not None else "–"
        e2t = f"{r['steps_to_target'] * r['examples_per_step']:.0f}" if r["steps_to_target"] is not None else "–"
        t2t = f"{r['time_to_target']:.1f}" if r["time_to_target"] is not None else "–"
        wall = f"{r['wall_s']:.0f}" if r["wall_s"] is not None else "–"
        ranks = f"{r['ranks']}" + (f"×{r['micro_batches']}" if r["micro_batches"] > 1 else "")
        if len(study.variants) > 1:
            ranks += f", {study.variants[r['variant']]['label']}" if r["variant"] in study.variants else f", {r['variant']}"
        seeds = f"{r['seeds']}" + (f" (+{r['failed']} failed)" if r["failed"] else "")
        sel = [select_figure(study, r), "✓" if id(r) in chosen else ""] if study.select else []
        test = [fmt_spread(study, r), f"{r['reached']}/{r['seeds']}", s2t, e2t, t2t] if shown else ["·"] * 5
        cells = ([study.methods[r['method']]['label'], r['point_label'] or '–', ranks, str(r['examples_per_step']),
                  seeds] + sel + [test[0], str(r['diverged'])] + test[1:] + [wall])
        L.append("| " + " | ".join(cells) + " |")
    failed = [r for r in records if r["status"] == "failed"]
    if failed:
        L.append("\n## Failed cells (not counted above)\n")
        for r in failed:
            L.append(f"- `{r['name']}`: {r['reason']}")
    # cells.json first: when it cannot be written, report.md (whose header carries the time) is
    # left as it was too; when report.md cannot, cells.json holds only the records (an unchanged
    # set of them: the same bytes).
    write_cells_json(os.path.join(out_dir, "cells.json"), study, records)
    write_atomically(os.path.join(out_dir, "report.md"), "\n".join(L) + "\n")
    return rows, best


def write_cells_json(path, study, records):
    """cells.json: one cell a line, sorted by name, so a new or rerun cell is a diff of one line (an
    indented dump shifted thousands of lines a cell); written to a temporary file and renamed, so a
    session stopped mid-write keeps the previous file whole."""
    head = json.dumps({"study": study.name, "metric": study.metric})[:-1]
    lines = [json.dumps(r) for r in sorted(records, key=lambda r: r["name"])]
    write_atomically(path, head + ', "cells": [\n' + ",\n".join(lines) + "\n]}\n")
