#!/usr/bin/env bash
# The main command: installs what is missing, fetches the data, builds, trains under mpirun and
# prints the test accuracy, where the metrics are and one plot.
#   tools/train.sh                    Adasum against averaging, side by side: LeNet-5 on MNIST at
#                                     ADA_COMPARE_RANKS (default 32) ranks x 32 examples, each at
#                                     the LR and warm-up its study chose on validation for that
#                                     rank count, and averaging with the linear LR rule too; 6
#                                     epochs each (about three minutes on 2 cores); output in
#                                     runs/compare-np<RANKS>/, the plot compare.png
#   tools/train.sh --resume           the same comparison, each run going on from its last
#                                     checkpoint (a finished run only evaluates again)
#   tools/train.sh CONFIG [RANKS] [--set key=value ...]
#                                     one run of CONFIG on RANKS ranks (default 4); output in
#                                     runs/<config>-np<RANKS>/, the plot curves.png
# ADA_TRAINER=PATH (absolute, or from the repository root) runs that trainer, already built (e.g.
# build-cuda/bin/trainer), instead of building build/bin/trainer; the command printed to go on
# after Ctrl-C keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
trainer=${ADA_TRAINER:-build/bin/trainer}
keep_trainer=${ADA_TRAINER:+ADA_TRAINER=$(printf '%q' "$ADA_TRAINER") }

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
      text_classification) bash tools/fetch_data.sh spam bert-vocab ;;
      # squad and image_folder: SQuAD and ImageNet cannot be installed here; data.path names them.
    esac
  done
  if [ -n "${ADA_TRAINER:-}" ]; then
    [ -x "$trainer" ] || { echo "train.sh: ADA_TRAINER=$trainer is not an executable trainer (unset ADA_TRAINER to build build/bin/trainer)" >&2; exit 2; }
    return 0
  fi
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j "$(nproc)" --target trainer
}

resuming() { case " $* " in *" --resume "*) return 0 ;; *) return 1 ;; esac; }

# Ctrl-C or kill stops the run at its next step with a checkpoint there (tools/mpirun_stopping.py:
# mpirun itself would kill the ranks 1 s after SIGINT or SIGTERM), and then this script (exit 130).
train() {  # ranks config output-dir [trainer args...]; the output also goes to output-dir/train.log
  local ranks=$1 config=$2 out=$3 rc=0
  shift 3
  mkdir -p "$out"
  resuming "$@" || : > "$out/train.log"  # a resumed run's output goes on after the run's so far
  /usr/bin/python3 tools/mpirun_stopping.py "$out/train.log" \
    mpirun -np "$ranks" --oversubscribe --mca mpi_yield_when_idle 1 --bind-to none \
    "$trainer" --config "$config" --set output.dir="$out" --set checkpoint.overwrite=true "$@" || rc=$?
  if [ "$rc" -eq 130 ]; then
    echo "train.sh: interrupted; $out holds the run up to its last checkpoint${go_on:+; to go on: $go_on}" >&2
    exit 130
  fi
  return "$rc"
}

# Prints a run's final figure, or says it collapsed: stopped on NaN/Inf (exit status != 0 with
# the trainer's non-finite message in train.log), or a top-1 at chance (<= 20%; 10 classes).
result() {  # run folder, exit status of train()
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, os, sys
run, rc = sys.argv[1], int(sys.argv[2])
log = open(os.path.join(run, "train.log"), errors="replace").read() if os.path.exists(os.path.join(run, "train.log")) else ""
s = json.load(open(os.path.join(run, "summary.json"))) if os.path.exists(os.path.join(run, "summary.json")) else {}
if rc != 0:
    print("COLLAPSED: stopped on a NaN/Inf loss" if "NaN/Inf" in log else f"FAILED (exit {rc}; see {run}/train.log)")
elif "eval_top1" in s:
    val = f", validation {100 * s['val_top1']:.2f}%" if "val_top1" in s else ""
    print(("COLLAPSED: " if s["eval_top1"] <= 0.2 else "") + f"test accuracy {100 * s['eval_top1']:.2f}%{val}")
elif "eval_mlm_accuracy" in s:
    print(f"MLM accuracy {100 * s['eval_mlm_accuracy']:.2f}%")
else:
    print("no evaluation in this config")
PY
}

