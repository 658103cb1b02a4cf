#!/usr/bin/env bash
# Runs on a lent GPU machine (the device tool), from the repository root, with .gpu/ carried
# (made here by tools/gpu_bundle.sh): the `cuda` tests; NCCL across 1-4 ranks sharing the GPU
# (tools/gpu_nccl.sh: the communication tests on device buffers, the trainer over NCCL, the
# reducers' benchmark, failures); MNIST runs of the trainer on the GPU beside the CPU and through
# MPI; the Hugging Face and TensorBoard checks; then the GPU benchmarks against PyTorch on the same
# GPU. Logs go to $OUT (or out/gpu when OUT is unset).
#   bash tools/gpu_test.sh [tests|nccl|train|interop|bench|peers|attention|precision|profile|session|
#                           bn|graphs|graphs_train|nccl_choice|convsurvey|downstream|study|all]
#                         [filter]
#                         (default: all; interop: Hugging Face and TensorBoard, also in train;
#                          peers: issue 33's table, ours against every PyTorch twin incl.
#                          torch.compile, about 8 minutes, not in all; profile: per-op GPU
#                          time of the bf16 steps with 16-bit activations (ResNet-50 b256 NCHW
#                          and channels-last, BERT-Large s128 b64, s512 b16 composed and fused; the filter
#                          may name other cases, split by ';'), about 2 minutes, not in all;
#                          attention: BERT-Large with model.attention composed and fused (and
#                          both with 16-bit activations; s128 also with the cuBLASLt bias
#                          epilogues off), ResNet-50 b256 with fp32 and 16-bit
#                          activations and channels-last, ours only, then BERT-tiny trained in
#                          fp32/bf16/fp16 and bf16 with 16-bit activations, about 5 minutes,
#                          not in all; precision: only the BERT-tiny training part of it;
#                          session (run it as ADA_CALL_S=<the call's timeout_s - 15> bash
#                          tools/gpu_test.sh session): what a lent GPU's first call should run,
#                          the code never run on a GPU first, then what issue 33 needs most:
#                          tests, transformers against our BERT's twin (hf_compare.py),
#                          graphs_train, nccl_choice, ours at its best against each case's fastest
#                          twin (ResNet-50 b256 and b64, BERT-Large s128 b64 and s512 b16 in
#                          bf16; ResNet-50 b64 and BERT-Large s128 b16 in fp32 against eager;
#                          s512 again with model.recompute and with fused attention, ours
#                          only), profile, bn, graphs, precision; a section that would end past
#                          the call's 600 s is left out, and the last line names the second
#                          call's commands (the 15 minutes of device time leave it about 3);
#                          every command's limit ends 5 s before the call's; the logs are at
#                          most 8 files (what the device tool returns);
#                          nccl_choice: train.comm auto on 2 ranks sharing the GPU, without and
#                          with ADA_NCCL_SHARED_GPU=1 (MPI staging, then NCCL), a minute;
#                          graphs: forward and backward captured as a CUDA graph and replayed
#                          (the optimizer eager) against the same step run eagerly (bench_step
#                          --graphs: ResNet-20 b256 fp32, ResNet-50 b64 and b256 bf16
#                          channels-last, BERT-Large s128 b16 and b64 bf16), ours only, about
#                          two minutes; graphs_train: the trainer's train.cuda_graphs against
#                          eager steps (LeNet-5 MNIST, one epoch each; BERT-tiny MLM, 200
#                          steps each; ADA_CUDA_DETERMINISTIC=1: the same losses to the last
#                          bit), about two minutes;
#                          bn: ResNet-50's batch-norm + ReLU kernels against eager PyTorch's
#                          (bench_ops --bn, NCHW and channels-last, f32 and bf16), and the
#                          channels-last kernels and b256 step on cuDNN's batch norm
#                          (ADA_CUDA_BN_CUDNN=1); in session;
#                          convsurvey: each cuDNN convolution algorithm's error with 16-bit
#                          tensors (apps/conv_survey.cc, the evidence for conv.cc's rules;
#                          ~10 s), not in all: rerun it when cuDNN changes);
#                          downstream [STEPS]: issue 34's downstream study on the GPU
#                          (tools/downstream_study.py --device cuda --kinds finetune probe
#                          --choose-lr, STEPS pre-training steps, default 3000; needs
#                          `gpu_bundle.sh --downstream`), not in all;
#                          study [ONLY;ONLY...]: issue 35's scaling-limit cells still missing
#                          from the committed cells.json, trained on the GPU (tools/study.py
#                          --device cuda, the 16 ranks sharing it through MPI staging; the
#                          filter's `;`-separated specs go to --only, e.g. "seed=3"), until
#                          ADA_STUDY_S seconds (530); each finished cell comes back as
#                          $OUT/study/<cell>/ (copy those folders into runs/studies/
#                          bert_tiny_scaling_limit/ here, then --report-only --any-trainer);
#                          needs `gpu_bundle.sh --downstream`, not in all)
#   bash tools/gpu_test.sh step "resnet50 --batch 64;bert_base --batch 32 --seq 128"
#                                     (bench_step against PyTorch eager for the named cases only;
#                                      add --twins eager,compile,... to a case for others)
# That machine has the driver, CUDA 13 with cuBLAS, PyTorch (whose wheels bring cuDNN) and no
# package registry; everything else our binaries need is in .gpu/lib.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
filter=${2:-*}
out=${OUT:-out/gpu}
mkdir -p "$out"
# gpu_bundle.sh packs the binaries and libraries: unpack them once.
bash tools/gpu_unpack.sh
[[ -d .gpu/bin ]] || { echo "gpu_test: .gpu/ missing: run tools/gpu_bundle.sh here and carry .gpu" >&2; exit 2; }

