// Differentiable ops: each wraps one op of core/ops.h and records its hand-written backward.
// Models are written as forward code over these; residuals, weight tying and reuse are right by
// construction because gradients of a Variable used twice add up.
#pragma once

#include <vector>

#include "core/autograd.h"
#include "core/ops.h"

namespace ada::fn {

Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable scale(const Variable& a, float s);
Variable add_bias(const Variable& x, const Variable& b);          // bias over the last dim
Variable add_channel_bias(const Variable& x, const Variable& b);  // bias over dim 1
Variable reshape(const Variable& x, const Shape& shape);
Variable permute(const Variable& x, const std::vector<int>& perm);

Variable relu(const Variable& x);
Variable gelu(const Variable& x);
Variable tanh(const Variable& x);

Variable sum(const Variable& x, const std::vector<int>& axes, bool keepdim = false);
Variable mean(const Variable& x, const std::vector<int>& axes, bool keepdim = false);

Variable matmul(const Variable& a, const Variable& b, bool trans_a = false, bool trans_b = false);
Variable bmm(const Variable& a, const Variable& b, bool trans_a = false, bool trans_b = false);
// y = x @ w^T + b for x [..., in], w [out, in], b [out] (b may be undefined).
Variable linear(const Variable& x, const Variable& w, const Variable& b);
// linear(gelu(h), w, b) (b may be undefined) keeping only h for backward: the GELU output is
// computed again there (one more GELU pass; the same bits as the composition, which keeps both h
// and gelu(h)). BERT's feed-forward block under model.recompute: [gelu].
Variable gelu_linear(const Variable& h, const Variable& w, const Variable& b);

Variable conv2d(const Variable& x, const Variable& w, const ops::Conv2dParams& p);
Variable max_pool2d(const Variable& x, const ops::Pool2dParams& p);
Variable max_pool2d_nhwc(const Variable& x, const ops::Pool2dParams& p);  // [N, H, W, C]
Variable avg_pool2d(const Variable& x, const ops::Pool2dParams& p);
Variable global_avg_pool(const Variable& x);

// Training mode updates running stats in place (they are not differentiated).
Variable batch_norm(const Variable& x, const Variable& gamma, const Variable& beta,
                    Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                    float eps);
// relu(batch_norm(...)) and relu(add(a, b)) (same shapes) on the fused ops: the same values and
// gradients with one pass less each way (ResNet's blocks). With `residual`,
// relu(batch_norm(...) + residual) in one pass (a block's tail; in eval mode the two ops).
Variable batch_norm_relu(const Variable& x, const Variable& gamma, const Variable& beta,
                         Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                         float eps, const Variable& residual = Variable());
Variable add_relu(const Variable& a, const Variable& b);
Variable layer_norm(const Variable& x, const Variable& gamma, const Variable& beta, float eps);

Variable softmax(const Variable& x);
Variable log_softmax(const Variable& x);
// softmax(scale * scores + key_bias broadcast over heads and queries) (ops::attention_softmax);
// key_bias is a constant [B, Sk] (or undefined).
Variable attention_softmax(const Variable& scores, const Tensor& key_bias, int64_t heads,
                           float scale);
// x as the matrix products below it multiply it (ops::matmul_operand): under 16-bit CUDA matrix
// products a rounded copy whose gradient passes through unchanged (f32), so that several
// products of one input (a layer's q, k and v projections) keep one 16-bit copy between them;
// otherwise x itself.
Variable matmul_operand(const Variable& x);
// Per head, dropout(attention_softmax(q k^T, key_bias, heads, scale), p, training, gen) v in one
// op (ops::fused_attention): q [B, Sq, heads*D], k, v [B, Sk, heads*D] as projections give them,
// out like q. The same generator counters and masks as that composition on split heads; only
// out and the row log-normalisers are kept for backward.
Variable fused_attention(const Variable& q, const Variable& k, const Variable& v,
                         const Tensor& key_bias, int64_t heads, float scale, float p, bool training,
                         Generator& gen);
Variable cross_entropy(const Variable& logits, const Tensor& targets, float label_smoothing = 0.f,
                       int64_t ignore_index = -100);
// Identity when !training or p == 0.
Variable dropout(const Variable& x, float p, bool training, Generator& gen);
// bmm(dropout(a, p, training, gen), b) keeping only a and b for backward: the dropped operand is
// drawn again there from the same generator counters (one more dropout pass; the same masks and
// bits as the composition, which also keeps dropout's output). Composed attention's context
// product under model.recompute: [attention_dropout]: `a` (the probabilities) is kept by the
// softmax's backward anyway, so the [B*heads, S, S] the product kept is saved.
Variable dropout_bmm(const Variable& a, const Variable& b, float p, bool training, Generator& gen);
Variable embedding(const Variable& weight, const Tensor& ids);

}  // namespace ada::fn
