// CUDA softmax, log-softmax and their gradients over the last dim, and softmax cross-entropy
// (forward and backward) of core/ops.h. One block per row, max-subtracted, sums in double in a
// fixed pattern (results are bit-reproducible); semantics and argument checks mirror
// core/backend/cpu/softmax.cc. An out-of-range target is reported as the CPU does, as a
// deferred device error (cuda_common.h: raised at the host's next wait for the device).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/cuda/kernel_util.cuh"
#include "core/backend/op_shapes.h"

namespace ada::cuda {
namespace {
using namespace kernel;

// Block-wide max returned to every thread, as kernel::block_sum (sh holds 33 values).
__device__ float block_max(float v, float* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < nw ? sh[lane] : -INFINITY;
    t = warp_max(t);
    if (lane == 0) sh[32] = t;
  }
  __syncthreads();
  const float m = sh[32];
  __syncthreads();
  return m;
}

// out = exp(in - mx) / (their sum in double) over one row of width d (in may be out): each
// thread rescales exactly the elements it wrote.
template <class T>
__device__ void exp_normalize_row(const T* in, float* out, float mx, int64_t d, double* shd) {
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float e = expf(ld(in, j) - mx);
    out[j] = e;
    s += static_cast<double>(e);
  }
  s = block_sum(s, shd);
  const float inv = static_cast<float>(1.0 / s);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) out[j] *= inv;
}

// y = softmax(x) (log_softmax when kLog) over rows of width d, as the CPU: float max; softmax
// sums the float exps in double and scales by float(1/sum); log-softmax subtracts
// max + float(log(sum of double exps)).
// x is f32 or (cross-entropy's 16-bit logits) a 16-bit activation type T, read as f32; y is f32.
template <bool kLog, class T>
__global__ void softmax_rows_kernel(const T* x, float* y, int64_t rows, int64_t d) {
  __shared__ double shd[33];
  __shared__ float shf[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    float* yr = y + r * d;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) mx = fmaxf(mx, ld(xr, j));
    mx = block_max(mx, shf);
    if (kLog) {
      double s = 0.0;
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
        s += exp(static_cast<double>(ld(xr, j) - mx));
      s = block_sum(s, shd);
      const float lse = mx + static_cast<float>(log(s));
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = ld(xr, j) - lse;
    } else {
      exp_normalize_row(xr, yr, mx, d, shd);
    }
  }
}

// softmax: dx = y * (g - sum(g*y)) * scale (attention_softmax's scale; 1 otherwise, exact);
// log-softmax (kLog): dx = g - exp(y) * sum(g).
// g, y and dx are f32 or a 16-bit activation type (T; read as f32, dx rounded once).
template <bool kLog, class T>
__global__ void softmax_backward_rows_kernel(const T* g, const T* y, T* dx, int64_t rows, int64_t d,
                                             float scale) {
  __shared__ double shd[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gr = g + r * d;
    const T* yr = y + r * d;
    T* dr = dx + r * d;
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      s += kLog ? static_cast<double>(ld(gr, j))
                : static_cast<double>(ld(gr, j)) * static_cast<double>(ld(yr, j));
    s = block_sum(s, shd);
    const float fs = static_cast<float>(s);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float gj = ld(gr, j), yj = ld(yr, j);
      st(dr, j, kLog ? gj - expf(yj) * fs : yj * (gj - fs) * scale);
    }
  }
}

// attention_softmax: the row's inputs are t = scale*x (+ bias of the row's example), rounded as
// the separate ops round them (no fused multiply-add), then softmax_rows_kernel's softmax. The
// scores and probabilities are f32 or a 16-bit activation type (T): t is recomputed from x in
// each pass rather than kept in y (a 16-bit y would round it; for f32 it also reads x three
// times instead of writing and rereading y).
template <class T>
__global__ void attention_softmax_kernel(const T* x, const float* bias, T* y, int64_t rows,
                                         int64_t d, int64_t rows_per_example, float scale) {
  __shared__ double shd[33];
  __shared__ float shf[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    const float* br = bias ? bias + (r / rows_per_example) * d : nullptr;
    T* yr = y + r * d;
    auto t_at = [&](int64_t j) {
      float t = __fmul_rn(ld(xr, j), scale);
      if (br) t = __fadd_rn(t, br[j]);
      return t;
    };
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) mx = fmaxf(mx, t_at(j));
    mx = block_max(mx, shf);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      s += static_cast<double>(expf(t_at(j) - mx));
    s = block_sum(s, shd);
    const float inv = static_cast<float>(1.0 / s);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) st(yr, j, expf(t_at(j) - mx) * inv);
  }
}

