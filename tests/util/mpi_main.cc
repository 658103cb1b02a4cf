// main() of every MPI test binary (test_comm, test_sync, test_comm_gpu; tests/CMakeLists.txt),
// run under mpiexec: MPI started and finalized around the tests, only rank 0 prints gtest's
// report, and every rank's result decides the exit code.
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/mpi_runtime.h"

int main(int argc, char** argv) {
  ada::comm::MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int local = RUN_ALL_TESTS(), global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return global;
}
