// CUDA fused attention (core/ops.h, ops::fused_attention): flash attention's algorithm in fp32,
// nothing of size [B*heads, Sq, Sk] in memory; each head's rows read and written in place in the
// [B, S, heads*D] tensors the projections give (attention.cuh, head_base), no split or merge. A
// block of 128 threads takes 64 queries (the forward, the query gradient) or 64 keys (the key and
// value gradients) of one head and walks the other side in tiles of 64 through shared memory; the
// forward keeps a running max and sum per query and rescales its accumulated output, the backward
// recomputes each probability from the saved log-normaliser. Dropout masks come from the Philox
// stream dropout_forward draws from (core/philox.h), element by element, so a seed gives the
// composition's masks.
//
// Thread layout inside a block: warp w owns 16 rows of its own side (queries, or keys in the
// key-side kernel); lane l holds 8 of them (half l/16) against 4 consecutive columns of the other
// side's tile (4 * (l % 16) ...) for the products, and dims l % 16 + 16c of its 8 rows for the
// accumulators. Sums over a row of the tile are 16-lane shuffles; every sum runs in a fixed
// order and no atomics are used, so results are the same bits every run. The key and value
// gradients (key-side blocks) and the query gradient (query-side blocks) are separate kernels
// for that reason. Head sizes 32, 64 and 128 (the accumulators are per-thread arrays). Under
// train.precision bf16 | fp16 the tensor-core kernels of attention_tc.cu run instead.
#include <cmath>
#include <cstdint>

#include "core/backend/cuda/attention.cuh"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/cuda/kernel_util.cuh"
#include "core/precision.h"