// softmax_backward_rows_kernel a warp a row (kernel_util.cuh), the same per-element arithmetic.
template <bool kLog, class T>
__global__ void softmax_backward_warp_kernel(const T* g, const T* y, T* dx, int64_t rows, int64_t d,
                                             float scale) {
  constexpr int V = kVec16<T>, I = kWarpRowIters<T>;
  const int64_t nv = d / V;
  for (int64_t r = warp_row(); r < rows; r += warp_row_stride()) {
    float gv[I][V], yv[I][V];
    warp_row_load(g + r * d, nv, gv);
    warp_row_load(y + r * d, nv, yv);
    double s = 0.0;
    warp_row_each<I, V>(nv, [&](int i, int j, int64_t) {
      s += kLog ? static_cast<double>(gv[i][j])
                : static_cast<double>(gv[i][j]) * static_cast<double>(yv[i][j]);
    });
    const float fs = static_cast<float>(warp_total(s));
    warp_row_store<T, I, V>(dx + r * d, nv, [&](int i, int j, int64_t) {
      return kLog ? gv[i][j] - expf(yv[i][j]) * fs : yv[i][j] * (gv[i][j] - fs) * scale;
    });
  }
}

// attention_softmax_kernel a warp a row (kernel_util.cuh): t kept in registers, the same
// per-element arithmetic; the max is exact in any order, the sum of exps is added in another
// fixed order.
template <class T>
__global__ void attention_softmax_warp_kernel(const T* x, const float* bias, T* y, int64_t rows,
                                              int64_t d, int64_t rows_per_example, float scale) {
  constexpr int V = kVec16<T>, I = kWarpRowIters<T>;
  const int64_t nv = d / V;
  for (int64_t r = warp_row(); r < rows; r += warp_row_stride()) {
    const float* br = bias ? bias + (r / rows_per_example) * d : nullptr;
    float t[I][V];
    warp_row_load(x + r * d, nv, t);
    float mx = -INFINITY;
    warp_row_each<I, V>(nv, [&](int i, int j, int64_t col) {
      float tj = __fmul_rn(t[i][j], scale);
      if (br) tj = __fadd_rn(tj, br[col]);
      t[i][j] = tj;
      mx = fmaxf(mx, tj);
    });
    mx = warp_max_all(mx);
    double s = 0.0;
    warp_row_each<I, V>(nv, [&](int i, int j, int64_t) {
      t[i][j] = expf(t[i][j] - mx);
      s += static_cast<double>(t[i][j]);
    });
    const float inv = static_cast<float>(1.0 / warp_total(s));
    warp_row_store<T, I, V>(y + r * d, nv, [&](int i, int j, int64_t) { return t[i][j] * inv; });
  }
}

template <bool kLog>
Tensor softmax_forward_impl(const char* op, const Tensor& x) {
  const int dev = require_f32(op, {&x});
  ADA_CHECK_ARG(x.dim() >= 1, ShapeError) << op << ": input must have at least 1 dim";
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  Tensor y = Tensor::empty(x.shape(), DType::f32, x.device());
  if (rows == 0) return y;
  softmax_rows_kernel<kLog><<<row_blocks(rows), row_threads(d), 0, stream(dev)>>>(
      x.data<float>(), y.data<float>(), rows, d);
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}

