// Conv2d on NCHW, or NHWC with channels_last: weight [out, in, k, k] (+ optional bias [out], no
// weight decay).
// Default init as PyTorch (U(-1/sqrt(fan_in), ...)); ResNets re-initialise with He normal.
#pragma once

#include "core/functional.h"
#include "nn/init.h"
#include "nn/module.h"

namespace ada::nn {

struct Conv2dOptions {
  int stride = 1, padding = 0, dilation = 1;
  bool bias = false;
  bool channels_last = false;  // x and y [N, H, W, C]
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in, int64_t out, int kernel, Generator& gen, Conv2dOptions o = {})
      : params_{o.stride, o.stride, o.padding, o.padding, o.dilation, o.dilation, o.channels_last} {
    const float bound = 1.f / std::sqrt(static_cast<float>(in * kernel * kernel));
    weight_ = register_parameter("weight", init::uniform({out, in, kernel, kernel}, gen, bound));
    if (o.bias) bias_ = register_parameter("bias", init::uniform({out}, gen, bound), false);
  }
  Variable forward(const Variable& x) const {
    Variable y = fn::conv2d(x, weight_, params_);
    if (!bias_.defined()) return y;
    return params_.channels_last ? fn::add_bias(y, bias_) : fn::add_channel_bias(y, bias_);
  }
  Variable& weight() { return weight_; }
  std::string type_name() const override { return "Conv2d"; }

 private:
  ops::Conv2dParams params_;
  Variable weight_, bias_;
};

}  // namespace ada::nn
