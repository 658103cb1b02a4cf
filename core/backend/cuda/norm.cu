// CUDA batch-norm (over dim 1 of [N, C, ...]) and layer-norm (over the last dim) of core/ops.h,
// forward and backward. Own kernels rather than cuDNN, to follow core/backend/cpu/norm.cc
// formula for formula: statistics are two-pass and accumulate in double; batch-norm splits each
// channel over many blocks, layer-norm runs one block per row; every sum has a fixed order, so
// results are bit-reproducible.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "base/env.h"
#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/cuda/kernel_util.cuh"
#include "core/backend/op_shapes.h"

namespace ada::cuda {
namespace {
using namespace kernel;

// ---- batch-norm ------------------------------------------------------------------------------

constexpr int kBnThreads = 512;

using backend::bn_geom;
using backend::BnGeom;

// Element m (0 <= m < n*inner) of channel ch.
__device__ __forceinline__ int64_t bn_index(const BnGeom& g, int64_t ch, int64_t m) {
  const int64_t i = m / g.inner, k = m - i * g.inner;
  return (i * g.c + ch) * g.inner + k;
}

// A per-channel statistic: f32, [c], on the device of x (f32, or 16-bit activations).
void check_stat(const char* op, const Tensor& x, const Tensor& t, int64_t c, const char* arg) {
  require_f32(op, {&x, &t}, activation_type(x));
  ADA_CHECK_ARG(t.dtype() == DType::f32, DTypeError)
      << op << ": " << arg << " " << t.str() << " must be f32";
  ADA_CHECK_ARG(t.shape() == Shape{c}, ShapeError)
      << op << ": " << arg << " " << t.str() << " should be [" << c << "]";
}

// Training-mode batch-norm is split so that every channel's statistics use many blocks (one
// block per channel left most of the GPU idle: 64 blocks for ResNet-50's first stages): the
// blocks of (channel, chunk) write double partial sums, a per-channel kernel combines them in
// chunk order (fixed: bit-reproducible), and the element-wise pass runs flat over the tensor.

// Flat index of element m (0 <= m < n*inner) of channel ch; 32-bit division when the channel's
// count fits (a 64-bit one costs several times more, per element).
__device__ __forceinline__ int64_t bn_at(const BnGeom& g, bool narrow, int64_t ch, int64_t m) {
  if (narrow) {
    const uint32_t mm = static_cast<uint32_t>(m), in = static_cast<uint32_t>(g.inner);
    const uint32_t i = mm / in;
    return (static_cast<int64_t>(i) * g.c + ch) * g.inner + (mm - i * in);
  }
  return bn_index(g, ch, m);
}

// acc += f's terms over elements [e0, e1) of channel ch, this thread's share (stride blockDim),
// four loads in flight per thread (one at a time left the memory system idle: the statistics
// ran at a quarter of the bandwidth on an H200). F: V load(flat index), add(acc, V).
template <class F, int kAcc>
__device__ void bn_chunk_sums(const BnGeom& g, int64_t ch, int64_t e0, int64_t e1, const F& f,
                              double (&acc)[kAcc]) {
  const bool narrow = g.count() <= INT32_MAX;
  const int64_t st = blockDim.x;
  int64_t e = e0 + threadIdx.x;
  for (; e + 3 * st < e1; e += 4 * st) {
    const typename F::V v0 = f.load(bn_at(g, narrow, ch, e)),
                        v1 = f.load(bn_at(g, narrow, ch, e + st)),
                        v2 = f.load(bn_at(g, narrow, ch, e + 2 * st)),
                        v3 = f.load(bn_at(g, narrow, ch, e + 3 * st));
    f.add(acc, v0);
    f.add(acc, v1);
    f.add(acc, v2);
    f.add(acc, v3);
  }
  for (; e < e1; e += st) f.add(acc, f.load(bn_at(g, narrow, ch, e)));
}
// T: the activations' element type (float, or 16-bit read as f32).
template <class T>
struct BnValue {
  const T* x;
  struct V {
    float x;
  };
  __device__ V load(int64_t i) const { return {ld(x, i)}; }
  __device__ void add(double (&acc)[1], V v) const { acc[0] += static_cast<double>(v.x); }
};
template <class T>
struct BnSquaredDeviation {
  const T* x;
  double mean;
  using V = typename BnValue<T>::V;
  __device__ V load(int64_t i) const { return {ld(x, i)}; }
  __device__ void add(double (&acc)[1], V v) const {
    const double d = static_cast<double>(v.x) - mean;
    acc[0] += d * d;
  }
};
// dy (masked by y > 0 when y is set: the ReLU that followed) and dy * (x - mean).
template <class T>
struct BnBackwardTerms {
  const T* dy;
  const T* x;
  const T* y;
  double mean;
  struct V {
    float g, x;
  };
  __device__ V load(int64_t i) const {
    const float g = ld(dy, i), xv = ld(x, i);
    return {y && !(ld(y, i) > 0.f) ? 0.f : g, xv};
  }
  __device__ void add(double (&acc)[2], V v) const {
    acc[0] += static_cast<double>(v.g);
    acc[1] += static_cast<double>(v.g) * (static_cast<double>(v.x) - mean);
  }
};

// Chunks per channel: about 1,024 blocks in all, each chunk at least 2,048 elements.
int64_t bn_chunks(const BnGeom& g) {
  const int64_t want = (1024 + g.c - 1) / std::max<int64_t>(g.c, 1);
  return std::max<int64_t>(1, std::min<int64_t>({want, g.count() / 2048, 1024}));
}

// The values (or, channels-last, rows) [e0, e1) of a channel that chunk blockIdx.y of `chunk`
// each covers.
struct BnChunk {
  int64_t e0, e1;
};
__device__ __forceinline__ BnChunk bn_chunk(const BnGeom& g, int64_t chunk) {
  const int64_t e0 = static_cast<int64_t>(blockIdx.y) * chunk;
  return {e0, e0 + chunk < g.count() ? e0 + chunk : g.count()};
}

// part[ch * S + s] = sum over chunk s of channel ch (grid: c x S). mean_or_null: deviations
// from mean_or_null[ch] squared instead of values.
template <class T>
__global__ void bn_stat_partial_kernel(const T* x, const double* mean_or_null, BnGeom g,
                                       int64_t chunk, double* part) {
  __shared__ double sh[33];
  const int64_t S = gridDim.y;
  for (int64_t ch = blockIdx.x; ch < g.c; ch += gridDim.x) {
    const auto [e0, e1] = bn_chunk(g, chunk);
    double acc[1] = {0.0};
    if (mean_or_null)
      bn_chunk_sums(g, ch, e0, e1, BnSquaredDeviation<T>{x, mean_or_null[ch]}, acc);
    else
      bn_chunk_sums(g, ch, e0, e1, BnValue<T>{x}, acc);
    const double v = block_sum(acc[0], sh);
    if (threadIdx.x == 0) part[ch * S + blockIdx.y] = v;
  }
}

// The sum of part[ch * S .. ch * S + S), a warp a channel (the total in lane 0): lane l adds
// elements l, l + 32, ... in order, then warp_sum adds the lanes' sums (a fixed order:
// bit-reproducible). A thread a channel adding its S partials in sequence was latency-bound at
// the channels-last S of 1,024: on an H200 this made ResNet-50 b256's batch-norm forward 71 ms
// of 5 steps against 48 now, its backward with ReLU 90 against 78.
__device__ double bn_warp_sum_parts(const double* part, int64_t ch, int64_t S) {
  double t = 0.0;
  for (int64_t s = threadIdx.x % 32; s < S; s += 32) t += part[ch * S + s];
  return warp_sum(t);
}
// Blocks of kThreads for a warp a channel over c channels.
unsigned warp_channel_blocks(int64_t c) {
  return blocks_for(c * 32);
}
// A warp's first channel and the step to its next (the same in all its lanes).
__device__ __forceinline__ int64_t warp_channel() {
  return global_tid() / 32;
}
__device__ __forceinline__ int64_t warp_channel_stride() {
  return global_stride() / 32;
}

// out[ch] = (sum of part[ch * S .. ch * S + S)) / m.
__global__ void bn_combine_kernel(const double* part, int64_t c, int64_t S, double m, double* out) {
  for (int64_t ch = warp_channel(); ch < c; ch += warp_channel_stride()) {
    const double t = bn_warp_sum_parts(part, ch, S);
    if (threadIdx.x % 32 == 0) out[ch] = t / m;
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

// Channel of flat element i of an [n, c, inner] tensor (32-bit division when it fits).
__device__ __forceinline__ int64_t bn_channel(int64_t i, int64_t c, int64_t inner, bool narrow) {
  if (narrow)
    return (static_cast<uint32_t>(i) / static_cast<uint32_t>(inner)) % static_cast<uint32_t>(c);
  return (i / inner) % c;
}

// The element-wise passes go flat over the tensor, 16 bytes a step (kVec = 4 floats or 8 16-bit
// values) when the vector stays inside one channel (`inner` a multiple of kVec: NCHW planes) or
// covers kVec consecutive channels of one row (`inner` 1 and C a multiple of kVec: channels-last)
// and the pointers are 16-byte aligned; else one element a step. (Rows of `inner` per block left
// most threads idle on 7x7 planes; one 16-bit element a step left channels-last batch norm at a
// fraction of the bandwidth.)
template <class T>
bool bn_vec_ok(int64_t c, int64_t inner, std::initializer_list<const void*> ptrs) {
  constexpr int v = kVec16<T>;
  return (inner % v == 0 || (inner == 1 && c % v == 0)) && aligned16(ptrs);
}
// The channel of element j of the vector starting at flat element e (channel ch0 = e's).
__device__ __forceinline__ int64_t bn_lane_channel(int64_t ch0, int64_t inner, int j) {
  return inner == 1 ? ch0 + j : ch0;
}

// y = x * ab[ch] + ab[c + ch], then max(y, 0) with kRelu (the same bits as relu of the result);
// 16-bit x read as f32, the result rounded once. With r (kRelu only):
// relu(x * ab[ch] + ab[c + ch] + r), add_relu's arithmetic on the normalised value.
template <int kVec, bool kRelu, class T>
__global__ void bn_apply_kernel(const T* x, const T* r, const float* ab, T* y, int64_t total,
                                int64_t c, int64_t inner) {
  using P = Pack<T, kVec>;
  const bool narrow = total <= INT32_MAX;
  for (int64_t q = global_tid(); q < total / kVec; q += global_stride()) {
    const int64_t ch0 = bn_channel(q * kVec, c, inner, narrow);
    const P xv = reinterpret_cast<const P*>(x)[q];
    P rv, out;
    if (r) rv = reinterpret_cast<const P*>(r)[q];
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int64_t ch = bn_lane_channel(ch0, inner, j);
      float e = ld(xv.v, j) * ab[ch] + ab[c + ch];
      if (r) e = e + ld(rv.v, j);
      if (kRelu) e = e > 0.f ? e : 0.f;
      st(out.v, j, e);
    }
    reinterpret_cast<P*>(y)[q] = out;
  }
}
template <bool kRelu, class T>
void bn_apply(const T* x, const T* r, const float* ab, T* y, int64_t total, int64_t c,
              int64_t inner, cudaStream_t st) {
  if (total == 0) return;
  constexpr int v = kVec16<T>;
  if (bn_vec_ok<T>(c, inner, {x, y, r}))
    bn_apply_kernel<v, kRelu, T>
        <<<blocks_for(total / v), kThreads, 0, st>>>(x, r, ab, y, total, c, inner);
  else
    bn_apply_kernel<1, kRelu, T>
        <<<blocks_for(total), kThreads, 0, st>>>(x, r, ab, y, total, c, inner);
  ADA_CUDA_LAUNCH_CHECK();
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

// Training-mode gradients, split as the forward: per (channel, chunk) partial sums of dy and
// dy*(x-mean) in one pass (dy masked by y > 0 when y is given: the fused ReLU's gradient); per
// channel dgamma = sum(dy*(x-mean))*invstd, dbeta = sum(dy) and the coefficients of
// dx = gamma*invstd * (dy - mean(dy) - (x-mean) * dgamma*invstd/m).
template <class T>
__global__ void bn_backward_partial_kernel(const T* dy, const T* x, const T* y,
                                           const float* save_mean, BnGeom g, int64_t chunk,
                                           double* part_dy, double* part_dyx) {
  __shared__ double sh[33];
  const int64_t S = gridDim.y;
  for (int64_t ch = blockIdx.x; ch < g.c; ch += gridDim.x) {
    const auto [e0, e1] = bn_chunk(g, chunk);
    double acc[2] = {0.0, 0.0};
    bn_chunk_sums(g, ch, e0, e1, BnBackwardTerms<T>{dy, x, y, static_cast<double>(save_mean[ch])},
                  acc);
    const double a = block_sum(acc[0], sh);
    const double b = block_sum(acc[1], sh);
    if (threadIdx.x == 0) {
      part_dy[ch * S + blockIdx.y] = a;
      part_dyx[ch * S + blockIdx.y] = b;
    }
  }
}

// Channels-last batch norm ([rows, C]: inner 1, e.g. NHWC activations seen as [N*H*W, C]): the
// kernels above would read each channel's values C apart. Here the 32 lanes of a warp take 32
// consecutive channels of a row (coalesced) and the block's kBnRowWarps warps different rows;
// each lane sums its channel over rows e0 + warp, e0 + warp + kBnRowWarps, ... of the chunk, the
// warps' sums are added in warp order (fixed: bit-reproducible) and written as the other
// kernels' partials, part[ch * S + chunk].
constexpr int kBnRowWarps = 8;

// acc += f's terms over rows [e0, e1) of channel ch: this lane's rows, four loads in flight.
template <class F, int kAcc>
__device__ void bn_row_sums(const BnGeom& g, int64_t ch, int64_t e0, int64_t e1, const F& f,
                            double (&acc)[kAcc]) {
  const int64_t st = blockDim.y;
  int64_t r = e0 + threadIdx.y;
  for (; r + 3 * st < e1; r += 4 * st) {
    const typename F::V v0 = f.load(r * g.c + ch), v1 = f.load((r + st) * g.c + ch),
                        v2 = f.load((r + 2 * st) * g.c + ch), v3 = f.load((r + 3 * st) * g.c + ch);
    f.add(acc, v0);
    f.add(acc, v1);
    f.add(acc, v2);
    f.add(acc, v3);
  }
  for (; r < e1; r += st) f.add(acc, f.load(r * g.c + ch));
}

// The block's partial of each of its channels: the warps' acc[k] added in warp order, written to
// part[k][ch * S + blockIdx.y] by warp 0.
template <int kAcc>
__device__ void bn_row_partials(const BnGeom& g, int64_t ch, const double (&acc)[kAcc],
                                double* const (&part)[kAcc]) {
  __shared__ double sh[kAcc][kBnRowWarps][32];
  for (int k = 0; k < kAcc; ++k) sh[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || ch >= g.c) return;
  for (int k = 0; k < kAcc; ++k) {
    double t = 0.0;
    for (int w = 0; w < kBnRowWarps; ++w) t += sh[k][w][threadIdx.x];
    part[k][ch * gridDim.y + blockIdx.y] = t;
  }
}

// bn_stat_partial_kernel's sums for inner 1 (grid: ceil(C / 32) x S, block 32 x kBnRowWarps).
template <class T>
__global__ void bn_stat_rows_kernel(const T* x, const double* mean_or_null, BnGeom g, int64_t chunk,
                                    double* part) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const auto [e0, e1] = bn_chunk(g, chunk);
  double acc[1] = {0.0};
  if (ch < g.c) {
    if (mean_or_null)
      bn_row_sums(g, ch, e0, e1, BnSquaredDeviation<T>{x, mean_or_null[ch]}, acc);
    else
      bn_row_sums(g, ch, e0, e1, BnValue<T>{x}, acc);
  }
  double* const parts[1] = {part};
  bn_row_partials(g, ch, acc, parts);
}

// bn_backward_partial_kernel's sums for inner 1 (grid and block as bn_stat_rows_kernel).
template <class T>
__global__ void bn_backward_rows_kernel(const T* dy, const T* x, const T* y, const float* save_mean,
                                        BnGeom g, int64_t chunk, double* part_dy,
                                        double* part_dyx) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const auto [e0, e1] = bn_chunk(g, chunk);
  double acc[2] = {0.0, 0.0};
  if (ch < g.c)
    bn_row_sums(g, ch, e0, e1, BnBackwardTerms<T>{dy, x, y, static_cast<double>(save_mean[ch])},
                acc);
  double* const parts[2] = {part_dy, part_dyx};
  bn_row_partials(g, ch, acc, parts);
}

// The channels-last kernels above with 16 bytes a lane: V = kVec16<T> consecutive channels each
// (one 2-byte load a lane left 16-bit batch norm's statistics far below the bandwidth). For
// G = C / V channel groups: with G of 32 or more, a warp's lanes take 32 groups of one row; with
// G under 32 (a power of two), lane l takes group l % G of row l / G, so that C = 64 in 16-bit
// keeps all 32 lanes busy (8 groups x 4 rows). Grid: ceil(G / 32) x S; the block's kBnRowWarps
// warps take further rows; sums are added per channel in (warp, row-lane) order.
template <class T>
bool bn_rows_vec_ok(int64_t c, std::initializer_list<const void*> ptrs) {
  constexpr int v = kVec16<T>;
  if (c % v != 0) return false;
  const int64_t groups = c / v;
  return (groups >= 32 || 32 % groups == 0) && aligned16(ptrs);
}
// This lane's channel group (or G and beyond: none), and its row within a warp's step.
struct BnLane {
  int64_t group;
  int sub, groups_per_warp, rows_per_warp;
  // This lane's first row from e0, and the block's step between its rows.
  __device__ int64_t first_row(int64_t e0) const {
    return e0 + static_cast<int64_t>(threadIdx.y) * rows_per_warp + sub;
  }
  __device__ int64_t row_step() const { return static_cast<int64_t>(kBnRowWarps) * rows_per_warp; }
};
__device__ __forceinline__ BnLane bn_lane(int64_t groups) {
  BnLane l;
  l.groups_per_warp = groups < 32 ? static_cast<int>(groups) : 32;
  l.rows_per_warp = 32 / l.groups_per_warp;
  l.group = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x % l.groups_per_warp;
  l.sub = threadIdx.x / l.groups_per_warp;
  return l;
}
// part[k][(group*V + j) * S + blockIdx.y] = the block's sum of acc[k][j] over its (warp, row-lane)
// threads of the same group, in that order.
template <int kAcc, int V>
__device__ void bn_row_vec_partials(const BnLane& l, int64_t groups, const double (&acc)[kAcc][V],
                                    double* const (&part)[kAcc]) {
  __shared__ double sh[kAcc][kBnRowWarps][32][V];
  for (int k = 0; k < kAcc; ++k)
    for (int j = 0; j < V; ++j) sh[k][threadIdx.y][threadIdx.x][j] = acc[k][j];
  __syncthreads();
  if (threadIdx.y != 0 || l.sub != 0 || l.group >= groups) return;
  for (int k = 0; k < kAcc; ++k)
    for (int j = 0; j < V; ++j) {
      double t = 0.0;
      for (int w = 0; w < kBnRowWarps; ++w)
        for (int s = 0; s < l.rows_per_warp; ++s)
          t += sh[k][w][s * l.groups_per_warp + threadIdx.x][j];
      part[k][(l.group * V + j) * gridDim.y + blockIdx.y] = t;
    }
}

// bn_stat_rows_kernel's sums, V channels a lane.
template <class T>
__global__ void bn_stat_rows_vec_kernel(const T* x, const double* mean_or_null, BnGeom g,
                                        int64_t chunk, double* part) {
  constexpr int V = kVec16<T>;
  using P = Pack<T, V>;
  const int64_t groups = g.c / V;
  const BnLane l = bn_lane(groups);
  const auto [e0, e1] = bn_chunk(g, chunk);
  double acc[1][V] = {};
  if (l.group < groups) {
    double mean[V] = {};
    if (mean_or_null)
      for (int j = 0; j < V; ++j) mean[j] = mean_or_null[l.group * V + j];
    const P* xv = reinterpret_cast<const P*>(x);
    const int64_t step = l.row_step();
    int64_t r = l.first_row(e0);
    auto add = [&](const P& p) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const double v = static_cast<double>(ld(p.v, j));
        if (mean_or_null)
          acc[0][j] += (v - mean[j]) * (v - mean[j]);
        else
          acc[0][j] += v;
      }
    };
    for (; r + step < e1; r += 2 * step) {  // two loads in flight
      const P p0 = xv[r * groups + l.group], p1 = xv[(r + step) * groups + l.group];
      add(p0);
      add(p1);
    }
    for (; r < e1; r += step) add(xv[r * groups + l.group]);
  }
  double* const parts[1] = {part};
  bn_row_vec_partials(l, groups, acc, parts);
}

