// Every op of the CUDA backend (core/backend/cuda/cuda_ops.h) against the CPU op of core/ops.h,
// forward and backward: the same random CPU inputs go through the CPU op and, moved with
// .to(gpu()), through the same ops:: function, which dispatches to CUDA. Shapes include odd and
// empty sizes; each failure names the op, its shapes and parameters (SCOPED_TRACE and the
// `what` strings) and the worst element as a multi-index. Argument errors must match the CPU's
// exception types; mixing devices must throw DeviceError.
//
// Tolerances (|gpu - cpu| <= atol + rtol * |cpu|), chosen from what fp32 can justify:
//  - elementwise: 1e-6 relative. One or two roundings per element on each device; the only
//    differences are FMA contraction (nvcc contracts a*b+c) and CUDA's erff/expf/tanhf vs the
//    host libm (both within ~2 ulp). Where a result cancels towards zero (gelu for x << 0,
//    gelu'/tanh' near their zeros, axpby) a small atol covers an ulp of the cancelled terms.
//  - reductions, softmax, norms, losses: 1e-5 relative; atol ~1e-6 * sqrt(count) for sums of
//    `count` N(0,1) terms, i.e. 1e-6 of the sum's typical magnitude. That admits any double or
//    pairwise fp32 accumulation but not a naive sequential fp32 sum over long rows.
//  - GEMM and convolution: rtol 1e-4, atol 1e-4 * sqrt(K) (K = the length of each dot product).
//    Outputs are sums of K products of N(0,1) values, magnitude ~sqrt(K); cuBLAS/cuDNN tile,
//    split K and may use Winograd/FFT, changing the summation order, which in fp32 moves a
//    result by far less than 1e-4*sqrt(K) for any K used here. TF32 tensor-op math (10-bit
//    mantissa, error ~4e-4*sqrt(K) rms per output) fails these bounds on purpose: the backend
//    must compute in full fp32, like the CPU reference.
//  - gathers, permutes, masks, max-pool values and indices, broadcasts: exact.
//  - sum_all / dot / norm2_sq: both devices accumulate in double; 1e-9 of sum(|terms|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/autograd.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/functional.h"
#include "core/ops.h"
#include "core/precision.h"
#include "core/random.h"
#include "core/tensor.h"
#include "cuda/cuda_test_util.h"
#include "util/act16_cases.h"

namespace ada {
namespace {

using ::ada::testing::close_to_cpu;
using ::ada::testing::gpu;
using ::ada::testing::rand_cpu;

// ---- helpers ---------------------------------------------------------------------------------

Tensor on_gpu(const Tensor& t) {
  return t.to(gpu());
}

template <class... Ts>
std::string cat(const Ts&... xs) {
  std::ostringstream os;
  os.precision(9);
  (os << ... << xs);
  return os.str();
}

// A permutation or axis list as shape_str writes shapes, e.g. "[0,2,3,1]".
std::string ints_str(const std::vector<int>& v) {
  return shape_str(Shape(v.begin(), v.end()));
}

// [N,C,H,W] -> channels-last [N,H,W,C].
Tensor nhwc(const Tensor& t) {
  return ops::permute(t, {0, 2, 3, 1});
}

std::string conv_str(const ops::Conv2dParams& p) {
  return cat("stride ", p.stride_h, "x", p.stride_w, " pad ", p.pad_h, "x", p.pad_w, " dil ",
             p.dil_h, "x", p.dil_w);
}

std::string pool_str(const ops::Pool2dParams& p) {
  return cat("kernel ", p.kernel_h, "x", p.kernel_w, " stride ", p.stride_h, "x", p.stride_w,
             " pad ", p.pad_h, "x", p.pad_w,
             p.count_include_pad ? " count_include_pad" : " exclude_pad");
}

// Multi-index of flat element `flat` in shape s, e.g. "[1,0,4]".
std::string index_str(const Shape& s, int64_t flat) {
  std::vector<int64_t> idx(s.size(), 0);
  for (size_t d = s.size(); d-- > 0;) {
    if (s[d] > 0) {
      idx[d] = flat % s[d];
      flat /= s[d];
    }
  }
  std::ostringstream os;
  os << '[';
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? "," : "") << idx[d];
  os << ']';
  return os.str();
}

// close_to_cpu, plus on failure: which op (`what`), the worst and first bad elements as
// multi-indices and how many elements are outside the tolerance.
::testing::AssertionResult near(const std::string& what, const Tensor& g, const Tensor& c,
                                double rtol, double atol) {
  if (!g.defined()) return ::testing::AssertionFailure() << what << ": the GPU result is undefined";
  ::testing::AssertionResult base = close_to_cpu(g, c, rtol, atol);
  if (base) return base;
  std::ostringstream os;
  os.precision(9);
  os << what << ": " << base.message();
  if (g.shape() == c.shape() && !g.device().is_cpu() && g.dtype() == DType::f32) {
    const std::vector<float> gv = g.to(Device::cpu()).to_vector<float>();
    const std::vector<float> cv = c.to_vector<float>();
    int64_t bad = 0, first = -1, worst = -1;
    double worst_excess = 0;
    for (size_t i = 0; i < cv.size(); ++i) {
      const double d = std::fabs(static_cast<double>(gv[i]) - cv[i]);
      const double lim = atol + rtol * std::fabs(cv[i]);
      if (d <= lim) continue;
      ++bad;
      if (first < 0) first = static_cast<int64_t>(i);
      if (worst < 0 || !(d - lim <= worst_excess)) {
        worst_excess = d - lim;
        worst = static_cast<int64_t>(i);
      }
    }
    if (worst >= 0)
      os << "; worst element " << index_str(c.shape(), worst) << " gpu " << gv[worst] << " cpu "
         << cv[worst] << "; first bad element " << index_str(c.shape(), first) << " gpu "
         << gv[first] << " cpu " << cv[first] << "; " << bad << " of " << cv.size()
         << " elements outside tolerance";
  }
  return ::testing::AssertionFailure() << os.str();
}

// Exact equality element by element (NaN equals NaN), same shape and dtype, result on the GPU.
template <class T>
::testing::AssertionResult same(const std::string& what, const Tensor& g, const Tensor& c) {
  if (!g.defined()) return ::testing::AssertionFailure() << what << ": the GPU result is undefined";
  if (g.device().is_cpu())
    return ::testing::AssertionFailure() << what << ": result " << g.str() << " is not on the GPU";
  if (g.shape() != c.shape() || g.dtype() != c.dtype())
    return ::testing::AssertionFailure() << what << ": gpu " << g.str() << " vs cpu " << c.str();
  const std::vector<T> gv = g.to(Device::cpu()).to_vector<T>();
  const std::vector<T> cv = c.to_vector<T>();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < cv.size(); ++i) {
    bool eq = gv[i] == cv[i];
    if constexpr (std::is_floating_point_v<T>) eq = eq || (std::isnan(gv[i]) && std::isnan(cv[i]));
    if (!eq && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << what << ": element " << index_str(c.shape(), first) << " (flat " << first << ") gpu "
     << +gv[first] << " cpu " << +cv[first] << "; " << bad << " of " << cv.size()
     << " elements differ (exact comparison, " << c.str() << ")";
  return ::testing::AssertionFailure() << os.str();
}
::testing::AssertionResult same_f(const std::string& what, const Tensor& g, const Tensor& c) {
  return same<float>(what, g, c);
}

// Reductions to a double: |g - c| <= tol.
::testing::AssertionResult near_scalar(const std::string& what, double g, double c, double tol) {
  if (std::fabs(g - c) <= tol) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(17);
  os << what << ": gpu " << g << " cpu " << c << " (|diff| " << std::fabs(g - c) << " > tol " << tol
     << ")";
  return ::testing::AssertionFailure() << os.str();
}

// A bound on |gpu - cpu| for an optimizer's moment m_t = a*m_{t-1} + b*(g_t + c*w) after
// gs.size() steps from m0 (a = 0 on a step whose `first` is set: SGD's first update), element by
// element. Each side forms a step with at most 6 roundings (c*w, the sum with g, b times it,
// a*m, their sum, and the constants' own rounding to f32), each at most u = 2^-24 times
// S_t = a|m_{t-1}| + b(|g_t| + c|w|), which bounds every intermediate; an earlier error is carried
// on times a; the two sides' errors add. The backends may contract a*x + y into one fused
// multiply-add or not (the GPU's compiler does), so they agree to this bound, not bit for bit,
// and a moment that cancels (terms of opposite signs) keeps an absolute error of the terms'
// size. |w| is taken as |w0| + w_slack: the weights move by lr times a bounded update per step.
std::vector<double> moment_bound(const Tensor& m0, const std::vector<Tensor>& gs, const Tensor& w0,
                                 double a, double b, double c, bool first, double w_slack) {
  constexpr double u = 0x1p-24;
  const std::vector<float> m = m0.to_vector<float>(), w = w0.to_vector<float>();
  std::vector<double> mag(m.size()), err(m.size(), 0.0);
  for (size_t i = 0; i < m.size(); ++i) mag[i] = std::fabs(m[i]);
  for (size_t t = 0; t < gs.size(); ++t) {
    const std::vector<float> g = gs[t].to(Device::cpu()).to_vector<float>();
    const double at = first && t == 0 ? 0.0 : a;
    for (size_t i = 0; i < m.size(); ++i) {
      const double s = at * mag[i] + b * (std::fabs(g[i]) + c * (std::fabs(w[i]) + w_slack));
      err[i] = at * err[i] + 6 * u * s;
      mag[i] = s;
    }
  }
  for (double& e : err) e *= 2;
  return err;
}

template <class E>
const char* error_name();
template <>
const char* error_name<ShapeError>() {
  return "ShapeError";
}
template <>
const char* error_name<DTypeError>() {
  return "DTypeError";
}
template <>
const char* error_name<DeviceError>() {
  return "DeviceError";
}
template <>
const char* error_name<InternalError>() {
  return "InternalError";
}

// "" when f throws E, otherwise what happened.
template <class E, class F>
std::string throw_outcome(F&& f) {
  try {
    f();
  } catch (const E&) {
    return "";
  } catch (const std::exception& e) {
    return std::string("it threw another error: ") + e.what();
  }
  return "it threw nothing";
}

template <class E, class F>
void expect_error(const std::string& what, F&& gpu_call) {
  const std::string g = throw_outcome<E>(gpu_call);
  if (!g.empty()) ADD_FAILURE() << what << ": expected " << error_name<E>() << ", but " << g;
}

// The CPU reference throws E for these arguments; the GPU must throw E too.
template <class E, class F1, class F2>
void expect_same_error(const std::string& what, F1&& cpu_call, F2&& gpu_call) {
  const std::string c = throw_outcome<E>(cpu_call);
  if (!c.empty())
    ADD_FAILURE() << what << ": the CPU reference was expected to throw " << error_name<E>()
                  << ", but " << c;
  const std::string g = throw_outcome<E>(gpu_call);
  if (!g.empty())
    ADD_FAILURE() << what << " on the GPU: expected " << error_name<E>() << " like the CPU, but "
                  << g;
}

Tensor index_tensor(const std::vector<int64_t>& v, const Shape& s, DType dt) {
  if (dt == DType::i64) return Tensor::from_vector<int64_t>(v, s);
  std::vector<int32_t> w(v.begin(), v.end());
  return Tensor::from_vector<int32_t>(w, s);
}

// Copy of t with f applied to every element (host side).
template <class F>
Tensor map_host(const Tensor& t, F f) {
  std::vector<float> v = t.to_vector<float>();
  for (float& x : v) x = f(x);
  return Tensor::from_vector<float>(v, t.shape());
}

Tensor with_value_at(const Tensor& t, int64_t flat, float value) {
  std::vector<float> v = t.to_vector<float>();
  v[static_cast<size_t>(flat)] = value;
  return Tensor::from_vector<float>(v, t.shape());
}

double sqrt_count(int64_t n) {
  return std::sqrt(static_cast<double>(std::max<int64_t>(n, 1)));
}

// GEMM / conv absolute tolerance for dot products of length k of N(0,1) values, times |alpha|.
double mm_atol(int64_t k, double scale = 1.0) {
  return 1e-4 * sqrt_count(k) * scale;
}
constexpr double kMmRtol = 1e-4;
constexpr double kEltRtol = 1e-6;
constexpr double kRedRtol = 1e-5;

const std::vector<Shape>& elementwise_shapes() {
  static const std::vector<Shape> s = {{0},     {1},       {7},        {33}, {1000},
                                       {65537}, {3, 0, 5}, {4, 33, 7}, {}};
  return s;
}

// ---- elementwise ---------------------------------------------------------------------------

TEST(CudaOps, ElementwiseArithmetic) {
  ADA_REQUIRE_GPU();
  for (const Shape& s : elementwise_shapes()) {
    SCOPED_TRACE("shape " + shape_str(s));
    const std::string sh = cat(" ", shape_str(s));
    const Tensor a = rand_cpu(s, 11), b = rand_cpu(s, 12, 2.f);
    const Tensor ga = on_gpu(a), gb = on_gpu(b);
    // add/sub/mul/scale: one correctly rounded operation per element.
    EXPECT_TRUE(near("add" + sh, ops::add(ga, gb), ops::add(a, b), kEltRtol, 0));
    EXPECT_TRUE(near("sub" + sh, ops::sub(ga, gb), ops::sub(a, b), kEltRtol, 0));
    EXPECT_TRUE(near("mul" + sh, ops::mul(ga, gb), ops::mul(a, b), kEltRtol, 0));
    EXPECT_TRUE(
        near("scale(-1.75)" + sh, ops::scale(ga, -1.75f), ops::scale(a, -1.75f), kEltRtol, 0));

    // add_out / sub_out into a fresh output and aliasing a or b.
    Tensor out = Tensor::empty(s), gout = Tensor::empty(s, DType::f32, gpu());
    ops::add_out(a, b, out);
    ops::add_out(ga, gb, gout);
    EXPECT_TRUE(near("add_out" + sh, gout, out, kEltRtol, 0));
    ops::sub_out(a, b, out);
    ops::sub_out(ga, gb, gout);
    EXPECT_TRUE(near("sub_out" + sh, gout, out, kEltRtol, 0));
    Tensor a2 = a.clone(), ga2 = on_gpu(a);
    ops::sub_out(a2, b, a2);
    ops::sub_out(ga2, gb, ga2);
    EXPECT_TRUE(near("sub_out with out aliasing a" + sh, ga2, a2, kEltRtol, 0));
    Tensor b2 = b.clone(), gb2 = on_gpu(b);
    ops::add_out(a, b2, b2);
    ops::add_out(ga, gb2, gb2);
    EXPECT_TRUE(near("add_out with out aliasing b" + sh, gb2, b2, kEltRtol, 0));

    // In place: scale_, axpby_ (beta == 1 and general), add_ (axpby_ with 1, 1).
    Tensor y = b.clone(), gy = on_gpu(b);
    ops::scale_(y, 0.3f);
    ops::scale_(gy, 0.3f);
    EXPECT_TRUE(near("scale_(0.3)" + sh, gy, y, kEltRtol, 0));
    // axpby_: alpha*x + beta*y may be contracted into an FMA on either side: atol 1e-6 covers
    // half an ulp of |alpha*x| <= ~10.
    ops::axpby_(-0.7f, a, 1.f, y);
    ops::axpby_(-0.7f, ga, 1.f, gy);
    EXPECT_TRUE(near("axpby_(alpha -0.7, beta 1)" + sh, gy, y, kEltRtol, 1e-6));
    ops::axpby_(1.25f, a, -0.5f, y);
    ops::axpby_(1.25f, ga, -0.5f, gy);
    EXPECT_TRUE(near("axpby_(alpha 1.25, beta -0.5)" + sh, gy, y, kEltRtol, 1e-6));
    ops::axpby_(2.f, a, 0.f, y);
    ops::axpby_(2.f, ga, 0.f, gy);
    EXPECT_TRUE(near("axpby_(alpha 2, beta 0)" + sh, gy, y, kEltRtol, 1e-6));
    ops::add_(y, b);
    ops::add_(gy, gb);
    EXPECT_TRUE(near("add_" + sh, gy, y, kEltRtol, 1e-6));

    Tensor gf = Tensor::empty(s, DType::f32, gpu());
    ops::fill_(gf, -2.625f);
    EXPECT_TRUE(same_f("fill_(-2.625)" + sh, gf, Tensor::full(s, -2.625)));
    ops::fill_(gf, 0.f);
    EXPECT_TRUE(same_f("fill_(0)" + sh, gf, Tensor::zeros(s)));
  }
}

TEST(CudaOps, Activations) {
  ADA_REQUIRE_GPU();
  for (const Shape& s : elementwise_shapes()) {
    SCOPED_TRACE("shape " + shape_str(s));
    const std::string sh = cat(" ", shape_str(s));
    const Tensor x = rand_cpu(s, 21, 3.f), dy = rand_cpu(s, 22);
    const Tensor gx = on_gpu(x), gdy = on_gpu(dy);
    const Tensor r = ops::relu(x);
    EXPECT_TRUE(same_f("relu" + sh, ops::relu(gx), r));
    EXPECT_TRUE(same_f("relu_backward" + sh, ops::relu_backward(gdy, on_gpu(r)),
                       ops::relu_backward(dy, r)));
    EXPECT_TRUE(same_f("add_relu" + sh, ops::add_relu(gx, gdy), ops::add_relu(x, dy)));
    // gelu = x/2 * (1 + erf(x/sqrt 2)): for x << 0 the bracket cancels, so an ulp of erf (~1e-7)
    // is multiplied by |x|/2 <= ~3 where the result is not exactly 0: atol 2e-6.
    EXPECT_TRUE(near("gelu" + sh, ops::gelu(gx), ops::gelu(x), kEltRtol, 2e-6));
    // gelu' = cdf + x*pdf crosses 0 near x = -0.75 (cancellation), scaled by |dy| <= ~5.
    EXPECT_TRUE(near("gelu_backward" + sh, ops::gelu_backward(gdy, gx), ops::gelu_backward(dy, x),
                     kEltRtol, 2e-6));
    const Tensor t = ops::tanh(x);
    EXPECT_TRUE(near("tanh" + sh, ops::tanh(gx), t, kEltRtol, 1e-7));
    // 1 - y*y cancels for |y| -> 1; FMA or not changes it by an ulp of 1, times |dy|.
    EXPECT_TRUE(near("tanh_backward" + sh, ops::tanh_backward(gdy, on_gpu(t)),
                     ops::tanh_backward(dy, t), kEltRtol, 1e-6));
  }
}

TEST(CudaOps, BiasBroadcastsAndGradients) {
  ADA_REQUIRE_GPU();
  // add_bias / bias_grad: bias over the last dim.
  for (const Shape& s : std::vector<Shape>{
           {5, 7}, {2, 3, 33}, {1000, 1}, {7}, {0, 7}, {4, 0}, {65537, 3}, {3, 1000}}) {
    SCOPED_TRACE("x " + shape_str(s));
    const int64_t n = s.back(), rows = n ? shape_numel(s) / n : 0;
    const Tensor x = rand_cpu(s, 31), b = rand_cpu({n}, 32);
    EXPECT_TRUE(near("add_bias " + shape_str(s), ops::add_bias(on_gpu(x), on_gpu(b)),
                     ops::add_bias(x, b), kEltRtol, 0));
    EXPECT_TRUE(near("bias_grad " + shape_str(s), ops::bias_grad(on_gpu(x)), ops::bias_grad(x),
                     kRedRtol, 1e-6 * sqrt_count(rows)));
  }
  // add_channel_bias / channel_bias_grad: bias over dim 1 of [N, C, ...], rank 2, 3, 4.
  for (const Shape& s : std::vector<Shape>{{4, 7},
                                           {2, 5, 33},
                                           {2, 3, 4, 5},
                                           {0, 3, 4, 4},
                                           {3, 1, 1, 1},
                                           {8, 64, 14, 14},
                                           {2, 3, 0, 5},
                                           {1, 16, 1000}}) {
    SCOPED_TRACE("x " + shape_str(s));
    const int64_t c = s[1], count = c ? shape_numel(s) / c : 0;
    const Tensor x = rand_cpu(s, 33), b = rand_cpu({c}, 34);
    EXPECT_TRUE(near("add_channel_bias " + shape_str(s),
                     ops::add_channel_bias(on_gpu(x), on_gpu(b)), ops::add_channel_bias(x, b),
                     kEltRtol, 0));
    EXPECT_TRUE(near("channel_bias_grad " + shape_str(s), ops::channel_bias_grad(on_gpu(x)),
                     ops::channel_bias_grad(x), kRedRtol, 1e-6 * sqrt_count(count)));
  }
}

TEST(CudaOps, Permute) {
  ADA_REQUIRE_GPU();
  struct Case {
    Shape s;
    std::vector<int> perm;
  };
  std::vector<Case> cases = {
      {{33, 65}, {1, 0}},
      {{7}, {0}},
      {{}, {}},
      {{2, 0, 3}, {2, 0, 1}},
      {{2, 3, 5, 7}, {0, 2, 3, 1}},
      {{2, 3, 5, 7}, {0, 3, 1, 2}},
      {{2, 3, 5, 7}, {3, 2, 1, 0}},
      {{2, 3, 5, 7}, {1, 0, 3, 2}},
      {{2, 3, 5, 7}, {0, 1, 2, 3}},
      {{2, 3, 5, 7}, {2, 0, 3, 1}},
      {{4, 12, 33, 64}, {0, 2, 1, 3}},  // attention heads [B, T, H, Dh] -> [B, H, T, Dh]
      {{33, 1, 17}, {2, 1, 0}},
      {{2, 3, 1, 4, 5}, {4, 0, 3, 2, 1}}};
  const std::vector<std::vector<int>> perms3 = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                                {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (const auto& p : perms3) cases.push_back({{2, 3, 4}, p});
  for (const auto& p : perms3) cases.push_back({{17, 9, 65}, p});
  for (const Case& c : cases) {
    const std::string what = "permute " + shape_str(c.s) + " by " + ints_str(c.perm);
    const Tensor x = rand_cpu(c.s, 41);
    EXPECT_TRUE(same_f(what, ops::permute(on_gpu(x), c.perm), ops::permute(x, c.perm)));
  }
}

// ---- reductions ---------------------------------------------------------------------------

TEST(CudaOps, SumMeanAndSumBackward) {
  ADA_REQUIRE_GPU();
  struct Case {
    Shape s;
    std::vector<int> axes;
  };
  const std::vector<Case> cases = {{{2, 3, 4, 5}, {}},
                                   {{2, 3, 4, 5}, {0}},
                                   {{2, 3, 4, 5}, {1}},
                                   {{2, 3, 4, 5}, {-1}},
                                   {{2, 3, 4, 5}, {0, 2}},
                                   {{2, 3, 4, 5}, {-3, -1}},
                                   {{2, 3, 4, 5}, {3, 0}},
                                   {{2, 3, 4, 5}, {0, 1, 2, 3}},
                                   {{2, 3, 4, 5}, {1, 2, 3}},
                                   {{2, 3, 4, 5}, {-4, 2}},
                                   {{1000, 33}, {0}},
                                   {{1000, 33}, {1}},
                                   {{1000, 33}, {-2, -1}},
                                   {{65537}, {0}},
                                   {{65537}, {-1}},
                                   {{7, 1, 5}, {1}},
                                   {{7, 1, 5}, {0, 2}},
                                   {{3, 1000, 7}, {1}},
                                   {{3, 1000, 7}, {0, 2}},
                                   {{33}, {0}},
                                   {{1}, {0}},
                                   {{8, 64, 14, 14}, {0, 2, 3}},  // batch-norm-like statistics
                                   {{0, 4}, {0}},
                                   {{0, 4}, {1}},
                                   {{3, 0, 5}, {0, 2}},
                                   {{3, 0, 5}, {1}}};
  for (const Case& c : cases)
    for (bool keepdim : {false, true}) {
      const std::string what =
          cat(shape_str(c.s), " over axes ", ints_str(c.axes), keepdim ? " keepdim" : "");
      SCOPED_TRACE(what);
      const Tensor x = rand_cpu(c.s, 51), gx = on_gpu(x);
      const Tensor s = ops::sum(x, c.axes, keepdim);
      const int64_t count = s.numel() ? x.numel() / s.numel() : 0;
      EXPECT_TRUE(near("sum " + what, ops::sum(gx, c.axes, keepdim), s, kRedRtol,
                       1e-6 * sqrt_count(count)));
      const Tensor m = ops::mean(x, c.axes, keepdim);
      if (count == 0)  // mean over an empty axis: NaN, as PyTorch
        EXPECT_TRUE(
            same_f("mean (NaN over an empty axis) " + what, ops::mean(gx, c.axes, keepdim), m));
      else
        EXPECT_TRUE(near("mean " + what, ops::mean(gx, c.axes, keepdim), m, kRedRtol,
                         1e-6 / sqrt_count(count)));
      // sum_backward broadcasts dy (shape of the reduction, with or without keepdim) back: exact.
      const Tensor dy = rand_cpu(s.shape(), 52);
      EXPECT_TRUE(same_f("sum_backward " + what, ops::sum_backward(on_gpu(dy), c.s, c.axes),
                         ops::sum_backward(dy, c.s, c.axes)));
    }
}

// Sum of |terms| in double: the scale against which double accumulation in another order errs.
double l1_of(const std::vector<float>& a, const std::vector<float>* b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += std::fabs(static_cast<double>(a[i]) * (b ? (*b)[i] : a[i]));
  return s;
}

// Adasum's segment ops: the triples as on the CPU up to summation order, the same bits on a
// second call; the combine within one f32 rounding (the GPU may fuse ca*a + cb*b); segments
// longer than one block's chunk, empty ones, shared slots.
// cast_out on the device gives the CPU's bits both ways (random values, the ranges' edges, ties,
// NaN/Inf, odd and empty sizes).
TEST(CudaOps, CastMatchesTheCpuBitForBit) {
  ADA_REQUIRE_GPU();
  std::vector<float> v = rand_cpu({4099}, 97, 3.f).to_vector<float>();
  for (float x : {65504.f, 65520.f, 1e30f, std::ldexp(1.f, -24), std::ldexp(1.f, -26),
                  1.f + std::ldexp(1.f, -8), INFINITY, -INFINITY, NAN})
    v.push_back(x);
  for (int64_t n : {int64_t{0}, int64_t{1}, static_cast<int64_t>(v.size())}) {
    const Tensor src =
        Tensor::from_vector<float>(std::vector<float>(v.begin(), v.begin() + n), {n});
    for (DType t : {DType::f16, DType::bf16}) {
      Tensor cpu = Tensor::empty({n}, t), dev = Tensor::empty({n}, t, gpu());
      ops::cast_out(src, cpu);
      ops::cast_out(on_gpu(src), dev);
      const Tensor back = dev.to(Device::cpu());
      ASSERT_EQ(0, std::memcmp(cpu.raw_data(), back.raw_data(), cpu.nbytes()))
          << dtype_name(t) << " n " << n;
      Tensor wide_cpu = Tensor::empty({n}), wide_gpu = Tensor::empty({n}, DType::f32, gpu());
      ops::cast_out(cpu, wide_cpu);
      ops::cast_out(dev, wide_gpu);
      const Tensor wide_back = wide_gpu.to(Device::cpu());
      EXPECT_EQ(0, std::memcmp(wide_cpu.raw_data(), wide_back.raw_data(), wide_cpu.nbytes()))
          << "cast back from " << dtype_name(t) << " n " << n;
    }
  }
}

TEST(CudaOps, SegmentOpsMatchTheCpuAndAreDeterministic) {
  ADA_REQUIRE_GPU();
  const int64_t n = 200000;
  const Tensor a = rand_cpu({n}, 81), b = rand_cpu({n}, 82, 0.5f);
  const Tensor ga = on_gpu(a), gb = on_gpu(b);
  const std::vector<ops::Segment> segs = {
      {0, 70001, 1}, {70001, 0, 2}, {70001, 3, 0}, {70004, 100000, 3}, {170004, 29996, 1}};
  std::vector<double> cpu(12, 0.0), g1(12, 0.0), g2(12, 0.0);
  ops::segment_partial_sums(a, b, segs, cpu.data());
  ops::segment_partial_sums(ga, gb, segs, g1.data());
  ops::segment_partial_sums(ga, gb, segs, g2.data());
  for (int k = 0; k < 12; ++k) {
    EXPECT_TRUE(near_scalar(cat("triple ", k), g1[k], cpu[k], 1e-9 * (1 + std::fabs(cpu[k]) + n)));
    EXPECT_EQ(std::memcmp(&g1[k], &g2[k], sizeof(double)), 0)
        << "triple " << k << " not deterministic";
  }
  EXPECT_EQ(g1[6], 0.0) << "slot 2 has only an empty segment";
  const std::vector<double> coef = {0.5, 0.5, 1.25, -0.75, 7.0, 7.0, 2.0, 0.0};
  Tensor out = Tensor::full({n}, 3.0), gout = on_gpu(out);
  ops::segment_combine(a, b, out, segs, coef.data());
  ops::segment_combine(ga, gb, gout, segs, coef.data());
  EXPECT_TRUE(close_to_cpu(gout, out, 2.4e-7, 0.0));
  Tensor gx = on_gpu(a);  // in place, as the reducer combines into its own half
  ops::segment_combine(gx, gb, gx, segs, coef.data());
  Tensor x = a.clone();
  ops::segment_combine(x, b, x, segs, coef.data());
  EXPECT_TRUE(close_to_cpu(gx, x, 2.4e-7, 0.0));
  EXPECT_THROW(ops::segment_combine(ga, b, gout, segs, coef.data()), DeviceError);
}

TEST(CudaOps, DoubleReductionsMatchAndAreDeterministic) {
  ADA_REQUIRE_GPU();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{33}, int64_t{1001}, int64_t{65537},
                    int64_t{(1 << 20) + 7}}) {
    SCOPED_TRACE(cat("numel ", n));
    const Tensor a = rand_cpu({n}, 61, 2.f), b = rand_cpu({n}, 62);
    const Tensor ga = on_gpu(a), gb = on_gpu(b);
    const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
    std::vector<float> ones(av.size(), 1.f);
    // Both devices accumulate in double: they may differ only by double rounding in another
    // order, 1e-9 of sum(|terms|) (that is also 1e-9 relative when nothing cancels).
    const double s_tol = 1e-9 * l1_of(av, &ones), d_tol = 1e-9 * l1_of(av, &bv),
                 n_tol = 1e-9 * l1_of(av, nullptr);
    const double s1 = ops::sum_all(ga), d1 = ops::dot(ga, gb), q1 = ops::norm2_sq(ga);
    EXPECT_TRUE(near_scalar(cat("sum_all [", n, "]"), s1, ops::sum_all(a), s_tol));
    EXPECT_TRUE(near_scalar(cat("dot [", n, "]"), d1, ops::dot(a, b), d_tol));
    EXPECT_TRUE(near_scalar(cat("norm2_sq [", n, "]"), q1, ops::norm2_sq(a), n_tol));
    // Determinism: the same bits on a second call.
    const double s2 = ops::sum_all(ga), d2 = ops::dot(ga, gb), q2 = ops::norm2_sq(ga);
    EXPECT_EQ(std::memcmp(&s1, &s2, sizeof s1), 0)
        << "sum_all [" << n << "] not deterministic: " << s1 << " vs " << s2;
    EXPECT_EQ(std::memcmp(&d1, &d2, sizeof d1), 0)
        << "dot [" << n << "] not deterministic: " << d1 << " vs " << d2;
    EXPECT_EQ(std::memcmp(&q1, &q2, sizeof q1), 0)
        << "norm2_sq [" << n << "] not deterministic: " << q1 << " vs " << q2;
  }
  // Double, not float, accumulation: 1e8 + 100000 ones is exact in double, lost in float.
  std::vector<float> v(100001, 1.f);
  v[0] = 1e8f;
  const Tensor big = on_gpu(Tensor::from_vector<float>(v, {100001}));
  const Tensor ones = Tensor::ones({100001}, DType::f32, gpu());
  EXPECT_EQ(ops::dot(big, ones), 1e8 + 100000.0) << "dot must accumulate in double";
  EXPECT_EQ(ops::sum_all(big), 1e8 + 100000.0) << "sum_all must accumulate in double";
  v[0] = 1e6f;  // 1e12 + 100000: exact in double, lost in float
  EXPECT_EQ(ops::norm2_sq(on_gpu(Tensor::from_vector<float>(v, {100001}))), 1e12 + 100000.0)
      << "norm2_sq must accumulate in double";
}

TEST(CudaOps, AllFinite) {
  ADA_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(ops::all_finite(Tensor::zeros({0}, DType::f32, gpu())))
      << "all_finite of an empty tensor";
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{1001}, int64_t{65537},
                    int64_t{(1 << 20) + 3}}) {
    const Tensor x = rand_cpu({n}, 71);
    EXPECT_TRUE(ops::all_finite(on_gpu(x))) << "all_finite [" << n << "] of finite values";
    const float fmax = std::numeric_limits<float>::max();
    EXPECT_TRUE(ops::all_finite(on_gpu(with_value_at(x, n - 1, fmax))))
        << "all_finite [" << n << "] with FLT_MAX last (must not overflow)";
    EXPECT_TRUE(ops::all_finite(on_gpu(with_value_at(x, n - 1, -fmax))))
        << "all_finite [" << n << "] with -FLT_MAX last";
    const struct {
      const char* name;
      float v;
      int64_t at;
    } bad[] = {{"+inf last", inf, n - 1},
               {"-inf last", -inf, n - 1},
               {"nan last", nan, n - 1},
               {"nan first", nan, 0},
               {"inf middle", inf, n / 2}};
    for (const auto& b : bad) {
      const Tensor y = with_value_at(x, b.at, b.v);
      ASSERT_FALSE(ops::all_finite(y)) << "CPU reference, [" << n << "] " << b.name;
      EXPECT_FALSE(ops::all_finite(on_gpu(y))) << "all_finite [" << n << "] with " << b.name;
    }
  }
}

