#!/usr/bin/env bash
# NCCL across ranks on one lent GPU (issue 32): every rank shares the GPU in the shared-GPU test
# mode (ADA_NCCL_SHARED_GPU=1, comm/shared_gpu.h: each rank its own NCCL host id, data through
# NCCL's socket transport on loopback). Run by `tools/gpu_test.sh nccl` (or `all`), which sets up
# the libraries and the MPI runtime first; logs to $OUT/nccl.log and $OUT/test_comm_gpu.log.
#   1. test_comm_gpu at 1-4 ranks: the NCCL communicator's tests and the reducers on device
#      buffers over MPI and over NCCL (nothing may skip);
#   2. the trainer with train.comm nccl at 2 and 4 ranks (LeNet-5/MNIST, 1 epoch): Adasum and
#      averaging in fp32, bf16 and fp16, beside the MPI-staged path; a resume across NCCL against
#      the unbroken run (WAGMA, DiLoCo and local SGD refuse a GPU run so far: sync/registry.cc);
#   3. bench_allreduce --device cuda at 2 and 4 ranks (relative figures: sockets, not NVLink);
#   4. failures at 2 ranks: a rank throws, a rank is killed, a rank stops (the others' NCCL
#      watchdog, ADA_NCCL_TIMEOUT_S) — each must end every rank non-zero, naming the cause;
#   5. seeds: run-to-run noise of 4 ranks over NCCL against MPI staging (seeds 2-4, averaging and
#      Adasum), the yardstick for "the same accuracy".
#   OUT=DIR bash tools/gpu_nccl.sh [tests,train,bench,failures,seeds]   (default: all five)
# The runs' own logs are packed into $OUT/nccl_runs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu}
log=$out/nccl.log
mkdir -p "$out"
parts=",${1:-tests,train,bench,failures,seeds},"
part() { [[ $parts == *",$1,"* ]]; }
export ADA_NCCL_SHARED_GPU=1
status=0
say() { echo "$*" | tee -a "$log"; }
# mpi SECONDS NP PROGRAM ARGS...: under mpirun with a time limit.
mpi() {
  local limit=$1 np=$2
  shift 2
  timeout "$limit" mpirun -np "$np" --oversubscribe --bind-to none "$@"
}

if part tests; then
say "== 1. test_comm_gpu with ADA_NCCL_SHARED_GPU=1 (NCCL $(basename "${ADA_NCCL_LIBRARY:-?}"))"
say "   $(NCCL_DEBUG=VERSION OMP_NUM_THREADS=2 mpi 60 1 .gpu/bin/test_comm_gpu \
  --gtest_filter=Nccl.IdentityAndBackend 2>&1 | grep -m1 -o 'NCCL version.*')"
for np in 1 2 3 4; do
  say "-- $np rank(s)"
  OMP_NUM_THREADS=2 mpi 300 $np .gpu/bin/test_comm_gpu --gtest_color=no > "$out/tcg.tmp" 2>&1
  rc=$?
  cat "$out/tcg.tmp" >> "$out/test_comm_gpu.log"
  grep -E '^\[  (PASSED|FAILED) |tests? ran|^\[  FAILED  \] [A-Z]' "$out/tcg.tmp" | sort -u | tee -a "$log"
  [[ $rc -eq 0 ]] || grep -A6 'Failure$' "$out/tcg.tmp" | head -30 | tee -a "$log"
  skipped=$(grep -c '^\[  SKIPPED \]' "$out/tcg.tmp")
  say "   exit $rc; skipped lines: $skipped"
  [[ $rc -eq 0 && $skipped -eq 0 ]] || status=1
done
rm -f "$out/tcg.tmp"
fi

# A trainer run: NP COMM CONFIG PRECISION DIR [--set ...]; prints its log's key lines.
train() {
  local np=$1 comm=$2 cfg=$3 prec=$4 dir=$5
  shift 5
  local t0=$SECONDS
  OMP_NUM_THREADS=2 mpi 300 "$np" .gpu/bin/trainer --config "configs/$cfg.yaml" \
    --set train.device=cuda --set train.comm="$comm" --set train.epochs=1 \
    --set train.precision="$prec" --set output.dir="out/nccl/$dir" --set checkpoint.overwrite=true \
    "$@" > "out/nccl/$dir.log" 2>&1
  local rc=$?
  grep -E 'train.comm|TEST mode|final evaluation|resumed|error|Error|overflow' "out/nccl/$dir.log" |
    sort -u | head -8 | tee -a "$log"
  say "   $dir: exit $rc in $((SECONDS - t0)) s"
  [[ $rc -eq 0 ]] || status=1
}
mkdir -p out/nccl
# eval_top1 of each run's summary.json, in a table.
accuracies() {
  /usr/bin/env python3 - out/nccl "$@" <<'PY' 2>&1 | tee -a "$log"
import glob, json, os, sys
print(f"{'run':32} {'eval_top1':>9} {'steps':>6} {'loss scale':>10}")
for d in sorted(glob.glob(os.path.join(sys.argv[1], "*/summary.json"))):
    name = os.path.basename(os.path.dirname(d))
    if len(sys.argv) > 2 and not any(name.startswith(p) for p in sys.argv[2:]): continue
    s = json.load(open(d))
    top1 = s.get("eval_top1")
    print(f"{name:32} {100 * top1 if top1 is not None else float('nan'):9.2f} "
          f"{s.get('steps', 0):6} {s.get('loss_scale', '-'):>10}")
PY
}
if part train; then
say "== 2. the trainer over NCCL (LeNet-5/MNIST, 1 epoch of 32 per rank)"
for run in "2 nccl adasum fp32" "4 nccl adasum fp32" "2 nccl average fp32" "4 nccl average fp32" \
           "2 mpi adasum fp32" "4 mpi adasum fp32" "4 mpi average fp32" \
           "2 nccl adasum bf16" "2 nccl adasum fp16" "4 nccl adasum fp16"; do
  set -- $run
  say "-- $1 ranks, train.comm $2, $3, $4"
  train "$1" "$2" "mnist_lenet_$3" "$4" "np$1-$2-$3-$4"