// bn_backward_rows_kernel's sums, V channels a lane.
template <class T>
__global__ void bn_backward_rows_vec_kernel(const T* dy, const T* x, const T* y,
                                            const float* save_mean, BnGeom g, int64_t chunk,
                                            double* part_dy, double* part_dyx) {
  constexpr int V = kVec16<T>;
  using P = Pack<T, V>;
  const int64_t groups = g.c / V;
  const BnLane l = bn_lane(groups);
  const auto [e0, e1] = bn_chunk(g, chunk);
  double acc[2][V] = {};
  if (l.group < groups) {
    double mean[V];
    for (int j = 0; j < V; ++j) mean[j] = save_mean[l.group * V + j];
    const P *gv = reinterpret_cast<const P*>(dy), *xv = reinterpret_cast<const P*>(x),
            *yv = reinterpret_cast<const P*>(y);
    for (int64_t r = l.first_row(e0); r < e1; r += l.row_step()) {
      const int64_t q = r * groups + l.group;
      const P pg = gv[q], px = xv[q];
      P py;
      if (y) py = yv[q];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        // BnBackwardTerms' terms: dy masked by y > 0 when y is set, and dy * (x - mean).
        const float gj = y && !(ld(py.v, j) > 0.f) ? 0.f : ld(pg.v, j);
        acc[0][j] += static_cast<double>(gj);
        acc[1][j] += static_cast<double>(gj) * (static_cast<double>(ld(px.v, j)) - mean[j]);
      }
    }
  }
  double* const parts[2] = {part_dy, part_dyx};
  bn_row_vec_partials(l, groups, acc, parts);
}

