// CUDA elementwise ops, activations, bias broadcasts and their gradients, permute and the
// reductions (sum/mean over axes, sum_backward, sum_all, dot, norm2_sq, all_finite) of
// core/ops.h. Semantics and argument checks mirror core/backend/cpu/elementwise.cc. Every
// reduction accumulates in double over a fixed pattern (no floating atomics), so its result
// has the same bits on every run.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/cuda/kernel_util.cuh"
#include "core/backend/cuda/multi_tensor.cuh"
#include "core/backend/op_shapes.h"

namespace ada::cuda {
namespace {
using namespace kernel;

// ---- launch helpers ------------------------------------------------------------------------

__global__ void fill_kernel(float* p, int64_t n, float v) {
  for (int64_t i = global_tid(); i < n; i += global_stride()) p[i] = v;
}

// Elements of T (float, or a 16-bit activation type) computed in f32 and rounded once.
// kVec elements a thread a step, as one 16-byte access each (kVec16<T>, when the pointers are
// 16-byte aligned; one 2-byte access a step left 16-bit maps far below the bandwidth), the last
// n % kVec elements by the first threads.
template <int kVec, class F, class T>
__global__ void map1_kernel(const T* x, T* y, int64_t n, F f) {
  using P = Pack<T, kVec>;
  for (int64_t q = global_tid(); q < n / kVec; q += global_stride()) {
    const P xv = reinterpret_cast<const P*>(x)[q];
    P out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) st(out.v, j, f(ld(xv.v, j)));
    reinterpret_cast<P*>(y)[q] = out;
  }
  const int64_t i = n / kVec * kVec + global_tid();
  if (i < n) st(y, i, f(ld(x, i)));
}

// y may alias a or b: each element is read before it is written, by the same thread.
template <int kVec, class F, class T>
__global__ void map2_kernel(const T* a, const T* b, T* y, int64_t n, F f) {
  using P = Pack<T, kVec>;
  for (int64_t q = global_tid(); q < n / kVec; q += global_stride()) {
    const P av = reinterpret_cast<const P*>(a)[q], bv = reinterpret_cast<const P*>(b)[q];
    P out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) st(out.v, j, f(ld(av.v, j), ld(bv.v, j)));
    reinterpret_cast<P*>(y)[q] = out;
  }
  const int64_t i = n / kVec * kVec + global_tid();
  if (i < n) st(y, i, f(ld(a, i), ld(b, i)));
}

struct AddF {
  __device__ float operator()(float x, float y) const { return x + y; }
};
struct SubF {
  __device__ float operator()(float x, float y) const { return x - y; }
};
struct MulF {
  __device__ float operator()(float x, float y) const { return x * y; }
};
struct ScaleF {
  float s;
  __device__ float operator()(float x) const { return s * x; }
};
struct ReluF {
  __device__ float operator()(float v) const { return v > 0.f ? v : 0.f; }
};
struct AddReluF {  // relu(x + y): the same bits as the two ops
  __device__ float operator()(float x, float y) const {
    const float s = x + y;
    return s > 0.f ? s : 0.f;
  }
};
struct ReluBackF {
  __device__ float operator()(float g, float v) const { return v > 0.f ? g : 0.f; }
};
struct GeluF {
  __device__ float operator()(float v) const {
    return 0.5f * v * (1.f + erff(v * 0.70710678118654752440f));
  }
};
struct GeluBackF {
  __device__ float operator()(float g, float v) const {
    const float cdf = 0.5f * (1.f + erff(v * 0.70710678118654752440f));
    const float pdf = 0.39894228040143267794f * expf(-0.5f * v * v);
    return g * (cdf + v * pdf);
  }
};
struct TanhF {
  __device__ float operator()(float v) const { return tanhf(v); }
};
struct TanhBackF {
  __device__ float operator()(float g, float v) const { return g * (1.f - v * v); }
};

// The tensors' device, made current, when all are f32, or all of one 16-bit activation type.
int require_one_float_type(const char* op, std::initializer_list<const Tensor*> ts) {
  const DType t = (*ts.begin())->dtype();
  const int dev = require_f32(op, ts, activation_type(**ts.begin()));
  for (const Tensor* x : ts)
    ADA_CHECK_ARG(x->dtype() == t, DTypeError)
        << op << ": " << x->str() << " differs in dtype from " << (*ts.begin())->str();
  return dev;
}

