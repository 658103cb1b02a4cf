// bench_step --profile's per-kernel table (core/kernel_report.h): the names as CUPTI gives them
// (mangled by nvcc, anonymous namespaces included) made readable, and the grouping under ops.
#include "core/kernel_report.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace ada {
namespace {

// Two kernels' symbols from nvcc 13's object code of core/backend/cuda/norm.cu.
const char* kBnApply =
    "_ZN3ada4cuda39_GLOBAL__N__6b52bffd_7_norm_cu_9bd895d624bn_backward_apply_kernelILi8ELb1E13__"
    "nv_bfloat16EEvPKT1_S6_S6_PKdPS4_lll";
const char* kLnForward =
    "_ZN3ada4cuda39_GLOBAL__N__6b52bffd_7_norm_cu_9bd895d622ln_forward_warp_kernelI6__"
    "halfEEvPKT_PKfS8_fllPS4_PfSA_";

TEST(KernelReport, NamesAreDemangledWithoutNamespacesArgumentsOrCudaTypeNames) {
  EXPECT_EQ(readable_kernel_name(kBnApply), "bn_backward_apply_kernel<8, true, bf16>");
  EXPECT_EQ(readable_kernel_name(kLnForward), "ln_forward_warp_kernel<f16>");
  // Unmangled names (cuBLAS's) stay; long ones are cut and marked.
  EXPECT_EQ(readable_kernel_name("sm90_xmma_gemm_bf16bf16_tn"), "sm90_xmma_gemm_bf16bf16_tn");
  EXPECT_EQ(readable_kernel_name(std::string(100, 'k'), 20), std::string(17, 'k') + "...");
  // A demangled name keeps "(anonymous namespace)" out of the argument-list cut.
  EXPECT_EQ(readable_kernel_name("_ZN12_GLOBAL__N_16kernelEv"), "kernel");
}

// The lines of the report, split.
std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string l; std::getline(is, l);) out.push_back(l);
  return out;
}

TEST(KernelReport, GroupsKernelsUnderTheirOpsLargestFirst) {
  const std::vector<KernelRecord> recs = {
      {kBnApply, "batch_norm_backward", 3'000'000},
      {kBnApply, "batch_norm_backward", 1'000'000},
      {"gemm_a", "linear", 2'000'000},
      {"gemm_b", "linear", 500'000},
      {"memset_kernel", "", 500'000},
  };
  const auto l = lines_of(kernel_report(recs));
  ASSERT_EQ(l.size(), 9u) << kernel_report(recs);
  EXPECT_NE(l[0].find("op / kernel"), std::string::npos);
  // batch_norm_backward: 2 calls, 4 ms, 4 of 7 ms; its kernel 2 ms a call.
  EXPECT_EQ(l[1].rfind("batch_norm_backward ", 0), 0u) << l[1];
  EXPECT_NE(l[1].find(" 2      4.00  57.1%"), std::string::npos) << l[1];
  EXPECT_EQ(l[2].rfind("  bn_backward_apply_kernel<8, true, bf16> ", 0), 0u) << l[2];
  EXPECT_NE(l[2].find("2000.0"), std::string::npos) << l[2];
  EXPECT_EQ(l[3].rfind("linear ", 0), 0u) << l[3];
  EXPECT_EQ(l[4].rfind("  gemm_a ", 0), 0u) << l[4];
  EXPECT_EQ(l[5].rfind("  gemm_b ", 0), 0u) << l[5];
  EXPECT_EQ(l[6].rfind("(outside ops) ", 0), 0u) << l[6];
  EXPECT_EQ(l[7].rfind("  memset_kernel ", 0), 0u) << l[7];
  EXPECT_EQ(l[8].rfind("all kernels ", 0), 0u) << l[8];
  EXPECT_NE(l[8].find(" 5      7.00"), std::string::npos) << l[8];
}

TEST(KernelReport, CountsTheLinesLeftOutPastTheLimit) {
  const std::vector<KernelRecord> recs = {
      {"a1", "op_a", 4}, {"a2", "op_a", 3}, {"b1", "op_b", 2}, {"c1", "op_c", 1}};
  const auto l = lines_of(kernel_report(recs, 3));
  // header, op_a, a1, a2; then op_b, b1, op_c, c1 left out (4 lines); then the total.
  ASSERT_EQ(l.size(), 6u) << kernel_report(recs, 3);
  EXPECT_EQ(l[4], "(4 more lines, smaller)");
}

}  // namespace
}  // namespace ada