// The channels-last normalising passes ([rows, C], inner 1), on the partial sums' grid and lanes:
// a lane keeps one group of V channels, holds their coefficients in registers and walks the
// chunk's rows (two in flight). The flat kernels (bn_apply_kernel, bn_backward_apply_kernel)
// give lane l of a warp the channels of vector l instead, so each per-channel coefficient load
// of a warp touches up to 32 cache lines: by that count L1 bounds the 16-bit backward at about
// 4 SM cycles an element for C >= 256 (its 32 double loads a vector): by that count most of
// ResNet-50 b256's channels-last batch-norm backward time on an H200 (2.5x NCHW's per element,
// whose warps share one channel; the new kernels not yet measured). The same arithmetic as the
// flat kernels, element for element.
// This lane's place in a rows pass (bn_lane's group, the chunk's rows [e0, e1)); active: it has a
// group. walk(two, one) visits the lane's rows as the vector index q of its group in each row,
// two at a time (two(q0, q1) loads both rows before storing either), one(q) for an odd last.
struct BnRowsLane {
  BnLane l;
  int64_t groups, e0, e1;
  __device__ bool active() const { return l.group < groups; }
  template <class Two, class One>
  __device__ void walk(const Two& two, const One& one) const {
    const int64_t step = l.row_step();
    int64_t row = l.first_row(e0);
    for (; row + step < e1; row += 2 * step)
      two(row * groups + l.group, (row + step) * groups + l.group);
    if (row < e1) one(row * groups + l.group);
  }
};
template <class T>
__device__ BnRowsLane bn_rows_lane(const BnGeom& g, int64_t chunk) {
  const int64_t groups = g.c / kVec16<T>;
  const auto [e0, e1] = bn_chunk(g, chunk);
  return {bn_lane(groups), groups, e0, e1};
}

