// The op surface: every numeric kernel Adatrain runs, as free functions on Tensors.
// Each op (core/ops.cc) goes by its inputs' device to the CPU backend (backend/cpu/cpu_ops.h,
// on the OpenMP pool of core/parallel.h) or the CUDA one (backend/cuda/cuda_ops.h), which
// checks its arguments (ShapeError/DTypeError/DeviceError naming the op and argument).
// Forward ops return new tensors; backward ops return input gradients. Layouts: images NCHW,
// conv weights [Cout, Cin, kh, kw], linear weights [out, in], sequences [..., features].
// Float tensors are f32, except activations under 16-bit activations (core/precision.h's
// activation_dtype(): bf16 or f16), which every op below except the optimizer and Adasum ops
// accepts in any of its float arguments: it computes in f32 and writes its activation outputs in
// its first argument's dtype (an op without a 16-bit kernel on its backend runs on f32 copies of
// its 16-bit inputs and rounds its outputs, the same values); parameter gradients (bias_grad,
// conv2d_backward_filter, embedding_backward, the norms' dgamma and dbeta), statistics, losses
// and log-probabilities stay f32. Ops that make activations from parameters (matmul, bmm,
// conv2d_forward, embedding_forward) take the result's dtype as an argument. Index tensors
// (labels, token ids) are i64 or i32.
#pragma once

#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace ada::ops {

// ---- creation / elementwise (same shapes unless stated) ------------------------------------
void fill_(Tensor& t, float value);            // in place
Tensor add(const Tensor& a, const Tensor& b);  // a + b
Tensor sub(const Tensor& a, const Tensor& b);  // a - b
Tensor mul(const Tensor& a, const Tensor& b);  // a * b
Tensor scale(const Tensor& a, float s);        // s * a
void add_(Tensor& y, const Tensor& x);         // y += x
// out = a + b, out = a - b into an existing tensor (no allocation; out may alias a or b).
void add_out(const Tensor& a, const Tensor& b, Tensor& out);
void sub_out(const Tensor& a, const Tensor& b, Tensor& out);
void scale_(Tensor& y, float s);                                   // y *= s
void axpby_(float alpha, const Tensor& x, float beta, Tensor& y);  // y = alpha*x + beta*y
// x [..., N] + b [N] (bias over the last dim) and its bias gradient (sum over all but last).
Tensor add_bias(const Tensor& x, const Tensor& b);
Tensor bias_grad(const Tensor& dy);
// x [N, C, ...] + b [C] (bias over channel dim 1) and its gradient.
Tensor add_channel_bias(const Tensor& x, const Tensor& b);
Tensor channel_bias_grad(const Tensor& dy);
// Permutation of dims, materialised contiguously: out.shape[i] = x.shape[perm[i]].
Tensor permute(const Tensor& x, const std::vector<int>& perm);

// ---- activations ----------------------------------------------------------------------------
Tensor relu(const Tensor& x);
Tensor relu_backward(const Tensor& dy, const Tensor& y);  // y = relu(x)
Tensor add_relu(const Tensor& a, const Tensor& b);        // relu(add(a, b)) in one pass
Tensor gelu(const Tensor& x);                             // exact: x * Phi(x) (erf form)
Tensor gelu_backward(const Tensor& dy, const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor tanh_backward(const Tensor& dy, const Tensor& y);  // y = tanh(x)

// ---- reductions -----------------------------------------------------------------------------
// Sum/mean over the given axes (negative counts from the end); keepdim keeps size-1 dims.
Tensor sum(const Tensor& x, const std::vector<int>& axes, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int>& axes, bool keepdim = false);
// Broadcast dy (shape of the reduction result with keepdim=false) back to x_shape.
Tensor sum_backward(const Tensor& dy, const Shape& x_shape, const std::vector<int>& axes);
double sum_all(const Tensor& x);               // double accumulation
double dot(const Tensor& a, const Tensor& b);  // double accumulation
double norm2_sq(const Tensor& a);              // sum of squares, double accumulation
bool all_finite(const Tensor& x);

// ---- conversions ----------------------------------------------------------------------------
// dst = src in dst's dtype, elementwise (same element count, same device): f32 -> f16 / bf16
// rounds to nearest even (past f16's range: +-Inf; NaN stays NaN), f16 / bf16 -> f32 is exact,
// f32 -> f32 copies. The wire format of the reducers' half-precision communication.
void cast_out(const Tensor& src, Tensor& dst);
// x in `dtype` (a new tensor through cast_out), or x itself when it already is.
Tensor to_dtype(const Tensor& x, DType dtype);
// How many f32 copies of 16-bit inputs ops have made so far (ops without a 16-bit kernel on
// their backend), process-wide: what a step with 16-bit activations still converts.
int64_t sixteen_bit_copies();

// ---- BLAS -----------------------------------------------------------------------------------
// c = alpha * op(a) @ op(b) + beta * c, op(x) = x or x^T; a, b, c 2-d.
void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a = false, bool trans_b = false,
          float alpha = 1.f, float beta = 0.f);
