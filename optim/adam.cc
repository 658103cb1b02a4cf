// Adam / AdamW: one fused pass per parameter (ops::adam_update_), all of a step in one call
// (ops::adam_step_).
#include "optim/adam.h"

#include "core/ops.h"

namespace ada::optim {

AdamOptions AdamOptions::from_config(const Config& c, bool decoupled) {
  AdamOptions o;
  o.decoupled = decoupled;
  o.lr = c.get_in<double>("lr", Range::above(0), "the single-worker learning rate, e.g. 1e-3");
  o.beta1 = c.get_in_or<double>("beta1", o.beta1, Range::half_open(0, 1), "typical: 0.9");
  o.beta2 = c.get_in_or<double>("beta2", o.beta2, Range::half_open(0, 1), "typical: 0.999");
  o.eps = c.get_in_or<double>("eps", o.eps, Range::above(0), "typical: 1e-8 (1e-6 for BERT)");
  o.weight_decay =
      c.get_in_or<double>("weight_decay", decoupled ? 0.01 : 0.0, Range::at_least(0),
                          decoupled ? "typical: 0.01" : "typical: 0 (use adamw to decay)");
  return o;
}

Adam::Adam(const AdamOptions& o)
    : Optimizer(o.decoupled ? "adamw" : "adam", o.lr, {"exp_avg", "exp_avg_sq"}), opt_(o) {
  ADA_CHECK(o.lr > 0 && o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps > 0 &&
            o.weight_decay >= 0)
      << "invalid AdamOptions (AdamOptions::from_config checks them with messages)";
}

void Adam::update(const Param& p, const Tensor& grad, Slot& slot, float lr) {
  update_all({{&p, &grad, &slot}}, lr);
}

void Adam::update_all(const std::vector<Item>& items, float lr) {
  entries_.clear();
  for (const Item& it : items) {
    const double wd = it.param->weight_decay ? opt_.weight_decay : 0.0;
    ops::AdamEntry e{moments_entry(it, opt_.beta1, opt_.beta2, opt_.eps)};
    e.args.l2 = opt_.decoupled ? 0.0 : wd;
    e.decoupled_decay = opt_.decoupled ? wd : 0.0;
    entries_.push_back(std::move(e));
  }
  ops::adam_step_(entries_, lr);
}

}  // namespace ada::optim
