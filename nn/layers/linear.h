// Linear: y = x W^T + b over the last dim; W [out, in], b [out] (optional, no weight decay).
// Default init as PyTorch: U(-1/sqrt(in), 1/sqrt(in)) for both.
#pragma once

#include "core/functional.h"
#include "nn/init.h"
#include "nn/module.h"

namespace ada::nn {

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, Generator& gen, bool bias = true) {
    const float bound = 1.f / std::sqrt(static_cast<float>(in));
    weight_ = register_parameter("weight", init::uniform({out, in}, gen, bound));
    if (bias) bias_ = register_parameter("bias", init::uniform({out}, gen, bound), false);
  }
  Variable forward(const Variable& x) const { return fn::linear(x, weight_, bias_); }
  Variable& weight() { return weight_; }
  Variable& bias() { return bias_; }
  std::string type_name() const override { return "Linear"; }

 private:
  Variable weight_, bias_;
};

}  // namespace ada::nn
