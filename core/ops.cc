// core/ops.h's functions: the dispatch front layer. Each op picks its backend from the devices of
// its input tensors and calls cpu::op (core/backend/cpu/cpu_ops.h) or cuda::op
// (core/backend/cuda/cuda_ops.h) with the same arguments, under that backend's op timer
// (bench_step --profile). The ops that need no kernel of their own (compositions of other ops,
// output shapes) are written here once.
#include "core/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/backend/cpu/cpu_ops.h"
#include "core/backend/cpu/op_profile.h"
#include "core/backend/op_shapes.h"
#include "core/precision.h"

#ifdef ADA_WITH_CUDA
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/cuda_runtime.h"
#endif

// ADA_DISPATCH(op, (args...), inputs...) is the whole body of ops::op(args...): when any defined
// tensor among `inputs` (the op's input tensors; pure outputs such as saved statistics or masks
// are not consulted) lives on a CUDA device, it returns cuda::op(args...), which checks that all
// of them are on that one device; otherwise cpu::op(args...). Each runs under its backend's
// OpTimer named after the op: one relaxed atomic load (CPU) or one branch (CUDA) unless
// profiling. In builds without CUDA no CUDA tensor can exist (allocation throws), so only the
// CPU call remains and nothing here names the CUDA backend (core/backend/cuda_stub.cc stands in
// for its runtime).
#ifdef ADA_WITH_CUDA
#define ADA_DISPATCH(op, args, ...)  \
  if (any_cuda(__VA_ARGS__)) {       \
    ::ada::cuda::OpTimer timer(#op); \
    return ::ada::cuda::op args;     \
  }                                  \
  ::ada::cpu::OpTimer timer(#op);    \
  return ::ada::cpu::op args
#else
#define ADA_DISPATCH(op, args, ...) \
  ::ada::cpu::OpTimer timer(#op);   \
  return ::ada::cpu::op args
#endif

namespace ada::ops {
namespace {

// True when any defined tensor among `inputs` lives on a CUDA device.
template <class... Ts>
bool any_cuda(const Ts&... inputs) {
  return ((inputs.defined() && !inputs.device().is_cpu()) || ...);
}

void check_pool(const char* op, const Shape& x, const Pool2dParams& p) {
  ADA_CHECK_ARG(x.size() == 4, ShapeError)
      << op << ": input must be [N,C,H,W], got " << shape_str(x);
  ADA_CHECK_ARG(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0, ShapeError)
      << op << ": kernel and stride must be positive";
  ADA_CHECK_ARG(
      p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w,
      ShapeError)
      << op << ": padding must be between 0 and half the kernel (got pad " << p.pad_h << "x"
      << p.pad_w << ", kernel " << p.kernel_h << "x" << p.kernel_w << ")";
  ADA_CHECK_ARG(x[2] + 2 * p.pad_h >= p.kernel_h && x[3] + 2 * p.pad_w >= p.kernel_w, ShapeError)
      << op << ": kernel " << p.kernel_h << "x" << p.kernel_w << " larger than padded input "
      << shape_str(x);
}

bool is16(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::bf16 || t.dtype() == DType::f16);
}
// Whether any of the tensors is a 16-bit activation. An op without a 16-bit kernel for them on
// their backend then runs on f32 copies of its 16-bit inputs (W) and rounds its activation
// outputs to its first argument's dtype: the values a 16-bit kernel must give.
template <class... Ts>
bool any16(const Ts&... ts) {
  return (is16(ts) || ...);
}
// Whether the CUDA backend's own kernels take these tensors as they are: on a GPU and all of one
// float dtype (its elementwise kernels, add_bias's input and dropout run on f32, bf16 and f16).
template <class... Ts>
bool cuda_native(const Tensor& first, const Ts&... rest) {
  return any_cuda(first, rest...) && ((rest.dtype() == first.dtype()) && ...);
}
// Whether the CUDA kernels that multiply in train.precision's 16-bit type — fused attention's
// tensor cores, cuDNN's forward and backward-data convolutions — take these tensors as they are:
// on a GPU, all of that 16-bit type.
template <class... Ts>
bool cuda_products16(const Tensor& first, const Ts&... rest) {
  return cuda_native(first, rest...) && first.dtype() == precision_dtype(cuda_matmul_precision());
}
// Whether cuDNN's 16-bit convolution of x takes the weights w as they are: f32 (rounded per
// call) or already rounded to x's type (fn::conv2d rounds them once per step).
bool conv_weights(const Tensor& w, const Tensor& x) {
  return w.dtype() == DType::f32 || w.dtype() == x.dtype();
}
std::atomic<int64_t> g_copies{0};
Tensor W(const Tensor& t) {
  if (!is16(t)) return t;
  g_copies.fetch_add(1, std::memory_order_relaxed);
  return to_dtype(t, DType::f32);
}
// Batch-norm gradients with dx rounded to dy's dtype (dgamma, dbeta stay f32).
BatchNormGrads narrow_dx(BatchNormGrads g, const Tensor& dy) {
  g.dx = to_dtype(g.dx, dy.dtype());
  return g;
}
// f32 `value` written into `out`, rounded to out's dtype.
void write16(Tensor& out, const Tensor& value) {
  if (out.dtype() == DType::f32)
    out.copy_from(value);
  else
    cast_out(value, out);
}

}  // namespace

int64_t sixteen_bit_copies() {
  return g_copies.load(std::memory_order_relaxed);
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  if (!x.defined() || x.dtype() == dtype) return x;
  Tensor y = Tensor::empty(x.shape(), dtype, x.device());
  cast_out(x, y);
  return y;
}

// ---- creation / elementwise (same shapes unless stated) ------------------------------------
void fill_(Tensor& t, float value) {
  if (any16(t)) return write16(t, Tensor::full(t.shape(), value, DType::f32).to(t.device()));
  ADA_DISPATCH(fill_, (t, value), t);
}
Tensor add(const Tensor& a, const Tensor& b) {
  if (any16(a, b) && !cuda_native(a, b)) return to_dtype(add(W(a), W(b)), a.dtype());
  ADA_DISPATCH(add, (a, b), a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  if (any16(a, b) && !cuda_native(a, b)) return to_dtype(sub(W(a), W(b)), a.dtype());
  ADA_DISPATCH(sub, (a, b), a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  if (any16(a, b) && !cuda_native(a, b)) return to_dtype(mul(W(a), W(b)), a.dtype());
  ADA_DISPATCH(mul, (a, b), a, b);
}
Tensor scale(const Tensor& a, float s) {
  if (any16(a) && !cuda_native(a)) return to_dtype(scale(W(a), s), a.dtype());
  ADA_DISPATCH(scale, (a, s), a);
}
void add_(Tensor& y, const Tensor& x) {
  axpby_(1.f, x, 1.f, y);
}
void add_out(const Tensor& a, const Tensor& b, Tensor& out) {
  if (any16(a, b, out) && !cuda_native(a, b, out)) return write16(out, add(W(a), W(b)));
  ADA_DISPATCH(add_out, (a, b, out), a, b, out);
}
void sub_out(const Tensor& a, const Tensor& b, Tensor& out) {
  if (any16(a, b, out) && !cuda_native(a, b, out)) return write16(out, sub(W(a), W(b)));
  ADA_DISPATCH(sub_out, (a, b, out), a, b, out);
}
void scale_(Tensor& y, float s) {
  if (any16(y)) return write16(y, scale(W(y), s));
  ADA_DISPATCH(scale_, (y, s), y);
}
void axpby_(float alpha, const Tensor& x, float beta, Tensor& y) {
  if (any16(x, y)) {
    if (!is16(y)) return axpby_(alpha, W(x), beta, y);  // an f32 y is updated in place
    Tensor t = W(y);
    axpby_(alpha, W(x), beta, t);
    return write16(y, t);
  }
  ADA_DISPATCH(axpby_, (alpha, x, beta, y), x, y);
}
Tensor add_bias(const Tensor& x, const Tensor& b) {
  if (any16(x, b) && !(cuda_native(x) && b.dtype() == DType::f32))
    return to_dtype(add_bias(W(x), W(b)), x.dtype());
  ADA_DISPATCH(add_bias, (x, b), x, b);
}
Tensor bias_grad(const Tensor& dy) {
  if (any16(dy) && !cuda_native(dy)) return bias_grad(W(dy));
  ADA_DISPATCH(bias_grad, (dy), dy);
}
Tensor add_channel_bias(const Tensor& x, const Tensor& b) {
  if (any16(x, b)) return to_dtype(add_channel_bias(W(x), W(b)), x.dtype());
  ADA_DISPATCH(add_channel_bias, (x, b), x, b);
}
Tensor channel_bias_grad(const Tensor& dy) {
  if (any16(dy) && !cuda_native(dy)) return channel_bias_grad(W(dy));
  ADA_DISPATCH(channel_bias_grad, (dy), dy);
}
Tensor permute(const Tensor& x, const std::vector<int>& perm) {
  if (any16(x) && !cuda_native(x)) return to_dtype(permute(W(x), perm), x.dtype());
  ADA_DISPATCH(permute, (x, perm), x);
}

// ---- activations ----------------------------------------------------------------------------
Tensor relu(const Tensor& x) {
  if (any16(x) && !cuda_native(x)) return to_dtype(relu(W(x)), x.dtype());
  ADA_DISPATCH(relu, (x), x);
}
Tensor relu_backward(const Tensor& dy, const Tensor& y) {
  if (any16(dy, y) && !cuda_native(dy, y)) return to_dtype(relu_backward(W(dy), W(y)), dy.dtype());
  ADA_DISPATCH(relu_backward, (dy, y), dy, y);
}
Tensor add_relu(const Tensor& a, const Tensor& b) {
  if (any16(a, b) && !cuda_native(a, b)) return to_dtype(add_relu(W(a), W(b)), a.dtype());
  ADA_DISPATCH(add_relu, (a, b), a, b);
}
Tensor gelu(const Tensor& x) {
  if (any16(x) && !cuda_native(x)) return to_dtype(gelu(W(x)), x.dtype());
  ADA_DISPATCH(gelu, (x), x);
}
Tensor gelu_backward(const Tensor& dy, const Tensor& x) {
  if (any16(dy, x) && !cuda_native(dy, x)) return to_dtype(gelu_backward(W(dy), W(x)), dy.dtype());
  ADA_DISPATCH(gelu_backward, (dy, x), dy, x);
}
Tensor tanh(const Tensor& x) {
  if (any16(x) && !cuda_native(x)) return to_dtype(tanh(W(x)), x.dtype());
  ADA_DISPATCH(tanh, (x), x);
}
Tensor tanh_backward(const Tensor& dy, const Tensor& y) {
  if (any16(dy, y) && !cuda_native(dy, y)) return to_dtype(tanh_backward(W(dy), W(y)), dy.dtype());
  ADA_DISPATCH(tanh_backward, (dy, y), dy, y);
}

// ---- reductions -----------------------------------------------------------------------------
Tensor sum(const Tensor& x, const std::vector<int>& axes, bool keepdim) {
  if (any16(x)) return to_dtype(sum(W(x), axes, keepdim), x.dtype());
  ADA_DISPATCH(sum, (x, axes, keepdim), x);
}
Tensor mean(const Tensor& x, const std::vector<int>& axes, bool keepdim) {
  if (any16(x)) return to_dtype(mean(W(x), axes, keepdim), x.dtype());
  ADA_DISPATCH(mean, (x, axes, keepdim), x);
}
Tensor sum_backward(const Tensor& dy, const Shape& x_shape, const std::vector<int>& axes) {
  if (any16(dy)) return to_dtype(sum_backward(W(dy), x_shape, axes), dy.dtype());
  ADA_DISPATCH(sum_backward, (dy, x_shape, axes), dy);
}
double sum_all(const Tensor& x) {
  if (any16(x)) return sum_all(W(x));
  ADA_DISPATCH(sum_all, (x), x);
}
double dot(const Tensor& a, const Tensor& b) {
  if (any16(a, b)) return dot(W(a), W(b));
  ADA_DISPATCH(dot, (a, b), a, b);
}
double norm2_sq(const Tensor& a) {
  if (any16(a)) return norm2_sq(W(a));
  ADA_DISPATCH(norm2_sq, (a), a);
}
bool all_finite(const Tensor& x) {
  if (any16(x)) return all_finite(W(x));
  ADA_DISPATCH(all_finite, (x), x);
}

// ---- conversions ----------------------------------------------------------------------------
void cast_out(const Tensor& src, Tensor& dst) {
  ADA_DISPATCH(cast_out, (src, dst), src, dst);
}

// ---- BLAS -----------------------------------------------------------------------------------
void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b, float alpha,
          float beta) {
  if (any16(a, b) && !any_cuda(a, b, c))  // the CUDA backend multiplies 16-bit operands as they are
    return gemm(W(a), W(b), c, trans_a, trans_b, alpha, beta);
  ADA_DISPATCH(gemm, (a, b, c, trans_a, trans_b, alpha, beta), a, b, c);
}
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out) {
#ifdef ADA_WITH_CUDA
  if (any_cuda(a, b)) {  // 16-bit operands and results as they are
    ::ada::cuda::OpTimer timer("matmul");
    return ::ada::cuda::matmul(a, b, trans_a, trans_b, out);
  }
#endif
  if (any16(a, b) || out != DType::f32) return to_dtype(matmul(W(a), W(b), trans_a, trans_b), out);
  ::ada::cpu::OpTimer timer("matmul");
  return ::ada::cpu::matmul(a, b, trans_a, trans_b);
}
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, DType out) {
#ifdef ADA_WITH_CUDA
  if (any_cuda(x, w, b)) {
    Tensor y;
    {
      ::ada::cuda::OpTimer timer("linear");
      y = ::ada::cuda::linear_bias_lt(x, w, b, out);
    }
    if (y.defined()) return y;
  }
#endif
  if (any_cuda(x, w, b) || any16(x, w, b) || out != DType::f32)
    return add_bias(matmul(x, w, false, true, out), b);
  ::ada::cpu::OpTimer timer("linear");
  return ::ada::cpu::linear(x, w, b);
}
void linear_weight_grad(const Tensor& dy, const Tensor& x, DType dw_type, Tensor& dw, Tensor& db) {
#ifdef ADA_WITH_CUDA
  if (any_cuda(dy, x) && dw_type == DType::f32) {
    ::ada::cuda::OpTimer timer("linear_weight_grad");
    if (::ada::cuda::linear_weight_grad_lt(dy, x, dw, db)) return;
  }
#endif
  if (any_cuda(dy, x) || any16(dy, x) || dw_type != DType::f32) {
    dw = matmul(dy, x, true, false, dw_type);
    db = bias_grad(dy);
    return;
  }
  ::ada::cpu::OpTimer timer("linear_weight_grad");
  ::ada::cpu::linear_weight_grad(dy, x, dw, db);
}
void gemm_batched(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b,
                  float alpha, float beta) {
  if (any16(a, b) && !any_cuda(a, b, c))
    return gemm_batched(W(a), W(b), c, trans_a, trans_b, alpha, beta);
  ADA_DISPATCH(gemm_batched, (a, b, c, trans_a, trans_b, alpha, beta), a, b, c);
}
Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out) {
#ifdef ADA_WITH_CUDA
  if (any_cuda(a, b)) {  // 16-bit operands and results as they are
    ::ada::cuda::OpTimer timer("bmm");
    return ::ada::cuda::bmm(a, b, trans_a, trans_b, out);
  }
#endif
  if (any16(a, b) || out != DType::f32) return to_dtype(bmm(W(a), W(b), trans_a, trans_b), out);
  ::ada::cpu::OpTimer timer("bmm");
  return ::ada::cpu::bmm(a, b, trans_a, trans_b);
}

// ---- convolution and pooling (NCHW) ----------------------------------------------------------
namespace {
// Channels-last convolutions on a backend without them (the CPU's) run on NCHW copies.
bool native_channels_last(const Tensor& x) {
  return any_cuda(x);  // cuDNN's NHWC convolutions
}
Tensor to_nchw(const Tensor& t) {
  return permute(t, {0, 3, 1, 2});
}
Tensor to_nhwc(const Tensor& t) {
  return permute(t, {0, 2, 3, 1});
}
Conv2dParams as_nchw(Conv2dParams p) {
  p.channels_last = false;
  return p;
}
}  // namespace

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  const backend::ConvGeom g = backend::make_geom("conv2d", x, w, p);
  return p.channels_last ? Shape{g.n, g.p, g.q, g.k} : Shape{g.n, g.k, g.p, g.q};
}
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Conv2dParams& p, DType out) {
  if (p.channels_last && !native_channels_last(x)) {
    backend::make_geom("conv2d_forward", x.shape(), w.shape(), p);  // its messages, not permute's
    return to_nhwc(conv2d_forward(to_nchw(x), w, as_nchw(p), out));
  }
  if ((any16(x, w) || out != DType::f32) &&
      !(cuda_products16(x) && out == x.dtype() && conv_weights(w, x)))
    return to_dtype(conv2d_forward(W(x), W(w), p), out);
  ADA_DISPATCH(conv2d_forward, (x, w, p), x, w);
}
Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2dParams& p) {
  if (p.channels_last && !native_channels_last(dy)) {
    const backend::ConvGeom g = backend::make_geom("conv2d_backward_data", x_shape, w.shape(), p);
    return to_nhwc(conv2d_backward_data(to_nchw(dy), w, {g.n, g.c, g.h, g.w}, as_nchw(p)));
  }
  if (any16(dy, w) && !(cuda_products16(dy) && conv_weights(w, dy)))
    return to_dtype(conv2d_backward_data(W(dy), W(w), x_shape, p), dy.dtype());
  ADA_DISPATCH(conv2d_backward_data, (dy, w, x_shape, p), dy, w);
}
Tensor conv2d_backward_filter(const Tensor& dy, const Tensor& x, const Shape& w_shape,
                              const Conv2dParams& p) {
  if (p.channels_last && !native_channels_last(x)) {
    backend::make_geom("conv2d_backward_filter", x.shape(), w_shape, p);
    return conv2d_backward_filter(to_nchw(dy), to_nchw(x), w_shape, as_nchw(p));
  }
#ifdef ADA_WITH_CUDA
  if (any16(dy, x) && cuda_products16(dy, x)) {  // formed in their 16-bit type, given f32
    Tensor dw;
    {
      ::ada::cuda::OpTimer timer("conv2d_backward_filter");
      dw = ::ada::cuda::conv2d_backward_filter(dy, x, w_shape, p);
    }
    if (dw.defined()) return dw;
  }
#endif
  if (any16(dy, x)) return conv2d_backward_filter(W(dy), W(x), w_shape, p);
  ADA_DISPATCH(conv2d_backward_filter, (dy, x, w_shape, p), dy, x);
}
Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p) {
  check_pool("pool2d", x, p);
  return {x[0], x[1], (x[2] + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1,
          (x[3] + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1};
}
Tensor max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& indices) {
  if (any16(x) && !cuda_native(x)) return to_dtype(max_pool2d_forward(W(x), p, indices), x.dtype());
  ADA_DISPATCH(max_pool2d_forward, (x, p, indices), x);
}
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape) {
  if (any16(dy) && !cuda_native(dy))
    return to_dtype(max_pool2d_backward(W(dy), indices, x_shape), dy.dtype());
  ADA_DISPATCH(max_pool2d_backward, (dy, indices, x_shape), dy, indices);
}
Tensor max_pool2d_nhwc_forward(const Tensor& x, const Pool2dParams& p, Tensor& indices) {
  ADA_CHECK_ARG(x.dim() == 4, ShapeError)
      << "max_pool2d_nhwc_forward: input must be [N,H,W,C], got " << x.str();
  check_pool("max_pool2d_nhwc_forward", {x.size(0), x.size(3), x.size(1), x.size(2)}, p);
  if (any16(x) && !cuda_native(x))
    return to_dtype(max_pool2d_nhwc_forward(W(x), p, indices), x.dtype());
  ADA_DISPATCH(max_pool2d_nhwc_forward, (x, p, indices), x);
}
Tensor max_pool2d_nhwc_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape) {
  if (any16(dy) && !cuda_native(dy))
    return to_dtype(max_pool2d_nhwc_backward(W(dy), indices, x_shape), dy.dtype());
  ADA_DISPATCH(max_pool2d_nhwc_backward, (dy, indices, x_shape), dy, indices);
}
Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p) {
  if (any16(x) && !cuda_native(x)) return to_dtype(avg_pool2d_forward(W(x), p), x.dtype());
  ADA_DISPATCH(avg_pool2d_forward, (x, p), x);
}
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dParams& p) {
  if (any16(dy) && !cuda_native(dy))
    return to_dtype(avg_pool2d_backward(W(dy), x_shape, p), dy.dtype());
  ADA_DISPATCH(avg_pool2d_backward, (dy, x_shape, p), dy);
}
Tensor global_avg_pool_forward(const Tensor& x) {
  if (any16(x) && !cuda_native(x)) return to_dtype(global_avg_pool_forward(W(x)), x.dtype());
  ADA_DISPATCH(global_avg_pool_forward, (x), x);
}
Tensor global_avg_pool_backward(const Tensor& dy, const Shape& x_shape) {
  if (any16(dy) && !cuda_native(dy))
    return to_dtype(global_avg_pool_backward(W(dy), x_shape), dy.dtype());
  ADA_DISPATCH(global_avg_pool_backward, (dy, x_shape), dy);
}

