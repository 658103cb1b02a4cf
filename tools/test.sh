#!/usr/bin/env bash
# The test command: installs what is missing, configures and builds in Release with the tests,
# and runs every test (unit tests, then MPI tests under mpiexec at several rank counts, the fuzz
# corpora replayed), then fuzzes each target for 10 s (tools/fuzz.sh; 50 s in all) in a clang
# build when clang is installed. Exits non-zero on any failure. CI (.ci/run) runs exactly this.
#   tools/test.sh [extra cmake -D options]     e.g. -DADA_SANITIZE=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

bash tools/setup.sh --fuzz
# The real-data tests (MNIST files, the full BERT vocab) need these; cached and verified once.
bash tools/fetch_data.sh mnist fashion-mnist bert-vocab
build=${ADA_BUILD_DIR:-build}
jobs=$(nproc)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DADA_BUILD_TESTS=ON "$@"
cmake --build "$build" -j "$jobs"
# MPI tests ask for 2 processors each, so ctest never runs two of them at once on 2 cores.
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600
# Bounded fuzzing (ASan + UBSan, libFuzzer); a crash fails the run. Longer: tools/fuzz.sh all 600.
if command -v clang++ >/dev/null 2>&1; then
  bash tools/fuzz.sh all 10
else
  echo "test.sh: clang++ not installed (tools/setup.sh --fuzz): fuzzing skipped"
fi
echo "test.sh: all tests passed in $(( $(date +%s) - start )) s"
