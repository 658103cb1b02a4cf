// The CPU backend's half of the op surface: the same signatures as core/ops.h, in ada::cpu.
// core/ops.cc sends a call here when none of its tensors lives on a CUDA device (the CUDA
// backend's half is core/backend/cuda/cuda_ops.h); each function checks that every tensor is
// on the CPU and f32 (an index dtype for ids and targets; cast_out's 16-bit side) and runs
// there, on the OpenMP pool of core/parallel.h.
// Semantics, layouts and argument checks are those of core/ops.h. The ops that need no kernel
// of their own (add_, dropout_backward, the output shapes) live in core/ops.cc alone.
#pragma once

#include <vector>

#include "core/ops.h"

namespace ada::cpu {
using ops::AdamArgs;
using ops::BatchNormGrads;
using ops::Conv2dParams;
using ops::LayerNormGrads;
using ops::Pool2dParams;
using ops::Segment;

// ---- creation / elementwise (same shapes unless stated) ------------------------------------
void fill_(Tensor& t, float value);
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& a, float s);
void add_out(const Tensor& a, const Tensor& b, Tensor& out);
void sub_out(const Tensor& a, const Tensor& b, Tensor& out);
void scale_(Tensor& y, float s);
void axpby_(float alpha, const Tensor& x, float beta, Tensor& y);
Tensor add_bias(const Tensor& x, const Tensor& b);
Tensor bias_grad(const Tensor& dy);
Tensor add_channel_bias(const Tensor& x, const Tensor& b);
Tensor channel_bias_grad(const Tensor& dy);
Tensor permute(const Tensor& x, const std::vector<int>& perm);
// ---- activations ----------------------------------------------------------------------------
Tensor relu(const Tensor& x);
Tensor relu_backward(const Tensor& dy, const Tensor& y);
Tensor add_relu(const Tensor& a, const Tensor& b);
Tensor gelu(const Tensor& x);
Tensor gelu_backward(const Tensor& dy, const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor tanh_backward(const Tensor& dy, const Tensor& y);
// ---- reductions -----------------------------------------------------------------------------
Tensor sum(const Tensor& x, const std::vector<int>& axes, bool keepdim);
Tensor mean(const Tensor& x, const std::vector<int>& axes, bool keepdim);
Tensor sum_backward(const Tensor& dy, const Shape& x_shape, const std::vector<int>& axes);
double sum_all(const Tensor& x);
double dot(const Tensor& a, const Tensor& b);
double norm2_sq(const Tensor& a);
bool all_finite(const Tensor& x);
// ---- conversions ----------------------------------------------------------------------------
void cast_out(const Tensor& src, Tensor& dst);
// ---- BLAS -----------------------------------------------------------------------------------
void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b, float alpha,
          float beta);
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b);
// x w^T + b with the bias added in the GEMM (sgemm's bias): the bits of matmul then add_bias.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);
// dw = dy^T x and db = the column sums of dy from one GEMM (sgemm's row_sums): the bits of matmul
// and bias_grad.
void linear_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db);
void gemm_batched(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b,
                  float alpha, float beta);
Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b);
// ---- convolution and pooling (NCHW) ----------------------------------------------------------
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Conv2dParams& p);
Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2dParams& p);
Tensor conv2d_backward_filter(const Tensor& dy, const Tensor& x, const Shape& w_shape,
                              const Conv2dParams& p);
Tensor max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& indices);
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape);
Tensor max_pool2d_nhwc_forward(const Tensor& x, const Pool2dParams& p, Tensor& indices);
Tensor max_pool2d_nhwc_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape);
Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dParams& p);
Tensor global_avg_pool_forward(const Tensor& x);
Tensor global_avg_pool_backward(const Tensor& dy, const Shape& x_shape);
// ---- normalisation ---------------------------------------------------------------------------
Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                        Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                        Tensor& save_mean, Tensor& save_invstd);
Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, float eps);
BatchNormGrads batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd);
Tensor batch_norm_relu_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                             Tensor& save_mean, Tensor& save_invstd,
                             const Tensor& residual = Tensor());
BatchNormGrads batch_norm_relu_backward(const Tensor& dy, const Tensor& y, const Tensor& x,
                                        const Tensor& gamma, const Tensor& save_mean,
                                        const Tensor& save_invstd);
BatchNormGrads batch_norm_eval_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                        const Tensor& running_mean, const Tensor& running_var,
                                        float eps);
Tensor layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& save_mean, Tensor& save_rstd);
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_rstd);
// ---- softmax and losses (over the last dim) --------------------------------------------------
Tensor softmax(const Tensor& x);
Tensor softmax_backward(const Tensor& dy, const Tensor& y);
Tensor log_softmax(const Tensor& x);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y);
Tensor attention_softmax(const Tensor& scores, const Tensor& key_bias, int64_t heads, float scale);
Tensor attention_softmax_backward(const Tensor& dy, const Tensor& y, float scale);
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_bias,
                       const ops::AttentionArgs& a, Tensor& lse);
ops::AttentionGrads fused_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out, const Tensor& lse,
                                             const Tensor& key_bias, const ops::AttentionArgs& a);
Tensor argmax_rows(const Tensor& x);
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                             int64_t ignore_index, Tensor& save_logp);
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& save_logp, const Tensor& targets,
                              float label_smoothing, int64_t ignore_index);
// ---- dropout and embedding -------------------------------------------------------------------
Tensor dropout_forward(const Tensor& x, float p, Generator& gen, Tensor& mask);
Tensor dropout_apply(const Tensor& x, float p, uint64_t seed, uint64_t first);
Tensor embedding_forward(const Tensor& weight, const Tensor& ids);
void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dweight);
Tensor attention_key_bias(const Tensor& mask);
// ---- optimizer updates (one fused pass each; all operands f32 and of one shape) ----------------
void adam_update_(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamArgs& a, double lr,
                  double decoupled_decay);
void adam_direction_(Tensor& u, const Tensor& w, const Tensor& g, Tensor& m, Tensor& v,
                     const AdamArgs& a, double decay);
// ---- Adasum's arithmetic (comm/adasum_reducer.h), over segments of 1-d f32 tensors -------------
void segment_partial_sums(const Tensor& a, const Tensor& b, const std::vector<Segment>& segs,
                          double* sums);
void segment_combine(const Tensor& a, const Tensor& b, Tensor& out,
                     const std::vector<Segment>& segs, const double* coef);

}  // namespace ada::cpu