// ---- normalisation ---------------------------------------------------------------------------
Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                        Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                        Tensor& save_mean, Tensor& save_invstd) {
  if (any16(x) && !cuda_native(x))
    return to_dtype(batch_norm_train(W(x), gamma, beta, running_mean, running_var, momentum, eps,
                                     save_mean, save_invstd),
                    x.dtype());
  ADA_DISPATCH(batch_norm_train,
               (x, gamma, beta, running_mean, running_var, momentum, eps, save_mean, save_invstd),
               x, gamma, beta, running_mean, running_var);
}
Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, float eps) {
  if (any16(x) && !cuda_native(x))
    return to_dtype(batch_norm_eval(W(x), gamma, beta, running_mean, running_var, eps), x.dtype());
  ADA_DISPATCH(batch_norm_eval, (x, gamma, beta, running_mean, running_var, eps), x, gamma, beta,
               running_mean, running_var);
}
BatchNormGrads batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd) {
  if (any16(dy, x) && !cuda_native(dy, x))
    return narrow_dx(batch_norm_backward(W(dy), W(x), gamma, save_mean, save_invstd), dy);
  ADA_DISPATCH(batch_norm_backward, (dy, x, gamma, save_mean, save_invstd), dy, x, gamma, save_mean,
               save_invstd);
}
Tensor batch_norm_relu_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                             Tensor& save_mean, Tensor& save_invstd, const Tensor& residual) {
  const bool native = cuda_native(x) && (!residual.defined() || residual.dtype() == x.dtype());
  if (any16(x, residual) && !native)
    return to_dtype(batch_norm_relu_train(W(x), gamma, beta, running_mean, running_var, momentum,
                                          eps, save_mean, save_invstd, W(residual)),
                    x.dtype());
  ADA_DISPATCH(
      batch_norm_relu_train,
      (x, gamma, beta, running_mean, running_var, momentum, eps, save_mean, save_invstd, residual),
      x, gamma, beta, running_mean, running_var);
}
BatchNormGrads batch_norm_relu_backward(const Tensor& dy, const Tensor& y, const Tensor& x,
                                        const Tensor& gamma, const Tensor& save_mean,
                                        const Tensor& save_invstd) {
  if (any16(dy, y, x) && !cuda_native(dy, y, x))
    return narrow_dx(batch_norm_relu_backward(W(dy), W(y), W(x), gamma, save_mean, save_invstd),
                     dy);
  ADA_DISPATCH(batch_norm_relu_backward, (dy, y, x, gamma, save_mean, save_invstd), dy, y, x, gamma,
               save_mean, save_invstd);
}
BatchNormGrads batch_norm_eval_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                        const Tensor& running_mean, const Tensor& running_var,
                                        float eps) {
  if (any16(dy, x) && !cuda_native(dy, x))
    return narrow_dx(batch_norm_eval_backward(W(dy), W(x), gamma, running_mean, running_var, eps),
                     dy);
  ADA_DISPATCH(batch_norm_eval_backward, (dy, x, gamma, running_mean, running_var, eps), dy, x,
               gamma, running_mean, running_var);
}
bool cudnn_batch_norm_on() {
#ifdef ADA_WITH_CUDA
  return ::ada::cuda::cudnn_batch_norm_on();
#else
  return false;
#endif
}
void set_cudnn_batch_norm([[maybe_unused]] bool on) {
#ifdef ADA_WITH_CUDA
  ::ada::cuda::set_cudnn_batch_norm(on);
#endif
}
void set_deterministic_algorithms([[maybe_unused]] bool on) {
#ifdef ADA_WITH_CUDA
  ::ada::cuda::set_deterministic_algorithms(on);
#endif
}
bool deterministic_algorithms() {
#ifdef ADA_WITH_CUDA
  return ::ada::cuda::deterministic_algorithms();
#else
  return true;
#endif
}
bool cudnn_batch_norm_fits(const Tensor& x, float eps, const Tensor& residual) {
#ifdef ADA_WITH_CUDA
  if (any_cuda(x)) return ::ada::cuda::cudnn_batch_norm_fits(x, eps, residual);
#endif
  return false;
}
CudnnBatchNorm cudnn_batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                      Tensor& running_mean, Tensor& running_var, float momentum,
                                      float eps, bool relu, const Tensor& residual) {
#ifdef ADA_WITH_CUDA
  if (any_cuda(x)) {
    ::ada::cuda::OpTimer timer(relu ? "cudnn_batch_norm_relu_train" : "cudnn_batch_norm_train");
    return ::ada::cuda::cudnn_batch_norm_train(x, gamma, beta, running_mean, running_var, momentum,
                                               eps, relu, residual);
  }
#endif
  ADA_THROW(DeviceError) << "cudnn_batch_norm_train: cuDNN's batch norm takes CUDA tensors, got "
                         << x.str() << "; use batch_norm_train";
  return {};
}
CudnnBatchNormGrads cudnn_batch_norm_backward(const Tensor& dy, const Tensor& x,
                                              const Tensor& gamma, const Tensor& beta,
                                              const CudnnBatchNorm& forward, float eps) {
#ifdef ADA_WITH_CUDA
  if (any_cuda(dy, x)) {
    ::ada::cuda::OpTimer timer(forward.relu ? "cudnn_batch_norm_relu_backward"
                                            : "cudnn_batch_norm_backward");
    return ::ada::cuda::cudnn_batch_norm_backward(dy, x, gamma, beta, forward, eps);
  }
#endif
  ADA_THROW(DeviceError) << "cudnn_batch_norm_backward: cuDNN's batch norm takes CUDA tensors, got "
                         << dy.str() << "; use batch_norm_backward";
  return {};
}
Tensor layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& save_mean, Tensor& save_rstd) {
  if (any16(x) && !cuda_native(x))
    return to_dtype(layer_norm_forward(W(x), gamma, beta, eps, save_mean, save_rstd), x.dtype());
  ADA_DISPATCH(layer_norm_forward, (x, gamma, beta, eps, save_mean, save_rstd), x, gamma, beta);
}
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_rstd) {
  if (any16(dy, x) && !cuda_native(dy, x)) {
    LayerNormGrads g = layer_norm_backward(W(dy), W(x), gamma, save_mean, save_rstd);
    g.dx = to_dtype(g.dx, dy.dtype());
    return g;
  }
  ADA_DISPATCH(layer_norm_backward, (dy, x, gamma, save_mean, save_rstd), dy, x, gamma, save_mean,
               save_rstd);
}

