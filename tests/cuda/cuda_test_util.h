// Shared by the `cuda` tests: skip with the printed reason when no GPU can be used (the only
// skip the suite allows), random inputs, and CUDA-vs-CPU comparison with a stated tolerance.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/backend/cuda_runtime.h"
#include "core/ops.h"
#include "core/random.h"
#include "core/tensor.h"

// Use first in every test that touches a GPU.
#define ADA_REQUIRE_GPU()                                           \
  do {                                                              \
    const std::string ada_why_ = ::ada::cuda::unavailable_reason(); \
    if (!ada_why_.empty()) {                                        \
      std::printf("[  SKIPPED ] no GPU: %s\n", ada_why_.c_str());   \
      GTEST_SKIP() << "no GPU: " << ada_why_;                       \
    }                                                               \
  } while (0)

namespace ada::testing {

inline Device gpu() {
  return Device::cuda(0);
}

// Deterministic algorithms (ops::set_deterministic_algorithms) for a scope; the setting found is
// restored after.
class DeterministicScope {
 public:
  DeterministicScope() { ops::set_deterministic_algorithms(true); }
  ~DeterministicScope() { ops::set_deterministic_algorithms(was_); }
  DeterministicScope(const DeterministicScope&) = delete;
  DeterministicScope& operator=(const DeterministicScope&) = delete;

 private:
  bool was_ = ops::deterministic_algorithms();
};

// Normal(0, 1) values on the CPU from a fixed seed (the same inputs on every run).
inline Tensor rand_cpu(const Shape& s, uint64_t seed, float scale = 1.f) {
  Generator g(seed);
  return Tensor::randn(s, g, 0.f, scale);
}

// |gpu - cpu| <= atol + rtol * |cpu| elementwise; reports the worst element.
inline ::testing::AssertionResult close_to_cpu(const Tensor& gpu_result, const Tensor& cpu_result,
                                               double rtol = 1e-4, double atol = 1e-5) {
  if (gpu_result.shape() != cpu_result.shape())
    return ::testing::AssertionFailure()
           << "shapes differ: " << gpu_result.str() << " vs " << cpu_result.str();
  if (gpu_result.device().is_cpu())
    return ::testing::AssertionFailure() << "result " << gpu_result.str() << " is not on the GPU";
  const std::vector<float> g = gpu_result.to(Device::cpu()).to_vector<float>();
  const std::vector<float> c = cpu_result.to_vector<float>();
  double worst = 0;
  size_t at = 0;
  bool bad = false;
  for (size_t i = 0; i < c.size(); ++i) {
    const double d = std::fabs(static_cast<double>(g[i]) - c[i]);
    const double lim = atol + rtol * std::fabs(c[i]);
    if (!(d <= lim) && (!bad || d - lim > worst)) {
      worst = d - lim;
      at = i;
      bad = true;
    }
  }
  if (bad)
    return ::testing::AssertionFailure()
           << "element " << at << ": gpu " << g[at] << " cpu " << c[at] << " (rtol " << rtol
           << ", atol " << atol << ", " << cpu_result.str() << ")";
  return ::testing::AssertionSuccess();
}

}  // namespace ada::testing
