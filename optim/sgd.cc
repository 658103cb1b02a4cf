// Momentum-SGD on the op surface: two or three axpby passes per parameter, no temporaries.
#include "optim/sgd.h"

#include "core/ops.h"

namespace ada::optim {

SgdOptions SgdOptions::from_config(const Config& c) {
  SgdOptions o;
  o.lr = c.get_in<double>("lr", Range::above(0), "the single-worker learning rate, e.g. 0.1");
  o.momentum = c.get_in_or<double>("momentum", o.momentum, Range::half_open(0, 1),
                                   "typical: 0.9; 0 gives plain SGD");
  o.weight_decay = c.get_in_or<double>("weight_decay", o.weight_decay, Range::at_least(0),
                                       "typical: 1e-4 for ResNets");
  o.nesterov = c.get_or<bool>("nesterov", o.nesterov);
  if (o.nesterov && o.momentum == 0)
    throw ConfigError(c.where("nesterov") +
                      ": nesterov needs momentum > 0; set momentum (e.g. 0.9) or nesterov: false");
  return o;
}

Sgd::Sgd(const SgdOptions& o)
    : Optimizer("sgd", o.lr,
                o.momentum > 0 ? std::vector<std::string>{"momentum_buffer"}
                               : std::vector<std::string>{}),
      opt_(o) {
  ADA_CHECK(o.lr > 0 && o.momentum >= 0 && o.momentum < 1 && o.weight_decay >= 0 &&
            !(o.nesterov && o.momentum == 0))
      << "invalid SgdOptions (SgdOptions::from_config checks them with messages)";
}

void Sgd::update(const Param& p, const Tensor& grad, Slot& slot, float lr) {
  Tensor w = p.var.value();  // shares storage: updates the parameter in place
  const float mu = static_cast<float>(opt_.momentum);
  const float wd = p.weight_decay ? static_cast<float>(opt_.weight_decay) : 0.f;
  // w·(1 − lr·λ) − lr·g applies the decay term −lr·λ·w of the plain and Nesterov updates.
  const float keep = static_cast<float>(1.0 - static_cast<double>(lr) * wd);
  if (mu == 0.f) {  // plain SGD: w −= lr·(g + λw)
    ops::axpby_(-lr, grad, keep, w);
    return;
  }
  Tensor& v = slot.buffers[0];
  // v = μv + g + λw; on the first update v is zero, so v = g + λw exactly.
  ops::axpby_(1.f, grad, slot.step == 1 ? 0.f : mu, v);
  if (wd != 0.f) ops::axpby_(wd, w, 1.f, v);
  if (!opt_.nesterov) {
    ops::axpby_(-lr, v, 1.f, w);  // w −= lr·v
  } else {
    // w −= lr·(g + λw + μv), with v already updated: first −lr·(g + λw), then −lr·μ·v.
    ops::axpby_(-lr, grad, keep, w);
    ops::axpby_(-lr * mu, v, 1.f, w);
  }
}

}  // namespace ada::optim