namespace ada::cuda {
namespace {
using namespace attention;

constexpr int kLp = kTile + 1;  // leading dim of a [64, 64] tile in shared memory

// s[a][c] = A row a . B row c over HD (A: 8 rows, B: 4 rows, both leading dim HD + 1).
template <int HD>
__device__ __forceinline__ void dot_tile(const float* a_rows, const float* b_rows, float s[8][4]) {
  constexpr int ld = HD + 1;
#pragma unroll
  for (int a = 0; a < 8; ++a)
#pragma unroll
    for (int c = 0; c < 4; ++c) s[a][c] = 0.f;
#pragma unroll 4
  for (int d = 0; d < HD; ++d) {
    float b[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) b[c] = b_rows[c * ld + d];
#pragma unroll
    for (int a = 0; a < 8; ++a) {
      const float x = a_rows[a * ld + d];
#pragma unroll
      for (int c = 0; c < 4; ++c) s[a][c] = fmaf(x, b[c], s[a][c]);
    }
  }
}

// acc[a][cc] += sum_j t[a][j] * m[j][g + 16 cc] over j < n (t: 8 rows of a [64, 64] tile of
// leading dim kLp; m: a [64, HD] tile of leading dim HD + 1).
template <int HD>
__device__ __forceinline__ void accumulate(const float* t_rows, const float* m, int n, int g,
                                           float acc[8][HD / 16]) {
  constexpr int ld = HD + 1, nc = HD / 16;
  for (int j = 0; j < n; ++j) {
    float mv[nc];
#pragma unroll
    for (int cc = 0; cc < nc; ++cc) mv[cc] = m[j * ld + g + 16 * cc];
#pragma unroll
    for (int a = 0; a < 8; ++a) {
      const float x = t_rows[a * kLp + j];
#pragma unroll
      for (int cc = 0; cc < nc; ++cc) acc[a][cc] = fmaf(x, mv[cc], acc[a][cc]);
    }
  }
}

template <int HD>
constexpr size_t forward_smem() {
  return (3 * kTile * (HD + 1) + kTile * kLp + kTile) * sizeof(float);
}
template <int HD>
constexpr size_t dq_smem() {
  return (4 * kTile * (HD + 1) + kTile * kLp + kTile) * sizeof(float);
}
template <int HD>
constexpr size_t dkdv_smem() {
  return (4 * kTile * (HD + 1) + 2 * kTile * kLp + 2 * kTile) * sizeof(float);
}

// Grid: one block per (head, tile of 64 queries).
template <int HD>
__global__ void __launch_bounds__(kBlockThreads)
    attention_forward_kernel(Params prm, float* out, float* lse) {
  constexpr int ld = HD + 1, nc = HD / 16;
  extern __shared__ float sm[];
  float *sq = sm, *sk = sq + kTile * ld, *sv = sk + kTile * ld, *sp = sv + kTile * ld,
        *sb = sp + kTile * kLp;
  const auto [h, i0] = block_tile(prm.sq);
  const int lane = threadIdx.x & 31, g = lane & 15;
  const int r0 = (threadIdx.x >> 5) * 16 + (lane >> 4) * 8;
  const float* bias = bias_row(prm, h);
  const int64_t qb = head_base(prm, h, prm.sq, HD), kb = head_base(prm, h, prm.sk, HD);
  load_tile<HD>(prm.q + qb, prm.e, prm.sq, i0, sq);
  float m[8], l[8], o[8][nc];
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    m[a] = -INFINITY;
    l[a] = 0.f;
#pragma unroll
    for (int cc = 0; cc < nc; ++cc) o[a][cc] = 0.f;
  }
  for (int64_t j0 = 0; j0 < prm.sk; j0 += kTile) {
    __syncthreads();  // the last tile's reads are done
    load_tile<HD>(prm.k + kb, prm.e, prm.sk, j0, sk);
    load_tile<HD>(prm.v + kb, prm.e, prm.sk, j0, sv);
    if (bias) load_rows(bias, prm.sk, j0, sb);
    __syncthreads();
    float s[8][4];
    dot_tile<HD>(sq + r0 * ld, sk + 4 * g * ld, s);
#pragma unroll
    for (int a = 0; a < 8; ++a) {
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int jj = 4 * g + c;
        // scale, then the bias: the composition's two roundings
        s[a][c] = j0 + jj < prm.sk ? s[a][c] * prm.scale + (bias ? sb[jj] : 0.f) : -INFINITY;
        mx = fmaxf(mx, s[a][c]);
      }
      const float mnew = fmaxf(m[a], group_max(mx));  // finite: every tile has a key
      const float alpha = expf(m[a] - mnew);
      float rs = 0.f;
#pragma unroll
      for (int c = 0; c < 4; ++c) rs += (s[a][c] = expf(s[a][c] - mnew));
      l[a] = l[a] * alpha + group_sum(rs);
      m[a] = mnew;
#pragma unroll
      for (int cc = 0; cc < nc; ++cc) o[a][cc] *= alpha;
      if (prm.p > 0.f) {
        float mk[4];
        keep4(prm, static_cast<uint64_t>((h * prm.sq + i0 + r0 + a) * prm.sk + j0 + 4 * g), mk);
#pragma unroll
        for (int c = 0; c < 4; ++c) s[a][c] *= mk[c];
      }
#pragma unroll
      for (int c = 0; c < 4; ++c) sp[(r0 + a) * kLp + 4 * g + c] = s[a][c];
    }
    __syncwarp();  // a half-warp reads back only the rows it wrote
    accumulate<HD>(sp + r0 * kLp, sv, tile_rows(prm.sk, j0), g, o);
  }
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const int64_t i = i0 + r0 + a;
    if (i >= prm.sq) continue;
    const float inv = 1.f / l[a];
#pragma unroll
    for (int cc = 0; cc < nc; ++cc) out[qb + i * prm.e + g + 16 * cc] = o[a][cc] * inv;
    if (g == 0) lse[h * prm.sq + i] = m[a] + logf(l[a]);
  }
}

// D[bh*Sq + i] = dout . out over head bh's columns of row i (the softmax backward's row sum):
// one warp per (b, i, h), the flat rows of a [B*Sq*heads, D] view.
// dout and out f32 or both 16-bit (read as f32).
template <class In>
__global__ void attention_rowdot_kernel(const In* dout, const In* out, float* rowdot, int64_t rows,
                                        int hd, int64_t sq, int64_t heads) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  float s = 0.f;
  for (int d = lane; d < hd; d += 32)
    s = fmaf(kernel::ld(dout, row * hd + d), kernel::ld(out, row * hd + d), s);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const int64_t b = row / (sq * heads), i = (row / heads) % sq, h = row % heads;
  if (lane == 0) rowdot[(b * heads + h) * sq + i] = s;
}

