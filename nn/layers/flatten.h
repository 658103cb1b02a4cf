// Flatten: [N, ...] -> [N, prod(...)] (a view; no parameters).
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class Flatten : public Module {
 public:
  Variable forward(const Variable& x) const { return fn::reshape(x, {x.shape()[0], -1}); }
  std::string type_name() const override { return "Flatten"; }
};

}  // namespace ada::nn
