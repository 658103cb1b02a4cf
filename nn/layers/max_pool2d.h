// MaxPool2d on NCHW (no parameters).
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class MaxPool2d : public Module {
 public:
  MaxPool2d(int kernel, int stride, int padding = 0)
      : p_{kernel, kernel, stride, stride, padding, padding, true} {}
  Variable forward(const Variable& x) const { return fn::max_pool2d(x, p_); }
  std::string type_name() const override { return "MaxPool2d"; }

 private:
  ops::Pool2dParams p_;
};

}  // namespace ada::nn
