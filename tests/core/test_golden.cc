// Golden tests: the CPU ops of core/ops.h against PyTorch reference values.
// The files in tests/golden/ were written by tools/make_golden.py with torch 1.13.0a0 (Debian's
// python3-torch), reference computed in float64 from f32-rounded inputs, stored as f32. CI has no
// torch: these tests read the committed files. Regenerate (and bump FORMAT_VERSION there and
// kGoldenFormatVersion in tests/util/golden.h when names, shapes or meanings change) with
//     /usr/bin/python3 tools/make_golden.py
// Tolerance: the convolutions (sums of up to ~150 products) are held to the bound of
// tests/util/sum_bound.h, with G computed by the same op on the operands' magnitudes; the rest
// to |ours - torch| <= atol + rtol * |torch| per element, with kTol unless stated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/serialize.h"
#include "core/tensor.h"
#include "util/golden.h"
#include "util/sum_bound.h"

namespace {

using ada::NamedTensors;
using ada::Shape;
using ada::Tensor;
namespace ops = ada::ops;

constexpr char kRegenerate[] =
    "regenerate the golden files from the repository root with "
    "`/usr/bin/python3 tools/make_golden.py` (needs Debian's python3-torch)";

struct Tol {
  double atol, rtol;
};
// Default: every reference output here is a short normalisation of O(1) values (up to ~100 for the
// layer-norm row of std 0.01, covered by rtol), so a correct f32 kernel is within ~1e-6 relative
// whatever its summation order; the bugs these files exist to catch (a wrong
// padding/stride/dilation index, biased instead of unbiased running variance, a wrong eps, missing
// smoothing or ignore handling, overflow without max-subtraction) differ by 1e-3 or more.
constexpr Tol kTol{1e-4, 1e-4};
// GELU is elementwise, so it can be held tighter, and must be: the tanh approximation differs
// from the exact erf form by up to 4.7e-4 in y (x ~ -2.7) and 8.7e-4 in dx (x ~ 2.0), which kTol
// would only just catch. atol 1e-6 leaves room for the cancellation in 1 + erf(x/sqrt2) of an
// f32 erf for x <= -5 (|y| < 2e-6, absolute error ~1.5e-7).
constexpr Tol kGeluTol{1e-6, 1e-5};

void load_golden(const std::string& name, NamedTensors* out) {
  ada::testing::load_golden(name, kRegenerate, out);
}

std::string meta(const NamedTensors& g, const std::string& key) {
  return ada::testing::golden_meta(g, key, kRegenerate);
}
int meta_int(const NamedTensors& g, const std::string& key) {
  return std::stoi(meta(g, key));
}
float meta_float(const NamedTensors& g, const std::string& key) {
  return std::stof(meta(g, key));
}

std::string index_str(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? "," : "") << idx[d];
  os << "]";
  return os.str();
}

