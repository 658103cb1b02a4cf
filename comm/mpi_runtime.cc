#include "comm/mpi_runtime.h"

#include <cstdlib>

#include "base/log.h"
#include "comm/comm_thread.h"
#include "comm/mpi_check.h"

namespace ada::comm {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  ADA_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    ADA_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
    owns_ = true;
    ADA_CHECK_ARG(provided >= MPI_THREAD_SERIALIZED, CommError)
        << "the MPI library provides thread level " << provided
        << " but Adatrain needs MPI_THREAD_SERIALIZED; use an MPI built with thread support";
  }
  ADA_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  ADA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  ADA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  set_process_rank(rank_, size_);
}

MpiRuntime::~MpiRuntime() {
  CommThread::instance().shutdown();  // no MPI call may run after MPI_Finalize
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();
}

void MpiRuntime::abort(int code) {
  drain_output();  // the error message reaches mpirun's output before the job ends
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace ada::comm
