#!/usr/bin/env bash
# A one-node Slurm on this machine, and the trainer under it: installs Debian's Slurm 22.05 and
# MUNGE when missing, writes a minimal slurm.conf (this node's name, CPUs and memory from
# `slurmd -C`, proctrack/linuxproc, task/none, MpiDefault=pmix, no accounting) in a temporary
# folder, starts munged, slurmctld and slurmd as root on loopback without systemd, runs the
# checks, and stops every daemon it started (by pid) whatever happens. The checks:
#   srun    srun --mpi=pmix -n 4 runs the trainer (rank and world from Slurm's PMIx): the run's
#           metrics.jsonl and eval figures equal those of the same run under mpirun
#   sbatch  tools/slurm/train.sbatch, sent SIGUSR1 (as `--signal=USR1@S` does before the time
#           limit) once it has written a checkpoint: the ranks stop with a checkpoint and the
#           script requeues the job; then `scontrol requeue` (SIGTERM): the ranks stop with a
#           checkpoint again; each time the job resumes from the step it stopped at, and the run
#           ends with an unbroken run's curves and checkpoint
#   salloc  salloc -n 4 mpirun: OpenMPI takes the allocation from Slurm
#   kill    a rank killed under srun stops the whole job within 30 s (the SIGTERM srun -K sends
#           the others: they give up the stop checkpoint 5 s later, naming the gone peer)
#   tools/slurm_test.sh [BUILD_DIR]     (default build; needs root, or sudo, for apt and daemons)
set -uo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build=$(realpath "${1:-build}")
trainer=$build/bin/trainer
[[ -x "$trainer" ]] || { echo "slurm_test: $trainer missing: build first (tools/test.sh)" >&2; exit 2; }
start=$(date +%s)

# tools/test.sh installed it with everything else (one apt-get update); alone, this installs it.
bash tools/setup.sh --slurm || { echo "slurm_test: installing Slurm failed (tools/setup.sh --slurm)" >&2; exit 1; }
installed=$(date +%s)