// The gradient of one probability's score, from what the backward recomputes: dz (dout . v_j),
// the mask multiplier, the probability and the row sum D.
__device__ __forceinline__ float score_grad(float prob, float dz, float mk, float rowdot) {
  return prob * (dz * mk - rowdot);
}

// dq: one block per (head, tile of 64 queries), walking the key tiles.
template <int HD>
__global__ void __launch_bounds__(kBlockThreads)
    attention_dq_kernel(Params prm, const float* dout, const float* lse, const float* rowdot,
                        float* dq) {
  constexpr int ld = HD + 1, nc = HD / 16;
  extern __shared__ float sm[];
  float *sq = sm, *sg = sq + kTile * ld, *sk = sg + kTile * ld, *sv = sk + kTile * ld,
        *ss = sv + kTile * ld, *sb = ss + kTile * kLp;
  const auto [h, i0] = block_tile(prm.sq);
  const int lane = threadIdx.x & 31, g = lane & 15;
  const int r0 = (threadIdx.x >> 5) * 16 + (lane >> 4) * 8;
  const float* bias = bias_row(prm, h);
  const int64_t qb = head_base(prm, h, prm.sq, HD), kb = head_base(prm, h, prm.sk, HD);
  load_tile<HD>(prm.q + qb, prm.e, prm.sq, i0, sq);
  load_tile<HD>(dout + qb, prm.e, prm.sq, i0, sg);
  float row_lse[8], row_dot[8], acc[8][nc];
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const int64_t i = i0 + r0 + a;
    row_lse[a] = i < prm.sq ? lse[h * prm.sq + i] : 0.f;
    row_dot[a] = i < prm.sq ? rowdot[h * prm.sq + i] : 0.f;
#pragma unroll
    for (int cc = 0; cc < nc; ++cc) acc[a][cc] = 0.f;
  }
  for (int64_t j0 = 0; j0 < prm.sk; j0 += kTile) {
    __syncthreads();
    load_tile<HD>(prm.k + kb, prm.e, prm.sk, j0, sk);
    load_tile<HD>(prm.v + kb, prm.e, prm.sk, j0, sv);
    if (bias) load_rows(bias, prm.sk, j0, sb);
    __syncthreads();
    float s[8][4], dz[8][4];
    dot_tile<HD>(sq + r0 * ld, sk + 4 * g * ld, s);
    dot_tile<HD>(sg + r0 * ld, sv + 4 * g * ld, dz);
#pragma unroll
    for (int a = 0; a < 8; ++a) {
      float mk[4] = {1.f, 1.f, 1.f, 1.f};
      if (prm.p > 0.f)
        keep4(prm, static_cast<uint64_t>((h * prm.sq + i0 + r0 + a) * prm.sk + j0 + 4 * g), mk);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int jj = 4 * g + c;
        const float prob =
            j0 + jj < prm.sk ? expf(s[a][c] * prm.scale + (bias ? sb[jj] : 0.f) - row_lse[a]) : 0.f;
        ss[(r0 + a) * kLp + jj] = score_grad(prob, dz[a][c], mk[c], row_dot[a]);
      }
    }
    __syncwarp();
    accumulate<HD>(ss + r0 * kLp, sk, tile_rows(prm.sk, j0), g, acc);
  }
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const int64_t i = i0 + r0 + a;
    if (i >= prm.sq) continue;
#pragma unroll
    for (int cc = 0; cc < nc; ++cc) dq[qb + i * prm.e + g + 16 * cc] = acc[a][cc] * prm.scale;
  }
}

