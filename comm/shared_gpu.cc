#include "comm/shared_gpu.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "base/error.h"
#include "base/log.h"

namespace ada::comm {

namespace {

bool read_flag(const char* value) {
  if (value == nullptr || std::string(value).empty() || std::string(value) == "0") return false;
  ADA_CHECK_ARG(std::string(value) == "1", ConfigError)
      << "environment variable " << kSharedGpuVariable << "='" << value
      << "': expected 1 (several ranks share a GPU over NCCL, a test mode) or 0 / unset (off)";
  return true;
}

}  // namespace

int gpu_for_local_rank(int local_rank, int device_count) {
  return device_count > 0 ? local_rank % device_count : 0;
}

SharedGpuPlan plan_shared_gpu(const char* shared_gpu, int world_rank, int local_rank,
                              int device_count, const char* user_host_id,
                              const char* user_socket_ifname) {
  SharedGpuPlan plan;
  plan.on = read_flag(shared_gpu);
  if (!plan.on) return plan;
  std::string host_id = user_host_id ? user_host_id : "";
  std::string ifname = user_socket_ifname ? user_socket_ifname : "";
  const bool users_host_id = !host_id.empty();
  if (host_id.empty()) {
    host_id = "ada-shared-gpu-rank-" + std::to_string(world_rank);
    plan.set_env.emplace_back("NCCL_HOSTID", host_id);
  }
  if (ifname.empty()) {
    ifname = "lo";
    plan.set_env.emplace_back("NCCL_SOCKET_IFNAME", ifname);
  }
  plan.log_line = std::string(kSharedGpuVariable) + "=1, a TEST mode: rank " +
                  std::to_string(world_rank) + " uses GPU " +
                  std::to_string(gpu_for_local_rank(local_rank, device_count)) + " of " +
                  std::to_string(device_count) + ", which other ranks may share; NCCL sees it as" +
                  " host '" + host_id + "' (NCCL_HOSTID) and moves data through sockets on '" +
                  ifname + "' (NCCL_SOCKET_IFNAME): for testing, never for speed" +
                  (users_host_id ? "; NCCL_HOSTID was set before the run: each rank needs its "
                                   "own (unset it to have one made per rank), or NCCL stops "
                                   "with 'Duplicate GPU detected'"
                                 : "");
  return plan;
}

std::vector<int> ranks_on_the_same_gpu(const std::vector<int64_t>& ids, int rank) {
  constexpr size_t kPer = 2;  // 16 bytes of UUID
  const size_t mine = static_cast<size_t>(rank) * kPer;
  ADA_CHECK(ids.size() % kPer == 0 && mine < ids.size())
      << "ranks_on_the_same_gpu: " << ids.size() << " values for rank " << rank;
  std::vector<int> same;
  for (size_t r = 0; r < ids.size() / kPer; ++r)
    if (r * kPer != mine && std::equal(&ids[r * kPer], &ids[r * kPer] + kPer, &ids[mine]))
      same.push_back(static_cast<int>(r));
  return same;
}

bool shared_gpu_mode() {
  return read_flag(std::getenv(kSharedGpuVariable));
}

void prepare_nccl_environment(int world_rank, int local_rank, int device_count) {
  static std::once_flag once;
  const SharedGpuPlan plan =
      plan_shared_gpu(std::getenv(kSharedGpuVariable), world_rank, local_rank, device_count,
                      std::getenv("NCCL_HOSTID"), std::getenv("NCCL_SOCKET_IFNAME"));
  if (!plan.on) return;
  std::call_once(once, [&] {
    for (const auto& [name, value] : plan.set_env) ::setenv(name.c_str(), value.c_str(), 0);
    log_warn("{}", plan.log_line);
  });
}

}  // namespace ada::comm
