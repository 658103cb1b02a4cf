// Multi-head self-attention (BERT's): q, k, v projections, scaled dot-product attention over
// heads with an additive padding mask, attention-probability dropout, output projection.
// x [B, S, H] -> [B, S, H]; attention_mask [B, S] with 1 for real tokens and 0 for padding
// (i64/i32/f32), or undefined for none. Heads run as one batched GEMM over B*heads.
#pragma once

#include <memory>

#include "nn/layers/dropout.h"
#include "nn/layers/linear.h"
#include "nn/module.h"

namespace ada::nn {

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t hidden, int64_t heads, float dropout, Generator& init_gen,
                     float init_std = -1.f);
  Variable forward(const Variable& x, const Tensor& attention_mask, Generator& dropout_gen);
  std::string type_name() const override { return "MultiHeadAttention"; }

 private:
  int64_t hidden_, heads_;
  std::shared_ptr<Linear> query_, key_, value_, output_;
  std::shared_ptr<Dropout> dropout_;
};

}  // namespace ada::nn