template <bool kRelu, class T>
__global__ void bn_apply_rows_kernel(const T* x, const T* r, const float* ab, T* y, BnGeom g,
                                     int64_t chunk) {
  constexpr int V = kVec16<T>;
  using P = Pack<T, V>;
  const BnRowsLane w = bn_rows_lane<T>(g, chunk);
  if (!w.active()) return;
  float a[V], b[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    a[j] = ab[w.l.group * V + j];
    b[j] = ab[g.c + w.l.group * V + j];
  }
  const P* xv = reinterpret_cast<const P*>(x);
  const P* rv = reinterpret_cast<const P*>(r);
  P* yv = reinterpret_cast<P*>(y);
  auto apply = [&](const P& xp, const P& rp) {
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float e = ld(xp.v, j) * a[j] + b[j];
      if (r) e = e + ld(rp.v, j);
      if (kRelu) e = e > 0.f ? e : 0.f;
      st(out.v, j, e);
    }
    return out;
  };
  auto residual = [&](int64_t q) {
    P rp;
    if (r) rp = rv[q];
    return rp;
  };
  w.walk(
      [&](int64_t q0, int64_t q1) {
        const P x0 = xv[q0], x1 = xv[q1], r0 = residual(q0), r1 = residual(q1);
        yv[q0] = apply(x0, r0);
        yv[q1] = apply(x1, r1);
      },
      [&](int64_t q) { yv[q] = apply(xv[q], residual(q)); });
}

// bn_backward_apply_kernel's dx on the partial sums' grid, a lane's coefficients in registers.
template <bool kRelu, class T>
__global__ void bn_backward_apply_rows_kernel(const T* dy, const T* x, const T* y,
                                              const double* coef, T* dx, BnGeom g, int64_t chunk) {
  constexpr int V = kVec16<T>;
  using P = Pack<T, V>;
  const BnRowsLane w = bn_rows_lane<T>(g, chunk);
  if (!w.active()) return;
  double kk[V], mean_dy[V], cf[V], mean[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const double* k = coef + 4 * (w.l.group * V + j);
    kk[j] = k[0];
    mean_dy[j] = k[1];
    cf[j] = k[2];
    mean[j] = k[3];
  }
  const P *gv = reinterpret_cast<const P*>(dy), *xv = reinterpret_cast<const P*>(x),
          *yv = reinterpret_cast<const P*>(y);
  P* dxv = reinterpret_cast<P*>(dx);
  auto apply = [&](const P& gp, const P& xp, const P& yp) {
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float gj = ld(gp.v, j);
      if (kRelu && !(ld(yp.v, j) > 0.f)) gj = 0.f;
      st(out.v, j, static_cast<float>(kk[j] * (gj - mean_dy[j] - (ld(xp.v, j) - mean[j]) * cf[j])));
    }
    return out;
  };
  auto mask = [&](int64_t q) {  // y's vector, read only with kRelu
    P yp;
    if (kRelu) yp = yv[q];
    return yp;
  };
  w.walk(
      [&](int64_t q0, int64_t q1) {
        const P g0 = gv[q0], g1 = gv[q1], x0 = xv[q0], x1 = xv[q1], y0 = mask(q0), y1 = mask(q1);
        dxv[q0] = apply(g0, x0, y0);
        dxv[q1] = apply(g1, x1, y1);
      },
      [&](int64_t q) { dxv[q] = apply(gv[q], xv[q], mask(q)); });
}

// ADA_CUDA_BN_ROWS_APPLY=0 runs the channels-last normalising passes as the flat kernels (the
// same results), for A/B timing (`gpu_test.sh bn`).
bool bn_rows_apply_enabled() {
  static const bool on = env_switch(
      "ADA_CUDA_BN_ROWS_APPLY", true,
      "1 (channels-last normalising passes on rows, the default) or 0 (the flat kernels)");
  return on;
}

// The partial-sum pass of either layout: chunks per channel and the launch. vec: the
// channels-last kernels' channels a lane (1: one).
struct BnPartials {
  int64_t S, chunk;
  dim3 grid, block;
  bool rows;
  int vec;
};
BnPartials bn_partials(const BnGeom& g, int vec) {
  BnPartials p;
  p.rows = g.inner == 1;
  p.vec = p.rows ? vec : 1;
  const int64_t col_blocks = (g.c / p.vec + 31) / 32;
  // About 1,024 blocks in all, each chunk at least 256 rows (channels-last); see bn_chunks.
  p.S = p.rows ? std::max<int64_t>(1, std::min<int64_t>({(1024 + col_blocks - 1) / col_blocks,
                                                         g.count() / 256, 1024}))
               : bn_chunks(g);
  p.chunk = (g.count() + p.S - 1) / p.S;
  p.grid = dim3(static_cast<unsigned>(p.rows ? col_blocks : std::min<int64_t>(g.c, 65535)),
                static_cast<unsigned>(p.S));
  p.block = p.rows ? dim3(32, kBnRowWarps) : dim3(kBnThreads);
  return p;
}
// The channels a lane for x's dtype and these tensors (all of x's shape).
int bn_rows_vec(const BnGeom& g, DType t, std::initializer_list<const void*> ptrs) {
  int v = 1;
  with_float_type(t, [&](auto tag) {
    using T = decltype(tag);
    if (g.inner == 1 && bn_rows_vec_ok<T>(g.c, ptrs)) v = kVec16<T>;
  });
  return v;
}

