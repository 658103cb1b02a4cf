// AvgPool2d on NCHW (no parameters); padding counted in the divisor unless told otherwise.
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class AvgPool2d : public Module {
 public:
  AvgPool2d(int kernel, int stride, int padding = 0, bool count_include_pad = true)
      : p_{kernel, kernel, stride, stride, padding, padding, count_include_pad} {}
  Variable forward(const Variable& x) const { return fn::avg_pool2d(x, p_); }
  std::string type_name() const override { return "AvgPool2d"; }

 private:
  ops::Pool2dParams p_;
};

}  // namespace ada::nn
