#include "core/functional.h"

#include <algorithm>

#include <atomic>
#include <memory>

#include "core/backend/cuda_runtime.h"
#include "core/backend/op_shapes.h"
#include "core/precision.h"

namespace ada {
namespace {
std::atomic<DType> g_activation_dtype{DType::f32};
}
void set_activation_dtype(DType d) {
  ADA_CHECK_ARG(d == DType::f32 || d == DType::bf16 || d == DType::f16, DTypeError)
      << "activations are stored as f32, bf16 or f16, not " << dtype_name(d);
  g_activation_dtype.store(d, std::memory_order_relaxed);
}
DType activation_dtype() {
  return g_activation_dtype.load(std::memory_order_relaxed);
}
}  // namespace ada

namespace ada::fn {
namespace {
// The dtype of the gradient of a value: f32 for f32 values (parameters, inputs, and activations
// when they are f32), the activation dtype for 16-bit ones.
DType grad_dtype(const Tensor& v) {
  return v.dtype() == DType::f32 ? DType::f32 : activation_dtype();
}
using G = std::vector<Tensor>;
// Inverse permutation: inv[perm[i]] = i.
std::vector<int> inverse_perm(const std::vector<int>& perm) {
  std::vector<int> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int>(i);
  return inv;
}
// The first of n counters drawn from `gen` for work on `on`'s device (a CUDA graph being captured
// accepts draws only from its own generator: cuda::note_draw).
uint64_t draw(Generator& gen, uint64_t n, const Tensor& on) {
  if (!on.device().is_cpu()) cuda::note_draw(on.device().index, gen);
  return gen.take(n);
}
}  // namespace

Variable add(const Variable& a, const Variable& b) {
  return make_result(ops::add(a.value(), b.value()), "add", {a, b}, [](const Tensor& g) {
    return G{g, g};
  });
}

Variable sub(const Variable& a, const Variable& b) {
  return make_result(ops::sub(a.value(), b.value()), "sub", {a, b}, [](const Tensor& g) {
    return G{g, ops::scale(g, -1.f)};
  });
}

Variable mul(const Variable& a, const Variable& b) {
  Tensor av = a.value(), bv = b.value();
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return make_result(ops::mul(av, bv), "mul", {a, b}, [av, bv, ga, gb](const Tensor& g) {
    return G{ga ? ops::mul(g, bv) : Tensor(), gb ? ops::mul(g, av) : Tensor()};
  });
}

Variable scale(const Variable& a, float s) {
  return make_result(ops::scale(a.value(), s), "scale", {a},
                     [s](const Tensor& g) { return G{ops::scale(g, s)}; });
}

Variable add_bias(const Variable& x, const Variable& b) {
  return make_result(ops::add_bias(x.value(), b.value()), "add_bias", {x, b}, [](const Tensor& g) {
    return G{g, ops::bias_grad(g)};
  });
}

Variable add_channel_bias(const Variable& x, const Variable& b) {
  return make_result(ops::add_channel_bias(x.value(), b.value()), "add_channel_bias", {x, b},
                     [](const Tensor& g) {
                       return G{g, ops::channel_bias_grad(g)};
                     });
}

Variable reshape(const Variable& x, const Shape& shape) {
  Shape in = x.shape();
  return make_result(x.value().reshape(shape), "reshape", {x},
                     [in](const Tensor& g) { return G{g.reshape(in)}; });
}

Variable permute(const Variable& x, const std::vector<int>& perm) {
  std::vector<int> inv = inverse_perm(perm);
  return make_result(ops::permute(x.value(), perm), "permute", {x},
                     [inv](const Tensor& g) { return G{ops::permute(g, inv)}; });
}

Variable relu(const Variable& x) {
  Tensor y = ops::relu(x.value());
  return make_result(y, "relu", {x}, [y](const Tensor& g) { return G{ops::relu_backward(g, y)}; });
}

Variable gelu(const Variable& x) {
  Tensor xv = x.value();
  return make_result(ops::gelu(xv), "gelu", {x},
                     [xv](const Tensor& g) { return G{ops::gelu_backward(g, xv)}; });
}

Variable tanh(const Variable& x) {
  Tensor y = ops::tanh(x.value());
  return make_result(y, "tanh", {x}, [y](const Tensor& g) { return G{ops::tanh_backward(g, y)}; });
}

Variable sum(const Variable& x, const std::vector<int>& axes, bool keepdim) {
  Shape in = x.shape();
  return make_result(ops::sum(x.value(), axes, keepdim), "sum", {x},
                     [in, axes](const Tensor& g) { return G{ops::sum_backward(g, in, axes)}; });
}

Variable mean(const Variable& x, const std::vector<int>& axes, bool keepdim) {
  Shape in = x.shape();
  Tensor y = ops::mean(x.value(), axes, keepdim);
  float inv =
      y.numel() ? static_cast<float>(y.numel()) / static_cast<float>(x.value().numel()) : 0.f;
  return make_result(y, "mean", {x}, [in, axes, inv](const Tensor& g) {
    return G{ops::sum_backward(ops::scale(g, inv), in, axes)};
  });
}

// matmul and bmm multiply, and keep for backward, ops::matmul_operand of their operands: under
// 16-bit CUDA matrix products the rounded copies (half the bytes, rounded once), else the values.
Variable matmul(const Variable& a, const Variable& b, bool ta, bool tb) {
  Tensor av = ops::matmul_operand(a.value()), bv = ops::matmul_operand(b.value());
  bool ga = a.requires_grad(), gb = b.requires_grad();
  const DType da_t = grad_dtype(a.value()), db_t = grad_dtype(b.value());
  return make_result(
      ops::matmul(av, bv, ta, tb, activation_dtype()), "matmul", {a, b},
      [av, bv, ta, tb, ga, gb, da_t, db_t](const Tensor& g) {
        // C = op(A) op(B): dA = g op(B)^T (transposed back if ta), likewise dB.
        Tensor da, db;
        if (ga) da = ta ? ops::matmul(bv, g, tb, true, da_t) : ops::matmul(g, bv, false, !tb, da_t);
        if (gb) db = tb ? ops::matmul(g, av, true, ta, db_t) : ops::matmul(av, g, !ta, false, db_t);
        return G{da, db};
      });
}

Variable bmm(const Variable& a, const Variable& b, bool ta, bool tb) {
  Tensor av = ops::matmul_operand(a.value()), bv = ops::matmul_operand(b.value());
  bool ga = a.requires_grad(), gb = b.requires_grad();
  const DType da_t = grad_dtype(a.value()), db_t = grad_dtype(b.value());
  return make_result(
      ops::bmm(av, bv, ta, tb, activation_dtype()), "bmm", {a, b},
      [av, bv, ta, tb, ga, gb, da_t, db_t](const Tensor& g) {
        Tensor da, db;
        if (ga) da = ta ? ops::bmm(bv, g, tb, true, da_t) : ops::bmm(g, bv, false, !tb, da_t);
        if (gb) db = tb ? ops::bmm(g, av, true, ta, db_t) : ops::bmm(av, g, !ta, false, db_t);
        return G{da, db};
      });
}

namespace {
// The gradients of x w^T (+ b when gb) from the output's g, x and w as the forward multiplied them
// (xv, wv: ops::matmul_operand's); on a GPU the bias gradient from the weight gradient's GEMM.
G linear_grads(const Tensor& g, const Tensor& xv, const Tensor& wv, bool gx, bool gw, bool gb,
               DType dx_t, DType dw_t) {
  Tensor dx, dw, db;
  if (gx) dx = ops::matmul(g, wv, false, false, dx_t);
  if (gw && gb) {
    ops::linear_weight_grad(g, xv, dw_t, dw, db);
  } else {
    if (gw) dw = ops::matmul(g, xv, true, false, dw_t);
    if (gb) db = ops::bias_grad(g);
  }
  return G{dx, dw, db};
}
// x w^T + b as one node (ops::linear; on a GPU the bias in the GEMM's epilogue). On the CPU the
// ops, and the bits, of matmul then add_bias.
Variable linear_with_bias(const Variable& x, const Variable& w, const Variable& b) {
  Tensor xv = ops::matmul_operand(x.value()), wv = ops::matmul_operand(w.value());
  const bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.requires_grad();
  const DType dx_t = grad_dtype(x.value()), dw_t = grad_dtype(w.value());
  return make_result(ops::linear(xv, wv, b.value(), activation_dtype()), "linear", {x, w, b},
                     [xv, wv, gx, gw, gb, dx_t, dw_t](const Tensor& g) {
                       return linear_grads(g, xv, wv, gx, gw, gb, dx_t, dw_t);
                     });
}
// A linear layer's output shape for input shape xs [..., in]: [..., out].
Shape linear_out_shape(const Shape& xs, const Variable& w, const char* op) {
  ADA_CHECK_ARG(!xs.empty(), ShapeError) << op << ": input must have at least 1 dim";
  Shape out = xs;
  out.back() = w.shape()[0];
  return out;
}
}  // namespace

Variable gelu_linear(const Variable& h, const Variable& w, const Variable& b) {
  const Shape out = linear_out_shape(h.shape(), w, "gelu_linear");
  Variable h2 = reshape(h, {-1, h.shape().back()});
  Tensor hv = h2.value(), wv = ops::matmul_operand(w.value());
  const bool gh = h2.requires_grad(), gw = w.requires_grad(), has_b = b.defined(),
             gb = has_b && b.requires_grad();
  const DType dh_t = grad_dtype(hv), dw_t = grad_dtype(w.value());
  Tensor av = ops::matmul_operand(ops::gelu(hv));  // freed after the product
  Tensor y = has_b ? ops::linear(av, wv, b.value(), activation_dtype())
                   : ops::matmul(av, wv, false, true, activation_dtype());
  std::vector<Variable> inputs{h2, w};
  if (has_b) inputs.push_back(b);
  Variable r = make_result(y, "gelu_linear", inputs,
                           [hv, wv, gh, gw, gb, has_b, dh_t, dw_t](const Tensor& g) {
                             // The GELU output only for the weight gradient (dx needs w alone).
                             const Tensor av = gw ? ops::matmul_operand(ops::gelu(hv)) : Tensor();
                             G d = linear_grads(g, av, wv, gh, gw, gb, dh_t, dw_t);
                             if (gh) d[0] = ops::gelu_backward(d[0], hv);
                             if (!has_b) d.pop_back();
                             return d;
                           });
  return reshape(r, out);
}

Variable linear(const Variable& x, const Variable& w, const Variable& b) {
  const Shape out = linear_out_shape(x.shape(), w, "linear");
  Variable x2 = reshape(x, {-1, x.shape().back()});
  Variable y = b.defined() ? linear_with_bias(x2, w, b) : matmul(x2, w, false, true);
  return reshape(y, out);
}

// A convolution of 16-bit activations multiplies, and keeps for backward-data, the weights
// rounded once to their type (ops::matmul_operand, as matmul does; the CPU rounds while packing).
Variable conv2d(const Variable& x, const Variable& w, const ops::Conv2dParams& p) {
  Tensor xv = x.value();
  Tensor wv = xv.dtype() == DType::f32 ? w.value() : ops::matmul_operand(w.value());
  bool gx = x.requires_grad(), gw = w.requires_grad();
  return make_result(ops::conv2d_forward(xv, wv, p, activation_dtype()), "conv2d", {x, w},
                     [xv, wv, p, gx, gw](const Tensor& g) {
                       return G{gx ? ops::conv2d_backward_data(g, wv, xv.shape(), p) : Tensor(),
                                gw ? ops::conv2d_backward_filter(g, xv, wv.shape(), p) : Tensor()};
                     });
}

Variable max_pool2d(const Variable& x, const ops::Pool2dParams& p) {
  Tensor idx;
  Tensor y = ops::max_pool2d_forward(x.value(), p, idx);
  Shape in = x.shape();
  return make_result(y, "max_pool2d", {x}, [idx, in](const Tensor& g) {
    return G{ops::max_pool2d_backward(g, idx, in)};
  });
}

Variable max_pool2d_nhwc(const Variable& x, const ops::Pool2dParams& p) {
  Tensor idx;
  Tensor y = ops::max_pool2d_nhwc_forward(x.value(), p, idx);
  Shape in = x.shape();
  return make_result(y, "max_pool2d_nhwc", {x}, [idx, in](const Tensor& g) {
    return G{ops::max_pool2d_nhwc_backward(g, idx, in)};
  });
}

Variable avg_pool2d(const Variable& x, const ops::Pool2dParams& p) {
  Shape in = x.shape();
  return make_result(ops::avg_pool2d_forward(x.value(), p), "avg_pool2d", {x},
                     [in, p](const Tensor& g) { return G{ops::avg_pool2d_backward(g, in, p)}; });
}

Variable global_avg_pool(const Variable& x) {
  Shape in = x.shape();
  return make_result(ops::global_avg_pool_forward(x.value()), "global_avg_pool", {x},
                     [in](const Tensor& g) { return G{ops::global_avg_pool_backward(g, in)}; });
}

namespace {

// Training-mode batch norm (+ ReLU, + residual) on cuDNN's kernels (ops::cudnn_batch_norm_*),
// when ADA_CUDA_BN_CUDNN=1 and x is a view cuDNN takes; an undefined Variable otherwise.
Variable cudnn_batch_norm(const Variable& x, const Variable& gamma, const Variable& beta,
                          Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                          bool relu, const Variable& residual) {
  const Tensor xv = x.value(), rv = residual.defined() ? residual.value() : Tensor();
  if (!ops::cudnn_batch_norm_on() || !ops::cudnn_batch_norm_fits(xv, eps, rv)) return Variable();
  const Tensor gv = gamma.value(), bv = beta.value();
  auto fwd = std::make_shared<const ops::CudnnBatchNorm>(
      ops::cudnn_batch_norm_train(xv, gv, bv, running_mean, running_var, momentum, eps, relu, rv));
  auto grads = [xv, gv, bv, fwd, eps](const Tensor& g) {
    const Tensor dy = g.dtype() == xv.dtype() ? g : ops::to_dtype(g, xv.dtype());
    auto r = ops::cudnn_batch_norm_backward(dy, xv, gv, bv, *fwd, eps);
    return fwd->residual ? G{r.dx, r.dgamma, r.dbeta, r.dresidual} : G{r.dx, r.dgamma, r.dbeta};
  };
  if (!residual.defined())
    return make_result(fwd->y, relu ? "batch_norm_relu" : "batch_norm", {x, gamma, beta}, grads);
  return make_result(fwd->y, "batch_norm_add_relu", {x, gamma, beta, residual}, grads);
}

}  // namespace

Variable batch_norm(const Variable& x, const Variable& gamma, const Variable& beta,
                    Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                    float eps) {
  Tensor xv = x.value(), gv = gamma.value();
  if (training) {
    if (Variable y = cudnn_batch_norm(x, gamma, beta, running_mean, running_var, momentum, eps,
                                      false, Variable());
        y.defined())
      return y;
    Tensor mean, invstd;
    Tensor y = ops::batch_norm_train(xv, gv, beta.value(), running_mean, running_var, momentum, eps,
                                     mean, invstd);
    return make_result(y, "batch_norm", {x, gamma, beta}, [xv, gv, mean, invstd](const Tensor& g) {
      auto r = ops::batch_norm_backward(g, xv, gv, mean, invstd);
      return G{r.dx, r.dgamma, r.dbeta};
    });
  }
  Tensor rm = running_mean.clone(), rv = running_var.clone();
  Tensor y = ops::batch_norm_eval(xv, gv, beta.value(), rm, rv, eps);
  return make_result(y, "batch_norm_eval", {x, gamma, beta},
                     [xv, gv, rm, rv, eps](const Tensor& g) {
                       auto r = ops::batch_norm_eval_backward(g, xv, gv, rm, rv, eps);
                       return G{r.dx, r.dgamma, r.dbeta};
                     });
}

Variable batch_norm_relu(const Variable& x, const Variable& gamma, const Variable& beta,
                         Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                         float eps, const Variable& residual) {
  if (!training) {
    Variable y = batch_norm(x, gamma, beta, running_mean, running_var, false, momentum, eps);
    return residual.defined() ? add_relu(y, residual) : relu(y);
  }
  if (Variable y = cudnn_batch_norm(x, gamma, beta, running_mean, running_var, momentum, eps, true,
                                    residual);
      y.defined())
    return y;
  Tensor xv = x.value(), gv = gamma.value(), mean, invstd;
  Tensor y =
      ops::batch_norm_relu_train(xv, gv, beta.value(), running_mean, running_var, momentum, eps,
                                 mean, invstd, residual.defined() ? residual.value() : Tensor());
  auto grads = [y, xv, gv, mean, invstd](const Tensor& g, bool with_residual) {
    if (with_residual) {
      // The masked gradient is the residual's (d relu(z + residual)/d residual): formed once and
      // given to the plain backward, which then reads one tensor fewer than the fused one (the
      // same bits: tests/core/test_ops.cc FusedReluOpsEqualTheirPairs, and on the GPU).
      Tensor masked = ops::relu_backward(g, y);
      auto r = ops::batch_norm_backward(masked, xv, gv, mean, invstd);
      return G{r.dx, r.dgamma, r.dbeta, masked};
    }
    auto r = ops::batch_norm_relu_backward(g, y, xv, gv, mean, invstd);
    return G{r.dx, r.dgamma, r.dbeta};
  };
  if (!residual.defined())
    return make_result(y, "batch_norm_relu", {x, gamma, beta},
                       [grads](const Tensor& g) { return grads(g, false); });
  return make_result(y, "batch_norm_add_relu", {x, gamma, beta, residual},
                     [grads](const Tensor& g) { return grads(g, true); });
}

Variable add_relu(const Variable& a, const Variable& b) {
  Tensor y = ops::add_relu(a.value(), b.value());
  return make_result(y, "add_relu", {a, b}, [y](const Tensor& g) {
    Tensor d = ops::relu_backward(g, y);
    return G{d, d};
  });
}

Variable layer_norm(const Variable& x, const Variable& gamma, const Variable& beta, float eps) {
  Tensor xv = x.value(), gv = gamma.value(), mean, rstd;
  Tensor y = ops::layer_norm_forward(xv, gv, beta.value(), eps, mean, rstd);
  return make_result(y, "layer_norm", {x, gamma, beta}, [xv, gv, mean, rstd](const Tensor& g) {
    auto r = ops::layer_norm_backward(g, xv, gv, mean, rstd);
    return G{r.dx, r.dgamma, r.dbeta};
  });
}

Variable softmax(const Variable& x) {
  Tensor y = ops::softmax(x.value());
  return make_result(y, "softmax", {x},
                     [y](const Tensor& g) { return G{ops::softmax_backward(g, y)}; });
}

Variable attention_softmax(const Variable& scores, const Tensor& key_bias, int64_t heads,
                           float scale) {
  Tensor y = ops::attention_softmax(scores.value(), key_bias, heads, scale);
  return make_result(y, "attention_softmax", {scores}, [y, scale](const Tensor& g) {
    return G{ops::attention_softmax_backward(g, y, scale)};
  });
}

Variable matmul_operand(const Variable& x) {
  Tensor y = ops::matmul_operand(x.value());
  if (y.dtype() == x.value().dtype()) return x;
  return make_result(y, "matmul_operand", {x}, [](const Tensor& g) { return G{g}; });
}

Variable fused_attention(const Variable& q, const Variable& k, const Variable& v,
                         const Tensor& key_bias, int64_t heads, float scale, float p, bool training,
                         Generator& gen) {
  backend::check_fused_attention(q.value(), k.value(), v.value(), key_bias, heads, p);
  ops::AttentionArgs a;
  a.heads = heads;
  a.scale = scale;
  if (training && p > 0.f) {  // fn::dropout's rule: no draw in eval or at p = 0
    a.dropout = p;
    a.seed = gen.seed();
    a.first = draw(gen, static_cast<uint64_t>(q.shape()[0] * heads * q.shape()[1] * k.shape()[1]),
                   q.value());
  }
  Tensor qv = q.value(), kv = k.value(), vv = v.value(), lse;
  Tensor out = ops::fused_attention(qv, kv, vv, key_bias, a, lse);
  return make_result(
      out, "fused_attention", {q, k, v}, [qv, kv, vv, out, lse, key_bias, a](const Tensor& g) {
        ops::AttentionGrads d = ops::fused_attention_backward(g, qv, kv, vv, out, lse, key_bias, a);
        return G{d.dq, d.dk, d.dv};
      });
}

Variable log_softmax(const Variable& x) {
  Tensor y = ops::log_softmax(x.value());
  return make_result(y, "log_softmax", {x},
                     [y](const Tensor& g) { return G{ops::log_softmax_backward(g, y)}; });
}

Variable cross_entropy(const Variable& logits, const Tensor& targets, float label_smoothing,
                       int64_t ignore_index) {
  Tensor logp;
  Tensor loss =
      ops::cross_entropy_forward(logits.value(), targets, label_smoothing, ignore_index, logp);
  const DType dt = grad_dtype(logits.value());
  return make_result(
      loss, "cross_entropy", {logits},
      [logp, targets, label_smoothing, ignore_index, dt](const Tensor& g) {
        return G{ops::cross_entropy_backward(g, logp, targets, label_smoothing, ignore_index, dt)};
      });
}

// The backward regenerates the mask from the generator counters it was drawn at (nothing of the
// input's size kept between forward and backward; the same products as with a stored mask).
Variable dropout(const Variable& x, float p, bool training, Generator& gen) {
  if (!training || p == 0.f) return x;
  const uint64_t seed = gen.seed(),
                 first = draw(gen, static_cast<uint64_t>(x.value().numel()), x.value());
  Tensor y = ops::dropout_apply(x.value(), p, seed, first);
  return make_result(y, "dropout", {x}, [p, seed, first](const Tensor& g) {
    return G{ops::dropout_apply(g, p, seed, first)};
  });
}

Variable dropout_bmm(const Variable& a, const Variable& b, float p, bool training, Generator& gen) {
  if (!training || p == 0.f) return bmm(a, b);
  const uint64_t seed = gen.seed(),
                 first = draw(gen, static_cast<uint64_t>(a.value().numel()), a.value());
  Tensor keep = a.value(), bv = ops::matmul_operand(b.value());
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  const DType da_t = grad_dtype(keep), db_t = grad_dtype(b.value());
  // dropout then bmm (fn::dropout, fn::bmm): the dropped operand is freed after the product
  Tensor y = ops::bmm(ops::matmul_operand(ops::dropout_apply(keep, p, seed, first)), bv, false,
                      false, activation_dtype());
  return make_result(
      y, "dropout_bmm", {a, b}, [keep, bv, p, seed, first, ga, gb, da_t, db_t](const Tensor& g) {
        Tensor da, db;
        if (ga) da = ops::dropout_apply(ops::bmm(g, bv, false, true, da_t), p, seed, first);
        if (gb)
          db = ops::bmm(ops::matmul_operand(ops::dropout_apply(keep, p, seed, first)), g, true,
                        false, db_t);
        return G{da, db};
      });
}

Variable embedding(const Variable& weight, const Tensor& ids) {
  Tensor w = weight.value();
  Shape ws = w.shape();
  const DType dt = grad_dtype(w);
  return make_result(ops::embedding_forward(w, ids, activation_dtype()), "embedding", {weight},
                     [ids, ws, dt](const Tensor& g) {
                       Tensor dw = Tensor::zeros(ws, DType::f32, g.device());
                       ops::embedding_backward(g, ids, dw);
                       return G{ops::to_dtype(dw, dt)};
                     });
}

}  // namespace ada::fn
