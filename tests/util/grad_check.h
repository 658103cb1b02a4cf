// Finite-difference gradient checker (after Caffe's GradientChecker).
// The scalar checked is L = sum(f(inputs) * R) for a fixed random R, accumulated in double, so
// every output element contributes. For each input that requires grad, autograd's dL/dx is
// compared with the central difference (L(x+h) - L(x-h)) / 2h at every element (or at a
// seeded sample of `max_elements` elements for large inputs):
//   |analytic - numeric| <= tol * max(1, |analytic|, |numeric|).
// Kinks (ReLU at 0, ties in max-pool) must be kept further than h from the test points by the
// caller's choice of inputs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/functional.h"
#include "core/random.h"

namespace ada::testing {

struct GradCheckOptions {
  double step = 1e-2;
  double tol = 5e-3;
  int64_t max_elements = 400;
  uint64_t seed = 1234;
};

using GradFn = std::function<Variable(const std::vector<Variable>&)>;

inline double projected(const Tensor& out, const Tensor& r) {
  const float* o = out.data<float>();
  const float* w = r.data<float>();
  double s = 0;
  for (int64_t i = 0; i < out.numel(); ++i) s += static_cast<double>(o[i]) * w[i];
  return s;
}

// differentiate[i] says whether input i is differentiated (e.g. labels are not).
inline void check_gradients(const std::string& what, const GradFn& f, std::vector<Tensor> inputs,
                            std::vector<bool> differentiate = {}, GradCheckOptions opt = {}) {
  if (differentiate.empty()) differentiate.assign(inputs.size(), true);
  std::vector<Variable> vars;
  for (size_t i = 0; i < inputs.size(); ++i) vars.emplace_back(inputs[i].clone(), differentiate[i]);
  Variable out = f(vars);
  Generator gen(opt.seed);
  Tensor r = Tensor::uniform(out.shape(), gen, -1.f, 1.f);
  std::vector<int> axes;
  for (int64_t d = 0; d < out.value().dim(); ++d) axes.push_back(static_cast<int>(d));
  Variable loss = fn::sum(fn::mul(out, Variable(r)), axes);
  backward(loss);

  auto eval = [&](const std::vector<Tensor>& xs) {
    NoGradGuard ng;
    std::vector<Variable> v;
    for (const auto& x : xs) v.emplace_back(x);
    return projected(f(v).value(), r);
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!differentiate[i]) continue;
    const Tensor analytic = vars[i].grad();
    ASSERT_TRUE(analytic.defined()) << what << ": input " << i << " received no gradient";
    ASSERT_EQ(analytic.shape(), inputs[i].shape()) << what << ": input " << i;
    const int64_t n = inputs[i].numel();
    std::vector<int64_t> idx;
    if (n <= opt.max_elements) {
      for (int64_t k = 0; k < n; ++k) idx.push_back(k);
    } else {
      Generator pick(opt.seed + 17 + i);
      for (int64_t k = 0; k < opt.max_elements; ++k)
        idx.push_back(std::min<int64_t>(
            n - 1, static_cast<int64_t>(Generator::uniform_at(pick.seed(), 0, k) * n)));
    }
    int failures = 0;
    for (int64_t k : idx) {
      std::vector<Tensor> xs;
      for (const auto& t : inputs) xs.push_back(t.clone());
      float* p = xs[i].data<float>();
      const float orig = p[k];
      p[k] = static_cast<float>(orig + opt.step);
      const double lp = eval(xs);
      p[k] = static_cast<float>(orig - opt.step);
      const double lm = eval(xs);
      const double numeric = (lp - lm) / (2 * opt.step);
      const double a = analytic.data<float>()[k];
      const double scale = std::max({1.0, std::fabs(a), std::fabs(numeric)});
      if (std::fabs(a - numeric) > opt.tol * scale && ++failures <= 5)
        ADD_FAILURE() << what << ": input " << i << " element " << k << ": analytic " << a
                      << " vs numeric " << numeric;
    }
    EXPECT_EQ(failures, 0) << what << ": input " << i << " had " << failures
                           << " mismatching elements out of " << idx.size();
  }
}

// Values spread uniformly in [-1, 1] but at least `gap` apart and away from 0 by gap/2:
// safe inputs for ReLU and max-pool gradient checks.
inline Tensor spaced_values(const Shape& shape, uint64_t seed, float gap = 0.05f) {
  Tensor t = Tensor::empty(shape);
  const int64_t n = t.numel();
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(Generator::uniform_at(seed, 0, i) * (i + 1));
    std::swap(perm[i], perm[std::min(j, i)]);
  }
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = (static_cast<float>(perm[i] - n / 2) + 0.5f) * gap;
  return t;
}

}  // namespace ada::testing
