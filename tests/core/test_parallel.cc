// core/parallel.h's subnormal mode: set_flush_denormals(true) makes every CPU compute thread (the
// caller and the OpenMP pool's, as parallel_for uses them) flush subnormal results and read
// subnormal inputs as zero; false restores IEEE subnormals. Each chunk of a parallel_for computes
// a product whose exact value is subnormal and reads a subnormal input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel.h"

namespace ada {
namespace {

struct Restore {
  ~Restore() {
    set_flush_denormals(false);
    set_num_threads(0);
  }
};

// For each of `n` chunks run in parallel: {1e-30 * 1e-10 (a subnormal product), a subnormal
// input times 1}. volatile keeps the compiler from folding them.
std::vector<float> subnormal_work(int64_t n) {
  std::vector<float> out(2 * n, -1.f);
  parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      volatile float a = 1e-30f, c = 1e-10f, s = std::numeric_limits<float>::denorm_min() * 8;
      out[2 * i] = a * c;
      out[2 * i + 1] = s * 1.f;
    }
  });
  return out;
}

TEST(Parallel, FlushDenormalsReachesEveryComputeThread) {
  Restore restore;
  set_num_threads(4);  // more threads than this machine may have cores: the pool's own threads
  set_flush_denormals(true);
  EXPECT_TRUE(flush_denormals());
  for (float v : subnormal_work(16)) EXPECT_EQ(v, 0.f);
  set_flush_denormals(false);
  EXPECT_FALSE(flush_denormals());
  for (float v : subnormal_work(16)) {
    EXPECT_GT(v, 0.f);
    EXPECT_EQ(std::fpclassify(v), FP_SUBNORMAL);
  }
}

}  // namespace
}  // namespace ada
