#!/usr/bin/env bash
# Runs the libFuzzer targets (tests/fuzz) for a bounded time each, in a separate clang build
# (build-fuzz: ADA_FUZZ=ON, ASan + UBSan), and prints the executions per target.
#   tools/fuzz.sh TARGET|all [SECONDS]     TARGET: config, idx, safetensors, mlm_shard, tokenizer
# SECONDS (default 60) is per target. New interesting inputs go to build-fuzz/fuzz-corpus/TARGET
# (the seed corpus tests/fuzz/corpus/TARGET is read, never written); a crash stops the run, is
# saved as build-fuzz/fuzz-crashes/TARGET-crash-*, and the script exits non-zero. Reproduce one
# with build-fuzz/bin/fuzz_TARGET FILE; fix it, then add the file to tests/fuzz/corpus/TARGET/
# (named crash-*) so that every ctest run replays it. Needs clang, libclang-rt-14-dev, libomp-dev
# (tools/setup.sh --fuzz). ADA_FUZZ_BUILD_DIR overrides build-fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
all_targets=(config idx safetensors mlm_shard tokenizer)
[ $# -ge 1 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
if [ "$1" = all ]; then targets=("${all_targets[@]}"); else targets=("$1"); fi
secs=${2:-60}
[[ "$secs" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SECONDS must be a positive integer, got '$secs'" >&2; exit 2; }
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t'; known: ${all_targets[*]}" >&2; exit 2; }
done
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found; run tools/setup.sh --fuzz" >&2; exit 2; }

build=${ADA_FUZZ_BUILD_DIR:-build-fuzz}
if [ ! -f "$build/CMakeCache.txt" ]; then
  mkdir -p "$build"
  CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DADA_FUZZ=ON \
    -DADA_BUILD_TESTS=OFF >"$build/configure.log" 2>&1 || { tail -20 "$build/configure.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}" >"$build/fuzz-build.log" 2>&1 \
  || { tail -30 "$build/fuzz-build.log"; echo "fuzz.sh: build failed (log: $build/fuzz-build.log)" >&2; exit 1; }

status=0
summary=()
for t in "${targets[@]}"; do
  work=$build/fuzz-corpus/$t crashes=$build/fuzz-crashes
  mkdir -p "$work" "$crashes"
  log=$build/fuzz-$t.log
  # UBSan reports must stop the run like ASan ones do (ADA_SANITIZE adds -fno-sanitize-recover).
  touch "$build/fuzz-$t.start"
  set +e
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    "$build/bin/fuzz_$t" -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=30 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$crashes/$t-" "$work" "tests/fuzz/corpus/$t" \
    >"$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  [ -n "$runs" ] || runs=$(grep -o 'Done [0-9]* runs' "$log" | grep -o '[0-9]*' || echo '?')
  if [ $rc -ne 0 ]; then
    status=1
    grep -E 'INFO: Seed|ERROR|SUMMARY|Test unit written|fuzz:' "$log" | head -9
    # CI's clone goes away with the crash file: its bytes go to the log (base64, up to 8 KiB).
    find "$crashes" -name "$t-*" -newer "$build/fuzz-$t.start" -type f | while read -r f; do
      echo "fuzz.sh: $f ($(stat -c %s "$f") bytes), base64 (decode with: base64 -d > crash):"
      head -c 8192 "$f" | base64
    done
    summary+=("$t: CRASH after $runs executions (log: $log; its seed and input are printed above)")
  else
    summary+=("$t: $runs executions in ${secs} s, no crash ($(find "$work" -type f | wc -l) new corpus inputs)")
  fi
done
printf 'fuzz.sh: %s\n' "${summary[@]}"
exit $status
