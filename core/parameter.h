// Param: a trainable tensor as optimizers, reducers and checkpoints see it — a leaf Variable
// (value + grad) with its dotted name and flags. Lives in core so that nn (which makes them),
// optim (which updates them) and comm (which reduces their gradients) share it without
// depending on each other.
#pragma once

#include <string>

#include "core/autograd.h"

namespace ada {

struct Param {
  std::string name;          // dotted path from the root module, e.g. "layer1.0.conv2.weight"
  Variable var;              // value + grad
  bool weight_decay = true;  // false for biases and normalisation parameters
};

}  // namespace ada
