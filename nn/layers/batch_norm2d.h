// BatchNorm2d over dim 1 of [N, C, H, W], or over the last dim of channels-last [N, H, W, C]
// (batch norm of the [N*H*W, C] view: the same statistics): gamma/beta parameters (no weight
// decay), running mean/var buffers. Training normalises with batch statistics and updates the
// running ones (momentum as PyTorch).
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, bool channels_last = false, float momentum = 0.1f,
                       float eps = 1e-5f)
      : channels_last_(channels_last), momentum_(momentum), eps_(eps) {
    gamma_ = register_parameter("weight", Tensor::ones({channels}), false);
    beta_ = register_parameter("bias", Tensor::zeros({channels}), false);
    running_mean_ = register_buffer("running_mean", Tensor::zeros({channels}));
    running_var_ = register_buffer("running_var", Tensor::ones({channels}));
  }
  // The running statistics share storage with the registered buffers: updated in place.
  Variable forward(const Variable& x) {
    return in_layout(x, [&](const Variable& v) {
      return fn::batch_norm(v, gamma_, beta_, running_mean_.mutable_value(),
                            running_var_.mutable_value(), training(), momentum_, eps_);
    });
  }
  // relu(forward(x)) on the fused batch-norm + ReLU op.
  Variable forward_relu(const Variable& x) {
    return in_layout(x, [&](const Variable& v) {
      return fn::batch_norm_relu(v, gamma_, beta_, running_mean_.mutable_value(),
                                 running_var_.mutable_value(), training(), momentum_, eps_);
    });
  }
  // relu(forward(x) + residual) on the same fused op (a residual block's tail).
  Variable forward_add_relu(const Variable& x, const Variable& residual) {
    const Variable r =
        channels_last_ ? fn::reshape(residual, {-1, residual.shape().back()}) : residual;
    return in_layout(x, [&](const Variable& v) {
      return fn::batch_norm_relu(v, gamma_, beta_, running_mean_.mutable_value(),
                                 running_var_.mutable_value(), training(), momentum_, eps_, r);
    });
  }
  Variable& weight() { return gamma_; }
  std::string type_name() const override { return "BatchNorm2d"; }

 private:
  // f on x as batch norm sees it: x itself, or channels-last x as [N*H*W, C] (a view).
  template <class F>
  Variable in_layout(const Variable& x, F f) {
    if (!channels_last_) return f(x);
    return fn::reshape(f(fn::reshape(x, {-1, x.shape().back()})), x.shape());
  }
  bool channels_last_;
  float momentum_, eps_;
  Variable gamma_, beta_;
  Variable running_mean_, running_var_;  // buffers (see Module::register_buffer)
};

}  // namespace ada::nn