// dk and dv: one block per (head, tile of 64 keys), walking the query tiles.
template <int HD>
__global__ void __launch_bounds__(kBlockThreads)
    attention_dkdv_kernel(Params prm, const float* dout, const float* lse, const float* rowdot,
                          float* dk, float* dv) {
  constexpr int ld = HD + 1, nc = HD / 16;
  extern __shared__ float sm[];
  float *sk = sm, *sv = sk + kTile * ld, *sq = sv + kTile * ld, *sg = sq + kTile * ld,
        *sz = sg + kTile * ld, *ss = sz + kTile * kLp, *sl = ss + kTile * kLp, *sd = sl + kTile;
  const auto [h, j0] = block_tile(prm.sk);
  const int lane = threadIdx.x & 31, g = lane & 15;
  const int r0 = (threadIdx.x >> 5) * 16 + (lane >> 4) * 8;  // this lane's 8 keys
  const int64_t qb = head_base(prm, h, prm.sq, HD), kb = head_base(prm, h, prm.sk, HD);
  load_tile<HD>(prm.k + kb, prm.e, prm.sk, j0, sk);
  load_tile<HD>(prm.v + kb, prm.e, prm.sk, j0, sv);
  float key_bias[8], acc_k[8][nc], acc_v[8][nc];
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const int64_t j = j0 + r0 + a;
    key_bias[a] = prm.bias && j < prm.sk ? prm.bias[(h / prm.heads) * prm.sk + j] : 0.f;
#pragma unroll
    for (int cc = 0; cc < nc; ++cc) acc_k[a][cc] = acc_v[a][cc] = 0.f;
  }
  for (int64_t i0 = 0; i0 < prm.sq; i0 += kTile) {
    __syncthreads();
    load_tile<HD>(prm.q + qb, prm.e, prm.sq, i0, sq);
    load_tile<HD>(dout + qb, prm.e, prm.sq, i0, sg);
    load_rows(lse + h * prm.sq, prm.sq, i0, sl);
    load_rows(rowdot + h * prm.sq, prm.sq, i0, sd);
    __syncthreads();
    float st[8][4], dz[8][4];  // [key a][query c]
    dot_tile<HD>(sk + r0 * ld, sq + 4 * g * ld, st);
    dot_tile<HD>(sv + r0 * ld, sg + 4 * g * ld, dz);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int ii = 4 * g + c;
      const int64_t i = i0 + ii;
      float mk[8] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
      if (prm.p > 0.f) {
        const uint64_t e0 = static_cast<uint64_t>((h * prm.sq + i) * prm.sk + j0 + r0);
        keep4(prm, e0, mk);
        keep4(prm, e0 + 4, mk + 4);
      }
#pragma unroll
      for (int a = 0; a < 8; ++a) {
        const bool valid = i < prm.sq && j0 + r0 + a < prm.sk;
        const float prob = valid ? expf(st[a][c] * prm.scale + key_bias[a] - sl[ii]) : 0.f;
        sz[(r0 + a) * kLp + ii] = prob * mk[a];
        ss[(r0 + a) * kLp + ii] = score_grad(prob, dz[a][c], mk[a], sd[ii]);
      }
    }
    __syncwarp();
    const int n = tile_rows(prm.sq, i0);
    accumulate<HD>(sz + r0 * kLp, sg, n, g, acc_v);
    accumulate<HD>(ss + r0 * kLp, sq, n, g, acc_k);
  }
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const int64_t j = j0 + r0 + a;
    if (j >= prm.sk) continue;
#pragma unroll
    for (int cc = 0; cc < nc; ++cc) {
      dk[kb + j * prm.e + g + 16 * cc] = acc_k[a][cc] * prm.scale;
      dv[kb + j * prm.e + g + 16 * cc] = acc_v[a][cc];
    }
  }
}

template <int HD>
void forward(const Params& prm, int64_t bh, float* out, float* lse, int dev) {
  const int64_t tiles = (prm.sq + kTile - 1) / kTile;
  launch(attention_forward_kernel<HD>, forward_smem<HD>(), bh * tiles, dev, prm, out, lse);
}

