#!/usr/bin/env bash
# The main command: train a model from a YAML config on RANKS MPI ranks.
#   tools/train.sh [CONFIG] [RANKS]     (default: configs/mnist_lenet_adasum.yaml on 4 ranks)
# The trainer does not exist yet: the foundation (tensor, autograd, CPU kernels) is in place;
# models, reducers, data and the trainer are the next issues. Until then this script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/mnist_lenet_adasum.yaml}
ranks=${2:-4}
if [ ! -x build/bin/trainer ] && ! grep -q 'add_executable(trainer' apps/CMakeLists.txt; then
  cat >&2 <<MSG
train.sh: the trainer is not built yet in this version of Adatrain (asked: $config on $ranks ranks).
What works today: tools/test.sh (builds the core library and runs its tests) and
build/bin/bench_ops (GEMM and ResNet-50 convolution throughput against PyTorch).
MSG
  exit 2
fi
bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target trainer
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun -np "$ranks" --oversubscribe --mca mpi_yield_when_idle 1 --bind-to none \
  build/bin/trainer --config "$config"
