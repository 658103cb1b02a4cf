// Helpers of the NCCL tests (label `cuda`, under mpiexec): the MPI world as the host
// communicator, one NCCL communicator over it for the whole binary, this rank's GPU, and why
// NCCL cannot be tested here — decided from facts every rank of one machine shares, so all ranks
// skip together.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/shared_gpu.h"
#include "core/backend/cuda_runtime.h"

namespace ada::comm::testing {

inline std::shared_ptr<Communicator> nccl_host() {
  static std::shared_ptr<Communicator> h(MpiCommunicator::world());
  return h;
}

// "" when NCCL can run here: the build has it, a GPU is visible, and either every rank of this
// node has a GPU of its own or ADA_NCCL_SHARED_GPU=1 lets them share (comm/shared_gpu.h).
inline std::string nccl_skip_reason() {
  if (!nccl_built()) return "this build has no NCCL communicator (ADA_WITH_NCCL=OFF)";
  const std::string why = cuda::unavailable_reason();
  if (!why.empty()) return why;
  if (cuda::device_count() < nccl_host()->local_size() && !shared_gpu_mode())
    return std::to_string(nccl_host()->local_size()) + " ranks on this node but " +
           std::to_string(cuda::device_count()) +
           " GPU(s): NCCL needs one GPU per rank, or ADA_NCCL_SHARED_GPU=1 (a test mode)";
  return "";
}

#define ADA_REQUIRE_NCCL()                                                 \
  do {                                                                     \
    const std::string ada_why_ = ::ada::comm::testing::nccl_skip_reason(); \
    if (!ada_why_.empty()) {                                               \
      std::printf("[  SKIPPED ] %s\n", ada_why_.c_str());                  \
      GTEST_SKIP() << ada_why_;                                            \
    }                                                                      \
  } while (0)

inline int test_device() {
  return gpu_for_local_rank(nccl_host()->local_rank(), cuda::device_count());
}
inline Device test_gpu() {
  return Device::cuda(test_device());
}

// The binary's one NCCL communicator over the MPI world (made on first use).
inline Communicator& nccl() {
  static std::unique_ptr<Communicator> c = make_nccl_communicator(nccl_host(), test_device());
  return *c;
}

}  // namespace ada::comm::testing
