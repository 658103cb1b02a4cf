"""Reads a trainer output folder's metrics.jsonl (one JSON object per line: training lines, eval
lines). Used by tools/study.py, tools/compare.py and tools/bench_overlap.sh."""
import json
import os
import sys

METRICS = "metrics.jsonl"


class BadLine(ValueError):
    """A line of metrics.jsonl that is not JSON; the message names the file and line."""


def read_metrics(folder, strict=False):
    """The objects of folder/metrics.jsonl in file order (blank lines skipped); None when there is
    no such file. A line that is not JSON is skipped, or with strict raises BadLine, except the
    last line: one cut short (a crash, a full disk) is skipped with a note on stderr either way
    (the trainer rewrites the file without it when the run resumes)."""
    path = os.path.join(folder, METRICS)
    if not os.path.isfile(path):
        return None
    rows = []
    with open(path) as f:
        lines = [(n, line.strip()) for n, line in enumerate(f, 1) if line.strip()]
    for i, (n, line) in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                print(f"{path}:{n}: the last line is cut short (a crash?): left out", file=sys.stderr)
            elif strict:
                raise BadLine(f"{path}:{n}: not JSON ({e})") from None
    return rows
