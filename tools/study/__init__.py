"""Study runner: trains every cell of a grid (method x ranks x micro-batches x seeds, plus LR
sweeps) under mpirun, caches finished cells, and writes a report with plots.

    /usr/bin/python3 tools/study.py studies/mnist_lenet_scaling.yaml          # run / resume
    /usr/bin/python3 tools/study.py studies/mnist_lenet_scaling.yaml --dry-run
    /usr/bin/python3 tools/study.py studies/mnist_lenet_scaling.yaml --report-only
    /usr/bin/python3 tools/study.py STUDY --only method=adasum_delta --only ranks=4,8

A study file (studies/*.yaml; the format is documented in studies/README.md) names a base
config, a budget, the metric and its target, the axes (ranks, micro_batches, seeds), common
overrides and the methods: each method is a set of trainer overrides, optionally with a sweep
(lists of values; the report keeps, per rank count, the sweep point with the best mean metric,
or of metric.select, a validation figure, when the study names one, and lists all of them) and its own seeds (fewer than the study's, for a probe). A value written
"=EXPR" is a Python expression over ranks, micro_batches, batch_per_rank, examples_per_step,
steps_per_epoch, epochs and total_steps (e.g. "=1/ranks" or "=steps_per_epoch").

A cell is one trainer run; its folder (under --runs, default runs/studies/<study>/) is named by
the cell and a hash of its resolved settings, and holds the run's output plus study_cell.json
once it has finished. A later invocation skips finished cells, so an interrupted study resumes
where it stopped (an unfinished cell starts again); changing a setting changes the hash and
reruns only the cells it touches; a cell run by another trainer version (`trainer --version`)
is stale and runs again (--any-trainer keeps it). Diverged runs (NaN/Inf stop, or a final metric past
`metric.diverged`) are results, kept and counted; other failures are not cached, are reported,
and make the runner exit non-zero after the remaining cells ran.

Output in --results (default docs/results/<study>/), rewritten after every finished cell:
report.md, cells.json (every cell's settings, status, final metric, eval curve), curves.png,
final_vs_examples.png, steps_to_target.png. Needs Debian's python3-yaml and python3-matplotlib
(/usr/bin/python3).
"""
# The modules: spec (the study file, its grid of cells, settings hashes), run (running a cell,
# the cache of finished cells), report (statistics, report.md, cells.json), plots (the PNGs)
# and cli (the command line, which tools/study.py runs).
