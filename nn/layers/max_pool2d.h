// MaxPool2d on NCHW, or on channels-last NHWC (no parameters; one in a ResNet, its stem).
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class MaxPool2d : public Module {
 public:
  MaxPool2d(int kernel, int stride, int padding = 0, bool channels_last = false)
      : p_{kernel, kernel, stride, stride, padding, padding, true}, channels_last_(channels_last) {}
  Variable forward(const Variable& x) const {
    if (!channels_last_) return fn::max_pool2d(x, p_);
    return fn::max_pool2d_nhwc(x, p_);
  }
  std::string type_name() const override { return "MaxPool2d"; }

 private:
  ops::Pool2dParams p_;
  bool channels_last_;
};

}  // namespace ada::nn