template <bool kLog>
Tensor softmax_backward_impl(const char* op, const Tensor& dy, const Tensor& y, float scale = 1.f) {
  const int dev = require_f32(op, {&dy, &y}, activation_type(dy));
  ADA_CHECK_ARG(dy.dtype() == y.dtype(), DTypeError)
      << op << ": dy " << dy.str() << " and y " << y.str() << " differ in dtype";
  check_same_shape(dy, y, op);
  const int64_t d = y.dim() ? y.size(-1) : 1, rows = d ? y.numel() / d : 0;
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
  if (rows == 0) return dx;
  with_float_type(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (warp_row_ok<T>(d, {dy.raw_data(), y.raw_data(), dx.raw_data()}))
      softmax_backward_warp_kernel<kLog><<<warp_row_blocks(rows), 32 * kWarpRows, 0, stream(dev)>>>(
          data_as<T>(dy), data_as<T>(y), data_as<T>(dx), rows, d, scale);
    else
      softmax_backward_rows_kernel<kLog><<<row_blocks(rows), row_threads(d), 0, stream(dev)>>>(
          data_as<T>(dy), data_as<T>(y), data_as<T>(dx), rows, d, scale);
  });
  ADA_CUDA_LAUNCH_CHECK();
  return dx;
}

// ---- cross-entropy ---------------------------------------------------------------------------

__device__ __forceinline__ int64_t load_index(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i]
              : static_cast<int64_t>(static_cast<const int32_t*>(p)[i]);
}

int check_ce(const char* op, const Tensor& logits, const Tensor& targets, float smoothing) {
  const int dev = require_f32(op, {&logits}, activation_type(logits));
  require_index(op, targets, "targets", dev);
  ADA_CHECK_ARG(logits.dim() == 2, ShapeError)
      << op << ": logits must be [N, C], got " << logits.str();
  ADA_CHECK_ARG(targets.dim() == 1 && targets.size(0) == logits.size(0), ShapeError)
      << op << ": targets " << targets.str() << " should be [" << logits.size(0) << "]";
  ADA_CHECK_ARG(smoothing >= 0.f && smoothing <= 1.f, ShapeError)
      << op << ": label_smoothing must be in [0, 1], got " << smoothing;
  return dev;
}

// row_loss[r] = (1-e)*(-lp[t]) + e*mean_c(-lp[c]) for rows whose target t is in range and not
// ignore_index, else 0. Rows with an out-of-range target lower *bad_row to their index.
__global__ void ce_rows_kernel(const float* lp, const void* targets, bool t64, int64_t n, int64_t c,
                               float smoothing, int64_t ignore_index, double* row_loss,
                               unsigned long long* bad_row) {
  __shared__ double shd[33];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const int64_t t = load_index(targets, t64, r);  // uniform over the block
    if (t == ignore_index || t < 0 || t >= c) {
      if (threadIdx.x == 0) {
        row_loss[r] = 0.0;
        if (t != ignore_index) atomicMin(bad_row, static_cast<unsigned long long>(r));
      }
      continue;
    }
    const float* lr = lp + r * c;
    double row = -(1.0 - smoothing) * lr[t];
    if (smoothing > 0.f) {
      double s = 0.0;
      for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += lr[j];
      s = block_sum(s, shd);
      row -= smoothing * s / static_cast<double>(c);
    }
    if (threadIdx.x == 0) row_loss[r] = row;
  }
}

// *loss = mean of row_loss over rows whose target is not ignore_index (0 if none). One block.
__global__ void ce_mean_kernel(const double* row_loss, const void* targets, bool t64, int64_t n,
                               int64_t ignore_index, float* loss) {
  __shared__ double shd[33];
  double total = 0.0, count = 0.0;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    if (load_index(targets, t64, r) == ignore_index) continue;
    total += row_loss[r];
    count += 1.0;
  }
  total = block_sum(total, shd);
  count = block_sum(count, shd);
  if (threadIdx.x == 0) *loss = count > 0.0 ? static_cast<float>(total / count) : 0.f;
}

// *count = number of rows whose target is not ignore_index. One block.
__global__ void ce_count_kernel(const void* targets, bool t64, int64_t n, int64_t ignore_index,
                                int64_t* count) {
  __shared__ double shd[33];
  double k = 0.0;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x)
    k += load_index(targets, t64, r) != ignore_index ? 1.0 : 0.0;
  k = block_sum(k, shd);
  if (threadIdx.x == 0) *count = static_cast<int64_t>(k);
}

