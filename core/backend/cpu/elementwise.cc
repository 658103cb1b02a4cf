// Elementwise ops, activations, broadcasts over bias dims, permute and reductions.
// Bandwidth-bound loops: one pass each, parallel over contiguous chunks. Reductions that feed
// norms and dot products accumulate in double, chunk sums combined in a fixed order.
#include <algorithm>
#include <cmath>
#include <vector>

#include <unsupported/Eigen/SpecialFunctions>  // vectorised erf (gelu)

#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/backend/op_shapes.h"
#include "core/ops.h"

namespace ada::cpu {

namespace {
template <class F>
Tensor map1(const char* op, const Tensor& a, F f) {
  require_cpu_f32(op, {&a});
  Tensor y = Tensor::empty(a.shape());
  const float* x = a.data<float>();
  float* o = y.data<float>();
  parallel_for(0, a.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] = f(x[i]);
  });
  return y;
}
template <class F>
void map2_into(const char* op, const Tensor& a, const Tensor& b, Tensor& y, F f) {
  require_cpu_f32(op, {&a, &b, &y});
  check_same_shape(a, b, op);
  check_same_shape(a, y, op);
  const float* x = a.data<float>();
  const float* z = b.data<float>();
  float* o = y.data<float>();
  parallel_for(0, a.numel(), kGrain, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) o[i] = f(x[i], z[i]);
  });
}
template <class F>
Tensor map2(const char* op, const Tensor& a, const Tensor& b, F f) {
  require_cpu_f32(op, {&a, &b});
  Tensor y = Tensor::empty(a.shape());
  map2_into(op, a, b, y, f);
  return y;
}
// Sum of f(i) over [0, n) in double, deterministic: fixed chunks (simd lanes inside, a fixed
// order per build), combined in order.
template <class F>
double reduce_double(int64_t n, F f) {
  constexpr int64_t kChunk = 1 << 16;
  int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(chunks), 0.0);
  parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      int64_t s = c * kChunk, t = std::min(n, s + kChunk);
      double acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int64_t i = s; i < t; ++i) acc += f(i);
      part[c] = acc;
    }
  });
  double total = 0;
  for (double p : part) total += p;
  return total;
}
}  // namespace

void fill_(Tensor& t, float value) {
  require_cpu_f32("fill_", {&t});
  float* p = t.data<float>();
  parallel_for(0, t.numel(), kGrain, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, value); });
}

Tensor add(const Tensor& a, const Tensor& b) {
  return map2("add", a, b, [](float x, float y) { return x + y; });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return map2("sub", a, b, [](float x, float y) { return x - y; });
}
void add_out(const Tensor& a, const Tensor& b, Tensor& out) {
  map2_into("add_out", a, b, out, [](float x, float y) { return x + y; });
}
void sub_out(const Tensor& a, const Tensor& b, Tensor& out) {
  map2_into("sub_out", a, b, out, [](float x, float y) { return x - y; });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return map2("mul", a, b, [](float x, float y) { return x * y; });
}
Tensor scale(const Tensor& a, float s) {
  return map1("scale", a, [s](float x) { return s * x; });
}

void scale_(Tensor& y, float s) {
  require_cpu_f32("scale_", {&y});
  float* p = y.data<float>();
  parallel_for(0, y.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] *= s;
  });
}

void axpby_(float alpha, const Tensor& x, float beta, Tensor& y) {
  require_cpu_f32("axpby_", {&x, &y});
  check_same_shape(x, y, "axpby_");
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  parallel_for(0, y.numel(), kGrain, [&](int64_t b, int64_t e) {
    if (beta == 1.f)
      for (int64_t i = b; i < e; ++i) yp[i] += alpha * xp[i];
    else
      for (int64_t i = b; i < e; ++i) yp[i] = alpha * xp[i] + beta * yp[i];
  });
}

Tensor add_bias(const Tensor& x, const Tensor& bias) {
  require_cpu_f32("add_bias", {&x, &bias});
  ADA_CHECK_ARG(x.dim() >= 1 && bias.dim() == 1 && bias.size(0) == x.size(-1), ShapeError)
      << "add_bias: bias " << bias.str() << " does not match the last dim of " << x.str();
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  Tensor y = Tensor::empty(x.shape());
  const float* xp = x.data<float>();
  const float* bp = bias.data<float>();
  float* yp = y.data<float>();
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r)
                   for (int64_t j = 0; j < n; ++j) yp[r * n + j] = xp[r * n + j] + bp[j];
               });
  return y;
}

