// CPU fused attention (core/ops.h): per (batch*head, tile of 64 queries) the scores of the tile
// against every key, the softmax and its dropout in place, then the tile's output — a [64, Sk]
// buffer instead of the [B*heads, Sq, Sk] probabilities and masks. The backward recomputes a
// tile's probabilities from the saved log-normalisers (flash attention's backward, key tiles
// whole). The reference the CUDA kernels are tested against; the composition's masks, its sums in
// other orders.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/backend/cpu/eigen_map.h"
#include "core/backend/op_shapes.h"
#include "core/parallel.h"
#include "core/philox.h"

namespace ada::cpu {
namespace {

constexpr int64_t kQueryTile = 64;

// Shapes and pointers of one call.
struct Problem {
  int64_t bh, sq, sk, d, heads;
  const float *q, *k, *v, *bias;
};

Problem problem(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_bias,
                int64_t heads) {
  return {q.size(0),       q.size(1),       k.size(1),
          q.size(2),       heads,           q.data<float>(),
          k.data<float>(), v.data<float>(), key_bias.defined() ? key_bias.data<float>() : nullptr};
}

// Dropout multipliers of probability elements e0 .. e0+n-1 (dropout_forward's stream).
void dropout_row(const ops::AttentionArgs& a, uint64_t e0, int64_t n, float* out) {
  const float keep = 1.f / (1.f - a.dropout);
  uint64_t e = e0;
  for (int64_t j = 0; j < n;) {
    const Uniform4 u = philox_uniform4_at(a.seed, a.first, e / 4);
    const float w[4] = {u.u0, u.u1, u.u2, u.u3};
    for (uint64_t c = e % 4; c < 4 && j < n; ++c, ++j, ++e) out[j] = w[c] >= a.dropout ? keep : 0.f;
  }
}

// s = scale * (q_tile k^T) + bias of example `bh / heads`, rows [i0, i0 + rows) of head bh.
void scores(const Problem& p, const ops::AttentionArgs& a, int64_t bh, int64_t i0, int64_t rows,
            RowMat& s) {
  ConstMatMap qt(p.q + (bh * p.sq + i0) * p.d, rows, p.d);
  ConstMatMap kt(p.k + bh * p.sk * p.d, p.sk, p.d);
  s.noalias() = qt * kt.transpose();
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
  Tensor out = Tensor::zeros(q.shape());
  lse = Tensor::zeros({p.bh, p.sq});
  if (p.sk == 0) return out;
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
      MatMap(op + (bh * p.sq + i0) * p.d, rows, p.d).noalias() =
          s * ConstMatMap(p.v + bh * p.sk * p.d, p.sk, p.d);
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
  backend::check_fused_attention_backward(dout, q, out, lse);
  const Problem p = problem(q, k, v, key_bias, a.heads);
  ops::AttentionGrads g{Tensor::zeros(q.shape()), Tensor::zeros(k.shape()),
                        Tensor::zeros(v.shape())};
  if (p.sk == 0 || p.sq == 0) return g;
  const float *dop = dout.data<float>(), *outp = out.data<float>(), *lp = lse.data<float>();
  float *dqp = g.dq.data<float>(), *dkp = g.dk.data<float>(), *dvp = g.dv.data<float>();
  // One head per task: its dk and dv sum over every query tile in a fixed order.
  parallel_for(0, p.bh, 1, [&](int64_t begin, int64_t end) {
    RowMat prob, z, dz, mask;
    for (int64_t bh = begin; bh < end; ++bh) {
      ConstMatMap kt(p.k + bh * p.sk * p.d, p.sk, p.d), vt(p.v + bh * p.sk * p.d, p.sk, p.d);
      MatMap dk(dkp + bh * p.sk * p.d, p.sk, p.d), dv(dvp + bh * p.sk * p.d, p.sk, p.d);
      for (int64_t i0 = 0; i0 < p.sq; i0 += kQueryTile) {
        const int64_t rows = std::min(kQueryTile, p.sq - i0), row0 = bh * p.sq + i0;
        ConstMatMap qt(p.q + row0 * p.d, rows, p.d), dot(dop + row0 * p.d, rows, p.d),
            ot(outp + row0 * p.d, rows, p.d);
        prob.resize(rows, p.sk);
        scores(p, a, bh, i0, rows, prob);
        for (int64_t r = 0; r < rows; ++r)
          prob.row(r) = (prob.row(r).array() - lp[row0 + r]).exp();  // the softmax, from lse
        z = prob;  // what multiplied v: the probabilities after dropout
        if (a.dropout > 0.f) {
          mask.resize(rows, p.sk);
          apply_dropout(p, a, bh, i0, z, mask);
        }
        dv.noalias() += z.transpose() * dot;
        dz.noalias() = dot * vt.transpose();  // d(out)/d(z)
        if (a.dropout > 0.f) dz.array() *= mask.array();
        // Softmax backward: ds = prob * (dprob - sum_j dprob*prob), the sum being dout . out.
        const Eigen::VectorXf row_dot = (dot.array() * ot.array()).rowwise().sum();
        dz.array() = prob.array() * (dz.array().colwise() - row_dot.array());
        MatMap(dqp + row0 * p.d, rows, p.d).noalias() = a.scale * (dz * kt);
        dk.noalias() += a.scale * (dz.transpose() * qt);
      }
    }
  });
  return g;
}

}  // namespace ada::cpu
