// Embedding: a [num, dim] table gathered by integer ids (i64/i32 of any shape).
#pragma once

#include "core/functional.h"
#include "nn/init.h"
#include "nn/module.h"

namespace ada::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Tensor init) {
    ADA_CHECK_ARG(init.shape() == Shape({num, dim}), ShapeError)
        << "Embedding: initial table " << init.str() << " should be [" << num << "," << dim << "]";
    weight_ = register_parameter("weight", std::move(init));
  }
  Variable forward(const Tensor& ids) const { return fn::embedding(weight_, ids); }
  Variable& weight() { return weight_; }
  std::string type_name() const override { return "Embedding"; }

 private:
  Variable weight_;
};

}  // namespace ada::nn