// dx = k*(exp(lp) - e/C) - k*(1-e)*[j == t] with k = dloss/count on non-ignored rows, 0 on
// ignored rows and everywhere when count is 0. An out-of-range target only drops its one-hot term.
// dx in T: f32, or the 16-bit type of the logits' gradient (rounded once).
template <class T>
__global__ void ce_backward_kernel(const float* lp, const void* targets, bool t64, int64_t n,
                                   int64_t c, const float* dloss, float smoothing, float uni,
                                   int64_t ignore_index, const int64_t* count, T* dx) {
  const int64_t total = n * c, cnt = *count;
  const float k = cnt ? *dloss / static_cast<float>(cnt) : 0.f;
  for (int64_t e = global_tid(); e < total; e += global_stride()) {
    const int64_t i = e / c, j = e - i * c;
    const int64_t t = load_index(targets, t64, i);
    if (cnt == 0 || t == ignore_index) {
      st(dx, e, 0.f);
      continue;
    }
    float v = k * (expf(lp[e]) - uni);
    if (j == t) v -= k * (1.f - smoothing);
    dx[e] = v;
  }
}

}  // namespace

Tensor softmax(const Tensor& x) {
  return softmax_forward_impl<false>("softmax", x);
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  return softmax_backward_impl<false>("softmax_backward", dy, y);
}

Tensor attention_softmax(const Tensor& scores, const Tensor& key_bias, int64_t heads, float scale) {
  const int dev = require_f32("attention_softmax", {&scores}, activation_type(scores));
  if (key_bias.defined()) require_f32("attention_softmax", {&scores, &key_bias}, scores.dtype());
  ADA_CHECK_ARG(!key_bias.defined() || key_bias.dtype() == DType::f32, DTypeError)
      << "attention_softmax: key_bias " << key_bias.str() << " must be f32";
  backend::check_attention_softmax(scores, key_bias, heads);
  const int64_t d = scores.size(2), rows = scores.size(0) * scores.size(1);
  Tensor y = Tensor::empty(scores.shape(), scores.dtype(), scores.device());
  if (rows == 0 || d == 0) return y;
  const float* bias = key_bias.defined() ? key_bias.data<float>() : nullptr;
  with_float_type(scores.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (warp_row_ok<T>(d, {scores.raw_data(), y.raw_data()}))
      attention_softmax_warp_kernel<<<warp_row_blocks(rows), 32 * kWarpRows, 0, stream(dev)>>>(
          data_as<T>(scores), bias, data_as<T>(y), rows, d, heads * scores.size(1), scale);
    else
      attention_softmax_kernel<<<row_blocks(rows), row_threads(d), 0, stream(dev)>>>(
          data_as<T>(scores), bias, data_as<T>(y), rows, d, heads * scores.size(1), scale);
  });
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}

Tensor attention_softmax_backward(const Tensor& dy, const Tensor& y, float scale) {
  return softmax_backward_impl<false>("attention_softmax_backward", dy, y, scale);
}

Tensor log_softmax(const Tensor& x) {
  return softmax_forward_impl<true>("log_softmax", x);
}

Tensor log_softmax_backward(const Tensor& dy, const Tensor& y) {
  return softmax_backward_impl<true>("log_softmax_backward", dy, y);
}

namespace {
// One block per row. Each thread scans its strided columns left to right keeping the first
// largest non-NaN value; the block keeps the larger value, the smaller index on ties. Equals
// the CPU's scan (NaN never replaces; a NaN first value makes the row 0). 16-bit logits are
// read widened to f32 (exactly), so they give the indices of their f32 copy.
template <class T>
__global__ void argmax_rows_kernel(const T* x, int64_t n, int64_t c, int64_t* out) {
  __shared__ float sv[1024];
  __shared__ int64_t si[1024];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const T* row = x + r * c;
    float bv = 0.f;
    int64_t bi = -1;  // none yet
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float v = ld(row, j);
      if (v == v && (bi < 0 || v > bv)) {
        bv = v;
        bi = j;
      }
    }
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
      if (static_cast<int>(threadIdx.x) < w) {
        const float v = sv[threadIdx.x + w];
        const int64_t i = si[threadIdx.x + w];
        const int64_t mine = si[threadIdx.x];
        if (i >= 0 && (mine < 0 || v > sv[threadIdx.x] || (v == sv[threadIdx.x] && i < mine))) {
          sv[threadIdx.x] = v;
          si[threadIdx.x] = i;
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      const float first = ld(row, 0);
      out[r] = first != first || si[0] < 0 ? 0 : si[0];
    }
    __syncthreads();
  }
}
}  // namespace