// matmul and bmm write c in `out` (f32, or the 16-bit activation dtype: rounded once from the
// f32 sums).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
              DType out = DType::f32);
// Batched over dim 0: a [B, M, K] (or [B, K, M]), b [B, K, N] (or [B, N, K]), c [B, M, N].
void gemm_batched(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a = false,
                  bool trans_b = false, float alpha = 1.f, float beta = 0.f);
Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
           DType out = DType::f32);
// A linear layer's product with its bias: y = x w^T + b, x [M, K], w [N, K], b [N] (f32), y in
// `out` as matmul's. The CPU adds the bias in its GEMM, strip by strip (f32; the bits of matmul
// then add_bias, which 16-bit operands still run as); the CUDA backend adds the
// bias in the GEMM's epilogue (cuBLASLt) where cuBLASLt offers one for the case, so its 16-bit
// y is rounded once from the f32 sums plus the bias.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, DType out = DType::f32);
// Its weight and bias gradients from dy [M, N] and x [M, K]: dw = dy^T x in `dw_type`, db = the
// column sums of dy (f32), as matmul and bias_grad give them; on a GPU, with an f32 dw, both from
// one cuBLASLt GEMM where one is offered; on the CPU (f32) db is summed as the GEMM packs dy.
void linear_weight_grad(const Tensor& dy, const Tensor& x, DType dw_type, Tensor& dw, Tensor& db);

// ---- convolution and pooling (NCHW) ----------------------------------------------------------
// Convolutions also run channels-last: with `channels_last` the input, output and their
// gradients are [N, H, W, C] (the weights stay [Cout, Cin, kh, kw]). The CUDA backend takes that
// layout natively (cuDNN's NHWC convolutions); the CPU's runs them on NCHW copies (the same bits).
struct Conv2dParams {
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  bool channels_last = false;
};
Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p);
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Conv2dParams& p,
                      DType out = DType::f32);
Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2dParams& p);
Tensor conv2d_backward_filter(const Tensor& dy, const Tensor& x, const Shape& w_shape,
                              const Conv2dParams& p);

struct Pool2dParams {
  int kernel_h = 2, kernel_w = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // avg-pool divisor, as PyTorch's default
};
Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p);
// Max-pool returns y and writes the flat argmax (index into each H*W plane) to `indices` (i32).
Tensor max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& indices);
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape);
// The same on channels-last [N, H, W, C] input (y and indices [N, P, Q, C], each index the flat
// argmax in its channel's H*W plane): max_pool2d_forward's values and indices permuted, and
// max_pool2d_backward's gradient permuted, bit for bit on the CPU (the GPU's backward adds
// overlapping windows' gradients with atomics, as for NCHW).
Tensor max_pool2d_nhwc_forward(const Tensor& x, const Pool2dParams& p, Tensor& indices);
Tensor max_pool2d_nhwc_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape);
Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dParams& p);
Tensor global_avg_pool_forward(const Tensor& x);  // [N,C,H,W] -> [N,C]
Tensor global_avg_pool_backward(const Tensor& dy, const Shape& x_shape);