template <class F>
Tensor map1(const char* op, const Tensor& a, F f) {
  const int dev = require_one_float_type(op, {&a});
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.numel();
  if (n == 0) return y;
  with_float_type(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int v = kVec16<T>;
    if (aligned16({a.raw_data(), y.raw_data()}))
      map1_kernel<v>
          <<<blocks_for(n / v + 1), kThreads, 0, stream(dev)>>>(data_as<T>(a), data_as<T>(y), n, f);
    else
      map1_kernel<1>
          <<<blocks_for(n), kThreads, 0, stream(dev)>>>(data_as<T>(a), data_as<T>(y), n, f);
  });
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}

template <class F>
void map2_into(const char* op, const Tensor& a, const Tensor& b, Tensor& y, F f) {
  const int dev = require_one_float_type(op, {&a, &b, &y});
  check_same_shape(a, b, op);
  check_same_shape(a, y, op);
  const int64_t n = a.numel();
  if (n == 0) return;
  with_float_type(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int v = kVec16<T>;
    if (aligned16({a.raw_data(), b.raw_data(), y.raw_data()}))
      map2_kernel<v><<<blocks_for(n / v + 1), kThreads, 0, stream(dev)>>>(
          data_as<T>(a), data_as<T>(b), data_as<T>(y), n, f);
    else
      map2_kernel<1><<<blocks_for(n), kThreads, 0, stream(dev)>>>(data_as<T>(a), data_as<T>(b),
                                                                  data_as<T>(y), n, f);
  });
  ADA_CUDA_LAUNCH_CHECK();
}

template <class F>
Tensor map2(const char* op, const Tensor& a, const Tensor& b, F f) {
  require_one_float_type(op, {&a, &b});
  check_same_shape(a, b, op);
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
  map2_into(op, a, b, y, f);
  return y;
}

// ---- strided index maps ----------------------------------------------------------------------

// Up to this many dims after merging (size-1 dims dropped, mergeable neighbours fused).
constexpr int kMaxDims = 8;

// A row-major index space of `nd` dims; stride[d] is the element stride, in some other tensor,
// of a step along dim d. Passed to kernels by value.
struct Dims {
  int nd = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
};

// Offset of linear index i (row-major over d.size) under d.stride. Requires i < prod(size).
__device__ __forceinline__ int64_t offset_of(const Dims& d, int64_t i) {
  int64_t off = 0;
  for (int k = d.nd - 1; k >= 0; --k) {
    const int64_t s = d.size[k];
    off += (i % s) * d.stride[k];
    i /= s;
  }
  return off;
}

struct DimList {
  std::vector<int64_t> size, stride;
};

// Fuses neighbours (a, b) where stepping b's full extent equals one step of a.
DimList merge_dims(const DimList& in) {
  DimList out;
  for (size_t i = 0; i < in.size.size(); ++i) {
    if (in.size[i] == 1) continue;
    if (!out.size.empty() && out.stride.back() == in.stride[i] * in.size[i]) {
      out.size.back() *= in.size[i];
      out.stride.back() = in.stride[i];
    } else {
      out.size.push_back(in.size[i]);
      out.stride.push_back(in.stride[i]);
    }
  }
  return out;
}

Dims to_dims(const DimList& l, const char* op) {
  ADA_CHECK_ARG(static_cast<int>(l.size.size()) <= kMaxDims, ShapeError)
      << op << ": the CUDA kernel supports at most " << kMaxDims
      << " dims after merging neighbours, got " << l.size.size();
  Dims d;
  d.nd = static_cast<int>(l.size.size());
  for (int i = 0; i < d.nd; ++i) {
    d.size[i] = l.size[i];
    d.stride[i] = l.stride[i];
  }
  return d;
}

