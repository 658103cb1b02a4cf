// Batch-norm (over dim 1 of [N, C, ...]) and layer-norm (over the last dim).
// Statistics accumulate in double; batch-norm parallelises over channels, layer-norm over rows
// (its gamma/beta gradients are per-chunk partial sums combined in chunk order). The inner loops
// are `omp simd` reductions: vector lanes of double partial sums, combined in a fixed order for
// a given build (the same bits on every run), instead of one chain of dependent additions.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/backend/op_shapes.h"
#include "core/ops.h"

namespace ada::cpu {
namespace {
using backend::bn_geom;
using backend::BnGeom;

// Visits the rows of channel ch (one per image, g.inner contiguous elements): f(offset of the row).
template <class F>
inline void for_rows(const BnGeom& g, int64_t ch, F f) {
  for (int64_t i = 0; i < g.n; ++i) f((i * g.c + ch) * g.inner);
}

void check_stat(const char* op, const Tensor& t, int64_t c, const char* arg) {
  require_cpu_f32(op, {&t});
  ADA_CHECK_ARG(t.shape() == Shape{c}, ShapeError)
      << op << ": " << arg << " " << t.str() << " should be [" << c << "]";
}
}  // namespace

namespace {

// batch_norm_train, with a ReLU on the output in the normalising pass when Relu, after adding
// `residual` (when defined) there.
template <bool Relu>
Tensor bn_train(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                Tensor& save_mean, Tensor& save_invstd, const Tensor& residual = Tensor()) {
  require_cpu_f32(op, {&x, &gamma, &beta});
  BnGeom g = bn_geom(op, x, gamma, beta);
  if (residual.defined()) {
    require_cpu_f32(op, {&residual});
    check_same_shape(residual, x, op);
  }
  const bool track = running_mean.defined();
  if (track) {
    check_stat(op, running_mean, g.c, "running_mean");
    check_stat(op, running_var, g.c, "running_var");
  }
  ADA_CHECK_ARG(g.count() > 1, ShapeError)
      << op << ": needs more than one value per channel in training mode, got input " << x.str();
  Tensor y = Tensor::empty(x.shape());
  save_mean = Tensor::empty({g.c});
  save_invstd = Tensor::empty({g.c});
  const float* xp = x.data<float>();
  const float* rp = residual.defined() ? residual.data<float>() : nullptr;
  const float* gp = gamma.data<float>();
  const float* bp = beta.data<float>();
  float* yp = y.data<float>();
  float* mp = save_mean.data<float>();
  float* ip = save_invstd.data<float>();
  float* rmp = track ? running_mean.data<float>() : nullptr;
  float* rvp = track ? running_var.data<float>() : nullptr;
  const double m = static_cast<double>(g.count());
  parallel_for(0, g.c, 1, [&](int64_t b, int64_t e) {
    for (int64_t ch = b; ch < e; ++ch) {
      const int64_t n = g.inner;
      double s = 0;
      for_rows(g, ch, [&](int64_t base) {
        const float* xr = xp + base;
        double r = 0;
#pragma omp simd reduction(+ : r)
        for (int64_t k = 0; k < n; ++k) r += xr[k];
        s += r;
      });
      const double mean = s / m;
      double ss = 0;
      for_rows(g, ch, [&](int64_t base) {
        const float* xr = xp + base;
        double r = 0;
#pragma omp simd reduction(+ : r)
        for (int64_t k = 0; k < n; ++k) {
          const double d = xr[k] - mean;
          r += d * d;
        }
        ss += r;
      });
      const double var = ss / m;
      const double invstd = 1.0 / std::sqrt(var + eps);
      mp[ch] = static_cast<float>(mean);
      ip[ch] = static_cast<float>(invstd);
      const float a = static_cast<float>(gp[ch] * invstd);
      const float c0 = static_cast<float>(bp[ch] - mean * gp[ch] * invstd);
      for_rows(g, ch, [&](int64_t base) {
        const float* xr = xp + base;
        float* yr = yp + base;
        if (rp) {  // relu(y + residual): ops::add_relu's arithmetic on the normalised value
          const float* rr = rp + base;
#pragma omp simd
          for (int64_t k = 0; k < n; ++k) {
            const float v = xr[k] * a + c0;
            const float s = v + rr[k];
            yr[k] = s > 0.f ? s : 0.f;
          }
          return;
        }
#pragma omp simd
        for (int64_t k = 0; k < n; ++k) {
          const float v = xr[k] * a + c0;
          yr[k] = Relu ? (v > 0.f ? v : 0.f) : v;  // ops::relu's rule
        }
      });
      if (track) {
        rmp[ch] = static_cast<float>((1.0 - momentum) * rmp[ch] + momentum * mean);
        rvp[ch] = static_cast<float>((1.0 - momentum) * rvp[ch] + momentum * var * m / (m - 1.0));
      }
    }
  });
  return y;
}

}  // namespace

Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                        Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                        Tensor& save_mean, Tensor& save_invstd) {
  return bn_train<false>("batch_norm_train", x, gamma, beta, running_mean, running_var, momentum,
                         eps, save_mean, save_invstd);
}