// ---- normalisation ---------------------------------------------------------------------------
// Batch-norm over dim 1 of x [N, C, ...]. Training uses batch statistics, writes the mean and
// 1/sqrt(var+eps) for backward and updates running stats in place (PyTorch convention: running
// = (1-momentum)*running + momentum*stat, with the unbiased variance).
Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                        Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                        Tensor& save_mean, Tensor& save_invstd);
Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, float eps);
struct BatchNormGrads {
  Tensor dx, dgamma, dbeta;
};
// Training-mode backward (statistics depend on x).
BatchNormGrads batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd);
// relu(batch_norm_train(...)) with the ReLU applied in the normalising pass (the same bits),
// and the gradient of that pair from its output y: batch_norm_backward of relu_backward(dy, y)
// without the masked gradient as a tensor of its own. ResNet's batch-norms followed by a ReLU.
// With `residual` (x's shape and dtype): relu(batch_norm_train(...) + residual) in that one pass,
// a ResNet block's tail (the same bits as add_relu of the two with f32 activations); the
// residual's gradient is relu_backward(dy, y).
Tensor batch_norm_relu_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                             Tensor& save_mean, Tensor& save_invstd,
                             const Tensor& residual = Tensor());
BatchNormGrads batch_norm_relu_backward(const Tensor& dy, const Tensor& y, const Tensor& x,
                                        const Tensor& gamma, const Tensor& save_mean,
                                        const Tensor& save_invstd);
// cuDNN's batch norm, an A/B of the ops above on the GPU (ADA_CUDA_BN_CUDNN=1: fn::batch_norm
// and fn::batch_norm_relu then train on these wherever cudnn_batch_norm_fits). Training mode on a
// channels-last [M, C] view (described to cuDNN as NHWC), cudnnBatchNormalizationForwardTrainingEx
// / BackwardEx in persistent mode, with the ReLU and the residual add fused when cuDNN takes them
// for x's dtype (else its plain batch norm and our ReLU ops). Same statistics and conventions as
// batch_norm_train (running variance unbiased); cuDNN's own sums, so close to ours but not the
// same bits. The backward needs the forward's record: the saved statistics and cuDNN's reserve
// space. CPU builds and tensors: cudnn_batch_norm_on() is false and the two ops throw.
struct CudnnBatchNorm {
  Tensor y, save_mean, save_invstd;
  Tensor reserve;  // cuDNN's reserve space (i32 elements covering reserve_bytes)
  size_t reserve_bytes = 0;
  bool relu = false, residual = false;  // what the forward computed
  bool fused = false;                   // its ReLU (and residual add) ran inside cuDNN
};
bool cudnn_batch_norm_on();  // ADA_CUDA_BN_CUDNN=1 in a CUDA build, or as last set below
// Overrides ADA_CUDA_BN_CUDNN for this process (tests: both paths in one run); no effect in CPU
// builds.
void set_cudnn_batch_norm(bool on);
// CUDA ops on deterministic algorithms only (no atomics: the same bits every run, at some
// speed): cuDNN convolutions (for plans made from now on), embedding backward (ids sorted, each
// row's gradients added in order) and max-pool backward (each plane's outputs in order), the
// last two then the CPU's bits; overrides ADA_CUDA_DETERMINISTIC=1 for this process. No effect
// in CPU builds, whose ops are deterministic.
void set_deterministic_algorithms(bool on);
bool deterministic_algorithms();  // as last set, else ADA_CUDA_DETERMINISTIC; CPU builds: true
// x (and the residual, when defined) a CUDA [M, C] tensor cuDNN's NHWC batch norm can take.
bool cudnn_batch_norm_fits(const Tensor& x, float eps, const Tensor& residual = Tensor());
CudnnBatchNorm cudnn_batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                      Tensor& running_mean, Tensor& running_var, float momentum,
                                      float eps, bool relu, const Tensor& residual = Tensor());
// The gradient of the forward's y (relu and residual as it ran); dresidual defined when it had
// a residual.
struct CudnnBatchNormGrads {
  Tensor dx, dgamma, dbeta, dresidual;
};
CudnnBatchNormGrads cudnn_batch_norm_backward(const Tensor& dy, const Tensor& x,
                                              const Tensor& gamma, const Tensor& beta,
                                              const CudnnBatchNorm& forward, float eps);