// Element-wise |actual - expected| <= atol + rtol*|expected|. With flat=true only the element
// counts must agree (for saved statistics whose layout core/ops.h leaves to the kernel).
::testing::AssertionResult all_close(const std::string& what, const Tensor& actual,
                                     const Tensor& expected, Tol tol, bool flat = false) {
  if (!actual.defined()) return ::testing::AssertionFailure() << what << ": result is undefined";
  if (actual.dtype() != ada::DType::f32)
    return ::testing::AssertionFailure() << what << ": result is " << actual.str() << ", want f32";
  if (flat ? actual.numel() != expected.numel() : actual.shape() != expected.shape())
    return ::testing::AssertionFailure()
           << what << ": result shape " << ada::shape_str(actual.shape()) << ", torch "
           << ada::shape_str(expected.shape());
  const std::vector<float> a = actual.to_vector<float>();
  const std::vector<float> b = expected.to_vector<float>();
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0, max_abs = 0;
  std::ostringstream first;
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = std::fabs(double(a[i]) - double(b[i]));
    const double allowed = tol.atol + tol.rtol * std::fabs(double(b[i]));
    const double ratio = std::isfinite(diff) ? diff / allowed : INFINITY;
    max_abs = std::max(max_abs, std::isfinite(diff) ? diff : INFINITY);
    if (!(diff <= allowed)) {
      if (bad < 5)
        first << "\n  at " << index_str(expected.shape(), int64_t(i)) << ": ours " << a[i]
              << ", torch " << b[i] << ", |diff| " << diff << " > " << allowed;
      ++bad;
    }
    if (ratio > worst_ratio || worst < 0) worst_ratio = ratio, worst = int64_t(i);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;  // default 6-digit formatting (AssertionResult prints 17 digits)
  os << what << ": " << bad << " of " << a.size() << " elements differ from torch beyond atol "
     << tol.atol << " + rtol " << tol.rtol << "*|torch| (max |diff| " << max_abs << "; worst at "
     << index_str(expected.shape(), worst) << ": ours " << a[worst] << ", torch " << b[worst] << ")"
     << first.str();
  return ::testing::AssertionFailure() << os.str();
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

// ---- every file present and current -------------------------------------------------------------
const std::vector<std::string> kAllFiles = {"conv2d_3x3_s1_p1",
                                            "conv2d_3x3_s2_p1",
                                            "conv2d_1x1_s1",
                                            "conv2d_1x1_s2",
                                            "conv2d_7x7_s2_p3",
                                            "conv2d_k3x2_s2x1_p1x0_d2",
                                            "batch_norm_train",
                                            "batch_norm_eval",
                                            "layer_norm_eps1e-5",
                                            "layer_norm_eps1e-12",
                                            "cross_entropy_ls0.1",
                                            "cross_entropy_ls0.0",
                                            "softmax",
                                            "log_softmax",
                                            "gelu"};

TEST(GoldenFiles, PresentWithCurrentFormat) {
  for (const std::string& name : kAllFiles) {
    SCOPED_TRACE(name);
    NamedTensors g;
    load_golden(name, &g);  // a failure here returns from the helper: go on with the other files
    auto version = g.metadata.find("format_version");
    if (version == g.metadata.end() || version->second != ada::testing::kGoldenFormatVersion)
      continue;
    EXPECT_EQ(meta(g, "generator"), "tools/make_golden.py");
    EXPECT_FALSE(meta(g, "torch_version").empty());
    EXPECT_EQ(meta(g, "case"), name);
    for (const auto& [tname, t] : g.tensors)
      if (t.dtype() == ada::DType::f32) {
        EXPECT_TRUE(ops::all_finite(t)) << name << ": " << tname << " is not finite";
      }
  }
}

// ---- conv2d -------------------------------------------------------------------------------------
class GoldenConv2d : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(load_golden(GetParam(), &g));
    ASSERT_EQ(meta(g, "op"), "conv2d");
    p.stride_h = meta_int(g, "stride_h");
    p.stride_w = meta_int(g, "stride_w");
    p.pad_h = meta_int(g, "pad_h");
    p.pad_w = meta_int(g, "pad_w");
    p.dil_h = meta_int(g, "dil_h");
    p.dil_w = meta_int(g, "dil_w");
  }
  NamedTensors g;
  ops::Conv2dParams p;
};

// t with every element replaced by its magnitude.
Tensor magnitudes(const Tensor& t) {
  std::vector<float> v = t.to_vector<float>();
  for (float& e : v) e = std::fabs(e);
  return Tensor::from_vector<float>(v, t.shape());
}

// ours against torch's value (a double sum rounded to f32) within the sum bound, G being the same
// op on the operands' magnitudes (`mag`, in f32: a sum of positive terms is within ~1e-5 of G).
void expect_golden_sum(const std::string& what, const Tensor& ours, const Tensor& torch,
                       const Tensor& mag) {
  ASSERT_EQ(ours.shape(), torch.shape()) << what;
  const std::vector<float> t = torch.to_vector<float>(), m = mag.to_vector<float>();
  ada::testing::expect_within_sum_bound(ours.to_vector<float>(),
                                        {{t.begin(), t.end()}, {m.begin(), m.end()}},
                                        what + " (against torch)");
}

TEST_P(GoldenConv2d, Forward) {
  const Tensor &x = g.at("x"), &w = g.at("w");
  EXPECT_EQ(ops::conv2d_output_shape(x.shape(), w.shape(), p), g.at("y").shape());
  expect_golden_sum("conv2d_forward y", ops::conv2d_forward(x, w, p), g.at("y"),
                    ops::conv2d_forward(magnitudes(x), magnitudes(w), p));
}

TEST_P(GoldenConv2d, BackwardData) {
  const Tensor &dy = g.at("dy"), &w = g.at("w");
  const Shape& xs = g.at("x").shape();
  expect_golden_sum("conv2d_backward_data dx", ops::conv2d_backward_data(dy, w, xs, p), g.at("dx"),
                    ops::conv2d_backward_data(magnitudes(dy), magnitudes(w), xs, p));
}

TEST_P(GoldenConv2d, BackwardFilter) {
  const Tensor &dy = g.at("dy"), &x = g.at("x");
  const Shape& ws = g.at("w").shape();
  expect_golden_sum("conv2d_backward_filter dw", ops::conv2d_backward_filter(dy, x, ws, p),
                    g.at("dw"), ops::conv2d_backward_filter(magnitudes(dy), magnitudes(x), ws, p));
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenConv2d,
                         ::testing::Values("conv2d_3x3_s1_p1", "conv2d_3x3_s2_p1", "conv2d_1x1_s1",
                                           "conv2d_1x1_s2", "conv2d_7x7_s2_p3",
                                           "conv2d_k3x2_s2x1_p1x0_d2"),
                         param_name);