int64_t dims_numel(const Dims& d) {
  int64_t n = 1;
  for (int i = 0; i < d.nd; ++i) n *= d.size[i];
  return n;
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

// offset_of in 32-bit arithmetic, for index spaces whose indices and offsets fit (a 64-bit
// division costs several times the instructions of a 32-bit one; the permutes of attention's
// heads, two divisions an element, ran at about a sixth of an H200's bandwidth).
__device__ __forceinline__ uint32_t offset_of32(const Dims& d, uint32_t i) {
  uint32_t off = 0;
  for (int k = d.nd - 1; k >= 0; --k) {
    const uint32_t s = static_cast<uint32_t>(d.size[k]);
    off += (i % s) * static_cast<uint32_t>(d.stride[k]);
    i /= s;
  }
  return off;
}

// out[i] = in[offset_of(d, i)] for i < n = prod(d.size); T: any element type (a copy).
template <class T, bool kNarrow>
__global__ void gather_kernel(const T* in, T* out, int64_t n, Dims d) {
  for (int64_t i = global_tid(); i < n; i += global_stride())
    out[i] = in[kNarrow ? static_cast<int64_t>(offset_of32(d, static_cast<uint32_t>(i)))
                        : offset_of(d, i)];
}
// Launches gather_kernel, in 32-bit index arithmetic when n and every offset fit.
template <class T>
void gather(const T* in, T* out, int64_t n, const Dims& d, cudaStream_t st) {
  int64_t last = 0;  // the largest offset
  for (int k = 0; k < d.nd; ++k) last += (d.size[k] - 1) * d.stride[k];
  if (n <= UINT32_MAX && last <= UINT32_MAX)
    gather_kernel<T, true><<<blocks_for(n), kThreads, 0, st>>>(in, out, n, d);
  else
    gather_kernel<T, false><<<blocks_for(n), kThreads, 0, st>>>(in, out, n, d);
  ADA_CUDA_LAUNCH_CHECK();
}

// ---- sums over axes ------------------------------------------------------------------------

using backend::kept_shape;
using backend::reduced_mask;
using backend::squeezed_shape;

constexpr int kColsX = 32, kColsY = 8;

// One output per x-lane; the 8 y-lanes split the reduction, combined in a fixed order.
// Coalesced when consecutive outputs are adjacent in x (the innermost dim is kept).
// out[o] = sum_r x[offset_of(kept, o) + offset_of(red, r)], o < n_out, r < n_red.
// x's elements are f32 or a 16-bit activation type (T), read as f32 and summed in double.
template <class T>
__global__ void reduce_cols_kernel(const T* x, float* out, int64_t n_out, int64_t n_red, Dims kept,
                                   Dims red) {
  __shared__ double sh[kColsY][kColsX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t o0 = static_cast<int64_t>(blockIdx.x) * kColsX; o0 < n_out;
       o0 += static_cast<int64_t>(gridDim.x) * kColsX) {
    const int64_t o = o0 + tx;
    double acc = 0.0;
    if (o < n_out) {
      const int64_t base = offset_of(kept, o);
      for (int64_t r = ty; r < n_red; r += kColsY)
        acc += static_cast<double>(ld(x, base + offset_of(red, r)));
    }
    sh[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && o < n_out) {
      double s = 0.0;
      for (int k = 0; k < kColsY; ++k) s += sh[k][tx];
      out[o] = static_cast<float>(s);
    }
    __syncthreads();
  }
}

// reduce_cols_kernel over rows [blockIdx.y * chunk, +chunk) only, the double partial written to
// part[blockIdx.y * n_out + o]: a reduction with few outputs and many rows (a bias gradient:
// 1,024 outputs over 2,048 rows) fills the GPU instead of n_out / 32 blocks.
template <class T>
__global__ void reduce_cols_partial_kernel(const T* x, double* part, int64_t n_out, int64_t n_red,
                                           int64_t chunk, Dims kept, Dims red) {
  __shared__ double sh[kColsY][kColsX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t r1 = r0 + chunk < n_red ? r0 + chunk : n_red;
  for (int64_t o0 = static_cast<int64_t>(blockIdx.x) * kColsX; o0 < n_out;
       o0 += static_cast<int64_t>(gridDim.x) * kColsX) {
    const int64_t o = o0 + tx;
    double acc = 0.0;
    if (o < n_out) {
      const int64_t base = offset_of(kept, o);
      for (int64_t r = r0 + ty; r < r1; r += kColsY)
        acc += static_cast<double>(ld(x, base + offset_of(red, r)));
    }
    sh[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && o < n_out) {
      double s = 0.0;
      for (int k = 0; k < kColsY; ++k) s += sh[k][tx];
      part[static_cast<int64_t>(blockIdx.y) * n_out + o] = s;
    }
    __syncthreads();
  }
}

// out[o] = sum over c < chunks of part[c * n_out + o], in order.
__global__ void sum_partials_kernel(const double* part, float* out, int64_t n_out, int64_t chunks) {
  for (int64_t o = global_tid(); o < n_out; o += global_stride()) {
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c) s += part[c * n_out + o];
    out[o] = static_cast<float>(s);
  }
}

// Tree sum of sh[0..kThreads) in place (blockDim.x == kThreads); returns the total to all.
__device__ double block_tree_sum(double* sh, double v) {
  const int t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    __syncthreads();
  }
  const double total = sh[0];
  __syncthreads();  // sh is reused by the caller's next round
  return total;
}

