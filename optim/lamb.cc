// LAMB: a fused Adam-direction pass into a scratch tensor, two norms (double), one axpby.
#include "optim/lamb.h"

#include <cmath>

#include "core/ops.h"

namespace ada::optim {

LambOptions LambOptions::from_config(const Config& c) {
  LambOptions o;
  o.lr = c.get_in<double>("lr", Range::above(0), "the single-worker learning rate, e.g. 1e-3");
  o.beta1 = c.get_in_or<double>("beta1", o.beta1, Range::half_open(0, 1), "typical: 0.9");
  o.beta2 = c.get_in_or<double>("beta2", o.beta2, Range::half_open(0, 1), "typical: 0.999");
  o.eps = c.get_in_or<double>("eps", o.eps, Range::above(0), "typical: 1e-6");
  o.weight_decay =
      c.get_in_or<double>("weight_decay", o.weight_decay, Range::at_least(0), "typical: 0.01");
  o.always_adapt = c.get_or<bool>("always_adapt", o.always_adapt);
  return o;
}

Lamb::Lamb(const LambOptions& o) : Optimizer("lamb", o.lr, {"exp_avg", "exp_avg_sq"}), opt_(o) {
  ADA_CHECK(o.lr > 0 && o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps > 0 &&
            o.weight_decay >= 0)
      << "invalid LambOptions (LambOptions::from_config checks them with messages)";
}

void Lamb::update(const Param& p, const Tensor& grad, Slot& slot, float lr) {
  Tensor w = p.var.value();  // shares storage: updates the parameter in place
  ops::AdamArgs a;
  a.beta1 = opt_.beta1;
  a.beta2 = opt_.beta2;
  a.eps = opt_.eps;
  a.step = slot.step;
  Tensor u = scratch(w.shape(), w.device());
  ops::adam_direction_(u, w, grad, slot.buffers[0], slot.buffers[1], a,
                       p.weight_decay ? opt_.weight_decay : 0.0);
  double ratio = 1.0;
  if (p.weight_decay || opt_.always_adapt) {
    const double wn = std::sqrt(ops::norm2_sq(w)), un = std::sqrt(ops::norm2_sq(u));
    if (wn > 0 && un > 0) ratio = wn / un;
  }
  ratios_[p.name] = ratio;
  ops::axpby_(static_cast<float>(-static_cast<double>(lr) * ratio), u, 1.f, w);
}

}  // namespace ada::optim
