#!/usr/bin/env bash
# NCCL across ranks on one lent GPU (issue 32): every rank shares the GPU in the shared-GPU test
# mode (ADA_NCCL_SHARED_GPU=1, comm/shared_gpu.h: each rank its own NCCL host id, data through
# NCCL's socket transport on loopback). Run by `tools/gpu_test.sh nccl` (or `all`), which sets up
# the libraries and the MPI runtime first; logs to $OUT/nccl.log and $OUT/test_comm_gpu.log.
#   1. test_comm_gpu at 1-4 ranks: the NCCL communicator's tests and the reducers on device
#      buffers over MPI and over NCCL (nothing may skip);
#   2. the trainer with train.comm nccl at 2 and 4 ranks (LeNet-5/MNIST, 1 epoch): Adasum and
#      averaging in fp32, bf16 and fp16, beside the MPI-staged path; a resume across NCCL against
#      the unbroken run; WAGMA, DiLoCo and local SGD on the GPU;
#   3. bench_allreduce --device cuda at 2 and 4 ranks (relative figures: sockets, not NVLink);
#   4. failures at 2 ranks: a rank throws, a rank is killed, a rank stops (the others' NCCL
#      watchdog, ADA_NCCL_TIMEOUT_S) — each must end every rank non-zero, naming the cause; a
#      SIGTERM stops both ranks at one step with a checkpoint, and with a peer stuck ends in ~5 s;
#   5. seeds: run-to-run noise of 4 ranks over NCCL against MPI staging (seeds 2-4, averaging and
#      Adasum), the yardstick for "the same accuracy".
#   6. paper (not in the default): configs/resnet50_adasum.yaml on an ImageNet-shaped JPEG folder
#      made there (1,000 classes) and configs/bert_large_lamb_adasum.yaml on MLM shards of our
#      corpus (.gpu/data/mlm-moby), each at 2 ranks over NCCL in bf16: 60 steps, a checkpoint,
#      then resumed to 100; step time and loader wait from metrics.jsonl (~3 minutes on an H200).
#   syncs (part of train, alone when named): WAGMA, DiLoCo and local SGD only (~30 s).
#   OUT=DIR bash tools/gpu_nccl.sh [tests,train,bench,failures,seeds,paper,syncs]
#                                              (default: the first five)
# The runs' own logs are packed into $OUT/nccl_runs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/gpu_unpack.sh  # gpu_bundle.sh's pack, once
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

# Which NCCL every part below runs on (the library, and the version it reports).
say "NCCL: ${ADA_NCCL_LIBRARY:-?}, $(NCCL_DEBUG=VERSION OMP_NUM_THREADS=2 mpi 60 1 \
  .gpu/bin/test_comm_gpu --gtest_filter=Nccl.IdentityAndBackend 2>&1 | grep -m1 -o 'NCCL version.*')"
if part tests; then
say "== 1. test_comm_gpu with ADA_NCCL_SHARED_GPU=1"
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
fi
if part train || part syncs; then
for s in wagma diloco local_sgd; do
  say "-- 4 ranks, train.comm nccl, sync $s"
  train 4 nccl "mnist_lenet_$s" fp32 "np4-nccl-$s"
done
fi
if part train; then
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
# A stop signal over NCCL (base/stop_signal.h): SIGTERM on rank 1 at step 100 stops both ranks at
# that step with a checkpoint (exit 143); with rank 1 stuck for good at step 100 and rank 0
# signalled there, rank 0 gives up 5 s later naming the call (the NCCL wait loop's rule, as the
# MPI watchdog's in tests/apps/reliability_e2e.sh preempt), exit 143, well before the NCCL timeout.
stop_case() {  # tag, what the log must say (grep -E), ADA_FAULT
  local what=$1 says=$2 t0=$SECONDS
  OMP_NUM_THREADS=2 ADA_NCCL_TIMEOUT_S=120 ADA_FAULT=$3 timeout 180 mpirun -np 2 --oversubscribe \
    --bind-to none .gpu/bin/trainer --config configs/mnist_lenet_adasum.yaml --set train.device=cuda \
    --set train.comm=nccl --set train.steps=5000 --set train.epochs=0 --set checkpoint.every=0 \
    --set output.dir="out/nccl/stop-$what" --set checkpoint.overwrite=true > "out/nccl/stop-$what.log" 2>&1
  local rc=$?
  say "-- signal, $what: exit $rc after $((SECONDS - t0)) s"
  grep -E 'stopped by|gone or stuck|error' "out/nccl/stop-$what.log" | head -4 | tee -a "$log"
  [[ $rc -eq 143 ]] || { say "   FAILED: exit $rc, not 143 (128 + SIGTERM; 124: it hung)"; status=1; }
  grep -qE "$says" "out/nccl/stop-$what.log" || { say "   FAILED: the log does not say: $says"; status=1; }
}
stop_case term "stopped by SIGTERM at step 100 of [0-9]+: checkpoint at step 100 written" "step@1#100:term"
[[ -e out/nccl/stop-term/checkpoints/ckpt-00000100.json ]] || { say "   FAILED: no stop checkpoint at step 100"; status=1; }
stop_case gone "SIGTERM received, and the communication call .* has not completed [0-9]+ s later: a peer rank is gone" \
  "step@1#100:hang,step@0#100:term"
