// LAMB: all parameters of a step in one multi-tensor op (ops::lamb_step_: the Adam direction, the
// per-tensor trust ratio in double, the update), the trust ratios kept on the device.
#include "optim/lamb.h"

#include <algorithm>

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
  update_all({{&p, &grad, &slot}}, lr);
}

int64_t Lamb::ratio_slot(const std::string& name, Device device) {
  auto [it, added] = ratio_slots_.try_emplace(name, static_cast<int64_t>(ratio_slots_.size()));
  const int64_t need = static_cast<int64_t>(ratio_slots_.size());
  if (!ratios_.defined() || ratios_.numel() < need || ratios_.device() != device) {
    Tensor grown = Tensor::empty({std::max<int64_t>(2 * need, 16)}, DType::f32, device);
    ops::fill_(grown, 1.f);
    if (ratios_.defined()) {
      Tensor keep = grown.narrow(0, ratios_.numel());
      keep.copy_from(ratios_);
    }
    ratios_ = grown;
  }
  return it->second;
}

void Lamb::update_all(const std::vector<Item>& items, float lr) {
  entries_.clear();
  for (const Item& it : items) {
    const Param& p = *it.param;
    ops::LambEntry e{moments_entry(it, opt_.beta1, opt_.beta2, opt_.eps)};
    e.decay = p.weight_decay ? opt_.weight_decay : 0.0;
    e.adapt = p.weight_decay || opt_.always_adapt;
    e.ratio_slot = ratio_slot(p.name, e.w.device());
    entries_.push_back(std::move(e));
  }
  ops::lamb_step_(entries_, lr, ratios_, scratch_);
}

std::map<std::string, double> Lamb::last_trust_ratios() const {
  std::map<std::string, double> out;
  if (!ratios_.defined()) return out;
  const std::vector<float> r = ratios_.to(Device::cpu()).to_vector<float>();
  for (const auto& [name, slot] : ratio_slots_) out.emplace(name, r[slot]);
  return out;
}

}  // namespace ada::optim