// Eval-mode backward (statistics are constants).
BatchNormGrads batch_norm_eval_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                        const Tensor& running_mean, const Tensor& running_var,
                                        float eps);
// Layer-norm over the last dim of x [..., D] with gamma, beta [D].
Tensor layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& save_mean, Tensor& save_rstd);
struct LayerNormGrads {
  Tensor dx, dgamma, dbeta;
};
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_rstd);

// ---- softmax and losses (over the last dim) --------------------------------------------------
Tensor softmax(const Tensor& x);
Tensor softmax_backward(const Tensor& dy, const Tensor& y);  // y = softmax(x)
Tensor log_softmax(const Tensor& x);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y);  // y = log_softmax(x)
// Attention probabilities in one pass: y = softmax(scale * scores + key_bias) over the last dim,
// scores [B*heads, Sq, Sk], key_bias [B, Sk] added to every head's and query's row of example b
// (BERT's padding mask: -10000 on padded keys, 0 elsewhere; undefined: none). The same bits as
// softmax(add(scale(scores, scale), key_bias broadcast to [B*heads, Sq, Sk])), without making
// that [B*heads, Sq, Sk] mask or the two intermediate tensors.
Tensor attention_softmax(const Tensor& scores, const Tensor& key_bias, int64_t heads, float scale);
// Its gradient with respect to scores, from y: scale * softmax_backward(dy, y), in one pass.
Tensor attention_softmax_backward(const Tensor& dy, const Tensor& y, float scale);

// ---- matrix-product operands -------------------------------------------------------------------
// The operand a matrix product multiplies under the current precision: on CUDA with bf16/fp16
// matrix products (core/precision.h) x rounded to that type once (half the bytes; matmul, bmm
// and gemm take it as it is, with the same bits as rounding x inside); otherwise x itself (the
// CPU rounds while packing, so its operands stay f32). What autograd keeps for backward.
Tensor matmul_operand(const Tensor& x);

// ---- fused attention --------------------------------------------------------------------------
// Scaled dot-product attention without the [B*heads, Sq, Sk] scores, probabilities or dropout
// mask in memory (flash attention's algorithm: tiles of queries against tiles of keys, the
// backward recomputing the probabilities from the saved log-normalisers), on q, k, v as the
// projections give them, heads side by side in each row (no split or merge copies):
//   out[b, i, h*D:(h+1)*D] = dropout(softmax(scale * q_bh k_bh^T + key_bias[b])) v_bh
// for head bh = b*heads + h, with q_bh = q[b, :, h*D:(h+1)*D] (likewise k, v). q [B, Sq, heads*D],
// k and v [B, Sk, heads*D], out like q; key_bias [B, Sk] as attention_softmax takes it (or
// undefined), all f32 on one device. With dropout p > 0, probability element
// e = (bh*Sq + i)*Sk + j is kept as dropout_forward keeps element e of a [B*heads, Sq, Sk] tensor
// when its generator hands out counter `first` (word e%4 of Philox block first + e/4, kept when
// u >= p, scaled by 1/(1-p)): the masks of the composition (heads split to [B*heads, S, D],
// attention_softmax, dropout_forward, bmm, heads merged), which is this op's reference (the
// same masks; sums in another order). lse [B*heads, Sq] (f32): the log of each row's softmax
// normaliser, which the backward needs with out.
struct AttentionArgs {
  int64_t heads = 1;
  float scale = 1.f;
  float dropout = 0.f;           // 0: none
  uint64_t seed = 0, first = 0;  // the dropout stream: Generator::seed(), Generator::take()
};
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_bias,
                       const AttentionArgs& a, Tensor& lse);
struct AttentionGrads {
  Tensor dq, dk, dv;
};
// Gradients of fused_attention's out with respect to q, k and v, from dout and what the forward
// gave (out, lse) and took; the key bias is a constant.
AttentionGrads fused_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                        const Tensor& v, const Tensor& out, const Tensor& lse,
                                        const Tensor& key_bias, const AttentionArgs& a);