pkill -9 -f out/nccl/fail- 2>/dev/null
pkill -9 -f out/nccl/stop- 2>/dev/null
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
if part paper; then
  say "== 6. the paper's configs over NCCL: 2 ranks, bf16, 60 steps + a resume to 100"
  /usr/bin/env python3 - out/imagenet <<'PY' 2>&1 | tee -a "$log"
# ImageNet-shaped JPEG folders: 1,000 class folders (n00000000 ...), 14 training images and 1
# validation image each, sizes drawn like ImageNet's (about 500 x 375), smooth random content.
import os, random, sys
from multiprocessing import Pool
from PIL import Image
root = sys.argv[1]
def make(c):
    r = random.Random(c)
    for split, n in (("train", 14), ("val", 1)):
        d = os.path.join(root, split, f"n{c:08d}")
        os.makedirs(d, exist_ok=True)
        for i in range(n):
            w, h = r.randint(300, 500), r.randint(250, 400)
            small = Image.new("RGB", (8, 6))
            small.putdata([tuple(r.randrange(256) for _ in range(3)) for _ in range(48)])
            small.resize((w, h), Image.BILINEAR).save(os.path.join(d, f"{i}.JPEG"), quality=85)
with Pool(16) as p:
    p.map(make, range(1000))
print(f"imagenet-shaped: {sum(len(f) for _, _, f in os.walk(root))} JPEGs under {root}")
PY
  paper() {  # NAME CONFIG ARGS...: 60 steps, then resumed to 100
    local name=$1 cfg=$2
    shift 2
    train 2 nccl "$cfg" bf16 "paper-$name" --set train.epochs=0 --set train.steps=60 \
      --set checkpoint.every=60 --set train.log_every=10 "$@"
    train 2 nccl "$cfg" bf16 "paper-$name" --set train.epochs=0 --set train.steps=100 \
      --set checkpoint.every=60 --set train.log_every=10 \
      --set train.timeline="out/nccl/paper-$name/trace.json" --resume auto "$@"
    /usr/bin/env python3 - "out/nccl/paper-$name" <<'PY' 2>&1 | tee -a "$log"
# The last logged step's figures, and from the resumed run's timeline the loader wait per step.
import json, os, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if '"loss"' in l]
last = rows[-1]
print(f"{d}: {len(rows)} metrics lines to step {last['step']}; last: " +
      ", ".join(f"{k} {last[k]:.4g}" for k in ("loss", "samples_per_s", "compute_s", "comm_s", "exposed_comm_s") if k in last))
try:
    ev = json.load(open(os.path.join(d, "trace.json")))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    per = {}
    for e in ev:
        if e.get("name") in ("data wait", "forward") and "dur" in e:
            per.setdefault((e.get("pid"), e["name"]), []).append(e["dur"] / 1e3)
    for (pid, name), v in sorted(per.items()):
        v = sorted(v)
        print(f"  rank {pid} {name}: {len(v)} spans, median {v[len(v) // 2]:.2f} ms, max {v[-1]:.2f} ms")
except (OSError, ValueError, KeyError) as e:
    print(f"  timeline unreadable: {e}")
PY
  }
  paper resnet50 resnet50_adasum --set data.path=out/imagenet/train --set data.eval_path=out/imagenet/val \
    --set schedule.warmup_epochs=null --set schedule.milestone_epochs=null \
    --set schedule.warmup_steps=10 --set "schedule.milestones=[80]" --set data.workers=6
  paper bert_large bert_large_lamb_adasum --set data.path=.gpu/data/mlm-moby --set train.batch_per_rank=8 \
    --set train.micro_batches=1 --set schedule.warmup_steps=10
fi
tar czf "$out/nccl_runs.tgz" out/nccl/*.log 2>/dev/null
say "gpu_nccl: exit $status"
exit $status