// ---- softmax and losses (over the last dim) --------------------------------------------------
Tensor softmax(const Tensor& x) {
  if (any16(x)) return to_dtype(softmax(W(x)), x.dtype());
  ADA_DISPATCH(softmax, (x), x);
}
Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  if (any16(dy, y) && !cuda_native(dy, y))
    return to_dtype(softmax_backward(W(dy), W(y)), dy.dtype());
  ADA_DISPATCH(softmax_backward, (dy, y), dy, y);
}
Tensor log_softmax(const Tensor& x) {
  if (any16(x)) return to_dtype(log_softmax(W(x)), x.dtype());
  ADA_DISPATCH(log_softmax, (x), x);
}
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y) {
  if (any16(dy, y) && !cuda_native(dy, y))
    return to_dtype(log_softmax_backward(W(dy), W(y)), dy.dtype());
  ADA_DISPATCH(log_softmax_backward, (dy, y), dy, y);
}
Tensor attention_softmax(const Tensor& scores, const Tensor& key_bias, int64_t heads, float scale) {
  if (any16(scores, key_bias) && !(cuda_native(scores) && !is16(key_bias)))
    return to_dtype(attention_softmax(W(scores), W(key_bias), heads, scale), scores.dtype());
  ADA_DISPATCH(attention_softmax, (scores, key_bias, heads, scale), scores, key_bias);
}
Tensor attention_softmax_backward(const Tensor& dy, const Tensor& y, float scale) {
  if (any16(dy, y) && !cuda_native(dy, y))
    return to_dtype(attention_softmax_backward(W(dy), W(y), scale), dy.dtype());
  ADA_DISPATCH(attention_softmax_backward, (dy, y, scale), dy, y);
}
Tensor matmul_operand(const Tensor& x) {
#ifdef ADA_WITH_CUDA
  if (any_cuda(x)) return ::ada::cuda::matmul_operand(x);
#endif
  return x;  // the CPU backend rounds while packing
}
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_bias,
                       const AttentionArgs& a, Tensor& lse) {
  if (any16(q, k, v, key_bias) && !(cuda_products16(q, k, v) && !is16(key_bias)))
    return to_dtype(fused_attention(W(q), W(k), W(v), W(key_bias), a, lse), q.dtype());
  ADA_DISPATCH(fused_attention, (q, k, v, key_bias, a, lse), q, k, v, key_bias);
}
AttentionGrads fused_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                        const Tensor& v, const Tensor& out, const Tensor& lse,
                                        const Tensor& key_bias, const AttentionArgs& a) {
  if (any16(dout, q, k, v, out, key_bias) &&
      !(cuda_products16(dout, q, k, v, out) && !is16(key_bias))) {
    AttentionGrads g =
        fused_attention_backward(W(dout), W(q), W(k), W(v), W(out), lse, W(key_bias), a);
    for (Tensor* d : {&g.dq, &g.dk, &g.dv}) *d = to_dtype(*d, dout.dtype());
    return g;
  }
  ADA_DISPATCH(fused_attention_backward, (dout, q, k, v, out, lse, key_bias, a), dout, q, k, v, out,
               lse, key_bias);
}
Tensor argmax_rows(const Tensor& x) {
  if (any16(x) && !cuda_native(x)) return argmax_rows(W(x));
  ADA_DISPATCH(argmax_rows, (x), x);
}
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                             int64_t ignore_index, Tensor& save_logp) {
  if (any16(logits) && !cuda_native(logits))
    return cross_entropy_forward(W(logits), targets, label_smoothing, ignore_index, save_logp);
  ADA_DISPATCH(cross_entropy_forward, (logits, targets, label_smoothing, ignore_index, save_logp),
               logits, targets);
}
Tensor cross_entropy_backward(const Tensor& dloss_in, const Tensor& save_logp,
                              const Tensor& targets, float label_smoothing, int64_t ignore_index,
                              DType out) {
  ADA_CHECK_ARG(out == DType::f32 || out == DType::bf16 || out == DType::f16, DTypeError)
      << "cross_entropy_backward: the logit gradient must be f32, bf16 or f16, not "
      << dtype_name(out);
  ADA_CHECK_ARG(dloss_in.defined() && dloss_in.numel() == 1, ShapeError)
      << "cross_entropy_backward: dloss must be one value, got "
      << (dloss_in.defined() ? dloss_in.str() : std::string("an undefined tensor"));
  ADA_CHECK_ARG(dloss_in.dtype() == DType::f32, DTypeError)
      << "cross_entropy_backward: dloss must be f32, got " << dloss_in.str();
  const Device where = save_logp.defined() ? save_logp.device() : Device::cpu();
  const Tensor dloss = dloss_in.device() == where ? dloss_in : dloss_in.to(where);
#ifdef ADA_WITH_CUDA
  if (any_cuda(save_logp, targets)) {
    ::ada::cuda::OpTimer timer("cross_entropy_backward");
    return ::ada::cuda::cross_entropy_backward(dloss, save_logp, targets, label_smoothing,
                                               ignore_index, out);
  }
#endif
  ::ada::cpu::OpTimer timer("cross_entropy_backward");
  return to_dtype(
      ::ada::cpu::cross_entropy_backward(dloss, save_logp, targets, label_smoothing, ignore_index),
      out);
}
Tensor cross_entropy_backward(float dloss, const Tensor& save_logp, const Tensor& targets,
                              float label_smoothing, int64_t ignore_index, DType out) {
  return cross_entropy_backward(
      Tensor::full({}, dloss, DType::f32, save_logp.defined() ? save_logp.device() : Device::cpu()),
      save_logp, targets, label_smoothing, ignore_index, out);
}

