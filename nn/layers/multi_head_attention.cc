#include "nn/layers/multi_head_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ada::nn {

MultiHeadAttention::MultiHeadAttention(int64_t hidden, int64_t heads, float dropout, Generator& gen,
                                       float init_std, bool fused, bool recompute_dropout)
    : hidden_(hidden), heads_(heads), fused_(fused), recompute_dropout_(recompute_dropout) {
  ADA_CHECK_ARG(heads > 0 && hidden % heads == 0, ConfigError)
      << "attention: hidden size " << hidden << " is not divisible by " << heads << " heads";
  ADA_CHECK_ARG(!(fused && recompute_dropout), ConfigError)
      << "attention: fused attention keeps no dropped probabilities to recompute";
  query_ = register_module("query", std::make_shared<Linear>(hidden, hidden, gen));
  key_ = register_module("key", std::make_shared<Linear>(hidden, hidden, gen));
  value_ = register_module("value", std::make_shared<Linear>(hidden, hidden, gen));
  output_ = register_module("output", std::make_shared<Linear>(hidden, hidden, gen));
  if (init_std > 0)
    for (auto* l : {query_.get(), key_.get(), value_.get(), output_.get()}) {
      l->weight().mutable_value().copy_from(
          init::truncated_normal({hidden, hidden}, gen, init_std));
      ops::fill_(l->bias().mutable_value(), 0.f);
    }
  dropout_ = register_module("dropout", std::make_shared<Dropout>(dropout));
}

Tensor MultiHeadAttention::key_bias(const Tensor& mask, Device device) {
  if (!mask.defined()) return {};
  ADA_CHECK_ARG(mask.dim() == 2, ShapeError)
      << "attention: mask " << mask.str() << " should be [batch, seq]";
  // Made where it is used (on a GPU without reading the mask on the host).
  return ops::attention_key_bias(mask.to(device));
}

Variable MultiHeadAttention::forward(const Variable& x, const Tensor& key_bias, Generator& gen) {
  ADA_CHECK_ARG(x.value().dim() == 3 && x.shape()[2] == hidden_, ShapeError)
      << "attention: input must be [batch, seq, " << hidden_ << "], got " << x.value().str();
  const int64_t b = x.shape()[0], s = x.shape()[1], hd = hidden_ / heads_;
  // [B, S, H] -> [B*heads, S, hd]
  auto split = [&](const Variable& t) {
    return fn::reshape(fn::permute(fn::reshape(t, {b, s, heads_, hd}), {0, 2, 1, 3}),
                       {b * heads_, s, hd});
  };
  // One operand for the three projections (under 16-bit CUDA products one rounded copy kept for
  // their backward, not three).
  const Variable xin = fn::matmul_operand(x);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  if (fused_) {  // heads read in place from the projections' [B, S, H] rows; no split or merge
    const Variable q = query_->forward(xin), k = key_->forward(xin), v = value_->forward(xin);
    return output_->forward(
        fn::fused_attention(q, k, v, key_bias, heads_, scale, dropout_->p(), training(), gen));
  }
  Variable q = split(query_->forward(xin)), k = split(key_->forward(xin)),
           v = split(value_->forward(xin));
  // softmax(q k^T / sqrt(hd) + key bias) in one pass over the scores (the op checks the bias
  // against the batch's shape, a ShapeError naming both).
  const Variable probs = fn::attention_softmax(fn::bmm(q, k, false, true), key_bias, heads_, scale);
  Variable ctx = recompute_dropout_
                     ? fn::dropout_bmm(probs, v, dropout_->p(), dropout_->training(), gen)
                     : fn::bmm(dropout_->forward(probs, gen), v);  // [B*heads, S, hd]
  ctx =
      fn::reshape(fn::permute(fn::reshape(ctx, {b, heads_, s, hd}), {0, 2, 1, 3}), {b, s, hidden_});
  return output_->forward(ctx);
}

}  // namespace ada::nn
