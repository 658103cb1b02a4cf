// LAMB against its formula (optim/lamb.h) computed in double in the test:
// per-tensor trust ratios, zero norms (w = 0 and u = 0 give ratio 1), parameters excluded from
// decay (and, unless always_adapt, from the trust ratio), several steps.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/lamb.h"
#include "optim_test_util.h"

namespace ada::optim::testing {
namespace {

// One parameter's LAMB state and update in double.
struct RefLamb {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-6, wd = 0.01;
  bool decay = true, adapt = true;
  std::vector<double> w, m, v;
  int t = 0;
  double ratio = 0;
  void step(const std::vector<float>& g, double lr) {
    if (m.empty()) m.assign(w.size(), 0), v.assign(w.size(), 0);
    ++t;
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    std::vector<double> u(w.size());
    double wn = 0, un = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      u[i] = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps) + (decay ? wd * w[i] : 0.0);
      wn += w[i] * w[i];
      un += u[i] * u[i];
    }
    wn = std::sqrt(wn);
    un = std::sqrt(un);
    ratio = adapt && wn > 0 && un > 0 ? wn / un : 1.0;
    for (size_t i = 0; i < w.size(); ++i) w[i] -= lr * ratio * u[i];
  }
};

void expect_close(const Param& p, const std::vector<double>& want, double tol = 2e-6) {
  const auto got = values(p);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << p.name << "[" << i << "]";
}

const Lamb& as_lamb(const Optimizer& o) {
  return dynamic_cast<const Lamb&>(o);
}

TEST(Lamb, MatchesTheFormulaOverSeveralStepsPerTensor) {
  auto opt = build_optimizer("name: lamb\nlr: 0.02\nweight_decay: 0.01\n");
  std::vector<Param> ps{make_param("big", {3, -4, 2, 1, 0.5f, -2}, {2, 3}),
                        make_param("small", {0.01f, -0.02f, 0.03f}, {3})};
  RefLamb rb, rs;
  rb.w = {3, -4, 2, 1, 0.5, -2};
  rs.w = {0.01, -0.02, 0.03};
  const std::vector<std::vector<float>> gb = {
      {1, 2, -1, 0.5f, 0, 3}, {0.1f, -0.2f, 0.3f, 0, 1, 1}, {-2, 1, 0.5f, 0.25f, -1, 0}};
  const std::vector<std::vector<float>> gs = {{0.5f, 0.5f, -0.5f}, {1, 0, 0}, {0.2f, 0.1f, 0}};
  const double lrs[] = {0.02, 0.01, 0.03};
  for (int k = 0; k < 3; ++k) {
    set_grad(ps[0], gb[k]);
    set_grad(ps[1], gs[k]);
    opt->step(ps, static_cast<float>(lrs[k]));
    rb.step(gb[k], static_cast<float>(lrs[k]));
    rs.step(gs[k], static_cast<float>(lrs[k]));
    expect_close(ps[0], rb.w);
    expect_close(ps[1], rs.w);
    EXPECT_NEAR(as_lamb(*opt).last_trust_ratios().at("big"), rb.ratio, 1e-6 * rb.ratio);
    EXPECT_NEAR(as_lamb(*opt).last_trust_ratios().at("small"), rs.ratio, 1e-6 * rs.ratio);
  }
  // Per tensor: the two ratios differ by orders of magnitude.
  EXPECT_GT(rb.ratio / rs.ratio, 50.0);
}

TEST(Lamb, ZeroWeightsGiveRatioOne) {
  auto opt = build_optimizer("name: lamb\nlr: 0.1\nweight_decay: 0.01\n");
  std::vector<Param> ps{make_param("w", {0, 0, 0}, {3})};
  set_grad(ps[0], {0.5f, -2.f, 0.f});
  opt->step(ps, 0.1f);
  // ‖w‖ = 0: ratio 1, u = g/(|g| + eps) (first step, λw = 0): w = -0.1·u.
  EXPECT_EQ(as_lamb(*opt).last_trust_ratios().at("w"), 1.0);
  expect_close(ps[0], {-0.1 * 0.5 / (0.5 + 1e-6), 0.1 * 2 / (2 + 1e-6), 0.0});
}

TEST(Lamb, ZeroDirectionGivesRatioOneAndNoChange) {
  // g = 0 and λ = 0: m = v = 0, so u = 0 (eps keeps 0/0 away): ratio 1, w unchanged.
  auto opt = build_optimizer("name: lamb\nlr: 0.1\nweight_decay: 0\n");
  std::vector<Param> ps{make_param("w", {1, -2, 3}, {3})};
  const Tensor w0 = ps[0].var.value().clone();
  set_grad(ps[0], {0, 0, 0});
  opt->step(ps, 0.1f);
  EXPECT_EQ(as_lamb(*opt).last_trust_ratios().at("w"), 1.0);
  EXPECT_TRUE(bit_equal(ps[0].var.value(), w0));
  for (float x : values(ps[0])) EXPECT_TRUE(std::isfinite(x));
}

TEST(Lamb, ExcludedParametersGetNoDecayAndNoTrustRatio) {
  auto opt = build_optimizer("name: lamb\nlr: 0.05\nweight_decay: 0.1\n");
  std::vector<Param> ps{make_param("ln.bias", {3, -4}, {2}, false)};
  RefLamb r;
  r.w = {3, -4};
  r.wd = 0.1;
  r.decay = false;
  r.adapt = false;
  for (int k = 0; k < 3; ++k) {
    const std::vector<float> g = {0.5f * (k + 1), -0.25f};
    set_grad(ps[0], g);
    opt->step(ps, 0.05f);
    r.step(g, static_cast<float>(0.05));
    expect_close(ps[0], r.w);
    EXPECT_EQ(as_lamb(*opt).last_trust_ratios().at("ln.bias"), 1.0);
  }
}

TEST(Lamb, AlwaysAdaptAppliesTheRatioToExcludedParameters) {
  auto opt = build_optimizer("name: lamb\nlr: 0.05\nweight_decay: 0.1\nalways_adapt: true\n");
  std::vector<Param> ps{make_param("ln.bias", {3, -4}, {2}, false)};
  RefLamb r;
  r.w = {3, -4};
  r.wd = 0.1;
  r.decay = false;  // still no decay
  r.adapt = true;
  set_grad(ps[0], {0.5f, -0.25f});
  opt->step(ps, 0.05f);
  r.step({0.5f, -0.25f}, static_cast<float>(0.05));
  expect_close(ps[0], r.w);
  // ‖w‖ = 5, u ≈ [1, -1] (g/(|g| + eps)): ratio ≈ 5/√2.
  EXPECT_NEAR(as_lamb(*opt).last_trust_ratios().at("ln.bias"), r.ratio, 1e-6 * r.ratio);
  EXPECT_NEAR(r.ratio, 5 / std::sqrt(2.0), 1e-4);
}

}  // namespace
}  // namespace ada::optim::testing
