// CUDA batch-norm (over dim 1 of [N, C, ...]) and layer-norm (over the last dim) of core/ops.h,
// forward and backward. Own kernels rather than cuDNN, to follow core/backend/cpu/norm.cc
// formula for formula: statistics are two-pass and accumulate in double; batch-norm splits each
// channel over many blocks, layer-norm runs one block per row; every sum has a fixed order, so
// results are bit-reproducible.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/op_shapes.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/cuda/kernel_util.cuh"

namespace ada::cuda {
namespace {
using namespace kernel;

// ---- batch-norm ------------------------------------------------------------------------------

constexpr int kBnThreads = 512;

using backend::BnGeom;
using backend::bn_geom;

// Element m (0 <= m < n*inner) of channel ch.
__device__ __forceinline__ int64_t bn_index(const BnGeom& g, int64_t ch, int64_t m) {
  const int64_t i = m / g.inner, k = m - i * g.inner;
  return (i * g.c + ch) * g.inner + k;
}

// A per-channel statistic: f32, [c], on the device of x.
void check_stat(const char* op, const Tensor& x, const Tensor& t, int64_t c, const char* arg) {
  require_f32(op, {&x, &t});
  ADA_CHECK_ARG(t.shape() == Shape{c}, ShapeError)
      << op << ": " << arg << " " << t.str() << " should be [" << c << "]";
}

// Training-mode batch-norm is split so that every channel's statistics use many blocks (one
// block per channel left most of the GPU idle: 64 blocks for ResNet-50's first stages): the
// blocks of (channel, chunk) write double partial sums, a per-channel kernel combines them in
// chunk order (fixed: bit-reproducible), and the element-wise pass runs over rows of `inner`.

// Sum of f(flat index) over elements [e0, e1) of channel ch, this thread's share.
template <class F>
__device__ double bn_chunk_sum(const BnGeom& g, int64_t ch, int64_t e0, int64_t e1, F f) {
  double acc = 0.0;
  int64_t e = e0 + threadIdx.x;
  if (e >= e1) return acc;
  int64_t i = e / g.inner, k = e - i * g.inner;
  for (; e < e1; e += blockDim.x) {
    acc += f((i * g.c + ch) * g.inner + k);
    k += blockDim.x;
    while (k >= g.inner) {
      k -= g.inner;
      ++i;
    }
  }
  return acc;
}
struct BnValue {
  const float* x;
  __device__ double operator()(int64_t i) const { return static_cast<double>(x[i]); }
};
struct BnSquaredDeviation {
  const float* x;
  double mean;
  __device__ double operator()(int64_t i) const {
    const double d = static_cast<double>(x[i]) - mean;
    return d * d;
  }
};
struct BnProduct {  // dy * (x - mean)
  const float* dy;
  const float* x;
  double mean;
  __device__ double operator()(int64_t i) const {
    return static_cast<double>(dy[i]) * (static_cast<double>(x[i]) - mean);
  }
};

// Chunks per channel: about 1,024 blocks in all, each chunk at least 2,048 elements.
int64_t bn_chunks(const BnGeom& g) {
  const int64_t want = (1024 + g.c - 1) / std::max<int64_t>(g.c, 1);
  return std::max<int64_t>(1, std::min<int64_t>({want, g.count() / 2048, 1024}));
}

// part[ch * S + s] = sum over chunk s of channel ch (grid: c x S). mean_or_null: deviations
// from mean_or_null[ch] squared instead of values.
__global__ void bn_stat_partial_kernel(const float* x, const double* mean_or_null, BnGeom g,
                                       int64_t chunk, double* part) {
  __shared__ double sh[33];
  const int64_t S = gridDim.y;
  for (int64_t ch = blockIdx.x; ch < g.c; ch += gridDim.x) {
    const int64_t e0 = static_cast<int64_t>(blockIdx.y) * chunk;
    const int64_t e1 = e0 + chunk < g.count() ? e0 + chunk : g.count();
    double v = mean_or_null ? bn_chunk_sum(g, ch, e0, e1, BnSquaredDeviation{x, mean_or_null[ch]})
                            : bn_chunk_sum(g, ch, e0, e1, BnValue{x});
    v = block_sum(v, sh);
    if (threadIdx.x == 0) part[ch * S + blockIdx.y] = v;
  }
}

// out[ch] = (sum of part[ch * S .. ch * S + S) in order) / m.
__global__ void bn_combine_kernel(const double* part, int64_t c, int64_t S, double m, double* out) {
  for (int64_t ch = global_tid(); ch < c; ch += global_stride()) {
    double t = 0.0;
    for (int64_t s = 0; s < S; ++s) t += part[ch * S + s];
    out[ch] = t / m;
  }
}

// From mean and var: the saved statistics, the running-stat update (rm non-null) and the affine
// ab[ch] = gamma*invstd, ab[c + ch] = beta - mean*gamma*invstd, as the CPU forms them.
__global__ void bn_train_finish_kernel(const double* mean, const double* var, const float* gamma,
                                       const float* beta, int64_t c, double m, float momentum,
                                       float eps, float* save_mean, float* save_invstd, float* rm,
                                       float* rv, float* ab) {
  for (int64_t ch = global_tid(); ch < c; ch += global_stride()) {
    const double invstd = 1.0 / sqrt(var[ch] + eps);
    ab[ch] = static_cast<float>(gamma[ch] * invstd);
    ab[c + ch] = static_cast<float>(beta[ch] - mean[ch] * gamma[ch] * invstd);
    save_mean[ch] = static_cast<float>(mean[ch]);
    save_invstd[ch] = static_cast<float>(invstd);
    if (rm) {
      rm[ch] = static_cast<float>((1.0 - momentum) * rm[ch] + momentum * mean[ch]);
      rv[ch] = static_cast<float>((1.0 - momentum) * rv[ch] + momentum * var[ch] * m / (m - 1.0));
    }
  }
}

// y = x * ab[ch] + ab[c + ch] over rows r = (n, ch) of `inner` contiguous elements.
__global__ void bn_apply_rows_kernel(const float* x, const float* ab, float* y, int64_t rows,
                                     int64_t c, int64_t inner) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t ch = r % c;
    const float a = ab[ch], b = ab[c + ch];
    const float* xr = x + r * inner;
    float* yr = y + r * inner;
    for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < inner;
         k += static_cast<int64_t>(gridDim.x) * blockDim.x)
      yr[k] = xr[k] * a + b;
  }
}
dim3 bn_rows_grid(const BnGeom& g) {
  const int64_t rows = g.n * g.c;
  return dim3(static_cast<unsigned>(std::min<int64_t>((g.inner + kThreads - 1) / kThreads, 64)),
              static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535)));
}