// ---- batch-norm ---------------------------------------------------------------------------------
TEST(GoldenBatchNorm, TrainForwardAndRunningStats) {
  NamedTensors g;
  ASSERT_NO_FATAL_FAILURE(load_golden("batch_norm_train", &g));
  Tensor rm = g.at("running_mean_in").clone(), rv = g.at("running_var_in").clone();
  Tensor save_mean, save_invstd;
  Tensor y = ops::batch_norm_train(g.at("x"), g.at("gamma"), g.at("beta"), rm, rv,
                                   meta_float(g, "momentum"), meta_float(g, "eps"), save_mean,
                                   save_invstd);
  EXPECT_TRUE(all_close("batch_norm_train y", y, g.at("y"), kTol));
  EXPECT_TRUE(all_close("batch_norm_train save_mean", save_mean, g.at("save_mean"), kTol, true));
  EXPECT_TRUE(
      all_close("batch_norm_train save_invstd", save_invstd, g.at("save_invstd"), kTol, true));
  // running_var uses the unbiased batch variance: with 45 values per channel the biased one is
  // 2.2% smaller, i.e. ~1e-2 off here, far outside kTol.
  EXPECT_TRUE(all_close("batch_norm_train running_mean", rm, g.at("running_mean_out"), kTol));
  EXPECT_TRUE(all_close("batch_norm_train running_var", rv, g.at("running_var_out"), kTol));
}

TEST(GoldenBatchNorm, TrainBackward) {
  NamedTensors g;
  ASSERT_NO_FATAL_FAILURE(load_golden("batch_norm_train", &g));
  Tensor rm = g.at("running_mean_in").clone(), rv = g.at("running_var_in").clone();
  Tensor save_mean, save_invstd;  // the layout is the kernel's: take it from our forward
  ops::batch_norm_train(g.at("x"), g.at("gamma"), g.at("beta"), rm, rv, meta_float(g, "momentum"),
                        meta_float(g, "eps"), save_mean, save_invstd);
  auto r = ops::batch_norm_backward(g.at("dy"), g.at("x"), g.at("gamma"), save_mean, save_invstd);
  EXPECT_TRUE(all_close("batch_norm_backward dx", r.dx, g.at("dx"), kTol));
  EXPECT_TRUE(all_close("batch_norm_backward dgamma", r.dgamma, g.at("dgamma"), kTol));
  EXPECT_TRUE(all_close("batch_norm_backward dbeta", r.dbeta, g.at("dbeta"), kTol));
}

TEST(GoldenBatchNorm, EvalForward) {
  NamedTensors g;
  ASSERT_NO_FATAL_FAILURE(load_golden("batch_norm_eval", &g));
  const std::vector<float> rm0 = g.at("running_mean").to_vector<float>();
  const std::vector<float> rv0 = g.at("running_var").to_vector<float>();
  Tensor y = ops::batch_norm_eval(g.at("x"), g.at("gamma"), g.at("beta"), g.at("running_mean"),
                                  g.at("running_var"), meta_float(g, "eps"));
  EXPECT_TRUE(all_close("batch_norm_eval y", y, g.at("y"), kTol));
  EXPECT_EQ(g.at("running_mean").to_vector<float>(), rm0) << "eval mode changed running_mean";
  EXPECT_EQ(g.at("running_var").to_vector<float>(), rv0) << "eval mode changed running_var";
}

TEST(GoldenBatchNorm, EvalBackward) {
  NamedTensors g;
  ASSERT_NO_FATAL_FAILURE(load_golden("batch_norm_eval", &g));
  auto r = ops::batch_norm_eval_backward(g.at("dy"), g.at("x"), g.at("gamma"), g.at("running_mean"),
                                         g.at("running_var"), meta_float(g, "eps"));
  EXPECT_TRUE(all_close("batch_norm_eval_backward dx", r.dx, g.at("dx"), kTol));
  EXPECT_TRUE(all_close("batch_norm_eval_backward dgamma", r.dgamma, g.at("dgamma"), kTol));
  EXPECT_TRUE(all_close("batch_norm_eval_backward dbeta", r.dbeta, g.at("dbeta"), kTol));
}

// ---- layer-norm ---------------------------------------------------------------------------------
class GoldenLayerNorm : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(load_golden(GetParam(), &g));
    ASSERT_EQ(meta(g, "op"), "layer_norm");
    eps = meta_float(g, "eps");
  }
  NamedTensors g;
  float eps = 0;
};

TEST_P(GoldenLayerNorm, Forward) {
  Tensor mean, rstd;
  Tensor y = ops::layer_norm_forward(g.at("x"), g.at("gamma"), g.at("beta"), eps, mean, rstd);
  EXPECT_TRUE(all_close("layer_norm_forward y", y, g.at("y"), kTol));
  EXPECT_TRUE(all_close("layer_norm_forward save_mean", mean, g.at("save_mean"), kTol, true));
  EXPECT_TRUE(all_close("layer_norm_forward save_rstd", rstd, g.at("save_rstd"), kTol, true));
}

