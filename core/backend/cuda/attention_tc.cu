// Fused attention on tensor cores (attention.cuh, forward_tensor_cores / backward_tensor_cores):
// ops::fused_attention under train.precision bf16 | fp16. The same blocks and tiles as the fp32
// kernels of attention.cu — 128 threads, 64 queries (or keys) of one head, the other side in
// tiles of 64 — with every product a warp's WMMA 16x16x16 multiply of 16-bit operands into fp32:
// q, k, v and dout are rounded to 16 bits as a tile is loaded, the probabilities and their
// gradients as they enter a product (the operand rounding of the composition's bf16 batched
// products). Scores, the softmax, its running max and sum, dropout and the forward's
// accumulator are fp32 in shared memory; the backward's dq, dk and dv accumulate in fp32 WMMA
// fragments (registers) and pass through shared memory once, at the end. Warp w owns 16 rows of the
// block's side: its products, its softmax rows (two lanes per row, 32 columns each) and its
// accumulator rows, so inside a tile a warp only waits for itself. Fixed orders, no atomics: the
// same bits every run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/backend/cuda/attention.cuh"
#include "core/backend/cuda/kernel_util.cuh"

namespace ada::cuda::attention {
namespace {
using namespace nvcuda;

template <class T>
__device__ __forceinline__ T to16(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 to16<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half to16<__half>(float x) {
  return __float2half_rn(x);
}

constexpr int kLs = kTile + 4;  // leading dim of fp32 [64, 64] tiles (WMMA: a multiple of 4)
constexpr int kLh = kTile + 8;  // of 16-bit [64, 64] tiles (a multiple of 8)
template <int HD>
__host__ __device__ constexpr int ld16() {  // 16-bit [64, HD] tiles
  return HD + 8;
}
template <int HD>
__host__ __device__ constexpr int ld32() {  // fp32 [64, HD] accumulators
  return HD + 4;
}

// Shared memory handed out in 128-byte aligned pieces (WMMA pointers need 32 bytes).
__host__ __device__ constexpr size_t aligned(size_t bytes) {
  return (bytes + 127) / 128 * 128;
}
struct Carve {
  unsigned char* at;
  template <class U>
  __device__ U* take(size_t n) {
    U* r = reinterpret_cast<U*>(at);
    at += aligned(n * sizeof(U));
    return r;
  }
};

// A softmax row's lanes: lanes l and l + 16 of a warp take row w0 + l % 16 of the warp's 16, 32
// columns each, moved 16 bytes (fp32) or 8 bytes (16-bit) at a time: a quarter warp's 128-bit
// accesses then touch 8 rows kLs (or HD + 4) floats apart, in distinct banks (two neighbouring
// lanes a row, element by element, met 4 to a bank).
__device__ __forceinline__ int softmax_row(int lane) {
  return lane & 15;
}
__device__ __forceinline__ int softmax_half(int lane) {
  return lane >> 4;
}
constexpr int kOtherHalf = 16;  // __shfl_xor_sync offset of the row's other lane
// Four consecutive values of a row in shared memory as one access (p aligned to 4 values).
template <class U>
__device__ __forceinline__ kernel::Pack<U, 4> ld4(const U* p) {
  return *reinterpret_cast<const kernel::Pack<U, 4>*>(p);
}
template <class U>
__device__ __forceinline__ void st4(U* p, const kernel::Pack<U, 4>& v) {
  *reinterpret_cast<kernel::Pack<U, 4>*>(p) = v;
}

// Rows [r0, r0 + 64) of an [n, HD] matrix whose rows lie `stride` elements apart into a 16-bit
// tile, zeros past n: fp32 rows rounded, rows of the tile's own type copied as they are; 16 bytes
// a load where the rows allow it (load_tile_vectors), an element at a time otherwise.
template <int HD, class T, class In>
__device__ void load_tile16(const In* __restrict__ src, int64_t stride, int64_t n, int64_t r0,
                            T* __restrict__ dst) {
  constexpr int V = kernel::kVec16<In>;
  if (load_tile_vectors<HD>(src, stride, n, r0, [&](int r, int c, const auto& v) {
        T* d = dst + r * ld16<HD>() + c;
        if constexpr (std::is_same_v<In, T>) {
          *reinterpret_cast<kernel::Pack<T, V>*>(d) = v;
        } else {  // fp32 rounded: 4 16-bit values, 8 bytes
          kernel::Pack<T, V> o;
#pragma unroll
          for (int e = 0; e < V; ++e) o.v[e] = to16<T>(v.v[e]);
          *reinterpret_cast<kernel::Pack<T, V>*>(d) = o;
        }
      }))
    return;
  for (int idx = threadIdx.x; idx < kTile * HD; idx += blockDim.x) {
    const int r = idx / HD, c = idx % HD;
    if constexpr (std::is_same_v<In, T>)
      dst[r * ld16<HD>() + c] = r0 + r < n ? src[(r0 + r) * stride + c] : to16<T>(0.f);
    else
      dst[r * ld16<HD>() + c] = to16<T>(r0 + r < n ? src[(r0 + r) * stride + c] : 0.f);
  }
}

// Fragment loads from shared memory bound these products: a 16x16x16 product reads 1 KB of
// operands (8 cycles of an SM's 128 bytes a cycle) for 2-4 cycles of its tensor cores. So an
// A fragment is loaded once and used for every column block (the products and their order are
// the same as loading it for each).

// One warp: out[16, 64] (fp32, leading dim kLs) = A[16, K] B[64, K]^T, A and B 16-bit row-major;
// A's fragments held for the four column blocks up to K = 64 (K = 128 would spill).
template <class T, int K>
__device__ void mm_abt(const T* a, int lda, const T* b, int ldb, float* out) {
  constexpr int kHeld = K <= 64 ? K / 16 : 1;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[kHeld];
  if constexpr (kHeld > 1) {
#pragma unroll
    for (int k = 0; k < K; k += 16) wmma::load_matrix_sync(fa[k / 16], a + k, lda);
  }
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.f);
#pragma unroll
    for (int k = 0; k < K; k += 16) {
      if constexpr (kHeld == 1) wmma::load_matrix_sync(fa[0], a + k, lda);
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;  // (k, n) at b[n*ldb + k]
      wmma::load_matrix_sync(fb, b + n * 16 * ldb + k, ldb);
      wmma::mma_sync(acc, fa[kHeld > 1 ? k / 16 : 0], fb, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, kLs, wmma::mem_row_major);
  }
}

// One warp's fp32 accumulator fragments for C[16, N], kept in registers across a kernel's loop.
template <int N>
using AccRow = wmma::fragment<wmma::accumulator, 16, 16, 16, float>[N / 16];

// One warp: C[16, N] += A[16, 64] B[64, N] into register fragments held across a kernel's loop
// (the backward's dq, dk and dv), A and B 16-bit row-major. Each A fragment is loaded once for
// all N / 16 column blocks; every block still sums over k in increasing order.
template <class T, int N>
__device__ void mm_ab_frag(const T* a, int lda, const T* b, int ldb, AccRow<N>& acc) {
#pragma unroll
  for (int k = 0; k < kTile; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + k, lda);
#pragma unroll
    for (int n = 0; n < N; n += 16) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;  // (k, n) at b[k*ldb + n]
      wmma::load_matrix_sync(fb, b + k * ldb + n, ldb);
      wmma::mma_sync(acc[n / 16], fa, fb, acc[n / 16]);
    }
  }
}
template <int N>
__device__ void zero_frags(AccRow<N>& acc) {
#pragma unroll
  for (int n = 0; n < N / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
}
// One warp's fragments stored as rows [0, 16) of an fp32 [16, N] tile (leading dim ldc).
template <int N>
__device__ void store_frags(AccRow<N>& acc, float* c, int ldc) {
#pragma unroll
  for (int n = 0; n < N / 16; ++n)
    wmma::store_matrix_sync(c + n * 16, acc[n], ldc, wmma::mem_row_major);
}

// One warp: C[16, N] (fp32, leading dim ldc) += A[16, 64] B[64, N], A and B 16-bit row-major,
// C loaded into fragments and stored back (the forward's accumulator, rescaled between tiles).
template <class T, int N>
__device__ void mm_ab_acc(const T* a, int lda, const T* b, int ldb, float* c, int ldc) {
  AccRow<N> acc;
#pragma unroll
  for (int n = 0; n < N / 16; ++n)
    wmma::load_matrix_sync(acc[n], c + n * 16, ldc, wmma::mem_row_major);
  mm_ab_frag<T, N>(a, lda, b, ldb, acc);
  store_frags<N>(acc, c, ldc);
}

template <int HD, class T>
constexpr size_t forward_smem() {
  return 3 * aligned(kTile * ld16<HD>() * sizeof(T)) + aligned(kTile * kLs * sizeof(float)) +
         aligned(kTile * kLh * sizeof(T)) + aligned(kTile * ld32<HD>() * sizeof(float)) +
         3 * aligned(kTile * sizeof(float));
}
// The backward kernels accumulate in register fragments; their two fp32 [64, 64] score tiles,
// one piece of shared memory, stage the [64, HD] results at the end.
template <int HD>
__host__ __device__ constexpr bool scores_hold_result() {
  return kTile * ld32<HD>() <= 2 * kTile * kLs;
}
template <int HD, class T>
constexpr size_t dq_smem() {
  return 4 * aligned(kTile * ld16<HD>() * sizeof(T)) + aligned(2 * kTile * kLs * sizeof(float)) +
         aligned(kTile * kLh * sizeof(T)) + 3 * aligned(kTile * sizeof(float));
}
template <int HD, class T>
constexpr size_t dkdv_smem() {
  return 4 * aligned(kTile * ld16<HD>() * sizeof(T)) + aligned(2 * kTile * kLs * sizeof(float)) +
         2 * aligned(kTile * kLh * sizeof(T)) + 3 * aligned(kTile * sizeof(float));
}

// Grid: one block per (head, tile of 64 queries).
template <int HD, class T, class In>
__global__ void __launch_bounds__(kBlockThreads)
    forward_tc_kernel(ParamsOf<In> prm, In* out, float* lse) {
  constexpr int l16 = ld16<HD>(), l32 = ld32<HD>();
  extern __shared__ __align__(128) unsigned char raw[];
  Carve c{raw};
  T *qs = c.take<T>(kTile * l16), *ks = c.take<T>(kTile * l16), *vs = c.take<T>(kTile * l16);
  float* ss = c.take<float>(kTile * kLs);
  T* ps = c.take<T>(kTile * kLh);
  float* os = c.take<float>(kTile * l32);
  float *row_max = c.take<float>(kTile), *row_sum = c.take<float>(kTile),
        *sb = c.take<float>(kTile);
  const auto [h, i0] = block_tile(prm.sq);
  const int lane = threadIdx.x & 31, w0 = (threadIdx.x >> 5) * 16;
  const int row = w0 + softmax_row(lane), half = softmax_half(lane);
  const float* bias = bias_row(prm, h);
  const int64_t qb = head_base(prm, h, prm.sq, HD), kb = head_base(prm, h, prm.sk, HD);
  load_tile16<HD>(prm.q + qb, prm.e, prm.sq, i0, qs);
  for (int idx = threadIdx.x; idx < kTile * l32; idx += blockDim.x) os[idx] = 0.f;
  if (threadIdx.x < kTile) {
    row_max[threadIdx.x] = -INFINITY;
    row_sum[threadIdx.x] = 0.f;
  }
  for (int64_t j0 = 0; j0 < prm.sk; j0 += kTile) {
    __syncthreads();  // the last tile's reads are done (and the first loads)
    load_tile16<HD>(prm.k + kb, prm.e, prm.sk, j0, ks);
    load_tile16<HD>(prm.v + kb, prm.e, prm.sk, j0, vs);
    if (bias) load_rows(bias, prm.sk, j0, sb);
    __syncthreads();
    mm_abt<T, HD>(qs + w0 * l16, l16, ks, l16, ss + w0 * kLs);
    __syncwarp();
    // The lane's 32 scores, read once and kept in registers through the softmax.
    const float* srow = ss + row * kLs + half * 32;
    float t[32];
    float mx = -INFINITY;
#pragma unroll
    for (int cc = 0; cc < 32; cc += 4) {
      const kernel::Pack<float, 4> s4 = ld4(srow + cc);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int jj = half * 32 + cc + u;
        // scale, then the bias: the composition's two roundings
        t[cc + u] = j0 + jj < prm.sk ? s4.v[u] * prm.scale + (bias ? sb[jj] : 0.f) : -INFINITY;
        mx = fmaxf(mx, t[cc + u]);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, kOtherHalf));  // finite: every tile has a key
    const float old_max = row_max[row], new_max = fmaxf(old_max, mx);
    const float alpha = expf(old_max - new_max);
    float rs = 0.f;
    T* prow = ps + row * kLh + half * 32;
#pragma unroll
    for (int cc = 0; cc < 32; cc += 4) {
      float mk[4] = {1.f, 1.f, 1.f, 1.f};
      if (prm.p > 0.f)
        keep4(prm, static_cast<uint64_t>((h * prm.sq + i0 + row) * prm.sk + j0 + half * 32 + cc),
              mk);
      kernel::Pack<T, 4> p4;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float e = expf(t[cc + u] - new_max);
        rs += e;
        p4.v[u] = to16<T>(e * mk[u]);
      }
      st4(prow + cc, p4);
    }
    rs += __shfl_xor_sync(0xffffffffu, rs, kOtherHalf);
    __syncwarp();  // both lanes of the row have read its max
    if (half == 0) {
      row_max[row] = new_max;
      row_sum[row] = row_sum[row] * alpha + rs;
    }
    float* orow = os + row * l32 + half * (HD / 2);
#pragma unroll
    for (int d = 0; d < HD / 2; d += 4) {
      kernel::Pack<float, 4> o4 = ld4(orow + d);
#pragma unroll
      for (int u = 0; u < 4; ++u) o4.v[u] *= alpha;
      st4(orow + d, o4);
    }
    __syncwarp();
    mm_ab_acc<T, HD>(ps + w0 * kLh, kLh, vs, l16, os + w0 * l32, l32);
  }
  __syncwarp();
  const int64_t i = i0 + row;
  if (i < prm.sq) {
    const float inv = 1.f / row_sum[row];
    const float* orow = os + row * l32 + half * (HD / 2);
    In* dst = out + qb + i * prm.e + half * (HD / 2);
#pragma unroll
    for (int d = 0; d < HD / 2; d += 4) {
      const kernel::Pack<float, 4> o4 = ld4(orow + d);
#pragma unroll
      for (int u = 0; u < 4; ++u) kernel::st(dst, d + u, o4.v[u] * inv);
    }
    if (half == 0) lse[h * prm.sq + i] = row_max[row] + logf(row_sum[row]);
  }
}