// Per-channel affine of eval mode: ab[ch] = gamma*invstd, ab[c + ch] = beta - mean*gamma*invstd.
__global__ void bn_eval_coef_kernel(const float* gamma, const float* beta, const float* rm,
                                    const float* rv, int64_t c, float eps, float* ab) {
  for (int64_t ch = global_tid(); ch < c; ch += global_stride()) {
    const double invstd = 1.0 / sqrt(static_cast<double>(rv[ch]) + eps);
    ab[ch] = static_cast<float>(gamma[ch] * invstd);
    ab[c + ch] = static_cast<float>(beta[ch] - rm[ch] * gamma[ch] * invstd);
  }
}

__global__ void bn_eval_apply_kernel(const float* x, const float* ab, float* y, int64_t total,
                                     int64_t c, int64_t inner) {
  for (int64_t i = global_tid(); i < total; i += global_stride()) {
    const int64_t ch = (i / inner) % c;
    y[i] = x[i] * ab[ch] + ab[c + ch];
  }
}

// Training-mode gradients, split as the forward: per (channel, chunk) partial sums of dy and
// dy*(x-mean); per channel dgamma = sum(dy*(x-mean))*invstd, dbeta = sum(dy) and the
// coefficients of dx = gamma*invstd * (dy - mean(dy) - (x-mean) * dgamma*invstd/m).
__global__ void bn_backward_partial_kernel(const float* dy, const float* x, const float* save_mean,
                                           BnGeom g, int64_t chunk, double* part_dy,
                                           double* part_dyx) {
  __shared__ double sh[33];
  const int64_t S = gridDim.y;
  for (int64_t ch = blockIdx.x; ch < g.c; ch += gridDim.x) {
    const int64_t e0 = static_cast<int64_t>(blockIdx.y) * chunk;
    const int64_t e1 = e0 + chunk < g.count() ? e0 + chunk : g.count();
    double a = bn_chunk_sum(g, ch, e0, e1, BnValue{dy});
    a = block_sum(a, sh);
    double b = bn_chunk_sum(g, ch, e0, e1, BnProduct{dy, x, static_cast<double>(save_mean[ch])});
    b = block_sum(b, sh);
    if (threadIdx.x == 0) {
      part_dy[ch * S + blockIdx.y] = a;
      part_dyx[ch * S + blockIdx.y] = b;
    }
  }
}

