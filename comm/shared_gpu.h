// ADA_NCCL_SHARED_GPU=1: a test mode in which several ranks of one machine share its GPU(s) over
// NCCL. NCCL refuses two ranks on one GPU of one host ("Duplicate GPU detected"); given a host id
// of its own (NCCL_HOSTID) each rank counts as a node of its own, and NCCL moves the data through
// its socket transport on the loopback interface. That runs NCCL's real bootstrap, communicator
// setup, collectives, grouping, ordering and error paths on a one-GPU machine — never its speed.
// Off by default; logged as a warning when on. Decisions here are pure and unit-tested
// (tests/comm/test_shared_gpu.cc); applying them is prepare_nccl_environment().
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ada::comm {

inline constexpr const char* kSharedGpuVariable = "ADA_NCCL_SHARED_GPU";

struct SharedGpuPlan {
  bool on = false;
  // Variables to set before NCCL starts, (name, value); a variable the user set is left alone.
  std::vector<std::pair<std::string, std::string>> set_env;
  std::string log_line;  // empty when off
};

// The mode's decisions from the variables as the process sees them (null: unset).
// `shared_gpu` must be unset, "0" or "1" (ConfigError naming ADA_NCCL_SHARED_GPU otherwise);
// `user_host_id` and `user_socket_ifname` are NCCL_HOSTID and NCCL_SOCKET_IFNAME.
SharedGpuPlan plan_shared_gpu(const char* shared_gpu, int world_rank, int local_rank,
                              int device_count, const char* user_host_id,
                              const char* user_socket_ifname);

// Whether ADA_NCCL_SHARED_GPU=1 (ConfigError for a value other than unset, 0 or 1).
bool shared_gpu_mode();

// The GPU a rank uses: local_rank % device_count (0 without a GPU). One GPU per rank when the
// node has enough; shared (round-robin) otherwise, which NCCL accepts only in the shared mode.
int gpu_for_local_rank(int local_rank, int device_count);

// The ranks other than `rank` whose GPU is rank's: `ids` holds every rank's GPU UUID as 2 values
// (its 16 bytes; gathered from all ranks), in rank order. NCCL needs one
// GPU per rank; comparing ids, not a node's rank count with its visible GPUs, also holds when a
// launcher shows each rank its own GPU alone (srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES).
std::vector<int> ranks_on_the_same_gpu(const std::vector<int64_t>& ids, int rank);

// Sets the plan's variables in this process (before its first NCCL call; NCCL reads them when it
// starts) and logs the mode once. No effect when the mode is off.
void prepare_nccl_environment(int world_rank, int local_rank, int device_count);

}  // namespace ada::comm
