// A double-precision reference for scaled dot-product attention with a key bias and dropout
// masks, out = (softmax(scale * q k^T + bias) * mask) v, and its gradients by the chain rule
// through that composition, each with the sum of |terms| that tests/util/sum_bound.h holds an
// fp32 kernel to. Beyond the rounding of its own sums, every term of an output carries the error
// of the probability in it: a probability exp(s - lse) computed in fp32 is off relatively by
// about eps * (a_ij + A_i), where a_ij = scale * sum_d |q_id k_jd| + |s_ij| bounds the rounding
// of its score and A_i = sum_j P_ij a_ij that of the row's normaliser. So a term t made with
// P_ij counts |t| * (2 + a_ij + A_i) into the magnitude, and a term made with another computed
// quantity counts that quantity's own error budget (in units of eps).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "tests/util/sum_bound.h"

namespace ada::testing {

struct AttentionRef {
  SumRef out, dq, dk, dv;
};

// q [BH, Sq, D], k, v [BH, Sk, D], bias [BH/heads, Sk] or undefined, mask [BH, Sq, Sk] (the
// dropout multipliers, ones for none), dout [BH, Sq, D]: all f32 on the CPU.
inline AttentionRef attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& bias, const Tensor& mask, int64_t heads,
                                        double scale, const Tensor& dout) {
  const int64_t bh = q.size(0), sq = q.size(1), sk = k.size(1), d = q.size(2);
  const float *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>(),
              *mp = mask.data<float>(), *gp = dout.data<float>();
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  const size_t nq = static_cast<size_t>(bh * sq * d), nk = static_cast<size_t>(bh * sk * d);
  AttentionRef r{SumRef(nq), SumRef(nq), SumRef(nk), SumRef(nk)};
  std::vector<double> s(sk), a(sk), p(sk), dz(sk), dz_err(sk), ds(sk), ds_err(sk);
  for (int64_t h = 0; h < bh; ++h)
    for (int64_t i = 0; i < sq; ++i) {
      const float* qi = qp + (h * sq + i) * d;
      const float* gi = gp + (h * sq + i) * d;
      const float* mi = mp + (h * sq + i) * sk;
      double mx = -INFINITY;
      for (int64_t j = 0; j < sk; ++j) {
        double dot = 0, mag = 0;
        for (int64_t c = 0; c < d; ++c) {
          dot += double(qi[c]) * kp[(h * sk + j) * d + c];
          mag += std::fabs(double(qi[c]) * kp[(h * sk + j) * d + c]);
        }
        s[j] = scale * dot + (bp ? bp[(h / heads) * sk + j] : 0.0);
        a[j] = scale * mag + std::fabs(s[j]);
        mx = std::max(mx, s[j]);
      }
      double l = 0, big_a = 0;
      for (int64_t j = 0; j < sk; ++j) l += (p[j] = std::exp(s[j] - mx));
      for (int64_t j = 0; j < sk; ++j) big_a += (p[j] /= l) * a[j];
      // out_i = sum_j P_ij m_ij v_j, and its error budget per element (for D_i below).
      std::vector<double> o(d, 0.0), o_err(d, 0.0);
      for (int64_t j = 0; j < sk; ++j)
        for (int64_t c = 0; c < d; ++c) {
          const double t = p[j] * mi[j] * vp[(h * sk + j) * d + c];
          o[c] += t;
          o_err[c] += std::fabs(t) * (2 + a[j] + big_a);
          r.out.value[(h * sq + i) * d + c] += t;
          r.out.mag[(h * sq + i) * d + c] += std::fabs(t) * (2 + a[j] + big_a);
        }
      // Backward through the composition: dz = dout v^T, dp = dz * m, ds = p (dp - sum p dp).
      double row = 0, row_err = 0;
      for (int64_t j = 0; j < sk; ++j) {
        double dot = 0, mag = 0;
        for (int64_t c = 0; c < d; ++c) {
          dot += double(gi[c]) * vp[(h * sk + j) * d + c];
          mag += std::fabs(double(gi[c]) * vp[(h * sk + j) * d + c]);
        }
        dz[j] = dot * mi[j];
        dz_err[j] = mag * mi[j] + std::fabs(dz[j]);
        row += p[j] * dz[j];
      }
      // The row's sum (a kernel may take it as dout . out): its budget either way.
      for (int64_t c = 0; c < d; ++c)
        row_err += std::fabs(gi[c] * o[c]) + std::fabs(gi[c]) * o_err[c];
      for (int64_t j = 0; j < sk; ++j) {
        ds[j] = p[j] * (dz[j] - row);
        ds_err[j] = std::fabs(ds[j]) * (2 + a[j] + big_a) + p[j] * (dz_err[j] + row_err);
      }
      for (int64_t j = 0; j < sk; ++j)
        for (int64_t c = 0; c < d; ++c) {
          const size_t qi_c = (h * sq + i) * d + c, kj_c = (h * sk + j) * d + c;
          const double kv = kp[kj_c], qv = qi[c];
          r.dq.value[qi_c] += scale * ds[j] * kv;
          r.dq.mag[qi_c] += scale * (std::fabs(ds[j] * kv) + ds_err[j] * std::fabs(kv));
          r.dk.value[kj_c] += scale * ds[j] * qv;
          r.dk.mag[kj_c] += scale * (std::fabs(ds[j] * qv) + ds_err[j] * std::fabs(qv));
          const double t = p[j] * mi[j] * gi[c];
          r.dv.value[kj_c] += t;
          r.dv.mag[kj_c] += std::fabs(t) * (2 + a[j] + big_a);
        }
    }
  return r;
}

}  // namespace ada::testing