// dq: one block per (head, tile of 64 queries), walking the key tiles.
template <int HD, class T, class In>
__global__ void __launch_bounds__(kBlockThreads)
    dq_tc_kernel(ParamsOf<In> prm, const In* dout, const float* lse, const float* rowdot, In* dq) {
  constexpr int l16 = ld16<HD>(), l32 = ld32<HD>();
  extern __shared__ __align__(128) unsigned char raw[];
  Carve c{raw};
  T *qs = c.take<T>(kTile * l16), *gs = c.take<T>(kTile * l16), *ks = c.take<T>(kTile * l16),
    *vs = c.take<T>(kTile * l16);
  static_assert(scores_hold_result<HD>());
  float* const scores = c.take<float>(2 * kTile * kLs);  // ss and zs; the result at the end
  float *ss = scores, *zs = scores + kTile * kLs;
  T* ds16 = c.take<T>(kTile * kLh);
  float *row_lse = c.take<float>(kTile), *row_dot = c.take<float>(kTile),
        *sb = c.take<float>(kTile);
  const auto [h, i0] = block_tile(prm.sq);
  const int lane = threadIdx.x & 31, w0 = (threadIdx.x >> 5) * 16;
  const int row = w0 + softmax_row(lane), half = softmax_half(lane);
  const float* bias = bias_row(prm, h);
  const int64_t qb = head_base(prm, h, prm.sq, HD), kb = head_base(prm, h, prm.sk, HD);
  load_tile16<HD>(prm.q + qb, prm.e, prm.sq, i0, qs);
  load_tile16<HD>(dout + qb, prm.e, prm.sq, i0, gs);
  load_rows(lse + h * prm.sq, prm.sq, i0, row_lse);
  load_rows(rowdot + h * prm.sq, prm.sq, i0, row_dot);
  AccRow<HD> acc;  // the warp's 16 rows of dq
  zero_frags<HD>(acc);
  for (int64_t j0 = 0; j0 < prm.sk; j0 += kTile) {
    __syncthreads();
    load_tile16<HD>(prm.k + kb, prm.e, prm.sk, j0, ks);
    load_tile16<HD>(prm.v + kb, prm.e, prm.sk, j0, vs);
    if (bias) load_rows(bias, prm.sk, j0, sb);
    __syncthreads();
    mm_abt<T, HD>(qs + w0 * l16, l16, ks, l16, ss + w0 * kLs);  // scores
    mm_abt<T, HD>(gs + w0 * l16, l16, vs, l16, zs + w0 * kLs);  // dz = dout v^T
    __syncwarp();
    const float* srow = ss + row * kLs + half * 32;
    const float* zrow = zs + row * kLs + half * 32;
    T* drow = ds16 + row * kLh + half * 32;
    const float lse_r = row_lse[row], dot_r = row_dot[row];
#pragma unroll
    for (int cc = 0; cc < 32; cc += 4) {
      float mk[4] = {1.f, 1.f, 1.f, 1.f};
      if (prm.p > 0.f)
        keep4(prm, static_cast<uint64_t>((h * prm.sq + i0 + row) * prm.sk + j0 + half * 32 + cc),
              mk);
      const kernel::Pack<float, 4> s4 = ld4(srow + cc), z4 = ld4(zrow + cc);
      kernel::Pack<T, 4> d4;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int jj = half * 32 + cc + u;
        const float prob =
            j0 + jj < prm.sk ? expf(s4.v[u] * prm.scale + (bias ? sb[jj] : 0.f) - lse_r) : 0.f;
        d4.v[u] = to16<T>(prob * (z4.v[u] * mk[u] - dot_r));
      }
      st4(drow + cc, d4);
    }
    __syncwarp();
    mm_ab_frag<T, HD>(ds16 + w0 * kLh, kLh, ks, l16, acc);  // dq += ds k
  }
  __syncthreads();  // every warp done with the score tiles: they take the result
  store_frags<HD>(acc, scores + w0 * l32, l32);
  __syncwarp();
  const int64_t i = i0 + row;
  if (i < prm.sq) {
    const float* arow = scores + row * l32 + half * (HD / 2);
    In* dst = dq + qb + i * prm.e + half * (HD / 2);
#pragma unroll
    for (int d = 0; d < HD / 2; d += 4) {
      const kernel::Pack<float, 4> a4 = ld4(arow + d);
#pragma unroll
      for (int u = 0; u < 4; ++u) kernel::st(dst, d + u, a4.v[u] * prm.scale);
    }
  }
}

