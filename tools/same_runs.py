#!/usr/bin/python3
"""Whether two trainer output folders hold the same run but for timings: for a refactor that must
change no behaviour, run the same configs with the old and the new trainer and compare.

    /usr/bin/python3 tools/same_runs.py OLD NEW     (two run folders, or two folders of run folders)

Compares metrics.jsonl line by line (keys in order, values exactly), summary.json as JSON, and
every checkpoint: the tensors of each safetensors file byte for byte, and the JSON. Left out:
timings, the commit, the run id, file sizes and CRCs (safetensors metadata may differ in order),
and the config and its hash (they cover output.dir). Folders of runs compare run folder by run folder; a
run on one side only differs. Exits 1 and names what differs."""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runlog import BadLine, read_metrics  # noqa: E402

TIMINGS = {"samples_per_s", "compute_s", "comm_s", "exposed_comm_s", "wall_s", "wall_seconds",
           "compute_seconds", "comm_seconds", "exposed_comm_seconds", "peak_rss_mb_max_rank",
           "gpu_peak_allocated_mb", "commit", "trainer_version"}
CHECKPOINT_VARYING = {"wall_seconds", "run_id", "files", "config_hash", "config", "log_window_seconds"}


def tensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    meta = header.pop("__metadata__", {})
    return meta, {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
                  for k, v in header.items()}


def differences(a, b):
    out = []
    try:
        ma, mb = read_metrics(a, strict=True) or [], read_metrics(b, strict=True) or []
    except BadLine as e:  # a damaged line inside: the runs cannot be the same
        return [str(e)]
    if len(ma) != len(mb):
        out.append(f"metrics.jsonl: {len(ma)} lines against {len(mb)}")
    for i, (x, y) in enumerate(zip(ma, mb)):
        x, y = [(k, v) for k, v in x.items() if k not in TIMINGS], [(k, v) for k, v in y.items() if k not in TIMINGS]
        if x != y:
            out.append(f"metrics.jsonl line {i + 1}: {dict(x)} against {dict(y)}")
            break
    sa, sb = (os.path.join(d, "summary.json") for d in (a, b))
    if os.path.isfile(sa) or os.path.isfile(sb):
        ja, jb = ({k: v for k, v in json.load(open(p)).items() if k not in TIMINGS} if os.path.isfile(p) else None
                  for p in (sa, sb))
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
        if f.endswith(".safetensors") and tensors(pa) != tensors(pb):
            out.append(f"checkpoints/{f}: tensors or metadata differ")
        elif f.endswith(".json"):
            ja, jb = ({k: v for k, v in json.load(open(p)).items() if k not in CHECKPOINT_VARYING} for p in (pa, pb))
            if ja != jb:
                out.append(f"checkpoints/{f}: " + ", ".join(k for k in sorted(set(ja) | set(jb)) if ja.get(k) != jb.get(k)))
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = sys.argv[1:]
    bad = 0
    if os.path.isfile(os.path.join(a, "metrics.jsonl")):
        runs = [""]
    else:  # folders of runs: the same run folders on both sides, and at least one
        def subdirs(x):
            return {d for d in os.listdir(x) if os.path.isdir(os.path.join(x, d))} if os.path.isdir(x) else set()
        in_a, in_b = subdirs(a), subdirs(b)
        if not in_a | in_b:
            sys.exit(f"same_runs.py: {a} holds neither metrics.jsonl nor run folders")
        for side, only in ((b, in_b - in_a), (a, in_a - in_b)):
            for run in sorted(only):
                print(f"{run}: only in {side}")
                bad += 1
        runs = sorted(in_a & in_b)
    for run in runs:
        diff = differences(os.path.join(a, run), os.path.join(b, run))
        print(f"{run or a}: {'same' if not diff else 'DIFFERENT'}")
        for d in diff:
            print("  " + d)
        bad += bool(diff)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
