// MPI plumbing under mpiexec (1..4 ranks): start-up, rank identity, and that a failing MPI
// call becomes a CommError naming the call and the rank instead of aborting.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/mpi_check.h"
#include "comm/mpi_runtime.h"

namespace ada::comm {
namespace {

TEST(MpiBasics, RanksAgreeOnSize) {
  int rank = 0, size = 0;
  ADA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  ADA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  EXPECT_EQ(process_rank(), rank);
  EXPECT_EQ(process_world(), size);
  std::vector<int> all(size);
  ADA_MPI_CHECK(MPI_Allgather(&rank, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD));
  for (int r = 0; r < size; ++r) EXPECT_EQ(all[r], r);
}

TEST(MpiBasics, FailingCallThrowsCommErrorWithCallAndRank) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int value = 1;
  try {
    // A negative count is invalid on every rank, so no rank waits on another.
    ADA_MPI_CHECK(MPI_Bcast(&value, -1, MPI_INT, 0, MPI_COMM_WORLD));
    FAIL() << "expected CommError";
  } catch (const CommError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("MPI_Bcast"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_mpi_basics.cc"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(rank) + "/" + std::to_string(size)),
              std::string::npos)
        << msg;
  }
}

}  // namespace
}  // namespace ada::comm
