// CPU fused attention (core/ops.h): per (batch*head, tile of 64 queries; q, k, v read in place
// in their [B, S, heads*D] layout, strided rows) the scores of the tile
// against every key, the softmax and its dropout in place, then the tile's output — a [64, Sk]
// buffer instead of the [B*heads, Sq, Sk] probabilities and masks. The backward recomputes a
// tile's probabilities from the saved log-normalisers (flash attention's backward, key tiles
// whole). The products go through cpu::gemm (our kernels; bf16 operands under a bf16
// train.precision, as the composition's). The reference the CUDA kernels are tested against; the
// composition's masks, its sums in other orders.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/backend/cpu/dropout_blocks.h"
#include "core/backend/cpu/eigen_map.h"
#include "core/backend/cpu/sgemm.h"
#include "core/backend/op_shapes.h"
#include "core/parallel.h"

namespace ada::cpu {
namespace {

constexpr int64_t kQueryTile = 64;

// Shapes and pointers of one call. q, k, v, out and their gradients are [B, S, E] with head h in
// columns [h*d, (h+1)*d) of every row (row stride e); head bh = b*heads + h.
struct Problem {
  int64_t bh, sq, sk, d, e, heads;
  const float *q, *k, *v, *bias;
  // Offset of row i of head bh in a [B, s, E] tensor.
  int64_t at(int64_t bh_, int64_t s, int64_t i) const {
    return ((bh_ / heads) * s + i) * e + (bh_ % heads) * d;
  }
};

Problem problem(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_bias,
                int64_t heads) {
  const int64_t e = q.size(2);
  return {q.size(0) * heads,
          q.size(1),
          k.size(1),
          e / heads,
          e,
          heads,
          q.data<float>(),
          k.data<float>(),
          v.data<float>(),
          key_bias.defined() ? key_bias.data<float>() : nullptr};
}

// Dropout multipliers of probability elements e0 .. e0+n-1 (dropout_forward's stream): whole
// Philox blocks by dropout_blocks, single words at the ends.
void dropout_row(const ops::AttentionArgs& a, uint64_t e0, int64_t n, float* out) {
  const float keep = 1.f / (1.f - a.dropout), p = a.dropout;
  auto one = [&](uint64_t e) {  // a single element: its block's four, one kept
    float m[4];
    dropout_blocks(a.seed, a.first, e / 4, 1, p, keep, nullptr, nullptr, m);
    return m[e % 4];
  };
  int64_t j = 0;
  for (; j < n && (e0 + j) % 4 != 0; ++j) out[j] = one(e0 + j);
  const int64_t blocks = (n - j) / 4;
  dropout_blocks(a.seed, a.first, (e0 + j) / 4, blocks, p, keep, nullptr, nullptr, out + j);
  for (j += 4 * blocks; j < n; ++j) out[j] = one(e0 + j);
}

// s = scale * (q_tile k^T) + bias of example `bh / heads`, rows [i0, i0 + rows) of head bh.
void scores(const Problem& p, const ops::AttentionArgs& a, int64_t bh, int64_t i0, int64_t rows,
            RowMat& s) {
  gemm(false, true, rows, p.sk, p.d, 1.f, p.q + p.at(bh, p.sq, i0), p.e, p.k + p.at(bh, p.sk, 0),
       p.e, 0.f, s.data(), p.sk);
  s *= a.scale;
  if (p.bias)
    s.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(p.bias + (bh / p.heads) * p.sk, p.sk);
}

// Multiplies row r of the tile (query i0 + r of head bh) by its dropout mask, saving it in `mask`.
void apply_dropout(const Problem& p, const ops::AttentionArgs& a, int64_t bh, int64_t i0, RowMat& t,
                   RowMat& mask) {
  for (int64_t r = 0; r < t.rows(); ++r) {
    dropout_row(a, static_cast<uint64_t>((bh * p.sq + i0 + r) * p.sk), p.sk, &mask(r, 0));
    t.row(r).array() *= mask.row(r).array();
  }
}

}  // namespace

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_bias,
                       const ops::AttentionArgs& a, Tensor& lse) {
  require_cpu_f32("fused_attention", {&q, &k, &v});
  if (key_bias.defined()) require_cpu_f32("fused_attention", {&key_bias});
  backend::check_fused_attention(q, k, v, key_bias, a.heads, a.dropout);
  const Problem p = problem(q, k, v, key_bias, a.heads);
  if (p.sk == 0) {  // no keys: zeros
    lse = Tensor::zeros({p.bh, p.sq});
    return Tensor::zeros(q.shape());
  }
  Tensor out = Tensor::empty(q.shape());  // every row written below
  lse = Tensor::empty({p.bh, p.sq});
  float* op = out.data<float>();
  float* lp = lse.data<float>();
  const int64_t tiles = (p.sq + kQueryTile - 1) / kQueryTile;
  parallel_for(0, p.bh * tiles, 1, [&](int64_t begin, int64_t end) {
    RowMat s, mask;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t bh = t / tiles, i0 = (t % tiles) * kQueryTile;
      const int64_t rows = std::min(kQueryTile, p.sq - i0);
      s.resize(rows, p.sk);
      scores(p, a, bh, i0, rows, s);
      for (int64_t r = 0; r < rows; ++r) {
        const float m = s.row(r).maxCoeff();
        s.row(r) = (s.row(r).array() - m).exp();
        const float l = s.row(r).sum();
        lp[bh * p.sq + i0 + r] = m + std::log(l);
        s.row(r) *= 1.f / l;
      }
      if (a.dropout > 0.f) {
        mask.resize(rows, p.sk);
        apply_dropout(p, a, bh, i0, s, mask);
      }
      gemm(false, false, rows, p.d, p.sk, 1.f, s.data(), p.sk, p.v + p.at(bh, p.sk, 0), p.e, 0.f,
           op + p.at(bh, p.sq, i0), p.e);
    }
  });
  return out;
}