// coef[4 ch .. 4 ch + 3] = {gamma*invstd, mean(dy), dgamma*invstd/m, mean}.
__global__ void bn_backward_finish_kernel(const double* part_dy, const double* part_dyx,
                                          const float* gamma, const float* save_mean,
                                          const float* save_invstd, int64_t c, int64_t S, double m,
                                          float* dgamma, float* dbeta, double* coef) {
  for (int64_t ch = global_tid(); ch < c; ch += global_stride()) {
    double sdy = 0.0, sdyx = 0.0;
    for (int64_t s = 0; s < S; ++s) {
      sdy += part_dy[ch * S + s];
      sdyx += part_dyx[ch * S + s];
    }
    const double invstd = save_invstd[ch];
    const double dg = sdyx * invstd;
    dgamma[ch] = static_cast<float>(dg);
    dbeta[ch] = static_cast<float>(sdy);
    coef[4 * ch] = gamma[ch] * invstd;
    coef[4 * ch + 1] = sdy / m;
    coef[4 * ch + 2] = dg * invstd / m;
    coef[4 * ch + 3] = save_mean[ch];
  }
}

__global__ void bn_backward_rows_kernel(const float* dy, const float* x, const double* coef,
                                        float* dx, int64_t rows, int64_t c, int64_t inner) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const double* k = coef + 4 * (r % c);
    const double kk = k[0], mean_dy = k[1], cf = k[2], mean = k[3];
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < inner;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t i = r * inner + j;
      dx[i] = static_cast<float>(kk * (dy[i] - mean_dy - (x[i] - mean) * cf));
    }
  }
}

// Eval-mode gradients per channel (statistics constant): dx = dy * gamma*invstd. As the CPU,
// the dgamma terms dy*(x - running_mean) are formed in f32 and summed in double.
__global__ void bn_eval_backward_kernel(const float* dy, const float* x, const float* gamma,
                                        const float* rm, const float* rv, float eps, BnGeom g,
                                        float* dx, float* dgamma, float* dbeta) {
  __shared__ double sh[33];
  const int64_t cnt = g.count();
  for (int64_t ch = blockIdx.x; ch < g.c; ch += gridDim.x) {
    const double invstd = 1.0 / sqrt(static_cast<double>(rv[ch]) + eps);
    const float k = static_cast<float>(gamma[ch] * invstd);
    const float mu = rm[ch];
    double sdy = 0.0, sdyx = 0.0;
    for (int64_t e = threadIdx.x; e < cnt; e += blockDim.x) {
      const int64_t i = bn_index(g, ch, e);
      const float gy = dy[i];
      sdy += gy;
      sdyx += gy * (x[i] - mu);
      dx[i] = gy * k;
    }
    sdy = block_sum(sdy, sh);
    sdyx = block_sum(sdyx, sh);
    if (threadIdx.x == 0) {
      dgamma[ch] = static_cast<float>(sdyx * invstd);
      dbeta[ch] = static_cast<float>(sdy);
    }
  }
}

