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
  update_all({{&p, &grad, &slot}}, lr);
}

void Sgd::update_all(const std::vector<Item>& items, float lr) {
  entries_.clear();
  for (const Item& it : items) {
    ops::SgdEntry e;
    e.w = it.param->var.value();  // shares storage: updates the parameter in place
    e.g = *it.grad;
    if (opt_.momentum > 0) e.v = it.slot->buffers[0];
    e.weight_decay = it.param->weight_decay ? static_cast<float>(opt_.weight_decay) : 0.f;
    e.first = it.slot->step == 1;
    entries_.push_back(std::move(e));
  }
  ops::sgd_step_(entries_, lr, static_cast<float>(opt_.momentum), opt_.nesterov);
}

}  // namespace ada::optim