Tensor batch_norm_relu_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                             Tensor& save_mean, Tensor& save_invstd, const Tensor& residual) {
  return bn_train<true>("batch_norm_relu_train", x, gamma, beta, running_mean, running_var,
                        momentum, eps, save_mean, save_invstd, residual);
}

Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, float eps) {
  require_cpu_f32("batch_norm_eval", {&x, &gamma, &beta});
  BnGeom g = bn_geom("batch_norm_eval", x, gamma, beta);
  check_stat("batch_norm_eval", running_mean, g.c, "running_mean");
  check_stat("batch_norm_eval", running_var, g.c, "running_var");
  Tensor y = Tensor::empty(x.shape());
  const float* xp = x.data<float>();
  const float* gp = gamma.data<float>();
  const float* bp = beta.data<float>();
  const float* rm = running_mean.data<float>();
  const float* rv = running_var.data<float>();
  float* yp = y.data<float>();
  parallel_for(0, g.c, 1, [&](int64_t b, int64_t e) {
    for (int64_t ch = b; ch < e; ++ch) {
      const double invstd = 1.0 / std::sqrt(static_cast<double>(rv[ch]) + eps);
      const float a = static_cast<float>(gp[ch] * invstd);
      const float c0 = static_cast<float>(bp[ch] - rm[ch] * gp[ch] * invstd);
      for_rows(g, ch, [&](int64_t base) {
        const float* xr = xp + base;
        float* yr = yp + base;
#pragma omp simd
        for (int64_t k = 0; k < g.inner; ++k) yr[k] = xr[k] * a + c0;
      });
    }
  });
  return y;
}

namespace {

// ops::relu_backward's rule, y > 0 ? g : 0, as a bit mask: GCC vectorises the loops below with
// it, not with the conditional.
inline float relu_grad(float g, float y) {
  uint32_t b;
  std::memcpy(&b, &g, sizeof b);
  b &= 0u - static_cast<uint32_t>(y > 0.f);
  std::memcpy(&g, &b, sizeof g);
  return g;
}

// batch_norm_backward of dy, masked by y > 0 (the gradient of a ReLU on y) when Relu.
template <bool Relu>
BatchNormGrads bn_backward(const char* op, const Tensor& dy, const Tensor& y, const Tensor& x,
                           const Tensor& gamma, const Tensor& save_mean,
                           const Tensor& save_invstd) {
  require_cpu_f32(op, {&dy, &x, &gamma});
  BnGeom g = bn_geom(op, x, gamma, Tensor());
  check_same_shape(dy, x, op);
  if (Relu) {
    require_cpu_f32(op, {&y});
    check_same_shape(y, x, op);
  }
  check_stat(op, save_mean, g.c, "save_mean");
  check_stat(op, save_invstd, g.c, "save_invstd");
  BatchNormGrads r{Tensor::empty(x.shape()), Tensor::empty({g.c}), Tensor::empty({g.c})};
  const float* yp = Relu ? y.data<float>() : nullptr;
  const float* gy = dy.data<float>();
  const float* xp = x.data<float>();
  const float* gp = gamma.data<float>();
  const float* mp = save_mean.data<float>();
  const float* ip = save_invstd.data<float>();
  float* dx = r.dx.data<float>();
  float* dg = r.dgamma.data<float>();
  float* db = r.dbeta.data<float>();
  const double m = static_cast<double>(g.count());
  parallel_for(0, g.c, 1, [&](int64_t b, int64_t e) {
    for (int64_t ch = b; ch < e; ++ch) {
      const double mean = mp[ch], invstd = ip[ch];
      const int64_t n = g.inner;
      double sdy = 0, sdyx = 0;
      for_rows(g, ch, [&](int64_t base) {
        const float* xr = xp + base;
        const float* gr = gy + base;
        const float* yr = Relu ? yp + base : nullptr;
        double r1 = 0, r2 = 0;
#pragma omp simd reduction(+ : r1, r2)
        for (int64_t k = 0; k < n; ++k) {
          const float gk = Relu ? relu_grad(gr[k], yr[k]) : gr[k];
          r1 += gk;
          r2 += gk * (xr[k] - mean);
        }
        sdy += r1;
        sdyx += r2;
      });
      const double dgamma = sdyx * invstd;
      dg[ch] = static_cast<float>(dgamma);
      db[ch] = static_cast<float>(sdy);
      // dx = gamma*invstd/m * (m*dy - sum(dy) - xhat*dgamma), xhat = (x-mean)*invstd, as
      // dx = a*dy + b*x + c with the constants formed in double and applied in f32.
      const double k = gp[ch] * invstd;
      const double mean_dy = sdy / m, coef = dgamma * invstd / m;
      const float a = static_cast<float>(k), bx = static_cast<float>(-k * coef),
                  c = static_cast<float>(k * (coef * mean - mean_dy));
      for_rows(g, ch, [&](int64_t base) {
        const float* xr = xp + base;
        const float* gr = gy + base;
        const float* yr = Relu ? yp + base : nullptr;
        float* dr = dx + base;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) {
          const float gj = Relu ? relu_grad(gr[j], yr[j]) : gr[j];
          dr[j] = a * gj + bx * xr[j] + c;
        }
      });
    }
  });
  return r;
}

}  // namespace