// One block per output, its threads striding over the reduction (innermost dim reduced).
template <class T>
__global__ void reduce_rows_kernel(const T* x, float* out, int64_t n_out, int64_t n_red, Dims kept,
                                   Dims red) {
  __shared__ double sh[kThreads];
  for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {
    const int64_t base = offset_of(kept, o);
    double acc = 0.0;
    for (int64_t r = threadIdx.x; r < n_red; r += kThreads)
      acc += static_cast<double>(ld(x, base + offset_of(red, r)));
    const double total = block_tree_sum(sh, acc);
    if (threadIdx.x == 0) out[o] = static_cast<float>(total);
  }
}

// ---- whole-tensor reductions -----------------------------------------------------------------

// Fixed geometry: the summation pattern depends only on n, so results are bit-reproducible.
constexpr int kRedBlocks = 256;

template <class T>
struct ValueF {
  const T* x;
  __device__ double operator()(int64_t i) const { return static_cast<double>(ld(x, i)); }
};
struct ProductF {
  const float* x;
  const float* y;
  __device__ double operator()(int64_t i) const {
    return static_cast<double>(x[i]) * static_cast<double>(y[i]);
  }
};
struct SquareF {
  const float* x;
  __device__ double operator()(int64_t i) const {
    const double v = static_cast<double>(x[i]);
    return v * v;
  }
};