// coef[4 ch .. 4 ch + 3] = {gamma*invstd, mean(dy), dgamma*invstd/m, mean}.
__global__ void bn_backward_finish_kernel(const double* part_dy, const double* part_dyx,
                                          const float* gamma, const float* save_mean,
                                          const float* save_invstd, int64_t c, int64_t S, double m,
                                          float* dgamma, float* dbeta, double* coef) {
  for (int64_t ch = warp_channel(); ch < c; ch += warp_channel_stride()) {
    const double sdy = bn_warp_sum_parts(part_dy, ch, S), sdyx = bn_warp_sum_parts(part_dyx, ch, S);
    if (threadIdx.x % 32 != 0) continue;
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

// dx = kk * (g - mean(dy) - (x - mean) * cf), g = dy masked by y > 0 with kRelu; vectors as in
// bn_apply_kernel.
template <int kVec, bool kRelu, class T>
__global__ void bn_backward_apply_kernel(const T* dy, const T* x, const T* y, const double* coef,
                                         T* dx, int64_t total, int64_t c, int64_t inner) {
  using P = Pack<T, kVec>;
  const bool narrow = total <= INT32_MAX;
  for (int64_t q = global_tid(); q < total / kVec; q += global_stride()) {
    const int64_t ch0 = bn_channel(q * kVec, c, inner, narrow);
    const P gv = reinterpret_cast<const P*>(dy)[q], xv = reinterpret_cast<const P*>(x)[q];
    P yv, out;
    if (kRelu) yv = reinterpret_cast<const P*>(y)[q];
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const double* k = coef + 4 * bn_lane_channel(ch0, inner, j);
      const double kk = k[0], mean_dy = k[1], cf = k[2], mean = k[3];
      float g = ld(gv.v, j);
      if (kRelu && !(ld(yv.v, j) > 0.f)) g = 0.f;
      st(out.v, j, static_cast<float>(kk * (g - mean_dy - (ld(xv.v, j) - mean) * cf)));
    }
    reinterpret_cast<P*>(dx)[q] = out;
  }
}
template <bool kRelu, class T>
void bn_backward_apply(const T* dy, const T* x, const T* y, const double* coef, T* dx,
                       int64_t total, int64_t c, int64_t inner, cudaStream_t st) {
  if (total == 0) return;
  constexpr int v = kVec16<T>;
  if (bn_vec_ok<T>(c, inner, {dy, x, y, dx}))
    bn_backward_apply_kernel<v, kRelu, T>
        <<<blocks_for(total / v), kThreads, 0, st>>>(dy, x, y, coef, dx, total, c, inner);
  else
    bn_backward_apply_kernel<1, kRelu, T>
        <<<blocks_for(total), kThreads, 0, st>>>(dy, x, y, coef, dx, total, c, inner);
  ADA_CUDA_LAUNCH_CHECK();
}

// Eval-mode gradients per channel (statistics constant): dx = dy * gamma*invstd. As the CPU,
// the dgamma terms dy*(x - running_mean) are formed in f32 and summed in double.
template <class T>
__global__ void bn_eval_backward_kernel(const T* dy, const T* x, const float* gamma,
                                        const float* rm, const float* rv, float eps, BnGeom g,
                                        T* dx, float* dgamma, float* dbeta) {
  __shared__ double sh[33];
  const int64_t cnt = g.count();
  for (int64_t ch = blockIdx.x; ch < g.c; ch += gridDim.x) {
    const double invstd = 1.0 / sqrt(static_cast<double>(rv[ch]) + eps);
    const float k = static_cast<float>(gamma[ch] * invstd);
    const float mu = rm[ch];
    double sdy = 0.0, sdyx = 0.0;
    for (int64_t e = threadIdx.x; e < cnt; e += blockDim.x) {
      const int64_t i = bn_index(g, ch, e);
      const float gy = ld(dy, i);
      sdy += gy;
      sdyx += gy * (ld(x, i) - mu);
      st(dx, i, gy * k);
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

// The layer-norm kernels read x and dy, and write y and dx, as T: f32 or a 16-bit activation
// type (kernel_util.cuh's ld/st); statistics, gamma, beta and their gradients are f32.
template <class T>
__global__ void ln_forward_kernel(const T* x, const float* gamma, const float* beta, float eps,
                                  int64_t rows, int64_t d, T* y, float* save_mean,
                                  float* save_rstd) {
  __shared__ double sh[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += ld(xr, j);
    s = block_sum(s, sh);
    const double mean = s / d;
    double ss = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      ss += (ld(xr, j) - mean) * (ld(xr, j) - mean);
    ss = block_sum(ss, sh);
    const double rstd = 1.0 / sqrt(ss / d + eps);
    if (threadIdx.x == 0) {
      save_mean[r] = static_cast<float>(mean);
      save_rstd[r] = static_cast<float>(rstd);
    }
    const float fm = static_cast<float>(mean), fr = static_cast<float>(rstd);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      st(yr, j, (ld(xr, j) - fm) * fr * gamma[j] + beta[j]);
  }
}

// Layer norm a warp a row (kernel_util.cuh; 1,024 values: BERT-Large's width in f32 or 16-bit)
// go one warp a row, the row held in registers: one read of x (and dy) from memory, 16 bytes a
// load, warp shuffles instead of block barriers. (The block-a-row kernels above, kept for wider
// or unaligned rows, ran BERT-Large's layer norms at a fifth of the bandwidth on an H200.) The
// per-element arithmetic is theirs; the row sums are added in another fixed order.
template <class T>
__global__ void ln_forward_warp_kernel(const T* x, const float* gamma, const float* beta, float eps,
                                       int64_t rows, int64_t d, T* y, float* save_mean,
                                       float* save_rstd) {
  constexpr int V = kVec16<T>, I = kWarpRowIters<T>;
  const int64_t nv = d / V;
  for (int64_t r = warp_row(); r < rows; r += warp_row_stride()) {
    float v[I][V];
    warp_row_load(x + r * d, nv, v);
    double s = 0.0, ss = 0.0;
    warp_row_each<I, V>(nv, [&](int i, int j, int64_t) { s += v[i][j]; });
    const double mean = warp_total(s) / d;
    warp_row_each<I, V>(nv,
                        [&](int i, int j, int64_t) { ss += (v[i][j] - mean) * (v[i][j] - mean); });
    const double rstd = 1.0 / sqrt(warp_total(ss) / d + eps);
    if ((threadIdx.x & 31) == 0) {
      save_mean[r] = static_cast<float>(mean);
      save_rstd[r] = static_cast<float>(rstd);
    }
    const float fm = static_cast<float>(mean), fr = static_cast<float>(rstd);
    warp_row_store<T, I, V>(y + r * d, nv, [&](int i, int j, int64_t col) {
      return (v[i][j] - fm) * fr * gamma[col] + beta[col];
    });
  }
}

// ln_backward_dx_kernel's dx, a warp a row as ln_forward_warp_kernel.
template <class T>
__global__ void ln_backward_dx_warp_kernel(const T* dy, const T* x, const float* gamma,
                                           const float* save_mean, const float* save_rstd,
                                           int64_t rows, int64_t d, T* dx) {
  constexpr int V = kVec16<T>, I = kWarpRowIters<T>;
  const int64_t nv = d / V;
  for (int64_t r = warp_row(); r < rows; r += warp_row_stride()) {
    const double mean = save_mean[r], rstd = save_rstd[r];
    float xv[I][V], gv[I][V];
    warp_row_load(x + r * d, nv, xv);
    warp_row_load(dy + r * d, nv, gv);
    double s1 = 0.0, s2 = 0.0;
    warp_row_each<I, V>(nv, [&](int i, int j, int64_t col) {
      const double xh = (xv[i][j] - mean) * rstd, dxh = static_cast<double>(gv[i][j]) * gamma[col];
      s1 += dxh;
      s2 += dxh * xh;
    });
    const double m1 = warp_total(s1) / d, m2 = warp_total(s2) / d;
    warp_row_store<T, I, V>(dx + r * d, nv, [&](int i, int j, int64_t col) {
      const double xh = (xv[i][j] - mean) * rstd;
      return static_cast<float>(rstd * (static_cast<double>(gv[i][j]) * gamma[col] - m1 - xh * m2));
    });
  }
}

// dx per row: rstd * (dy*gamma - mean(dy*gamma) - xhat * mean(dy*gamma*xhat)).
template <class T>
__global__ void ln_backward_dx_kernel(const T* dy, const T* x, const float* gamma,
                                      const float* save_mean, const float* save_rstd, int64_t rows,
                                      int64_t d, T* dx) {
  __shared__ double sh[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    const T* gr = dy + r * d;
    T* dr = dx + r * d;
    const double mean = save_mean[r], rstd = save_rstd[r];
    double s1 = 0.0, s2 = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double xh = (ld(xr, j) - mean) * rstd, dxh = static_cast<double>(ld(gr, j)) * gamma[j];
      s1 += dxh;
      s2 += dxh * xh;
    }
    s1 = block_sum(s1, sh);
    s2 = block_sum(s2, sh);
    const double m1 = s1 / d, m2 = s2 / d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double xh = (ld(xr, j) - mean) * rstd;
      st(dr, j,
         static_cast<float>(rstd * (static_cast<double>(ld(gr, j)) * gamma[j] - m1 - xh * m2)));
    }
  }
}

// dgamma/dbeta in two fixed-order stages. Stage 1: block (x = 32 columns, y = 8 row lanes) of
// grid (column tiles, chunks) writes, for its chunk of rows, pg[chunk*d + j] = sum dy*xhat and
// pb[chunk*d + j] = sum dy.
constexpr int kLnCols = 32, kLnLanes = 8;

template <class T>
__global__ void ln_param_partial_kernel(const T* dy, const T* x, const float* save_mean,
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
        const float g = ld(dy, r * d + j);
        const double xh = (ld(x, r * d + j) - mean) * rstd;
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

// Stage 1 with 16 bytes a thread: V = kVec16<T> consecutive columns each, a block 32 * V columns
// (d a multiple of V, pointers 16-byte aligned); the same sums in the same order per column.
template <class T>
__global__ void ln_param_partial_vec_kernel(const T* dy, const T* x, const float* save_mean,
                                            const float* save_rstd, int64_t rows, int64_t d,
                                            int64_t chunks, double* pg, double* pb) {
  constexpr int V = kVec16<T>;
  using P = Pack<T, V>;
  __shared__ double shg[kLnLanes][kLnCols][V], shb[kLnLanes][kLnCols][V];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t chunk = blockIdx.y, nv = d / V;
  const int64_t r0 = rows * chunk / chunks, r1 = rows * (chunk + 1) / chunks;
  const P *gv = reinterpret_cast<const P*>(dy), *xv = reinterpret_cast<const P*>(x);
  for (int64_t c0 = static_cast<int64_t>(blockIdx.x) * kLnCols; c0 < nv;
       c0 += static_cast<int64_t>(gridDim.x) * kLnCols) {
    const int64_t c = c0 + tx;  // this thread's vector of columns c*V .. c*V + V - 1
    double ag[V] = {}, ab[V] = {};
    if (c < nv) {
      for (int64_t r = r0 + ty; r < r1; r += kLnLanes) {
        const double mean = save_mean[r], rstd = save_rstd[r];
        const P pgv = gv[r * nv + c], pxv = xv[r * nv + c];
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float g = ld(pgv.v, j);
          const double xh = (ld(pxv.v, j) - mean) * rstd;
          ag[j] += g * xh;
          ab[j] += g;
        }
      }
    }
    for (int j = 0; j < V; ++j) {
      shg[ty][tx][j] = ag[j];
      shb[ty][tx][j] = ab[j];
    }
    __syncthreads();
    if (ty == 0 && c < nv) {
      for (int j = 0; j < V; ++j) {
        double sg = 0.0, sb = 0.0;
        for (int k = 0; k < kLnLanes; ++k) {
          sg += shg[k][tx][j];
          sb += shb[k][tx][j];
        }
        pg[chunk * d + c * V + j] = sg;
        pb[chunk * d + c * V + j] = sb;
      }
    }
    __syncthreads();
  }
}

// Stage 2: dgamma[j] = sum over chunks of pg, dbeta[j] likewise, in chunk order.
__global__ void ln_param_final_kernel(const double* pg, const double* pb, int64_t d, int64_t chunks,
                                      float* dgamma, float* dbeta) {
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

namespace {

Tensor bn_train(const char* op, bool relu, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                Tensor& save_mean, Tensor& save_invstd, const Tensor& residual = Tensor()) {
  const int dev = require_f32(op, {&x}, activation_type(x));
  if (residual.defined()) {
    require_on(op, dev, {&residual});
    ADA_CHECK_ARG(residual.dtype() == x.dtype(), DTypeError)
        << op << ": residual " << residual.str() << " and x " << x.str() << " differ in dtype";
    check_same_shape(residual, x, op);
  }
  const BnGeom g = bn_geom(op, x, gamma, beta);
  check_stat(op, x, gamma, g.c, "gamma");
  check_stat(op, x, beta, g.c, "beta");
  const bool track = running_mean.defined();
  if (track) {
    check_stat(op, x, running_mean, g.c, "running_mean");
    check_stat(op, x, running_var, g.c, "running_var");
  }
  ADA_CHECK_ARG(g.count() > 1, ShapeError)
      << "batch_norm_train: needs more than one value per channel in training mode, got input "
      << x.str();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  save_mean = Tensor::empty({g.c}, DType::f32, x.device());
  save_invstd = Tensor::empty({g.c}, DType::f32, x.device());
  if (g.c == 0) return y;
  const BnPartials bp = bn_partials(g, bn_rows_vec(g, x.dtype(), {x.raw_data()}));
  const int64_t S = bp.S;
  const double m = static_cast<double>(g.count());
  cudaStream_t st = stream(dev);
  Scratch part(static_cast<size_t>(g.c * S) * sizeof(double), dev);
  Scratch stats(2 * static_cast<size_t>(g.c) * sizeof(double), dev);  // mean, var
  Scratch ab(2 * static_cast<size_t>(g.c) * sizeof(float), dev);
  double* mean = stats.as<double>();
  double* var = mean + g.c;
  with_float_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* xp = data_as<T>(x);
    // Per (channel, chunk) sums of x, then of its squared deviations from the mean.
    auto partials = [&](const double* dev_from) {
      if (bp.vec > 1)
        bn_stat_rows_vec_kernel<T>
            <<<bp.grid, bp.block, 0, st>>>(xp, dev_from, g, bp.chunk, part.as<double>());
      else if (bp.rows)
        bn_stat_rows_kernel<T>
            <<<bp.grid, bp.block, 0, st>>>(xp, dev_from, g, bp.chunk, part.as<double>());
      else
        bn_stat_partial_kernel<T>
            <<<bp.grid, bp.block, 0, st>>>(xp, dev_from, g, bp.chunk, part.as<double>());
      ADA_CUDA_LAUNCH_CHECK();
    };
    partials(nullptr);
    bn_combine_kernel<<<warp_channel_blocks(g.c), kThreads, 0, st>>>(part.as<const double>(), g.c,
                                                                     S, m, mean);
    ADA_CUDA_LAUNCH_CHECK();
    partials(mean);
    bn_combine_kernel<<<warp_channel_blocks(g.c), kThreads, 0, st>>>(part.as<const double>(), g.c,
                                                                     S, m, var);
    ADA_CUDA_LAUNCH_CHECK();
    bn_train_finish_kernel<<<blocks_for(g.c), kThreads, 0, st>>>(
        mean, var, gamma.data<float>(), beta.data<float>(), g.c, m, momentum, eps,
        save_mean.data<float>(), save_invstd.data<float>(),
        track ? running_mean.data<float>() : nullptr, track ? running_var.data<float>() : nullptr,
        ab.as<float>());
    ADA_CUDA_LAUNCH_CHECK();
    const T* rp = residual.defined() ? data_as<T>(residual) : nullptr;
    T* yp = data_as<T>(y);
    if (bp.vec > 1 && bn_rows_apply_enabled() && aligned16({rp, yp})) {  // channels-last
      if (relu)
        bn_apply_rows_kernel<true, T>
            <<<bp.grid, bp.block, 0, st>>>(xp, rp, ab.as<const float>(), yp, g, bp.chunk);
      else
        bn_apply_rows_kernel<false, T>
            <<<bp.grid, bp.block, 0, st>>>(xp, rp, ab.as<const float>(), yp, g, bp.chunk);
      ADA_CUDA_LAUNCH_CHECK();
    } else if (relu) {
      bn_apply<true>(xp, rp, ab.as<const float>(), yp, x.numel(), g.c, g.inner, st);
    } else {
      bn_apply<false>(xp, rp, ab.as<const float>(), yp, x.numel(), g.c, g.inner, st);
    }
  });
  return y;
}

}  // namespace

Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                        Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                        Tensor& save_mean, Tensor& save_invstd) {
  return bn_train("batch_norm_train", false, x, gamma, beta, running_mean, running_var, momentum,
                  eps, save_mean, save_invstd);
}

