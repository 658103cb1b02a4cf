// trainer's main: MPI start-up, one top-level catch, MPI_Abort on error so no rank hangs.
#include <exception>
#include <string>

#include "apps/trainer/trainer.h"
#include "base/log.h"
#include "comm/mpi_runtime.h"

int main(int argc, char** argv) {
  ada::comm::MpiRuntime mpi(&argc, &argv);
  ada::init_logging(mpi.rank(), mpi.size());
  try {
    return ada::trainer::run(argc, argv, mpi);
  } catch (const std::exception& e) {
    ada::log_error(std::string("trainer: ") + e.what());
    ada::flush_log();
    if (mpi.size() == 1) return 1;
    ada::comm::MpiRuntime::abort(1);
  }
}