Tensor argmax_rows(const Tensor& x) {
  const int dev = require_f32("argmax_rows", {&x}, activation_type(x));
  backend::check_argmax_rows(x);
  const int64_t n = x.size(0), c = x.size(1);
  Tensor out = Tensor::empty({n}, DType::i64, x.device());
  if (n == 0) return out;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    argmax_rows_kernel<<<row_blocks(n), row_threads(c), 0, stream(dev)>>>(data_as<T>(x), n, c,
                                                                          out.data<int64_t>());
  });
  ADA_CUDA_LAUNCH_CHECK();
  return out;
}

Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                             int64_t ignore_index, Tensor& save_logp) {
  const int dev = check_ce("cross_entropy_forward", logits, targets, label_smoothing);
  // The log-probabilities in f32 whatever the logits' dtype (log_softmax's kernel).
  save_logp = Tensor::empty(logits.shape(), DType::f32, logits.device());
  if (logits.numel() > 0) {
    with_float_type(logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      softmax_rows_kernel<true>
          <<<row_blocks(logits.size(0)), row_threads(logits.size(1)), 0, stream(dev)>>>(
              data_as<T>(logits), save_logp.data<float>(), logits.size(0), logits.size(1));
    });
    ADA_CUDA_LAUNCH_CHECK();
  }
  const int64_t n = logits.size(0), c = logits.size(1);
  if (n == 0) return Tensor::zeros({}, DType::f32, logits.device());
  Tensor loss = Tensor::empty({}, DType::f32, logits.device());
  const bool t64 = targets.dtype() == DType::i64;
  cudaStream_t s = stream(dev);
  Scratch buf(static_cast<size_t>(n) * sizeof(double) + sizeof(unsigned long long), dev);
  double* row_loss = buf.as<double>();
  auto* bad_row = reinterpret_cast<unsigned long long*>(row_loss + n);
  ADA_CUDA_CHECK(cudaMemsetAsync(bad_row, 0xFF, sizeof(unsigned long long), s));
  ce_rows_kernel<<<row_blocks(n), row_threads(c), 0, s>>>(
      save_logp.data<float>(), targets.raw_data(), t64, n, c, label_smoothing, ignore_index,
      row_loss, bad_row);
  ADA_CUDA_LAUNCH_CHECK();
  ce_mean_kernel<<<1, kThreads, 0, s>>>(row_loss, targets.raw_data(), t64, n, ignore_index,
                                        loss.data<float>());
  ADA_CUDA_LAUNCH_CHECK();
  // The CPU throws on the first non-ignored target outside [0, C); here the host learns of it
  // at its next wait for the device (no wait per loss).
  record_bad_index(bad_row, targets, kFaultCrossEntropyTarget, c, ignore_index, dev);
  return loss;
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& save_logp, const Tensor& targets,
                              float label_smoothing, int64_t ignore_index, DType out) {
  const int dev = check_ce("cross_entropy_backward", save_logp, targets, label_smoothing);
  require_on("cross_entropy_backward", dev, {&dloss});
  ADA_CHECK_ARG(save_logp.dtype() == DType::f32, DTypeError)
      << "cross_entropy_backward: save_logp " << save_logp.str() << " must be f32";
  const int64_t n = save_logp.size(0), c = save_logp.size(1);
  Tensor dx = Tensor::empty(save_logp.shape(), out, save_logp.device());
  if (n * c == 0) return dx;
  const bool t64 = targets.dtype() == DType::i64;
  cudaStream_t s = stream(dev);
  Scratch count(sizeof(int64_t), dev);
  ce_count_kernel<<<1, kThreads, 0, s>>>(targets.raw_data(), t64, n, ignore_index,
                                         count.as<int64_t>());
  ADA_CUDA_LAUNCH_CHECK();
  const float uni = label_smoothing / static_cast<float>(c);
  with_float_type(out, [&](auto tag) {
    using T = decltype(tag);
    ce_backward_kernel<<<blocks_for(n * c), kThreads, 0, s>>>(
        save_logp.data<float>(), targets.raw_data(), t64, n, c, dloss.data<float>(),
        label_smoothing, uni, ignore_index, count.as<const int64_t>(), data_as<T>(dx));
  });
  ADA_CUDA_LAUNCH_CHECK();
  return dx;
}

}  // namespace ada::cuda
