// CUDA max-, average- and global-average pooling on NCHW of core/ops.h (max-pool on channels-last
// NHWC too), forward and backward;
// windows, padding, divisors, argmax tie-breaking and checks as core/backend/cpu/pool.cc.
// One thread per output (forward) or input (avg backward, a gather in the CPU's summation
// order); max-pool backward scatters through the saved argmax with atomics, so overlapping
// windows (stride < kernel) add in no fixed order, except under deterministic algorithms
// (ops::set_deterministic_algorithms, ADA_CUDA_DETERMINISTIC=1): one thread a plane then adds its
// outputs in order, as the CPU, the same bits. Every kernel also takes 16-bit activations (T:
// float, __nv_bfloat16 or __half; read as f32, summed in f32 or double as for f32, the result
// rounded once; max-pool backward scatters into f32 and rounds the sums).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/cuda/kernel_util.cuh"

namespace ada::cuda {
namespace {
using namespace kernel;

// Plane geometry: input H x W, output P x Q, and the window parameters.
struct PoolGeom {
  int64_t H, W, P, Q;
  int kh, kw, sh, sw, ph, pw;
  bool count_include_pad;
};

PoolGeom pool_geom(const Shape& x, const Shape& out, const Pool2dParams& p) {
  return {x[2],       x[3],       out[2],  out[3],  p.kernel_h,         p.kernel_w,
          p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.count_include_pad};
}

// Output (i, j)'s window of a plane whose element (h, w) is xs[(h*W + w) * step]: its maximum
// into y[o] and its argmax (flat index h*W + w into the plane) into idx[o]; the first maximum in
// row-major window order wins, and a NaN wins at once.
template <class T>
__device__ void max_window(const T* xs, int64_t step, const PoolGeom& g, int64_t i, int64_t j, T* y,
                           int32_t* idx, int64_t o) {
  int64_t h0 = i * g.sh - g.ph, h1 = min(h0 + g.kh, g.H);
  h0 = max(h0, static_cast<int64_t>(0));
  int64_t w0 = j * g.sw - g.pw, w1 = min(w0 + g.kw, g.W);
  w0 = max(w0, static_cast<int64_t>(0));
  float best = -INFINITY;
  int64_t arg = h0 * g.W + w0;
  bool stop = false;
  for (int64_t h = h0; h < h1 && !stop; ++h)
    for (int64_t w = w0; w < w1; ++w) {
      const float v = ld(xs, (h * g.W + w) * step);
      if (v > best || isnan(v)) {
        best = v;
        arg = h * g.W + w;
        if (isnan(v)) {
          stop = true;
          break;
        }
      }
    }
  st(y, o, best);
  idx[o] = static_cast<int32_t>(arg);
}

// y and argmax of every NCHW output.
template <class T>
__global__ void max_pool_forward_kernel(const T* x, T* y, int32_t* idx, int64_t total, PoolGeom g) {
  for (int64_t o = global_tid(); o < total; o += global_stride()) {
    const int64_t j = o % g.Q, i = (o / g.Q) % g.P, plane = o / (g.P * g.Q);
    max_window(x + plane * g.H * g.W, 1, g, i, j, y, idx, o);
  }
}

// dx[plane, idx[o]] += dy[o] (dy f32 or 16-bit, read as f32); dx (f32) must be zeroed. Indices
// outside the plane are skipped.
template <class T>
__global__ void max_pool_backward_kernel(const T* dy, const int32_t* idx, float* dx, int64_t total,
                                         int64_t pq, int64_t hw) {
  for (int64_t o = global_tid(); o < total; o += global_stride()) {
    const int64_t k = idx[o];
    if (k >= 0 && k < hw) atomicAdd(dx + (o / pq) * hw + k, ld(dy, o));
  }
}

// Channels-last max-pool: output o of [N, P, Q, C] (consecutive threads on consecutive channels:
// coalesced reads), the same window scan and index (h*W + w in the channel's plane).
template <class T>
__global__ void max_pool_nhwc_forward_kernel(const T* x, T* y, int32_t* idx, int64_t total,
                                             int64_t c, PoolGeom g) {
  for (int64_t o = global_tid(); o < total; o += global_stride()) {
    const int64_t ch = o % c, pix = o / c;
    const int64_t j = pix % g.Q, i = (pix / g.Q) % g.P, n = pix / (g.P * g.Q);
    max_window(x + n * g.H * g.W * c + ch, c, g, i, j, y, idx, o);
  }
}

// dx[n, idx[o], ch] += dy[o] for channels-last [N, P, Q, C] outputs (as max_pool_backward_kernel).
template <class T>
__global__ void max_pool_nhwc_backward_kernel(const T* dy, const int32_t* idx, float* dx,
                                              int64_t total, int64_t c, int64_t pq, int64_t hw) {
  for (int64_t o = global_tid(); o < total; o += global_stride()) {
    const int64_t k = idx[o];
    if (k >= 0 && k < hw) atomicAdd(dx + ((o / (pq * c)) * hw + k) * c + o % c, ld(dy, o));
  }
}

// max_pool_backward_kernel's and max_pool_nhwc_backward_kernel's sums without atomics: one
// thread a plane (n, ch) adds its outputs' gradients in order, as the CPU's loop (the same bits).
// Output t of a plane is dy[plane * pq + t] in NCHW (c = 1), dy[(n * pq + t) * c + ch] in NHWC;
// its input element k is dx[plane * hw + k], or dx[(n * hw + k) * c + ch].
template <class T>
__global__ void max_pool_backward_ordered_kernel(const T* __restrict__ dy,
                                                 const int32_t* __restrict__ idx,
                                                 float* __restrict__ dx, int64_t planes, int64_t c,
                                                 int64_t pq, int64_t hw) {
  for (int64_t plane = global_tid(); plane < planes; plane += global_stride()) {
    const int64_t n = plane / c, ch = plane % c;
    for (int64_t t = 0; t < pq; ++t) {
      const int64_t o = (n * pq + t) * c + ch, k = idx[o];
      if (k >= 0 && k < hw) dx[(n * hw + k) * c + ch] += ld(dy, o);
    }
  }
}

// The window of output (i, j), clipped as the CPU: [h0, h1) x [w0, w1) inside the input and
// the divisor (the window clipped to the padded input when count_include_pad).
struct AvgWindow {
  int64_t h0, h1, w0, w1, div;
};
__device__ __forceinline__ AvgWindow avg_window(const PoolGeom& g, int64_t i, int64_t j) {
  int64_t h0 = i * g.sh - g.ph, w0 = j * g.sw - g.pw;
  int64_t h1 = min(h0 + g.kh, g.H + g.ph);
  int64_t w1 = min(w0 + g.kw, g.W + g.pw);
  const int64_t div_full = (h1 - h0) * (w1 - w0);
  h0 = max(h0, static_cast<int64_t>(0));
  w0 = max(w0, static_cast<int64_t>(0));
  h1 = min(h1, g.H);
  w1 = min(w1, g.W);
  return {h0, h1, w0, w1, g.count_include_pad ? div_full : (h1 - h0) * (w1 - w0)};
}

template <class T>
__global__ void avg_pool_forward_kernel(const T* x, T* y, int64_t total, PoolGeom g) {
  for (int64_t o = global_tid(); o < total; o += global_stride()) {
    const int64_t j = o % g.Q, i = (o / g.Q) % g.P, plane = o / (g.P * g.Q);
    const T* xs = x + plane * g.H * g.W;
    const AvgWindow a = avg_window(g, i, j);
    float s = 0.f;
    for (int64_t h = a.h0; h < a.h1; ++h)
      for (int64_t w = a.w0; w < a.w1; ++w) s += ld(xs, h * g.W + w);
    st(y, o, s / static_cast<float>(a.div));
  }
}

// dx[h, w] = sum of dy[i, j]/div(i, j) over the outputs whose clipped window holds (h, w),
// added in row-major (i, j) order as the CPU's scatter does.
template <class T>
__global__ void avg_pool_backward_kernel(const T* dy, T* dx, int64_t total, PoolGeom g) {
  for (int64_t e = global_tid(); e < total; e += global_stride()) {
    const int64_t w = e % g.W, h = (e / g.W) % g.H, plane = e / (g.H * g.W);
    const T* gs = dy + plane * g.P * g.Q;
    // Outputs i with i*sh - ph <= h < i*sh - ph + kh, i.e. h + ph - kh < i*sh <= h + ph.
    const int64_t ah = h + g.ph - g.kh, aw = w + g.pw - g.kw;
    const int64_t i0 = ah < 0 ? 0 : ah / g.sh + 1, i1 = min((h + g.ph) / g.sh, g.P - 1);
    const int64_t j0 = aw < 0 ? 0 : aw / g.sw + 1, j1 = min((w + g.pw) / g.sw, g.Q - 1);
    float acc = 0.f;
    for (int64_t i = i0; i <= i1; ++i)
      for (int64_t j = j0; j <= j1; ++j) {
        const AvgWindow a = avg_window(g, i, j);
        acc += ld(gs, i * g.Q + j) / static_cast<float>(a.div);
      }
    st(dx, e, acc);
  }
}

// One warp per plane: y[plane] = float(double sum / hw).
template <class T>
__global__ void global_avg_forward_kernel(const T* x, T* y, int64_t planes, int64_t hw) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t pl = global_tid() >> 5; pl < planes; pl += warps) {
    const T* xs = x + pl * hw;
    double s = 0.0;
    for (int64_t i = lane; i < hw; i += 32) s += ld(xs, i);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) st(y, pl, static_cast<float>(s / static_cast<double>(hw)));
  }
}

