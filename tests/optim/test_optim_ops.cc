// The fused optimizer ops of core/ops.h (adam_update_, adam_direction_) against a scalar float64
// reference of their documented formula, on sizes that span several parallel chunks.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops.h"
#include "core/parallel.h"
#include "core/random.h"
#include "optim_test_util.h"

namespace ada::optim::testing {
namespace {

struct Ref {
  std::vector<double> w, m, v, u;
};

// The documented formula in float64.
Ref reference(const std::vector<float>& w0, const std::vector<float>& g,
              const std::vector<float>& m0, const std::vector<float>& v0, const ops::AdamArgs& a,
              double lr, double decoupled, double decay) {
  Ref r;
  const double t = static_cast<double>(a.step);
  const double bc1 = 1 - std::pow(a.beta1, t), bc2 = 1 - std::pow(a.beta2, t);
  for (size_t i = 0; i < w0.size(); ++i) {
    const double gi = g[i] + a.l2 * w0[i];
    const double m = a.beta1 * m0[i] + (1 - a.beta1) * gi;
    const double v = a.beta2 * v0[i] + (1 - a.beta2) * gi * gi;
    const double dir = (m / bc1) / (std::sqrt(v / bc2) + a.eps);
    r.m.push_back(m);
    r.v.push_back(v);
    r.w.push_back(w0[i] * (1 - lr * decoupled) - lr * dir);
    r.u.push_back(dir + decay * w0[i]);
  }
  return r;
}

// Relative to |want| plus the vector's RMS: the moment updates cancel (b1·m + (1-b1)·g near 0),
// so f32 is accurate to the size of the terms, not of the result.
void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double rel,
                     const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double rms = 0;
  for (double x : want) rms += x * x;
  rms = std::sqrt(rms / static_cast<double>(want.size()));
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / (std::abs(want[i]) + rms));
  EXPECT_LT(worst, rel) << what;
}

class AdamOps : public ::testing::TestWithParam<int64_t> {};

TEST_P(AdamOps, UpdateAndDirectionMatchTheFormula) {
  const int64_t n = GetParam();
  Generator gen(1234);
  Tensor w = Tensor::randn({n}, gen), g = Tensor::randn({n}, gen, 0.f, 0.1f);
  Tensor m = Tensor::randn({n}, gen, 0.f, 0.05f);
  Tensor v = Tensor::uniform({n}, gen, 0.f, 0.01f);
  const auto w0 = w.to_vector<float>(), g0 = g.to_vector<float>(), m0 = m.to_vector<float>(),
             v0 = v.to_vector<float>();
  ops::AdamArgs a;
  a.beta1 = 0.85;
  a.beta2 = 0.98;
  a.eps = 1e-6;
  a.step = 3;
  a.l2 = 0.05;
  const double lr = 0.01, decoupled = 0.1, decay = 0.02;
  const Ref r = reference(w0, g0, m0, v0, a, lr, decoupled, decay);

  Tensor w1 = w.clone(), m1 = m.clone(), v1 = v.clone();
  ops::adam_update_(w1, g, m1, v1, a, lr, decoupled);
  expect_near_all(m1.to_vector<float>(), r.m, 1e-6, "m");
  expect_near_all(v1.to_vector<float>(), r.v, 1e-6, "v");
  expect_near_all(w1.to_vector<float>(), r.w, 1e-6, "w");

  Tensor u = Tensor::empty({n}), m2 = m.clone(), v2 = v.clone();
  ops::adam_direction_(u, w, g, m2, v2, a, decay);
  EXPECT_TRUE(bit_equal(m1, m2) && bit_equal(v1, v2)) << "both ops share the moment update";
  expect_near_all(u.to_vector<float>(), r.u, 1e-6, "u");
  EXPECT_TRUE(bit_equal(w, Tensor::from_vector(w0, {n}))) << "adam_direction_ only reads w";
}

INSTANTIATE_TEST_SUITE_P(Sizes, AdamOps, ::testing::Values(1, 7, 1000, 200003));

TEST(AdamOpsThreads, ResultDoesNotDependOnTheThreadCount) {
  const int64_t n = 300007;  // not a multiple of any block or chunk size
  Generator gen(99);
  const Tensor w = Tensor::randn({n}, gen), g = Tensor::randn({n}, gen, 0.f, 0.1f);
  const Tensor m = Tensor::randn({n}, gen, 0.f, 0.05f), v = Tensor::uniform({n}, gen, 0.f, 0.01f);
  ops::AdamArgs a;
  a.step = 2;
  a.l2 = 0.01;
  const int before = num_threads();
  std::vector<Tensor> outs;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Tensor w1 = w.clone(), m1 = m.clone(), v1 = v.clone(), u = Tensor::empty({n});
    ops::adam_update_(w1, g, m1, v1, a, 0.01, 0.1);
    Tensor m2 = m.clone(), v2 = v.clone();
    ops::adam_direction_(u, w, g, m2, v2, a, 0.1);
    outs.insert(outs.end(), {w1, m1, v1, u});
  }
  set_num_threads(before);
  for (size_t i = 4; i < outs.size(); ++i)
    EXPECT_TRUE(bit_equal(outs[i], outs[i % 4])) << "output " << i % 4 << ", run " << i / 4;
}

TEST(AdamOpsArgs, RejectsMismatchedShapesAndAliasing) {
  Tensor w = Tensor::zeros({4}), g = Tensor::zeros({4}), m = Tensor::zeros({4}),
         v = Tensor::zeros({4}), bad = Tensor::zeros({5});
  ops::AdamArgs a;
  EXPECT_THROW(ops::adam_update_(w, bad, m, v, a, 0.1, 0), ShapeError);
  EXPECT_THROW(ops::adam_update_(w, g, m, m, a, 0.1, 0), InternalError);
  Tensor u = w;  // aliases w
  EXPECT_THROW(ops::adam_direction_(u, w, g, m, v, a, 0), InternalError);
  a.step = 0;
  EXPECT_THROW(ops::adam_update_(w, g, m, v, a, 0.1, 0), InternalError);
}

}  // namespace
}  // namespace ada::optim::testing