// dk and dv: one block per (head, tile of 64 keys), walking the query tiles. Warp w owns keys
// 16w..16w+15; in the element-wise step lane l takes queries l and l + 32 against those 16 keys
// (consecutive keys: one dropout block per four).
template <int HD, class T, class In>
__global__ void __launch_bounds__(kBlockThreads)
    dkdv_tc_kernel(ParamsOf<In> prm, const In* dout, const float* lse, const float* rowdot, In* dk,
                   In* dv) {
  constexpr int l16 = ld16<HD>(), l32 = ld32<HD>();
  extern __shared__ __align__(128) unsigned char raw[];
  Carve c{raw};
  T *ks = c.take<T>(kTile * l16), *vs = c.take<T>(kTile * l16), *qs = c.take<T>(kTile * l16),
    *gs = c.take<T>(kTile * l16);
  static_assert(scores_hold_result<HD>());
  float* const scores = c.take<float>(2 * kTile * kLs);  // st and zt; the results at the end
  float *st = scores, *zt = scores + kTile * kLs;
  T *z16 = c.take<T>(kTile * kLh), *ds16 = c.take<T>(kTile * kLh);
  float *row_lse = c.take<float>(kTile), *row_dot = c.take<float>(kTile),
        *kb = c.take<float>(kTile);
  const auto [h, j0] = block_tile(prm.sk);
  const int lane = threadIdx.x & 31, w0 = (threadIdx.x >> 5) * 16;
  const int64_t qb = head_base(prm, h, prm.sq, HD), kbase = head_base(prm, h, prm.sk, HD);
  load_tile16<HD>(prm.k + kbase, prm.e, prm.sk, j0, ks);
  load_tile16<HD>(prm.v + kbase, prm.e, prm.sk, j0, vs);
  if (threadIdx.x < kTile)
    kb[threadIdx.x] = prm.bias && j0 + threadIdx.x < prm.sk
                          ? prm.bias[(h / prm.heads) * prm.sk + j0 + threadIdx.x]
                          : 0.f;
  AccRow<HD> acc_k, acc_v;  // the warp's 16 keys of dk and dv
  zero_frags<HD>(acc_k);
  zero_frags<HD>(acc_v);
  for (int64_t i0 = 0; i0 < prm.sq; i0 += kTile) {
    __syncthreads();
    load_tile16<HD>(prm.q + qb, prm.e, prm.sq, i0, qs);
    load_tile16<HD>(dout + qb, prm.e, prm.sq, i0, gs);
    load_rows(lse + h * prm.sq, prm.sq, i0, row_lse);
    load_rows(rowdot + h * prm.sq, prm.sq, i0, row_dot);
    __syncthreads();
    mm_abt<T, HD>(ks + w0 * l16, l16, qs, l16, st + w0 * kLs);  // scores^T [key][query]
    mm_abt<T, HD>(vs + w0 * l16, l16, gs, l16, zt + w0 * kLs);  // dz^T = v dout^T
    __syncwarp();
    for (int qh = 0; qh < 2; ++qh) {
      const int ii = lane + 32 * qh;
      const int64_t i = i0 + ii;
      float mk[16];  // in registers: both loops unrolled
#pragma unroll
      for (int a = 0; a < 16; a += 4) {
        mk[a] = mk[a + 1] = mk[a + 2] = mk[a + 3] = 1.f;
        if (prm.p > 0.f)
          keep4(prm, static_cast<uint64_t>((h * prm.sq + i) * prm.sk + j0 + w0 + a), mk + a);
      }
#pragma unroll
      for (int a = 0; a < 16; ++a) {
        const int r = w0 + a;
        const bool valid = i < prm.sq && j0 + r < prm.sk;
        const float prob = valid ? expf(st[r * kLs + ii] * prm.scale + kb[r] - row_lse[ii]) : 0.f;
        z16[r * kLh + ii] = to16<T>(prob * mk[a]);
        ds16[r * kLh + ii] = to16<T>(prob * (zt[r * kLs + ii] * mk[a] - row_dot[ii]));
      }
    }
    __syncwarp();
    mm_ab_frag<T, HD>(z16 + w0 * kLh, kLh, gs, l16, acc_v);   // dv += z^T dout
    mm_ab_frag<T, HD>(ds16 + w0 * kLh, kLh, qs, l16, acc_k);  // dk += ds^T q
  }
  __syncthreads();  // every warp done with the score tiles: they take the results
  // Lane pairs write the warp's 16 keys, half a row each: dk, then dv through the same rows.
  const int r = w0 + (lane >> 1), half = lane & 1;
  const int64_t j = j0 + r;
  const float* row_out = scores + r * l32 + half * (HD / 2);
  store_frags<HD>(acc_k, scores + w0 * l32, l32);
  __syncwarp();
  if (j < prm.sk) {
    In* dkr = dk + kbase + j * prm.e + half * (HD / 2);
    for (int d = 0; d < HD / 2; ++d) kernel::st(dkr, d, row_out[d] * prm.scale);
  }
  __syncwarp();
  store_frags<HD>(acc_v, scores + w0 * l32, l32);
  __syncwarp();
  if (j < prm.sk) {
    In* dvr = dv + kbase + j * prm.e + half * (HD / 2);
    for (int d = 0; d < HD / 2; ++d) kernel::st(dvr, d, row_out[d]);
  }
}

