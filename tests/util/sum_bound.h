// The bound a kernel computing sums of products (GEMM, convolutions) is held to against a
// reference: |got_i - ref_i| <= kSumBoundFactor * eps * G_i, with ref_i the sum in double,
// G_i = sum of |terms| and eps = 2^-23. Valid for terms of random sign, as every caller's operands
// are; why this bound and this factor: docs/testing.md, "Kernel tolerances".
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace ada::testing {

constexpr double kFp32Eps = 0x1p-23;
constexpr double kSumBoundFactor = 16;

// Per element: the exact sum (accumulated in double) and the sum of the terms' magnitudes.
struct SumRef {
  std::vector<double> value, mag;

  SumRef() = default;
  explicit SumRef(size_t n) : value(n, 0.0), mag(n, 0.0) {}
  SumRef(std::vector<double> v, std::vector<double> m) : value(std::move(v)), mag(std::move(m)) {}
  void add(size_t i, double term) {
    value[i] += term;
    mag[i] += std::fabs(term);
  }
};

// Non-fatal failures for the elements of `got` beyond the bound (the first three shown with
// their error in units of eps * G); returns the number of such elements. With
// ADA_TEST_SUM_BOUND_REPORT=1 in the environment it prints the worst |error| / (eps * G).
inline int expect_within_sum_bound(const std::vector<float>& got, const SumRef& ref,
                                   const std::string& what, double factor = kSumBoundFactor) {
  EXPECT_EQ(got.size(), ref.value.size()) << what;
  EXPECT_EQ(ref.mag.size(), ref.value.size()) << what;
  if (got.size() != ref.value.size() || ref.mag.size() != ref.value.size()) return 1;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref.value[i]), unit = kFp32Eps * ref.mag[i];
    const bool ok = err <= factor * unit;  // false for NaN
    if (unit > 0) worst = std::max(worst, err / unit);
    if (!ok && ++bad <= 3)
      ADD_FAILURE() << what << ": element " << i << ": " << got[i] << ", exact " << ref.value[i]
                    << ", error " << err << " = " << (unit > 0 ? err / unit : INFINITY)
                    << " eps * G (G = sum |terms| = " << ref.mag[i] << "; bound " << factor
                    << " eps * G)";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements beyond the bound";
  if (const char* r = std::getenv("ADA_TEST_SUM_BOUND_REPORT"); r && std::string(r) == "1")
    std::printf("sum bound: %s: worst %.4f eps * G\n", what.c_str(), worst);
  return bad;
}

}  // namespace ada::testing