BatchNormGrads batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd) {
  return bn_backward<false>("batch_norm_backward", dy, Tensor(), x, gamma, save_mean, save_invstd);
}

BatchNormGrads batch_norm_relu_backward(const Tensor& dy, const Tensor& y, const Tensor& x,
                                        const Tensor& gamma, const Tensor& save_mean,
                                        const Tensor& save_invstd) {
  return bn_backward<true>("batch_norm_relu_backward", dy, y, x, gamma, save_mean, save_invstd);
}

BatchNormGrads batch_norm_eval_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                        const Tensor& running_mean, const Tensor& running_var,
                                        float eps) {
  require_cpu_f32("batch_norm_eval_backward", {&dy, &x, &gamma});
  BnGeom g = bn_geom("batch_norm_eval_backward", x, gamma, Tensor());
  check_same_shape(dy, x, "batch_norm_eval_backward");
  check_stat("batch_norm_eval_backward", running_mean, g.c, "running_mean");
  check_stat("batch_norm_eval_backward", running_var, g.c, "running_var");
  BatchNormGrads r{Tensor::empty(x.shape()), Tensor::empty({g.c}), Tensor::empty({g.c})};
  const float* gy = dy.data<float>();
  const float* xp = x.data<float>();
  const float* gp = gamma.data<float>();
  const float* rm = running_mean.data<float>();
  const float* rv = running_var.data<float>();
  float* dx = r.dx.data<float>();
  float* dg = r.dgamma.data<float>();
  float* db = r.dbeta.data<float>();
  parallel_for(0, g.c, 1, [&](int64_t b, int64_t e) {
    for (int64_t ch = b; ch < e; ++ch) {
      const double invstd = 1.0 / std::sqrt(static_cast<double>(rv[ch]) + eps);
      double sdy = 0, sdyx = 0;
      const float k = static_cast<float>(gp[ch] * invstd);
      const double mean = rm[ch];
      for_rows(g, ch, [&](int64_t base) {
        const float* xr = xp + base;
        const float* gr = gy + base;
        float* dr = dx + base;
        double r1 = 0, r2 = 0;
#pragma omp simd reduction(+ : r1, r2)
        for (int64_t j = 0; j < g.inner; ++j) {
          r1 += gr[j];
          r2 += gr[j] * (xr[j] - mean);
          dr[j] = gr[j] * k;
        }
        sdy += r1;
        sdyx += r2;
      });
      dg[ch] = static_cast<float>(sdyx * invstd);
      db[ch] = static_cast<float>(sdy);
    }
  });
  return r;
}

namespace {
int64_t ln_width(const char* op, const Tensor& x, const Tensor& gamma) {
  ADA_CHECK_ARG(x.dim() >= 1, ShapeError) << op << ": input must have at least 1 dim";
  const int64_t d = x.size(-1);
  ADA_CHECK_ARG(gamma.shape() == Shape{d}, ShapeError)
      << op << ": gamma " << gamma.str() << " should be [" << d << "] for input " << x.str();
  return d;
}
}  // namespace