# The binaries have the bundling checkout's absolute paths compiled in: make them point here.
src=$(cat .gpu/source_dir)
if [[ "$src" != "$PWD" && ! -e "$src" ]]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
mkdir -p data/mnist && cp -n .gpu/data/mnist/* data/mnist/ 2>/dev/null

# cuBLAS and cuDNN: the toolkit's, else the ones PyTorch's wheels installed.
libdirs="$PWD/.gpu/lib"
for f in .gpu/lib-fallback/*; do
  ldconfig -p | grep -q "$(basename "$f")" || { libdirs="$libdirs:$PWD/.gpu/lib-fallback"; break; }
done
for want in libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
  dir=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -e "$d/$want" ]] && { dir=$d; break; }
  done
  if [[ -z "$dir" ]]; then
    hit=$(find /usr /opt -name "$want" -print -quit 2>/dev/null)
    [[ -n "$hit" ]] && dir=$(dirname "$hit")
  fi
  if [[ -z "$dir" ]]; then echo "gpu_test: $want not found on this machine" | tee -a "$out/timing.log"; continue; fi
  case ":$libdirs:" in *":$dir:"*) ;; *) libdirs="$libdirs:$dir" ;; esac
done
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
# NCCL is opened at run time (comm/nccl_library.h): the toolkit's, else PyTorch's wheel's.
if [[ -z "${ADA_NCCL_LIBRARY:-}" ]]; then
  for f in /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/targets/x86_64-linux/lib/libnccl.so.2; do
    [[ -e "$f" ]] && { export ADA_NCCL_LIBRARY=$f; break; }
  done
  [[ -n "${ADA_NCCL_LIBRARY:-}" ]] || export ADA_NCCL_LIBRARY=$(find /usr /opt -name libnccl.so.2 -print -quit 2>/dev/null)
fi
# CUPTI for bench_step --profile's per-kernel table: the one bundled (CUDA 13's, as compiled
# against), else the machine's.
if [[ -z "${ADA_CUPTI_LIBRARY:-}" ]]; then
  for f in "$PWD/.gpu/lib-cupti/libcupti.so.13" /usr/local/cuda/lib64/libcupti.so.13 \
           /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13; do
    [[ -e "$f" ]] && { export ADA_CUPTI_LIBRARY=$f; break; }
  done
fi
# The MPI runtime (a one-rank run starts as an MPI singleton, which needs orted, the MCA
# plugins and PMIx at the paths OpenMPI was built with).
for d in /usr/lib/x86_64-linux-gnu/openmpi:openmpi /usr/lib/x86_64-linux-gnu/pmix2:pmix2 /usr/share/openmpi:share-openmpi; do
  [[ -e "${d%%:*}" ]] || cp -r ".gpu/mpi/${d##*:}" "${d%%:*}"
done
export PATH="$PWD/.gpu/bin:$PATH" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
{
  echo "commit $(cat .gpu/commit 2>/dev/null) (uncommitted at bundling: $(wc -l < .gpu/dirty 2>/dev/null) files)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  lscpu | grep -m1 'Model name'
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "ADA_NCCL_LIBRARY=${ADA_NCCL_LIBRARY:-(none found)}"
  echo "ADA_CUPTI_LIBRARY=${ADA_CUPTI_LIBRARY:-(none found)}"
  ldd .gpu/bin/test_cuda | grep -E 'not found|cublas|cudnn'
} >> "$out/timing.log" 2>&1
cat "$out/timing.log"

status=0
# Each section's end, in seconds since the start, also in $out/timing.log: where a lent GPU's
# minutes go (plan the next call from it).
took() { echo "gpu_test: $1 done at ${SECONDS} s" | tee -a "$out/timing.log"; }
# In `session`, a section that would likely end past the device tool's limit on a call (600 s;
# ADA_CALL_S) is left for a second call, said so: a call cut off mid-section loses that section.
# $2: the section's expected length in seconds (generous).
left_out=""
ends_in_call() { (( SECONDS + $1 <= ${ADA_CALL_S:-590} )); }
# A command's time limit: N seconds, and in `session` no later than 5 s before the call's end,
# so that a command that hangs costs its own section, not every later one (the device tool
# returns what $OUT holds when it ends the call, but nothing runs after).
lim() {
  local n=$1 left=$(( ${ADA_CALL_S:-590} - SECONDS - 5 ))
  [[ "$what" == session ]] && (( left < n )) && n=$(( left > 1 ? left : 1 ))
  echo "$n"
}
fits() {
  [[ "$what" != session ]] && return 0
  ends_in_call "$2" && return 0
  echo "gpu_test: $1 left out at ${SECONDS} s (it would end past the call's limit)" | tee -a "$out/timing.log"
  left_out="$left_out; bash tools/gpu_test.sh $1"
  return 1
}
# BERT-tiny MLM on the GPU, 600 steps of 64 sequences on the bundle's shards (the precision
# section's runs and the graphs section's): out/bert_tiny_gpu.yaml.
bert_tiny_yaml() {
  mkdir -p out
  cat > out/bert_tiny_gpu.yaml <<'YAML'
model: {name: bert, preset: tiny}
data: {name: mlm, path: .gpu/data/mlm-moby, seq_len: 128, workers: 1, validation_size: 512}
optimizer: {name: lamb, lr: 1.0e-2, weight_decay: 0.01}
schedule: {name: linear, warmup_steps: 100}
reducer: {name: average}
train: {steps: 600, batch_per_rank: 64, eval_every: 200, max_eval_batches: 8, clip_grad_norm: 1.0,
        log_every: 200, device: cuda}
YAML
}
if [[ "$what" == tests || "$what" == all || "$what" == session ]]; then
  echo "== cuda tests"
  # The CUDA-graph tests (written without a GPU) in a process of their own: a device fault there
  # (a sticky CUDA error) cannot take the other tests' results with it.
  if [[ "$filter" == "*" ]]; then
    OMP_NUM_THREADS=8 timeout "$(lim 400)" .gpu/bin/test_cuda --gtest_filter="-CudaGraph.*" 2>&1 | tee "$out/test_cuda.log"
    status=${PIPESTATUS[0]}
    OMP_NUM_THREADS=8 timeout "$(lim 120)" .gpu/bin/test_cuda --gtest_filter="CudaGraph.*" 2>&1 | tee -a "$out/test_cuda.log"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  else
    OMP_NUM_THREADS=8 timeout 420 .gpu/bin/test_cuda --gtest_filter="$filter" 2>&1 | tee "$out/test_cuda.log"
    status=${PIPESTATUS[0]}
  fi
  # Which linear-layer GEMMs cuBLASLt ran with the bias in their epilogue (the rest fell back),
  # and which algorithm each cuDNN convolution plan of the conv tests uses.
  grep -E '^\[ (linear|conv)' "$out/test_cuda.log"
  grep -E '^\[  (PASSED|FAILED)|tests? ran|FAILED TEST' "$out/test_cuda.log" | tail -30
  took tests
fi
if [[ "$what" == nccl || "$what" == all ]]; then
  OUT=$out bash tools/gpu_nccl.sh ${2:+"$2"}
  nccl_status=$?
  [[ $status -ne 0 ]] || status=$nccl_status
fi
if [[ "$what" == train || "$what" == all ]]; then
  echo "== trainer: LeNet-5 on MNIST, one rank, train.device cuda against cpu (1 epoch), then several ranks"
  for dev in cuda cpu; do
    echo "-- train.device $dev"
    OMP_NUM_THREADS=8 timeout 300 .gpu/bin/trainer --config configs/mnist_lenet_adasum.yaml \
      --set train.device=$dev --set train.epochs=1 --set output.dir=out/gpu-train-$dev \
      --set checkpoint.overwrite=true 2>&1 | grep -v '^step ' | tail -8
    cat out/gpu-train-$dev/summary.json 2>/dev/null
  done 2>&1 | tee "$out/train.log"
  echo "-- train.device cuda: resumed from its checkpoint for a second epoch" | tee -a "$out/train.log"
  OMP_NUM_THREADS=8 timeout 300 .gpu/bin/trainer --config configs/mnist_lenet_adasum.yaml \
    --set train.device=cuda --set train.epochs=2 --set output.dir=out/gpu-train-cuda --resume auto 2>&1 |
    grep -v '^step ' | grep -E 'resumed|eval at|done|error|accuracy' | tee -a "$out/train.log"
  # Several ranks: NCCL at one rank (train.comm: nccl), then 2 and 4 ranks sharing the GPU
  # (train.comm: auto picks MPI, staging the buckets through host memory), Adasum and average.
  # And bf16 and fp16 matrix products (train.precision; fp16 with dynamic loss scaling, its
  # default), whose accuracy must stay within half a point of fp32's.
  for run in "1 nccl adasum fp32" "2 auto adasum fp32" "4 auto adasum fp32" "4 auto average fp32" \
             "1 auto adasum bf16" "1 auto adasum fp16" "2 auto adasum fp16"; do
    set -- $run
    echo "-- $1 rank(s) on the GPU, train.comm $2, reducer $3, $4 (1 epoch)" | tee -a "$out/train.log"
    OMP_NUM_THREADS=2 timeout 600 .gpu/bin/mpirun -np "$1" --oversubscribe --bind-to none .gpu/bin/trainer \
      --config configs/mnist_lenet_$3.yaml --set train.device=cuda --set train.comm="$2" --set train.epochs=1 \
      --set train.precision="$4" --set output.dir="out/gpu-train-np$1-$3-$4" --set checkpoint.overwrite=true 2>&1 |
      grep -E 'train.comm|eval at|done|error|accuracy|overflow' | tee -a "$out/train.log"
  done
  python3 - out/gpu-train-np1-adasum-{fp32,bf16,fp16}/summary.json <<'PY' 2>&1 | tee -a "$out/train.log"
import json, sys
acc = {}
for path in sys.argv[1:]:
    try:
        s = json.load(open(path))
    except OSError:
        print(f"mixed precision: {path} missing (that run failed)"); sys.exit(1)
    acc[s["precision"]] = s.get("eval_top1", 0.0)
    extra = f", loss scale {s['loss_scale']:g} after {s['loss_scale_overflows']} overflows" if "loss_scale" in s else ""
    print(f"mixed precision: {s['precision']} eval_top1 {100 * acc[s['precision']]:.2f}%{extra}")
bad = 0
for p in ("bf16", "fp16"):
    gap = 100 * (acc["fp32"] - acc[p])
    bad += gap > 0.5
    print(f"mixed precision: {p} {'within' if gap <= 0.5 else 'MORE THAN'} 0.5 points of fp32 ({gap:+.2f})")
sys.exit(1 if bad else 0)
PY
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi
if [[ "$what" == train || "$what" == interop || "$what" == all || "$what" == session ]]; then
  # Hugging Face interop: transformers' own BertForPreTraining, BertForSequenceClassification and
  # BertForQuestionAnswering give the twin's numbers that tests/nn/test_bert_hf.cc holds ours to
  # (seconds: also in session, issue 34's last check).
  echo "-- Hugging Face: transformers on tests/golden/bert_hf{,_heads}.safetensors" | tee -a "$out/train.log"
  python3 tools/hf_compare.py 2>&1 | tee -a "$out/train.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "gpu_test: transformers and the twin differ (above)" | tee -a "$out/train.log"; status=1; }
  took "Hugging Face check"
fi
# Whether a run with train.cuda_graphs (DIR_true) logged the losses of the same run without it
# (DIR_false), to the last bit, and replayed every step after its 2 eager ones (one batch shape).
# Usage: same_losses NAME DIR (the runs' output.dir without the _false / _true suffix).
same_losses() {
  python3 - "$1" "$2" <<'PY'
import json, sys
name, d = sys.argv[1:]
try:
    e, g = (json.load(open(f"{d}_{x}/summary.json")) for x in ("false", "true"))
    le, lg = ([(r["step"], r["loss"]) for r in map(json.loads, open(f"{d}_{x}/metrics.jsonl")) if "loss" in r]
              for x in ("false", "true"))
except (OSError, ValueError) as err:
    print(f"train.cuda_graphs {name}: a run failed ({err})"); sys.exit(1)
replays, eager = g.get("cuda_graph_replays") or 0, g.get("cuda_graph_eager_steps")
print(f"train.cuda_graphs {name}: {replays} replays, {eager} eager steps; wall {e['wall_seconds']:.1f} s "
      f"eager, {g['wall_seconds']:.1f} s graphs; final {[(k, e.get(k), g.get(k)) for k in e if k.startswith(('eval_', 'val_'))]}")
same = le == lg and len(le) > 0
first = next((a, b) for a, b in zip(le + [None], lg + [None]) if a != b) if not same else None
print(f"train.cuda_graphs {name}: " + (f"the same {len(le)} losses as eager steps" if same else
      f"losses DIFFER from eager steps (first: {first})"))
if eager != 2 or replays == 0:
    print(f"train.cuda_graphs {name}: {eager} eager steps, not the 2 before the capture (a batch of another shape or a recapture)")
sys.exit(0 if same and eager == 2 and replays > 0 else 1)
PY
}
if [[ "$what" == graphs_train || "$what" == session ]] && fits graphs_train 150; then
  # train.cuda_graphs in the trainer, eager and with graphs, on deterministic algorithms
  # (ADA_CUDA_DETERMINISTIC=1: cuDNN's, the max-pool and embedding backward in order): the same
  # losses to the last bit, and each run's time. LeNet-5 on MNIST, one epoch; BERT-tiny MLM
  # (dropout, LAMB, evaluations between replays), 200 steps, a loss every 10 (MlmDataset pads
  # each sequence's masked positions to one count: one batch shape).
  bert_tiny_yaml
  for g in false true; do
    rm -rf out/gpu-graphs-lenet_$g out/gpu-graphs-bert_$g
    echo "-- trainer LeNet-5 MNIST, train.cuda_graphs=$g"
    ADA_CUDA_DETERMINISTIC=1 OMP_NUM_THREADS=8 timeout "$(lim 150)" .gpu/bin/trainer \
      --config configs/mnist_lenet_adasum.yaml --set train.device=cuda --set train.epochs=1 \
      --set train.cuda_graphs=$g --set output.dir=out/gpu-graphs-lenet_$g 2>&1 |
      grep -E 'CUDA graph|cuda_graphs|eval at|done|error' | tail -6
    echo "-- trainer BERT-tiny MLM 200 steps, train.cuda_graphs=$g"
    ADA_CUDA_DETERMINISTIC=1 OMP_NUM_THREADS=8 timeout "$(lim 150)" .gpu/bin/trainer --config out/bert_tiny_gpu.yaml \
      --set train.steps=200 --set train.eval_every=100 --set train.log_every=10 \
      --set train.cuda_graphs=$g --set output.dir=out/gpu-graphs-bert_$g 2>&1 |
      grep -E 'CUDA graph|cuda_graphs|error' | tail -4
  done 2>&1 | tee -a "$out/graphs.log"
  for run in "LeNet-5 out/gpu-graphs-lenet" "BERT-tiny out/gpu-graphs-bert"; do
    same_losses $run 2>&1 | tee -a "$out/graphs.log"
    if [[ ${PIPESTATUS[0]} -ne 0 ]]; then
      status=1
      # The evidence, so that a difference is diagnosed without another session.
      set -- $run
      for g in false true; do
        echo "--- $2_$g: summary.json, metrics.jsonl"; cat "$2_$g/summary.json" "$2_$g/metrics.jsonl"
      done 2>&1 | tee -a "$out/graphs.log" > /dev/null
    fi
  done
  took "CUDA graphs (trainer)"
fi
if [[ "$what" == nccl_choice || "$what" == session ]] && fits nccl_choice 60; then
  # train.comm: auto on 2 ranks sharing this GPU (comm/step_comm.cc, never run on a GPU before):
  # without the shared-GPU mode the GPUs' UUIDs say rank 0's is rank 1's, so MPI stages the
  # buckets; with ADA_NCCL_SHARED_GPU=1 NCCL runs. LeNet-5 MNIST, 200 steps each.
  for shared in 0 1; do
    echo "-- 2 ranks on the GPU, train.comm auto, ADA_NCCL_SHARED_GPU=$shared" | tee -a "$out/train.log"
    ADA_NCCL_SHARED_GPU=$shared OMP_NUM_THREADS=2 timeout "$(lim 60)" .gpu/bin/mpirun -np 2 --oversubscribe --bind-to none \
      -x ADA_NCCL_SHARED_GPU .gpu/bin/trainer --config configs/mnist_lenet_adasum.yaml --set train.device=cuda \
      --set train.comm=auto --set train.epochs=0 --set train.steps=200 --set output.dir=out/gpu-comm-shared$shared \
      --set checkpoint.overwrite=true 2>&1 | grep -E 'train.comm|done|error' | tee -a "$out/train.log"
  done
  grep -q "train.comm: MPI, staging .* is also rank" "$out/train.log" && grep -q "train.comm: NCCL on cuda" "$out/train.log" ||
    { echo "gpu_test: train.comm auto did not choose MPI staging, then NCCL, as the GPUs' UUIDs say" | tee -a "$out/train.log"; status=1; }
  took "train.comm choice"
fi
if [[ "$what" == train || "$what" == interop || "$what" == all ]]; then
  # train.tensorboard read by TensorBoard's own event reader (this machine has tensorboard; the
  # suite checks the files with an independent reader: tests/tools/tensorboard_reader.py).
  echo "-- train.tensorboard read by TensorBoard's EventAccumulator" | tee -a "$out/train.log"
  OMP_NUM_THREADS=8 timeout 300 .gpu/bin/trainer --config configs/mnist_lenet_adasum.yaml --set train.epochs=0 \
    --set train.steps=200 --set train.eval_every=100 --set train.tensorboard=out/tb \
    --set output.dir=out/gpu-tb --set checkpoint.overwrite=true > "$out/tb_run.log" 2>&1 || tail -5 "$out/tb_run.log"
  python3 - out/tb/gpu-tb out/gpu-tb/metrics.jsonl <<'PY' 2>&1 | tee -a "$out/train.log"
import json, struct, sys
try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as e:
    print(f"tensorboard: not installed here ({e})"); sys.exit(0)
acc = EventAccumulator(sys.argv[1]); acc.Reload()
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
want = {}
for line in open(sys.argv[2]):
    r = json.loads(line)
    for k, v in r.items():
        if isinstance(v, (int, float)) and k not in ("step", "epoch", "wall_s"):
            want.setdefault(k, []).append((r["step"], f32(v)))
got = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
print("tensorboard: " + ("its reader sees every scalar of metrics.jsonl" if got == want else f"DIFFERS:\n{got}\n{want}"))
PY
fi
py=$(command -v python3)
# bench_step against PyTorch eager for each case (a model and its flags; a --twins in the case
# comes later on the command line and wins).
step_cases() {
  for m in "$@"; do
    echo "-- bench_step --model $m --device cuda"
    timeout "$(lim 300)" .gpu/bin/bench_step --twins eager --model $m --device cuda --steps 20 --python "$py" 2>&1
  done
}
if [[ "$what" == bench || "$what" == all ]]; then
  echo "== benchmarks (ours against PyTorch eager on this GPU)"
  {
    step_cases "resnet50 --batch 64" "resnet50 --batch 128" "bert_large --batch 16 --seq 128" \
               "bert_large --batch 4 --seq 512" "bert_base --batch 32 --seq 128" "resnet20_mnist --batch 256"
    for m in "resnet50 --batch 64" "bert_large --batch 16 --seq 128"; do
      for p in bf16 fp16; do
        echo "-- bench_step --model $m --device cuda --precision $p (against torch.autocast $p)"
        timeout 300 .gpu/bin/bench_step --model $m --device cuda --precision $p --steps 20 --python "$py" 2>&1
      done
    done
    echo "-- bench_ops --device cuda"
    timeout 300 .gpu/bin/bench_ops --device cuda --python "$py" --batch 64 --repeats 5 --verbose 2>&1
  } | tee "$out/bench.log"
fi
if [[ "$what" == peers ]]; then
  # Issue 33's targets: bf16 against the fastest of every twin (channels-last, torch.compile,
  # SDPA, transformers' BERT), fp32 against eager. torch.compile's first step compiles (about a
  # minute per model on the H100 machine's 16 cores), hence 10 timed steps and a limit per case.
  echo "== ours against PyTorch at its best (bench_step --device cuda, all twins)"
  # Ours at its best too: 16-bit activations, channels-last ResNets; at s512 the composed
  # attention (95 samples/s against the fused kernels' 52 on the H200 of 2026-11-27).
  a16="--precision bf16 --activations 16bit"
  for m in "resnet50 --batch 64 $a16 --channels-last" "resnet50 --batch 256 $a16 --channels-last" \
           "bert_large --batch 64 --seq 128 $a16 --attention composed" \
           "bert_large --batch 16 --seq 512 $a16 --attention composed" \
           "resnet50 --batch 64 --twins eager" "bert_large --batch 16 --seq 128 --twins eager"; do
    echo "-- bench_step --model $m --device cuda"
    timeout 240 .gpu/bin/bench_step --model $m --device cuda --steps 10 --python "$py" 2>&1
    for f in /tmp/bench_step_torch*.err; do grep -q . "$f" && { echo "   $f:"; tail -3 "$f"; }; done
    rm -f /tmp/bench_step_torch*.err
  done | tee "$out/peers.log"
fi
if [[ "$what" == attention ]]; then
  # model.attention composed against fused (ops::fused_attention's kernels) at issue 33's BERT
  # cases, ours only (the twins are in peers): throughput and peak memory side by side.
  echo "== BERT-Large bf16, attention composed vs fused (bench_step --no-torch)"
  for m in "bert_large --batch 64 --seq 128" "bert_large --batch 16 --seq 512"; do
    for a in composed fused; do
      echo "-- bench_step --model $m --precision bf16 --attention $a --device cuda --no-torch"
      timeout 150 .gpu/bin/bench_step --model $m --precision bf16 --attention $a --device cuda \
        --steps 10 --no-torch 2>&1
    done
  done | tee "$out/attention.log"
  # 16-bit activations (train.activations: 16bit): the composed step (every op with a 16-bit
  # kernel: no copies) at s128 b64 and the fused one (no copies either) at s512 b16, time
  # and peak memory against the lines above.
  for m in "bert_large --batch 64 --seq 128 --attention composed" "bert_large --batch 16 --seq 512 --attention fused"; do
    echo "-- bench_step --model $m --precision bf16 --activations 16bit --device cuda --no-torch"
    timeout 150 .gpu/bin/bench_step --model $m --precision bf16 --activations 16bit --device cuda \
      --steps 10 --no-torch 2>&1
  done | tee -a "$out/attention.log"
  # The linear layers' bias in cuBLASLt's GEMM epilogues (the default) against off: the s128 b64
  # 16-bit step again with ADA_CUDA_LT_EPILOGUES=0.
  m="bert_large --batch 64 --seq 128 --attention composed"
  echo "-- ADA_CUDA_LT_EPILOGUES=0 bench_step --model $m --precision bf16 --activations 16bit --device cuda --no-torch" | tee -a "$out/attention.log"
  ADA_CUDA_LT_EPILOGUES=0 timeout 150 .gpu/bin/bench_step --model $m --precision bf16 --activations 16bit \
    --device cuda --steps 10 --no-torch 2>&1 | tee -a "$out/attention.log"
  # The CNN path with 16-bit activations (convolutions, batch norm and pools in bf16; only the
  # filter gradients on f32 copies) against fp32 activations, then channels-last (cuDNN's NHWC
  # convolutions, model.channels_last): ResNet-50 b256 bf16, ours only.
  for opts in "--activations fp32" "--activations 16bit" "--activations 16bit --channels-last"; do
    echo "-- bench_step --model resnet50 --batch 256 --precision bf16 $opts --device cuda --no-torch"
    timeout 150 .gpu/bin/bench_step --model resnet50 --batch 256 --precision bf16 $opts \
      --device cuda --steps 10 --no-torch 2>&1
  done | tee -a "$out/attention.log"
fi
precision_runs() {
  # BERT-tiny MLM on the GPU in fp32 (two seeds: the seed noise), bf16 with composed and fused
  # attention, fp16 fused (loss scaling): 600 steps of 64 sequences on the bundle's shards (1,799
  # training sequences, the last 512 held out), past the unigram plateau (6.76, where 300 steps
  # of 32 left every precision on 2026-11-27): on the CPU this config reached validation MLM loss
  # 6.38 / 6.20 / 6.21 at steps 250 / 500 / 750 (overfitting from there); each 16-bit run's final
  # validation MLM loss against fp32's, judged against the two fp32 seeds' difference (issue 33
  # item 6).
  bert_tiny_yaml
  for run in "fp32 composed 1 fp32" "fp32 composed 2 fp32" "bf16 composed 1 fp32" "bf16 fused 1 fp32" \
             "fp16 fused 1 fp32" "bf16 fused 1 16bit"; do
    set -- $run
    sfx=""; [[ $4 == 16bit ]] && sfx="-act16"
    echo "-- BERT-tiny MLM, cuda, precision $1, attention $2, seed $3, activations $4" | tee -a "$out/attention.log"
    OMP_NUM_THREADS=8 timeout "$(lim 240)" .gpu/bin/trainer --config out/bert_tiny_gpu.yaml --set train.precision=$1 \
      --set model.attention=$2 --set train.seed=$3 --set train.activations=$4 \
      --set output.dir=out/bert-tiny-$1-$2-s$3$sfx \
      --set checkpoint.overwrite=true 2>&1 | grep -E 'val_mlm|done|error' | tail -3 | tee -a "$out/attention.log"
  done
  python3 - <<'PY' 2>&1 | tee -a "$out/attention.log"
import json
def val(name):
    try:
        return json.load(open(f"out/bert-tiny-{name}/summary.json"))["val_mlm_loss"]
    except (OSError, KeyError) as e:
        return None
f1, f2 = val("fp32-composed-s1"), val("fp32-composed-s2")
if f1 is None or f2 is None:
    print("bert-tiny precision: an fp32 run failed"); raise SystemExit(1)
noise = abs(f1 - f2)
print(f"bert-tiny precision: fp32 val_mlm_loss {f1:.4f} (seed 2: {f2:.4f}, seed noise {noise:.4f})")
bad = 0
for name in ("bf16-composed-s1", "bf16-fused-s1", "fp16-fused-s1", "bf16-fused-s1-act16"):
    v = val(name)
    if v is None:
        print(f"bert-tiny precision: {name} FAILED"); bad += 1; continue
    verdict = "within" if abs(v - f1) <= max(2 * noise, 0.01) else "BEYOND"
    bad += verdict == "BEYOND"
    print(f"bert-tiny precision: {name} {v:.4f} ({v - f1:+.4f}), {verdict} twice the fp32 seed noise")
raise SystemExit(1 if bad else 0)
PY
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  took "BERT-tiny precision runs"
}
if [[ "$what" == attention || "$what" == precision ]]; then precision_runs; fi
if [[ "$what" == step ]]; then
  IFS=';' read -ra cases <<< "$filter"
  step_cases "${cases[@]}" | tee "$out/step.log"
fi
if [[ "$what" == convsurvey ]]; then
  .gpu/bin/conv_survey 2>&1 | tee "$out/conv_survey.log"
  status=${PIPESTATUS[0]}
fi
# A long stage run under `timeout LIMIT` stops itself before the device tool's limit so that its
# cells come back: its exit 124 is that planned stop, not a failure. Usage: planned_stop NAME LIMIT
# (after status=${PIPESTATUS[0]}).
planned_stop() {
  if [[ $status -eq 124 ]]; then
    echo "gpu_test: $1 stopped after $2 s, as planned"
    status=0
  fi
}
if [[ "$what" == downstream ]]; then
  [[ -f .gpu/data-downstream.tar.gz ]] ||
    { echo "gpu_test: .gpu/data-downstream.tar.gz missing: run tools/gpu_bundle.sh --downstream" >&2; exit 2; }
  tar -C data -xzf .gpu/data-downstream.tar.gz
  # The cells go to the committed folder (a second call resumes from the cells.json this one
  # brought back and a session committed) and come back through $out; the study stops itself
  # before the device tool's limit so that they do.
  ds=docs/results/bert_tiny_downstream_gpu
  timeout "${ADA_DOWNSTREAM_S:-530}" python3 tools/downstream_study.py --device cuda \
    --trainer .gpu/bin/trainer --mpirun .gpu/bin/mpirun --pretrain-steps "${2:-3000}" --kinds finetune probe \
    --choose-lr --out "$ds" 2>&1 | tee "$out/downstream.log"
  status=${PIPESTATUS[0]}
  planned_stop downstream "${ADA_DOWNSTREAM_S:-530}"
  mkdir -p "$out/bert_tiny_downstream_gpu" && cp -r "$ds"/. "$out/bert_tiny_downstream_gpu/"
fi
if [[ "$what" == study ]]; then
  [[ -f .gpu/data-downstream.tar.gz ]] ||
    { echo "gpu_test: .gpu/data-downstream.tar.gz missing: run tools/gpu_bundle.sh --downstream" >&2; exit 2; }
  python3 -c 'import yaml' 2>/dev/null ||
    { echo "gpu_test: this machine's python3 has no yaml module, which tools/study.py reads studies with" >&2; exit 2; }
  tar -C data -xzf .gpu/data-downstream.tar.gz
  name=${ADA_STUDY:-bert_tiny_scaling_limit}
  only=()
  IFS=';' read -ra specs <<< "$filter"
  for s in "${specs[@]}"; do [[ "$s" == "*" || -z "$s" ]] || only+=(--only "$s"); done
  # The runner skips the cells the committed cells.json has (any trainer version: the cells
  # record each binary's commit); timeout stops it before the device tool's limit (a planned
  # stop), and a cell cut short runs again next time.
  OMP_NUM_THREADS=1 timeout "${ADA_STUDY_S:-530}" python3 tools/study.py "studies/$name.yaml" \
    --no-build --no-fetch --any-trainer --device cuda --trainer .gpu/bin/trainer \
    --mpirun .gpu/bin/mpirun "${only[@]}" 2>&1 | tee "$out/study.log"
  status=${PIPESTATUS[0]}
  planned_stop study "${ADA_STUDY_S:-530}"
  for f in runs/studies/"$name"/*/study_cell.json; do
    [[ -e "$f" ]] || continue
    d=$(dirname "$f") && mkdir -p "$out/study/$(basename "$d")"
    cp "$f" "$d"/summary.json "$d"/metrics.jsonl "$d"/log.txt "$out/study/$(basename "$d")/" 2>/dev/null
  done
  echo "gpu_test: $(ls "$out/study" 2>/dev/null | wc -l) finished cell(s) in $out/study"
