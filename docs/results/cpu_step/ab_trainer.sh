#!/usr/bin/env bash
# Two trainer binaries on the BERT-tiny studies' config, alternated twice, at 1 and 2 threads
# (docs/results/cpu_step/README.md, "BERT-tiny's MLM decoder passes"): one rank, 40 steps, a
# metrics line every 10; prints each run's samples/s of the lines after the first.
#   bash docs/results/cpu_step/ab_trainer.sh OLD_TRAINER NEW_TRAINER
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: ab_trainer.sh OLD_TRAINER NEW_TRAINER" >&2; exit 2; }
cd "$(dirname "$0")/../../.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for rep in 1 2; do
  for side in old new; do
    bin=$([[ $side == old ]] && echo "$1" || echo "$2")
    for t in 1 2; do
      rm -rf "$out/run"
      "$bin" --config studies/bases/bert_tiny_mlm.yaml --set train.steps=40 --set train.log_every=10 \
        --set train.eval_every=0 --set checkpoint.every=0 --set schedule.warmup_steps=5 \
        --set train.threads=$t --set output.dir="$out/run" > /dev/null 2>&1
      /usr/bin/python3 - "$out/run/metrics.jsonl" "$side rep $rep threads $t" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"lr"' in l]
print(sys.argv[2], " ".join(f"{r['samples_per_s']:.1f}" for r in rows[1:]))
PY
    done
  done
done