TEST_P(GoldenLayerNorm, Backward) {
  Tensor mean, rstd;  // the layout is the kernel's: take it from our forward
  ops::layer_norm_forward(g.at("x"), g.at("gamma"), g.at("beta"), eps, mean, rstd);
  auto r = ops::layer_norm_backward(g.at("dy"), g.at("x"), g.at("gamma"), mean, rstd);
  EXPECT_TRUE(all_close("layer_norm_backward dx", r.dx, g.at("dx"), kTol));
  EXPECT_TRUE(all_close("layer_norm_backward dgamma", r.dgamma, g.at("dgamma"), kTol));
  EXPECT_TRUE(all_close("layer_norm_backward dbeta", r.dbeta, g.at("dbeta"), kTol));
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenLayerNorm,
                         ::testing::Values("layer_norm_eps1e-5", "layer_norm_eps1e-12"),
                         param_name);

// ---- cross-entropy ------------------------------------------------------------------------------
class GoldenCrossEntropy : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(load_golden(GetParam(), &g));
    ASSERT_EQ(meta(g, "op"), "cross_entropy");
    ASSERT_EQ(meta(g, "reduction"), "mean");
    smoothing = meta_float(g, "label_smoothing");
    ignore_index = std::stoll(meta(g, "ignore_index"));
  }
  NamedTensors g;
  float smoothing = 0;
  int64_t ignore_index = -100;
};

TEST_P(GoldenCrossEntropy, Forward) {
  Tensor logp;
  Tensor loss =
      ops::cross_entropy_forward(g.at("logits"), g.at("targets"), smoothing, ignore_index, logp);
  EXPECT_TRUE(all_close("cross_entropy_forward loss", loss, g.at("loss"), kTol));
  EXPECT_TRUE(all_close("cross_entropy_forward save_logp", logp, g.at("logp"), kTol, true));
}

TEST_P(GoldenCrossEntropy, Backward) {
  Tensor logp;
  ops::cross_entropy_forward(g.at("logits"), g.at("targets"), smoothing, ignore_index, logp);
  Tensor dlogits = ops::cross_entropy_backward(g.at("dloss").item(), logp, g.at("targets"),
                                               smoothing, ignore_index);
  EXPECT_TRUE(all_close("cross_entropy_backward dlogits", dlogits, g.at("dlogits"), kTol));
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenCrossEntropy,
                         ::testing::Values("cross_entropy_ls0.1", "cross_entropy_ls0.0"),
                         param_name);

// ---- softmax, log_softmax ----------------------------------------------------------------------
// Backward is fed torch's y (rounded to f32), so it is checked independently of our forward.
TEST(GoldenSoftmax, Forward) {
  NamedTensors g;
  ASSERT_NO_FATAL_FAILURE(load_golden("softmax", &g));
  EXPECT_TRUE(all_close("softmax y", ops::softmax(g.at("x")), g.at("y"), kTol));
}

TEST(GoldenSoftmax, Backward) {
  NamedTensors g;
  ASSERT_NO_FATAL_FAILURE(load_golden("softmax", &g));
  EXPECT_TRUE(all_close("softmax_backward dx", ops::softmax_backward(g.at("dy"), g.at("y")),
                        g.at("dx"), kTol));
}

TEST(GoldenLogSoftmax, Forward) {
  NamedTensors g;
  ASSERT_NO_FATAL_FAILURE(load_golden("log_softmax", &g));
  EXPECT_TRUE(all_close("log_softmax y", ops::log_softmax(g.at("x")), g.at("y"), kTol));
}

TEST(GoldenLogSoftmax, Backward) {
  NamedTensors g;
  ASSERT_NO_FATAL_FAILURE(load_golden("log_softmax", &g));
  EXPECT_TRUE(all_close("log_softmax_backward dx", ops::log_softmax_backward(g.at("dy"), g.at("y")),
                        g.at("dx"), kTol));
}

// ---- GELU ---------------------------------------------------------------------------------------
TEST(GoldenGelu, Forward) {
  NamedTensors g;
  ASSERT_NO_FATAL_FAILURE(load_golden("gelu", &g));
  EXPECT_TRUE(all_close("gelu y", ops::gelu(g.at("x")), g.at("y"), kGeluTol));
}

TEST(GoldenGelu, Backward) {
  NamedTensors g;
  ASSERT_NO_FATAL_FAILURE(load_golden("gelu", &g));
  EXPECT_TRUE(all_close("gelu_backward dx", ops::gelu_backward(g.at("dy"), g.at("x")), g.at("dx"),
                        kGeluTol));
}

}  // namespace
