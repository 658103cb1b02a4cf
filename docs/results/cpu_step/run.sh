#!/usr/bin/env bash
# Regenerates docs/results/cpu_step/bench.log: bench_step against the default and tuned PyTorch
# twins (one case per process, so peak RSS is the case's own), fp32 then bf16.
#   bash docs/results/cpu_step/run.sh [OUT]           (about 30 minutes on 2 cores)
#   bash docs/results/cpu_step/run.sh --quick OUT     (fp32 resnet20, bert_mini, bert_base and
#                                                      their profiles only; about 12 minutes)
#   bash docs/results/cpu_step/run.sh --bf16 OUT      (the bf16 half and its profile only; each
#                                                      bf16 case also times our fp32 step)
set -euo pipefail
cd "$(dirname "$0")/../../.."
quick=0
bf16_only=0
if [[ "${1:-}" == "--quick" ]]; then quick=1; shift; fi
if [[ "${1:-}" == "--bf16" ]]; then bf16_only=1; shift; fi
out=${1:-docs/results/cpu_step/bench.log}
b=build/bin/bench_step
header() {
  echo "# $(date -u +%F) commit $(git rev-parse --short HEAD); CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
       "flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
}
if (( quick )); then
  {
    header
    for t in 1 2; do
      $b --model resnet20_mnist --batch 64 --threads $t --steps 10
      $b --model bert_mini --batch 32 --threads $t --steps 5
    done
    $b --model bert_base --batch 8 --threads 1 --steps 3
    $b --model resnet20_mnist --batch 64 --threads 1 --steps 5 --no-torch --profile
    $b --model bert_mini --batch 32 --threads 1 --steps 3 --no-torch --profile
  } 2>&1 | tee "$out"
  exit 0
fi
{
  header
  (( bf16_only )) || for t in 1 2; do
    $b --model resnet50 --batch 32 --threads $t --steps 3
    $b --model resnet20_mnist --batch 64 --threads $t --steps 10
    $b --model lenet5 --batch 64 --threads $t --steps 20
    $b --model bert_base --batch 8 --threads $t --steps 3
    $b --model bert_mini --batch 32 --threads $t --steps 5
  done
  for t in 1 2; do
    $b --model resnet50 --batch 32 --threads $t --steps 3 --precision bf16
    $b --model bert_base --batch 8 --threads $t --steps 3 --precision bf16
    $b --model bert_mini --batch 32 --threads $t --steps 5 --precision bf16
    $b --model resnet20_mnist --batch 64 --threads $t --steps 10 --precision bf16
  done
  # Where the time goes: per-op milliseconds of one step (ops nested in others count in both).
  (( bf16_only )) || $b --model resnet50 --batch 32 --threads 1 --steps 2 --no-torch --profile
  $b --model resnet50 --batch 32 --threads 1 --steps 2 --no-torch --profile --precision bf16
  (( bf16_only )) || $b --model bert_base --batch 8 --threads 1 --steps 2 --no-torch --profile
} 2>&1 | tee "$out"
