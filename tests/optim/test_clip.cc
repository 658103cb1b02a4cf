// Global-norm gradient clipping: the norm over all gradients, PyTorch's coefficient
// max_norm/(norm + 1e-6), no change at or below the limit, undefined and non-finite gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "optim/clip.h"
#include "optim_test_util.h"

namespace ada::optim::testing {
namespace {

TEST(Clip, ScalesAllGradientsByOneGlobalCoefficient) {
  std::vector<Param> ps{make_param("a", {0, 0}, {2}), make_param("b", {0}, {1}),
                        make_param("c", {0}, {1})};
  set_grad(ps[0], {3, 4});
  set_grad(ps[1], {12});
  // c has no gradient: skipped.
  EXPECT_DOUBLE_EQ(grad_norm(ps), 13.0);
  clip_grad_norm(ps, 6.5);
  const double coef = 6.5 / (13.0 + 1e-6);
  const auto a = ps[0].var.grad().to_vector<float>();
  EXPECT_FLOAT_EQ(a[0], static_cast<float>(3 * coef));
  EXPECT_FLOAT_EQ(a[1], static_cast<float>(4 * coef));
  EXPECT_FLOAT_EQ(ps[1].var.grad().to_vector<float>()[0], static_cast<float>(12 * coef));
  EXPECT_FALSE(ps[2].var.grad().defined());
  EXPECT_NEAR(grad_norm(ps), 6.5, 1e-5);
}

TEST(Clip, BelowOrAtTheLimitNothingChanges) {
  std::vector<Param> ps{make_param("a", {0, 0}, {2})};
  set_grad(ps[0], {3, 4});
  const Tensor g0 = ps[0].var.grad().clone();
  clip_grad_norm(ps, 5.0);
  EXPECT_TRUE(bit_equal(ps[0].var.grad(), g0));
  clip_grad_norm(ps, 100.0);
  EXPECT_TRUE(bit_equal(ps[0].var.grad(), g0));
}

TEST(Clip, AccumulatesInDouble) {
  // 2^20 squares of 1e-3: a float running sum would be off in the 4th digit; double is exact
  // to ~1e-12 here.
  const int64_t n = 1 << 20;
  std::vector<Param> ps{make_param("a", std::vector<float>(n, 0.f), {n})};
  ps[0].var.grad() = Tensor::full({n}, 1e-3);
  const double want = std::sqrt(static_cast<double>(n) * static_cast<double>(1e-3f) * 1e-3f);
  EXPECT_NEAR(grad_norm(ps), want, 1e-12 * want);
}

TEST(Clip, NonFiniteNormKeepsTheGradients) {
  std::vector<Param> ps{make_param("a", {0, 0}, {2})};
  set_grad(ps[0], {std::numeric_limits<float>::infinity(), 1});
  Tensor g0 = ps[0].var.grad().clone();
  clip_grad_norm(ps, 1.0);
  EXPECT_TRUE(bit_equal(ps[0].var.grad(), g0));
  EXPECT_TRUE(std::isinf(grad_norm(ps)));
  set_grad(ps[0], {std::nanf(""), 1});
  g0 = ps[0].var.grad().clone();
  clip_grad_norm(ps, 1.0);
  EXPECT_TRUE(bit_equal(ps[0].var.grad(), g0));
  EXPECT_TRUE(std::isnan(grad_norm(ps)));
}

TEST(Clip, NoGradientsAtAllIsNormZeroAndChangesNothing) {
  std::vector<Param> ps{make_param("a", {1}, {1})};
  EXPECT_EQ(grad_norm(ps), 0.0);
  clip_grad_norm(ps, 1.0);
  EXPECT_FALSE(ps[0].var.grad().defined());
}

TEST(Clip, RejectsNonPositiveMaxNorm) {
  std::vector<Param> ps{make_param("a", {1}, {1})};
  EXPECT_NE(error_of<ConfigError>([&] { clip_grad_norm(ps, 0.0); }).find("max_norm must be > 0"),
            std::string::npos);
}

}  // namespace
}  // namespace ada::optim::testing