// partials[block] = sum of f(i) over this block's grid-stride share of [0, n).
template <class F>
__global__ void partial_sum_kernel(int64_t n, F f, double* partials) {
  __shared__ double sh[kThreads];
  double acc = 0.0;
  for (int64_t i = global_tid(); i < n; i += global_stride()) acc += f(i);
  const double total = block_tree_sum(sh, acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// *result = sum of partials[0..kRedBlocks), one block of kThreads threads.
template <class T>
__global__ void final_sum_kernel(const double* partials, T* result) {
  __shared__ double sh[kThreads];
  double acc = 0.0;
  for (int i = threadIdx.x; i < kRedBlocks; i += kThreads) acc += partials[i];
  const double total = block_tree_sum(sh, acc);
  if (threadIdx.x == 0) *result = static_cast<T>(total);
}

// Writes the sum of x (contiguous, shape s; f32 or a 16-bit activation type) over the dims
// marked in `red` to out (f32), laid out row-major over the kept dims; an empty reduction gives 0.
// Double accumulation.
template <class T>
void reduce_sum_into(const T* x, const Shape& s, const std::vector<bool>& red, float* out, int dev,
                     const char* op) {
  const std::vector<int64_t> st = contiguous_strides(s);
  DimList k, r;
  for (size_t i = 0; i < s.size(); ++i) {
    DimList& l = red[i] ? r : k;
    l.size.push_back(s[i]);
    l.stride.push_back(st[i]);
  }
  const Dims kept = to_dims(merge_dims(k), op), rd = to_dims(merge_dims(r), op);
  const int64_t n_out = dims_numel(kept), n_red = dims_numel(rd);
  if (n_out == 0) return;
  // The innermost non-trivial input dim is reduced when the reduction has stride 1.
  const bool inner_reduced = rd.nd > 0 && rd.stride[rd.nd - 1] == 1;
  if (n_out == 1 && rd.nd == 1 && rd.stride[0] == 1) {
    // One contiguous run (e.g. a full sum): spread it over the fixed reduction grid.
    Scratch buf(kRedBlocks * sizeof(double), dev);
    partial_sum_kernel<<<kRedBlocks, kThreads, 0, stream(dev)>>>(n_red, ValueF<T>{x},
                                                                 buf.as<double>());
    ADA_CUDA_LAUNCH_CHECK();
    final_sum_kernel<<<1, kThreads, 0, stream(dev)>>>(buf.as<const double>(), out);
  } else if (inner_reduced && n_red >= 64) {
    const unsigned blocks = static_cast<unsigned>(n_out < 65535LL * 8 ? n_out : 65535LL * 8);
    reduce_rows_kernel<<<blocks, kThreads, 0, stream(dev)>>>(x, out, n_out, n_red, kept, rd);
  } else {
    const unsigned blocks = blocks_for(n_out, kColsX);
    // Enough row chunks for ~528 blocks (4 per SM of an H100/H200; a constant, so the sum order
    // depends on the shape alone), each of at least 64 rows.
    const int64_t want = (528 + blocks - 1) / blocks, most = (n_red + 63) / 64;
    const int64_t chunks = std::min<int64_t>({want, most, 1024});
    if (chunks <= 1) {
      reduce_cols_kernel<<<blocks, dim3(kColsX, kColsY), 0, stream(dev)>>>(x, out, n_out, n_red,
                                                                           kept, rd);
    } else {
      const int64_t chunk = (n_red + chunks - 1) / chunks;
      Scratch part(static_cast<size_t>(chunks * n_out) * sizeof(double), dev);
      reduce_cols_partial_kernel<<<dim3(blocks, static_cast<unsigned>(chunks)),
                                   dim3(kColsX, kColsY), 0, stream(dev)>>>(
          x, part.as<double>(), n_out, n_red, chunk, kept, rd);
      ADA_CUDA_LAUNCH_CHECK();
      sum_partials_kernel<<<blocks_for(n_out), kThreads, 0, stream(dev)>>>(part.as<const double>(),
                                                                           out, n_out, chunks);
    }
  }
  ADA_CUDA_LAUNCH_CHECK();
}

template <class F>
double reduce_double(int64_t n, F f, int dev) {
  if (n == 0) return 0.0;
  Scratch buf((kRedBlocks + 1) * sizeof(double), dev);
  double* partials = buf.as<double>();
  double* result = partials + kRedBlocks;
  cudaStream_t s = stream(dev);
  partial_sum_kernel<<<kRedBlocks, kThreads, 0, s>>>(n, f, partials);
  ADA_CUDA_LAUNCH_CHECK();
  final_sum_kernel<<<1, kThreads, 0, s>>>(partials, result);
  ADA_CUDA_LAUNCH_CHECK();
  double host = 0.0;
  refuse_in_capture(dev, "a sum or norm read on the host (sum_all, norm2_sq)",
                    "the host would read a result no kernel has written yet");
  ADA_CUDA_CHECK(cudaMemcpyAsync(&host, result, sizeof(double), cudaMemcpyDeviceToHost, s));
  wait_for(dev);
  return host;
}

// Sets *flag when some element is NaN or infinite (|v| <= FLT_MAX is false for both).
__global__ void nonfinite_kernel(const float* x, int64_t n, int* flag) {
  bool bad = false;
  for (int64_t i = global_tid(); i < n; i += global_stride())
    if (!(fabsf(x[i]) <= 3.402823466e+38f)) bad = true;
  if (bad) atomicOr(flag, 1);
}

// ---- bias broadcasts -------------------------------------------------------------------------

template <class T>
__global__ void add_bias_kernel(const T* x, const float* b, T* y, int64_t total, int64_t n) {
  for (int64_t i = global_tid(); i < total; i += global_stride()) st(y, i, ld(x, i) + b[i % n]);
}

__global__ void add_channel_bias_kernel(const float* x, const float* b, float* y, int64_t total,
                                        int64_t c, int64_t inner) {
  for (int64_t i = global_tid(); i < total; i += global_stride()) y[i] = x[i] + b[(i / inner) % c];
}

__global__ void axpby_kernel(float alpha, const float* x, float beta, float* y, int64_t n) {
  if (beta == 1.f) {
    for (int64_t i = global_tid(); i < n; i += global_stride()) y[i] += alpha * x[i];
  } else {
    for (int64_t i = global_tid(); i < n; i += global_stride()) y[i] = alpha * x[i] + beta * y[i];
  }
}

__global__ void scale_inplace_kernel(float* y, int64_t n, float s) {
  for (int64_t i = global_tid(); i < n; i += global_stride()) y[i] *= s;
}

}  // namespace

// ---- creation / elementwise ----------------------------------------------------------------

void fill_(Tensor& t, float value) {
  const int dev = require_f32("fill_", {&t});
  const int64_t n = t.numel();
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream(dev)>>>(t.data<float>(), n, value);
  ADA_CUDA_LAUNCH_CHECK();
}

Tensor add(const Tensor& a, const Tensor& b) {
  return map2("add", a, b, AddF{});
}
Tensor add_relu(const Tensor& a, const Tensor& b) {
  return map2("add_relu", a, b, AddReluF{});
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return map2("sub", a, b, SubF{});
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return map2("mul", a, b, MulF{});
}
Tensor scale(const Tensor& a, float s) {
  return map1("scale", a, ScaleF{s});
}

void add_out(const Tensor& a, const Tensor& b, Tensor& out) {
  map2_into("add_out", a, b, out, AddF{});
}
void sub_out(const Tensor& a, const Tensor& b, Tensor& out) {
  map2_into("sub_out", a, b, out, SubF{});
}

void scale_(Tensor& y, float s) {
  const int dev = require_f32("scale_", {&y});
  const int64_t n = y.numel();
  if (n == 0) return;
  scale_inplace_kernel<<<blocks_for(n), kThreads, 0, stream(dev)>>>(y.data<float>(), n, s);
  ADA_CUDA_LAUNCH_CHECK();
}

void axpby_(float alpha, const Tensor& x, float beta, Tensor& y) {
  const int dev = require_f32("axpby_", {&x, &y});
  check_same_shape(x, y, "axpby_");
  const int64_t n = y.numel();
  if (n == 0) return;
  axpby_kernel<<<blocks_for(n), kThreads, 0, stream(dev)>>>(alpha, x.data<float>(), beta,
                                                            y.data<float>(), n);
  ADA_CUDA_LAUNCH_CHECK();
}

Tensor add_bias(const Tensor& x, const Tensor& bias) {
  require_one_float_type("add_bias", {&x});
  const int dev = require_f32("add_bias", {&bias});
  require_on("add_bias", dev, {&x});
  ADA_CHECK_ARG(x.dim() >= 1 && bias.dim() == 1 && bias.size(0) == x.size(-1), ShapeError)
      << "add_bias: bias " << bias.str() << " does not match the last dim of " << x.str();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t total = x.numel(), n = x.size(-1);
  if (total == 0) return y;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    add_bias_kernel<<<blocks_for(total), kThreads, 0, stream(dev)>>>(
        data_as<T>(x), bias.data<float>(), data_as<T>(y), total, n);
  });
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}