template <class T>
__global__ void global_avg_backward_kernel(const T* dy, T* dx, int64_t total, int64_t hw) {
  const float fhw = static_cast<float>(hw);
  for (int64_t e = global_tid(); e < total; e += global_stride()) st(dx, e, ld(dy, e / hw) / fhw);
}

// max_pool2d_forward in either layout (nhwc: [N, H, W, C] input, [N, P, Q, C] outputs).
Tensor max_pool_forward(const char* op, const Tensor& x, const Pool2dParams& p, Tensor& indices,
                        bool nhwc) {
  const int dev = require_f32(op, {&x}, activation_type(x));
  const Shape nchw_in = nhwc ? Shape{x.size(0), x.size(3), x.size(1), x.size(2)} : x.shape();
  const Shape nchw = ops::pool2d_output_shape(nchw_in, p);
  const Shape os = nhwc ? Shape{nchw[0], nchw[2], nchw[3], nchw[1]} : nchw;
  Tensor y = Tensor::empty(os, x.dtype(), x.device());
  indices = Tensor::empty(os, DType::i32, x.device());
  const int64_t total = y.numel();
  if (total == 0) return y;
  const PoolGeom g = pool_geom(nchw_in, nchw, p);
  with_float_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    if (nhwc)
      max_pool_nhwc_forward_kernel<T><<<blocks_for(total), kThreads, 0, stream(dev)>>>(
          data_as<T>(x), data_as<T>(y), indices.data<int32_t>(), total, nchw_in[1], g);
    else
      max_pool_forward_kernel<T><<<blocks_for(total), kThreads, 0, stream(dev)>>>(
          data_as<T>(x), data_as<T>(y), indices.data<int32_t>(), total, g);
  });
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}

