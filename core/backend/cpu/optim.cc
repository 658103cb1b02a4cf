// Fused optimizer updates (the Adam family): one pass over w, g, m, v per tensor, f32 arithmetic
// in PyTorch's operation order with constants formed in double. Bandwidth-bound; parallel over
// contiguous chunks, vectorised with Eigen arrays.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/backend/op_shapes.h"
#include "core/ops.h"

namespace ada::cpu {

namespace {

void check_adam(const char* op, const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v,
                const AdamArgs& a) {
  require_cpu_f32(op, {&w, &g, &m, &v});
  backend::check_adam_args(op, w, g, m, v, a);
}

using backend::adam_consts;
using backend::AdamConsts;

}  // namespace

namespace {
// Work is split into fixed blocks whose four streams stay in L1 between the Eigen passes below
// (moments, then the update), so memory sees one read and one write per tensor. Blocks, not
// thread chunks, decide which elements take Eigen's vector or scalar path, so results do not
// depend on the thread count. Eigen's packet sqrt keeps the loop vectorised (a scalar
// std::sqrt loop is not, because of errno).
constexpr int64_t kBlock = 1024;
int64_t num_blocks(int64_t n) {
  return (n + kBlock - 1) / kBlock;
}
using Arr = Eigen::Map<Eigen::ArrayXf>;
using CArr = Eigen::Map<const Eigen::ArrayXf>;

// m = beta1*m + (1-beta1)*g';  v = beta2*v + (1-beta2)*g'*g', g' = g (+ l2*w).
void adam_moments(const AdamConsts& c, bool add_l2, const CArr& W, const CArr& G, Arr& M, Arr& V) {
  if (add_l2) {
    const auto gp = G + c.l2 * W;
    M = M * c.b1 + c.omb1 * gp;
    V = V * c.b2 + c.omb2 * gp * gp;
  } else {
    M = M * c.b1 + c.omb1 * G;
    V = V * c.b2 + c.omb2 * G * G;
  }
}
}  // namespace

void adam_update_(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamArgs& a, double lr,
                  double decoupled_decay) {
  check_adam("adam_update_", w, g, m, v, a);
  const AdamConsts c = adam_consts(a);
  const float neg_step = static_cast<float>(-(lr / c.bias1));
  const float w_scale = static_cast<float>(1.0 - lr * decoupled_decay);
  const bool add_l2 = a.l2 != 0.0;
  float* wp = w.data<float>();
  const float* gp = g.data<float>();
  float* mp = m.data<float>();
  float* vp = v.data<float>();
  const int64_t total = w.numel();
  parallel_for(0, num_blocks(total), kGrain / kBlock, [&](int64_t b, int64_t e) {
    for (int64_t s = b * kBlock; s < std::min(e * kBlock, total); s += kBlock) {
      const int64_t n = std::min(kBlock, total - s);
      Arr W(wp + s, n), M(mp + s, n), V(vp + s, n);
      const CArr G(gp + s, n), Wc(wp + s, n);
      adam_moments(c, add_l2, Wc, G, M, V);
      // w*(1 - lr*decay) is exact when decay is 0 (the factor is 1).
      W = W * w_scale + neg_step * M / (V.sqrt() / c.b2_sqrt + c.eps);
    }
  });
}

void adam_direction_(Tensor& u, const Tensor& w, const Tensor& g, Tensor& m, Tensor& v,
                     const AdamArgs& a, double decay) {
  check_adam("adam_direction_", w, g, m, v, a);
  require_cpu_f32("adam_direction_", {&u});
  check_same_shape(w, u, "adam_direction_");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&w, &g, &m, &v})
    ADA_CHECK_ARG(!u.shares_storage_with(*t), InternalError)
        << "adam_direction_: the output u must not share storage with w, g, m or v";
  const AdamConsts c = adam_consts(a);
  const float inv_bias1 = static_cast<float>(1.0 / c.bias1);
  const float lambda = static_cast<float>(decay);
  const bool add_l2 = a.l2 != 0.0;
  float* up = u.data<float>();
  const float* wp = w.data<float>();
  const float* gp = g.data<float>();
  float* mp = m.data<float>();
  float* vp = v.data<float>();
  const int64_t total = w.numel();
  parallel_for(0, num_blocks(total), kGrain / kBlock, [&](int64_t b, int64_t e) {
    for (int64_t s = b * kBlock; s < std::min(e * kBlock, total); s += kBlock) {
      const int64_t n = std::min(kBlock, total - s);
      Arr U(up + s, n), M(mp + s, n), V(vp + s, n);
      const CArr W(wp + s, n), G(gp + s, n);
      adam_moments(c, add_l2, W, G, M, V);
      U = inv_bias1 * M / (V.sqrt() / c.b2_sqrt + c.eps) + lambda * W;
    }
  });
}

}  // namespace ada::cpu