Tensor batch_norm_relu_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                             Tensor& save_mean, Tensor& save_invstd, const Tensor& residual) {
  return bn_train("batch_norm_relu_train", true, x, gamma, beta, running_mean, running_var,
                  momentum, eps, save_mean, save_invstd, residual);
}

Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, float eps) {
  const char* op = "batch_norm_eval";
  const int dev = require_f32(op, {&x}, activation_type(x));
  const BnGeom g = bn_geom(op, x, gamma, beta);
  check_stat(op, x, gamma, g.c, "gamma");
  check_stat(op, x, beta, g.c, "beta");
  check_stat(op, x, running_mean, g.c, "running_mean");
  check_stat(op, x, running_var, g.c, "running_var");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t total = x.numel();
  if (total == 0) return y;
  cudaStream_t s = stream(dev);
  Scratch ab(2 * static_cast<size_t>(g.c) * sizeof(float), dev);
  bn_eval_coef_kernel<<<blocks_for(g.c), kThreads, 0, s>>>(
      gamma.data<float>(), beta.data<float>(), running_mean.data<float>(),
      running_var.data<float>(), g.c, eps, ab.as<float>());
  ADA_CUDA_LAUNCH_CHECK();
  with_float_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    bn_apply<false>(data_as<T>(x), static_cast<const T*>(nullptr), ab.as<const float>(),
                    data_as<T>(y), total, g.c, g.inner, s);
  });
  return y;
}

