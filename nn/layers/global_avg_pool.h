// GlobalAvgPool: [N, C, H, W] -> [N, C] (no parameters).
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class GlobalAvgPool : public Module {
 public:
  Variable forward(const Variable& x) const { return fn::global_avg_pool(x); }
  std::string type_name() const override { return "GlobalAvgPool"; }
};

}  // namespace ada::nn