// ---- dropout and embedding -------------------------------------------------------------------
Tensor dropout_forward(const Tensor& x, float p, Generator& gen, Tensor& mask) {
  if (any16(x) && !cuda_native(x)) return to_dtype(dropout_forward(W(x), p, gen, mask), x.dtype());
  ADA_DISPATCH(dropout_forward, (x, p, gen, mask), x);
}
Tensor dropout_backward(const Tensor& dy, const Tensor& mask) {
  return mul(dy, mask);
}
Tensor dropout_apply(const Tensor& x, float p, uint64_t seed, uint64_t first) {
  if (any16(x) && !cuda_native(x)) return to_dtype(dropout_apply(W(x), p, seed, first), x.dtype());
  ADA_DISPATCH(dropout_apply, (x, p, seed, first), x);
}
Tensor embedding_forward(const Tensor& weight, const Tensor& ids, DType out) {
#ifdef ADA_WITH_CUDA
  if (any_cuda(weight, ids)) {  // f32 and 16-bit tables and results as they are
    ::ada::cuda::OpTimer timer("embedding_forward");
    return ::ada::cuda::embedding_forward(weight, ids, out);
  }
#endif
  if (any16(weight) || out != DType::f32) return to_dtype(embedding_forward(W(weight), ids), out);
  ::ada::cpu::OpTimer timer("embedding_forward");
  return ::ada::cpu::embedding_forward(weight, ids);
}
Tensor attention_key_bias(const Tensor& mask) {
  ADA_DISPATCH(attention_key_bias, (mask), mask);
}
void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dweight) {
  if (any16(dy) && !cuda_native(dy)) return embedding_backward(W(dy), ids, dweight);
  ADA_DISPATCH(embedding_backward, (dy, ids, dweight), dy, ids, dweight);
}