template <int HD, class T, class In>
void forward_as(const ParamsOf<In>& prm, int64_t bh, In* out, float* lse, int dev) {
  launch(forward_tc_kernel<HD, T, In>, forward_smem<HD, T>(), bh * ((prm.sq + kTile - 1) / kTile),
         dev, prm, out, lse);
}

template <int HD, class T, class In>
void backward_as(const ParamsOf<In>& prm, int64_t bh, const In* dout, const float* lse,
                 const float* rowdot, In* dq, In* dk, In* dv, int dev) {
  launch(dq_tc_kernel<HD, T, In>, dq_smem<HD, T>(), bh * ((prm.sq + kTile - 1) / kTile), dev, prm,
         dout, lse, rowdot, dq);
  launch(dkdv_tc_kernel<HD, T, In>, dkdv_smem<HD, T>(), bh * ((prm.sk + kTile - 1) / kTile), dev,
         prm, dout, lse, rowdot, dk, dv);
}

// Calls f(T{}, In{}): T the products' 16-bit type, In the tensors' element type (f32 or T).
template <class F>
void with_types(bool fp16, DType tensors, F&& f) {
  auto with_in = [&](auto t) {
    using T = decltype(t);
    if (tensors == DType::f32)
      f(t, float{});
    else
      f(t, T{});
  };
  if (fp16)
    with_in(__half{});
  else
    with_in(__nv_bfloat16{});
}

}  // namespace

