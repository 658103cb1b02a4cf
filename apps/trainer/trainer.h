// The trainer: a YAML config in; a trained model, checkpoints and comparable curves out.
//   trainer --config FILE [--set key.path=value ...] [--resume auto|PATH] [--describe]
// Runs under mpirun/srun or alone. See configs/README.md for every key and DESIGN.md §4 for
// the step: batch -> forward -> loss -> backward (buckets reduced while it runs) -> reducer ->
// optimizer (gradient or model-delta mode) -> schedule; evaluation, guards, checkpoints.
#pragma once

namespace ada::comm {
class MpiRuntime;
}

namespace ada::trainer {

// Parses the command line, trains, returns the exit status. Throws ada::Error on bad input;
// main() logs it and aborts every rank.
int run(int argc, char** argv, comm::MpiRuntime& mpi);

}  // namespace ada::trainer
