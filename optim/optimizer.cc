// The optimizer base: the per-step loop over parameters, name-keyed state and its save/load.
#include "optim/optimizer.h"

#include <algorithm>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "base/fault.h"
#include "core/ops.h"

namespace ada::optim {

namespace {

std::string state_source(const NamedTensors& s) {
  return s.source.empty() ? std::string("optimizer state") : "optimizer state " + s.source;
}

}  // namespace

Optimizer::Optimizer(std::string name, double lr, std::vector<std::string> buffer_names)
    : name_(std::move(name)), lr_(lr), buffer_names_(std::move(buffer_names)) {}

void Optimizer::check(const Param& p) const {
  ADA_CHECK_ARG(p.var.defined(), InternalError)
      << name_ << " optimizer: parameter '" << p.name << "' has no variable";
  const Tensor& grad = p.var.grad();
  if (!grad.defined()) return;
  const Tensor& w = p.var.value();
  ADA_CHECK_ARG(grad.shape() == w.shape(), ShapeError)
      << name_ << " optimizer: parameter '" << p.name << "' is " << w.str()
      << " but its gradient is " << grad.str();
  auto it = slots_.find(p.name);
  if (it != slots_.end() && !it->second.buffers.empty() &&
      it->second.buffers[0].shape() != w.shape())
    ADA_THROW(ShapeError) << name_ << " optimizer: parameter '" << p.name << "' is now " << w.str()
                          << " but its state has shape " << shape_str(it->second.buffers[0].shape())
                          << "; a parameter must keep its shape (start a fresh optimizer)";
}

Optimizer::Slot* Optimizer::begin_update(const Param& p) {
  const Tensor& grad = p.var.grad();
  if (!grad.defined()) return nullptr;  // no gradient this step
  const Tensor& w = p.var.value();
  Slot& slot = slots_[p.name];
  if (slot.buffers.size() != buffer_names_.size()) {
    slot.buffers.clear();
    for (size_t i = 0; i < buffer_names_.size(); ++i)
      slot.buffers.push_back(Tensor::zeros(w.shape(), DType::f32, w.device()));
  }
  fault_point("optimizer");
  ++slot.step;
  return &slot;
}

ops::MomentsEntry Optimizer::moments_entry(const Item& it, double beta1, double beta2, double eps) {
  ops::MomentsEntry e;
  e.w = it.param->var.value();  // shares storage: updates the parameter in place
  e.g = *it.grad;
  e.m = it.slot->buffers[0];
  e.v = it.slot->buffers[1];
  e.args.beta1 = beta1;
  e.args.beta2 = beta2;
  e.args.eps = eps;
  e.args.step = it.slot->step;
  return e;
}

void Optimizer::update_all(const std::vector<Item>& items, float lr) {
  for (const Item& it : items) update(*it.param, *it.grad, *it.slot, lr);
}

void Optimizer::step(const std::vector<Param>& params, float lr) {
  // Check everything first, so that a bad parameter list changes nothing.
  std::unordered_set<std::string_view> seen;
  seen.reserve(params.size());
  for (const Param& p : params) {
    ADA_CHECK_ARG(seen.insert(p.name).second, InternalError)
        << name_ << " optimizer: parameter name '" << p.name
        << "' appears twice in one step; optimizer state is keyed by name, so names must be "
           "unique (the module tree should give every parameter its own dotted name)";
    check(p);
  }
  items_.clear();
  for (const Param& p : params)
    if (Slot* slot = begin_update(p)) items_.push_back({&p, &p.var.grad(), slot});
  update_all(items_, lr);
}

void Optimizer::step(const Param& param, float lr) {
  check(param);
  if (Slot* slot = begin_update(param)) update(param, param.var.grad(), *slot, lr);
}

NamedTensors Optimizer::state() const {
  NamedTensors out;
  out.metadata["optimizer"] = name_;
  for (const auto& [pname, slot] : slots_) {
    out.tensors.emplace_back(pname + ".step", Tensor::from_vector<int64_t>({slot.step}, {}));
    for (size_t i = 0; i < slot.buffers.size(); ++i)
      out.tensors.emplace_back(pname + "." + buffer_names_[i], slot.buffers[i]);
  }
  return out;
}

void Optimizer::load_state(const NamedTensors& state, const std::vector<Param>& params) {
  const std::string src = state_source(state);
  auto kind = state.metadata.find("optimizer");
  ADA_CHECK_ARG(kind != state.metadata.end(), IoError)
      << src << ": no 'optimizer' metadata; it was not written by Optimizer::state()";
  ADA_CHECK_ARG(kind->second == name_, IoError)
      << src << ": saved by the '" << kind->second << "' optimizer, cannot be loaded into '"
      << name_ << "'; resume with the same optimizer, or start without its state";

  std::unordered_map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : state.tensors) by_name.emplace(n, &t);
  std::unordered_set<std::string> used;

  std::map<std::string, Slot> slots;
  for (const Param& p : params) {
    auto st = by_name.find(p.name + ".step");
    if (st == by_name.end()) continue;  // never updated: starts fresh
    const Tensor& step_t = *st->second;
    ADA_CHECK_ARG(step_t.dtype() == DType::i64 && step_t.numel() == 1, IoError)
        << src << ": '" << st->first << "' must be one i64 value, got " << step_t.str();
    Slot slot;
    slot.step = step_t.to_vector<int64_t>()[0];
    ADA_CHECK_ARG(slot.step >= 1, IoError)
        << src << ": '" << st->first << "' is " << slot.step << "; update counts start at 1";
    used.insert(st->first);
    const Tensor& w = p.var.value();
    for (const std::string& b : buffer_names_) {
      const std::string key = p.name + "." + b;
      auto it = by_name.find(key);
      ADA_CHECK_ARG(it != by_name.end(), IoError)
          << src << ": has '" << st->first << "' but no '" << key << "'; the file is incomplete";
      const Tensor& t = *it->second;
      ADA_CHECK_ARG(t.dtype() == DType::f32 && t.shape() == w.shape(), IoError)
          << src << ": '" << key << "' is " << t.str() << " but parameter '" << p.name << "' is "
          << w.str() << "; the state belongs to a different model";
      Tensor buf = Tensor::empty(w.shape(), DType::f32, w.device());
      buf.copy_from(t);
      slot.buffers.push_back(std::move(buf));
      used.insert(key);
    }
    slots.emplace(p.name, std::move(slot));
  }
  if (used.size() != state.tensors.size()) {
    std::ostringstream os;
    int shown = 0;
    for (const auto& [n, t] : state.tensors) {
      if (used.count(n)) continue;
      if (shown < 5) os << (shown ? ", " : "") << "'" << n << "'";
      ++shown;
    }
    if (shown > 5) os << " and " << shown - 5 << " more";
    ADA_THROW(IoError) << src << ": entries that match no parameter of the model: " << os.str()
                       << "; the state belongs to a different model (or parameters were renamed)";
  }
  slots_ = std::move(slots);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerRegistry& registry,
                                          const Config& section) {
  const std::string name = section.get<std::string>("name");
  return registry.get(name, section.where("name"))(section);
}

}  // namespace ada::optim