template <int HD>
void backward(const Params& prm, int64_t bh, const float* dout, const float* lse,
              const float* rowdot, float* dq, float* dk, float* dv, int dev) {
  launch(attention_dq_kernel<HD>, dq_smem<HD>(), bh * ((prm.sq + kTile - 1) / kTile), dev, prm,
         dout, lse, rowdot, dq);
  launch(attention_dkdv_kernel<HD>, dkdv_smem<HD>(), bh * ((prm.sk + kTile - 1) / kTile), dev, prm,
         dout, lse, rowdot, dk, dv);
}

}  // namespace

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_bias,
                       const ops::AttentionArgs& a, Tensor& lse) {
  const int dev = check("fused_attention", q, k, v, key_bias, a);
  const int64_t bh = q.size(0) * a.heads, hd = q.size(2) / a.heads;
  if (q.size(0) == 0 || q.size(1) == 0 || k.size(1) == 0) {
    lse = Tensor::zeros({bh, q.size(1)}, DType::f32, q.device());
    return Tensor::zeros(q.shape(), q.dtype(), q.device());
  }
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());  // every element written
  lse = Tensor::empty({bh, q.size(1)}, DType::f32, q.device());
  float* lp = lse.data<float>();
  if (const Precision mp = cuda_matmul_precision(); mp != Precision::fp32) {
    forward_tensor_cores(q, k, v, key_bias, a, mp == Precision::fp16, out, lp, dev);
    return out;
  }
  const Params prm = params(q, k, v, key_bias, a);
  float* op = out.data<float>();
  switch (hd) {
    case 32:
      forward<32>(prm, bh, op, lp, dev);
      break;
    case 64:
      forward<64>(prm, bh, op, lp, dev);
      break;
    default:
      forward<128>(prm, bh, op, lp, dev);
      break;
  }
  return out;
}

ops::AttentionGrads fused_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out, const Tensor& lse,
                                             const Tensor& key_bias, const ops::AttentionArgs& a) {
  const int dev = check("fused_attention_backward", q, k, v, key_bias, a);
  require_f32("fused_attention_backward", {&dout, &out}, q.dtype());
  require_f32("fused_attention_backward", {&lse});
  require_on("fused_attention_backward", dev, {&dout, &out, &lse});
  ADA_CHECK_ARG(dout.dtype() == q.dtype() && out.dtype() == q.dtype(), DTypeError)
      << "fused_attention_backward: dout and out must have q's dtype, got " << dout.str() << ", "
      << out.str() << " and q " << q.str();
  backend::check_fused_attention_backward(dout, q, out, lse, a.heads);
  const int64_t bh = q.size(0) * a.heads, rows = bh * q.size(1), hd = q.size(2) / a.heads;
  const bool empty = rows == 0 || k.size(1) == 0;  // else every element is written
  auto make = [&](const Shape& s) {
    return empty ? Tensor::zeros(s, dout.dtype(), q.device())
                 : Tensor::empty(s, dout.dtype(), q.device());
  };
  ops::AttentionGrads g{make(q.shape()), make(k.shape()), make(v.shape())};
  if (empty) return g;
  Scratch rowdot(static_cast<size_t>(rows) * sizeof(float), dev);
  kernel::with_float_type(dout.dtype(), [&](auto t) {
    using In = decltype(t);
    attention_rowdot_kernel<In>
        <<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, stream(dev)>>>(
            kernel::data_as<In>(dout), kernel::data_as<In>(out), rowdot.as<float>(), rows,
            static_cast<int>(hd), q.size(1), a.heads);
  });
  ADA_CUDA_LAUNCH_CHECK();
  const float *lp = lse.data<float>(), *rp = rowdot.as<float>();
  if (const Precision mp = cuda_matmul_precision(); mp != Precision::fp32) {
    backward_tensor_cores(q, k, v, key_bias, a, mp == Precision::fp16, dout, lp, rp, g, dev);
    return g;
  }
  const Params prm = params(q, k, v, key_bias, a);
  const float* gp = dout.data<float>();
  float *dq = g.dq.data<float>(), *dk = g.dk.data<float>(), *dv = g.dv.data<float>();
  switch (hd) {
    case 32:
      backward<32>(prm, bh, gp, lp, rp, dq, dk, dv, dev);
      break;
    case 64:
      backward<64>(prm, bh, gp, lp, rp, dq, dk, dv, dev);
      break;
    default:
      backward<128>(prm, bh, gp, lp, rp, dq, dk, dv, dev);
      break;
  }
  return g;
}

}  // namespace ada::cuda
