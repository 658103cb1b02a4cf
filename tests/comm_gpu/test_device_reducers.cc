// The reducers on CUDA device buffers, through the MPI communicator (which stages them through
// host memory, so several ranks may share one GPU) and through NCCL (one GPU per rank, or
// ADA_NCCL_SHARED_GPU=1): every rank's result must be the same bits, and equal to the CPU
// reducer's on the same inputs up to the GPU's and NCCL's summation order and fused
// multiply-adds. Label `cuda`; skips without a GPU (NCCL: without NCCL usable here).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "comm/reducer_test_util.h"
#include "comm_gpu/nccl_test_util.h"
#include "core/backend/cuda_runtime.h"
#include "cuda/cuda_test_util.h"

namespace ada::comm::testing {
namespace {

struct Case {
  std::string reducer, options, label;
  // GPU against CPU: f32 summation order only; on a 16-bit wire a last-bit difference before
  // the rounding can move an element by one 16-bit ulp.
  double tol = 1e-6;
};

// Which communicator carries the device buffers: "mpi" or "nccl".
class DeviceReducers : public ::testing::TestWithParam<std::tuple<Case, std::string>> {};

TEST_P(DeviceReducers, MatchTheCpuReducerAndAgreeOnEveryRank) {
  ADA_REQUIRE_GPU();
  const auto& [c, via] = GetParam();
  if (via == "nccl") ADA_REQUIRE_NCCL();
  Communicator& comm = via == "nccl" ? nccl() : static_cast<Communicator&>(world());
  const int p = comm.size();
  // Hierarchical: nodes of 2 ranks where the world size allows, else one node of all ranks
  // (the form's one-node case: the average).
  std::string options = c.options;
  const size_t at = options.find("{L}");
  if (at != std::string::npos) options.replace(at, 3, std::to_string(p % 2 == 0 ? 2 : p));
  std::vector<int64_t> sizes = bucket_sizes(p);
  sizes.push_back(70001);  // more than one block's chunk of the GPU kernels
  sizes.push_back(3);
  const std::vector<float> mine = random_vec(total(sizes), 500 + comm.rank());
  const std::vector<float> cpu = reduce_with(c.reducer, mine, sizes, world(), options);

  auto reducer = make_reducer(c.reducer, options);
  const Device gpu = test_gpu();
  Tensor buf = Tensor::from_vector<float>(mine, {total(sizes)}).to(gpu);
  reducer->reduce(buf, spans_of(sizes), comm);
  ASSERT_EQ(buf.device(), gpu);
  const std::vector<float> got = buf.to_vector<float>();
  const std::string what = c.label + " on the GPU over " + via;
  expect_same_on_every_rank(got, what);
  std::vector<double> want(cpu.begin(), cpu.end());
  expect_near_rel(got, want, c.tol, what + ": against the CPU reducer over MPI");
  // A second reduction of the same inputs gives the same bits (deterministic kernels).
  Tensor again = Tensor::from_vector<float>(mine, {total(sizes)}).to(gpu);
  reducer->reduce(again, spans_of(sizes), comm);
  EXPECT_EQ(again.to_vector<float>(), got) << what << ": not repeatable";
}

INSTANTIATE_TEST_SUITE_P(
    Reducers, DeviceReducers,
    ::testing::Combine(
        ::testing::Values(
            Case{"sum", "{}", "sum"}, Case{"average", "{}", "average"},
            Case{"adasum", "{gather_below: 0}", "adasum tree"},
            Case{"adasum", "{gather_below: 100000000}", "adasum gathered"},
            Case{"adasum", "{hierarchical: true, local_size: {L}, gather_below: 0}",
                 "adasum hierarchical"},
            Case{"average", "{precision: fp16}", "average fp16 wire", 2e-3},
            Case{"adasum", "{gather_below: 0, precision: bf16}", "adasum tree bf16 wire", 1e-2},
            Case{"adasum",
                 "{hierarchical: true, local_size: {L}, gather_below: 0, precision: fp16}",
                 "adasum hierarchical fp16 wire", 2e-3}),
        ::testing::Values("mpi", "nccl")),
    [](const ::testing::TestParamInfo<std::tuple<Case, std::string>>& info) {
      std::string s = std::get<0>(info.param).label + " over " + std::get<1>(info.param);
      for (char& ch : s)
        if (ch == ' ') ch = '_';
      return s;
    });

}  // namespace
}  // namespace ada::comm::testing
