// Shared by the CUDA fused-attention kernels (attention.cu: fp32 on CUDA cores; attention_tc.cu:
// 16-bit operands on tensor cores): the problem's parameters, the dropout stream, tile loads and
// the argument checks.
#pragma once

#include <cstdint>

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/kernel_util.cuh"
#include "core/backend/op_shapes.h"
#include "core/ops.h"
#include "core/philox.h"
#include "core/precision.h"

namespace ada::cuda::attention {

constexpr int kTile = 64;           // queries or keys per tile
constexpr int kBlockThreads = 128;  // 4 warps x 16 rows

// q, k, v (and out, dout and the gradients) are [B, S, e] with head h in columns [h*D, (h+1)*D)
// of every row; head bh = b*heads + h (head_base). In: their element type, float or (on the
// tensor-core kernels, under 16-bit activations) the matrix precision's 16-bit type; the key
// bias is f32.
template <class In>
struct ParamsOf {
  const In *q, *k, *v;
  const float* bias;
  int64_t sq, sk;
  int64_t heads, e;
  float scale, p, keep;  // dropout probability and 1/(1-p)
  uint64_t seed, first;
  const uint64_t* shift;  // the device's Philox shift (cuda_common.h), added to first
};
using Params = ParamsOf<float>;

// The first counter of the dropout stream: the host's plus the device's Philox shift, read where
// it is used (volatile: kept out of registers across the kernel's loops, which it spilled).
template <class P>
__device__ __forceinline__ uint64_t dropout_first(const P& prm) {
  return prm.first + *static_cast<const volatile uint64_t*>(prm.shift);
}

// Dropout multiplier of probability element e (dropout_forward's stream).
template <class P>
__device__ __forceinline__ float keep1(const P& prm, uint64_t e) {
  const Uniform4 u = philox_uniform4_at(prm.seed, dropout_first(prm), e >> 2);
  const unsigned w = static_cast<unsigned>(e & 3);
  const float x = w == 0 ? u.u0 : w == 1 ? u.u1 : w == 2 ? u.u2 : u.u3;
  return x >= prm.p ? prm.keep : 0.f;
}
// Multipliers of elements e0 .. e0+3: one Philox block when e0 starts one.
template <class P>
__device__ __forceinline__ void keep4(const P& prm, uint64_t e0, float m[4]) {
  if ((e0 & 3) == 0) {
    const Uniform4 u = philox_uniform4_at(prm.seed, dropout_first(prm), e0 >> 2);
    m[0] = u.u0 >= prm.p ? prm.keep : 0.f;
    m[1] = u.u1 >= prm.p ? prm.keep : 0.f;
    m[2] = u.u2 >= prm.p ? prm.keep : 0.f;
    m[3] = u.u3 >= prm.p ? prm.keep : 0.f;
  } else {
    for (int c = 0; c < 4; ++c) m[c] = keep1(prm, e0 + c);
  }
}

// Reductions over the 16 lanes that share a row group (xor offsets stay inside a half-warp).
__device__ __forceinline__ float group_max(float v) {
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float group_sum(float v) {
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// This block's head and the first row of its 64-row tile of a side with n rows (blocks are laid
// out head by head, tile by tile).
struct BlockTile {
  int64_t h, r0;
};
__device__ __forceinline__ BlockTile block_tile(int64_t n) {
  const int64_t tiles = (n + kTile - 1) / kTile;
  return {blockIdx.x / tiles, (blockIdx.x % tiles) * kTile};
}
// Head bh's example's key bias row, or nullptr.
template <class P>
__device__ __forceinline__ const float* bias_row(const P& p, int64_t bh) {
  return p.bias ? p.bias + (bh / p.heads) * p.sk : nullptr;
}

// Offset of row 0 of head bh in a [B, s, e] tensor.
template <class P>
__device__ __forceinline__ int64_t head_base(const P& p, int64_t bh, int64_t s, int hd) {
  return (bh / p.heads) * s * p.e + (bh % p.heads) * hd;
}

// Rows [r0, r0 + 64) of an [n, HD] matrix whose rows lie `stride` elements apart, read by the
// whole block 16 bytes a load where the rows allow it (src 16-byte aligned, stride a multiple of
// a 16-byte vector; false otherwise, nothing read): each thread issues its loads together, up to
// 4 at once, before it hands any on, put(r, c, v) for the vector v of row r, columns [c, c + V),
// zeros past row n. An element loop (in the PTX: a 2-byte or 4-byte load, a branch and a store
// to shared memory an iteration, not unrolled) waits a round trip to memory per element, 32 a
// thread for a [64, 64] tile of 128 threads.
template <int HD, class In, class Put>
__device__ __forceinline__ bool load_tile_vectors(const In* __restrict__ src, int64_t stride,
                                                  int64_t n, int64_t r0, Put&& put) {
  constexpr int V = kernel::kVec16<In>;  // elements a load
  constexpr int kRowVecs = HD / V;
  constexpr int kPer = kTile * kRowVecs / kBlockThreads;  // a thread's loads: 2..8, fp32 4..16
  constexpr int kBatch = kPer < 4 ? kPer : 4;             // in flight at once (16 registers)
  static_assert(kTile * kRowVecs % kBlockThreads == 0 && kPer % kBatch == 0);
  using Vec = kernel::Pack<In, V>;
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0 || stride % V != 0) return false;
  // fp32 at head size 128 (16 loads a thread): the batches in a loop, not unrolled (unrolled,
  // their addresses stay live through the kernels around them). ptxas, sm_90, bytes of spills
  // unrolled / not: CUDA-core dK/dV 216 / 16 (24 with the element loop), dq 52 / 0, tensor-core
  // dK/dV on f32 inputs 40 / 12 (bf16) and 12 / 0 (fp16).
  constexpr int kOuter = sizeof(In) == 4 && HD >= 128 ? 1 : kPer / kBatch;
#pragma unroll(kOuter)
  for (int b = 0; b < kPer; b += kBatch) {
    Vec v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int idx = threadIdx.x + (b + u) * kBlockThreads, r = idx / kRowVecs;
      if (r0 + r < n) {
        v[u] = *reinterpret_cast<const Vec*>(src + (r0 + r) * stride + idx % kRowVecs * V);
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) v[u].v[e] = In(0.f);
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int idx = threadIdx.x + (b + u) * kBlockThreads;
      put(idx / kRowVecs, idx % kRowVecs * V, v[u]);
    }
  }
  return true;
}

// Rows [r0, r0 + 64) of an [n, HD] matrix whose rows lie `stride` floats apart into shared
// memory (leading dim HD + 1, zeros past row n), by the whole block.
template <int HD>
__device__ void load_tile(const float* __restrict__ src, int64_t stride, int64_t n, int64_t r0,
                          float* __restrict__ dst) {
  if (load_tile_vectors<HD>(src, stride, n, r0, [&](int r, int c, const auto& v) {
#pragma unroll
        for (int e = 0; e < kernel::kVec16<float>; ++e) dst[r * (HD + 1) + c + e] = v.v[e];
      }))
    return;
  for (int idx = threadIdx.x; idx < kTile * HD; idx += blockDim.x) {
    const int r = idx / HD, c = idx % HD;
    dst[r * (HD + 1) + c] = r0 + r < n ? src[(r0 + r) * stride + c] : 0.f;
  }
}
// Rows of a 64-row tile that starts at r0 of n.
__device__ __forceinline__ int tile_rows(int64_t n, int64_t r0) {
  return n - r0 < kTile ? static_cast<int>(n - r0) : kTile;
}
// Row values of a [rows] vector for rows [r0, r0 + 64), zeros past n.
__device__ inline void load_rows(const float* src, int64_t n, int64_t r0, float* dst) {
  if (threadIdx.x < kTile) dst[threadIdx.x] = r0 + threadIdx.x < n ? src[r0 + threadIdx.x] : 0.f;
}

template <class In = float>
ParamsOf<In> params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_bias,
                    const ops::AttentionArgs& a) {
  return {static_cast<const In*>(q.raw_data()),
          static_cast<const In*>(k.raw_data()),
          static_cast<const In*>(v.raw_data()),
          key_bias.defined() ? key_bias.data<float>() : nullptr,
          q.size(1),
          k.size(1),
          a.heads,
          q.size(2),
          a.scale,
          a.dropout,
          a.dropout > 0.f ? 1.f / (1.f - a.dropout) : 1.f,
          a.seed,
          a.first,
          philox_shift(q.device().index)};
}