// ---- layer-norm ------------------------------------------------------------------------------

int64_t ln_width(const char* op, const Tensor& x, const Tensor& gamma) {
  ADA_CHECK_ARG(x.dim() >= 1, ShapeError) << op << ": input must have at least 1 dim";
  const int64_t d = x.size(-1);
  ADA_CHECK_ARG(gamma.shape() == Shape{d}, ShapeError)
      << op << ": gamma " << gamma.str() << " should be [" << d << "] for input " << x.str();
  return d;
}

__global__ void ln_forward_kernel(const float* x, const float* gamma, const float* beta,
                                  float eps, int64_t rows, int64_t d, float* y, float* save_mean,
                                  float* save_rstd) {
  __shared__ double sh[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += xr[j];
    s = block_sum(s, sh);
    const double mean = s / d;
    double ss = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) ss += (xr[j] - mean) * (xr[j] - mean);
    ss = block_sum(ss, sh);
    const double rstd = 1.0 / sqrt(ss / d + eps);
    if (threadIdx.x == 0) {
      save_mean[r] = static_cast<float>(mean);
      save_rstd[r] = static_cast<float>(rstd);
    }
    const float fm = static_cast<float>(mean), fr = static_cast<float>(rstd);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      yr[j] = (xr[j] - fm) * fr * gamma[j] + beta[j];
  }
}

// dx per row: rstd * (dy*gamma - mean(dy*gamma) - xhat * mean(dy*gamma*xhat)).
__global__ void ln_backward_dx_kernel(const float* dy, const float* x, const float* gamma,
                                      const float* save_mean, const float* save_rstd,
                                      int64_t rows, int64_t d, float* dx) {
  __shared__ double sh[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * d;
    const float* gr = dy + r * d;
    float* dr = dx + r * d;
    const double mean = save_mean[r], rstd = save_rstd[r];
    double s1 = 0.0, s2 = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double xh = (xr[j] - mean) * rstd, dxh = static_cast<double>(gr[j]) * gamma[j];
      s1 += dxh;
      s2 += dxh * xh;
    }
    s1 = block_sum(s1, sh);
    s2 = block_sum(s2, sh);
    const double m1 = s1 / d, m2 = s2 / d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double xh = (xr[j] - mean) * rstd;
      dr[j] = static_cast<float>(rstd * (static_cast<double>(gr[j]) * gamma[j] - m1 - xh * m2));
    }
  }
}

// dgamma/dbeta in two fixed-order stages. Stage 1: block (x = 32 columns, y = 8 row lanes) of
// grid (column tiles, chunks) writes, for its chunk of rows, pg[chunk*d + j] = sum dy*xhat and
// pb[chunk*d + j] = sum dy.
constexpr int kLnCols = 32, kLnLanes = 8;

__global__ void ln_param_partial_kernel(const float* dy, const float* x, const float* save_mean,
                                        const float* save_rstd, int64_t rows, int64_t d,
                                        int64_t chunks, double* pg, double* pb) {
  __shared__ double shg[kLnLanes][kLnCols], shb[kLnLanes][kLnCols];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = rows * chunk / chunks, r1 = rows * (chunk + 1) / chunks;
  for (int64_t j0 = static_cast<int64_t>(blockIdx.x) * kLnCols; j0 < d;
       j0 += static_cast<int64_t>(gridDim.x) * kLnCols) {
    const int64_t j = j0 + tx;
    double ag = 0.0, ab = 0.0;
    if (j < d) {
      for (int64_t r = r0 + ty; r < r1; r += kLnLanes) {
        const double mean = save_mean[r], rstd = save_rstd[r];
        const float g = dy[r * d + j];
        const double xh = (x[r * d + j] - mean) * rstd;
        ag += g * xh;
        ab += g;
      }
    }
    shg[ty][tx] = ag;
    shb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && j < d) {
      double sg = 0.0, sb = 0.0;
      for (int k = 0; k < kLnLanes; ++k) {
        sg += shg[k][tx];
        sb += shb[k][tx];
      }
      pg[chunk * d + j] = sg;
      pb[chunk * d + j] = sb;
    }
    __syncthreads();
  }
}