void forward_tensor_cores(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_bias,
                          const ops::AttentionArgs& a, bool fp16, Tensor& out, float* lse,
                          int dev) {
  const int64_t bh = q.size(0) * a.heads, hd = q.size(2) / a.heads;
  with_types(fp16, q.dtype(), [&](auto t, auto in) {
    using T = decltype(t);
    using In = decltype(in);
    const ParamsOf<In> prm = params<In>(q, k, v, key_bias, a);
    In* op = kernel::data_as<In>(out);
    if (hd == 32) return forward_as<32, T>(prm, bh, op, lse, dev);
    if (hd == 64) return forward_as<64, T>(prm, bh, op, lse, dev);
    forward_as<128, T>(prm, bh, op, lse, dev);
  });
}

void backward_tensor_cores(const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& key_bias, const ops::AttentionArgs& a, bool fp16,
                           const Tensor& dout, const float* lse, const float* rowdot,
                           ops::AttentionGrads& g, int dev) {
  const int64_t bh = q.size(0) * a.heads, hd = q.size(2) / a.heads;
  with_types(fp16, q.dtype(), [&](auto t, auto in) {
    using T = decltype(t);
    using In = decltype(in);
    const ParamsOf<In> prm = params<In>(q, k, v, key_bias, a);
    const In* gp = kernel::data_as<In>(dout);
    In *dq = kernel::data_as<In>(g.dq), *dk = kernel::data_as<In>(g.dk),
       *dv = kernel::data_as<In>(g.dv);
    if (hd == 32) return backward_as<32, T>(prm, bh, gp, lse, rowdot, dq, dk, dv, dev);
    if (hd == 64) return backward_as<64, T>(prm, bh, gp, lse, rowdot, dq, dk, dv, dev);
    backward_as<128, T>(prm, bh, gp, lse, rowdot, dq, dk, dv, dev);
  });
}

}  // namespace ada::cuda::attention