// q, k and v f32, or all three in the 16-bit type of the tensor cores' precision (the only
// kernels that read 16-bit activations); the key bias f32.
inline int check(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& key_bias, const ops::AttentionArgs& a) {
  const int dev = require_f32(op, {&q, &k, &v}, precision_dtype(cuda_matmul_precision()));
  ADA_CHECK_ARG(k.dtype() == q.dtype() && v.dtype() == q.dtype(), DTypeError)
      << op << ": q, k and v must have one dtype, got " << q.str() << ", " << k.str() << ", "
      << v.str();
  if (key_bias.defined()) {  // on q's device, f32 whatever q's dtype
    require_f32(op, {&q, &key_bias}, q.dtype());
    ADA_CHECK_ARG(key_bias.dtype() == DType::f32, DTypeError)
        << op << ": the key bias " << key_bias.str() << " must be f32";
  }
  backend::check_fused_attention(q, k, v, key_bias, a.heads, a.dropout);
  const int64_t d = q.size(2) / a.heads;
  ADA_CHECK_ARG(d == 32 || d == 64 || d == 128, ShapeError)
      << op << ": the CUDA kernels take head sizes 32, 64 and 128, got " << d << " (q " << q.str()
      << "); use model.attention: composed for this model";
  return dev;
}

// Launches `kernel` on `blocks` blocks of kBlockThreads with `smem` bytes of dynamic shared memory
// (above the default 48 KB: the attribute is set first).
template <class Kernel, class... Args>
void launch(Kernel kernel, size_t smem, int64_t blocks, int dev, Args... args) {
  ADA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  ADA_CHECK_ARG(blocks < (int64_t{1} << 31), ShapeError)
      << "fused_attention: " << blocks << " blocks are more than one launch takes";
  kernel<<<static_cast<unsigned>(blocks), kBlockThreads, smem, stream(dev)>>>(args...);
  ADA_CUDA_LAUNCH_CHECK();
}

// attention_tc.cu: the same kernels with the products on tensor cores, q, k, v, the
// probabilities and their gradients rounded to bf16 (or fp16) as the composition's bf16 matrix
// products round their operands (train.precision bf16 | fp16); softmax, dropout and every
// accumulation in fp32.
// q, k, v, out, dout and the gradients are f32 (rounded as they are loaded), or, with
// 16-bit activations, `out` and the rest 16-bit tensors of the products' type, read as they are
// and written rounded once from the fp32 accumulators: the same values as the f32 path on the
// widened inputs, rounded (ops.cc then makes no f32 copies).
void forward_tensor_cores(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_bias,
                          const ops::AttentionArgs& a, bool fp16, Tensor& out, float* lse, int dev);
void backward_tensor_cores(const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& key_bias, const ops::AttentionArgs& a, bool fp16,
                           const Tensor& dout, const float* lse, const float* rowdot,
                           ops::AttentionGrads& g, int dev);

}  // namespace ada::cuda::attention