// Stage 2: dgamma[j] = sum over chunks of pg, dbeta[j] likewise, in chunk order.
__global__ void ln_param_final_kernel(const double* pg, const double* pb, int64_t d,
                                      int64_t chunks, float* dgamma, float* dbeta) {
  for (int64_t j = global_tid(); j < d; j += global_stride()) {
    double sg = 0.0, sb = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      sg += pg[c * d + j];
      sb += pb[c * d + j];
    }
    dgamma[j] = static_cast<float>(sg);
    dbeta[j] = static_cast<float>(sb);
  }
}

}  // namespace

Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                        Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                        Tensor& save_mean, Tensor& save_invstd) {
  const char* op = "batch_norm_train";
  const int dev = require_f32(op, {&x, &gamma, &beta});
  const BnGeom g = bn_geom(op, x, gamma, beta);
  const bool track = running_mean.defined();
  if (track) {
    check_stat(op, x, running_mean, g.c, "running_mean");
    check_stat(op, x, running_var, g.c, "running_var");
  }
  ADA_CHECK_ARG(g.count() > 1, ShapeError)
      << "batch_norm_train: needs more than one value per channel in training mode, got input "
      << x.str();
  Tensor y = Tensor::empty(x.shape(), DType::f32, x.device());
  save_mean = Tensor::empty({g.c}, DType::f32, x.device());
  save_invstd = Tensor::empty({g.c}, DType::f32, x.device());
  if (g.c == 0) return y;
  const int64_t S = bn_chunks(g), chunk = (g.count() + S - 1) / S;
  const double m = static_cast<double>(g.count());
  cudaStream_t st = stream(dev);
  Scratch part(static_cast<size_t>(g.c * S) * sizeof(double), dev);
  Scratch stats(2 * static_cast<size_t>(g.c) * sizeof(double), dev);  // mean, var
  Scratch ab(2 * static_cast<size_t>(g.c) * sizeof(float), dev);
  double* mean = stats.as<double>();
  double* var = mean + g.c;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(g.c, 65535)), static_cast<unsigned>(S));
  bn_stat_partial_kernel<<<grid, kBnThreads, 0, st>>>(x.data<float>(), nullptr, g, chunk,
                                                      part.as<double>());
  ADA_CUDA_LAUNCH_CHECK();
  bn_combine_kernel<<<blocks_for(g.c), kThreads, 0, st>>>(part.as<const double>(), g.c, S, m, mean);
  ADA_CUDA_LAUNCH_CHECK();
  bn_stat_partial_kernel<<<grid, kBnThreads, 0, st>>>(x.data<float>(), mean, g, chunk,
                                                      part.as<double>());
  ADA_CUDA_LAUNCH_CHECK();
  bn_combine_kernel<<<blocks_for(g.c), kThreads, 0, st>>>(part.as<const double>(), g.c, S, m, var);
  ADA_CUDA_LAUNCH_CHECK();
  bn_train_finish_kernel<<<blocks_for(g.c), kThreads, 0, st>>>(
      mean, var, gamma.data<float>(), beta.data<float>(), g.c, m, momentum, eps,
      save_mean.data<float>(), save_invstd.data<float>(),
      track ? running_mean.data<float>() : nullptr, track ? running_var.data<float>() : nullptr,
      ab.as<float>());
  ADA_CUDA_LAUNCH_CHECK();
  if (g.n * g.inner > 0)
    bn_apply_rows_kernel<<<bn_rows_grid(g), kThreads, 0, st>>>(x.data<float>(), ab.as<const float>(),
                                                              y.data<float>(), g.n * g.c, g.c,
                                                              g.inner);
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}

Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, float eps) {
  const char* op = "batch_norm_eval";
  const int dev = require_f32(op, {&x, &gamma, &beta});
  const BnGeom g = bn_geom(op, x, gamma, beta);
  check_stat(op, x, running_mean, g.c, "running_mean");
  check_stat(op, x, running_var, g.c, "running_var");
  Tensor y = Tensor::empty(x.shape(), DType::f32, x.device());
  const int64_t total = x.numel();
  if (total == 0) return y;
  cudaStream_t s = stream(dev);
  Scratch ab(2 * static_cast<size_t>(g.c) * sizeof(float), dev);
  bn_eval_coef_kernel<<<blocks_for(g.c), kThreads, 0, s>>>(
      gamma.data<float>(), beta.data<float>(), running_mean.data<float>(),
      running_var.data<float>(), g.c, eps, ab.as<float>());
  ADA_CUDA_LAUNCH_CHECK();
  bn_eval_apply_kernel<<<blocks_for(total), kThreads, 0, s>>>(x.data<float>(), ab.as<float>(),
                                                              y.data<float>(), total, g.c,
                                                              g.inner);
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}

