// Softmax, log-softmax and softmax cross-entropy over the last dim, parallel over rows.
// Max-subtracted for stability; sums in double. The exponentials are Eigen's vectorised f32 exp
// (about 1 ulp) and the max and sums `omp simd` reductions (a fixed order per build).
#include <Eigen/Core>
#include <cmath>
#include <limits>

#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/backend/op_shapes.h"
#include "core/ops.h"

namespace ada::cpu {
namespace {
// Calls f(row_in, row_out, width) for each row in parallel.
template <class F>
Tensor rowwise(const char* op, const Tensor& x, F f) {
  require_cpu_f32(op, {&x});
  ADA_CHECK_ARG(x.dim() >= 1, ShapeError) << op << ": input must have at least 1 dim";
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  Tensor y = Tensor::empty(x.shape());
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(d, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) f(xp + r * d, yp + r * d, d);
               });
  return y;
}

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

// The largest value, NaNs passed over (as std::max(mx, x[j]) would, which GCC 12 does not
// vectorise: a scalar loop, as slow as the exponentials of the row). `x > mx ? x : mx` is one
// maxps a vector; the maximum is exact, so the order of the lanes changes nothing.
float row_max(const float* x, int64_t d) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < d; ++j) mx = x[j] > mx ? x[j] : mx;
  return mx;
}

double row_sum(const float* x, int64_t d) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < d; ++j) s += x[j];
  return s;
}

// y = exp(x - mx), returns the sum of y in double.
double exp_shifted(const float* x, float mx, float* y, int64_t d) {
  ArrayMap(y, d) = (ConstArrayMap(x, d) - mx).exp();
  return row_sum(y, d);
}

void log_softmax_row(const float* x, float* y, int64_t d) {
  const float mx = row_max(x, d);
  const double s = exp_shifted(x, mx, y, d);  // y as scratch
  const float lse = mx + static_cast<float>(std::log(s));
  ArrayMap(y, d) = ConstArrayMap(x, d) - lse;
}

// Calls f(dy_row, y_row, dx_row, width) for each row in parallel.
template <class F>
Tensor rowwise_backward(const char* op, const Tensor& dy, const Tensor& y, F f) {
  require_cpu_f32(op, {&dy, &y});
  check_same_shape(dy, y, op);
  const int64_t d = y.dim() ? y.size(-1) : 1, rows = d ? y.numel() / d : 0;
  Tensor dx = Tensor::empty(y.shape());
  const float* gp = dy.data<float>();
  const float* yp = y.data<float>();
  float* dp = dx.data<float>();
  parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(d, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) f(gp + r * d, yp + r * d, dp + r * d, d);
               });
  return dx;
}
}  // namespace

Tensor softmax(const Tensor& x) {
  return rowwise("softmax", x, [](const float* in, float* out, int64_t d) {
    const double s = exp_shifted(in, row_max(in, d), out, d);
    ArrayMap(out, d) *= static_cast<float>(1.0 / s);
  });
}

namespace {
// dx = y * (g - sum(g*y)) * scale over the rows (scale 1: plain softmax, exact).
Tensor scaled_softmax_backward(const char* op, const Tensor& dy, const Tensor& y, float scale) {
  return rowwise_backward(op, dy, y,
                          [scale](const float* g, const float* yv, float* dx, int64_t d) {
                            double s = 0;
                            for (int64_t j = 0; j < d; ++j) s += static_cast<double>(g[j]) * yv[j];
                            const float fs = static_cast<float>(s);
                            for (int64_t j = 0; j < d; ++j) dx[j] = yv[j] * (g[j] - fs) * scale;
                          });
}
}  // namespace

Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  return scaled_softmax_backward("softmax_backward", dy, y, 1.f);
}

Tensor attention_softmax(const Tensor& scores, const Tensor& key_bias, int64_t heads, float scale) {
  require_cpu_f32("attention_softmax", {&scores});
  if (key_bias.defined()) require_cpu_f32("attention_softmax", {&key_bias});
  backend::check_attention_softmax(scores, key_bias, heads);
  const int64_t d = scores.size(2), rows = scores.size(0) * scores.size(1);
  const int64_t rows_per_example = heads * scores.size(1);
  Tensor y = Tensor::empty(scores.shape());
  const float* xp = scores.data<float>();
  const float* bp = key_bias.defined() ? key_bias.data<float>() : nullptr;
  float* yp = y.data<float>();
  parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(d, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   const float* in = xp + r * d;
                   float* out = yp + r * d;
                   // scale, then the bias: two roundings, as the separate ops make them.
                   for (int64_t j = 0; j < d; ++j) out[j] = in[j] * scale;
                   if (bp) {
                     const float* m = bp + (r / rows_per_example) * d;
                     for (int64_t j = 0; j < d; ++j) out[j] += m[j];
                   }
                   const double sum = exp_shifted(out, row_max(out, d), out, d);
                   ArrayMap(out, d) *= static_cast<float>(1.0 / sum);
                 }
               });
  return y;
}