Tensor bias_grad(const Tensor& dy) {
  require_cpu_f32("bias_grad", {&dy});
  ADA_CHECK_ARG(dy.dim() >= 1, ShapeError) << "bias_grad: needs at least 1 dim, got " << dy.str();
  const int64_t n = dy.size(-1), rows = n ? dy.numel() / n : 0;
  Tensor g = Tensor::empty({n});
  const float* p = dy.data<float>();
  float* gp = g.data<float>();
  parallel_for(0, n, 16, [&](int64_t b, int64_t e) {
    std::vector<double> acc(static_cast<size_t>(e - b), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = b; j < e; ++j) acc[j - b] += p[r * n + j];
    for (int64_t j = b; j < e; ++j) gp[j] = static_cast<float>(acc[j - b]);
  });
  return g;
}

Tensor add_channel_bias(const Tensor& x, const Tensor& bias) {
  require_cpu_f32("add_channel_bias", {&x, &bias});
  ADA_CHECK_ARG(x.dim() >= 2 && bias.dim() == 1 && bias.size(0) == x.size(1), ShapeError)
      << "add_channel_bias: bias " << bias.str() << " does not match dim 1 of " << x.str();
  const int64_t n = x.size(0), c = x.size(1), inner = x.numel() / std::max<int64_t>(1, n * c);
  Tensor y = Tensor::empty(x.shape());
  const float* xp = x.data<float>();
  const float* bp = bias.data<float>();
  float* yp = y.data<float>();
  parallel_for(0, n * c, 1, [&](int64_t b, int64_t e) {
    for (int64_t nc = b; nc < e; ++nc) {
      float v = bp[nc % c];
      for (int64_t i = 0; i < inner; ++i) yp[nc * inner + i] = xp[nc * inner + i] + v;
    }
  });
  return y;
}

Tensor channel_bias_grad(const Tensor& dy) {
  require_cpu_f32("channel_bias_grad", {&dy});
  ADA_CHECK_ARG(dy.dim() >= 2, ShapeError)
      << "channel_bias_grad: needs [N, C, ...], got " << dy.str();
  const int64_t n = dy.size(0), c = dy.size(1), inner = dy.numel() / std::max<int64_t>(1, n * c);
  Tensor g = Tensor::empty({c});
  const float* p = dy.data<float>();
  float* gp = g.data<float>();
  parallel_for(0, c, 1, [&](int64_t b, int64_t e) {
    for (int64_t ch = b; ch < e; ++ch) {
      double acc = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < inner; ++k) acc += p[(i * c + ch) * inner + k];
      gp[ch] = static_cast<float>(acc);
    }
  });
  return g;
}

Tensor permute(const Tensor& x, const std::vector<int>& perm) {
  require_cpu_f32("permute", {&x});
  const int nd = static_cast<int>(x.dim());
  const Shape out = backend::permuted_shape(x, perm);
  Tensor y = Tensor::empty(out);
  if (x.numel() == 0) return y;
  std::vector<int64_t> in_stride(nd, 1);
  for (int i = nd - 2; i >= 0; --i) in_stride[i] = in_stride[i + 1] * x.shape()[i + 1];
  // Stride in the input for each output dim.
  std::vector<int64_t> st(nd);
  for (int i = 0; i < nd; ++i) st[i] = in_stride[perm[i]];
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t last = nd ? out[nd - 1] : 1, rows = x.numel() / last;
  const int64_t last_stride = nd ? st[nd - 1] : 1;
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / last), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t rem = r, src = 0;
      for (int d = nd - 2; d >= 0; --d) {
        src += (rem % out[d]) * st[d];
        rem /= out[d];
      }
      float* dst = yp + r * last;
      for (int64_t j = 0; j < last; ++j) dst[j] = xp[src + j * last_stride];
    }
  });
  return y;
}

Tensor relu(const Tensor& x) {
  return map1("relu", x, [](float v) { return v > 0.f ? v : 0.f; });
}
Tensor relu_backward(const Tensor& dy, const Tensor& y) {
  return map2("relu_backward", dy, y, [](float g, float v) { return v > 0.f ? g : 0.f; });
}
Tensor add_relu(const Tensor& a, const Tensor& b) {
  return map2("add_relu", a, b, [](float x, float y) {
    const float s = x + y;
    return s > 0.f ? s : 0.f;
  });
}

// GELU through Eigen's vectorised erf (a rational interpolant, a few ulp; absolute error of
// gelu below 2e-6) and exp: about 30x std::erf's scalar loop.
Tensor gelu(const Tensor& x) {
  require_cpu_f32("gelu", {&x});
  Tensor y = Tensor::empty(x.shape());
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
    Eigen::Map<const Eigen::ArrayXf> v(xp + b, e - b);
    Eigen::Map<Eigen::ArrayXf>(yp + b, e - b) =
        0.5f * v * (1.f + (v * 0.70710678118654752440f).erf());
  });
  return y;
}
Tensor gelu_backward(const Tensor& dy, const Tensor& x) {
  require_cpu_f32("gelu_backward", {&dy, &x});
  check_same_shape(dy, x, "gelu_backward");
  Tensor dx = Tensor::empty(x.shape());
  const float* gp = dy.data<float>();
  const float* xp = x.data<float>();
  float* op = dx.data<float>();
  parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
    Eigen::Map<const Eigen::ArrayXf> g(gp + b, e - b), v(xp + b, e - b);
    const auto cdf = 0.5f * (1.f + (v * 0.70710678118654752440f).erf());
    const auto pdf = 0.39894228040143267794f * (-0.5f * v * v).exp();
    Eigen::Map<Eigen::ArrayXf>(op + b, e - b) = g * (cdf + v * pdf);
  });
  return dx;
}

