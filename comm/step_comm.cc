#include "comm/step_comm.h"

#include <array>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "comm/nccl_communicator.h"
#include "comm/shared_gpu.h"
#include "core/backend/cuda_runtime.h"

namespace ada::comm {

void check_step_comm_choice(const std::string& choice, const Device& device,
                            const std::string& where) {
  ADA_CHECK_ARG(choice == "auto" || choice == "mpi" || choice == "nccl", ConfigError)
      << where << ": unknown communicator '" << choice
      << "'; known: auto (NCCL for a CUDA run with a GPU per rank, else MPI), mpi, nccl";
  ADA_CHECK_ARG(choice != "nccl" || !device.is_cpu(), ConfigError)
      << where << ": nccl reduces CUDA device buffers; set train.device: cuda, or comm: mpi";
}

std::unique_ptr<Communicator> make_step_communicator(Communicator& world, const Device& device,
                                                     const std::string& choice,
                                                     const std::string& where) {
  check_step_comm_choice(choice, device, where);
  if (device.is_cpu() || choice == "mpi") return nullptr;
  // NCCL when every rank can use it: the build has it, the library loads, and no two ranks
  // share a GPU (NCCL refuses that, except in the shared-GPU test mode: shared_gpu.h), told by
  // the GPUs' UUIDs, whatever each rank is shown of its node's GPUs.
  std::string why = nccl_unavailable_reason();
  const std::array<uint8_t, 16> uuid = cuda::device_uuid(device.index);
  std::vector<int64_t> mine(2);
  std::memcpy(mine.data(), uuid.data(), uuid.size());
  Tensor ids = Tensor::empty({2 * static_cast<int64_t>(world.size())}, DType::i64);
  world.allgather(Tensor::from_vector(mine, {2}), ids);
  const std::vector<int> sharing = ranks_on_the_same_gpu(ids.to_vector<int64_t>(), world.rank());
  if (why.empty() && !sharing.empty() && !shared_gpu_mode()) {
    std::string ranks;
    for (int r : sharing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    why = "this rank's GPU (" + device.str() + ") is also rank " + ranks +
          "'s, and NCCL needs one GPU per rank (" + kSharedGpuVariable +
          "=1 lets ranks share one, as a test mode)";
  }
  double usable = why.empty() ? 1 : 0;
  world.allreduce(&usable, 1, ReduceOp::min);
  if (usable == 0 && why.empty()) why = "another rank cannot use NCCL (see its log)";
  if (!why.empty()) {
    ADA_CHECK_ARG(choice != "nccl", ConfigError)
        << where << ": nccl is not usable: " << why
        << "; use comm: mpi (or auto), which stages device buffers through host memory";
    log_info("train.comm: MPI, staging the device buffers through host memory ({})", why);
    return nullptr;
  }
  auto nccl = make_nccl_communicator(std::shared_ptr<Communicator>(&world, [](Communicator*) {}),
                                     device.index);
  log_info("train.comm: NCCL on {}", device.str());
  return nccl;
}

}  // namespace ada::comm
