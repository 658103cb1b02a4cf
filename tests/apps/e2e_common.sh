# The shared start of the end-to-end scripts (trainer_e2e.sh, reliability_e2e.sh), sourced first
# thing: reads their arguments TRAINER SOURCE_DIR WORK_DIR CASE into trainer, src, work and case;
# sets MPI's environment as CTest does for the MPI tests; defines mpi NP CMD... (mpiexec with
# CTest's flags) and fail MESSAGE (prints FAIL: MESSAGE, escapes such as \n expanded, and exits
# 1); and runs the case in a fresh folder WORK_DIR/CASE. On exit (a failure above all) it ends what
# the case left running in the background (a long run would slow every later test; a script
# with its own EXIT trap calls end_background in it).
# shellcheck shell=bash disable=SC2034  # src, trainer, mpi and fail are for the caller
set -uo pipefail
trainer=$1 src=$2 work=$3 case=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpi() { local np=$1; shift; mpiexec -np "$np" --oversubscribe --mca mpi_yield_when_idle 1 --bind-to none "$@"; }
fail() { echo -e "FAIL: $*"; exit 1; }
end_background() {
  local p
  for p in $(jobs -p); do pkill -TERM -P "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done
}
trap end_background EXIT
rm -rf "${work:?}/$case" && mkdir -p "$work/$case" && cd "$work/$case" || exit 1