Tensor tanh(const Tensor& x) {
  return map1("tanh", x, [](float v) { return std::tanh(v); });
}
Tensor tanh_backward(const Tensor& dy, const Tensor& y) {
  return map2("tanh_backward", dy, y, [](float g, float v) { return g * (1.f - v * v); });
}

namespace {
using backend::kept_shape;
using backend::reduced_mask;
using backend::squeezed_shape;
// Maps each input element to its output slot (keepdim layout) and visits it.
template <class F>
void for_each_reduced(const Shape& s, const std::vector<bool>& red, F f) {
  const int nd = static_cast<int>(s.size());
  Shape k = kept_shape(s, red);
  std::vector<int64_t> out_stride(nd, 1);
  for (int i = nd - 2; i >= 0; --i) out_stride[i] = out_stride[i + 1] * k[i + 1];
  std::vector<int64_t> idx(nd, 0);
  const int64_t n = shape_numel(s);
  int64_t o = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, o);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < s[d]) {
        if (!red[d]) o += out_stride[d];
        break;
      }
      if (!red[d]) o -= (s[d] - 1) * out_stride[d];
      idx[d] = 0;
    }
  }
}
}  // namespace

Tensor sum(const Tensor& x, const std::vector<int>& axes, bool keepdim) {
  require_cpu_f32("sum", {&x});
  auto red = reduced_mask(x.shape(), axes, "sum");
  Shape k = kept_shape(x.shape(), red);
  std::vector<double> acc(static_cast<size_t>(shape_numel(k)), 0.0);
  const float* p = x.data<float>();
  for_each_reduced(x.shape(), red, [&](int64_t i, int64_t o) { acc[o] += p[i]; });
  Tensor y = Tensor::empty(keepdim ? k : squeezed_shape(x.shape(), red));
  float* yp = y.data<float>();
  for (size_t i = 0; i < acc.size(); ++i) yp[i] = static_cast<float>(acc[i]);
  return y;
}

Tensor mean(const Tensor& x, const std::vector<int>& axes, bool keepdim) {
  Tensor y = ops::sum(x, axes, keepdim);
  int64_t count = y.numel() ? x.numel() / y.numel() : 0;
  if (count > 0)
    ops::scale_(y, 1.f / static_cast<float>(count));
  else
    ops::fill_(y, NAN);  // mean over an empty axis, as PyTorch
  return y;
}

Tensor sum_backward(const Tensor& dy, const Shape& x_shape, const std::vector<int>& axes) {
  require_cpu_f32("sum_backward", {&dy});
  auto red = reduced_mask(x_shape, axes, "sum_backward");
  ADA_CHECK_ARG(dy.numel() == shape_numel(kept_shape(x_shape, red)), ShapeError)
      << "sum_backward: gradient " << dy.str() << " does not match a reduction of "
      << shape_str(x_shape);
  Tensor dx = Tensor::empty(x_shape);
  const float* g = dy.data<float>();
  float* p = dx.data<float>();
  for_each_reduced(x_shape, red, [&](int64_t i, int64_t o) { p[i] = g[o]; });
  return dx;
}

double sum_all(const Tensor& x) {
  require_cpu_f32("sum_all", {&x});
  const float* p = x.data<float>();
  return reduce_double(x.numel(), [p](int64_t i) { return static_cast<double>(p[i]); });
}

double dot(const Tensor& a, const Tensor& b) {
  require_cpu_f32("dot", {&a, &b});
  ADA_CHECK_ARG(a.numel() == b.numel(), ShapeError)
      << "dot: " << a.str() << " and " << b.str() << " differ in size";
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  return reduce_double(a.numel(), [x, y](int64_t i) {
    return static_cast<double>(x[i]) * static_cast<double>(y[i]);
  });
}

double norm2_sq(const Tensor& a) {
  require_cpu_f32("norm2_sq", {&a});
  const float* x = a.data<float>();
  return reduce_double(
      a.numel(), [x](int64_t i) { return static_cast<double>(x[i]) * static_cast<double>(x[i]); });
}

bool all_finite(const Tensor& x) {
  require_cpu_f32("all_finite", {&x});
  const float* p = x.data<float>();
  double bad = reduce_double(x.numel(), [p](int64_t i) { return std::isfinite(p[i]) ? 0.0 : 1.0; });
  return bad == 0.0;
}

}  // namespace ada::cpu
