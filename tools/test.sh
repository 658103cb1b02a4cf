#!/usr/bin/env bash
# The test command: installs what is missing, checks the C++ formatting, configures and builds
# in Release with the tests, and runs every test (unit tests, then MPI tests under mpiexec at
# several rank counts, the fuzz corpora replayed), compiles the CUDA build when nvcc is
# installed (its tests skip without a GPU, saying why), then fuzzes each target for 10 s
# (tools/fuzz.sh; 50 s in all) in a clang build when clang is installed. Exits non-zero on any failure. CI (.ci/run) runs exactly this.
# It prints the commit and the CPU first, and each phase's seconds as it ends.
#   tools/test.sh [extra cmake -D options]     e.g. -DADA_SANITIZE=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# Where the time goes (CI's limit is 90 minutes) and on which CPU: some kernels' paths run only
# where the CPU has them (AVX-512, bf16, AMX), so a failure there names its machine.
last=$start
took() { local now; now=$(date +%s); echo "test.sh: $1 took $((now - last)) s ($((now - start)) s so far)"; last=$now; }
cpuinfo() { sed -n "s/^$1[[:space:]]*: //p" /proc/cpuinfo | head -1; }
isa=$(grep -m1 -ow -E 'avx2|avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | paste -sd' ' || true)
echo "test.sh: commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $(cpuinfo 'model name')" \
  "(family $(cpuinfo 'cpu family') model $(cpuinfo model); ${isa:-no AVX2}), $(nproc) cores"

# --twins: PyTorch for the test of the benchmark twins (bench_twins), absent on a fresh machine.
# With Slurm for its check below (one apt-get update for everything).
if [[ -z "${ADA_NO_SLURM:-}" && $# -eq 0 ]]; then slurm=--slurm; else slurm=; fi
bash tools/setup.sh --fuzz --twins $slurm
took "setup"
# The C++ sources must be as .clang-format writes them (tools/format.sh formats them).
bash tools/format.sh --check
# The real-data tests (MNIST files, the full BERT vocab) need these; cached and verified once.
bash tools/fetch_data.sh mnist fashion-mnist bert-vocab spam
took "the format check and the data"
build=${ADA_BUILD_DIR:-build}
jobs=$(nproc)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DADA_BUILD_TESTS=ON "$@"
cmake --build "$build" -j "$jobs"
took "the build"
# The CUDA backend compiles here (nvcc 13, no GPU): its targets are built so that GPU code
# cannot rot unseen, and its tests run, each skipping with the printed reason. On a lent GPU
# machine tools/gpu_bundle.sh + tools/gpu_test.sh run them for real.
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [[ -x "$nvcc" && -z "${ADA_NO_CUDA:-}" && $# -eq 0 ]]; then
  cmake -S . -B "$build-cuda" -DCMAKE_BUILD_TYPE=Release -DADA_BUILD_TESTS=ON -DADA_WITH_CUDA=ON \
        -DADA_WITH_NCCL=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$nvcc"
  cmake --build "$build-cuda" -j "$jobs" --target test_cuda test_comm_gpu trainer bench_step bench_ops
  "$build-cuda/bin/test_cuda" --gtest_brief=1
  # Communication on device buffers (skips without a GPU) and the NCCL loader (runs here).
  ctest --test-dir "$build-cuda" --output-on-failure -R "nccl|comm_gpu"
else
  echo "test.sh: nvcc not found: the CUDA build was not compiled"
fi
took "the CUDA build"
# MPI tests ask for 2 processors each, so ctest never runs two of them at once on 2 cores.
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600
took "ctest"
# The trainer under a one-node Slurm started here (srun with PMIx, sbatch stopped by
# SIGUSR1 and SIGTERM and requeued, salloc
# with mpirun, a killed rank): about 70 s after installing Slurm. ADA_NO_SLURM=1 skips it.
if [[ -z "${ADA_NO_SLURM:-}" && $# -eq 0 ]]; then
  bash tools/slurm_test.sh "$build"
else
  echo "test.sh: the Slurm checks skipped (ADA_NO_SLURM or extra cmake options)"
fi
took "the Slurm checks"
# Bounded fuzzing (ASan + UBSan, libFuzzer); a crash fails the run. Longer: tools/fuzz.sh all 600.
if command -v clang++ >/dev/null 2>&1; then
  bash tools/fuzz.sh all 10
else
  echo "test.sh: clang++ not installed (tools/setup.sh --fuzz): fuzzing skipped"
fi
took "fuzzing"
echo "test.sh: all tests passed in $(( $(date +%s) - start )) s"
