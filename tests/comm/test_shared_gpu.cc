// The shared-GPU test mode's decisions (comm/shared_gpu.h), without a GPU: off unless
// ADA_NCCL_SHARED_GPU=1, a bad value named, each rank its own NCCL host id and the loopback
// interface unless the user set them, and the GPU each rank takes.
#include "comm/shared_gpu.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "util/error_of.h"

namespace ada::comm {
namespace {

using ada::testing::error_of;

TEST(SharedGpu, OffUnlessSetToOne) {
  for (const char* off : {static_cast<const char*>(nullptr), "", "0"}) {
    const SharedGpuPlan p = plan_shared_gpu(off, 3, 1, 1, nullptr, nullptr);
    EXPECT_FALSE(p.on);
    EXPECT_TRUE(p.set_env.empty());
    EXPECT_TRUE(p.log_line.empty());
  }
  EXPECT_TRUE(plan_shared_gpu("1", 0, 0, 1, nullptr, nullptr).on);
}

TEST(SharedGpu, ABadValueIsNamed) {
  for (const char* bad : {"yes", "2", "true", " 1"}) {
    const std::string what =
        error_of<ConfigError>([&] { plan_shared_gpu(bad, 0, 0, 1, nullptr, nullptr); });
    EXPECT_NE(what.find("ADA_NCCL_SHARED_GPU"), std::string::npos) << what;
    EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("expected 1"), std::string::npos) << what;
  }
}

TEST(SharedGpu, EachRankItsOwnHostOnLoopback) {
  const SharedGpuPlan a = plan_shared_gpu("1", 2, 2, 1, nullptr, nullptr);
  const SharedGpuPlan b = plan_shared_gpu("1", 3, 3, 1, nullptr, nullptr);
  ASSERT_EQ(a.set_env.size(), 2u);
  EXPECT_EQ(a.set_env[0].first, "NCCL_HOSTID");
  EXPECT_EQ(a.set_env[1], (std::pair<std::string, std::string>{"NCCL_SOCKET_IFNAME", "lo"}));
  ASSERT_EQ(b.set_env.size(), 2u);
  EXPECT_NE(a.set_env[0].second, b.set_env[0].second);  // distinct host ids
  EXPECT_NE(a.set_env[0].second.find('2'), std::string::npos);
  EXPECT_NE(a.log_line.find("TEST mode"), std::string::npos) << a.log_line;
  EXPECT_NE(a.log_line.find("uses GPU 0 of 1"), std::string::npos) << a.log_line;
  EXPECT_NE(a.log_line.find(a.set_env[0].second), std::string::npos) << a.log_line;
}

TEST(SharedGpu, WhatTheUserSetIsKept) {
  const SharedGpuPlan p = plan_shared_gpu("1", 1, 1, 2, "mine", "eth7");
  EXPECT_TRUE(p.on);
  EXPECT_TRUE(p.set_env.empty());
  EXPECT_NE(p.log_line.find("'mine'"), std::string::npos) << p.log_line;
  EXPECT_NE(p.log_line.find("'eth7'"), std::string::npos) << p.log_line;
  EXPECT_NE(p.log_line.find("NCCL_HOSTID was set before the run: each rank needs its own"),
            std::string::npos)
      << p.log_line;
  const SharedGpuPlan q = plan_shared_gpu("1", 1, 1, 2, "", "eth7");  // empty counts as unset
  ASSERT_EQ(q.set_env.size(), 1u);
  EXPECT_EQ(q.set_env[0].first, "NCCL_HOSTID");
}

TEST(SharedGpu, RanksTakeTheGpusRoundRobin) {
  EXPECT_EQ(gpu_for_local_rank(0, 1), 0);
  EXPECT_EQ(gpu_for_local_rank(3, 1), 0);
  EXPECT_EQ(gpu_for_local_rank(3, 2), 1);
  EXPECT_EQ(gpu_for_local_rank(5, 8), 5);
  EXPECT_EQ(gpu_for_local_rank(2, 0), 0);  // no GPU: index 0, refused later by the device check
}

// Ranks share a GPU when their GPUs' UUIDs are equal, not when a node has more ranks than GPUs
// visible: 8 ranks each shown its own GPU (srun --gpus-per-task=1) see 1 GPU each and share none.
TEST(SharedGpu, RanksShareAGpuWhenTheirUuidsAreEqual) {
  const std::vector<int64_t> own = {1, 2, 1, 5, 9, 2, -7, 7};  // 4 GPUs
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(ranks_on_the_same_gpu(own, r).empty()) << r;
  const std::vector<int64_t> shared = {1, 2, 6, 6, 1, 2, 1, 2};
  EXPECT_EQ(ranks_on_the_same_gpu(shared, 0), (std::vector<int>{2, 3}));
  EXPECT_EQ(ranks_on_the_same_gpu(shared, 3), (std::vector<int>{0, 2}));
  EXPECT_TRUE(ranks_on_the_same_gpu(shared, 1).empty());
  EXPECT_TRUE(ranks_on_the_same_gpu({1, 2}, 0).empty());  // one rank
}

}  // namespace
}  // namespace ada::comm