// ---- optimizer updates (one fused pass each; all operands f32 and of one shape) ----------------
void adam_update_(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamArgs& a, double lr,
                  double decoupled_decay) {
  ADA_DISPATCH(adam_update_, (w, g, m, v, a, lr, decoupled_decay), w, g, m, v);
}
void adam_direction_(Tensor& u, const Tensor& w, const Tensor& g, Tensor& m, Tensor& v,
                     const AdamArgs& a, double decay) {
  ADA_DISPATCH(adam_direction_, (u, w, g, m, v, a, decay), u, w, g, m, v);
}

// ---- multi-tensor optimizer steps ---------------------------------------------------------------
// The CPU arithmetic is the per-tensor ops in turn (the definition the CUDA kernels follow); a
// list whose first entry is on a GPU goes to the CUDA backend, which checks that all are there.
#ifdef ADA_WITH_CUDA
namespace {
template <class Entry>
bool on_cuda(const std::vector<Entry>& entries) {
  return !entries.empty() && any_cuda(entries.front().w);
}
bool on_cuda(const std::vector<Tensor>& ts) {
  return !ts.empty() && any_cuda(ts.front());
}
}  // namespace

#define ADA_MULTI_DISPATCH(op, args, entries) \
  if (on_cuda(entries)) {                     \
    ::ada::cuda::OpTimer timer(#op);          \
    return ::ada::cuda::op args;              \
  }                                           \
  ::ada::cpu::OpTimer timer(#op)
#else
#define ADA_MULTI_DISPATCH(op, args, entries) ::ada::cpu::OpTimer timer(#op)
#endif

void sgd_step_(const std::vector<SgdEntry>& entries, float lr, float momentum, bool nesterov) {
  ADA_MULTI_DISPATCH(sgd_step_, (entries, lr, momentum, nesterov), entries);
  for (const SgdEntry& e : entries) {
    Tensor w = e.w, v = e.v;
    // w*(1 - lr*lambda) - lr*g applies the decay term -lr*lambda*w of the plain and Nesterov
    // updates.
    const float keep = static_cast<float>(1.0 - static_cast<double>(lr) * e.weight_decay);
    if (momentum == 0.f) {  // plain SGD: w -= lr*(g + lambda*w)
      cpu::axpby_(-lr, e.g, keep, w);
      continue;
    }
    // v = mu*v + g + lambda*w; on the first update v is zero, so v = g + lambda*w exactly.
    cpu::axpby_(1.f, e.g, e.first ? 0.f : momentum, v);
    if (e.weight_decay != 0.f) cpu::axpby_(e.weight_decay, w, 1.f, v);
    if (!nesterov) {
      cpu::axpby_(-lr, v, 1.f, w);  // w -= lr*v
    } else {
      // w -= lr*(g + lambda*w + mu*v), with v already updated: first -lr*(g + lambda*w), then
      // -lr*mu*v.
      cpu::axpby_(-lr, e.g, keep, w);
      cpu::axpby_(-lr * momentum, v, 1.f, w);
    }
  }
}

void adam_step_(const std::vector<AdamEntry>& entries, double lr) {
  ADA_MULTI_DISPATCH(adam_step_, (entries, lr), entries);
  for (const AdamEntry& e : entries) {
    Tensor w = e.w, m = e.m, v = e.v;
    cpu::adam_update_(w, e.g, m, v, e.args, lr, e.decoupled_decay);
  }
}

void lamb_step_(const std::vector<LambEntry>& entries, float lr, Tensor& ratios, Tensor& scratch) {
  ADA_MULTI_DISPATCH(lamb_step_, (entries, lr, ratios), entries);
  ADA_CHECK_ARG(ratios.defined() && ratios.dtype() == DType::f32 && ratios.dim() == 1 &&
                    ratios.device().is_cpu(),
                DTypeError)
      << "lamb_step_: ratios must be a 1-d f32 CPU tensor for CPU entries, got "
      << (ratios.defined() ? ratios.str() : std::string("an undefined tensor"));
  float* out = ratios.data<float>();
  for (const LambEntry& e : entries) {
    ADA_CHECK_ARG(e.ratio_slot >= 0 && e.ratio_slot < ratios.numel(), ShapeError)
        << "lamb_step_: ratio_slot " << e.ratio_slot << " outside ratios " << ratios.str();
    const int64_t n = e.w.numel();
    if (n == 0) continue;  // as on a GPU, where it has no block: its ratio stays as it was
    if (!scratch.defined() || scratch.numel() < n || !scratch.device().is_cpu())
      scratch = Tensor::empty({std::max<int64_t>(n, 1)});
    Tensor u = scratch.narrow(0, n).reshape(e.w.shape());
    Tensor w = e.w, m = e.m, v = e.v;
    cpu::adam_direction_(u, w, e.g, m, v, e.args, e.decay);
    double ratio = 1.0;
    if (e.adapt) {
      const double wn = std::sqrt(cpu::norm2_sq(w)), un = std::sqrt(cpu::norm2_sq(u));
      if (wn > 0 && un > 0) ratio = wn / un;
    }
    out[e.ratio_slot] = static_cast<float>(ratio);
    cpu::axpby_(static_cast<float>(-static_cast<double>(lr) * ratio), u, 1.f, w);
  }
}

void clip_grad_norm_(const std::vector<Tensor>& grads, double max_norm) {
  ADA_CHECK_ARG(max_norm > 0, ConfigError)
      << "clip_grad_norm: max_norm must be > 0, got " << max_norm;
  ADA_MULTI_DISPATCH(clip_grad_norm_, (grads, max_norm), grads);
  double sq = 0.0;
  for (const Tensor& g : grads) sq += cpu::norm2_sq(g);
  const double norm = std::sqrt(sq);
  if (!std::isfinite(norm) || norm <= max_norm) return;
  const float coef = static_cast<float>(max_norm / (norm + 1e-6));
  for (const Tensor& g : grads) {
    Tensor t = g;
    cpu::scale_(t, coef);
  }
}

bool all_finite(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> defined;
  for (const Tensor& t : tensors)
    if (t.defined()) defined.push_back(t);
  ADA_MULTI_DISPATCH(all_finite, (defined), defined);
  for (const Tensor& t : defined)
    if (!cpu::all_finite(t)) return false;
  return true;
}

void scale_(const std::vector<Tensor>& tensors, float s) {
  std::vector<Tensor> defined;
  for (const Tensor& t : tensors)
    if (t.defined()) defined.push_back(t);
  ADA_MULTI_DISPATCH(scale_, (defined, s), defined);
  for (Tensor t : defined) cpu::scale_(t, s);
}

#undef ADA_MULTI_DISPATCH

// ---- Adasum's arithmetic (comm/adasum_reducer.h), over segments of 1-d f32 tensors -------------
void segment_partial_sums(const Tensor& a, const Tensor& b, const std::vector<Segment>& segs,
                          double* sums) {
  ADA_DISPATCH(segment_partial_sums, (a, b, segs, sums), a, b);
}
void segment_combine(const Tensor& a, const Tensor& b, Tensor& out,
                     const std::vector<Segment>& segs, const double* coef) {
  ADA_DISPATCH(segment_combine, (a, b, out, segs, coef), a, b, out);
}

}  // namespace ada::ops

#undef ADA_DISPATCH