// ---- BLAS -----------------------------------------------------------------------------------

struct MKN {
  int64_t m, k, n;
};

TEST(CudaOps, GemmAndMatmulAllTransposes) {
  ADA_REQUIRE_GPU();
  const std::vector<MKN> dims = {{17, 33, 5},  {1, 1, 1},      {1, 1000, 1}, {5, 1, 7},
                                 {64, 64, 64}, {129, 257, 65}, {3, 1000, 2}, {200, 1024, 96},
                                 {0, 5, 3},    {3, 5, 0},      {4, 0, 6},    {0, 0, 0}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const MKN& d : dims)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const std::string what =
            cat("M=", d.m, " K=", d.k, " N=", d.n, ta ? " a^T" : " a", tb ? " b^T" : " b");
        SCOPED_TRACE(what);
        const Tensor a = rand_cpu(ta ? Shape{d.k, d.m} : Shape{d.m, d.k}, 81);
        const Tensor b = rand_cpu(tb ? Shape{d.n, d.k} : Shape{d.k, d.n}, 82);
        const Tensor ga = on_gpu(a), gb = on_gpu(b);
        EXPECT_TRUE(near("matmul " + what, ops::matmul(ga, gb, ta, tb), ops::matmul(a, b, ta, tb),
                         kMmRtol, mm_atol(d.k)));
        // alpha/beta != defaults: c = 1.5 op(a) op(b) - 0.75 c (with K = 0: c = -0.75 c).
        const Tensor c0 = rand_cpu({d.m, d.n}, 83);
        Tensor c = c0.clone(), gc = on_gpu(c0);
        ops::gemm(a, b, c, ta, tb, 1.5f, -0.75f);
        ops::gemm(ga, gb, gc, ta, tb, 1.5f, -0.75f);
        EXPECT_TRUE(
            near("gemm alpha 1.5 beta -0.75 " + what, gc, c, kMmRtol, mm_atol(d.k, 1.5) + 1e-6));
        // beta = 1 accumulates (the backward passes' pattern).
        c = c0.clone();
        gc = on_gpu(c0);
        ops::gemm(a, b, c, ta, tb, -0.5f, 1.f);
        ops::gemm(ga, gb, gc, ta, tb, -0.5f, 1.f);
        EXPECT_TRUE(
            near("gemm alpha -0.5 beta 1 " + what, gc, c, kMmRtol, mm_atol(d.k, 0.5) + 1e-6));
        // beta = 0 never reads c: NaN in c must not reach the result.
        c = Tensor::full({d.m, d.n}, nan);
        gc = on_gpu(c);
        ops::gemm(a, b, c, ta, tb, 2.f, 0.f);
        ops::gemm(ga, gb, gc, ta, tb, 2.f, 0.f);
        EXPECT_TRUE(near("gemm alpha 2 beta 0 over a NaN-filled c " + what, gc, c, kMmRtol,
                         mm_atol(d.k, 2.0)));
      }
}

// train.precision: bf16 on a GPU (core/precision.h): cuBLAS rounds both operands to bf16 and
// sums in fp32, so the product matches a double reference over bf16-rounded operands within
// fp32 accumulation error, and differs from the fp32 product by the operands' rounding (checked,
// so that the switch is seen to act). Restored to fp32 at the end.
// Rounds a float to `mantissa` explicit mantissa bits, nearest even (bf16: 7, fp16: 10; fp16's
// subnormals are not modelled: their products are far below the tolerance).
double round_mantissa(float x, int mantissa) {
  const uint32_t drop = 23u - static_cast<uint32_t>(mantissa), half = (1u << (drop - 1)) - 1u;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + half + ((u >> drop) & 1u)) & ~((1u << drop) - 1u);
  float r;
  std::memcpy(&r, &u, 4);
  return static_cast<double>(r);
}

// train.precision bf16 / fp16 on CUDA: matmul equals the product of the operands rounded to
// the narrow type, summed in fp32 — and differs from the fp32 product (the switch acts).
void expect_products_round_operands(Precision precision, int mantissa) {
  const char* name = precision_name(precision);
  const int64_t m = 67, k = 300, n = 129;
  const Tensor a = rand_cpu({m, k}, 91), b = rand_cpu({k, n}, 92);
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  std::vector<float> want(m * n), exact_f(m * n);
  double worst_rounding = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, exact = 0;
      for (int64_t p = 0; p < k; ++p) {
        s += round_mantissa(av[i * k + p], mantissa) * round_mantissa(bv[p * n + j], mantissa);
        exact += static_cast<double>(av[i * k + p]) * bv[p * n + j];
      }
      want[i * n + j] = static_cast<float>(s);
      exact_f[i * n + j] = static_cast<float>(exact);
      worst_rounding = std::max(worst_rounding, std::fabs(s - exact));
    }
  set_cuda_matmul_precision(precision);
  const Tensor got = ops::matmul(on_gpu(a), on_gpu(b));
  set_cuda_matmul_precision(Precision::fp32);
  EXPECT_TRUE(near(std::string(name) + " matmul", got, Tensor::from_vector<float>(want, {m, n}),
                   kMmRtol, mm_atol(k)));
  const Tensor fp32 = ops::matmul(on_gpu(a), on_gpu(b));
  EXPECT_TRUE(near("fp32 matmul after the switch", fp32,
                   Tensor::from_vector<float>(exact_f, {m, n}), kMmRtol, mm_atol(k)));
  const std::vector<float> g = got.to_vector<float>(), f = fp32.to_vector<float>();
  double diff = 0;
  for (size_t i = 0; i < g.size(); ++i)
    diff = std::max(diff, std::fabs(static_cast<double>(g[i]) - f[i]));
  EXPECT_GT(diff, 0.25 * worst_rounding)
      << "the " << name << " product equals the fp32 one: the switch did not act";
  EXPECT_EQ(cuda_matmul_precision(), Precision::fp32);
}

TEST(CudaOps, Bf16MatrixProductsRoundTheOperands) {
  ADA_REQUIRE_GPU();
  expect_products_round_operands(Precision::bf16, 7);
}