BatchNormGrads batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd) {
  const char* op = "batch_norm_backward";
  const int dev = require_f32(op, {&dy, &x, &gamma});
  const BnGeom g = bn_geom(op, x, gamma, Tensor());
  check_same_shape(dy, x, op);
  check_stat(op, x, save_mean, g.c, "save_mean");
  check_stat(op, x, save_invstd, g.c, "save_invstd");
  const Device dv = x.device();
  BatchNormGrads r{Tensor::empty(x.shape(), DType::f32, dv), Tensor::empty({g.c}, DType::f32, dv),
                   Tensor::empty({g.c}, DType::f32, dv)};
  if (g.c == 0) return r;
  if (g.count() == 0) {  // no values: zero parameter gradients, an empty dx
    ADA_CUDA_CHECK(cudaMemsetAsync(r.dgamma.data<float>(), 0, g.c * sizeof(float), stream(dev)));
    ADA_CUDA_CHECK(cudaMemsetAsync(r.dbeta.data<float>(), 0, g.c * sizeof(float), stream(dev)));
    return r;
  }
  const int64_t S = bn_chunks(g), chunk = (g.count() + S - 1) / S;
  cudaStream_t st = stream(dev);
  Scratch part(2 * static_cast<size_t>(g.c * S) * sizeof(double), dev);
  Scratch coef(4 * static_cast<size_t>(g.c) * sizeof(double), dev);
  double* part_dy = part.as<double>();
  double* part_dyx = part_dy + g.c * S;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(g.c, 65535)), static_cast<unsigned>(S));
  bn_backward_partial_kernel<<<grid, kBnThreads, 0, st>>>(dy.data<float>(), x.data<float>(),
                                                          save_mean.data<float>(), g, chunk,
                                                          part_dy, part_dyx);
  ADA_CUDA_LAUNCH_CHECK();
  bn_backward_finish_kernel<<<blocks_for(g.c), kThreads, 0, st>>>(
      part_dy, part_dyx, gamma.data<float>(), save_mean.data<float>(), save_invstd.data<float>(),
      g.c, S, static_cast<double>(g.count()), r.dgamma.data<float>(), r.dbeta.data<float>(),
      coef.as<double>());
  ADA_CUDA_LAUNCH_CHECK();
  bn_backward_rows_kernel<<<bn_rows_grid(g), kThreads, 0, st>>>(
      dy.data<float>(), x.data<float>(), coef.as<const double>(), r.dx.data<float>(), g.n * g.c,
      g.c, g.inner);
  ADA_CUDA_LAUNCH_CHECK();
  return r;
}

