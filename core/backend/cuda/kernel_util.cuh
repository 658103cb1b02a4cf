// Device-side helpers shared by the CUDA backend's kernels (.cu files only): grid-stride
// indexing, warp and block reductions in a fixed order (so a block's sum is the same bits on
// every run), and the launch geometry of one-block-per-row kernels.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ada::cuda::kernel {

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
