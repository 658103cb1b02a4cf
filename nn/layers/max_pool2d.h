// MaxPool2d on NCHW, or on channels-last NHWC through NCHW copies (no parameters; one in a
// ResNet, its stem).
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
    return fn::permute(fn::max_pool2d(fn::permute(x, {0, 3, 1, 2}), p_), {0, 2, 3, 1});
  }
  std::string type_name() const override { return "MaxPool2d"; }

 private:
  ops::Pool2dParams p_;
  bool channels_last_;
};

}  // namespace ada::nn