TEST(CudaOps, Fp16MatrixProductsRoundTheOperands) {
  ADA_REQUIRE_GPU();
  expect_products_round_operands(Precision::fp16, 10);
}

// ops::linear and ops::linear_weight_grad (the bias in cuBLASLt's GEMM epilogues, blas_lt.cc)
// against double references of the values the GEMM multiplies (operands rounded to the 16-bit
// type under bf16/fp16; the bias gradient sums dy as given, in the output's type). Bounds from the
// computation: any order of summing k terms in fp32 is within (k + 2) u32 of the sum of their
// absolute values (u32 = 2^-24), plus, for a 16-bit result, its one rounding (u16 of |y|: 2^-8
// bf16, 2^-11 fp16). Each case says whether cuBLASLt ran it fused; the f32 forward must be (the
// most basic epilogue there is), the others may fall back to the unfused kernels, which must meet
// the same bounds.
struct LinearCase {
  int64_t m, k, n;
};

// |got - want| <= bound elementwise, got on the GPU (any float dtype).
::testing::AssertionResult within(const std::string& what, const Tensor& got,
                                  const std::vector<double>& want,
                                  const std::vector<double>& bound) {
  if (!got.defined()) return ::testing::AssertionFailure() << what << ": undefined";
  const std::vector<float> g = ops::to_dtype(got, DType::f32).to(Device::cpu()).to_vector<float>();
  if (g.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.str() << ", want " << want.size();
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - want[i]) <= bound[i]))
      return ::testing::AssertionFailure() << what << ": element " << i << " is " << g[i]
                                           << ", want " << want[i] << " +- " << bound[i];
  return ::testing::AssertionSuccess();
}
// The same against a CPU tensor's values.
::testing::AssertionResult within(const std::string& what, const Tensor& got, const Tensor& want,
                                  const std::vector<double>& bound) {
  const std::vector<float> w = want.to_vector<float>();
  return within(what, got, std::vector<double>(w.begin(), w.end()), bound);
}

void expect_linear_epilogues(Precision precision, DType out, int mantissa) {
  const double u32 = std::ldexp(1.0, -24);
  const double u_out = out == DType::f32 ? u32 : std::ldexp(1.0, -(mantissa + 1));
  const std::vector<LinearCase> cases = {{17, 33, 5},    {1, 1, 1},    {128, 128, 512},
                                         {1000, 96, 30}, {3, 1, 1000}, {256, 384, 200}};
  for (const LinearCase& c : cases) {
    const std::string what =
        cat(precision_name(precision), " ", dtype_name(out), " M=", c.m, " K=", c.k, " N=", c.n);
    SCOPED_TRACE(what);
    // dy comes in the output's type, as backward hands it over.
    const Tensor x = rand_cpu({c.m, c.k}, 301), w = rand_cpu({c.n, c.k}, 302),
                 b = rand_cpu({c.n}, 303), dy = ops::to_dtype(rand_cpu({c.m, c.n}, 304), out);
    auto r = [&](float v) {
      return precision == Precision::fp32 ? static_cast<double>(v) : round_mantissa(v, mantissa);
    };
    const std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>(),
                             bv = b.to_vector<float>(),
                             gv = ops::to_dtype(dy, DType::f32).to_vector<float>();
    std::vector<double> y(c.m * c.n), y_bound(c.m * c.n), dw(c.n * c.k), dw_bound(c.n * c.k),
        db(c.n), db_bound(c.n);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double s = bv[j], a = std::fabs(bv[j]);
        for (int64_t p = 0; p < c.k; ++p) {
          const double t = r(xv[i * c.k + p]) * r(wv[j * c.k + p]);
          s += t;
          a += std::fabs(t);
        }
        y[i * c.n + j] = s;
        // (the unfused path rounds a 16-bit result twice: the product, then with the bias; the
        // fused one may add the bias rounded to the result's type, one rounding of |b| more)
        y_bound[i * c.n + j] =
            (c.k + 2) * u32 * a + u_out * (2 * std::fabs(s) + 2 * std::fabs(bv[j]));
      }
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0, a = 0;
      for (int64_t i = 0; i < c.m; ++i) {
        s += gv[i * c.n + j];
        a += std::fabs(gv[i * c.n + j]);
      }
      db[j] = s;
      db_bound[j] = (c.m + 2) * u32 * a;
      for (int64_t p = 0; p < c.k; ++p) {
        double s2 = 0, a2 = 0;
        for (int64_t i = 0; i < c.m; ++i) {
          const double t = r(gv[i * c.n + j]) * r(xv[i * c.k + p]);
          s2 += t;
          a2 += std::fabs(t);
        }
        dw[j * c.k + p] = s2;
        dw_bound[j * c.k + p] = (c.m + 2) * u32 * a2;
      }
    }
    struct Restore {
      ~Restore() { set_cuda_matmul_precision(Precision::fp32); }
    } restore;
    set_cuda_matmul_precision(precision);
    const cuda::LtEpilogueCounts before = cuda::lt_epilogue_counts();
    const Tensor gy = ops::linear(on_gpu(x), on_gpu(w), on_gpu(b), out);
    const cuda::LtEpilogueCounts mid = cuda::lt_epilogue_counts();
    Tensor gdw, gdb;
    ops::linear_weight_grad(on_gpu(dy), on_gpu(x), DType::f32, gdw, gdb);
    const cuda::LtEpilogueCounts after = cuda::lt_epilogue_counts();
    set_cuda_matmul_precision(Precision::fp32);
    const bool fwd_fused = mid.fused > before.fused, bwd_fused = after.fused > mid.fused;
    std::printf("[ linear   ] %s: forward %s, weight gradient %s\n", what.c_str(),
                fwd_fused ? "fused (bias epilogue)" : "unfused (fallback)",
                bwd_fused ? "fused (bgradb epilogue)" : "unfused (fallback)");
    if (precision == Precision::fp32) {
      EXPECT_TRUE(fwd_fused) << "cuBLASLt offered no bias epilogue for an f32 linear layer";
    }
    EXPECT_EQ(gy.dtype(), out);
    EXPECT_TRUE(within("linear y", gy, y, y_bound));
    EXPECT_TRUE(within("linear_weight_grad dw", gdw, dw, dw_bound));
    EXPECT_TRUE(within("linear_weight_grad db", gdb, db, db_bound));
    EXPECT_EQ(gdw.dtype(), DType::f32);
    EXPECT_EQ(gdb.dtype(), DType::f32);
  }
}

TEST(CudaOps, LinearBiasInTheGemmEpilogue) {
  ADA_REQUIRE_GPU();
  expect_linear_epilogues(Precision::fp32, DType::f32, 23);
  expect_linear_epilogues(Precision::bf16, DType::f32, 7);
  expect_linear_epilogues(Precision::bf16, DType::bf16, 7);
  expect_linear_epilogues(Precision::fp16, DType::f16, 10);
}

// fp16 convolutions (cuDNN with fp32 -> fp16 conversion allowed) stay within fp16 rounding of
// the fp32 CPU reference, forward and both backwards.
TEST(CudaOps, Fp16ConvolutionsStayWithinFp16Rounding) {
  ADA_REQUIRE_GPU();
  const Tensor x = rand_cpu({4, 8, 13, 13}, 93), w = rand_cpu({16, 8, 3, 3}, 94);
  ops::Conv2dParams prm;
  prm.pad_h = prm.pad_w = 1;
  const Tensor y = ops::conv2d_forward(x, w, prm);
  const Tensor dy = rand_cpu(y.shape(), 95);
  const Tensor dx = ops::conv2d_backward_data(dy, w, x.shape(), prm);
  const Tensor dw = ops::conv2d_backward_filter(dy, x, w.shape(), prm);
  set_cuda_matmul_precision(Precision::fp16);
  const Tensor gy = ops::conv2d_forward(on_gpu(x), on_gpu(w), prm);
  const Tensor gdx = ops::conv2d_backward_data(on_gpu(dy), on_gpu(w), x.shape(), prm);
  const Tensor gdw = ops::conv2d_backward_filter(on_gpu(dy), on_gpu(x), w.shape(), prm);
  set_cuda_matmul_precision(Precision::fp32);
  // fp16 operands: relative rounding 2^-11 each; sums of 72 (forward), 144 (backward data) or
  // 676 (backward filter) products of Normal(0, 1) values, errors of random sign.
  EXPECT_TRUE(near("fp16 conv forward", gy, y, 1e-2, 0.05));
  EXPECT_TRUE(near("fp16 conv backward data", gdx, dx, 1e-2, 0.05));
  EXPECT_TRUE(near("fp16 conv backward filter", gdw, dw, 1e-2, 0.15));
}

// 16-bit activations: the forward and backward-data convolutions take bf16 / fp16 tensors of the
// matching train.precision as they are (no f32 copies) and give that type, cuDNN multiplying
// them with the weights rounded to it. Against the CPU's fp32 convolution of the same operands
// (the 16-bit values widened, the weights rounded the same way): one rounding of the 16-bit type
// (its ulp relative to the value) plus the fp32 tolerances of sums of 72, 144 or 676 products of
// N(0,1) values (mm_atol). The filter gradient is formed from the 16-bit tensors too, in their
// type, and given as f32 (as autocast's). NCHW and channels-last.
TEST(CudaOps, SixteenBitConvolutionsRunInTheirOwnType) {
  ADA_REQUIRE_GPU();
  struct Restore {
    ~Restore() { set_cuda_matmul_precision(Precision::fp32); }
  } restore;
  const Tensor x = rand_cpu({4, 8, 13, 13}, 193), w = rand_cpu({16, 8, 3, 3}, 194);
  ops::Conv2dParams prm;
  prm.pad_h = prm.pad_w = 1;
  const Tensor dy = rand_cpu({4, 16, 13, 13}, 195);
  for (Precision p : {Precision::bf16, Precision::fp16})
    for (bool channels_last : {false, true}) {
      SCOPED_TRACE(cat(precision_name(p), channels_last ? " channels-last" : " NCHW"));
      const DType act = precision_dtype(p);
      const double ulp = p == Precision::bf16 ? 0x1p-7 : 0x1p-10;
      auto round = [&](const Tensor& t) {
        return ops::to_dtype(ops::to_dtype(t, act), DType::f32);
      };
      // The GPU's layout: NCHW, or NHWC (cuDNN's channels-last convolutions).
      auto lay = [&](const Tensor& t) { return channels_last ? nhwc(t) : t; };
      ops::Conv2dParams gp = prm;
      gp.channels_last = channels_last;
      const Shape x_shape = lay(x).shape();
      const Tensor want_y = lay(ops::conv2d_forward(round(x), round(w), prm));
      const Tensor want_dx = lay(ops::conv2d_backward_data(round(dy), round(w), x.shape(), prm));
      const Tensor want_dw = ops::conv2d_backward_filter(round(dy), round(x), w.shape(), prm);
      set_cuda_matmul_precision(p);
      const Tensor gx = on_gpu(ops::to_dtype(lay(x), act)),
                   gdy = on_gpu(ops::to_dtype(lay(dy), act));
      const int64_t copies = ops::sixteen_bit_copies();
      const Tensor y = ops::conv2d_forward(gx, on_gpu(w), gp, act);
      const Tensor dx = ops::conv2d_backward_data(gdy, on_gpu(w), x_shape, gp);
      // fn::conv2d's way: the weights rounded once beforehand (ops::matmul_operand), the same
      // values as rounded inside each call: the forward gives the same bits (cuDNN's forward
      // algorithms are deterministic; its backward-data ones may use atomics, so dx gets the
      // bound).
      const Tensor w16 = ops::matmul_operand(on_gpu(w));
      ASSERT_EQ(w16.dtype(), act);
      const Tensor y_w16 = ops::conv2d_forward(gx, w16, gp, act);
      const Tensor dx_w16 = ops::conv2d_backward_data(gdy, w16, x_shape, gp);
      const Tensor dw = ops::conv2d_backward_filter(gdy, gx, w.shape(), gp);
      EXPECT_EQ(ops::sixteen_bit_copies(), copies) << "an f32 copy of a 16-bit input";
      set_cuda_matmul_precision(Precision::fp32);
      const Tensor y_host = y.to(Device::cpu()), y_w16_host = y_w16.to(Device::cpu());
      EXPECT_EQ(0, std::memcmp(y_host.raw_data(), y_w16_host.raw_data(), y_host.nbytes()))
          << "forward with the weights rounded beforehand";
      EXPECT_TRUE(
          close_to_cpu(ops::to_dtype(dx_w16, DType::f32), want_dx, ulp + kMmRtol, mm_atol(144)));
      ASSERT_EQ(y.dtype(), act);
      ASSERT_EQ(dx.dtype(), act);
      ASSERT_EQ(dw.dtype(), DType::f32);
      EXPECT_TRUE(close_to_cpu(ops::to_dtype(y, DType::f32), want_y, ulp + kMmRtol, mm_atol(72)));
      EXPECT_TRUE(
          close_to_cpu(ops::to_dtype(dx, DType::f32), want_dx, ulp + kMmRtol, mm_atol(144)));
      // The filter gradient: 676 products of the 16-bit values summed in fp32, written in the
      // 16-bit type (one rounding) and widened to f32.
      EXPECT_TRUE(close_to_cpu(dw, want_dw, ulp + kMmRtol, mm_atol(676)));
    }
  // Which algorithms cuDNN's plans use (this process's so far: gpu_test.sh lists them).
  std::printf("%s", cuda::conv_plans_report().c_str());
}

TEST(CudaOps, GemmBatchedAndBmmAllTransposes) {
  ADA_REQUIRE_GPU();
  const std::vector<MKN> dims = {{7, 9, 11},   {17, 33, 5}, {1, 1, 1},
                                 {33, 64, 33}, {4, 0, 3},   {0, 3, 2}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t batch : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{12}})
    for (const MKN& d : dims)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const std::string what = cat("B=", batch, " M=", d.m, " K=", d.k, " N=", d.n,
                                       ta ? " a^T" : " a", tb ? " b^T" : " b");
          SCOPED_TRACE(what);
          const Tensor a = rand_cpu(ta ? Shape{batch, d.k, d.m} : Shape{batch, d.m, d.k}, 91);
          const Tensor b = rand_cpu(tb ? Shape{batch, d.n, d.k} : Shape{batch, d.k, d.n}, 92);
          const Tensor ga = on_gpu(a), gb = on_gpu(b);
          EXPECT_TRUE(near("bmm " + what, ops::bmm(ga, gb, ta, tb), ops::bmm(a, b, ta, tb), kMmRtol,
                           mm_atol(d.k)));
          const Tensor c0 = rand_cpu({batch, d.m, d.n}, 93);
          Tensor c = c0.clone(), gc = on_gpu(c0);
          ops::gemm_batched(a, b, c, ta, tb, 0.5f, 2.f);
          ops::gemm_batched(ga, gb, gc, ta, tb, 0.5f, 2.f);
          EXPECT_TRUE(near("gemm_batched alpha 0.5 beta 2 " + what, gc, c, kMmRtol,
                           mm_atol(d.k, 0.5) + 2e-6));
          c = Tensor::full({batch, d.m, d.n}, nan);
          gc = on_gpu(c);
          ops::gemm_batched(a, b, c, ta, tb, -1.f, 0.f);
          ops::gemm_batched(ga, gb, gc, ta, tb, -1.f, 0.f);
          EXPECT_TRUE(near("gemm_batched alpha -1 beta 0 over a NaN-filled c " + what, gc, c,
                           kMmRtol, mm_atol(d.k)));
        }
}

// ---- convolution ---------------------------------------------------------------------------

TEST(CudaOps, Conv2dForwardAndBackward) {
  ADA_REQUIRE_GPU();
  struct Case {
    const char* name;
    Shape x, w;
    ops::Conv2dParams p;
  };
  const Case cases[] = {
      {"3x3 s1 p1", {2, 3, 9, 8}, {4, 3, 3, 3}, {1, 1, 1, 1, 1, 1}},
      {"3x3 s2 p1", {2, 5, 11, 10}, {6, 5, 3, 3}, {2, 2, 1, 1, 1, 1}},
      {"3x2 s2x1 p1x0 dil 2", {2, 2, 9, 7}, {3, 2, 3, 2}, {2, 1, 1, 0, 2, 2}},
      {"3x3 dil 2 p2", {1, 4, 12, 13}, {5, 4, 3, 3}, {1, 1, 2, 2, 2, 2}},
      {"1x1", {3, 8, 5, 6}, {4, 8, 1, 1}, {}},
      {"1x1 s2", {2, 3, 5, 7}, {2, 3, 1, 1}, {2, 2, 0, 0, 1, 1}},
      {"7x7 s2 p3 stem on 3x224x224", {2, 3, 224, 224}, {16, 3, 7, 7}, {2, 2, 3, 3, 1, 1}},
      {"1x5 p0x2", {2, 4, 10, 12}, {6, 4, 1, 5}, {1, 1, 0, 2, 1, 1}},
      {"5x1 s1x2 p2x0", {2, 4, 10, 12}, {6, 4, 5, 1}, {1, 2, 2, 0, 1, 1}},
      {"3x3 p1 32->64", {4, 32, 14, 14}, {64, 32, 3, 3}, {1, 1, 1, 1, 1, 1}},
      {"3x3 s2 p1 64->128 on 28x28", {2, 64, 28, 28}, {128, 64, 3, 3}, {2, 2, 1, 1, 1, 1}},
      {"kernel as large as the input", {2, 3, 5, 5}, {4, 3, 5, 5}, {}},
      {"1x1 on a 1x1 image", {3, 16, 1, 1}, {8, 16, 1, 1}, {}},
      {"3x5 s2x3 p1x2 dil 1x2, odd everything", {3, 7, 13, 11}, {5, 7, 3, 5}, {2, 3, 1, 2, 1, 2}},
  };
  for (const Case& c : cases) {
    const std::string what =
        cat(c.name, ": x ", shape_str(c.x), " w ", shape_str(c.w), " ", conv_str(c.p));
    SCOPED_TRACE(what);
    const Tensor x = rand_cpu(c.x, 101), w = rand_cpu(c.w, 102);
    const Tensor gx = on_gpu(x), gw = on_gpu(w);
    const Tensor y = ops::conv2d_forward(x, w, c.p);
    const int64_t cin = c.w[1], cout = c.w[0], kk = c.w[2] * c.w[3];
    EXPECT_TRUE(near("conv2d_forward " + what, ops::conv2d_forward(gx, gw, c.p), y, kMmRtol,
                     mm_atol(cin * kk)));
    const Tensor dy = rand_cpu(y.shape(), 103), gdy = on_gpu(dy);
    const Tensor dx = ops::conv2d_backward_data(dy, w, c.x, c.p);
    const Tensor dw = ops::conv2d_backward_filter(dy, x, c.w, c.p);
    // Each dx element sums at most Cout*kh*kw products; each dw element N*P*Q products.
    EXPECT_TRUE(near("conv2d_backward_data " + what, ops::conv2d_backward_data(gdy, gw, c.x, c.p),
                     dx, kMmRtol, mm_atol(cout * kk)));
    const int64_t npq = y.size(0) * y.size(2) * y.size(3);
    EXPECT_TRUE(near("conv2d_backward_filter " + what,
                     ops::conv2d_backward_filter(gdy, gx, c.w, c.p), dw, kMmRtol, mm_atol(npq)));
    // Channels-last (cuDNN's NHWC convolutions) against the same CPU results permuted.
    ops::Conv2dParams cl = c.p;
    cl.channels_last = true;
    const Tensor gx_cl = on_gpu(nhwc(x)), gdy_cl = on_gpu(nhwc(dy));
    EXPECT_TRUE(near("channels-last conv2d_forward " + what, ops::conv2d_forward(gx_cl, gw, cl),
                     nhwc(y), kMmRtol, mm_atol(cin * kk)));
    EXPECT_TRUE(near("channels-last conv2d_backward_data " + what,
                     ops::conv2d_backward_data(gdy_cl, gw, nhwc(x).shape(), cl), nhwc(dx), kMmRtol,
                     mm_atol(cout * kk)));
    EXPECT_TRUE(near("channels-last conv2d_backward_filter " + what,
                     ops::conv2d_backward_filter(gdy_cl, gx_cl, c.w, cl), dw, kMmRtol,
                     mm_atol(npq)));
  }
}

