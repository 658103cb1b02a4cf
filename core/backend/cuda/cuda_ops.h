// The CUDA backend's half of the op surface: the same signatures as core/ops.h, in ada::cuda.
// core/ops.h's functions send a call here when its tensors live on a CUDA device (see
// ADA_DISPATCH in core/ops.cc); each function checks that every tensor is f32 (or
// an index dtype) on the same CUDA device and enqueues its work on that device's compute stream
// (cuda::stream) without synchronising the host. Semantics, layouts and argument checks are
// those of core/ops.h, whose CPU backend is the reference the `cuda` tests compare against.
#pragma once

#include <vector>

#include "core/ops.h"

namespace ada::cuda {
using ops::AdamArgs;
using ops::BatchNormGrads;
using ops::Conv2dParams;
using ops::CudnnBatchNorm;
using ops::CudnnBatchNormGrads;
using ops::LayerNormGrads;
using ops::Pool2dParams;

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
void cast_out(const Tensor& src, Tensor& dst);
// y[0, n) = x rounded to f16 or bf16 (nearest even, as cast_out) on device dev's stream: the
// 16-bit operands of train.precision's matrix products.
void round_f32(const float* x, void* y, int64_t n, DType to, int dev);
// ---- BLAS -----------------------------------------------------------------------------------
void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b, float alpha,
          float beta);
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out);
void gemm_batched(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b,
                  float alpha, float beta);
Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out);
// ops::linear and ops::linear_weight_grad on cuBLASLt epilogues (blas_lt.cc): an undefined
// tensor / false, with nothing launched, where cuBLASLt offers no fused algorithm for the case
// (ops:: then composes the unfused kernels) or ADA_CUDA_LT_EPILOGUES=0 turned them off.
Tensor linear_bias_lt(const Tensor& x, const Tensor& w, const Tensor& b, DType out);
bool linear_weight_grad_lt(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db);
// How many of those calls ran fused and how many fell back, over the process.
struct LtEpilogueCounts {
  int64_t fused = 0, unfused = 0;
};
LtEpilogueCounts lt_epilogue_counts();
// ---- convolution and pooling (NCHW) ----------------------------------------------------------
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Conv2dParams& p);
Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2dParams& p);
// dy and x f32, or both of train.precision's 16-bit type: then the gradient is formed in that
// type and widened to f32, or undefined when cuDNN offers no algorithm for it (the caller then
// takes f32 copies).
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
Tensor batch_norm_relu_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                             Tensor& save_mean, Tensor& save_invstd,
                             const Tensor& residual = Tensor());
BatchNormGrads batch_norm_relu_backward(const Tensor& dy, const Tensor& y, const Tensor& x,
                                        const Tensor& gamma, const Tensor& save_mean,
                                        const Tensor& save_invstd);
// cuDNN's NHWC batch norm (cudnn_norm.cc): core/ops.h's cudnn_batch_norm_*.
bool cudnn_batch_norm_on();
void set_cudnn_batch_norm(bool on);
void set_deterministic_algorithms(bool on);  // ops::set_deterministic_algorithms
bool deterministic_algorithms();
bool cudnn_batch_norm_fits(const Tensor& x, float eps, const Tensor& residual);
CudnnBatchNorm cudnn_batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                      Tensor& running_mean, Tensor& running_var, float momentum,
                                      float eps, bool relu, const Tensor& residual);
CudnnBatchNormGrads cudnn_batch_norm_backward(const Tensor& dy, const Tensor& x,
                                              const Tensor& gamma, const Tensor& beta,
                                              const CudnnBatchNorm& forward, float eps);
Tensor add_relu(const Tensor& a, const Tensor& b);
BatchNormGrads batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd);
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
Tensor matmul_operand(const Tensor& x);
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_bias,
                       const ops::AttentionArgs& a, Tensor& lse);
ops::AttentionGrads fused_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out, const Tensor& lse,
                                             const Tensor& key_bias, const ops::AttentionArgs& a);
Tensor argmax_rows(const Tensor& x);
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                             int64_t ignore_index, Tensor& save_logp);
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& save_logp, const Tensor& targets,
                              float label_smoothing, int64_t ignore_index, DType out);
// ---- dropout and embedding -------------------------------------------------------------------
Tensor dropout_forward(const Tensor& x, float p, Generator& gen, Tensor& mask);
Tensor dropout_apply(const Tensor& x, float p, uint64_t seed, uint64_t first);
Tensor embedding_forward(const Tensor& weight, const Tensor& ids, DType out);
void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dweight);
Tensor attention_key_bias(const Tensor& mask);
// ---- optimizer updates (one fused pass each; all operands f32 and of one shape) ----------------
void adam_update_(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamArgs& a, double lr,
                  double decoupled_decay);
void adam_direction_(Tensor& u, const Tensor& w, const Tensor& g, Tensor& m, Tensor& v,
                     const AdamArgs& a, double decay);
// ---- multi-tensor optimizer steps (optim.cu; a fixed number of launches per call, no sync) ----
// An SGD step captured into a CUDA graph replays with the lr (and 1 - lr x weight decay) it was
// captured with: capture it only at a constant LR (the trainer keeps its optimizer eager; Adam and
// LAMB refuse a capture, their bias corrections changing every step).
void sgd_step_(const std::vector<ops::SgdEntry>& entries, float lr, float momentum, bool nesterov);
void adam_step_(const std::vector<ops::AdamEntry>& entries, double lr);
void lamb_step_(const std::vector<ops::LambEntry>& entries, float lr, Tensor& ratios);
void clip_grad_norm_(const std::vector<Tensor>& grads, double max_norm);
bool all_finite(const std::vector<Tensor>& tensors);  // elementwise.cu
void scale_(const std::vector<Tensor>& tensors, float s);
// ---- Adasum's arithmetic (segment_ops.cu) -----------------------------------------------------
void segment_partial_sums(const Tensor& a, const Tensor& b, const std::vector<ops::Segment>& segs,
                          double* sums);
void segment_combine(const Tensor& a, const Tensor& b, Tensor& out,
                     const std::vector<ops::Segment>& segs, const double* coef);

}  // namespace ada::cuda