Tensor attention_softmax_backward(const Tensor& dy, const Tensor& y, float scale) {
  return scaled_softmax_backward("attention_softmax_backward", dy, y, scale);
}

Tensor log_softmax(const Tensor& x) {
  return rowwise("log_softmax", x, log_softmax_row);
}

Tensor log_softmax_backward(const Tensor& dy, const Tensor& y) {
  return rowwise_backward("log_softmax_backward", dy, y,
                          [](const float* g, const float* yv, float* dx, int64_t d) {
                            const float fs = static_cast<float>(row_sum(g, d));
                            ArrayMap(dx, d) = ConstArrayMap(g, d) - ConstArrayMap(yv, d).exp() * fs;
                          });
}

Tensor argmax_rows(const Tensor& x) {
  require_cpu_f32("argmax_rows", {&x});
  backend::check_argmax_rows(x);
  const int64_t n = x.size(0), c = x.size(1);
  Tensor out = Tensor::empty({n}, DType::i64);
  const float* p = x.data<float>();
  int64_t* o = out.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const float* r = p + i * c;
    int64_t best = 0;
    for (int64_t j = 1; j < c; ++j)
      if (r[j] > r[best]) best = j;
    o[i] = best;
  }
  return out;
}

namespace {
void check_ce(const char* op, const Tensor& logits, const Tensor& targets, float smoothing) {
  require_cpu_f32(op, {&logits});
  require_index(op, targets, "targets");
  ADA_CHECK_ARG(logits.dim() == 2, ShapeError)
      << op << ": logits must be [N, C], got " << logits.str();
  ADA_CHECK_ARG(targets.dim() == 1 && targets.size(0) == logits.size(0), ShapeError)
      << op << ": targets " << targets.str() << " should be [" << logits.size(0) << "]";
  ADA_CHECK_ARG(smoothing >= 0.f && smoothing <= 1.f, ShapeError)
      << op << ": label_smoothing must be in [0, 1], got " << smoothing;
}
}  // namespace

Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, float smoothing,
                             int64_t ignore_index, Tensor& save_logp) {
  check_ce("cross_entropy_forward", logits, targets, smoothing);
  save_logp = ops::log_softmax(logits);
  const int64_t n = logits.size(0), c = logits.size(1);
  const float* lp = save_logp.data<float>();
  double total = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = index_at(targets, i);
    if (t == ignore_index) continue;
    ADA_CHECK_ARG(t >= 0 && t < c, ShapeError)
        << "cross_entropy: target " << t << " at row " << i << " is outside [0, " << c
        << ") (and is not ignore_index " << ignore_index << ")";
    double row = -(1.0 - smoothing) * lp[i * c + t];
    if (smoothing > 0.f) {
      double s = 0;
      for (int64_t j = 0; j < c; ++j) s += lp[i * c + j];
      row -= smoothing * s / static_cast<double>(c);
    }
    total += row;
    ++count;
  }
  Tensor loss = Tensor::empty({});
  loss.data<float>()[0] = count ? static_cast<float>(total / static_cast<double>(count)) : 0.f;
  return loss;
}

Tensor cross_entropy_backward(const Tensor& dloss_t, const Tensor& save_logp, const Tensor& targets,
                              float smoothing, int64_t ignore_index) {
  const float dloss = dloss_t.data<float>()[0];
  check_ce("cross_entropy_backward", save_logp, targets, smoothing);
  const int64_t n = save_logp.size(0), c = save_logp.size(1);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = index_at(targets, i);
    if (t == ignore_index) continue;
    // (the forward checks too, but this op is callable on its own: no write outside the row)
    ADA_CHECK_ARG(t >= 0 && t < c, ShapeError)
        << "cross_entropy_backward: target " << t << " at row " << i << " is outside [0, " << c
        << ") (and is not ignore_index " << ignore_index << ")";
    ++count;
  }
  if (count == 0) return Tensor::zeros(save_logp.shape());
  // Every row is written below (an ignored one with zeros): no zero-fill pass first.
  Tensor dx = Tensor::empty(save_logp.shape());
  const float* lp = save_logp.data<float>();
  float* dp = dx.data<float>();
  const float k = dloss / static_cast<float>(count), uni = smoothing / static_cast<float>(c);
  parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t t = index_at(targets, i);
      if (t == ignore_index) {
        ArrayMap(dp + i * c, c).setZero();
        continue;
      }
      ArrayMap(dp + i * c, c) = k * (ConstArrayMap(lp + i * c, c).exp() - uni);
      dp[i * c + t] -= k * (1.f - smoothing);
    }
  });
  return dx;
}

}  // namespace ada::cpu