// ---- pooling --------------------------------------------------------------------------------

struct PoolCase {
  Shape x;
  ops::Pool2dParams p;
};
const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> c = {
      {{2, 3, 8, 8}, {2, 2, 2, 2, 0, 0, true}},
      {{2, 3, 9, 7}, {2, 2, 2, 2, 0, 0, true}},  // odd sizes: last row/column dropped
      {{2, 3, 9, 7}, {3, 3, 2, 2, 1, 1, true}},  // padded, overlapping windows
      {{1, 2, 5, 5}, {3, 3, 1, 1, 1, 1, true}},  // heavy overlap
      {{2, 4, 7, 9}, {2, 3, 1, 2, 1, 1, true}},  // non-square kernel and stride
      {{1, 1, 33, 65}, {5, 3, 4, 1, 2, 1, true}},
      {{3, 5, 1, 1}, {1, 1, 1, 1, 0, 0, true}},
      {{1, 2, 6, 7}, {3, 3, 2, 2, 1, 1, true}},     // clipped last windows
      {{2, 64, 56, 56}, {3, 3, 2, 2, 1, 1, true}},  // ResNet stem pool
  };
  return c;
}

TEST(CudaOps, MaxPool) {
  ADA_REQUIRE_GPU();
  for (const PoolCase& c : pool_cases())
    for (bool ties : {false, true}) {
      const std::string what =
          cat("x ", shape_str(c.x), " ", pool_str(c.p), ties ? " (tie-heavy input)" : "");
      SCOPED_TRACE(what);
      Tensor x = rand_cpu(c.x, 111);
      // Integer-valued input: many equal maxima per window; ties go to the first maximum in
      // row-major window order on both devices, so the indices must agree exactly.
      if (ties) x = map_host(x, [](float v) { return std::round(v * 1.5f); });
      Tensor idx, gidx;
      const Tensor y = ops::max_pool2d_forward(x, c.p, idx);
      const Tensor gy = ops::max_pool2d_forward(on_gpu(x), c.p, gidx);
      EXPECT_TRUE(same_f("max_pool2d_forward values " + what, gy, y));
      EXPECT_TRUE(same<int32_t>("max_pool2d_forward indices " + what, gidx, idx));
      // Backward from the CPU's indices (isolates the scatter); overlapping windows add a few
      // values into one input element in another order.
      const Tensor dy = rand_cpu(y.shape(), 112);
      EXPECT_TRUE(near("max_pool2d_backward " + what,
                       ops::max_pool2d_backward(on_gpu(dy), on_gpu(idx), c.x),
                       ops::max_pool2d_backward(dy, idx, c.x), kEltRtol, 1e-6));
      // Channels-last: the GPU's own kernels against the CPU's channels-last op.
      const Tensor x_cl = nhwc(x), dy_cl = nhwc(dy);
      Tensor idx_cl, gidx_cl;
      const Tensor y_cl = ops::max_pool2d_nhwc_forward(x_cl, c.p, idx_cl);
      const Tensor gy_cl = ops::max_pool2d_nhwc_forward(on_gpu(x_cl), c.p, gidx_cl);
      EXPECT_TRUE(same_f("max_pool2d_nhwc_forward values " + what, gy_cl, y_cl));
      EXPECT_TRUE(same<int32_t>("max_pool2d_nhwc_forward indices " + what, gidx_cl, idx_cl));
      EXPECT_TRUE(near("max_pool2d_nhwc_backward " + what,
                       ops::max_pool2d_nhwc_backward(on_gpu(dy_cl), on_gpu(idx_cl), x_cl.shape()),
                       ops::max_pool2d_nhwc_backward(dy_cl, idx_cl, x_cl.shape()), kEltRtol, 1e-6));
      // Deterministic algorithms: one thread a plane adds its outputs in the CPU's order, so
      // overlapping windows give the CPU's bits in both layouts.
      const testing::DeterministicScope deterministic;
      EXPECT_TRUE(same_f("max_pool2d_backward, deterministic " + what,
                         ops::max_pool2d_backward(on_gpu(dy), on_gpu(idx), c.x),
                         ops::max_pool2d_backward(dy, idx, c.x)));
      EXPECT_TRUE(same_f("max_pool2d_nhwc_backward, deterministic " + what,
                         ops::max_pool2d_nhwc_backward(on_gpu(dy_cl), on_gpu(idx_cl), x_cl.shape()),
                         ops::max_pool2d_nhwc_backward(dy_cl, idx_cl, x_cl.shape())));
    }
}

TEST(CudaOps, MaxPoolPropagatesNaNLikeTheCpu) {
  ADA_REQUIRE_GPU();
  // The CPU takes the first NaN of a window as its maximum (value NaN, index of that NaN).
  Tensor x = rand_cpu({1, 2, 6, 6}, 113);
  for (int64_t at : {int64_t{7}, int64_t{8}, int64_t{36 + 35}})
    x = with_value_at(x, at, std::numeric_limits<float>::quiet_NaN());
  const ops::Pool2dParams p{3, 3, 2, 2, 1, 1, true};
  Tensor idx, gidx;
  const Tensor y = ops::max_pool2d_forward(x, p, idx);
  EXPECT_TRUE(same_f("max_pool2d_forward with NaN inputs, values",
                     ops::max_pool2d_forward(on_gpu(x), p, gidx), y));
  EXPECT_TRUE(same<int32_t>("max_pool2d_forward with NaN inputs, indices", gidx, idx));
}

TEST(CudaOps, AvgPoolBothPaddingModes) {
  ADA_REQUIRE_GPU();
  for (PoolCase c : pool_cases())
    for (bool include : {true, false}) {
      c.p.count_include_pad = include;
      const std::string what = cat("x ", shape_str(c.x), " ", pool_str(c.p));
      SCOPED_TRACE(what);
      const Tensor x = rand_cpu(c.x, 121);
      const Tensor y = ops::avg_pool2d_forward(x, c.p);
      EXPECT_TRUE(near("avg_pool2d_forward " + what, ops::avg_pool2d_forward(on_gpu(x), c.p), y,
                       kEltRtol, 1e-6));
      const Tensor dy = rand_cpu(y.shape(), 122);
      EXPECT_TRUE(near("avg_pool2d_backward " + what,
                       ops::avg_pool2d_backward(on_gpu(dy), c.x, c.p),
                       ops::avg_pool2d_backward(dy, c.x, c.p), kEltRtol, 1e-6));
    }
}

TEST(CudaOps, GlobalAvgPool) {
  ADA_REQUIRE_GPU();
  for (const Shape& s : std::vector<Shape>{{2, 3, 7, 7},
                                           {4, 64, 1, 1},
                                           {1, 1, 33, 65},
                                           {2, 512, 7, 7},
                                           {0, 3, 4, 4},
                                           {3, 0, 2, 2}}) {
    const std::string what = "x " + shape_str(s);
    SCOPED_TRACE(what);
    const Tensor x = rand_cpu(s, 131);
    // A mean of H*W values: a reduction (CPU in double).
    EXPECT_TRUE(near("global_avg_pool_forward " + what, ops::global_avg_pool_forward(on_gpu(x)),
                     ops::global_avg_pool_forward(x), kRedRtol, 1e-6));
    const Tensor dy = rand_cpu({s[0], s[1]}, 132);
    EXPECT_TRUE(near("global_avg_pool_backward " + what,
                     ops::global_avg_pool_backward(on_gpu(dy), s),
                     ops::global_avg_pool_backward(dy, s), kEltRtol, 0));
  }
}

// ---- normalisation --------------------------------------------------------------------------

TEST(CudaOps, BatchNormTrainEvalAndBackward) {
  ADA_REQUIRE_GPU();
  struct Case {
    Shape x;
    float offset;  // added to x: a large mean tests a numerically stable variance
  };
  // [rows, C] (inner 1) is also channels-last batch norm's view of NHWC activations, which has
  // kernels of its own (lanes on channels, 4 f32 channels a lane when C allows: C / 4 groups):
  // C below, at and above a warp's 32, many chunks; 1, 2, 4 and 33 groups (C 4, 8, 16: several
  // rows a warp; C 132: a column block with one lane's group and 31 idle lanes).
  const Case cases[] = {{{33, 7}, 0.f},           {{4, 5, 17}, 3.f},    {{3, 6, 9, 11}, -5.f},
                        {{8, 64, 14, 14}, 100.f}, {{2, 3, 1, 1}, 0.f},  {{1, 4, 33}, 1.f},
                        {{64, 1}, 0.5f},          {{12544, 64}, 2.f},   {{1000, 130}, -3.f},
                        {{50, 2048}, 0.f},        {{100000, 3}, 100.f}, {{3000, 4}, 1.f},
                        {{2000, 8}, 0.f},         {{1500, 16}, -2.f},   {{300, 132}, 0.5f}};
  const float momentum = 0.1f, eps = 1e-5f;
  for (const Case& c : cases) {
    const std::string what = cat("x ", shape_str(c.x), " + ", c.offset);
    SCOPED_TRACE(what);
    const int64_t ch = c.x[1], count = shape_numel(c.x) / ch;
    const Tensor x = map_host(rand_cpu(c.x, 141, 2.f), [&](float v) { return v + c.offset; });
    const Tensor gamma = rand_cpu({ch}, 142), beta = rand_cpu({ch}, 143);
    Generator gen(144);
    const Tensor rm0 = rand_cpu({ch}, 145), rv0 = Tensor::uniform({ch}, gen, 0.5f, 2.f);
    const Tensor gx = on_gpu(x), ggamma = on_gpu(gamma), gbeta = on_gpu(beta);

    Tensor rm = rm0.clone(), rv = rv0.clone(), grm = on_gpu(rm0), grv = on_gpu(rv0);
    Tensor mean, invstd, gmean, ginvstd;
    const Tensor y = ops::batch_norm_train(x, gamma, beta, rm, rv, momentum, eps, mean, invstd);
    const Tensor gy =
        ops::batch_norm_train(gx, ggamma, gbeta, grm, grv, momentum, eps, gmean, ginvstd);
    const double mean_atol = 1e-6 * (1.0 + std::fabs(c.offset));
    // y = x*a + c0 with a = gamma*invstd, c0 = beta - mean*a: with a mean of ~offset both terms
    // are ~|offset*a| and cancel, so y carries an fp32 ulp of |offset*a| (|a| <= ~3) on either
    // device: atol grows with the offset (2e-4 at offset 100, ~14 ulps of the cancelled terms).
    const double y_atol = 1e-5 * (1.0 + 0.2 * std::fabs(c.offset));
    EXPECT_TRUE(near("batch_norm_train y " + what, gy, y, kRedRtol, y_atol));
    EXPECT_TRUE(near("batch_norm_train save_mean " + what, gmean, mean, kRedRtol, mean_atol));
    EXPECT_TRUE(near("batch_norm_train save_invstd " + what, ginvstd, invstd, kRedRtol, 0));
    EXPECT_TRUE(near("batch_norm_train running_mean " + what, grm, rm, kRedRtol, mean_atol));
    EXPECT_TRUE(near("batch_norm_train running_var (unbiased) " + what, grv, rv, kRedRtol, 1e-7));

    // Without running statistics (undefined tensors): batch statistics only.
    Tensor no_rm, no_rv, gno_rm, gno_rv, m2, i2, gm2, gi2;
    const Tensor y2 = ops::batch_norm_train(x, gamma, beta, no_rm, no_rv, momentum, eps, m2, i2);
    EXPECT_TRUE(
        near("batch_norm_train without running stats, y " + what,
             ops::batch_norm_train(gx, ggamma, gbeta, gno_rm, gno_rv, momentum, eps, gm2, gi2), y2,
             kRedRtol, y_atol));

    // Training backward from the CPU's saved statistics (the same inputs on both devices).
    const Tensor dy = rand_cpu(c.x, 146), gdy = on_gpu(dy);
    const ops::BatchNormGrads r = ops::batch_norm_backward(dy, x, gamma, mean, invstd);
    const ops::BatchNormGrads gr =
        ops::batch_norm_backward(gdy, gx, ggamma, on_gpu(mean), on_gpu(invstd));
    EXPECT_TRUE(near("batch_norm_backward dx " + what, gr.dx, r.dx, kRedRtol, 1e-5));
    EXPECT_TRUE(near("batch_norm_backward dgamma " + what, gr.dgamma, r.dgamma, kRedRtol,
                     1e-6 * sqrt_count(count)));
    EXPECT_TRUE(near("batch_norm_backward dbeta " + what, gr.dbeta, r.dbeta, kRedRtol,
                     1e-6 * sqrt_count(count)));

    // The fused batch-norm + ReLU against the CPU's fused one, and on the GPU the same bits as
    // the pair of ops (its ReLU applied in the normalising pass, its mask in the backward's).
    Tensor rm3 = rm0.clone(), rv3 = rv0.clone(), grm3 = on_gpu(rm0), grv3 = on_gpu(rv0), m3, i3,
           gm3, gi3;
    const Tensor y3 = ops::batch_norm_relu_train(x, gamma, beta, rm3, rv3, momentum, eps, m3, i3);
    const Tensor gy3 =
        ops::batch_norm_relu_train(gx, ggamma, gbeta, grm3, grv3, momentum, eps, gm3, gi3);
    EXPECT_TRUE(near("batch_norm_relu_train y " + what, gy3, y3, kRedRtol, y_atol));
    EXPECT_TRUE(near("batch_norm_relu_train running_mean " + what, grm3, rm3, kRedRtol, mean_atol));
    EXPECT_TRUE(same_f("batch_norm_relu_train = relu(batch_norm_train) on the GPU " + what, gy3,
                       ops::relu(gy)));
    const ops::BatchNormGrads r3 = ops::batch_norm_relu_backward(dy, y3, x, gamma, m3, i3);
    const ops::BatchNormGrads gr3 =
        ops::batch_norm_relu_backward(gdy, on_gpu(y3), gx, ggamma, on_gpu(m3), on_gpu(i3));
    EXPECT_TRUE(near("batch_norm_relu_backward dx " + what, gr3.dx, r3.dx, kRedRtol, 1e-5));
    EXPECT_TRUE(near("batch_norm_relu_backward dgamma " + what, gr3.dgamma, r3.dgamma, kRedRtol,
                     1e-6 * sqrt_count(count)));
    const ops::BatchNormGrads pair = ops::batch_norm_backward(ops::relu_backward(gdy, on_gpu(y3)),
                                                              gx, ggamma, on_gpu(m3), on_gpu(i3));
    EXPECT_TRUE(
        same_f("batch_norm_relu_backward dx = the pair's on the GPU " + what, gr3.dx, pair.dx));
    EXPECT_TRUE(same_f("batch_norm_relu_backward dgamma = the pair's on the GPU " + what,
                       gr3.dgamma, pair.dgamma));
    EXPECT_TRUE(same_f("batch_norm_relu_backward dbeta = the pair's on the GPU " + what, gr3.dbeta,
                       pair.dbeta));

    // With the residual added before the ReLU (the ResNet blocks' tails): the CPU's fused op, and
    // on the GPU the bits of add_relu after batch_norm_train (f32: the vectorised kernel's path).
    const Tensor res = rand_cpu(c.x, 147), gres = on_gpu(res);
    Tensor rm4 = rm0.clone(), rv4 = rv0.clone(), grm4 = on_gpu(rm0), grv4 = on_gpu(rv0), m4, i4,
           gm4, gi4;
    const Tensor y4 =
        ops::batch_norm_relu_train(x, gamma, beta, rm4, rv4, momentum, eps, m4, i4, res);
    const Tensor gy4 =
        ops::batch_norm_relu_train(gx, ggamma, gbeta, grm4, grv4, momentum, eps, gm4, gi4, gres);
    EXPECT_TRUE(near("batch_norm_relu_train + residual y " + what, gy4, y4, kRedRtol, y_atol));
    EXPECT_TRUE(same_f(
        "batch_norm_relu_train + residual = add_relu(batch_norm_train, r) on the GPU " + what, gy4,
        ops::add_relu(gy, gres)));

    // Eval: running statistics are constants.
    EXPECT_TRUE(near("batch_norm_eval y " + what,
                     ops::batch_norm_eval(gx, ggamma, gbeta, on_gpu(rm), on_gpu(rv), eps),
                     ops::batch_norm_eval(x, gamma, beta, rm, rv, eps), kRedRtol, y_atol));
    const ops::BatchNormGrads e = ops::batch_norm_eval_backward(dy, x, gamma, rm, rv, eps);
    const ops::BatchNormGrads ge =
        ops::batch_norm_eval_backward(gdy, gx, ggamma, on_gpu(rm), on_gpu(rv), eps);
    EXPECT_TRUE(near("batch_norm_eval_backward dx " + what, ge.dx, e.dx, kRedRtol, 1e-6));
    // dgamma sums dy*(x - running_mean): with the offset, terms are ~|offset| in size.
    EXPECT_TRUE(near("batch_norm_eval_backward dgamma " + what, ge.dgamma, e.dgamma, kRedRtol,
                     1e-6 * sqrt_count(count) * (1.0 + std::fabs(c.offset))));
    EXPECT_TRUE(near("batch_norm_eval_backward dbeta " + what, ge.dbeta, e.dbeta, kRedRtol,
                     1e-6 * sqrt_count(count)));
  }
}