done
say "-- resume across NCCL: 2 ranks, Adasum, epoch 2 resumed from np2-nccl-adasum-fp32's checkpoint,"
say "   against an unbroken 2-epoch run (the GPU's atomics make two runs differ: compare accuracy)"
cp -r out/nccl/np2-nccl-adasum-fp32 out/nccl/resumed
train 2 nccl mnist_lenet_adasum fp32 resumed --set train.epochs=2 --resume auto
train 2 nccl mnist_lenet_adasum fp32 unbroken --set train.epochs=2
/usr/bin/env python3 tools/same_runs.py out/nccl/unbroken out/nccl/resumed 2>&1 | head -4 | tee -a "$log"
accuracies np resumed unbroken
fi

if part bench; then
say "== 3. bench_allreduce --device cuda (NCCL on sockets over loopback: relative figures only)"
for np in 2 4; do
  OMP_NUM_THREADS=2 mpi 240 $np .gpu/bin/bench_allreduce --device cuda --max-log2 24 \
    --sets resnet50 --reps 3 --hierarchical 2 2>&1 | grep -v '^\[' | tee -a "$log"
done

fi
if part failures; then
say "== 4. failures at 2 ranks over NCCL (each run must end non-zero on every rank)"
fail_case() {
  local what=$1 stopped_at=""
  shift
  local t0=$SECONDS
  OMP_NUM_THREADS=2 timeout 180 env "$@" mpirun -np 2 --oversubscribe --bind-to none .gpu/bin/trainer \
    --config configs/mnist_lenet_adasum.yaml --set train.device=cuda --set train.comm=nccl \
    --set train.steps=5000 --set train.epochs=0 --set output.dir="out/nccl/fail-$what" \
    --set checkpoint.overwrite=true > "out/nccl/fail-$what.log" 2>&1 &
  local job=$!
  if [[ $what == stopped ]]; then
    # Stop one rank once training runs; the other waits in a collective until its watchdog fires.
    for _ in $(seq 60); do grep -q 'train.comm: NCCL' "out/nccl/fail-$what.log" 2>/dev/null && break; sleep 0.5; done
    sleep 2
    local victim
    victim=$(pgrep -x trainer | tail -1)
    say "   SIGSTOP to trainer pid $victim at $((SECONDS - t0)) s"
    kill -STOP "$victim"
    stopped_at=$SECONDS
  fi
  wait $job
  local rc=$?
  say "-- $what: exit $rc after $((SECONDS - t0)) s${stopped_at:+ (${SECONDS}-${stopped_at} = $((SECONDS - stopped_at)) s after the stop)}"
  grep -iE 'error|abort|injected|timeout|rank [0-9]' "out/nccl/fail-$what.log" | grep -v '^step ' | head -6 | tee -a "$log"
  [[ $rc -ne 0 ]] || { say "   FAILED: the job ended with 0"; status=1; }
}
fail_case thrown ADA_FAULT=adasum@1#100
fail_case killed ADA_FAULT=backward@1#100:kill
fail_case stopped ADA_NCCL_TIMEOUT_S=15
pkill -9 -f out/nccl/fail- 2>/dev/null
fi
if part seeds; then
  say "== 5. run-to-run noise: 4 ranks, 1 epoch, seeds 2-4, over NCCL and through MPI"
  for red in average adasum; do
    for comm in nccl mpi; do
      for seed in 2 3 4; do
        train 4 "$comm" "mnist_lenet_$red" fp32 "seed$seed-np4-$comm-$red" --set train.seed=$seed > /dev/null
      done
    done
  done
  accuracies seed
fi
tar czf "$out/nccl_runs.tgz" out/nccl/*.log 2>/dev/null
say "gpu_nccl: exit $status"
exit $status
