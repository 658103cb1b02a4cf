// Conv2d on NCHW: weight [out, in, k, k] (+ optional bias [out], no weight decay).
// Default init as PyTorch (U(-1/sqrt(fan_in), ...)); ResNets re-initialise with He normal.
#pragma once

#include "core/functional.h"
#include "nn/init.h"
#include "nn/module.h"

namespace ada::nn {

struct Conv2dOptions {
  int stride = 1, padding = 0, dilation = 1;
  bool bias = false;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in, int64_t out, int kernel, Generator& gen, Conv2dOptions o = {})
      : params_{o.stride, o.stride, o.padding, o.padding, o.dilation, o.dilation} {
    const float bound = 1.f / std::sqrt(static_cast<float>(in * kernel * kernel));
    weight_ = register_parameter("weight", init::uniform({out, in, kernel, kernel}, gen, bound));
    if (o.bias) bias_ = register_parameter("bias", init::uniform({out}, gen, bound), false);
  }
  Variable forward(const Variable& x) const {
    Variable y = fn::conv2d(x, weight_, params_);
    return bias_.defined() ? fn::add_channel_bias(y, bias_) : y;
  }
  Variable& weight() { return weight_; }
  std::string type_name() const override { return "Conv2d"; }

 private:
  ops::Conv2dParams params_;
  Variable weight_, bias_;
};

}  // namespace ada::nn