// cuDNN's batch norm (ops::cudnn_batch_norm_*, what ADA_CUDA_BN_CUDNN=1 trains on) against a
// double-precision reference on the same inputs, f32 and 16-bit, plain, + ReLU and + residual +
// ReLU. cuDNN does not say how it sums, so the bounds hold for any order: a per-channel sum of
// M terms in fp32 is within K u32 of the sum of the terms' magnitudes, K = M + 2 (u32 = 2^-24),
// and they allow a one-pass variance (E[x^2] - mean^2, whose error scales with E[x^2], not with
// the variance). The normalising pass adds a few fp32 roundings of its terms' magnitudes (8 u32
// allowed), a 16-bit output one rounding of itself (u16 = 2^-8 bf16, 2^-11 fp16; two with a
// residual, which may be added to the rounded normalised value). Loose for a kernel (up to ~1e-3
// relative at M = 12,544) and still far below what a wrong convention gives: a biased running
// variance (1/(M-1): 3% at M = 33), a missing ReLU or residual, an unmasked gradient (all of
// order one). The backward is checked against the reference formed from
// cuDNN's own saved mean and 1/std (what it is given), its ReLU mask from its own y; dresidual must
// be exactly the masked dy. Two runs must give the same bits (the trainer's steps are
// reproducible).
TEST(CudaOps, CudnnBatchNormMatchesADoubleReference) {
  ADA_REQUIRE_GPU();
  struct Case {
    Shape x;
    float offset;
  };
  const Case cases[] = {{{33, 8}, 0.f},    {{1000, 64}, 3.f},   {{12544, 64}, 2.f},
                        {{50, 2048}, 0.f}, {{4096, 256}, -1.f}, {{3000, 24}, 0.5f}};
  const double u32 = 0x1p-24;
  const float momentum = 0.1f, eps = 1e-5f;
  for (const Case& c : cases)
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (int kind = 0; kind < 3; ++kind) {  // plain, + ReLU, + residual + ReLU
        const bool relu = kind > 0, residual = kind == 2;
        const std::string what = cat("x ", shape_str(c.x), " + ", c.offset, " ", dtype_name(t),
                                     relu ? (residual ? " + residual + relu" : " + relu") : "");
        SCOPED_TRACE(what);
        const int64_t m = c.x[0], ch = c.x[1];
        const double u_out = t == DType::f32 ? 0 : t == DType::bf16 ? 0x1p-8 : 0x1p-11;
        const double K = static_cast<double>(m) + 2;
        // Inputs as the GPU sees them (rounded to t), read back as f32 for the reference.
        auto input = [&](uint64_t seed, float scale, float offset) {
          return ops::to_dtype(
              map_host(rand_cpu(c.x, seed, scale), [&](float v) { return v + offset; }), t);
        };
        const Tensor x = input(161, 2.f, c.offset), res = input(162, 1.f, 0.f),
                     dy = input(163, 1.f, 0.f);
        const Tensor gamma = rand_cpu({ch}, 164), beta = rand_cpu({ch}, 165);
        Generator gen(166);
        const Tensor rm0 = rand_cpu({ch}, 167), rv0 = Tensor::uniform({ch}, gen, 0.5f, 2.f);
        const std::vector<float> xv = ops::to_dtype(x, DType::f32).to_vector<float>(),
                                 rv = ops::to_dtype(res, DType::f32).to_vector<float>(),
                                 dyv = ops::to_dtype(dy, DType::f32).to_vector<float>(),
                                 gv = gamma.to_vector<float>(), bv = beta.to_vector<float>(),
                                 rm0v = rm0.to_vector<float>(), rv0v = rv0.to_vector<float>();
        const Tensor gx = on_gpu(x), gres = residual ? on_gpu(res) : Tensor(), gdy = on_gpu(dy),
                     ggamma = on_gpu(gamma), gbeta = on_gpu(beta);
        if (!ops::cudnn_batch_norm_fits(gx, eps, gres)) {
          // cuDNN may refuse 16-bit batch norm (PyTorch keeps bf16 off it); fn::batch_norm then
          // runs our kernels, which CudaModels.SixteenBitResNet20OnTheGpuMatchesTheCpu checks.
          ASSERT_NE(t, DType::f32) << "cuDNN refused f32 batch norm";
          if (c.x == cases[0].x && kind == 0)
            std::printf("cuDNN does not take batch norm of %s tensors here: not compared\n",
                        dtype_name(t));
          continue;
        }
        auto run = [&](Tensor& rm, Tensor& rvar) {
          const ops::CudnnBatchNorm f =
              ops::cudnn_batch_norm_train(gx, ggamma, gbeta, rm, rvar, momentum, eps, relu, gres);
          return std::make_pair(f, ops::cudnn_batch_norm_backward(gdy, gx, ggamma, gbeta, f, eps));
        };
        Tensor grm = on_gpu(rm0), grv = on_gpu(rv0);
        const auto [f, b] = run(grm, grv);
        SCOPED_TRACE(f.fused ? "ReLU fused in cuDNN" : "cuDNN's plain batch norm");
        ASSERT_EQ(f.y.dtype(), t);
        ASSERT_EQ(b.dx.dtype(), t);

        // Forward: statistics, then y, element by element.
        std::vector<double> mu(ch, 0), var(ch, 0), ex2(ch, 0), sabs(ch, 0), s(ch), dmu(ch),
            dvar(ch), ds(ch);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ch; ++j) {
            const double v = xv[i * ch + j];
            mu[j] += v;
            sabs[j] += std::fabs(v);
            ex2[j] += v * v;
          }
        for (int64_t j = 0; j < ch; ++j) {
          mu[j] /= m;
          ex2[j] /= m;
        }
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ch; ++j) {
            const double d = xv[i * ch + j] - mu[j];
            var[j] += d * d / m;
          }
        for (int64_t j = 0; j < ch; ++j) {
          s[j] = 1 / std::sqrt(var[j] + eps);
          dmu[j] = K * u32 * sabs[j] / m + u32 * std::fabs(mu[j]);
          dvar[j] = 2 * K * u32 * ex2[j] + 2 * std::fabs(mu[j]) * dmu[j];
          ds[j] = 0.5 * s[j] * s[j] * s[j] * dvar[j] + 2 * u32 * s[j];
        }
        std::vector<double> y(m * ch), yb(m * ch);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ch; ++j) {
            const int64_t k = i * ch + j;
            const double d = xv[k] - mu[j], r = residual ? rv[k] : 0.0;
            double z = gv[j] * d * s[j] + bv[j] + r;
            const double e =
                std::fabs(gv[j]) * (dmu[j] * s[j] + std::fabs(d) * ds[j]) +
                8 * u32 * (std::fabs(gv[j] * d * s[j]) + std::fabs(bv[j]) + std::fabs(r));
            // A residual may be added after the normalised value is rounded to 16 bits (cuDNN's
            // plain batch norm, then our add_relu): one more rounding, of that value.
            const double bn16 = residual ? u_out * (std::fabs(gv[j] * d * s[j] + bv[j]) + e) : 0;
            if (relu) z = std::max(z, 0.0);
            y[k] = z;
            yb[k] = e + u_out * (std::fabs(z) + e) + bn16;
          }
        EXPECT_TRUE(within("y", f.y, y, yb));
        EXPECT_TRUE(within("save_mean", f.save_mean, mu, dmu));
        EXPECT_TRUE(within("save_invstd", f.save_invstd, s, ds));
        std::vector<double> rmw(ch), rmb(ch), rvw(ch), rvb(ch);
        for (int64_t j = 0; j < ch; ++j) {
          const double unbiased = var[j] * m / (m - 1);
          rmw[j] = (1 - momentum) * rm0v[j] + momentum * mu[j];
          rmb[j] = momentum * dmu[j] + 4 * u32 * (std::fabs(rm0v[j]) + std::fabs(mu[j]));
          rvw[j] = (1 - momentum) * rv0v[j] + momentum * unbiased;
          rvb[j] = momentum * dvar[j] * m / (m - 1) + 4 * u32 * (rv0v[j] + unbiased);
        }
        EXPECT_TRUE(within("running_mean (updated in place)", grm, rmw, rmb));
        EXPECT_TRUE(within("running_var (unbiased, updated in place)", grv, rvw, rvb));

        // Backward from cuDNN's saved statistics and its own y's mask.
        const std::vector<float>
            yg = ops::to_dtype(f.y, DType::f32).to(Device::cpu()).to_vector<float>(),
            mg = f.save_mean.to(Device::cpu()).to_vector<float>(),
            sg = f.save_invstd.to(Device::cpu()).to_vector<float>();
        std::vector<double> g(m * ch), db(ch, 0), dg(ch, 0), dbb(ch, 0), dgb(ch, 0);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ch; ++j) {
            const int64_t k = i * ch + j;
            g[k] = relu && !(yg[k] > 0) ? 0.0 : dyv[k];
            const double xh = (xv[k] - mg[j]) * sg[j];
            db[j] += g[k];
            dg[j] += g[k] * xh;
            dbb[j] += std::fabs(g[k]);
            dgb[j] += std::fabs(g[k] * xh);
          }
        for (int64_t j = 0; j < ch; ++j) {
          dbb[j] *= K * u32;
          dgb[j] *= K * u32;
        }
        std::vector<double> dx(m * ch), dxb(m * ch);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ch; ++j) {
            const int64_t k = i * ch + j;
            const double xh = (xv[k] - mg[j]) * sg[j], a = std::fabs(gv[j] * sg[j]);
            const double v = gv[j] * sg[j] * (g[k] - db[j] / m - xh * dg[j] / m);
            const double e =
                a * (dbb[j] / m + std::fabs(xh) * dgb[j] / m) +
                8 * u32 * a * (std::fabs(g[k]) + std::fabs(db[j]) / m + std::fabs(xh * dg[j]) / m);
            dx[k] = v;
            dxb[k] = e + u_out * (std::fabs(v) + e);
          }
        EXPECT_TRUE(within("dx", b.dx, dx, dxb));
        EXPECT_TRUE(within("dgamma", b.dgamma, dg, dgb));
        EXPECT_TRUE(within("dbeta", b.dbeta, db, dbb));
        if (residual) {
          const Tensor masked = ops::relu_backward(gdy, f.y);
          EXPECT_TRUE(same<float>("dresidual = dy masked by y > 0",
                                  ops::to_dtype(b.dresidual, DType::f32),
                                  ops::to_dtype(masked, DType::f32).to(Device::cpu())));
        } else {
          EXPECT_FALSE(b.dresidual.defined());
        }

        // The same bits again.
        Tensor grm2 = on_gpu(rm0), grv2 = on_gpu(rv0);
        const auto [f2, b2] = run(grm2, grv2);
        auto bits = [](const Tensor& a) { return ops::to_dtype(a, DType::f32); };
        EXPECT_TRUE(same_f("y, second run", bits(f2.y), bits(f.y).to(Device::cpu())));
        EXPECT_TRUE(same_f("dx, second run", bits(b2.dx), bits(b.dx).to(Device::cpu())));
        EXPECT_TRUE(same_f("dgamma, second run", b2.dgamma, b.dgamma.to(Device::cpu())));
        EXPECT_TRUE(same_f("dbeta, second run", b2.dbeta, b.dbeta.to(Device::cpu())));
        EXPECT_TRUE(same_f("running_var, second run", grv2, grv.to(Device::cpu())));
      }
  // What the switch refuses: a CPU tensor, NCHW, eps below cuDNN's minimum.
  EXPECT_FALSE(ops::cudnn_batch_norm_fits(rand_cpu({8, 4}, 1), 1e-5f));
  EXPECT_FALSE(ops::cudnn_batch_norm_fits(on_gpu(rand_cpu({2, 4, 3, 3}, 1)), 1e-5f));
  EXPECT_FALSE(ops::cudnn_batch_norm_fits(on_gpu(rand_cpu({8, 4}, 1)), 1e-7f));
}

TEST(CudaOps, LayerNormForwardAndBackward) {
  ADA_REQUIRE_GPU();
  struct Case {
    Shape x;
    float offset, eps;
  };
  const Case cases[] = {
      {{4, 7}, 0.f, 1e-5f},       {{2, 3, 33}, 2.f, 1e-5f},  {{5, 1000}, 0.f, 1e-5f},
      {{3, 1}, 0.f, 1e-5f},       {{2, 4096}, -1.f, 1e-12f}, {{6, 768}, 50.f, 1e-12f},
      {{8, 16, 128}, 0.f, 1e-5f}, {{0, 8}, 0.f, 1e-5f},      {{7}, 0.f, 1e-5f}};
  for (const Case& c : cases) {
    const std::string what = cat("x ", shape_str(c.x), " + ", c.offset, " eps ", c.eps);
    SCOPED_TRACE(what);
    const int64_t d = c.x.back(), rows = d ? shape_numel(c.x) / d : 0;
    const Tensor x = map_host(rand_cpu(c.x, 151, 1.5f), [&](float v) { return v + c.offset; });
    const Tensor gamma = rand_cpu({d}, 152), beta = rand_cpu({d}, 153);
    const Tensor gx = on_gpu(x), ggamma = on_gpu(gamma);
    Tensor mean, rstd, gmean, grstd;
    const Tensor y = ops::layer_norm_forward(x, gamma, beta, c.eps, mean, rstd);
    const Tensor gy = ops::layer_norm_forward(gx, ggamma, on_gpu(beta), c.eps, gmean, grstd);
    // y = (x - mean)*rstd*gamma + beta: a one-ulp difference in the f32 mean (~6e-8*|offset|)
    // moves y by that times rstd*|gamma|; atol grows with the offset accordingly.
    EXPECT_TRUE(near("layer_norm_forward y " + what, gy, y, kRedRtol,
                     1e-5 * (1.0 + 0.1 * std::fabs(c.offset))));
    EXPECT_TRUE(near("layer_norm_forward save_mean " + what, gmean, mean, kRedRtol,
                     1e-6 * (1.0 + std::fabs(c.offset))));
    EXPECT_TRUE(near("layer_norm_forward save_rstd " + what, grstd, rstd, kRedRtol, 0));
    const Tensor dy = rand_cpu(c.x, 154);
    const ops::LayerNormGrads r = ops::layer_norm_backward(dy, x, gamma, mean, rstd);
    const ops::LayerNormGrads gr =
        ops::layer_norm_backward(on_gpu(dy), gx, ggamma, on_gpu(mean), on_gpu(rstd));
    EXPECT_TRUE(near("layer_norm_backward dx " + what, gr.dx, r.dx, kRedRtol, 1e-5));
    EXPECT_TRUE(near("layer_norm_backward dgamma " + what, gr.dgamma, r.dgamma, kRedRtol,
                     1e-6 * sqrt_count(rows)));
    EXPECT_TRUE(near("layer_norm_backward dbeta " + what, gr.dbeta, r.dbeta, kRedRtol,
                     1e-6 * sqrt_count(rows)));
  }
}

// ---- softmax and losses ---------------------------------------------------------------------

// argmax_rows gives the CPU's indices: random rows of many widths (one thread's columns up to
// a whole block's and beyond), ties between columns of different threads, NaN first, inside
// and everywhere, -inf rows.
TEST(CudaOps, ArgmaxRowsMatchesTheCpu) {
  ADA_REQUIRE_GPU();
  for (const Shape& sh :
       {Shape{7, 1}, Shape{5, 3}, Shape{3, 1000}, Shape{4, 30522}, Shape{0, 5}, Shape{600, 2}}) {
    const Tensor x = rand_cpu(sh, 171);
    EXPECT_EQ(ops::argmax_rows(on_gpu(x)).to_vector<int64_t>(),
              ops::argmax_rows(x).to_vector<int64_t>())
        << shape_str(sh);
  }
  const int64_t c = 1500;
  std::vector<float> v(6 * c, 0.f);
  v[0 * c + 700] = 2.f, v[0 * c + 1] = 2.f;   // tie across threads: column 1
  v[1 * c + 0] = NAN, v[1 * c + 900] = 5.f;   // NaN first: 0
  v[2 * c + 3] = NAN, v[2 * c + 1499] = 1.f;  // NaN inside: passed over
  for (int64_t j = 0; j < c; ++j) v[3 * c + j] = NAN;
  for (int64_t j = 0; j < c; ++j) v[4 * c + j] = -INFINITY;
  v[5 * c + 1000] = INFINITY, v[5 * c + 1200] = INFINITY;
  const Tensor x = Tensor::from_vector<float>(v, {6, c});
  const std::vector<int64_t> want{1, 0, 1499, 0, 0, 1000};
  EXPECT_EQ(ops::argmax_rows(x).to_vector<int64_t>(), want);
  EXPECT_EQ(ops::argmax_rows(on_gpu(x)).to_vector<int64_t>(), want);
  // 16-bit logits (the classifiers' accuracy under 16-bit activations): the indices of their f32
  // values (rounding makes new ties: the first column wins them), read as they are, no copy.
  for (DType t : {DType::bf16, DType::f16})
    for (const Tensor& cpu : {x, rand_cpu({5, 30522}, 172)}) {
      const Tensor narrow = ops::to_dtype(cpu, t), wide = ops::to_dtype(narrow, DType::f32);
      const Tensor on = on_gpu(narrow);
      const int64_t copies = ops::sixteen_bit_copies();
      EXPECT_EQ(ops::argmax_rows(on).to_vector<int64_t>(),
                ops::argmax_rows(wide).to_vector<int64_t>())
          << dtype_name(t) << " " << cpu.str();
      EXPECT_EQ(ops::sixteen_bit_copies(), copies) << dtype_name(t);
    }
}

TEST(CudaOps, SoftmaxAndLogSoftmax) {
  ADA_REQUIRE_GPU();
  struct Case {
    Shape x;
    float scale;
  };
  const Case cases[] = {{{7, 1}, 3.f},     {{3, 5}, 3.f},    {{4, 1000}, 3.f},
                        {{2, 30522}, 3.f}, {{2, 3, 5}, 1.f}, {{5}, 1.f},
                        {{0, 5}, 1.f},     {{3, 17}, 100.f},  // max subtraction
                        {{64, 128}, 2.f}};
  for (const Case& c : cases) {
    const std::string what = cat("x ", shape_str(c.x), " ~ N(0, ", c.scale, "^2)");
    SCOPED_TRACE(what);
    const Tensor x = rand_cpu(c.x, 161, c.scale), dy = rand_cpu(c.x, 162);
    const Tensor gx = on_gpu(x), gdy = on_gpu(dy);
    // softmax is relatively accurate element by element (exp within ulps, the row sum in double
    // or a tree): relative 1e-5, atol only for underflowing entries.
    const Tensor s = ops::softmax(x);
    EXPECT_TRUE(near("softmax " + what, ops::softmax(gx), s, kRedRtol, 1e-9));
    // dx = y*(dy - sum(dy*y)): cancels when dy ~ sum; an fp32 error of ~1e-7 in the sum times y.
    EXPECT_TRUE(near("softmax_backward " + what, ops::softmax_backward(gdy, on_gpu(s)),
                     ops::softmax_backward(dy, s), kRedRtol, 1e-7));
    // log_softmax = x - logsumexp: an ulp of |x| and of the logsumexp in absolute terms.
    const Tensor l = ops::log_softmax(x);
    EXPECT_TRUE(near("log_softmax " + what, ops::log_softmax(gx), l, kRedRtol,
                     1e-6 * (1.0 + 5.0 * c.scale)));
    EXPECT_TRUE(near("log_softmax_backward " + what, ops::log_softmax_backward(gdy, on_gpu(l)),
                     ops::log_softmax_backward(dy, l), kRedRtol, 1e-6));
  }
}

// The fused attention softmax on the GPU against the CPU's (itself the composition bit for bit,
// test_ops): the same tolerances as softmax, the key bias broadcast over heads and queries.
TEST(CudaOps, AttentionSoftmaxMatchesTheCpu) {
  ADA_REQUIRE_GPU();
  for (int64_t sk : {int64_t{1}, int64_t{37}, int64_t{512}}) {
    const int64_t b = 3, heads = 4, sq = 9;
    SCOPED_TRACE(cat("keys ", sk));
    const Tensor x = rand_cpu({b * heads, sq, sk}, 171, 3.f), dy = rand_cpu(x.shape(), 172);
    Tensor bias = Tensor::zeros({b, sk});
    for (int64_t j = sk / 2 + 1; j < sk; ++j) bias.data<float>()[2 * sk + j] = -10000.f;
    for (bool masked : {false, true}) {
      const Tensor kb = masked ? bias : Tensor();
      const Tensor y = ops::attention_softmax(x, kb, heads, 0.125f);
      const Tensor gy =
          ops::attention_softmax(on_gpu(x), masked ? on_gpu(bias) : Tensor(), heads, 0.125f);
      EXPECT_TRUE(near(cat("attention_softmax masked ", masked), gy, y, kRedRtol, 1e-9));
      EXPECT_TRUE(near(cat("attention_softmax_backward masked ", masked),
                       ops::attention_softmax_backward(on_gpu(dy), on_gpu(y), 0.125f),
                       ops::attention_softmax_backward(dy, y, 0.125f), kRedRtol, 1e-7));
    }
  }
}

