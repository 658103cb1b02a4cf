#!/usr/bin/env bash
# Does communication hide behind backward? Step time of one configuration at 1 rank and at 2 ranks
# (same per-rank batch, one thread per rank, synthetic data), for gradient sync (average) and for
# overlapped model-delta sync (adasum), from the trainer's own per-step figures; the ratio is
# the 2-rank step time over the 1-rank one (1.0 = communication fully hidden). Also the peak
# resident memory of each run (summary.json), e.g. delta sync against gradient sync.
#   tools/bench_overlap.sh [MODEL] [BATCH] [STEPS] [extra trainer args...]
#   (default: resnet20_mnist 64 60; resnet50 takes --set data.image_shape=[3,224,224])
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-resnet20_mnist} batch=${2:-64} steps=${3:-60}
shift $(( $# > 3 ? 3 : $# ))
cmake --build build -j "$(nproc)" --target trainer >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/b.yaml" <<YAML
model: {name: $model}
data: {name: synthetic, size: 100000, eval_size: 0, workers: 1}
optimizer: {name: sgd, lr: 0.01, momentum: 0.9}
reducer: {name: average}
train: {steps: $steps, batch_per_rank: $batch, threads: 1, log_every: $steps, checksum_every: 0}
checkpoint: {every: 1000000}
YAML
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
run() {  # ranks reducer target tag
  mpirun -np "$1" --oversubscribe --bind-to none build/bin/trainer --config "$work/b.yaml" --set reducer.name="$2" \
    --set reducer.target="$3" --set output.dir="$work/$4" "${@:5}" >"$work/$4.log" 2>&1 || { tail -5 "$work/$4.log"; exit 1; }
}
run 1 average gradients one "$@"
run 2 average gradients grad "$@"
run 2 adasum model_delta delta "$@"
/usr/bin/python3 - "$work" "$model" "$batch" "$steps" <<'PY'
import json, sys, os
sys.path.insert(0, "tools")
from runlog import read_metrics
work, model, batch, steps = sys.argv[1:]
def load(tag):
    rows = [r for r in read_metrics(os.path.join(work, tag), strict=True) if "loss" in r]
    s = json.load(open(os.path.join(work, tag, "summary.json")))
    r = rows[-1]  # one line: the mean over all steps
    return r["compute_s"] + r["comm_s"], r["comm_s"], r["exposed_comm_s"], s["peak_rss_mb_max_rank"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"{model} batch {batch} per rank, {steps} steps, 1 thread per rank; CPU: {cpu}")
one = load("one")
print(f"{'case':34s} {'step ms':>8s} {'comm ms':>8s} {'exposed ms':>10s} {'vs 1 rank':>9s} {'peak MB':>8s}")
for tag, label in (("one", "1 rank"), ("grad", "2 ranks, gradients/average"), ("delta", "2 ranks, model_delta/adasum")):
    st, cm, ex, mb = load(tag)
    print(f"{label:34s} {1e3*st:8.1f} {1e3*cm:8.1f} {1e3*ex:10.1f} {st/one[0]:9.2f} {mb:8.0f}")
PY
