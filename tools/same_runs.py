#!/usr/bin/python3
"""Whether two trainer output folders hold the same run but for timings: for a refactor that must
change no behaviour, run the same configs with the old and the new trainer and compare.

    /usr/bin/python3 tools/same_runs.py OLD NEW     (two run folders, or two folders of run folders)

Compares metrics.jsonl line by line (keys in order, values exactly), summary.json as JSON, and
every checkpoint: the tensors of each safetensors file byte for byte, and the JSON. Left out:
timings, the commit, the run id, file sizes and CRCs (safetensors metadata may differ in order),
and the config and its hash (they cover output.dir). Folders of runs compare run folder by run folder; a
run on one side only differs. A run folder holds metrics.jsonl, summary.json or checkpoints/; a
folder of runs holds at least one run folder (other folders in it are not runs and are left out).
Exits 1 and names what differs; a damaged file (a metrics line, summary.json, a checkpoint) or a
metrics.jsonl with no metrics line is named and the run is NOT COMPARED (exit 1); a path that
does not exist, or is neither a run folder nor holds one, is refused (exit 2)."""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runlog import METRICS, SUMMARY, BadFile, read_json_object, read_metrics, read_summary  # noqa: E402

TIMINGS = {"samples_per_s", "compute_s", "comm_s", "exposed_comm_s", "wall_s", "wall_seconds",
           "compute_seconds", "comm_seconds", "exposed_comm_seconds", "peak_rss_mb_max_rank",
           "gpu_peak_allocated_mb", "commit", "trainer_version"}
CHECKPOINT_VARYING = {"wall_seconds", "run_id", "files", "config_hash", "config", "log_window_seconds"}


def is_run(folder):
    """Whether `folder` is a trainer output folder: it holds metrics.jsonl, summary.json or checkpoints/."""
    return (os.path.isfile(os.path.join(folder, METRICS)) or os.path.isfile(os.path.join(folder, SUMMARY))
            or os.path.isdir(os.path.join(folder, "checkpoints")))


def tensors(path):
    """(metadata, {name: (dtype, shape, bytes)}) of a safetensors file; BadFile naming it when damaged."""
    try:
        with open(path, "rb") as f:
            b = f.read()
        n = struct.unpack("<Q", b[:8])[0]
        header = json.loads(b[8:8 + n].decode("utf-8"))
        meta = header.pop("__metadata__", {})
        out = {}
        for k, v in header.items():
            lo, hi = v["data_offsets"]
            if not 0 <= lo <= hi <= len(b) - 8 - n:
                raise ValueError(f"tensor {k}'s data_offsets {lo}..{hi} run past the file's end")
            out[k] = (v["dtype"], v["shape"], b[8 + n + lo:8 + n + hi])
        return meta, out
    except OSError as e:
        raise BadFile(f"{path}: cannot read it ({e.strerror})") from None
    except (ValueError, struct.error, KeyError, TypeError, AttributeError) as e:
        raise BadFile(f"{path}: not a safetensors file ({type(e).__name__}: {e})") from None


def differences(a, b):
    """(what keeps the runs from being compared: damaged files, named; what differs)."""
    problems, out = [], []
    ms = []
    for d in (a, b):
        try:
            ms.append(read_metrics(d, strict=True))
        except BadFile as e:  # a damaged line inside: the runs cannot be compared
            problems.append(str(e))
            ms.append(None)
        else:
            if ms[-1] == []:
                problems.append(f"{os.path.join(d, METRICS)} holds no metrics line (a run that logged nothing?)")
    ma, mb = ms
    if not problems:
        if (ma is None) != (mb is None):
            out.append(f"{METRICS}: only in {a if mb is None else b}")
        ma, mb = ma or [], mb or []
        if len(ma) != len(mb):
            out.append(f"metrics.jsonl: {len(ma)} lines against {len(mb)}")
        for i, (x, y) in enumerate(zip(ma, mb)):
            x, y = [(k, v) for k, v in x.items() if k not in TIMINGS], [(k, v) for k, v in y.items() if k not in TIMINGS]
            if x != y:
                out.append(f"metrics.jsonl line {i + 1}: {dict(x)} against {dict(y)}")
                break
    try:
        ja, jb = ({k: v for k, v in s.items() if k not in TIMINGS} if s is not None else None
                  for s in (read_summary(a), read_summary(b)))
    except BadFile as e:
        problems.append(str(e))
    else:
        if ja != jb:
            keys = sorted(set(ja or {}) | set(jb or {}))
            out.append("summary.json: " + ", ".join(f"{k} {(ja or {}).get(k)} against {(jb or {}).get(k)}"
                                                   for k in keys if (ja or {}).get(k) != (jb or {}).get(k)))
    ca, cb = (os.path.join(d, "checkpoints") for d in (a, b))
    fa = sorted(os.listdir(ca)) if os.path.isdir(ca) else []
    fb = sorted(os.listdir(cb)) if os.path.isdir(cb) else []
    if fa != fb:
        out.append(f"checkpoints: {fa} against {fb}")
    for f in (f for f in fa if f in fb):
        pa, pb = os.path.join(ca, f), os.path.join(cb, f)
        try:
            if f.endswith(".safetensors") and tensors(pa) != tensors(pb):
                out.append(f"checkpoints/{f}: tensors or metadata differ")
            elif f.endswith(".json"):
                ja, jb = ({k: v for k, v in read_json_object(p).items() if k not in CHECKPOINT_VARYING} for p in (pa, pb))
                if ja != jb:
                    out.append(f"checkpoints/{f}: " + ", ".join(k for k in sorted(set(ja) | set(jb)) if ja.get(k) != jb.get(k)))
        except BadFile as e:
            problems.append(str(e))
    return problems, out


def refuse(message):
    print(f"same_runs.py: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = sys.argv[1:]
    for x in (a, b):
        if not os.path.exists(x):
            refuse(f"{x} does not exist")
        if not os.path.isdir(x):
            refuse(f"{x} is not a folder (a run folder, or a folder of run folders)")
    bad = 0
    if is_run(a) or is_run(b):
        for x, y in ((a, b), (b, a)):
            if not is_run(x):
                refuse(f"{y} is a run folder but {x} is not (no metrics.jsonl, summary.json or checkpoints/)")
        runs = [""]
    else:  # folders of runs: the same run folders on both sides, and at least one on each
        def subruns(x):
            return {d for d in os.listdir(x) if os.path.isdir(os.path.join(x, d)) and is_run(os.path.join(x, d))}
        in_a, in_b = subruns(a), subruns(b)
        for x, got in ((a, in_a), (b, in_b)):
            if not got:
                refuse(f"{x} is neither a run folder (no metrics.jsonl, summary.json or checkpoints/) "
                       "nor holds run folders")
        for side, only in ((b, in_b - in_a), (a, in_a - in_b)):
            for run in sorted(only):
                print(f"{run}: only in {side}")
                bad += 1
        runs = sorted(in_a & in_b)
    for run in runs:
        problems, diff = differences(os.path.join(a, run), os.path.join(b, run))
        print(f"{run or a}: {'NOT COMPARED' if problems else 'DIFFERENT' if diff else 'same'}")
        for d in problems + diff:
            print("  " + d)
        bad += bool(problems or diff)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