// Per row of x [N, C] (f32, C >= 1): the index of the first largest value, as i64 [N], on x's
// device — a left-to-right scan that moves on only to a strictly larger value, so NaNs are
// passed over, and a row that starts with NaN gives 0. Accuracy metrics read N indices rather
// than the whole logits.
Tensor argmax_rows(const Tensor& x);
// Mean cross-entropy of logits [N, C] against targets [N] (i64 or i32), PyTorch semantics:
// with smoothing e, loss_i = (1-e)*(-logp[t]) + e*mean_c(-logp[c]); rows whose target equals
// ignore_index are skipped and the mean is over the others (0 if none). Returns a 0-d tensor
// (shape {}) and saves log-probabilities for backward.
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                             int64_t ignore_index, Tensor& save_logp);
// The gradient with respect to the logits, in `out` (f32, or the logits' 16-bit type). dloss,
// the loss's gradient, is a one-element f32 tensor, read where save_logp is: on a GPU by the
// kernel, so that the host does not wait for the forward pass before it launches the backward
// (and a step can be captured as a graph). The float overload is for tests.
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& save_logp, const Tensor& targets,
                              float label_smoothing, int64_t ignore_index, DType out = DType::f32);
Tensor cross_entropy_backward(float dloss, const Tensor& save_logp, const Tensor& targets,
                              float label_smoothing, int64_t ignore_index, DType out = DType::f32);

// ---- dropout and embedding -------------------------------------------------------------------
// Inverted dropout: keeps each element with probability 1-p and scales it by 1/(1-p). The
// keep-mask (f32 of 0 and 1/(1-p)) is returned in `mask`; it depends only on the generator state
// (element i draws word i % 4 of Philox block i / 4, philox_uniform4_at; the same on both
// backends).
Tensor dropout_forward(const Tensor& x, float p, Generator& gen, Tensor& mask);
Tensor dropout_backward(const Tensor& dy, const Tensor& mask);
// x times the keep-mask of the stream that starts at counter `first` of generator seed `seed`
// (dropout_forward's mask for a generator handing out `first`, not kept): dropout's forward and,
// on the gradient, its backward, with nothing of the mask stored in between.
Tensor dropout_apply(const Tensor& x, float p, uint64_t seed, uint64_t first);
// weight [V, D]; ids any shape (i64 or i32) -> [ids..., D]. Out-of-range ids throw.
Tensor embedding_forward(const Tensor& weight, const Tensor& ids, DType out = DType::f32);
// Scatter-adds dy [ids..., D] into dweight [V, D] (which must be allocated).
void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dweight);
// Attention's additive key bias from a padding mask (f32, i64 or i32, any shape): f32 of its
// shape, 0 where the mask is non-zero (attended) and -10000 where it is 0; on the mask's device,
// so a GPU step need not read the mask on the host.
Tensor attention_key_bias(const Tensor& mask);

// ---- optimizer updates (one fused pass each; all operands f32 and of one shape) ----------------
// The Adam family's element-wise work, fused so that the bandwidth-bound update reads and writes
// each tensor once. With g' = g + l2*w (Adam's coupled L2 decay; 0 for AdamW and LAMB):
//   m = beta1*m + (1-beta1)*g';   v = beta2*v + (1-beta2)*g'*g';
//   d = sqrt(v) / sqrt(1 - beta2^t) + eps        (PyTorch's order: eps after the corrected sqrt)
// Constants are formed in double and applied in f32, in PyTorch's operation order.
struct AdamArgs {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t step = 1;  // t >= 1: how many updates this tensor has had, this one included
  double l2 = 0.0;   // coupled decay added to the gradient
};
// w = (1 - lr*decoupled_decay)*w - (lr / (1 - beta1^t)) * m / d    (Adam: 0; AdamW: lambda)
void adam_update_(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamArgs& a, double lr,
                  double decoupled_decay);
// u = (1 / (1 - beta1^t)) * m / d + decay*w; w is only read (LAMB's direction before its trust
// ratio). u must be allocated.
void adam_direction_(Tensor& u, const Tensor& w, const Tensor& g, Tensor& m, Tensor& v,
                     const AdamArgs& a, double decay);