if [ $# -eq 0 ] || { [ $# -eq 1 ] && [ "$1" = --resume ]; }; then
  ranks=${ADA_COMPARE_RANKS:-32}
  [[ "$ranks" =~ ^[1-9][0-9]*$ ]] || { echo "train.sh: ADA_COMPARE_RANKS must be a positive integer, got '$ranks'" >&2; exit 2; }
  again=()
  [ $# -eq 1 ] && again=(--resume auto)
  go_on="${ADA_COMPARE_RANKS:+ADA_COMPARE_RANKS=$ranks }${keep_trainer}tools/train.sh --resume"
  prepare configs/mnist_lenet_adasum.yaml
  dir=runs/compare-np$ranks
  # Each method at the point its study chose on validation accuracy for this rank count
  # (mnist_lenet_averaging_stress, else mnist_lenet_scaling's committed cells), run as that
  # study's seed-1 cell: the same budget (6 epochs), warm-up, LR and held-out images. Averaging
  # also runs with the textbook linear rule (LR 0.05 x ranks) at the chosen point's warm-up.
  mkdir -p "$dir"
  # A fresh comparison leaves nothing of an earlier one for a later --resume to go on from.
  [ ${#again[@]} -gt 0 ] || rm -rf "$dir/adasum" "$dir/average" "$dir/average_linear"
  ada_json=$dir/chosen_adasum.json avg_json=$dir/chosen_average.json
  pick=""
  for s in "mnist_lenet_averaging_stress adasum average" "mnist_lenet_scaling adasum_grad average_swept"; do
    read -r study ada avg <<< "$s"
    if /usr/bin/python3 tools/study.py "studies/$study.yaml" --chosen "$ada@$ranks" > "$ada_json" 2>/dev/null &&
       /usr/bin/python3 tools/study.py "studies/$study.yaml" --chosen "$avg@$ranks" > "$avg_json" 2>/dev/null; then
      pick=$study; break
    fi
  done
  sets() { /usr/bin/python3 -c 'import json,sys; print(" ".join("--set " + s for s in json.load(open(sys.argv[1]))["trainer_sets"]))' "$1"; }
  describe() { /usr/bin/python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(", ".join(f"{k} {v}" for k, v in c["point"].items()) or "no sweep", "(chosen on %s over %d seeds in docs/results/%s)" % (c["chosen_on"], c["seeds"], c["study"]))' "$1"; }
  declare -A rc=()
  if [ -n "$pick" ]; then
    names=(adasum average average_linear)
    echo "train.sh: $ranks ranks x 32 examples, 6 epochs, LeNet-5 / MNIST; each method at its study's chosen point"
    echo "train.sh: Adasum:  $(describe "$ada_json")"
    echo "train.sh: average: $(describe "$avg_json")"
    # shellcheck disable=SC2046
    train "$ranks" configs/mnist_lenet_adasum.yaml "$dir/adasum" $(sets "$ada_json") "${again[@]}" && rc[adasum]=0 || rc[adasum]=$?
    # shellcheck disable=SC2046
    train "$ranks" configs/mnist_lenet_adasum.yaml "$dir/average" $(sets "$avg_json") "${again[@]}" && rc[average]=0 || rc[average]=$?
    echo "train.sh: average with the linear rule, LR 0.05 x $ranks"
    # shellcheck disable=SC2046
    train "$ranks" configs/mnist_lenet_adasum.yaml "$dir/average_linear" $(sets "$avg_json") \
      --set optimizer.lr=0.05 --set schedule.lr_scaling=linear "${again[@]}" && rc[average_linear]=0 || rc[average_linear]=$?
  else
    names=(adasum average_linear)
    echo "train.sh: no committed study chose an LR for $ranks ranks (docs/results/mnist_lenet_averaging_stress,"
    echo "          docs/results/mnist_lenet_scaling): Adasum and averaging with the linear rule, 2 epochs"
    train "$ranks" configs/mnist_lenet_adasum.yaml "$dir/adasum" --set train.epochs=2 --set train.log_every=10 \
      --set schedule.warmup_steps=20 "${again[@]}" && rc[adasum]=0 || rc[adasum]=$?
    train "$ranks" configs/mnist_lenet_average.yaml "$dir/average_linear" --set train.epochs=2 --set train.log_every=10 \
      --set schedule.warmup_steps=20 "${again[@]}" && rc[average_linear]=0 || rc[average_linear]=$?
  fi
  # The plot of the runs that wrote metrics (a run that failed before its first line has none);
  # an earlier comparison's plot never stands in for this one's.
  runs=()
  for n in "${names[@]}"; do [ -s "$dir/$n/metrics.jsonl" ] && runs+=("$dir/$n"); done
  rm -f "$dir/compare.png"
  plot="no plot (no run wrote metrics)"
  if [ ${#runs[@]} -gt 0 ]; then
    plot="no plot (tools/compare.py failed on ${runs[*]})"
    /usr/bin/python3 tools/compare.py "${runs[@]}" -o "$dir/compare.png" >/dev/null && plot="plot $dir/compare.png"
  fi
  echo
  for n in "${names[@]}"; do
    printf 'train.sh: %-15s %s ranks: %s\n' "$n," "$ranks" "$(result "$dir/$n" "${rc[$n]}")"
  done
  echo "train.sh: $plot; metrics $dir/*/metrics.jsonl"
  echo "train.sh: one seed. Three seeds and every point: docs/results/${pick:-mnist_lenet_scaling}/report.md"
  echo "train.sh: one config: tools/train.sh configs/mnist_lenet_adasum.yaml [RANKS] [--set key=value ...]"
  exit 0
fi

config=$1
shift
ranks=4  # RANKS may be left out, also before --set ...
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then ranks=$1; shift; fi
[ -f "$config" ] || { echo "train.sh: config '$config' not found (see configs/)" >&2; exit 2; }
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || { echo "train.sh: RANKS must be a positive integer, got '$ranks'" >&2; exit 2; }
prepare "$config"
run=runs/$(basename "$config" .yaml)-np$ranks
go_on="${keep_trainer}tools/train.sh $(printf '%q ' "$config" "$ranks" "$@")$(resuming "$@" || echo "--resume auto")"
status=0
# The run's start: a file in the run folder older than this is from before it (a run that fails
# before it writes, e.g. on a config key, leaves an earlier run's files as they were), never
# listed or plotted as this run's.
started=$(mktemp)
trap 'rm -f "$started"' EXIT
ours() { [ -f "$1" ] && [ "$1" -nt "$started" ]; }
sleep 0.01  # a file the run writes is strictly newer than the mark, even on a coarse clock
train "$ranks" "$config" "$run" "$@" || status=$?
ours "$run/metrics.jsonl" && { /usr/bin/python3 tools/compare.py "$run" -o "$run/curves.png" >/dev/null || true; }
echo
echo "train.sh: run folder      $run"
if [ -f "$run/metrics.jsonl" ] && ! ours "$run/metrics.jsonl"; then
  echo "train.sh: metrics         none written by this run (those in $run are from before it)"
elif ours "$run/metrics.jsonl"; then
  echo "train.sh: metrics         $run/metrics.jsonl$(ours "$run/summary.json" && echo " (summary: $run/summary.json)")"
  ours "$run/curves.png" && echo "train.sh: plot            $run/curves.png"
  # The trainer's run folders under runs/ (not the comparison's or the studies' folders of runs).
  others=()
  for d in runs/*/; do [ -f "$d/metrics.jsonl" ] && others+=("${d%/}"); done
  (( ${#others[@]} > 1 )) && echo "train.sh: compare runs:  /usr/bin/python3 tools/compare.py ${others[*]} -o compare.png"
fi
echo "train.sh: final $(result "$run" "$status")"
exit "$status"
