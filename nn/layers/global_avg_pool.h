// GlobalAvgPool: [N, C, H, W], or channels-last [N, H, W, C], -> [N, C] (no parameters).
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class GlobalAvgPool : public Module {
 public:
  explicit GlobalAvgPool(bool channels_last = false) : channels_last_(channels_last) {}
  Variable forward(const Variable& x) const {
    return channels_last_ ? fn::mean(x, {1, 2}) : fn::global_avg_pool(x);
  }
  std::string type_name() const override { return "GlobalAvgPool"; }

 private:
  bool channels_last_;
};

}  // namespace ada::nn