Tensor bias_grad(const Tensor& dy) {
  const int dev = require_one_float_type("bias_grad", {&dy});
  ADA_CHECK_ARG(dy.dim() >= 1, ShapeError) << "bias_grad: needs at least 1 dim, got " << dy.str();
  const int64_t n = dy.size(-1), rows = n ? dy.numel() / n : 0;
  Tensor g = Tensor::empty({n}, DType::f32, dy.device());
  if (n == 0) return g;
  with_float_type(dy.dtype(), [&](auto tag) {
    reduce_sum_into(data_as<decltype(tag)>(dy), {rows, n}, {true, false}, g.data<float>(), dev,
                    "bias_grad");
  });
  return g;
}

Tensor add_channel_bias(const Tensor& x, const Tensor& bias) {
  const int dev = require_f32("add_channel_bias", {&x, &bias});
  ADA_CHECK_ARG(x.dim() >= 2 && bias.dim() == 1 && bias.size(0) == x.size(1), ShapeError)
      << "add_channel_bias: bias " << bias.str() << " does not match dim 1 of " << x.str();
  const int64_t total = x.numel(), n = x.size(0), c = x.size(1);
  Tensor y = Tensor::empty(x.shape(), DType::f32, x.device());
  if (total == 0) return y;
  const int64_t inner = total / (n * c);
  add_channel_bias_kernel<<<blocks_for(total), kThreads, 0, stream(dev)>>>(
      x.data<float>(), bias.data<float>(), y.data<float>(), total, c, inner);
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}

Tensor channel_bias_grad(const Tensor& dy) {
  const int dev = require_one_float_type("channel_bias_grad", {&dy});
  ADA_CHECK_ARG(dy.dim() >= 2, ShapeError)
      << "channel_bias_grad: needs [N, C, ...], got " << dy.str();
  const int64_t n = dy.size(0), c = dy.size(1);
  Tensor g = Tensor::empty({c}, DType::f32, dy.device());
  if (c == 0) return g;
  const int64_t inner = n == 0 ? 0 : dy.numel() / (n * c);
  // With n == 0 the reduction is empty whatever `inner` is: every channel gets 0.
  with_float_type(dy.dtype(), [&](auto tag) {
    reduce_sum_into(data_as<decltype(tag)>(dy), {n, c, inner}, {true, false, true}, g.data<float>(),
                    dev, "channel_bias_grad");
  });
  return g;
}

Tensor permute(const Tensor& x, const std::vector<int>& perm) {
  const int dev = require_f32("permute", {&x}, activation_type(x));
  const int nd = static_cast<int>(x.dim());
  const Shape out = backend::permuted_shape(x, perm);
  Tensor y = Tensor::empty(out, x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n == 0) return y;
  // Output dims in order, each with its stride in the input; then merged.
  const std::vector<int64_t> in_stride = contiguous_strides(x.shape());
  DimList l;
  for (int i = 0; i < nd; ++i) {
    l.size.push_back(out[i]);
    l.stride.push_back(in_stride[perm[i]]);
  }
  const Dims d = to_dims(merge_dims(l), "permute");
  if (d.nd == 0 || (d.nd == 1 && d.stride[0] == 1)) {
    // The identity on memory (only size-1 dims moved).
    ADA_CUDA_CHECK(cudaMemcpyAsync(y.raw_data(), x.raw_data(), n * dtype_size(x.dtype()),
                                   cudaMemcpyDeviceToDevice, stream(dev)));
    return y;
  }
  // 16 bytes a thread when the innermost dim is contiguous in x and a multiple of 16 bytes long
  // (attention's heads: runs of the head size): every other stride of x is a multiple of that
  // run (x is contiguous and the run ends at its last dim), so the map holds in 16-byte units.
  const int64_t v = 16 / static_cast<int64_t>(dtype_size(x.dtype()));
  Dims dv = d;
  bool vec = d.stride[d.nd - 1] == 1 && d.size[d.nd - 1] % v == 0 &&
             reinterpret_cast<uintptr_t>(x.raw_data()) % 16 == 0 &&
             reinterpret_cast<uintptr_t>(y.raw_data()) % 16 == 0;
  for (int k = 0; vec && k < d.nd - 1; ++k) vec = d.stride[k] % v == 0;
  if (vec) {
    dv.size[d.nd - 1] /= v;
    for (int k = 0; k < d.nd - 1; ++k) dv.stride[k] /= v;
    gather(static_cast<const uint4*>(x.raw_data()), static_cast<uint4*>(y.raw_data()), n / v, dv,
           stream(dev));
    return y;
  }
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gather(data_as<T>(x), data_as<T>(y), n, d, stream(dev));
  });
  return y;
}

