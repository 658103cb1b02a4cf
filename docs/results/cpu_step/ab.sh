#!/usr/bin/env bash
# An A/B of one switch of the CPU backend in one binary: each case (LeNet-5, ResNet-20, ResNet-50;
# 1 and 2 threads) runs with VAR=0 (ours only), then VAR=1 (ours and the PyTorch twins, default
# and tuned), one case per process; then the ResNet-20 convolutions per shape (bench_ops --convs
# resnet20_mnist --verbose) with both settings, the per-op profiles of ResNet-20 and ResNet-50
# with VAR=1, and ResNet-20 in bf16. Made bench_direct.log (VAR=ADA_CONV_DIRECT); the same loop,
# by hand, made bench_alloc.log (ADA_HOST_CACHE).
#   bash docs/results/cpu_step/ab.sh VAR OUT        (about 15 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../../.."
var=${1:?usage: ab.sh VAR OUT (e.g. ADA_CONV_DIRECT docs/results/cpu_step/bench_direct.log)}
out=${2:?usage: ab.sh VAR OUT}
cmake --build build -j "$(nproc)" --target bench_step bench_ops >/dev/null
b=build/bin/bench_step
cases=("--model lenet5 --batch 64 --threads 1 --steps 30"
       "--model lenet5 --batch 64 --threads 2 --steps 30"
       "--model resnet20_mnist --batch 64 --threads 1 --steps 10"
       "--model resnet20_mnist --batch 64 --threads 2 --steps 10"
       "--model resnet50 --batch 32 --threads 1 --steps 3"
       "--model resnet50 --batch 32 --threads 2 --steps 3")
{
  echo "# $(date -u +%F) commit $(git rev-parse --short HEAD); CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
       "flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "# Made by: bash docs/results/cpu_step/ab.sh $var OUT"
  for c in "${cases[@]}"; do
    echo "## $var=0"
    env "$var=0" $b $c --no-torch
    echo "## $var=1"
    env "$var=1" $b $c
  done
  for v in 0 1; do
    echo "## $var=$v: bench_ops --convs resnet20_mnist --batch 64 --threads 1 --verbose"
    env "$var=$v" build/bin/bench_ops --convs resnet20_mnist --batch 64 --threads 1 --repeats 5 --verbose
  done
  echo "## $var=1: per-op profiles"
  env "$var=1" $b --model resnet20_mnist --batch 64 --threads 1 --steps 5 --no-torch --profile
  env "$var=1" $b --model resnet50 --batch 32 --threads 1 --steps 2 --no-torch --profile
  echo "## $var=1: bf16 against fp32 (ResNet-20)"
  env "$var=1" $b --model resnet20_mnist --batch 64 --threads 1 --steps 10 --no-torch --precision bf16
} 2>&1 | tee "$out"