// Out-of-range ids and targets are found by the kernels and raised at the host's next wait for
// the device (no wait per op): the op returns, the read of any result throws a ShapeError with
// the CPU's words, the first position and the value; the slot is clear afterwards, and the first
// of two faults wins.
TEST(CudaOps, DataErrorsAreRaisedAtTheNextWaitNamingOpPositionAndValue) {
  ADA_REQUIRE_GPU();
  const Tensor gl = on_gpu(rand_cpu({3, 4}, 5));
  Tensor glp;
  const Tensor bad_targets = on_gpu(Tensor::from_vector<int64_t>({0, 9, 7}, {3}));
  Tensor loss = ops::cross_entropy_forward(gl, bad_targets, 0.f, -100, glp);  // no throw here
  try {
    loss.item();
    ADD_FAILURE() << "reading the loss did not raise the bad target";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cross_entropy: target 9 at row 1 is outside [0, 4)"), std::string::npos) << m;
    EXPECT_NE(m.find("raised at the next wait for the device"), std::string::npos) << m;
  }
  const Tensor ok = on_gpu(Tensor::from_vector<int64_t>({0, 3, 2}, {3}));
  EXPECT_NO_THROW(ops::cross_entropy_forward(gl, ok, 0.f, -100, glp).item());
  const Tensor w = on_gpu(rand_cpu({10, 4}, 6));
  ops::embedding_forward(w, on_gpu(index_tensor({1, 12, 11}, {3}, DType::i32)));
  ops::cross_entropy_forward(gl, bad_targets, 0.f, -100, glp);
  try {
    cuda::synchronize(0);
    ADD_FAILURE() << "synchronize did not raise the bad id";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("embedding: id 12 at position 1 is outside the "
                                         "vocabulary [0, 10)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(cuda::synchronize(0));
}

// Under bf16/fp16 matrix products, ops::matmul_operand rounds an operand once (half the bytes)
// and matmul, bmm and gemm take it as it is: the same bits as the f32 operand rounded inside,
// in every transpose combination; under fp32 it is the tensor itself, and a 16-bit operand is
// refused by name.
TEST(CudaOps, MatmulOnRoundedOperandsGivesTheSameBits) {
  ADA_REQUIRE_GPU();
  struct Restore {
    ~Restore() { set_cuda_matmul_precision(Precision::fp32); }
  } restore;
  auto same = [](const Tensor& x, const Tensor& y) {
    return x.to(Device::cpu()).to_vector<float>() == y.to(Device::cpu()).to_vector<float>();
  };
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    SCOPED_TRACE(precision_name(p));
    set_cuda_matmul_precision(p);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Tensor a = on_gpu(rand_cpu(ta ? Shape{19, 37} : Shape{37, 19}, 71)),
                     b = on_gpu(rand_cpu(tb ? Shape{23, 19} : Shape{19, 23}, 72));
        const Tensor na = ops::matmul_operand(a), nb = ops::matmul_operand(b);
        EXPECT_EQ(na.dtype(), p == Precision::bf16 ? DType::bf16 : DType::f16);
        EXPECT_EQ(na.nbytes() * 2, a.nbytes());
        const Tensor ref = ops::matmul(a, b, ta, tb);
        EXPECT_TRUE(same(ops::matmul(na, nb, ta, tb), ref)) << ta << tb;
        EXPECT_TRUE(same(ops::matmul(na, b, ta, tb), ref)) << ta << tb;
        EXPECT_TRUE(same(ops::matmul(a, nb, ta, tb), ref)) << ta << tb;
      }
    const Tensor a = on_gpu(rand_cpu({3, 5, 7}, 73)), b = on_gpu(rand_cpu({3, 7, 4}, 74));
    EXPECT_TRUE(same(ops::bmm(ops::matmul_operand(a), ops::matmul_operand(b)), ops::bmm(a, b)));
  }
  set_cuda_matmul_precision(Precision::fp32);
  const Tensor a = on_gpu(rand_cpu({4, 4}, 75));
  EXPECT_EQ(ops::matmul_operand(a).raw_data(), a.raw_data());
  set_cuda_matmul_precision(Precision::bf16);
  const Tensor na = ops::matmul_operand(a);
  set_cuda_matmul_precision(Precision::fp32);
  try {
    ops::matmul(na, a);
    ADD_FAILURE() << "a bf16 operand was taken under fp32";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("bf16/fp16 train.precision"), std::string::npos)
        << e.what();
  }
}

// fn::matmul_operand shares one rounded copy among several products of one input (attention's
// q, k, v projections): the same bits forward and backward as each product rounding for itself,
// the gradient reaching the f32 input as f32.
TEST(CudaOps, SharedMatmulOperandGivesTheSameGradients) {
  ADA_REQUIRE_GPU();
  struct Restore {
    ~Restore() { set_cuda_matmul_precision(Precision::fp32); }
  } restore;
  set_cuda_matmul_precision(Precision::bf16);
  const Tensor x0 = on_gpu(rand_cpu({6, 8}, 81)), w1 = on_gpu(rand_cpu({5, 8}, 82)),
               w2 = on_gpu(rand_cpu({5, 8}, 83));
  auto run = [&](bool shared) {
    Variable x(x0, true), a(w1, true), b(w2, true);
    const Variable in = shared ? fn::matmul_operand(x) : x;
    if (shared) {
      EXPECT_EQ(in.value().dtype(), DType::bf16);
    }
    const Variable y = fn::add(fn::linear(in, a, Variable()), fn::linear(in, b, Variable()));
    backward(y, Tensor::ones(y.shape(), DType::f32, y.value().device()));
    EXPECT_EQ(x.grad().dtype(), DType::f32);
    return std::vector<Tensor>{y.value(), x.grad(), a.grad(), b.grad()};
  };
  const auto own = run(false), shared = run(true);
  for (size_t i = 0; i < own.size(); ++i)
    EXPECT_EQ(own[i].to(Device::cpu()).to_vector<float>(),
              shared[i].to(Device::cpu()).to_vector<float>())
        << i;
}

TEST(CudaOps, CrossEntropyWithSmoothingAndIgnoreIndex) {
  ADA_REQUIRE_GPU();
  struct Case {
    int64_t n, c;
  };
  for (const Case& sz :
       {Case{1, 1}, Case{7, 5}, Case{33, 10}, Case{64, 1000}, Case{4, 30522}, Case{0, 5}})
    for (DType dt : {DType::i64, DType::i32})
      for (float smoothing : {0.f, 0.1f})
        for (int64_t ignore : {int64_t{-100}, int64_t{2}})
          for (bool all_ignored : {false, true}) {
            if (ignore == 2 && sz.c <= 2) continue;
            const std::string what =
                cat("logits [", sz.n, ",", sz.c, "] targets ", dtype_name(dt), " smoothing ",
                    smoothing, " ignore_index ", ignore, all_ignored ? " (all rows ignored)" : "");
            SCOPED_TRACE(what);
            std::vector<int64_t> t(static_cast<size_t>(sz.n));
            int64_t counted = 0;
            for (int64_t i = 0; i < sz.n; ++i) {
              int64_t v = (i * 7919 + 13) % sz.c;
              if (all_ignored || i % 3 == 1) v = ignore;  // some ignored rows
              t[static_cast<size_t>(i)] = v;
              counted += v != ignore;
            }
            const Tensor logits = rand_cpu({sz.n, sz.c}, 171, 2.f),
                         targets = index_tensor(t, {sz.n}, dt);
            const Tensor gl = on_gpu(logits), gt = on_gpu(targets);
            Tensor logp, glogp;
            const Tensor loss =
                ops::cross_entropy_forward(logits, targets, smoothing, ignore, logp);
            const Tensor gloss = ops::cross_entropy_forward(gl, gt, smoothing, ignore, glogp);
            if (counted == 0) {
              EXPECT_TRUE(same_f("cross_entropy_forward loss (no counted rows: exactly 0) " + what,
                                 gloss, loss));
            } else {
              EXPECT_TRUE(near("cross_entropy_forward loss " + what, gloss, loss, kRedRtol, 1e-6));
            }
            EXPECT_TRUE(
                near("cross_entropy_forward save_logp " + what, glogp, logp, kRedRtol, 1e-5));
            for (float dloss : {1.f, 0.37f}) {
              const Tensor dx =
                  ops::cross_entropy_backward(dloss, logp, targets, smoothing, ignore);
              const Tensor gdx =
                  ops::cross_entropy_backward(dloss, on_gpu(logp), gt, smoothing, ignore);
              if (counted == 0) {
                EXPECT_TRUE(same_f(
                    cat("cross_entropy_backward (all zero) dloss ", dloss, " ", what), gdx, dx));
              } else {
                // dx = k*(p - e/C) (minus k*(1-e) at the target), k = dloss/count: exp within
                // ulps, so the absolute error is ~1e-7 * k where p - e/C cancels.
                const double k = dloss / static_cast<double>(counted);
                EXPECT_TRUE(near(cat("cross_entropy_backward dloss ", dloss, " ", what), gdx, dx,
                                 kRedRtol, 1e-6 * k));
              }
            }
          }
}

// ---- dropout and embedding ------------------------------------------------------------------

TEST(CudaOps, DropoutMaskEqualsCpuMaskBitForBit) {
  ADA_REQUIRE_GPU();
  for (const Shape& s : std::vector<Shape>{{0}, {1}, {7}, {65537}, {3, 33, 7}, {1000, 1000}})
    for (float p : {0.f, 0.1f, 0.5f, 0.9f}) {
      const std::string what = cat("x ", shape_str(s), " p ", p);
      SCOPED_TRACE(what);
      const Tensor x = rand_cpu(s, 181), dy = rand_cpu(s, 182);
      const Tensor gx = on_gpu(x);
      Generator gc(1234, 77), gg(1234, 77);   // same seed and offset
      for (int draw = 0; draw < 2; ++draw) {  // the second draw starts where the first ended
        const std::string dw = cat(" (draw ", draw, ") ", what);
        Tensor mask, gmask;
        const Tensor y = ops::dropout_forward(x, p, gc, mask);
        const Tensor gy = ops::dropout_forward(gx, p, gg, gmask);
        EXPECT_TRUE(same_f("dropout_forward mask" + dw, gmask, mask));
        EXPECT_TRUE(same_f("dropout_forward y" + dw, gy, y));
        EXPECT_EQ(gg.seed(), gc.seed()) << "dropout_forward generator seed" << dw;
        EXPECT_EQ(gg.offset(), gc.offset())
            << "dropout_forward: the GPU generator must advance like the CPU's" << dw;
        EXPECT_TRUE(same_f("dropout_backward" + dw, ops::dropout_backward(on_gpu(dy), gmask),
                           ops::dropout_backward(dy, mask)));
        // dropout_apply at the counters that draw used: the same output, and on dy its backward
        const uint64_t first = gc.offset() - static_cast<uint64_t>(x.numel());
        EXPECT_TRUE(same_f("dropout_apply y" + dw, ops::dropout_apply(gx, p, 1234, first), y));
        EXPECT_TRUE(same_f("dropout_apply dy" + dw, ops::dropout_apply(on_gpu(dy), p, 1234, first),
                           ops::dropout_backward(dy, mask)));
      }
    }
}

// Attention's key bias from a padding mask made on the GPU (no host read of the mask): the CPU's
// values exactly (0 or -10000), for i64, i32 and f32 masks, including an empty one.
TEST(CudaOps, AttentionKeyBiasIsTheCpus) {
  ADA_REQUIRE_GPU();
  std::vector<int64_t> m(3 * 700);
  for (size_t i = 0; i < m.size(); ++i) m[i] = (i * 7) % 5 == 0 ? 0 : static_cast<int64_t>(i % 3);
  const Tensor i64 = Tensor::from_vector<int64_t>(m, {3, 700});
  std::vector<int32_t> m32(m.begin(), m.end());
  std::vector<float> mf(m.begin(), m.end());
  for (const Tensor& mask :
       {i64, Tensor::from_vector<int32_t>(m32, {3, 700}), Tensor::from_vector<float>(mf, {3, 700}),
        Tensor::empty({0, 4}, DType::i64)}) {
    SCOPED_TRACE(mask.str());
    const Tensor cpu = ops::attention_key_bias(mask);
    const Tensor gpu = ops::attention_key_bias(mask.to(testing::gpu()));
    ASSERT_EQ(gpu.dtype(), DType::f32);
    ASSERT_EQ(gpu.shape(), mask.shape());
    EXPECT_EQ(gpu.to(Device::cpu()).to_vector<float>(), cpu.to_vector<float>());
  }
}

TEST(CudaOps, EmbeddingGatherAndScatterAdd) {
  ADA_REQUIRE_GPU();
  struct Case {
    int64_t v, d;
    Shape ids;
    int64_t distinct;  // ids cycle through [0, distinct): fewer distinct ids, more repeats
  };
  const Case cases[] = {{50, 33, {7}, 50},           {50, 33, {3, 5}, 50},        {50, 33, {0}, 50},
                        {50, 33, {2, 3, 4}, 50},     {50, 33, {200}, 5},          {1, 8, {17}, 1},
                        {1000, 128, {8, 128}, 1000}, {30522, 16, {4, 64}, 30522}, {64, 1, {65}, 3},
                        {40, 300, {2, 50}, 7}};  // 300 columns: two column tiles of 256 threads
  for (const Case& c : cases)
    for (DType dt : {DType::i32, DType::i64}) {
      const std::string what = cat("weight [", c.v, ",", c.d, "] ids ", shape_str(c.ids), " ",
                                   dtype_name(dt), " from ", c.distinct, " distinct values");
      SCOPED_TRACE(what);
      const int64_t n = shape_numel(c.ids);
      std::vector<int64_t> iv(static_cast<size_t>(n));
      std::vector<int64_t> repeats(static_cast<size_t>(c.v), 0);
      for (int64_t i = 0; i < n; ++i) {
        iv[static_cast<size_t>(i)] = (i * 7919 + 3) % c.distinct;
        ++repeats[static_cast<size_t>(iv[static_cast<size_t>(i)])];
      }
      const int64_t max_rep = *std::max_element(repeats.begin(), repeats.end());
      const Tensor w = rand_cpu({c.v, c.d}, 191), ids = index_tensor(iv, c.ids, dt);
      const Tensor gids = on_gpu(ids);
      EXPECT_TRUE(same_f("embedding_forward " + what, ops::embedding_forward(on_gpu(w), gids),
                         ops::embedding_forward(w, ids)));
      Shape ys = c.ids;
      ys.push_back(c.d);
      const Tensor dy = rand_cpu(ys, 192);
      // Scatter-add into an existing, non-zero dweight; repeated ids add up in another order on
      // the GPU: a sum of max_rep N(0,1) values and the start value.
      const Tensor dw0 = rand_cpu({c.v, c.d}, 193);
      Tensor dw = dw0.clone(), gdw = on_gpu(dw0);
      ops::embedding_backward(dy, ids, dw);
      ops::embedding_backward(on_gpu(dy), gids, gdw);
      EXPECT_TRUE(near(cat("embedding_backward (ids repeat up to ", max_rep, " times) ", what), gdw,
                       dw, kRedRtol, 1e-6 * static_cast<double>(max_rep + 1)));
      // Deterministic algorithms: the ids sorted stably, each row's gradients added in order
      // onto its start value, as the CPU: its bits (bf16 gradients too, widened as the CPU does).
      const testing::DeterministicScope deterministic;
      Tensor ddw = on_gpu(dw0);
      ops::embedding_backward(on_gpu(dy), gids, ddw);
      EXPECT_TRUE(same_f("embedding_backward, deterministic " + what, ddw, dw));
      const Tensor dy16 = ops::to_dtype(dy, DType::bf16);
      Tensor dw16 = dw0.clone(), gdw16 = on_gpu(dw0);
      ops::embedding_backward(dy16, ids, dw16);
      ops::embedding_backward(on_gpu(dy16), gids, gdw16);
      EXPECT_TRUE(
          same_f("embedding_backward of bf16 gradients, deterministic " + what, gdw16, dw16));
    }
}

// ---- optimizer updates ----------------------------------------------------------------------

TEST(CudaOps, AdamUpdateAndDirectionOverSeveralSteps) {
  ADA_REQUIRE_GPU();
  struct Config {
    const char* name;
    ops::AdamArgs a;
    double lr, decay;
    bool warm_state;  // non-zero initial m, v (a resumed run)
  };
  const Config configs[] = {
      {"adam", {0.9, 0.999, 1e-8, 1, 0.0}, 1e-3, 0.0, false},
      {"adamw decay 0.01", {0.9, 0.999, 1e-8, 1, 0.0}, 3e-3, 0.01, false},
      {"adam l2 0.01", {0.9, 0.999, 1e-8, 1, 0.01}, 1e-3, 0.0, false},
      {"betas 0.8/0.99 eps 1e-6 from step 100", {0.8, 0.99, 1e-6, 100, 0.0}, 1e-2, 0.1, true},
  };
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{65537}})
    for (const Config& cf : configs)
      for (bool direction : {false, true}) {
        const std::string what =
            cat(direction ? "adam_direction_ " : "adam_update_ ", cf.name, " [", n, "]");
        SCOPED_TRACE(what);
        Tensor w = rand_cpu({n}, 201), m = Tensor::zeros({n}), v = Tensor::zeros({n});
        if (cf.warm_state) {
          m = rand_cpu({n}, 202, 0.1f);
          v = map_host(rand_cpu({n}, 203, 0.1f), [](float x) { return x * x; });
        }
        Tensor gw = on_gpu(w), gm = on_gpu(m), gv = on_gpu(v);
        Tensor u = Tensor::zeros({n}), gu = Tensor::zeros({n}, DType::f32, gpu());
        const Tensor m0 = m.clone(), w0 = w.clone();
        std::vector<Tensor> gs;
        for (int step = 0; step < 5; ++step) {
          ops::AdamArgs a = cf.a;
          a.step = cf.a.step + step;
          // Every 11th gradient element is exactly 0 (d falls back to eps on the first step).
          const Tensor g = map_host(rand_cpu({n}, 210 + step),
                                    [k = 0](float x) mutable { return k++ % 11 ? x : 0.f; });
          const Tensor gg = on_gpu(g);
          const std::string at = cat(" after step ", a.step, " ", what);
          if (direction) {
            ops::adam_direction_(u, w, g, m, v, a, cf.decay);
            ops::adam_direction_(gu, gw, gg, gm, gv, a, cf.decay);
            // u = m_hat / d + decay*w, O(1): a few ulps of fp32 per step.
            EXPECT_TRUE(near("u" + at, gu, u, kRedRtol, 1e-6));
            EXPECT_TRUE(same_f("w (only read)" + at, gw, w));
          } else {
            ops::adam_update_(w, g, m, v, a, cf.lr, cf.decay);
            ops::adam_update_(gw, gg, gm, gv, a, cf.lr, cf.decay);
            // w changes by ~lr per step: its error is an ulp of w plus lr times that of m/d.
            EXPECT_TRUE(near("w" + at, gw, w, 2e-6, 1e-7));
          }
          // m may cancel (beta1*m + (1-beta1)*g of opposite signs): bounded by its terms' sizes
          // (w within 2 of its start: 5 steps of lr <= 0.01); v is a sum of positives.
          gs.push_back(g);
          EXPECT_TRUE(
              within("m" + at, gm, m,
                     moment_bound(m0, gs, w0, cf.a.beta1, 1 - cf.a.beta1, cf.a.l2, false, 2.0)));
          EXPECT_TRUE(near("v" + at, gv, v, kRedRtol, 1e-12));
        }
      }
}

