"""Reads a trainer output folder's metrics.jsonl (one JSON object per line: training lines, eval
lines). Used by tools/study.py, tools/compare.py and tools/bench_overlap.sh."""
import json
import os

METRICS = "metrics.jsonl"


class BadLine(ValueError):
    """A line of metrics.jsonl that is not JSON; the message names the file and line."""


def read_metrics(folder, strict=False):
    """The objects of folder/metrics.jsonl in file order (blank lines skipped); None when there is
    no such file. A line that is not JSON (one cut by a crash) is skipped, or with strict raises
    BadLine."""
    path = os.path.join(folder, METRICS)
    if not os.path.isfile(path):
        return None
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                if strict:
                    raise BadLine(f"{path}:{n}: not JSON ({e})") from None
    return rows
