#!/usr/bin/env bash
# Regenerates docs/results/comm_cost/bench.log: what a reduction costs and whether the trainer
# hides it. bench_allreduce (raw MPI_Allreduce vs our sum / average / adasum on the ResNet-50 and
# BERT-Large parameter sets) twice at 2 and 4 ranks, then tools/bench_overlap.sh (the 2-rank
# step against the 1-rank step, gradient sync and overlapped delta sync, with peak memory) for
# resnet20_mnist (twice) and resnet50 b32 224². About 12 minutes on 2 cores.
#   bash docs/results/comm_cost/run.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:-docs/results/comm_cost/bench.log}
cmake --build build -j "$(nproc)" --target bench_allreduce trainer >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
{
  echo "# $(date -u +%F) commit $(git rev-parse --short HEAD); CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
  for run in 1 2; do
    for np in 2 4; do
      echo "## bench_allreduce, run $run, $np ranks"
      mpirun -np "$np" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 build/bin/bench_allreduce \
        --sets resnet50,bert_large --min-log2 10 --max-log2 10 --reps 5
    done
  done
  for run in 1 2; do
    echo "## bench_overlap resnet20_mnist, run $run"
    bash tools/bench_overlap.sh resnet20_mnist 64 100
  done
  echo "## bench_overlap resnet50 b32 224x224"
  bash tools/bench_overlap.sh resnet50 32 4 --set 'data.image_shape=[3,224,224]'
} 2>&1 | grep -v "GLOB mismatch" | tee "$out"
