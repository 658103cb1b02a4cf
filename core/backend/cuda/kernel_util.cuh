// Device-side helpers shared by the CUDA backend's kernels (.cu files only): grid-stride
// indexing, warp and block reductions in a fixed order (so a block's sum is the same bits on
// every run), and the launch geometry of one-block-per-row kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "core/tensor.h"

namespace ada::cuda::kernel {

// ---- 16-bit storage ------------------------------------------------------------------------
// Conversions with NaN as the CPU converts it (core/half.h, x86's vcvtps2ph / vcvtph2ps): quiet,
// sign and the payload's top bits kept. CUDA's intrinsics give the canonical 0x7FFF instead,
// which would make a cast's bits depend on the device. Otherwise round to nearest even.
__device__ __forceinline__ __half f16_of(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return __ushort_as_half(
        static_cast<unsigned short>(((u >> 16) & 0x8000u) | 0x7E00u | ((u >> 13) & 0x3FFu)));
  return __float2half_rn(x);
}
__device__ __forceinline__ __nv_bfloat16 bf16_of(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return __ushort_as_bfloat16(static_cast<unsigned short>((u >> 16) | 0x0040u));
  return __float2bfloat16_rn(x);
}
__device__ __forceinline__ float f32_of(__half h) {
  const uint32_t b = __half_as_ushort(h);
  if ((b & 0x7FFFu) > 0x7C00u)
    return __uint_as_float(((b & 0x8000u) << 16) | 0x7FC00000u | ((b & 0x3FFu) << 13));  // quiet
  return __half2float(h);
}
__device__ __forceinline__ float f32_of(__nv_bfloat16 h) {
  return __bfloat162float(h);
}
__device__ __forceinline__ float f32_of(float x) {
  return x;
}

// An activation element read as f32 and an f32 result stored in the activation's type: the
// element types of f32, bf16 and f16 tensors (core/ops.h's 16-bit activations).
template <class T>
__device__ __forceinline__ float ld(const T* p, int64_t i) {
  return f32_of(p[i]);
}
__device__ __forceinline__ void st(float* p, int64_t i, float v) {
  p[i] = v;
}
__device__ __forceinline__ void st(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = bf16_of(v);
}
__device__ __forceinline__ void st(__half* p, int64_t i, float v) {
  p[i] = f16_of(v);
}

// kVec elements of T moved as one 16-byte access (kVec16<T> of them: 4 floats, 8 16-bit values).
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};
template <class T>
constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));
// Whether every non-null pointer is aligned to `bytes` (aligned16: to 16).
inline bool aligned_to(std::initializer_list<const void*> ptrs, size_t bytes) {
  for (const void* p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % bytes != 0) return false;
  return true;
}
inline bool aligned16(std::initializer_list<const void*> ptrs) {
  return aligned_to(ptrs, 16);
}

// Calls f(T{}) with T the element type of a float dtype (float, __nv_bfloat16, __half).
template <class F>
inline void with_float_type(DType t, F&& f) {
  if (t == DType::bf16)
    f(__nv_bfloat16{});
  else if (t == DType::f16)
    f(__half{});
  else
    f(float{});
}
// The 16-bit dtype require_f32 should also accept for an activation argument: its own when it is
// bf16 or f16 (f32 otherwise, which accepts f32 only).
inline DType activation_type(const Tensor& t) {
  return t.dtype() == DType::bf16 || t.dtype() == DType::f16 ? t.dtype() : DType::f32;
}
// A tensor's data as T (its dtype must be T's).
template <class T>
inline T* data_as(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

__device__ __forceinline__ int64_t global_tid() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t global_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}

// A warp a row: rows of up to 32 16-byte vectors a lane (kWarpRowIters<T> vectors: 32 values,
// 1,024 a row) held in registers, one read from memory, warp shuffles instead of block barriers;
// kWarpRows warps (rows) a block. For rows of d values, d a multiple of kVec16<T>, 16-byte
// aligned (warp_row_ok).
constexpr int kWarpRows = 4;
template <class T>
constexpr int kWarpRowIters = 32 / kVec16<T>;
template <class T>
bool warp_row_ok(int64_t d, std::initializer_list<const void*> ptrs) {
  return d % kVec16<T> == 0 && d / kVec16<T> <= 32 * kWarpRowIters<T> && aligned16(ptrs);
}
inline unsigned warp_row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>((rows + kWarpRows - 1) / kWarpRows, 1 << 20));
}
// This warp's first row and the stride between its rows.
__device__ __forceinline__ int64_t warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kWarpRows + (threadIdx.x >> 5);
}
__device__ __forceinline__ int64_t warp_row_stride() {
  return static_cast<int64_t>(gridDim.x) * kWarpRows;
}
// f(i, j, col) for each value this lane holds of a row of nv vectors: vector c = lane + 32 i
// (i < I) when c < nv, value j of it, column col = c * V + j.
template <int I, int V, class F>
__device__ __forceinline__ void warp_row_each(int64_t nv, F&& f) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < I; ++i) {
    const int64_t c = lane + 32 * i;
    if (c < nv)
#pragma unroll
      for (int j = 0; j < V; ++j) f(i, j, c * V + j);
  }
}
// This lane's values of a row (nv vectors of V at `row`) into v, widened to f32.
template <class T, int I, int V>
__device__ __forceinline__ void warp_row_load(const T* row, int64_t nv, float (&v)[I][V]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < I; ++i) {
    const int64_t c = lane + 32 * i;
    if (c < nv) {
      const Pack<T, V> p = reinterpret_cast<const Pack<T, V>*>(row)[c];
#pragma unroll
      for (int j = 0; j < V; ++j) v[i][j] = ld(p.v, j);
    }
  }
}
// This lane's values of a row written from f(i, j, col) (f32, rounded once to T).
template <class T, int I, int V, class F>
__device__ __forceinline__ void warp_row_store(T* row, int64_t nv, F&& f) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < I; ++i) {
    const int64_t c = lane + 32 * i;
    if (c < nv) {
      Pack<T, V> o;
#pragma unroll
      for (int j = 0; j < V; ++j) st(o.v, j, f(i, j, c * V + j));
      reinterpret_cast<Pack<T, V>*>(row)[c] = o;
    }
  }
}

// The warp's sum, the same value in every lane (lane 0's, broadcast: one order for all lanes).
__device__ __forceinline__ double warp_total(double v) {
  return __shfl_sync(0xffffffffu, warp_sum(v), 0);
}
// The warp's max in every lane (lane 0's, broadcast).
__device__ __forceinline__ float warp_max_all(float v) {
  return __shfl_sync(0xffffffffu, warp_max(v), 0);
}

// Block-wide sum returned to every thread. Every thread of the block must call it (blockDim.x a
// multiple of 32, at most 1024); sh holds 33 values and is free again on return.
__device__ inline double block_sum(double v, double* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double t = lane < nw ? sh[lane] : 0.0;
    t = warp_sum(t);
    if (lane == 0) sh[32] = t;
  }
  __syncthreads();
  const double total = sh[32];
  __syncthreads();
  return total;
}

// Threads per row block: a power of two from 32 to 512, enough to cover short rows once.
inline int row_threads(int64_t d) {
  int t = 32;
  while (t < d && t < 512) t *= 2;
  return t;
}
// Blocks for `items` rows (one block per row, grid-striding past 2^20).
inline unsigned row_blocks(int64_t items) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(items, 1), 1 << 20));
}

}  // namespace ada::cuda::kernel
