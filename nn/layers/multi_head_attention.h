// Multi-head self-attention (BERT's): q, k, v projections, scaled dot-product attention over
// heads with an additive padding mask, attention-probability dropout, output projection.
// x [B, S, H] -> [B, S, H]. The padding mask enters as a key bias [B, S] made once per batch by
// key_bias() (a model's layers share it), or undefined for none; ops::attention_softmax adds it
// to every head's and query's scores in the softmax's own pass (BERT's additive mask, never
// materialised as [B*heads, S, S]). Heads run as one batched GEMM over B*heads. With `fused`,
// scores to context is one op (ops::fused_attention): the same dropout masks, nothing of size
// [B*heads, S, S] kept for backward. With `recompute_dropout` (composed only), the context
// product draws the dropped probabilities again in backward (fn::dropout_bmm) instead of keeping
// them: one [B*heads, S, S] tensor fewer kept per layer, one more dropout pass.
#pragma once

#include <memory>

#include "nn/layers/dropout.h"
#include "nn/layers/linear.h"
#include "nn/module.h"

namespace ada::nn {

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t hidden, int64_t heads, float dropout, Generator& init_gen,
                     float init_std = -1.f, bool fused = false, bool recompute_dropout = false);
  Variable forward(const Variable& x, const Tensor& key_bias, Generator& dropout_gen);
  // From attention_mask [B, S] (1 for real tokens, 0 for padding; i64/i32/f32, any device):
  // f32 [B, S] with -10000 (BERT's constant) on padded keys, 0 elsewhere, on `device`.
  // Undefined mask -> undefined result.
  static Tensor key_bias(const Tensor& attention_mask, Device device);
  int64_t heads() const { return heads_; }
  std::string type_name() const override { return "MultiHeadAttention"; }

 private:
  int64_t hidden_, heads_;
  bool fused_, recompute_dropout_;
  std::shared_ptr<Linear> query_, key_, value_, output_;
  std::shared_ptr<Dropout> dropout_;
};

}  // namespace ada::nn
