#include "nn/module.h"

#include <sstream>

#include "core/ops.h"

namespace ada::nn {

void Module::check_new_name(const std::string& name) const {
  ADA_CHECK_ARG(!name.empty() && name.find('.') == std::string::npos, InternalError)
      << type_name() << ": entry name '" << name << "' must be non-empty and contain no '.'";
  auto taken = [&](const std::string& n) {
    for (const auto& p : params_)
      if (p.name == n) return true;
    for (const auto& b : buffers_)
      if (b.first == n) return true;
    for (const auto& c : children_)
      if (c.first == n) return true;
    return false;
  };
  ADA_CHECK_ARG(!taken(name), InternalError)
      << type_name() << ": '" << name << "' registered twice";
}

Variable& Module::register_parameter(const std::string& name, Tensor init, bool weight_decay) {
  check_new_name(name);
  params_.push_back({name, Variable(std::move(init), true, name), weight_decay});
  return params_.back().var;
}

Variable Module::register_buffer(const std::string& name, Tensor init) {
  check_new_name(name);
  buffers_.emplace_back(name, Variable(std::move(init), false, name));
  return buffers_.back().second;
}

void Module::to(Device device) {
  for (auto& p : params_) {
    VarImpl* v = p.var.impl();
    v->value = v->value.to(device);
    if (v->grad.defined()) v->grad = v->grad.to(device);
  }
  for (auto& b : buffers_) b.second.mutable_value() = b.second.value().to(device);
  for (auto& c : children_) c.second->to(device);
}

void Module::collect(const std::string& prefix, std::vector<Param>* params,
                     std::vector<std::pair<std::string, Tensor>>* buffers) const {
  if (params)
    for (const auto& p : params_) {
      Param out{prefix + p.name, p.var, p.weight_decay};
      out.var.impl()->name = out.name;  // the Variable carries its full name for messages/hooks
      params->push_back(std::move(out));
    }
  if (buffers)
    for (const auto& b : buffers_) buffers->emplace_back(prefix + b.first, b.second.value());
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", params, buffers);
}

std::vector<Param> Module::parameters() const {
  std::vector<Param> out;
  collect("", &out, nullptr);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", nullptr, &out);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.var.value().numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

void Module::zero_grad() {
  for (auto& p : parameters()) p.var.zero_grad();
}

std::vector<std::pair<std::string, Tensor>> Module::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& p : parameters()) out.emplace_back(p.name, p.var.value());
  for (auto& b : buffers()) out.push_back(std::move(b));
  return out;
}

void Module::load_state(const NamedTensors& source, bool allow_extra) {
  copy_state(source, allow_extra, /*require_all=*/true, nullptr);
}

std::vector<std::string> Module::load_present(const NamedTensors& source,
                                              std::vector<std::string>* unused) {
  return copy_state(source, /*allow_extra=*/false, /*require_all=*/false, unused);
}

std::vector<std::string> Module::copy_state(const NamedTensors& source, bool allow_extra,
                                            bool require_all, std::vector<std::string>* unused) {
  const std::string from = source.source.empty() ? "state" : source.source;
  auto entries = state();
  std::vector<std::string> known, absent;
  for (auto& [name, t] : entries) {
    known.push_back(name);
    if (!source.contains(name)) {
      ADA_CHECK_ARG(!require_all, IoError)
          << from << ": no entry '" << name << "' for this " << type_name()
          << " (is it a checkpoint of another model or configuration?)";
      absent.push_back(name);
      continue;
    }
    const Tensor& src = source.at(name);
    ADA_CHECK_ARG(src.shape() == t.shape() && src.dtype() == t.dtype(), IoError)
        << from << ": entry '" << name << "' is " << dtype_name(src.dtype())
        << shape_str(src.shape()) << " but this " << type_name() << " expects "
        << dtype_name(t.dtype()) << shape_str(t.shape())
        << " (is it a checkpoint of another model or configuration? compare model.name, "
        << "model.preset and the model's other keys with the run that wrote it)";
    t.copy_from(src);  // shares storage with the module: updates it in place
  }
  if (!allow_extra)
    for (const auto& [name, t] : source.tensors) {
      bool used = false;
      for (const auto& k : known) used = used || k == name;
      if (!used && unused) {
        unused->push_back(name);
        continue;
      }
      ADA_CHECK_ARG(used, IoError)
          << from << ": entry '" << name << "' matches nothing in this " << type_name();
    }
  return absent;
}

void Module::describe_into(const std::string& prefix, std::string& out) const {
  int64_t own = 0;
  for (const auto& p : params_) own += p.var.value().numel();
  std::ostringstream os;
  os << (prefix.empty() ? std::string("(root)") : prefix.substr(0, prefix.size() - 1)) << "  "
     << type_name();
  if (own) os << "  params " << own;
  out += os.str() + "\n";
  for (const auto& [name, child] : children_) child->describe_into(prefix + name + ".", out);
}

std::string Module::describe() const {
  std::string out;
  describe_into("", out);
  out += "total parameters: " + std::to_string(parameter_count()) + "\n";
  return out;
}

}  // namespace ada::nn