dir=$(mktemp -d /tmp/ada-slurm.XXXXXX)
pids=()
stop_daemons() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
}
trap stop_daemons EXIT
fail() {
  echo "slurm_test: FAIL: $*"
  for f in "$dir"/*.log; do echo "== $f"; tail -15 "$f"; done
  echo "slurm_test: everything is kept in $dir"
  exit 1
}

# MUNGE: its own socket, pid and seed files in the folder (not the system's /run/munge).
install -d -o munge -g munge -m 0700 "$dir/munge"
munged -F --force --socket="$dir/munge/socket" --pid-file="$dir/munge/pid" \
  --seed-file="$dir/munge/seed" --log-file="$dir/munged.log" &
pids+=($!)
export MUNGE_SOCKET=$dir/munge/socket  # not read by Slurm: its AuthInfo below says where

host=$(hostname -s)
node=$(slurmd -C | head -1)  # NodeName=... CPUs=... RealMemory=...
mkdir -p "$dir/state" "$dir/spool"
cat > "$dir/slurm.conf" <<CONF
ClusterName=adatrain
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket,cred_expire=10
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" > "$dir/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 60); do
  sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' && break
  sleep 0.5
done
sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' || fail "the node did not come up: $(sinfo 2>&1)"
echo "slurm_test: Slurm $(sinfo -V | awk '{print $2}') up on $host ($node) in $(( $(date +%s) - installed )) s"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
cd "$dir"
# A short LeNet-5 / MNIST Adasum run: 60 steps of 4 ranks x 32, evaluated at steps 30 and 60.
# Every step logged and one checkpoint kept: a run stopped by a signal (a checkpoint at that step,
# the losses up to it) and resumed then leaves the same files as an unbroken one.
run=(--config "$src/configs/mnist_lenet_adasum.yaml" --set data.path="$src/data/mnist"
     --set train.epochs=0 --set train.steps=60 --set train.eval_every=30 --set train.log_every=1
     --set schedule.warmup_steps=10 --set checkpoint.every=20 --set checkpoint.keep=1
     --set checkpoint.overwrite=true)
same() { /usr/bin/python3 "$src/tools/same_runs.py" "$1" "$2" > same.txt 2>&1 || { cat same.txt; fail "$3"; }; }

# ---- srun: 4 ranks from Slurm's PMIx, the same run as under mpirun --------------------------------
mpirun -np 4 --oversubscribe --mca mpi_yield_when_idle 1 --bind-to none "$trainer" "${run[@]}" \
  --set output.dir=mpirun > mpirun.log 2>&1 || { tail -20 mpirun.log; fail "the mpirun run"; }
srun --mpi=pmix -n 4 --overcommit -K "$trainer" "${run[@]}" --set output.dir=srun > srun.log 2>&1 ||
  { tail -20 srun.log; fail "srun --mpi=pmix -n 4"; }
grep -q "4 ranks" srun.log || { tail -20 srun.log; fail "srun: the trainer did not see 4 ranks"; }
same mpirun srun "srun: not the run mpirun gives"
echo "slurm_test: srun --mpi=pmix -n 4: 4 ranks; metrics, eval figures and checkpoints equal the mpirun run's ($(grep -o 'final evaluation.*' srun.log | head -1))"

# ---- sbatch: SIGUSR1 (time limit near) and scontrol requeue (SIGTERM), resumed each time -------
# Rank 0 sleeps 200 ms a step (train.straggler: timing only, no number changes) so that the
# signals land mid-run: 60 steps take at least 12 s.
slow=(--set train.straggler.ranks=[0] --set train.straggler.delay_ms=200)
job=$(sbatch --parsable -n 4 --overcommit -o sbatch-%j.log --export=ALL,ADA_TRAINER="$trainer" \
      "$src/tools/slurm/train.sbatch" "${run[@]}" "${slow[@]}" --set output.dir=sbatch) || fail "sbatch"
log=sbatch-$job.log
wait_for() {  # seconds, what (for the message), test...
  local s=$1 what=$2; shift 2
  for _ in $(seq $((s * 4))); do "$@" && return 0; sleep 0.25; done
  tail -20 "$log"; fail "sbatch: $what not within $s s"
}
state_is() { [[ "$(squeue -h -j "$job" -o %T 2>/dev/null)" == "$1" ]]; }
requeued() {  # the job back in the queue
  wait_for 30 "job $job pending after $1" state_is PENDING
  # Slurm holds a requeued job back until its revoked credential expires (cred_expire above).
  echo "slurm_test: job $job requeued after $1: $(squeue -h -j "$job" -o '%T, reason %r, begins %S')"
}
wait_for 60 "a checkpoint at step 20" test -e sbatch/checkpoints/ckpt-00000020.json
scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 $job"
wait_for 30 "a stop for SIGUSR1" grep -q "stopped by SIGUSR1 at step" "$log"
requeued SIGUSR1
first=$(grep -o "stopped by SIGUSR1 at step [0-9]*" "$log" | grep -o "[0-9]*$")
wait_for 60 "the resume from step $first" grep -q "resumed from .*ckpt-0*$first.json" "$log"
wait_for 60 "a checkpoint at step 40" test -e sbatch/checkpoints/ckpt-00000040.json
scontrol requeue "$job" || fail "scontrol requeue $job"
wait_for 30 "a stop for SIGTERM" grep -q "stopped by SIGTERM at step" "$log"
second=$(grep -o "stopped by SIGTERM at step [0-9]*" "$log" | grep -o "[0-9]*$")
requeued "scontrol requeue"
wait_for 120 "the end of job $job" state_is ""
grep -q "resumed from .*ckpt-0*$second.json" "$log" || { tail -30 "$log"; fail "sbatch: not resumed from step $second"; }
same mpirun sbatch "sbatch: the stopped and resumed run's curves differ from an unbroken run's"
echo "slurm_test: sbatch tools/slurm/train.sbatch: SIGUSR1 stopped it at step $first (checkpoint written, job requeued by the script), scontrol requeue at step $second; resumed from each; curves and final checkpoint equal an unbroken run's"

# ---- salloc + mpirun ----------------------------------------------------------------------------
salloc -n 4 --overcommit mpirun --oversubscribe --mca mpi_yield_when_idle 1 --bind-to none \
  "$trainer" "${run[@]}" --set output.dir=salloc > salloc.log 2>&1 || { tail -20 salloc.log; fail "salloc -n 4 mpirun"; }
same mpirun salloc "salloc + mpirun: not the run mpirun gives"
echo "slurm_test: salloc -n 4 mpirun: the same run"

# ---- a killed rank stops the job ---------------------------------------------------------------
# No checkpoint before the kill: a save waits patiently for every rank (comm::PatientWait: no
# 5-s rule; reliability_preempt's `slow` case tests that wait), so a rank killed inside one would
# leave the others waiting for Slurm's KillWait instead of saying a peer is gone.
srun --mpi=pmix -n 4 --overcommit -K "$trainer" "${run[@]}" --set train.steps=100000 \
  --set checkpoint.every=1000000 --set output.dir=killed > killed.log 2>&1 &
srun_pid=$!
for _ in $(seq 120); do grep -q "^step\|step [0-9]*/" killed.log 2>/dev/null && break; sleep 0.5; done
victim=$(pgrep -f "output.dir=killed" | while read -r p; do
  [[ $(cat /proc/$p/comm 2>/dev/null) == trainer ]] && echo "$p"; done | tail -1)
[[ -n "$victim" ]] || fail "kill: no trainer process found"
killed_at=$(date +%s.%N)  # seconds, for python below
kill -9 "$victim"
for _ in $(seq 300); do kill -0 "$srun_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$srun_pid" 2>/dev/null; then
  kill -9 "$srun_pid"; fail "kill: the job still runs 30 s after a rank was killed"
fi
took=$(/usr/bin/python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$killed_at")
sleep 1
left=$(pgrep -f "output.dir=killed" | while read -r p; do
  [[ $(cat /proc/$p/comm 2>/dev/null) == trainer ]] && echo "$p"; done)
[[ -z "$left" ]] || fail "kill: ranks still running after srun ended: $left"
# srun -K sent SIGTERM to the others: they gave up agreeing on a stop step with a rank gone.
grep -q "SIGTERM received, and the communication call .* has not completed [0-9]* s later: a peer rank is gone" killed.log ||
  { tail -20 killed.log; fail "kill: the other ranks did not say a peer was gone"; }
echo "slurm_test: a rank killed (pid $victim): srun and every other rank stopped after $took s"

echo "slurm_test: all checks passed in $(( $(date +%s) - installed )) s after the install ($(( installed - start )) s)"
cd / && rm -rf "$dir"
