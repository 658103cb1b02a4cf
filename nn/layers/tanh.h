// Tanh activation (no parameters).
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class Tanh : public Module {
 public:
  Variable forward(const Variable& x) const { return fn::tanh(x); }
  std::string type_name() const override { return "Tanh"; }
};

}  // namespace ada::nn