// The multi-tensor steps (one call for every parameter of a step): the same update as the CPU's
// per-tensor ops within the tolerances of the per-tensor test above, for a list whose tensors
// span several chunks of a launch (32768 elements) and one tensor that is empty; each entry's
// result the same bits whether it is updated with the others or alone, and on every run.
TEST(CudaOps, MultiTensorStepsMatchTheCpuAndDoNotDependOnTheOtherEntries) {
  ADA_REQUIRE_GPU();
  const std::vector<int64_t> sizes = {1, 7, 1000, 0, 32768, 70001};
  const size_t n = sizes.size();
  struct State {
    std::vector<Tensor> w, m, v;
  };
  // Fresh copies of the same initial weights and (warm) state, on `dev`.
  auto init = [&](Device dev) {
    State s;
    for (size_t i = 0; i < n; ++i) {
      s.w.push_back(rand_cpu({sizes[i]}, 300 + i).to(dev));
      s.m.push_back(rand_cpu({sizes[i]}, 320 + i, 0.1f).to(dev));
      s.v.push_back(
          map_host(rand_cpu({sizes[i]}, 340 + i, 0.1f), [](float x) { return x * x; }).to(dev));
    }
    return s;
  };
  auto grads = [&](int step, Device dev) {
    std::vector<Tensor> g;
    for (size_t i = 0; i < n; ++i) g.push_back(rand_cpu({sizes[i]}, 400 + 10 * step + i).to(dev));
    return g;
  };
  auto args = [](int step, size_t i) {
    ops::AdamArgs a{0.9, 0.999, 1e-6, 3 + step, i == 2 ? 0.01 : 0.0};
    return a;
  };
  enum Kind { kSgd, kNesterov, kPlain, kAdam, kLamb };
  // Runs 3 steps of `kind` over entries [lo, hi) of `s` in one call per step.
  auto run = [&](Kind kind, State& s, size_t lo, size_t hi, Tensor& ratios) {
    Tensor scratch;
    for (int step = 0; step < 3; ++step) {
      const std::vector<Tensor> g = grads(step, s.w[0].device());
      const float lr = 0.01f * (step + 1);
      std::vector<ops::SgdEntry> sgd;
      std::vector<ops::AdamEntry> adam;
      std::vector<ops::LambEntry> lamb;
      for (size_t i = lo; i < hi; ++i) {
        sgd.push_back(
            {s.w[i], g[i], kind == kPlain ? Tensor() : s.m[i], i % 2 ? 0.f : 0.01f, step == 0});
        const ops::MomentsEntry moments{s.w[i], g[i], s.m[i], s.v[i], args(step, i)};
        adam.push_back({moments, i % 2 ? 0.0 : 0.01});
        lamb.push_back({moments, i % 2 ? 0.0 : 0.01, i != 1, static_cast<int64_t>(i)});
      }
      if (kind == kAdam)
        ops::adam_step_(adam, lr);
      else if (kind == kLamb)
        ops::lamb_step_(lamb, lr, ratios, scratch);
      else
        ops::sgd_step_(sgd, lr, kind == kPlain ? 0.f : 0.9f, kind == kNesterov);
    }
  };
  for (Kind kind : {kSgd, kNesterov, kPlain, kAdam, kLamb}) {
    SCOPED_TRACE(cat("kind ", kind));
    State c = init(Device::cpu()), g = init(gpu()), alone = init(gpu());
    Tensor rc = Tensor::ones({static_cast<int64_t>(n)});
    Tensor rg = Tensor::ones({static_cast<int64_t>(n)}, DType::f32, gpu());
    Tensor ra = Tensor::ones({static_cast<int64_t>(n)}, DType::f32, gpu());
    run(kind, c, 0, n, rc);
    run(kind, g, 0, n, rg);
    for (size_t i = 0; i < n; ++i) run(kind, alone, i, i + 1, ra);
    const State start = init(Device::cpu());
    std::vector<std::vector<Tensor>> gs(n);
    for (int step = 0; step < 3; ++step) {
      const std::vector<Tensor> g_step = grads(step, Device::cpu());
      for (size_t i = 0; i < n; ++i) gs[i].push_back(g_step[i]);
    }
    for (size_t i = 0; i < n; ++i) {
      const std::string at = cat(" of entry ", i, " [", sizes[i], "]");
      // w moves by ~lr per step: an ulp of w plus lr times the error of the direction.
      EXPECT_TRUE(near("w" + at, g.w[i], c.w[i], 2e-6, 1e-7));
      // m: SGD's v = 0.9 v + g + decay*w (v = g + decay*w on the first step), Adam's and LAMB's
      // m = 0.9 m + 0.1 (g + l2*w); w within 2 of its start over 3 steps of lr <= 0.03.
      const bool sgd = kind == kSgd || kind == kNesterov;
      if (kind != kPlain) {
        EXPECT_TRUE(within("m" + at, g.m[i], c.m[i],
                           moment_bound(start.m[i], gs[i], start.w[i], 0.9, sgd ? 1.0 : 0.1,
                                        sgd ? (i % 2 ? 0.0 : 0.01) : args(0, i).l2, sgd, 2.0)));
      }
      if (kind == kAdam || kind == kLamb) {
        EXPECT_TRUE(near("v" + at, g.v[i], c.v[i], kRedRtol, 1e-12));
      }
      EXPECT_TRUE(same_f("w alone" + at, alone.w[i], g.w[i].to(Device::cpu())));
      EXPECT_TRUE(same_f("m alone" + at, alone.m[i], g.m[i].to(Device::cpu())));
    }
    if (kind == kLamb) {
      // Ratios of double norms, rounded to f32 (entry 1 not adapted, entry 3 empty: both 1).
      EXPECT_TRUE(near("trust ratios", rg, rc, 1e-6, 0));
      EXPECT_TRUE(same_f("trust ratios alone", ra, rg.to(Device::cpu())));
      EXPECT_EQ(rc.to_vector<float>()[1], 1.f);
      EXPECT_EQ(rc.to_vector<float>()[3], 1.f);
    }
  }
  // Clipping: scaled by one factor from the norm of all gradients; left alone at or below the
  // limit and when the norm is not finite.
  for (double max_norm : {1.0, 1e9}) {
    std::vector<Tensor> c = grads(0, Device::cpu()), g = grads(0, gpu());
    ops::clip_grad_norm_(c, max_norm);
    ops::clip_grad_norm_(g, max_norm);
    for (size_t i = 0; i < n; ++i) {
      if (max_norm > 1e8) {
        EXPECT_TRUE(same_f(cat("unclipped ", i), g[i], c[i]));
      } else {
        EXPECT_TRUE(near(cat("clipped ", i), g[i], c[i], 1e-6, 0));
      }
    }
  }
  std::vector<Tensor> c = grads(1, Device::cpu());
  c[2] = map_host(c[2], [k = 0](float x) mutable { return k++ == 5 ? NAN : x; });
  std::vector<Tensor> g;
  for (const Tensor& t : c) g.push_back(on_gpu(t));
  ops::clip_grad_norm_(g, 1.0);
  for (size_t i = 0; i < n; ++i) EXPECT_TRUE(same_f(cat("non-finite norm ", i), g[i], c[i]));
  // all_finite and scale_ over a list, in one launch each.
  EXPECT_FALSE(ops::all_finite(g));
  g[2] = on_gpu(grads(1, Device::cpu())[2]);
  c[2] = grads(1, Device::cpu())[2];
  EXPECT_TRUE(ops::all_finite(g));
  ops::scale_(g, 0.375f);
  ops::scale_(c, 0.375f);
  for (size_t i = 0; i < n; ++i) EXPECT_TRUE(same_f(cat("scale_ ", i), g[i], c[i]));
  Tensor last = g[5].narrow(sizes[5] - 1, 1);  // the last element of the last chunk
  ops::fill_(last, INFINITY);
  EXPECT_FALSE(ops::all_finite(g));
}

// ---- empty batches, errors ------------------------------------------------------------------

TEST(CudaOps, EmptyBatchesBehaveLikeTheCpu) {
  ADA_REQUIRE_GPU();
  // Convolution with batch 0: the CPU returns empty y and dx and a zero dw.
  const ops::Conv2dParams p{1, 1, 1, 1, 1, 1};
  const Tensor x0 = Tensor::zeros({0, 2, 5, 5}), w = rand_cpu({3, 2, 3, 3}, 221),
               dy0 = Tensor::zeros({0, 3, 5, 5});
  EXPECT_TRUE(same_f("conv2d_forward batch 0", ops::conv2d_forward(on_gpu(x0), on_gpu(w), p),
                     ops::conv2d_forward(x0, w, p)));
  EXPECT_TRUE(same_f("conv2d_backward_data batch 0",
                     ops::conv2d_backward_data(on_gpu(dy0), on_gpu(w), x0.shape(), p),
                     ops::conv2d_backward_data(dy0, w, x0.shape(), p)));
  EXPECT_TRUE(same_f("conv2d_backward_filter batch 0 (zero dw)",
                     ops::conv2d_backward_filter(on_gpu(dy0), on_gpu(x0), w.shape(), p),
                     ops::conv2d_backward_filter(dy0, x0, w.shape(), p)));
  // Zero output channels: empty y, and the CPU's dx is zeros of the input's shape.
  const Tensor x = rand_cpu({2, 2, 5, 5}, 222), wz = Tensor::zeros({0, 2, 3, 3}),
               dyz = Tensor::zeros({2, 0, 5, 5});
  EXPECT_TRUE(same_f("conv2d_forward with 0 output channels",
                     ops::conv2d_forward(on_gpu(x), on_gpu(wz), p), ops::conv2d_forward(x, wz, p)));
  EXPECT_TRUE(same_f("conv2d_backward_data with 0 output channels (zero dx)",
                     ops::conv2d_backward_data(on_gpu(dyz), on_gpu(wz), x.shape(), p),
                     ops::conv2d_backward_data(dyz, wz, x.shape(), p)));
  // Pools, softmax, layer norm and losses on batch 0.
  const ops::Pool2dParams pp{3, 3, 2, 2, 1, 1, true};
  Tensor idx, gidx;
  EXPECT_TRUE(same_f("max_pool2d_forward batch 0", ops::max_pool2d_forward(on_gpu(x0), pp, gidx),
                     ops::max_pool2d_forward(x0, pp, idx)));
  EXPECT_TRUE(same<int32_t>("max_pool2d_forward batch 0 indices", gidx, idx));
  EXPECT_TRUE(same_f("avg_pool2d_forward batch 0", ops::avg_pool2d_forward(on_gpu(x0), pp),
                     ops::avg_pool2d_forward(x0, pp)));
  EXPECT_TRUE(same_f("global_avg_pool_forward batch 0", ops::global_avg_pool_forward(on_gpu(x0)),
                     ops::global_avg_pool_forward(x0)));
  // bias_grad of no rows: zeros.
  const Tensor e = Tensor::zeros({0, 7});
  EXPECT_TRUE(same_f("bias_grad of [0,7]", ops::bias_grad(on_gpu(e)), ops::bias_grad(e)));
  EXPECT_TRUE(same_f("sum over an empty axis", ops::sum(on_gpu(e), {0}), ops::sum(e, {0})));
  EXPECT_EQ(ops::dot(on_gpu(e), on_gpu(e)), 0.0) << "dot of empty tensors";
  // Batch norm with no values per channel: the CPU throws ShapeError, so must the GPU.
  {
    const Tensor g = Tensor::ones({2}), b = Tensor::zeros({2});
    Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2}), grm = on_gpu(rm), grv = on_gpu(rv);
    const Tensor bx = Tensor::zeros({0, 2, 3});
    Tensor m, s, gm, gs;
    expect_same_error<ShapeError>(
        "batch_norm_train on batch 0",
        [&] { ops::batch_norm_train(bx, g, b, rm, rv, 0.1f, 1e-5f, m, s); },
        [&] {
          ops::batch_norm_train(on_gpu(bx), on_gpu(g), on_gpu(b), grm, grv, 0.1f, 1e-5f, gm, gs);
        });
  }
}

TEST(CudaOps, MixingDevicesThrowsDeviceError) {
  ADA_REQUIRE_GPU();
  const Tensor a = rand_cpu({4, 5}, 1), ga = on_gpu(a);
  const Tensor bt = rand_cpu({5, 3}, 2);
  expect_error<DeviceError>("add(gpu, cpu)", [&] { ops::add(ga, a); });
  expect_error<DeviceError>("add(cpu, gpu)", [&] { ops::add(a, ga); });
  expect_error<DeviceError>("mul(gpu, cpu)", [&] { ops::mul(ga, a); });
  {
    Tensor out = Tensor::empty({4, 5});
    expect_error<DeviceError>("add_out(gpu, gpu -> cpu out)", [&] { ops::add_out(ga, ga, out); });
    Tensor gy = on_gpu(a);
    expect_error<DeviceError>("axpby_(cpu x, gpu y)", [&] { ops::axpby_(1.f, a, 1.f, gy); });
  }
  try {
    ops::add(ga, a);
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("add"), std::string::npos)
        << "a DeviceError should name the op; got: " << e.what();
  } catch (...) {  // the wrong type is reported above
  }
  expect_error<DeviceError>("matmul(gpu, cpu)", [&] { ops::matmul(ga, bt); });
  {
    Tensor c = Tensor::zeros({4, 3});
    const Tensor gbt = on_gpu(bt);
    expect_error<DeviceError>("gemm(gpu a, gpu b, cpu c)", [&] { ops::gemm(ga, gbt, c); });
  }
  expect_error<DeviceError>("add_bias(gpu x, cpu bias)",
                            [&] { ops::add_bias(ga, Tensor::zeros({5})); });
  expect_error<DeviceError>("relu_backward(gpu dy, cpu y)", [&] { ops::relu_backward(ga, a); });
  expect_error<DeviceError>("dot(gpu, cpu)", [&] { ops::dot(ga, a); });
  expect_error<DeviceError>("softmax_backward(gpu dy, cpu y)",
                            [&] { ops::softmax_backward(ga, a); });
  {
    const Tensor x = rand_cpu({1, 2, 5, 5}, 5), w = rand_cpu({3, 2, 3, 3}, 5);
    expect_error<DeviceError>("conv2d_forward(gpu x, cpu w)",
                              [&] { ops::conv2d_forward(on_gpu(x), w, {}); });
    const Tensor dy = rand_cpu({1, 3, 3, 3}, 5);
    expect_error<DeviceError>("conv2d_backward_filter(cpu dy, gpu x)",
                              [&] { ops::conv2d_backward_filter(dy, on_gpu(x), w.shape(), {}); });
    Tensor idx;
    const ops::Pool2dParams pp{};
    const Tensor y = ops::max_pool2d_forward(x, pp, idx);
    expect_error<DeviceError>("max_pool2d_backward(gpu dy, cpu indices)", [&] {
      ops::max_pool2d_backward(on_gpu(rand_cpu(y.shape(), 6)), idx, x.shape());
    });
  }
  {
    const Tensor w = rand_cpu({10, 4}, 5);
    const Tensor ids = Tensor::from_vector<int64_t>({1, 2, 3}, {3});
    expect_error<DeviceError>("embedding_forward(gpu weight, cpu ids)",
                              [&] { ops::embedding_forward(on_gpu(w), ids); });
    expect_error<DeviceError>("embedding_forward(cpu weight, gpu ids)",
                              [&] { ops::embedding_forward(w, on_gpu(ids)); });
    Tensor dw = Tensor::zeros({10, 4});
    expect_error<DeviceError>("embedding_backward(gpu dy, gpu ids, cpu dweight)", [&] {
      ops::embedding_backward(on_gpu(rand_cpu({3, 4}, 5)), on_gpu(ids), dw);
    });
  }
  {
    const Tensor logits = rand_cpu({3, 4}, 5);
    const Tensor t = Tensor::from_vector<int64_t>({0, 1, 2}, {3});
    Tensor lp;
    expect_error<DeviceError>("cross_entropy_forward(gpu logits, cpu targets)", [&] {
      ops::cross_entropy_forward(on_gpu(logits), t, 0.f, -100, lp);
    });
  }
  {
    const Tensor x = rand_cpu({4, 3}, 5), g = Tensor::ones({3}), b = Tensor::zeros({3});
    Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3}), m, s;
    expect_error<DeviceError>("batch_norm_train(gpu x/gamma/beta, cpu running stats)", [&] {
      ops::batch_norm_train(on_gpu(x), on_gpu(g), on_gpu(b), rm, rv, 0.1f, 1e-5f, m, s);
    });
    Tensor lm, lr;
    expect_error<DeviceError>("layer_norm_forward(gpu x, cpu gamma)", [&] {
      ops::layer_norm_forward(on_gpu(x), g, on_gpu(b), 1e-5f, lm, lr);
    });
  }
  {
    Tensor w = on_gpu(rand_cpu({8}, 5)), m = Tensor::zeros({8}, DType::f32, gpu()),
           v = Tensor::zeros({8}, DType::f32, gpu());
    const Tensor g = rand_cpu({8}, 5);
    expect_error<DeviceError>("adam_update_(cpu g)",
                              [&] { ops::adam_update_(w, g, m, v, {}, 1e-3, 0.0); });
  }
  // The device stays usable after the errors.
  EXPECT_TRUE(near("add after the device errors", ops::add(ga, ga), ops::add(a, a), kEltRtol, 0));
}

