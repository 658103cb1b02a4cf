// Multi-head self-attention (BERT's): q, k, v projections, scaled dot-product attention over
// heads with an additive padding mask, attention-probability dropout, output projection.
// x [B, S, H] -> [B, S, H]. The padding mask enters as an additive mask [B*heads, S, S] made once
// per batch by additive_mask() (a model's layers share it; on a GPU it is one copy per step,
// not one per layer), or undefined for none. Heads run as one batched GEMM over B*heads.
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
  Variable forward(const Variable& x, const Tensor& additive, Generator& dropout_gen);
  // From attention_mask [B, S] (1 for real tokens, 0 for padding; i64/i32/f32, any device):
  // -10000 (BERT's constant) on padded keys, 0 elsewhere, broadcast over heads and queries,
  // on `device`. Undefined mask -> undefined result.
  static Tensor additive_mask(const Tensor& attention_mask, int64_t heads, Device device);
  int64_t heads() const { return heads_; }
  std::string type_name() const override { return "MultiHeadAttention"; }

 private:
  int64_t hidden_, heads_;
  std::shared_ptr<Linear> query_, key_, value_, output_;
  std::shared_ptr<Dropout> dropout_;
};

}  // namespace ada::nn