fi
if [[ "$what" == session ]]; then
  # Issue 33's figures in one call, every target of its table: ours at its best against each
  # case's fastest twin (as found on 2026-11-26/27; `peers` runs every twin), the fp32 steps
  # against eager PyTorch (TF32 off on both sides), then s512 with model.recompute and with fused
  # attention (ours only: the memory target).
  a16="--precision bf16 --activations 16bit --channels-last"
  b16="--precision bf16 --activations 16bit --attention composed"
  cases=("resnet50 --batch 256 $a16 --twins compile"
         "bert_large --batch 64 --seq 128 $b16 --twins hf_sdpa"
         "bert_large --batch 16 --seq 512 $b16 --twins hf_sdpa"
         "resnet50 --batch 64 $a16 --twins compile"
         "resnet50 --batch 64" "bert_large --batch 16 --seq 128"
         "bert_large --batch 16 --seq 512 $b16 --recompute attention_dropout,gelu --no-torch"
         "bert_large --batch 16 --seq 512 --precision bf16 --activations 16bit --attention fused --no-torch")
  # Each case while it would likely end inside the call (150 s: a torch.compile twin's case);
  # the rest, in order, are left for the second call.
  : > "$out/session_step.log"
  rest=()
  for m in "${cases[@]}"; do
    if (( ${#rest[@]} == 0 )) && ends_in_call 150; then
      step_cases "$m" | tee -a "$out/session_step.log"
    else
      rest+=("$m")
    fi
  done
  if (( ${#rest[@]} )); then
    echo "gpu_test: ${#rest[@]} step case(s) left out at ${SECONDS} s" | tee -a "$out/timing.log"
    left_out="$left_out; bash tools/gpu_test.sh step \"$(IFS=';'; echo "${rest[*]}")\""
  fi
  took "step cases"
fi
if [[ "$what" == profile || "$what" == session ]] && fits profile 180; then
  echo "== per-op GPU time (bench_step --profile)"
  # The mixed-precision steps issue 33 is about (the fp32 profile is in docs/results/gpu_h200):
  # where a bf16 step with 16-bit activations spends its time. A filter names other cases.
  cases=("resnet50 --batch 256 --precision bf16 --activations 16bit"
         "resnet50 --batch 256 --precision bf16 --activations 16bit --channels-last"
         "bert_large --batch 64 --seq 128 --precision bf16 --activations 16bit"
         "bert_large --batch 16 --seq 512 --precision bf16 --activations 16bit"
         "bert_large --batch 16 --seq 512 --precision bf16 --activations 16bit --attention fused")
  [[ "$filter" == "*" ]] || IFS=';' read -ra cases <<< "$filter"
  for m in "${cases[@]}"; do
    echo "-- $m"
    timeout "$(lim 300)" .gpu/bin/bench_step --model $m --device cuda --steps 5 --no-torch --profile 2>&1 | head -110
  done | tee "$out/profile.log"
  took profile
fi
if [[ "$what" == bn || "$what" == session ]] && fits bn 120; then
  # ResNet-50's batch-norm + ReLU kernels alone at b256, NCHW and channels-last, f32 and bf16,
  # against eager PyTorch's in the same layout (GB/s of the least traffic; the convolutions and a
  # small GEMM come with bench_ops): is channels-last's backward slow per byte, or the step around it?
  echo "== batch-norm kernels (bench_ops --device cuda --bn)"
  timeout "$(lim 150)" .gpu/bin/bench_ops --device cuda --bn --python "$py" --batch 256 --repeats 3 --gemm 1024 2>&1 |
    tee "$out/bn.log"
  # A/B: the channels-last normalising passes as the flat kernels they replaced on 2026-11-28.
  echo "== the same, ours only, ADA_CUDA_BN_ROWS_APPLY=0 (channels-last normalising passes as flat kernels)"
  ADA_CUDA_BN_ROWS_APPLY=0 timeout "$(lim 100)" .gpu/bin/bench_ops --device cuda --bn --no-torch --batch 256 \
    --repeats 3 --gemm 1024 2>&1 | tee -a "$out/bn.log"
  # A/B: cuDNN's NHWC batch norm (ReLU and residual add fused in it) under the channels-last
  # ResNet-50 (ADA_CUDA_BN_CUDNN=1; tests: CudaOps.CudnnBatchNormMatchesADoubleReference): its
  # kernels alone, then the whole b256 step, ours only (our kernels' step is in session_step.log
  # and the profile above).
  echo "== the same, ours only, ADA_CUDA_BN_CUDNN=1 (channels-last cases on cuDNN's batch norm)"
  ADA_CUDA_BN_CUDNN=1 timeout "$(lim 100)" .gpu/bin/bench_ops --device cuda --bn --no-torch --batch 256 \
    --repeats 3 --gemm 1024 2>&1 | tee -a "$out/bn.log"
  m="resnet50 --batch 256 --precision bf16 --activations 16bit --channels-last"
  echo "-- ADA_CUDA_BN_CUDNN=1 bench_step --model $m --device cuda --no-torch" | tee -a "$out/bn.log"
  ADA_CUDA_BN_CUDNN=1 timeout "$(lim 150)" .gpu/bin/bench_step --model $m --device cuda --steps 10 --no-torch \
    2>&1 | tee -a "$out/bn.log"
  took "batch-norm A/B"
fi
if [[ "$what" == graphs || "$what" == session ]] && fits graphs 150; then
  # Issue 33 item 5: what launching the step as one CUDA graph saves (cuda::Graph; the CUDA tests'
  # CudaGraph.* hold replays to the eager steps' bits). A refused capture prints its reason.
  echo "== CUDA graphs: the step replayed against the same step run eagerly (bench_step --graphs)"
  a16="--precision bf16 --activations 16bit --channels-last"
  b16="--precision bf16 --activations 16bit --attention composed"
  for m in "resnet20_mnist --batch 256" "resnet50 --batch 64 $a16" "resnet50 --batch 256 $a16" \
           "bert_large --batch 16 --seq 128 $b16" "bert_large --batch 64 --seq 128 $b16"; do
    echo "-- bench_step --model $m --device cuda --no-torch --graphs"
    timeout "$(lim 120)" .gpu/bin/bench_step --model $m --device cuda --steps 20 --no-torch --graphs 2>&1
  done | tee "$out/graphs.log"
  took "CUDA graphs (bench_step)"
fi
# Only now in session: the BERT-tiny runs in each precision (they held on 2026-11-27, issue 33
# item 6; the step's figures and the blind kernels' tests come first).
if [[ "$what" == session ]] && fits precision 120; then precision_runs; fi
if [[ -n "$left_out" ]]; then
  echo "gpu_test: the second call: ${left_out#; }" | tee -a "$out/timing.log"
fi
exit "$status"
