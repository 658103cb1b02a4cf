// Momentum-SGD, Adam and AdamW against updates computed by hand in the test (small cases), the
// weight_decay flag, parameters without gradient, and per-parameter update counts.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/adam.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

namespace ada::optim::testing {
namespace {

void expect_values(const Param& p, const std::vector<double>& want, double tol = 1e-6) {
  const auto got = values(p);
  ASSERT_EQ(got.size(), want.size()) << p.name;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << p.name << "[" << i << "]";
}

TEST(Sgd, MomentumByHand) {
  auto opt = build_optimizer("name: sgd\nlr: 0.1\nmomentum: 0.9\n");
  std::vector<Param> ps{make_param("w", {1, -2}, {2})};
  set_grad(ps[0], {0.5, 1});
  opt->step(ps, 0.1f);  // v = g = [0.5, 1]; w = [0.95, -2.1]
  expect_values(ps[0], {0.95, -2.1});
  set_grad(ps[0], {1, -1});
  opt->step(ps, 0.1f);  // v = 0.9 v + g = [1.45, -0.1]; w = [0.805, -2.09]
  expect_values(ps[0], {0.805, -2.09});
}

TEST(Sgd, NesterovWithWeightDecayByHand) {
  auto opt =
      build_optimizer("name: sgd\nlr: 0.1\nmomentum: 0.9\nweight_decay: 0.1\nnesterov: true\n");
  std::vector<Param> ps{make_param("w", {1, -2}, {2})};
  set_grad(ps[0], {0.5, 1});
  // g' = g + 0.1 w = [0.6, 0.8]; v = g'; w -= 0.1 (g' + 0.9 v) = [0.886, -2.152]
  opt->step(ps, 0.1f);
  expect_values(ps[0], {0.886, -2.152});
  set_grad(ps[0], {1, -1});
  // g' = [1.0886, -1.2152]; v = 0.9 [0.6, 0.8] + g' = [1.6286, -0.4952];
  // w -= 0.1 (g' + 0.9 v) = [0.630566, -1.985912]
  opt->step(ps, 0.1f);
  expect_values(ps[0], {0.630566, -1.985912});
}

TEST(Sgd, WeightDecayOnlyWhereTheParamAllowsIt) {
  auto opt = build_optimizer("name: sgd\nlr: 0.1\nmomentum: 0\nweight_decay: 0.1\n");
  std::vector<Param> ps{make_param("w", {1}, {1}), make_param("b", {1}, {1}, false)};
  set_grad(ps[0], {0.5});
  set_grad(ps[1], {0.5});
  opt->step(ps, 0.1f);
  expect_values(ps[0], {1 - 0.1 * (0.5 + 0.1)});  // 0.94
  expect_values(ps[1], {0.95});                   // no decay
  EXPECT_TRUE(opt->state().tensors.size() == 2) << "plain SGD keeps only update counts";
}

TEST(Adam, FirstStepIsLrTimesSignByHand) {
  // t = 1: m̂ = g, v̂ = g², so w -= lr·g/(|g| + eps).
  auto opt = build_optimizer("name: adam\nlr: 0.01\n");
  std::vector<Param> ps{make_param("w", {1, -1, 0.5}, {3})};
  set_grad(ps[0], {0.2f, -3.f, 0.f});
  opt->step(ps, 0.01f);
  expect_values(ps[0], {1 - 0.01 * 0.2 / (0.2 + 1e-8), -1 + 0.01 * 3 / (3 + 1e-8), 0.5});
}

TEST(Adam, TwoStepsByHand) {
  auto opt = build_optimizer("name: adam\nlr: 0.01\nbeta1: 0.9\nbeta2: 0.999\neps: 1e-8\n");
  std::vector<Param> ps{make_param("w", {1}, {1})};
  set_grad(ps[0], {0.2f});
  opt->step(ps, 0.01f);
  const double w1 = 1 - 0.01 * 0.2 / (0.2 + 1e-8);
  set_grad(ps[0], {0.1f});
  opt->step(ps, 0.02f);
  // After step 1: m = 0.1·0.2, v = 0.001·0.2².
  const double m = 0.9 * (0.1 * 0.2) + 0.1 * 0.1, v = 0.999 * (0.001 * 0.04) + 0.001 * 0.01;
  const double mhat = m / (1 - 0.81), vhat = v / (1 - 0.999 * 0.999);
  expect_values(ps[0], {w1 - 0.02 * mhat / (std::sqrt(vhat) + 1e-8)});
}

TEST(Adam, CoupledL2GoesThroughTheMoments) {
  // Adam adds λw to g: g' = 0.5 + 0.5·2 = 1.5, and the first step is still lr·sign(g').
  // The second step shows the difference from AdamW.
  auto adam = build_optimizer("name: adam\nlr: 0.1\nweight_decay: 0.5\n");
  std::vector<Param> ps{make_param("w", {2}, {1})};
  set_grad(ps[0], {0.5});
  adam->step(ps, 0.1f);
  expect_values(ps[0], {2 - 0.1 * 1.5 / (1.5 + 1e-8)});
  const double w1 = values(ps[0])[0];
  set_grad(ps[0], {-0.5});
  adam->step(ps, 0.1f);
  const double g2 = -0.5 + 0.5 * w1;
  const double m = 0.9 * (0.1 * 1.5) + 0.1 * g2, v = 0.999 * (0.001 * 2.25) + 0.001 * g2 * g2;
  expect_values(ps[0], {w1 - 0.1 * (m / 0.19) / (std::sqrt(v / (1 - 0.999 * 0.999)) + 1e-8)});
}

TEST(AdamW, DecoupledDecayByHand) {
  auto opt = build_optimizer("name: adamw\nlr: 0.1\nweight_decay: 0.5\n");
  std::vector<Param> ps{make_param("w", {2}, {1}), make_param("b", {2}, {1}, false)};
  set_grad(ps[0], {0.5});
  set_grad(ps[1], {0.5});
  opt->step(ps, 0.1f);
  expect_values(ps[0], {2 * (1 - 0.1 * 0.5) - 0.1 * 0.5 / (0.5 + 1e-8)});  // 1.8
  expect_values(ps[1], {2 - 0.1 * 0.5 / (0.5 + 1e-8)});                    // 1.9, no decay
}

TEST(AdamW, DefaultsFollowPyTorch) {
  auto o = build_optimizer("name: adamw\nlr: 0.001\n");
  const auto& a = dynamic_cast<const Adam&>(*o).options();
  EXPECT_EQ(a.weight_decay, 0.01);
  EXPECT_EQ(a.beta1, 0.9);
  EXPECT_EQ(a.beta2, 0.999);
  EXPECT_EQ(a.eps, 1e-8);
  EXPECT_TRUE(a.decoupled);
  auto sgd = build_optimizer("name: sgd\nlr: 0.1\n");
  const auto& s = dynamic_cast<const Sgd&>(*sgd).options();
  EXPECT_EQ(s.momentum, 0.9);
  EXPECT_EQ(s.weight_decay, 0.0);
  EXPECT_FALSE(s.nesterov);
}

// A parameter with no gradient is untouched, gets no state, and its first real update is a
// first update (t = 1), whatever the other parameters have been through.
class NoGrad : public ::testing::TestWithParam<const char*> {};

TEST_P(NoGrad, ParameterWithoutGradientIsUntouched) {
  auto opt = build_optimizer(GetParam());
  std::vector<Param> ps{make_param("a", {1, 2, 3}, {3}), make_param("b", {4, 5}, {2})};
  const Tensor b0 = ps[1].var.value().clone();
  for (int k = 0; k < 3; ++k) {
    set_grad(ps[0], {0.1f * k, -0.2f, 0.3f});
    ps[1].var.grad() = Tensor();
    opt->step(ps, 0.05f);
    EXPECT_TRUE(bit_equal(ps[1].var.value(), b0)) << "step " << k;
  }
  for (const auto& [n, t] : opt->state().tensors) EXPECT_EQ(n.rfind("a.", 0), 0u) << n;

  // b's first update equals b's update by a fresh optimizer.
  auto fresh = build_optimizer(GetParam());
  std::vector<Param> alone{make_param("b", {4, 5}, {2})};
  set_grad(ps[1], {0.7f, -0.1f});
  set_grad(alone[0], {0.7f, -0.1f});
  opt->step(ps, 0.05f);
  fresh->step(alone, 0.05f);
  EXPECT_TRUE(bit_equal(ps[1].var.value(), alone[0].var.value()));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, NoGrad,
                         ::testing::Values("name: sgd\nlr: 0.1\nweight_decay: 0.01\n",
                                           "name: sgd\nlr: 0.1\nnesterov: true\n",
                                           "name: adam\nlr: 0.01\nweight_decay: 0.1\n",
                                           "name: adamw\nlr: 0.01\n", "name: lamb\nlr: 0.01\n"));

TEST(Optimizer, RejectsDuplicateNamesAndShapeChanges) {
  auto opt = build_optimizer("name: adam\nlr: 0.01\n");
  std::vector<Param> ps{make_param("w", {1, 2}, {2}), make_param("w", {3, 4}, {2})};
  set_grad(ps[0], {1, 1});
  set_grad(ps[1], {1, 1});
  EXPECT_NE(error_of<InternalError>([&] { opt->step(ps, 0.1f); }).find("'w' appears twice"),
            std::string::npos);
  EXPECT_EQ(values(ps[0]), (std::vector<float>{1, 2})) << "a rejected step changes nothing";
  std::vector<Param> one{make_param("v", {1, 2}, {2})};
  set_grad(one[0], {1, 1});
  opt->step(one, 0.1f);
  std::vector<Param> other{make_param("v", {1, 2, 3}, {3})};
  set_grad(other[0], {1, 1, 1});
  EXPECT_NE(error_of<ShapeError>([&] { opt->step(other, 0.1f); }).find("'v' is now"),
            std::string::npos);
  other[0].var.grad() = Tensor::zeros({2});
  EXPECT_NE(error_of<ShapeError>([&] { opt->step(other, 0.1f); }).find("its gradient is"),
            std::string::npos);
}

}  // namespace
}  // namespace ada::optim::testing
