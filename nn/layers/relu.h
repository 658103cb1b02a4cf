// ReLU activation (no parameters).
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class ReLU : public Module {
 public:
  Variable forward(const Variable& x) const { return fn::relu(x); }
  std::string type_name() const override { return "ReLU"; }
};

}  // namespace ada::nn