// ---- multi-tensor optimizer steps (optim/: every parameter of a step in one call) ------------
// Each entry is one parameter: its value w, gradient g and state buffers, all f32 and of w's
// shape; every entry on one device. On a GPU each call is a fixed number of kernel launches
// whatever the number of entries, and none waits for the device (the per-tensor norms of LAMB
// and the global norm of clipping stay on it, reduced in a fixed order: the same bits on every
// run, and an entry's result does not depend on the other entries). On the CPU each runs the
// per-tensor ops above on the entries in turn, which is the definition of its arithmetic.
struct SgdEntry {
  Tensor w, g;
  Tensor v;                // momentum buffer (undefined when momentum is 0)
  float weight_decay = 0;  // lambda of this parameter (0: none)
  bool first = false;      // the parameter's first update: v = g + lambda*w exactly
};
// Momentum SGD as PyTorch's: v = momentum*v + g + lambda*w; w -= lr*v, or with Nesterov
// w -= lr*(g + lambda*w + momentum*v); without momentum w -= lr*(g + lambda*w).
void sgd_step_(const std::vector<SgdEntry>& entries, float lr, float momentum, bool nesterov);
// What the Adam family's entries share: the tensors and the arguments of this parameter's step.
struct MomentsEntry {
  Tensor w, g, m, v;
  AdamArgs args;  // per parameter: its step count and coupled l2
};
struct AdamEntry : MomentsEntry {
  double decoupled_decay = 0;  // AdamW's lambda for this parameter
};
// adam_update_ on every entry.
void adam_step_(const std::vector<AdamEntry>& entries, double lr);
struct LambEntry : MomentsEntry {
  double decay = 0;        // lambda in the direction u = adam + lambda*w
  bool adapt = false;      // scale by the trust ratio ||w|| / ||u|| (1 when either is 0)
  int64_t ratio_slot = 0;  // where the entry's trust ratio goes in `ratios`
};
// LAMB: u = adam_direction_(...), then w -= lr * ratio * u with ||w|| taken before the update
// and both norms in double. ratios (f32, 1-d, on the entries' device) gets each entry's ratio at
// its ratio_slot. `scratch`: a CPU work buffer grown on demand (u of the largest entry); unused on
// a GPU, which recomputes u from the updated moments instead of storing it.
void lamb_step_(const std::vector<LambEntry>& entries, float lr, Tensor& ratios, Tensor& scratch);
// Whether every element of every tensor is finite: one launch and one wait on a GPU (where
// all_finite per tensor waits once per tensor). Undefined tensors are skipped.
bool all_finite(const std::vector<Tensor>& tensors);
// scale_(t, s) on every defined tensor of the list (one launch on a GPU).
void scale_(const std::vector<Tensor>& tensors, float s);
// Global-norm clipping (PyTorch's clip_grad_norm_): with n the L2 norm (double) of all of `grads`
// together, each is scaled by max_norm / (n + 1e-6) when n is finite and above max_norm.
void clip_grad_norm_(const std::vector<Tensor>& grads, double max_norm);

// ---- Adasum's arithmetic (comm/adasum_reducer.h), over segments of 1-d f32 tensors -------------
// Segment s covers elements [s.off, s.off + s.n) of every tensor passed with it, and writes or
// reads slot s.slot of the per-segment arrays. One call covers many tensors (one launch on a GPU).
struct Segment {
  int64_t off = 0, n = 0;
  int64_t slot = 0;
};
// sums[3*slot + 0..2] += (a.b, |a|^2, |b|^2) over the segment, accumulated in double in an order
// fixed by the segment's length (the same bits on every run). a and b: 1-d, same numel.
void segment_partial_sums(const Tensor& a, const Tensor& b, const std::vector<Segment>& segs,
                          double* sums);
// out = coef[2*slot] * a + coef[2*slot+1] * b over the segment, in double, rounded to f32; b is
// not read where its coefficient is 0. out may alias a or b; 1-d, same numel as a and b.
void segment_combine(const Tensor& a, const Tensor& b, Tensor& out,
                     const std::vector<Segment>& segs, const double* coef);

}  // namespace ada::ops