Tensor layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& save_mean, Tensor& save_rstd) {
  require_cpu_f32("layer_norm_forward", {&x, &gamma, &beta});
  const int64_t d = ln_width("layer_norm_forward", x, gamma);
  check_same_shape(gamma, beta, "layer_norm_forward (gamma vs beta)");
  const int64_t rows = d ? x.numel() / d : 0;
  Tensor y = Tensor::empty(x.shape());
  save_mean = Tensor::empty({rows});
  save_rstd = Tensor::empty({rows});
  const float* xp = x.data<float>();
  const float* gp = gamma.data<float>();
  const float* bp = beta.data<float>();
  float* yp = y.data<float>();
  float* mp = save_mean.data<float>();
  float* rp = save_rstd.data<float>();
  parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(d, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   const float* xr = xp + r * d;
                   double s = 0;
#pragma omp simd reduction(+ : s)
                   for (int64_t j = 0; j < d; ++j) s += xr[j];
                   const double mean = s / d;
                   double ss = 0;
#pragma omp simd reduction(+ : ss)
                   for (int64_t j = 0; j < d; ++j) ss += (xr[j] - mean) * (xr[j] - mean);
                   const double rstd = 1.0 / std::sqrt(ss / d + eps);
                   mp[r] = static_cast<float>(mean);
                   rp[r] = static_cast<float>(rstd);
                   const float fm = static_cast<float>(mean), fr = static_cast<float>(rstd);
                   float* yr = yp + r * d;
#pragma omp simd
                   for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - fm) * fr * gp[j] + bp[j];
                 }
               });
  return y;
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_rstd) {
  require_cpu_f32("layer_norm_backward", {&dy, &x, &gamma, &save_mean, &save_rstd});
  const int64_t d = ln_width("layer_norm_backward", x, gamma);
  check_same_shape(dy, x, "layer_norm_backward");
  const int64_t rows = d ? x.numel() / d : 0;
  ADA_CHECK_ARG(save_mean.numel() == rows && save_rstd.numel() == rows, ShapeError)
      << "layer_norm_backward: saved statistics do not match input " << x.str();
  LayerNormGrads r{Tensor::empty(x.shape()), Tensor::zeros({d}), Tensor::zeros({d})};
  const float* gy = dy.data<float>();
  const float* xp = x.data<float>();
  const float* gp = gamma.data<float>();
  const float* mp = save_mean.data<float>();
  const float* rp = save_rstd.data<float>();
  float* dx = r.dx.data<float>();
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(num_threads(), rows));
  std::vector<std::vector<double>> pg(chunks, std::vector<double>(d, 0.0)), pb = pg;
  parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    const float* gam = gp;  // a local: the vectoriser does not hoist loads through the closure
    for (int64_t c = cb; c < ce; ++c) {
      double* ag = pg[c].data();
      double* ab = pb[c].data();
      for (int64_t row = rows * c / chunks; row < rows * (c + 1) / chunks; ++row) {
        const float* xr = xp + row * d;
        const float* gr = gy + row * d;
        const double mean = mp[row], rstd = rp[row];
        double s1 = 0, s2 = 0;  // sum(dxhat), sum(dxhat * xhat)
#pragma omp simd reduction(+ : s1, s2)
        for (int64_t j = 0; j < d; ++j) {
          const double xh = (xr[j] - mean) * rstd, dxh = static_cast<double>(gr[j]) * gam[j];
          s1 += dxh;
          s2 += dxh * xh;
          ag[j] += gr[j] * xh;
          ab[j] += gr[j];
        }
        const double m1 = s1 / d, m2 = s2 / d;
        float* dr = dx + row * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {
          const double xh = (xr[j] - mean) * rstd;
          dr[j] = static_cast<float>(rstd * (static_cast<double>(gr[j]) * gam[j] - m1 - xh * m2));
        }
      }
    }
  });
  float* dg = r.dgamma.data<float>();
  float* db = r.dbeta.data<float>();
  for (int64_t j = 0; j < d; ++j) {
    double sg = 0, sb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      sg += pg[c][j];
      sb += pb[c][j];
    }
    dg[j] = static_cast<float>(sg);
    db[j] = static_cast<float>(sb);
  }
  return r;
}

}  // namespace ada::cpu