// max_pool2d_backward in either layout (nhwc: [N, H, W, C] and channels-last indices).
Tensor max_pool_backward(const char* op, const Tensor& dy, const Tensor& indices,
                         const Shape& x_shape, bool nhwc) {
  const int dev = require_f32(op, {&dy}, activation_type(dy));
  check_dtype(indices, DType::i32, op, "indices");
  ADA_CHECK_ARG(!indices.device().is_cpu() && indices.device().index == dev, DeviceError)
      << op << ": 'indices' is " << indices.str() << ", expected on cuda:" << dev;
  check_same_shape(dy, indices, op);
  const int cd = nhwc ? 3 : 1;  // the channel dim
  ADA_CHECK_ARG(x_shape.size() == 4 && dy.dim() == 4 && dy.size(0) == x_shape[0] &&
                    dy.size(cd) == x_shape[cd],
                ShapeError)
      << op << ": gradient " << dy.str() << " does not match input " << shape_str(x_shape);
  const int64_t total = dy.numel();
  if (total == 0 || shape_numel(x_shape) == 0)
    return Tensor::zeros(x_shape, dy.dtype(), dy.device());
  // The planes' sizes: input H*W and output P*Q.
  const int64_t hw = nhwc ? x_shape[1] * x_shape[2] : x_shape[2] * x_shape[3],
                pq = nhwc ? dy.size(1) * dy.size(2) : dy.size(2) * dy.size(3);
  Tensor dx = Tensor::zeros(x_shape, DType::f32, dy.device());  // the sums; rounded below if 16-bit
  with_float_type(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    if (deterministic_algorithms()) {
      const int64_t c = nhwc ? x_shape[3] : 1, planes = x_shape[0] * x_shape[cd];
      max_pool_backward_ordered_kernel<T><<<blocks_for(planes), kThreads, 0, stream(dev)>>>(
          data_as<T>(dy), indices.data<int32_t>(), dx.data<float>(), planes, c, pq, hw);
    } else if (nhwc)
      max_pool_nhwc_backward_kernel<T><<<blocks_for(total), kThreads, 0, stream(dev)>>>(
          data_as<T>(dy), indices.data<int32_t>(), dx.data<float>(), total, x_shape[3], pq, hw);
    else
      max_pool_backward_kernel<T><<<blocks_for(total), kThreads, 0, stream(dev)>>>(
          data_as<T>(dy), indices.data<int32_t>(), dx.data<float>(), total, pq, hw);
  });
  ADA_CUDA_LAUNCH_CHECK();
  if (dy.dtype() == DType::f32) return dx;
  Tensor narrow = Tensor::empty(x_shape, dy.dtype(), dy.device());
  round_f32(dx.data<float>(), narrow.raw_data(), dx.numel(), dy.dtype(), dev);
  return narrow;
}
}  // namespace