// ---- activations ----------------------------------------------------------------------------

Tensor relu(const Tensor& x) {
  return map1("relu", x, ReluF{});
}
Tensor relu_backward(const Tensor& dy, const Tensor& y) {
  return map2("relu_backward", dy, y, ReluBackF{});
}
Tensor gelu(const Tensor& x) {
  return map1("gelu", x, GeluF{});
}
Tensor gelu_backward(const Tensor& dy, const Tensor& x) {
  return map2("gelu_backward", dy, x, GeluBackF{});
}
Tensor tanh(const Tensor& x) {
  return map1("tanh", x, TanhF{});
}
Tensor tanh_backward(const Tensor& dy, const Tensor& y) {
  return map2("tanh_backward", dy, y, TanhBackF{});
}

// ---- reductions -----------------------------------------------------------------------------

Tensor sum(const Tensor& x, const std::vector<int>& axes, bool keepdim) {
  const int dev = require_f32("sum", {&x});
  const std::vector<bool> red = reduced_mask(x.shape(), axes, "sum");
  Tensor y = Tensor::empty(keepdim ? kept_shape(x.shape(), red) : squeezed_shape(x.shape(), red),
                           DType::f32, x.device());
  if (y.numel() == 0) return y;
  reduce_sum_into(x.data<float>(), x.shape(), red, y.data<float>(), dev, "sum");
  return y;
}

Tensor mean(const Tensor& x, const std::vector<int>& axes, bool keepdim) {
  Tensor y = cuda::sum(x, axes, keepdim);
  const int64_t count = y.numel() ? x.numel() / y.numel() : 0;
  if (count > 0)
    cuda::scale_(y, 1.f / static_cast<float>(count));
  else
    cuda::fill_(y, NAN);  // mean over an empty axis, as PyTorch
  return y;
}

Tensor sum_backward(const Tensor& dy, const Shape& x_shape, const std::vector<int>& axes) {
  const int dev = require_f32("sum_backward", {&dy});
  const std::vector<bool> red = reduced_mask(x_shape, axes, "sum_backward");
  const Shape k = kept_shape(x_shape, red);
  ADA_CHECK_ARG(dy.numel() == shape_numel(k), ShapeError)
      << "sum_backward: gradient " << dy.str() << " does not match a reduction of "
      << shape_str(x_shape);
  Tensor dx = Tensor::empty(x_shape, DType::f32, dy.device());
  const int64_t n = dx.numel();
  if (n == 0) return dx;
  // dx[i] = dy[o(i)]: dx's dims with their stride in dy's (kept) layout, 0 along reduced dims.
  const std::vector<int64_t> kst = contiguous_strides(k);
  DimList l;
  for (size_t i = 0; i < x_shape.size(); ++i) {
    l.size.push_back(x_shape[i]);
    l.stride.push_back(red[i] ? 0 : kst[i]);
  }
  const Dims d = to_dims(merge_dims(l), "sum_backward");
  gather(dy.data<float>(), dx.data<float>(), n, d, stream(dev));
  return dx;
}

double sum_all(const Tensor& x) {
  const int dev = require_f32("sum_all", {&x});
  return reduce_double(x.numel(), ValueF<float>{x.data<float>()}, dev);
}

double dot(const Tensor& a, const Tensor& b) {
  const int dev = require_f32("dot", {&a, &b});
  ADA_CHECK_ARG(a.numel() == b.numel(), ShapeError)
      << "dot: " << a.str() << " and " << b.str() << " differ in size";
  return reduce_double(a.numel(), ProductF{a.data<float>(), b.data<float>()}, dev);
}