BatchNormGrads batch_norm_eval_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                        const Tensor& running_mean, const Tensor& running_var,
                                        float eps) {
  const char* op = "batch_norm_eval_backward";
  const int dev = require_f32(op, {&dy, &x, &gamma});
  const BnGeom g = bn_geom(op, x, gamma, Tensor());
  check_same_shape(dy, x, op);
  check_stat(op, x, running_mean, g.c, "running_mean");
  check_stat(op, x, running_var, g.c, "running_var");
  const Device dv = x.device();
  BatchNormGrads r{Tensor::empty(x.shape(), DType::f32, dv), Tensor::empty({g.c}, DType::f32, dv),
                   Tensor::empty({g.c}, DType::f32, dv)};
  if (g.c == 0) return r;
  bn_eval_backward_kernel<<<row_blocks(g.c), kBnThreads, 0, stream(dev)>>>(
      dy.data<float>(), x.data<float>(), gamma.data<float>(), running_mean.data<float>(),
      running_var.data<float>(), eps, g, r.dx.data<float>(), r.dgamma.data<float>(),
      r.dbeta.data<float>());
  ADA_CUDA_LAUNCH_CHECK();
  return r;
}

Tensor layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& save_mean, Tensor& save_rstd) {
  const char* op = "layer_norm_forward";
  const int dev = require_f32(op, {&x, &gamma, &beta});
  const int64_t d = ln_width(op, x, gamma);
  check_same_shape(gamma, beta, "layer_norm_forward (gamma vs beta)");
  const int64_t rows = d ? x.numel() / d : 0;
  Tensor y = Tensor::empty(x.shape(), DType::f32, x.device());
  save_mean = Tensor::empty({rows}, DType::f32, x.device());
  save_rstd = Tensor::empty({rows}, DType::f32, x.device());
  if (rows == 0) return y;
  ln_forward_kernel<<<row_blocks(rows), row_threads(d), 0, stream(dev)>>>(
      x.data<float>(), gamma.data<float>(), beta.data<float>(), eps, rows, d, y.data<float>(),
      save_mean.data<float>(), save_rstd.data<float>());
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_rstd) {
  const char* op = "layer_norm_backward";
  const int dev = require_f32(op, {&dy, &x, &gamma, &save_mean, &save_rstd});
  const int64_t d = ln_width(op, x, gamma);
  check_same_shape(dy, x, op);
  const int64_t rows = d ? x.numel() / d : 0;
  ADA_CHECK_ARG(save_mean.numel() == rows && save_rstd.numel() == rows, ShapeError)
      << "layer_norm_backward: saved statistics do not match input " << x.str();
  const Device dv = x.device();
  if (rows == 0)
    return {Tensor::empty(x.shape(), DType::f32, dv), Tensor::zeros({d}, DType::f32, dv),
            Tensor::zeros({d}, DType::f32, dv)};
  LayerNormGrads r{Tensor::empty(x.shape(), DType::f32, dv), Tensor::empty({d}, DType::f32, dv),
                   Tensor::empty({d}, DType::f32, dv)};
  cudaStream_t s = stream(dev);
  ln_backward_dx_kernel<<<row_blocks(rows), row_threads(d), 0, s>>>(
      dy.data<float>(), x.data<float>(), gamma.data<float>(), save_mean.data<float>(),
      save_rstd.data<float>(), rows, d, r.dx.data<float>());
  ADA_CUDA_LAUNCH_CHECK();
  // About 64 rows per chunk, at most 256 chunks.
  const int64_t chunks = std::min<int64_t>((rows + 63) / 64, 256);
  const int64_t col_tiles = std::min<int64_t>((d + kLnCols - 1) / kLnCols, 65535);
  Scratch partial(2 * static_cast<size_t>(chunks) * static_cast<size_t>(d) * sizeof(double), dev);
  double* pg = partial.as<double>();
  double* pb = pg + chunks * d;
  ln_param_partial_kernel<<<dim3(static_cast<unsigned>(col_tiles), static_cast<unsigned>(chunks)),
                            dim3(kLnCols, kLnLanes), 0, s>>>(
      dy.data<float>(), x.data<float>(), save_mean.data<float>(), save_rstd.data<float>(), rows,
      d, chunks, pg, pb);
  ADA_CUDA_LAUNCH_CHECK();
  ln_param_final_kernel<<<blocks_for(d), kThreads, 0, s>>>(pg, pb, d, chunks,
                                                           r.dgamma.data<float>(),
                                                           r.dbeta.data<float>());
  ADA_CUDA_LAUNCH_CHECK();
  return r;
}

}  // namespace ada::cuda