Tensor max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& indices) {
  return max_pool_forward("max_pool2d_forward", x, p, indices, false);
}
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape) {
  return max_pool_backward("max_pool2d_backward", dy, indices, x_shape, false);
}
Tensor max_pool2d_nhwc_forward(const Tensor& x, const Pool2dParams& p, Tensor& indices) {
  return max_pool_forward("max_pool2d_nhwc_forward", x, p, indices, true);
}

Tensor max_pool2d_nhwc_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape) {
  return max_pool_backward("max_pool2d_nhwc_backward", dy, indices, x_shape, true);
}

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p) {
  const int dev = require_f32("avg_pool2d_forward", {&x}, activation_type(x));
  const Shape os = ops::pool2d_output_shape(x.shape(), p);
  Tensor y = Tensor::empty(os, x.dtype(), x.device());
  const int64_t total = y.numel();
  if (total == 0) return y;
  with_float_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    avg_pool_forward_kernel<T><<<blocks_for(total), kThreads, 0, stream(dev)>>>(
        data_as<T>(x), data_as<T>(y), total, pool_geom(x.shape(), os, p));
  });
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dParams& p) {
  const int dev = require_f32("avg_pool2d_backward", {&dy}, activation_type(dy));
  const Shape os = ops::pool2d_output_shape(x_shape, p);
  ADA_CHECK_ARG(dy.shape() == os, ShapeError)
      << "avg_pool2d_backward: gradient " << dy.str() << " should be " << shape_str(os);
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  const int64_t total = dx.numel();
  if (total == 0) return dx;
  with_float_type(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    avg_pool_backward_kernel<T><<<blocks_for(total), kThreads, 0, stream(dev)>>>(
        data_as<T>(dy), data_as<T>(dx), total, pool_geom(x_shape, os, p));
  });
  ADA_CUDA_LAUNCH_CHECK();
  return dx;
}

Tensor global_avg_pool_forward(const Tensor& x) {
  const int dev = require_f32("global_avg_pool_forward", {&x}, activation_type(x));
  check_dim(x, 4, "global_avg_pool_forward", "x");
  const int64_t planes = x.size(0) * x.size(1), hw = x.size(2) * x.size(3);
  ADA_CHECK_ARG(hw > 0, ShapeError) << "global_avg_pool_forward: empty spatial size in " << x.str();
  Tensor y = Tensor::empty({x.size(0), x.size(1)}, x.dtype(), x.device());
  if (planes == 0) return y;
  with_float_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    global_avg_forward_kernel<T><<<blocks_for(planes * 32), kThreads, 0, stream(dev)>>>(
        data_as<T>(x), data_as<T>(y), planes, hw);
  });
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}

Tensor global_avg_pool_backward(const Tensor& dy, const Shape& x_shape) {
  const int dev = require_f32("global_avg_pool_backward", {&dy}, activation_type(dy));
  ADA_CHECK_ARG(x_shape.size() == 4 && dy.shape() == Shape({x_shape[0], x_shape[1]}), ShapeError)
      << "global_avg_pool_backward: gradient " << dy.str() << " does not match input "
      << shape_str(x_shape);
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  const int64_t total = dx.numel(), hw = x_shape[2] * x_shape[3];
  if (total == 0) return dx;
  with_float_type(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    global_avg_backward_kernel<T><<<blocks_for(total), kThreads, 0, stream(dev)>>>(
        data_as<T>(dy), data_as<T>(dx), total, hw);
  });
  ADA_CUDA_LAUNCH_CHECK();
  return dx;
}

}  // namespace ada::cuda