namespace {

// y defined: the gradient of relu(batch_norm(x)) from its output y.
BatchNormGrads bn_backward(const char* op, const Tensor& dy, const Tensor& y, const Tensor& x,
                           const Tensor& gamma, const Tensor& save_mean,
                           const Tensor& save_invstd) {
  const int dev = require_f32(op, {&dy, &x}, activation_type(dy));
  ADA_CHECK_ARG(x.dtype() == dy.dtype() && (!y.defined() || y.dtype() == dy.dtype()), DTypeError)
      << op << ": dy " << dy.str() << ", x " << x.str() << (y.defined() ? " and y " + y.str() : "")
      << " must have one dtype";
  const BnGeom g = bn_geom(op, x, gamma, Tensor());
  check_stat(op, x, gamma, g.c, "gamma");
  check_same_shape(dy, x, op);
  if (y.defined()) {
    require_on(op, dev, {&y});
    check_same_shape(y, x, op);
  }
  check_stat(op, x, save_mean, g.c, "save_mean");
  check_stat(op, x, save_invstd, g.c, "save_invstd");
  const Device dv = x.device();
  BatchNormGrads r{Tensor::empty(x.shape(), dy.dtype(), dv), Tensor::empty({g.c}, DType::f32, dv),
                   Tensor::empty({g.c}, DType::f32, dv)};
  if (g.c == 0) return r;
  if (g.count() == 0) {  // no values: zero parameter gradients, an empty dx
    ADA_CUDA_CHECK(cudaMemsetAsync(r.dgamma.data<float>(), 0, g.c * sizeof(float), stream(dev)));
    ADA_CUDA_CHECK(cudaMemsetAsync(r.dbeta.data<float>(), 0, g.c * sizeof(float), stream(dev)));
    return r;
  }
  const BnPartials bp = bn_partials(
      g, bn_rows_vec(g, x.dtype(),
                     {dy.raw_data(), x.raw_data(), y.defined() ? y.raw_data() : nullptr}));
  const int64_t S = bp.S;
  cudaStream_t st = stream(dev);
  Scratch part(2 * static_cast<size_t>(g.c * S) * sizeof(double), dev);
  Scratch coef(4 * static_cast<size_t>(g.c) * sizeof(double), dev);
  double* part_dy = part.as<double>();
  double* part_dyx = part_dy + g.c * S;
  with_float_type(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    const T *dyp = data_as<T>(dy), *xp = data_as<T>(x), *yp = y.defined() ? data_as<T>(y) : nullptr;
    if (bp.vec > 1)
      bn_backward_rows_vec_kernel<T><<<bp.grid, bp.block, 0, st>>>(
          dyp, xp, yp, save_mean.data<float>(), g, bp.chunk, part_dy, part_dyx);
    else if (bp.rows)
      bn_backward_rows_kernel<T><<<bp.grid, bp.block, 0, st>>>(dyp, xp, yp, save_mean.data<float>(),
                                                               g, bp.chunk, part_dy, part_dyx);
    else
      bn_backward_partial_kernel<T><<<bp.grid, bp.block, 0, st>>>(
          dyp, xp, yp, save_mean.data<float>(), g, bp.chunk, part_dy, part_dyx);
    ADA_CUDA_LAUNCH_CHECK();
    bn_backward_finish_kernel<<<warp_channel_blocks(g.c), kThreads, 0, st>>>(
        part_dy, part_dyx, gamma.data<float>(), save_mean.data<float>(), save_invstd.data<float>(),
        g.c, S, static_cast<double>(g.count()), r.dgamma.data<float>(), r.dbeta.data<float>(),
        coef.as<double>());
    ADA_CUDA_LAUNCH_CHECK();
    const double* cf = coef.as<const double>();
    T* dxp = data_as<T>(r.dx);
    if (bp.vec > 1 && bn_rows_apply_enabled() && aligned16({dxp})) {  // channels-last
      if (yp)
        bn_backward_apply_rows_kernel<true, T>
            <<<bp.grid, bp.block, 0, st>>>(dyp, xp, yp, cf, dxp, g, bp.chunk);
      else
        bn_backward_apply_rows_kernel<false, T>
            <<<bp.grid, bp.block, 0, st>>>(dyp, xp, yp, cf, dxp, g, bp.chunk);
      ADA_CUDA_LAUNCH_CHECK();
    } else if (yp) {
      bn_backward_apply<true>(dyp, xp, yp, cf, dxp, x.numel(), g.c, g.inner, st);
    } else {
      bn_backward_apply<false>(dyp, xp, yp, cf, dxp, x.numel(), g.c, g.inner, st);
    }
  });
  return r;
}

}  // namespace