double norm2_sq(const Tensor& a) {
  const int dev = require_f32("norm2_sq", {&a});
  return reduce_double(a.numel(), SquareF{a.data<float>()}, dev);
}

bool all_finite(const Tensor& x) {
  const int dev = require_f32("all_finite", {&x});
  const int64_t n = x.numel();
  if (n == 0) return true;
  cudaStream_t s = stream(dev);
  Scratch flag(sizeof(int), dev);
  ADA_CUDA_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(int), s));
  nonfinite_kernel<<<blocks_for(n), kThreads, 0, s>>>(x.data<float>(), n, flag.as<int>());
  ADA_CUDA_LAUNCH_CHECK();
  int host = 0;
  refuse_in_capture(dev, "all_finite (a finite check read on the host)",
                    "the host would read a flag no kernel has written yet");
  ADA_CUDA_CHECK(cudaMemcpyAsync(&host, flag.get(), sizeof(int), cudaMemcpyDeviceToHost, s));
  wait_for(dev);
  return host == 0;
}

// ---- multi-tensor all_finite and scale_ (multi_tensor.cuh) ------------------------------------
namespace {

__global__ void nonfinite_chunks_kernel(const multi::FloatDesc* descs, const multi::Chunk* chunks,
                                        int* flag) {
  const multi::Chunk c = chunks[blockIdx.x];
  const multi::FloatDesc t = descs[c.t];
  const int64_t end = multi::chunk_end(c, t.n);
  bool bad = false;
  for (int64_t i = c.begin + threadIdx.x; i < end; i += blockDim.x)
    if (!(fabsf(t.p[i]) <= 3.402823466e+38f)) bad = true;
  if (bad) atomicOr(flag, 1);
}

__global__ void scale_chunks_kernel(const multi::FloatDesc* descs, const multi::Chunk* chunks,
                                    float s) {
  const multi::Chunk c = chunks[blockIdx.x];
  const multi::FloatDesc t = descs[c.t];
  const int64_t end = multi::chunk_end(c, t.n);
  for (int64_t i = c.begin + threadIdx.x; i < end; i += blockDim.x) t.p[i] *= s;
}

// The descriptors of `ts` (each f32 on the first's device, checked naming `op`) and their chunks.
int float_table(const char* op, const std::vector<Tensor>& ts, std::vector<multi::FloatDesc>& descs,
                std::vector<multi::Chunk>& chunks) {
  int dev = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < ts.size(); ++i) {
    const int d = require_f32(op, {&ts[i]});
    if (i == 0) dev = d;
    ADA_CHECK_ARG(d == dev, DeviceError)
        << op << ": tensor " << i << " is on cuda:" << d << " but tensor 0 on cuda:" << dev;
    descs.push_back({ts[i].data<float>(), ts[i].numel()});
    sizes.push_back(ts[i].numel());
  }
  chunks = multi::chunks_of(sizes);
  return dev;
}

}  // namespace

bool all_finite(const std::vector<Tensor>& tensors) {
  std::vector<multi::FloatDesc> descs;
  std::vector<multi::Chunk> chunks;
  const int dev = float_table("all_finite", tensors, descs, chunks);
  if (chunks.empty()) return true;
  cudaStream_t s = stream(dev);
  multi::DeviceTable<multi::FloatDesc> table(descs, chunks, dev);
  Scratch flag(sizeof(int), dev);
  ADA_CUDA_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(int), s));
  nonfinite_chunks_kernel<<<multi::grid_of(chunks), kThreads, 0, s>>>(table.descs(), table.chunks(),
                                                                      flag.as<int>());
  ADA_CUDA_LAUNCH_CHECK();
  int host = 0;
  refuse_in_capture(dev, "all_finite (a finite check read on the host)",
                    "the host would read a flag no kernel has written yet");
  ADA_CUDA_CHECK(cudaMemcpyAsync(&host, flag.get(), sizeof(int), cudaMemcpyDeviceToHost, s));
  wait_for(dev);
  return host == 0;
}

void scale_(const std::vector<Tensor>& tensors, float s) {
  std::vector<multi::FloatDesc> descs;
  std::vector<multi::Chunk> chunks;
  const int dev = float_table("scale_", tensors, descs, chunks);
  if (chunks.empty()) return;
  multi::DeviceTable<multi::FloatDesc> table(descs, chunks, dev);
  scale_chunks_kernel<<<multi::grid_of(chunks), kThreads, 0, stream(dev)>>>(table.descs(),
                                                                            table.chunks(), s);
  ADA_CUDA_LAUNCH_CHECK();
}

}  // namespace ada::cuda