TEST(CudaOps, BadArgumentsThrowLikeTheCpu) {
  ADA_REQUIRE_GPU();
  // Each pair: the CPU call and the same call on GPU tensors must throw the same error type.
  const Tensor a23 = rand_cpu({2, 3}, 5), a32 = rand_cpu({3, 2}, 5);
  const Tensor g23 = on_gpu(a23), g32 = on_gpu(a32);
  expect_same_error<ShapeError>(
      "add [2,3] + [3,2]", [&] { ops::add(a23, a32); }, [&] { ops::add(g23, g32); });
  expect_same_error<ShapeError>(
      "mul [2,3] * [3,2]", [&] { ops::mul(a23, a32); }, [&] { ops::mul(g23, g32); });
  {
    Tensor o = Tensor::empty({3, 2}), go = on_gpu(o);
    expect_same_error<ShapeError>(
        "add_out into a wrong-shaped out", [&] { ops::add_out(a23, a23, o); },
        [&] { ops::add_out(g23, g23, go); });
    Tensor y = a32.clone(), gy = on_gpu(a32);
    expect_same_error<ShapeError>(
        "axpby_ [2,3] into [3,2]", [&] { ops::axpby_(1.f, a23, 1.f, y); },
        [&] { ops::axpby_(1.f, g23, 1.f, gy); });
  }
  expect_same_error<ShapeError>(
      "matmul inner dims differ", [&] { ops::matmul(a23, a23); }, [&] { ops::matmul(g23, g23); });
  {
    Tensor c = Tensor::zeros({2, 3}), gc = on_gpu(c);
    expect_same_error<ShapeError>(
        "gemm with a wrong-shaped c", [&] { ops::gemm(a23, a32, c); },
        [&] { ops::gemm(g23, g32, gc); });
    const Tensor b1 = rand_cpu({2, 3, 4}, 5), b2 = rand_cpu({3, 4, 5}, 5);
    Tensor cb = Tensor::zeros({2, 3, 5}), gcb = on_gpu(cb);
    expect_same_error<ShapeError>(
        "gemm_batched batch sizes differ", [&] { ops::gemm_batched(b1, b2, cb); },
        [&] { ops::gemm_batched(on_gpu(b1), on_gpu(b2), gcb); });
    expect_same_error<ShapeError>(
        "bmm inner dims differ", [&] { ops::bmm(b1, b1); },
        [&] { ops::bmm(on_gpu(b1), on_gpu(b1)); });
    expect_same_error<ShapeError>(
        "matmul of a 3-d tensor", [&] { ops::matmul(b1, a32); },
        [&] { ops::matmul(on_gpu(b1), g32); });
  }
  expect_same_error<ShapeError>(
      "add_bias with a wrong-sized bias", [&] { ops::add_bias(a23, Tensor::zeros({2})); },
      [&] { ops::add_bias(g23, Tensor::zeros({2}, DType::f32, gpu())); });
  expect_same_error<ShapeError>(
      "add_channel_bias with a wrong-sized bias",
      [&] { ops::add_channel_bias(a23, Tensor::zeros({2})); },
      [&] { ops::add_channel_bias(g23, Tensor::zeros({2}, DType::f32, gpu())); });
  expect_same_error<ShapeError>(
      "permute with a repeated axis",
      [&] {
        ops::permute(a23, {0, 0});
      },
      [&] {
        ops::permute(g23, {0, 0});
      });
  expect_same_error<ShapeError>(
      "permute with too few axes", [&] { ops::permute(a23, {0}); },
      [&] { ops::permute(g23, {0}); });
  expect_same_error<ShapeError>(
      "sum over axis 2 of a 2-d tensor", [&] { ops::sum(a23, {2}); }, [&] { ops::sum(g23, {2}); });
  expect_same_error<ShapeError>(
      "sum over axes {1, -1} (the same axis twice)",
      [&] {
        ops::sum(a23, {1, -1});
      },
      [&] {
        ops::sum(g23, {1, -1});
      });
  expect_same_error<ShapeError>(
      "mean over axis -3 of a 2-d tensor", [&] { ops::mean(a23, {-3}); },
      [&] { ops::mean(g23, {-3}); });
  expect_same_error<ShapeError>(
      "sum_backward with a wrong-sized dy",
      [&] {
        ops::sum_backward(a23, {2, 3, 4}, {1});
      },
      [&] {
        ops::sum_backward(g23, {2, 3, 4}, {1});
      });
  expect_same_error<ShapeError>(
      "dot of different sizes", [&] { ops::dot(a23, Tensor::zeros({5})); },
      [&] { ops::dot(g23, Tensor::zeros({5}, DType::f32, gpu())); });
  {
    const Tensor x = rand_cpu({1, 3, 5, 5}, 5), w = rand_cpu({4, 2, 3, 3}, 5),
                 big = rand_cpu({1, 3, 7, 7}, 5);
    const Tensor gx = on_gpu(x);
    expect_same_error<ShapeError>(
        "conv2d_forward with mismatched input channels", [&] { ops::conv2d_forward(x, w, {}); },
        [&] { ops::conv2d_forward(gx, on_gpu(w), {}); });
    expect_same_error<ShapeError>(
        "conv2d_forward with a kernel larger than the input",
        [&] { ops::conv2d_forward(x, big, {}); },
        [&] { ops::conv2d_forward(gx, on_gpu(big), {}); });
    const Tensor x3 = rand_cpu({3, 5, 5}, 5);
    expect_same_error<ShapeError>(
        "conv2d_forward of a 3-d input", [&] { ops::conv2d_forward(x3, big, {}); },
        [&] { ops::conv2d_forward(on_gpu(x3), on_gpu(big), {}); });
    const Tensor w4 = rand_cpu({4, 3, 3, 3}, 5),
                 dy = rand_cpu({1, 4, 2, 2}, 5);  // should be [1,4,3,3]
    expect_same_error<ShapeError>(
        "conv2d_backward_data with a wrong-shaped dy",
        [&] { ops::conv2d_backward_data(dy, w4, x.shape(), {}); },
        [&] { ops::conv2d_backward_data(on_gpu(dy), on_gpu(w4), x.shape(), {}); });
    expect_same_error<ShapeError>(
        "conv2d_backward_filter with a wrong-shaped dy",
        [&] { ops::conv2d_backward_filter(dy, x, w4.shape(), {}); },
        [&] { ops::conv2d_backward_filter(on_gpu(dy), gx, w4.shape(), {}); });
    const ops::Conv2dParams zero_stride{0, 1, 0, 0, 1, 1};
    expect_same_error<ShapeError>(
        "conv2d_forward with stride 0", [&] { ops::conv2d_forward(x, w4, zero_stride); },
        [&] { ops::conv2d_forward(gx, on_gpu(w4), zero_stride); });
    Tensor idx, gidx;
    const ops::Pool2dParams too_big{7, 7, 1, 1, 0, 0, true}, bad_pad{2, 2, 2, 2, 2, 2, true};
    expect_same_error<ShapeError>(
        "max_pool2d_forward with a kernel larger than the input",
        [&] { ops::max_pool2d_forward(x, too_big, idx); },
        [&] { ops::max_pool2d_forward(gx, too_big, gidx); });
    expect_same_error<ShapeError>(
        "avg_pool2d_forward with padding over half the kernel",
        [&] { ops::avg_pool2d_forward(x, bad_pad); },
        [&] { ops::avg_pool2d_forward(gx, bad_pad); });
    const ops::Pool2dParams pp{};
    const Tensor pdy = rand_cpu({1, 3, 3, 3}, 5);  // should be [1,3,2,2]
    expect_same_error<ShapeError>(
        "avg_pool2d_backward with a wrong-shaped dy",
        [&] { ops::avg_pool2d_backward(pdy, x.shape(), pp); },
        [&] { ops::avg_pool2d_backward(on_gpu(pdy), x.shape(), pp); });
    expect_same_error<ShapeError>(
        "global_avg_pool_backward with a wrong-shaped dy",
        [&] { ops::global_avg_pool_backward(a23, x.shape()); },
        [&] { ops::global_avg_pool_backward(g23, x.shape()); });
    const Tensor fidx = Tensor::zeros({1, 3, 2, 2});
    expect_same_error<DTypeError>(
        "max_pool2d_backward with f32 indices",
        [&] {
          ops::max_pool2d_backward(Tensor::zeros({1, 3, 2, 2}), fidx, x.shape());
        },
        [&] {
          ops::max_pool2d_backward(on_gpu(Tensor::zeros({1, 3, 2, 2})), on_gpu(fidx), x.shape());
        });
  }
  {
    const Tensor x = rand_cpu({1, 2}, 5), g = Tensor::ones({2}), b = Tensor::zeros({2});
    Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2}), grm = on_gpu(rm), grv = on_gpu(rv), m,
           s, gm, gs;
    expect_same_error<ShapeError>(
        "batch_norm_train with one value per channel",
        [&] { ops::batch_norm_train(x, g, b, rm, rv, 0.1f, 1e-5f, m, s); },
        [&] {
          ops::batch_norm_train(on_gpu(x), on_gpu(g), on_gpu(b), grm, grv, 0.1f, 1e-5f, gm, gs);
        });
    const Tensor x4 = rand_cpu({4, 3}, 5), g3 = Tensor::ones({3});
    expect_same_error<ShapeError>(
        "batch_norm_train with a wrong-sized gamma",
        [&] { ops::batch_norm_train(x4, g, g3, rm, rv, 0.1f, 1e-5f, m, s); },
        [&] {
          ops::batch_norm_train(on_gpu(x4), on_gpu(g), on_gpu(g3), grm, grv, 0.1f, 1e-5f, gm, gs);
        });
    Tensor lm, lr, glm, glr;
    expect_same_error<ShapeError>(
        "layer_norm_forward with a wrong-sized gamma",
        [&] { ops::layer_norm_forward(x4, g, g, 1e-5f, lm, lr); },
        [&] { ops::layer_norm_forward(on_gpu(x4), on_gpu(g), on_gpu(g), 1e-5f, glm, glr); });
  }
  {
    const Tensor scalar = Tensor::zeros({});
    expect_same_error<ShapeError>(
        "softmax of a 0-d tensor", [&] { ops::softmax(scalar); },
        [&] { ops::softmax(on_gpu(scalar)); });
    expect_same_error<ShapeError>(
        "softmax_backward with mismatched shapes", [&] { ops::softmax_backward(a23, a32); },
        [&] { ops::softmax_backward(g23, g32); });
    expect_same_error<ShapeError>(
        "log_softmax_backward with mismatched shapes", [&] { ops::log_softmax_backward(a23, a32); },
        [&] { ops::log_softmax_backward(g23, g32); });
  }
  // Cross-entropy: targets out of range (above C, negative but not ignore_index) in both index
  // dtypes, wrong target count, float targets, smoothing outside [0, 1].
  {
    const Tensor logits = rand_cpu({2, 3}, 5), gl = on_gpu(logits);
    for (DType dt : {DType::i64, DType::i32})
      for (int64_t bad : {int64_t{3}, int64_t{7}, int64_t{-1}}) {
        const Tensor t = index_tensor({0, bad}, {2}, dt), gt = on_gpu(t);
        Tensor lp, glp;
        expect_same_error<ShapeError>(
            cat("cross_entropy_forward with target ", bad, " (", dtype_name(dt), ") for C=3"),
            [&] { ops::cross_entropy_forward(logits, t, 0.f, -100, lp); },
            [&] {  // a data error surfaces at the next wait for the device
              ops::cross_entropy_forward(gl, gt, 0.f, -100, glp);
              cuda::synchronize(0);
            });
      }
    Tensor lp, glp;
    const Tensor t3 = Tensor::from_vector<int64_t>({0, 1, 2}, {3}), tf = Tensor::zeros({2});
    expect_same_error<ShapeError>(
        "cross_entropy_forward with 3 targets for 2 rows",
        [&] { ops::cross_entropy_forward(logits, t3, 0.f, -100, lp); },
        [&] { ops::cross_entropy_forward(gl, on_gpu(t3), 0.f, -100, glp); });
    expect_same_error<DTypeError>(
        "cross_entropy_forward with f32 targets",
        [&] { ops::cross_entropy_forward(logits, tf, 0.f, -100, lp); },
        [&] { ops::cross_entropy_forward(gl, on_gpu(tf), 0.f, -100, glp); });
    const Tensor t2 = Tensor::from_vector<int64_t>({0, 1}, {2});
    expect_same_error<ShapeError>(
        "cross_entropy_forward with label_smoothing 1.5",
        [&] { ops::cross_entropy_forward(logits, t2, 1.5f, -100, lp); },
        [&] { ops::cross_entropy_forward(gl, on_gpu(t2), 1.5f, -100, glp); });
    expect_same_error<ShapeError>(
        "cross_entropy_forward with 1-d logits",
        [&] { ops::cross_entropy_forward(Tensor::zeros({2}), t2, 0.f, -100, lp); },
        [&] {
          ops::cross_entropy_forward(Tensor::zeros({2}, DType::f32, gpu()), on_gpu(t2), 0.f, -100,
                                     glp);
        });
  }
  // Embedding: ids outside [0, V) in both index dtypes, forward and backward; float ids.
  {
    const Tensor w = rand_cpu({10, 4}, 5), gw = on_gpu(w);
    for (DType dt : {DType::i64, DType::i32})
      for (int64_t bad : {int64_t{10}, int64_t{-1}, int64_t{1000000}}) {
        const Tensor ids = index_tensor({1, bad, 2}, {3}, dt), gids = on_gpu(ids);
        const std::string what = cat("id ", bad, " (", dtype_name(dt), ") for V=10");
        expect_same_error<ShapeError>(
            "embedding_forward with " + what, [&] { ops::embedding_forward(w, ids); },
            [&] {
              ops::embedding_forward(gw, gids);
              cuda::synchronize(0);
            });
        Tensor dw = Tensor::zeros({10, 4}), gdw = on_gpu(dw);
        const Tensor dy = rand_cpu({3, 4}, 5);
        expect_same_error<ShapeError>(
            "embedding_backward with " + what, [&] { ops::embedding_backward(dy, ids, dw); },
            [&] {
              ops::embedding_backward(on_gpu(dy), gids, gdw);
              cuda::synchronize(0);
            });
        // The ordered (deterministic) path sorts the bad id last, skips it and reports it alike.
        const testing::DeterministicScope deterministic;
        Tensor ddw = on_gpu(Tensor::zeros({10, 4}));
        expect_same_error<ShapeError>(
            "embedding_backward (deterministic) with " + what,
            [&] { ops::embedding_backward(dy, ids, dw); },
            [&] {
              ops::embedding_backward(on_gpu(dy), gids, ddw);
              cuda::synchronize(0);
            });
      }
    const Tensor fids = Tensor::zeros({3});
    expect_same_error<DTypeError>(
        "embedding_forward with f32 ids", [&] { ops::embedding_forward(w, fids); },
        [&] { ops::embedding_forward(gw, on_gpu(fids)); });
    Tensor dw = Tensor::zeros({10, 4}), gdw = on_gpu(dw);
    const Tensor ids = Tensor::from_vector<int64_t>({1, 2, 3}, {3}), dy5 = rand_cpu({3, 5}, 5);
    expect_same_error<ShapeError>(
        "embedding_backward with a wrong-width dy", [&] { ops::embedding_backward(dy5, ids, dw); },
        [&] { ops::embedding_backward(on_gpu(dy5), on_gpu(ids), gdw); });
  }
  // Dropout probability outside [0, 1).
  {
    const Tensor x = rand_cpu({5}, 5);
    Generator g1(1), g2(1);
    Tensor m, gm;
    expect_same_error<ShapeError>(
        "dropout_forward with p = 1", [&] { ops::dropout_forward(x, 1.f, g1, m); },
        [&] { ops::dropout_forward(on_gpu(x), 1.f, g2, gm); });
    expect_same_error<ShapeError>(
        "dropout_forward with p = -0.1", [&] { ops::dropout_forward(x, -0.1f, g1, m); },
        [&] { ops::dropout_forward(on_gpu(x), -0.1f, g2, gm); });
  }
  // Dtypes.
  {
    const Tensor i = Tensor::zeros({2, 3}, DType::i32);
    expect_same_error<DTypeError>(
        "relu of an i32 tensor", [&] { ops::relu(i); }, [&] { ops::relu(on_gpu(i)); });
    expect_same_error<DTypeError>(
        "add of i32 tensors", [&] { ops::add(i, i); }, [&] { ops::add(on_gpu(i), on_gpu(i)); });
  }
  // Adam: shapes, aliasing, step.
  {
    Tensor w = rand_cpu({8}, 5), g = rand_cpu({8}, 5), m = Tensor::zeros({8}),
           v = Tensor::zeros({8}), g7 = rand_cpu({7}, 5);
    Tensor gw = on_gpu(w), gg = on_gpu(g), gm = on_gpu(m), gv = on_gpu(v), gg7 = on_gpu(g7);
    expect_same_error<ShapeError>(
        "adam_update_ with a wrong-sized gradient",
        [&] { ops::adam_update_(w, g7, m, v, {}, 1e-3, 0.0); },
        [&] { ops::adam_update_(gw, gg7, gm, gv, {}, 1e-3, 0.0); });
    expect_same_error<InternalError>(
        "adam_update_ with m and v the same tensor",
        [&] { ops::adam_update_(w, g, m, m, {}, 1e-3, 0.0); },
        [&] { ops::adam_update_(gw, gg, gm, gm, {}, 1e-3, 0.0); });
    ops::AdamArgs step0;
    step0.step = 0;
    expect_same_error<InternalError>(
        "adam_update_ with step 0", [&] { ops::adam_update_(w, g, m, v, step0, 1e-3, 0.0); },
        [&] { ops::adam_update_(gw, gg, gm, gv, step0, 1e-3, 0.0); });
    Tensor u7 = Tensor::zeros({7}), gu7 = on_gpu(u7);
    expect_same_error<ShapeError>(
        "adam_direction_ with a wrong-sized u",
        [&] { ops::adam_direction_(u7, w, g, m, v, {}, 0.0); },
        [&] { ops::adam_direction_(gu7, gw, gg, gm, gv, {}, 0.0); });
    expect_same_error<InternalError>(
        "adam_direction_ with u aliasing m", [&] { ops::adam_direction_(m, w, g, m, v, {}, 0.0); },
        [&] { ops::adam_direction_(gm, gw, gg, gm, gv, {}, 0.0); });
  }
  // The device stays usable after the errors.
  EXPECT_TRUE(
      near("add after the argument errors", ops::add(g23, g23), ops::add(a23, a23), kEltRtol, 0));
}

// The device allocator (core/block_cache.h under the CUDA runtime): a repeated set of tensor
// sizes is served from the cache after the first round (no cudaMalloc), live bytes go back to
// where they were, and empty_cache returns every cached block to the driver.
TEST(CudaAllocator, SteadyStateTakesNothingFromTheDriver) {
  ADA_REQUIRE_GPU();
  const std::vector<Shape> shapes = {{7}, {1000}, {512, 513}, {64, 64, 56, 56}, {3, 1 << 20}};
  auto round_of_tensors = [&] {
    std::vector<Tensor> ts;
    for (const Shape& s : shapes) ts.push_back(Tensor::zeros(s, DType::f32, gpu()));
    return ts;
  };
  round_of_tensors();
  const cuda::MemoryStats before = cuda::memory_stats(0);
  for (int i = 0; i < 3; ++i) round_of_tensors();
  const cuda::MemoryStats after = cuda::memory_stats(0);
  EXPECT_EQ(after.system_allocs, before.system_allocs) << "cudaMalloc in steady state";
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_GE(after.reserved, after.allocated + int64_t{64} * 64 * 56 * 56 * 4);
  cuda::empty_cache(0);
  const cuda::MemoryStats emptied = cuda::memory_stats(0);
  EXPECT_EQ(emptied.reserved, emptied.allocated) << "empty_cache left cached blocks";
  EXPECT_GT(emptied.system_frees, after.system_frees);
}

// BatchUploader: the uploaded tensors hold the host's values as the compute stream sees them —
// right after upload() and with heavy compute queued ahead of the copy — through growing,
// shrinking and new fields; a batch stays intact through the next upload (the documented
// lifetime), and uploading CUDA tensors is a DeviceError.
TEST(CudaUpload, BatchesArriveBeforeTheComputeStreamUsesThem) {
  ADA_REQUIRE_GPU();
  cuda::BatchUploader up(0);
  Generator g(5);
  const Tensor a = Tensor::randn({1024, 1024}, g).to(gpu());
  std::map<std::string, Tensor> previous_host, previous_dev;
  for (int k = 0; k < 8; ++k) {
    const int64_t rows = k == 3 ? 200 : k == 5 ? 7 : 64 + k;  // grow, shrink, grow back
    std::map<std::string, Tensor> host;
    host["image"] = rand_cpu({rows, 3, 17}, 300 + k);
    std::vector<int64_t> labels(rows);
    for (int64_t i = 0; i < rows; ++i) labels[i] = (i * 7 + k) % 10;
    host["label"] = Tensor::from_vector<int64_t>(labels, {rows});
    if (k >= 4) host["mask"] = Tensor::full({rows, 5}, static_cast<double>(k), DType::f32);
    // Compute queued before the upload: the copy may overlap it, the uses below may not precede it.
    Tensor busy = a;
    for (int i = 0; i < 6; ++i) busy = ops::matmul(busy, a);
    const std::map<std::string, Tensor> dev = up.upload(host);
    ASSERT_EQ(dev.size(), host.size());
    for (const auto& [name, t] : host) {
      const Tensor& d = dev.at(name);
      EXPECT_EQ(d.shape(), t.shape()) << name;
      EXPECT_EQ(d.dtype(), t.dtype()) << name;
      EXPECT_FALSE(d.device().is_cpu()) << name;
      const Tensor back = d.to(Device::cpu());  // on the compute stream
      EXPECT_EQ(0, std::memcmp(back.raw_data(), t.raw_data(), t.nbytes()))
          << name << " of batch " << k;
    }
    // A device op on the fresh batch, queued at once.
    EXPECT_TRUE(same_f("scale of the uploaded image, batch " + std::to_string(k),
                       ops::scale(dev.at("image"), 2.f), ops::scale(host.at("image"), 2.f)));
    // The batch before this one is still intact.
    for (const auto& [name, t] : previous_host) {
      const Tensor back = previous_dev.at(name).to(Device::cpu());
      EXPECT_EQ(0, std::memcmp(back.raw_data(), t.raw_data(), t.nbytes()))
          << name << " of batch " << k - 1;
    }
    previous_host = host;
    previous_dev = dev;
  }
  std::map<std::string, Tensor> on_device;
  on_device["x"] = Tensor::zeros({3}, DType::f32, gpu());
  EXPECT_THROW(up.upload(on_device), DeviceError);
}

// 16-bit activations (tests/util/act16_cases.h): each op on the GPU takes the same bf16/f16
// inputs as the CPU, gives every output in the same dtype, and values within one rounding of the
// 16-bit type (its ulp relative to the value: 2^-7 bf16, 2^-10 f16, where the two devices' f32
// results fall on either side of a rounding boundary) plus the fp32 tolerances above (rtol 1e-4;
// atol 1e-3 for the products and convolutions, sums of up to 64 products of N(0,1) values, 1e-4
// elsewhere). Products of 16-bit operands run under the matching train.precision.
TEST(CudaOps, SixteenBitActivationsMatchTheCpu) {
  ADA_REQUIRE_GPU();
  struct Restore {
    ~Restore() { set_cuda_matmul_precision(Precision::fp32); }
  } restore;
  for (const testing::Act16Case& c : testing::act16_cases()) {
    for (DType act : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(c.name + " on " + dtype_name(act) + " activations");
      const std::vector<Tensor> in = testing::act16_inputs(c, act, 7);
      std::vector<Tensor> dev;
      for (const Tensor& t : in) dev.push_back(on_gpu(t));
      const std::vector<Tensor> want = c.run(in, act);
      set_cuda_matmul_precision(!c.products16        ? Precision::fp32
                                : act == DType::bf16 ? Precision::bf16
                                                     : Precision::fp16);
      const std::vector<Tensor> got = c.run(dev, act);
      set_cuda_matmul_precision(Precision::fp32);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE("output " + std::to_string(i));
        ASSERT_EQ(got[i].dtype(), want[i].dtype());
        const bool is_act = c.outputs[i] == testing::Kind::act;
        const double ulp = !is_act ? 0 : act == DType::bf16 ? 0x1p-7 : 0x1p-10;
        const bool products = c.products16 || c.name == "conv2d";
        EXPECT_TRUE(close_to_cpu(ops::to_dtype(got[i], DType::f32),
                                 ops::to_dtype(want[i], DType::f32), ulp + 1e-4,
                                 products ? 1e-3 : 1e-4));
      }
    }
  }
}

}  // namespace
}  // namespace ada