BatchNormGrads batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd) {
  return bn_backward("batch_norm_backward", dy, Tensor(), x, gamma, save_mean, save_invstd);
}

BatchNormGrads batch_norm_relu_backward(const Tensor& dy, const Tensor& y, const Tensor& x,
                                        const Tensor& gamma, const Tensor& save_mean,
                                        const Tensor& save_invstd) {
  return bn_backward("batch_norm_relu_backward", dy, y, x, gamma, save_mean, save_invstd);
}

BatchNormGrads batch_norm_eval_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                        const Tensor& running_mean, const Tensor& running_var,
                                        float eps) {
  const char* op = "batch_norm_eval_backward";
  const int dev = require_f32(op, {&dy, &x}, activation_type(dy));
  ADA_CHECK_ARG(x.dtype() == dy.dtype(), DTypeError)
      << op << ": dy " << dy.str() << " and x " << x.str() << " must have one dtype";
  const BnGeom g = bn_geom(op, x, gamma, Tensor());
  check_stat(op, x, gamma, g.c, "gamma");
  check_same_shape(dy, x, op);
  check_stat(op, x, running_mean, g.c, "running_mean");
  check_stat(op, x, running_var, g.c, "running_var");
  const Device dv = x.device();
  BatchNormGrads r{Tensor::empty(x.shape(), dy.dtype(), dv), Tensor::empty({g.c}, DType::f32, dv),
                   Tensor::empty({g.c}, DType::f32, dv)};
  if (g.c == 0) return r;
  with_float_type(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    bn_eval_backward_kernel<T><<<row_blocks(g.c), kBnThreads, 0, stream(dev)>>>(
        data_as<T>(dy), data_as<T>(x), gamma.data<float>(), running_mean.data<float>(),
        running_var.data<float>(), eps, g, data_as<T>(r.dx), r.dgamma.data<float>(),
        r.dbeta.data<float>());
  });
  ADA_CUDA_LAUNCH_CHECK();
  return r;
}

Tensor layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& save_mean, Tensor& save_rstd) {
  const char* op = "layer_norm_forward";
  require_f32(op, {&x}, activation_type(x));
  const int dev = require_f32(op, {&gamma, &beta});
  require_on(op, dev, {&x});
  const int64_t d = ln_width(op, x, gamma);
  check_same_shape(gamma, beta, "layer_norm_forward (gamma vs beta)");
  const int64_t rows = d ? x.numel() / d : 0;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  save_mean = Tensor::empty({rows}, DType::f32, x.device());
  save_rstd = Tensor::empty({rows}, DType::f32, x.device());
  if (rows == 0) return y;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (warp_row_ok<T>(d, {x.raw_data(), y.raw_data()}))
      ln_forward_warp_kernel<<<warp_row_blocks(rows), 32 * kWarpRows, 0, stream(dev)>>>(
          data_as<T>(x), gamma.data<float>(), beta.data<float>(), eps, rows, d, data_as<T>(y),
          save_mean.data<float>(), save_rstd.data<float>());
    else
      ln_forward_kernel<<<row_blocks(rows), row_threads(d), 0, stream(dev)>>>(
          data_as<T>(x), gamma.data<float>(), beta.data<float>(), eps, rows, d, data_as<T>(y),
          save_mean.data<float>(), save_rstd.data<float>());
  });
  ADA_CUDA_LAUNCH_CHECK();
  return y;
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_rstd) {
  const char* op = "layer_norm_backward";
  require_f32(op, {&dy, &x}, activation_type(x));
  ADA_CHECK_ARG(dy.dtype() == x.dtype(), DTypeError)
      << op << ": dy " << dy.str() << " and x " << x.str() << " differ in dtype";
  const int dev = require_f32(op, {&gamma, &save_mean, &save_rstd});
  require_on(op, dev, {&dy, &x});
  const int64_t d = ln_width(op, x, gamma);
  check_same_shape(dy, x, op);
  const int64_t rows = d ? x.numel() / d : 0;
  ADA_CHECK_ARG(save_mean.numel() == rows && save_rstd.numel() == rows, ShapeError)
      << "layer_norm_backward: saved statistics do not match input " << x.str();
  const Device dv = x.device();
  if (rows == 0)
    return {Tensor::empty(x.shape(), x.dtype(), dv), Tensor::zeros({d}, DType::f32, dv),
            Tensor::zeros({d}, DType::f32, dv)};
  LayerNormGrads r{Tensor::empty(x.shape(), x.dtype(), dv), Tensor::empty({d}, DType::f32, dv),
                   Tensor::empty({d}, DType::f32, dv)};
  cudaStream_t s = stream(dev);
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (warp_row_ok<T>(d, {dy.raw_data(), x.raw_data(), r.dx.raw_data()}))
      ln_backward_dx_warp_kernel<<<warp_row_blocks(rows), 32 * kWarpRows, 0, s>>>(
          data_as<T>(dy), data_as<T>(x), gamma.data<float>(), save_mean.data<float>(),
          save_rstd.data<float>(), rows, d, data_as<T>(r.dx));
    else
      ln_backward_dx_kernel<<<row_blocks(rows), row_threads(d), 0, s>>>(
          data_as<T>(dy), data_as<T>(x), gamma.data<float>(), save_mean.data<float>(),
          save_rstd.data<float>(), rows, d, data_as<T>(r.dx));
  });
  ADA_CUDA_LAUNCH_CHECK();
  // About 64 rows per chunk, at most 256 chunks.
  const int64_t chunks = std::min<int64_t>((rows + 63) / 64, 256);
  const int64_t col_tiles = std::min<int64_t>((d + kLnCols - 1) / kLnCols, 65535);
  Scratch partial(2 * static_cast<size_t>(chunks) * static_cast<size_t>(d) * sizeof(double), dev);
  double* pg = partial.as<double>();
  double* pb = pg + chunks * d;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int v = kVec16<T>;
    if (d % v == 0 && aligned16({dy.raw_data(), x.raw_data()})) {
      const int64_t vec_tiles = std::min<int64_t>((d / v + kLnCols - 1) / kLnCols, 65535);
      ln_param_partial_vec_kernel<<<dim3(static_cast<unsigned>(vec_tiles),
                                         static_cast<unsigned>(chunks)),
                                    dim3(kLnCols, kLnLanes), 0, s>>>(
          data_as<T>(dy), data_as<T>(x), save_mean.data<float>(), save_rstd.data<float>(), rows, d,
          chunks, pg, pb);
    } else {
      ln_param_partial_kernel<<<dim3(static_cast<unsigned>(col_tiles),
                                     static_cast<unsigned>(chunks)),
                                dim3(kLnCols, kLnLanes), 0, s>>>(
          data_as<T>(dy), data_as<T>(x), save_mean.data<float>(), save_rstd.data<float>(), rows, d,
          chunks, pg, pb);
    }
  });
  ADA_CUDA_LAUNCH_CHECK();
  ln_param_final_kernel<<<blocks_for(d), kThreads, 0, s>>>(
      pg, pb, d, chunks, r.dgamma.data<float>(), r.dbeta.data<float>());
  ADA_CUDA_LAUNCH_CHECK();
  return r;
}

}  // namespace ada::cuda
