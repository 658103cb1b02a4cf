// BatchNorm2d over dim 1: gamma/beta parameters (no weight decay), running mean/var buffers.
// Training normalises with batch statistics and updates the running ones (momentum as PyTorch).
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, float momentum = 0.1f, float eps = 1e-5f)
      : momentum_(momentum), eps_(eps) {
    gamma_ = register_parameter("weight", Tensor::ones({channels}), false);
    beta_ = register_parameter("bias", Tensor::zeros({channels}), false);
    running_mean_ = register_buffer("running_mean", Tensor::zeros({channels}));
    running_var_ = register_buffer("running_var", Tensor::ones({channels}));
  }
  // The running statistics share storage with the registered buffers: updated in place.
  Variable forward(const Variable& x) {
    return fn::batch_norm(x, gamma_, beta_, running_mean_.mutable_value(),
                          running_var_.mutable_value(), training(), momentum_, eps_);
  }
  // relu(forward(x)) on the fused batch-norm + ReLU op.
  Variable forward_relu(const Variable& x) {
    return fn::batch_norm_relu(x, gamma_, beta_, running_mean_.mutable_value(),
                               running_var_.mutable_value(), training(), momentum_, eps_);
  }
  Variable& weight() { return gamma_; }
  std::string type_name() const override { return "BatchNorm2d"; }

 private:
  float momentum_, eps_;
  Variable gamma_, beta_;
  Variable running_mean_, running_var_;  // buffers (see Module::register_buffer)
};

}  // namespace ada::nn
