// GELU activation (no parameters).
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class GELU : public Module {
 public:
  Variable forward(const Variable& x) const { return fn::gelu(x); }
  std::string type_name() const override { return "GELU"; }
};

}  // namespace ada::nn
