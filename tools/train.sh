#!/usr/bin/env bash
# The main command: installs what is missing, fetches the data, builds, trains under mpirun and
# prints the test accuracy, where the metrics are and one plot.
#   tools/train.sh                    Adasum against averaging, side by side: LeNet-5 on MNIST at
#                                     ADA_COMPARE_RANKS (default 32) ranks x 32 examples, 2 epochs
#                                     each (about two minutes on 2 cores); output in
#                                     runs/compare-np<RANKS>/, the plot compare.png
#   tools/train.sh CONFIG [RANKS] [--set key=value ...]
#                                     one run of CONFIG on RANKS ranks (default 4); output in
#                                     runs/<config>-np<RANKS>/, the plot curves.png
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Everything a run needs: packages, the data the config names (data.name), the trainer.
prepare() {  # config...
  bash tools/setup.sh --train
  local c data_name
  for c in "$@"; do
    data_name=$(awk '/^data:/{d=1; next} /^[^ #]/{d=0} d && $1=="name:"{print $2; exit}' "$c")
    case "$data_name" in
      mnist) bash tools/fetch_data.sh mnist ;;
      fashion_mnist) bash tools/fetch_data.sh fashion-mnist ;;
      mlm) bash tools/fetch_data.sh mlm-shards ;;
    esac
  done
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j "$(nproc)" --target trainer
}

train() {  # ranks config output-dir [trainer args...]
  local ranks=$1 config=$2 out=$3
  shift 3
  mpirun -np "$ranks" --oversubscribe --mca mpi_yield_when_idle 1 --bind-to none \
    build/bin/trainer --config "$config" --set output.dir="$out" --set checkpoint.overwrite=true "$@"
}

accuracy() {  # run folder -> the final figure from summary.json
  /usr/bin/python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print("test accuracy %.2f%%" % (100*s["eval_top1"]) if "eval_top1" in s else ("MLM accuracy %.2f%%" % (100*s["eval_mlm_accuracy"]) if "eval_mlm_accuracy" in s else "no evaluation in this config"))' "$1/summary.json"
}

if [ $# -eq 0 ]; then
  ranks=${ADA_COMPARE_RANKS:-32}
  [[ "$ranks" =~ ^[1-9][0-9]*$ ]] || { echo "train.sh: ADA_COMPARE_RANKS must be a positive integer, got '$ranks'" >&2; exit 2; }
  prepare configs/mnist_lenet_adasum.yaml
  dir=runs/compare-np$ranks
  # The shipped configs with the same budget: averaging with its textbook LR rule (x ranks, with
  # warm-up) against Adasum with the single-worker LR. 2 epochs at 32 ranks are 117 steps: the
  # warm-up is cut to 20 steps for both (as in the study at 16-64 ranks).
  for r in adasum average; do
    echo "train.sh: $r, $ranks ranks x 32 examples, 2 epochs (configs/mnist_lenet_$r.yaml, warm-up 20 steps)"
    train "$ranks" configs/mnist_lenet_$r.yaml "$dir/$r" --set train.epochs=2 --set train.log_every=10 \
      --set schedule.warmup_steps=20
  done
  /usr/bin/python3 tools/compare.py "$dir/adasum" "$dir/average" -o "$dir/compare.png" >/dev/null
  echo
  echo "train.sh: Adasum (configs/mnist_lenet_adasum.yaml),   $ranks ranks: $(accuracy "$dir/adasum")"
  echo "train.sh: average (configs/mnist_lenet_average.yaml), $ranks ranks: $(accuracy "$dir/average")"
  echo "train.sh: plot $dir/compare.png; metrics $dir/{adasum,average}/metrics.jsonl"
  echo "train.sh: one seed; averaging with the linear LR rule only. The full study (4-64 ranks, 3 seeds,"
  echo "          square-root rule and a swept LR for averaging): docs/results/mnist_lenet_scaling/report.md"
  echo "train.sh: one config: tools/train.sh configs/mnist_lenet_adasum.yaml [RANKS] [--set key=value ...]"
  exit 0
fi

config=$1
ranks=${2:-4}
shift $(( $# > 2 ? 2 : $# ))
[ -f "$config" ] || { echo "train.sh: config '$config' not found (see configs/)" >&2; exit 2; }
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || { echo "train.sh: RANKS must be a positive integer, got '$ranks'" >&2; exit 2; }
prepare "$config"
run=runs/$(basename "$config" .yaml)-np$ranks
train "$ranks" "$config" "$run" "$@"
/usr/bin/python3 tools/compare.py "$run" -o "$run/curves.png" >/dev/null
echo
echo "train.sh: run folder      $run"
echo "train.sh: metrics         $run/metrics.jsonl (summary: $run/summary.json)"
echo "train.sh: plot            $run/curves.png"
echo "train.sh: compare reducers: /usr/bin/python3 tools/compare.py runs/* -o compare.png"
echo "train.sh: final $(accuracy "$run")"
