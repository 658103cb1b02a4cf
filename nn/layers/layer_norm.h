// LayerNorm over the last dim: gamma (ones) and beta (zeros), both without weight decay.
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, float eps = 1e-5f) : eps_(eps) {
    gamma_ = register_parameter("weight", Tensor::ones({dim}), false);
    beta_ = register_parameter("bias", Tensor::zeros({dim}), false);
  }
  Variable forward(const Variable& x) const { return fn::layer_norm(x, gamma_, beta_, eps_); }
  std::string type_name() const override { return "LayerNorm"; }

 private:
  float eps_;
  Variable gamma_, beta_;
};

}  // namespace ada::nn
