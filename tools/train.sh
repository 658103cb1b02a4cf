#!/usr/bin/env bash
# The main command: installs what is missing, fetches the data the config needs, builds, trains
# on RANKS MPI ranks, then prints the test accuracy and where the metrics and the plot are.
#   tools/train.sh [CONFIG] [RANKS] [--set key=value ...]
#   (default: configs/mnist_lenet_adasum.yaml on 4 ranks; output in runs/<config>-np<RANKS>)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/mnist_lenet_adasum.yaml}
ranks=${2:-4}
shift $(( $# > 2 ? 2 : $# ))
[ -f "$config" ] || { echo "train.sh: config '$config' not found (see configs/)" >&2; exit 2; }
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || { echo "train.sh: RANKS must be a positive integer, got '$ranks'" >&2; exit 2; }

bash tools/setup.sh --train
# The data the config names (data.name), fetched and verified once.
data_name=$(awk '/^data:/{d=1; next} /^[^ #]/{d=0} d && $1=="name:"{print $2; exit}' "$config")
case "$data_name" in
  mnist) bash tools/fetch_data.sh mnist ;;
  fashion_mnist) bash tools/fetch_data.sh fashion-mnist ;;
  mlm) bash tools/fetch_data.sh bert-vocab corpus ;;
esac

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target trainer prepare_mlm
# Training shards and a held-out evaluation set (every 50th document), made together so that
# they never share a document; an older data/mlm without its evaluation set is remade.
if [ "$data_name" = mlm ] && { [ ! -d data/mlm ] || [ ! -d data/mlm-eval ]; }; then
  echo "train.sh: tokenising the corpus into data/mlm and data/mlm-eval (held out)"
  build/bin/prepare_mlm --vocab data/bert/vocab.txt --out data/mlm \
    --eval-out data/mlm-eval --eval-fraction 0.02 data/corpus
fi

run=runs/$(basename "$config" .yaml)-np$ranks
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np "$ranks" --oversubscribe --mca mpi_yield_when_idle 1 --bind-to none \
  build/bin/trainer --config "$config" --set output.dir="$run" --set checkpoint.overwrite=true "$@"

/usr/bin/python3 tools/compare.py "$run" -o "$run/curves.png" >/dev/null
echo
echo "train.sh: run folder      $run"
echo "train.sh: metrics         $run/metrics.jsonl (summary: $run/summary.json)"
echo "train.sh: plot            $run/curves.png"
echo "train.sh: compare reducers: /usr/bin/python3 tools/compare.py runs/* -o compare.png"
/usr/bin/python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print("train.sh: final test accuracy %.2f%%" % (100*s["eval_top1"]) if "eval_top1" in s else ("train.sh: final MLM accuracy %.2f%%" % (100*s["eval_mlm_accuracy"]) if "eval_mlm_accuracy" in s else "train.sh: no evaluation in this config"))' "$run/summary.json"
