"""Reads a trainer output folder's metrics.jsonl (one JSON object per line: training lines, eval
lines, each with its integer "step") and summary.json. Used by tools/study.py, tools/compare.py,
tools/same_runs.py and tools/bench_overlap.sh: the rules for a damaged file live here."""
import json
import os
import sys

METRICS = "metrics.jsonl"
SUMMARY = "summary.json"


class BadFile(ValueError):
    """A run's file that is not what the trainer writes; the message names the file (and line)."""


class BadLine(BadFile):
    """A line of metrics.jsonl that is not a metrics line; the message names the file and line."""


def _line_problem(raw):
    """(the object, None) for a metrics line as the trainer writes it (UTF-8, a JSON object with an
    integer "step"), else (None, what is wrong with it)."""
    try:
        row = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 text ({e.reason} at byte {e.start})"
    except json.JSONDecodeError as e:
        return None, f"not JSON ({e})"
    if not isinstance(row, dict):
        return None, f"not a JSON object (a {type(row).__name__})"
    if not isinstance(row.get("step"), int) or isinstance(row.get("step"), bool):
        return None, "no integer \"step\"" + (f" (step {row['step']!r})" if "step" in row else "")
    return row, None


def read_metrics(folder, strict=False):
    """The objects of folder/metrics.jsonl in file order (blank lines skipped); None when there is
    no such file. A line that is not a metrics line (not UTF-8, not JSON, not a JSON object, no
    integer "step") is skipped, or with strict raises BadLine, except the last line when it is not
    JSON: one cut short (a crash, a full disk) is skipped with a note on stderr either way (the
    trainer rewrites the file without it when the run resumes). A file that cannot be read raises
    BadFile."""
    path = os.path.join(folder, METRICS)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            lines = [(n, line.strip()) for n, line in enumerate(f, 1) if line.strip()]
    except OSError as e:
        raise BadFile(f"{path}: cannot read it ({e.strerror})") from None
    rows = []
    for i, (n, line) in enumerate(lines):
        row, problem = _line_problem(line)
        if row is not None:
            rows.append(row)
        elif i == len(lines) - 1 and problem.startswith(("not JSON", "not UTF-8")):
            print(f"{path}:{n}: the last line is cut short (a crash?): left out", file=sys.stderr)
        elif strict:
            raise BadLine(f"{path}:{n}: {problem}")
    return rows


def read_summary(folder):
    """folder/summary.json as a dict (read_json_object); None when there is no such file."""
    path = os.path.join(folder, SUMMARY)
    return read_json_object(path) if os.path.isfile(path) else None


def read_json_object(path):
    """A JSON file the trainer writes (summary.json, a checkpoint's .json) as a dict; BadFile
    (naming it) when it is not a JSON object in UTF-8 or cannot be read."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except OSError as e:
        raise BadFile(f"{path}: cannot read it ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise BadFile(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise BadFile(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise BadFile(f"{path}: not a JSON object (a {type(doc).__name__})")
    return doc
