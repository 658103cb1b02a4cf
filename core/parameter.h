// Param: a trainable tensor as optimizers, reducers and checkpoints see it — a leaf Variable
// (value + grad) with its dotted name and flags. Lives in core so that nn (which makes them),
// optim (which updates them) and comm (which reduces their gradients) share it without
// depending on each other.
#pragma once

#include <string>
#include <vector>

#include "core/autograd.h"

namespace ada {

struct Param {
  std::string name;          // dotted path from the root module, e.g. "layer1.0.conv2.weight"
  Variable var;              // value + grad
  bool weight_decay = true;  // false for biases and normalisation parameters
};

// The Variables of `params`, in order.
inline std::vector<Variable> variables_of(const std::vector<Param>& params) {
  std::vector<Variable> v;
  v.reserve(params.size());
  for (const auto& p : params) v.push_back(p.var);
  return v;
}

}  // namespace ada