ops::AttentionGrads fused_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out, const Tensor& lse,
                                             const Tensor& key_bias, const ops::AttentionArgs& a) {
  require_cpu_f32("fused_attention_backward", {&dout, &q, &k, &v, &out, &lse});
  if (key_bias.defined()) require_cpu_f32("fused_attention_backward", {&key_bias});
  backend::check_fused_attention(q, k, v, key_bias, a.heads, a.dropout);
  backend::check_fused_attention_backward(dout, q, out, lse, a.heads);
  const Problem p = problem(q, k, v, key_bias, a.heads);
  const bool empty = p.sk == 0 || p.sq == 0;
  // dq is written row by row; dk and dv accumulate over the query tiles, so they start at 0.
  ops::AttentionGrads g{empty ? Tensor::zeros(q.shape()) : Tensor::empty(q.shape()),
                        Tensor::zeros(k.shape()), Tensor::zeros(v.shape())};
  if (empty) return g;
  const float *dop = dout.data<float>(), *outp = out.data<float>(), *lp = lse.data<float>();
  float *dqp = g.dq.data<float>(), *dkp = g.dk.data<float>(), *dvp = g.dv.data<float>();
  // One head per task: its dk and dv sum over every query tile in a fixed order.
  parallel_for(0, p.bh, 1, [&](int64_t begin, int64_t end) {
    RowMat prob, z, dz, mask;
    using Strided = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t k0 = p.at(bh, p.sk, 0);
      const float *kp = p.k + k0, *vp = p.v + k0;
      float *dk = dkp + k0, *dv = dvp + k0;
      for (int64_t i0 = 0; i0 < p.sq; i0 += kQueryTile) {
        const int64_t rows = std::min(kQueryTile, p.sq - i0), q0 = p.at(bh, p.sq, i0);
        const int64_t row0 = bh * p.sq + i0;  // of lse
        const float *qp = p.q + q0, *gp = dop + q0;
        Strided dot(gp, rows, p.d, Eigen::OuterStride<>(p.e)),
            ot(outp + q0, rows, p.d, Eigen::OuterStride<>(p.e));
        prob.resize(rows, p.sk);
        scores(p, a, bh, i0, rows, prob);
        for (int64_t r = 0; r < rows; ++r)
          prob.row(r) = (prob.row(r).array() - lp[row0 + r]).exp();  // the softmax, from lse
        z = prob;  // what multiplied v: the probabilities after dropout
        if (a.dropout > 0.f) {
          mask.resize(rows, p.sk);
          apply_dropout(p, a, bh, i0, z, mask);
        }
        // dv += z^T dout; dz = dout v^T, d(out)/d(z)
        gemm(true, false, p.sk, p.d, rows, 1.f, z.data(), p.sk, gp, p.e, 1.f, dv, p.e);
        dz.resize(rows, p.sk);
        gemm(false, true, rows, p.sk, p.d, 1.f, gp, p.e, vp, p.e, 0.f, dz.data(), p.sk);
        if (a.dropout > 0.f) dz.array() *= mask.array();
        // Softmax backward: ds = prob * (dprob - sum_j dprob*prob), the sum being dout . out.
        const Eigen::VectorXf row_dot = (dot.array() * ot.array()).rowwise().sum();
        dz.array() = prob.array() * (dz.array().colwise() - row_dot.array());
        // dq = scale ds k; dk += scale ds^T q
        gemm(false, false, rows, p.d, p.sk, a.scale, dz.data(), p.sk, kp, p.e, 0.f, dqp + q0, p.e);
        gemm(true, false, p.sk, p.d, rows, a.scale, dz.data(), p.sk, qp, p.e, 1.f, dk, p.e);
      }
    }
  });
  return g;
}

}  // namespace ada::cpu
