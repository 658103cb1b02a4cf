// cuDNN's batch norm for channels-last training (core/ops.h's cudnn_batch_norm_*): an A/B of our
// kernels in norm.cu, which ADA_CUDA_BN_CUDNN=1 puts under fn::batch_norm and fn::batch_norm_relu.
// The [M, C] view of NHWC activations goes to cuDNN as an NHWC tensor [n, C, h, 1] with n*h = M
// (spatial batch norm reduces over n, h and w alike, so any such split gives the same statistics);
// cudnnBatchNormalizationForwardTrainingEx / BackwardEx in CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode,
// the mode PyTorch's eager channels-last training uses, with the ReLU (CUDNN_BATCHNORM_OPS_BN_
// ACTIVATION) and the residual add before it (BN_ADD_ACTIVATION) inside cuDNN's kernels. cuDNN
// takes those fused forms only for some dtypes (and perhaps shapes): when it answers
// CUDNN_STATUS_NOT_SUPPORTED the op runs cuDNN's plain batch norm and our ReLU kernels instead and
// says so once in the log. A dtype whose plain batch norm cuDNN's size queries refuse (PyTorch
// keeps bf16 off cuDNN's batch norm: cuDNN may not take it) is not `fits`: fn::batch_norm then
// runs our kernels for it, said once in the log.
#include <array>
#include <atomic>
#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "base/env.h"
#include "base/log.h"
#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/op_shapes.h"

// cuDNN 9 marks these calls deprecated (still shipped in libcudnn_ops; PyTorch 2.11 uses them).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace ada::cuda {
namespace {

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
// PyTorch keeps cuDNN's batch norm to inputs of at most this many images (a cuDNN limit it works
// around); our split keeps n below it.
constexpr int64_t kMaxN = 880801;

// M = n * h with h the largest power of two dividing M, at most 4,096.
std::array<int, 2> split_rows(int64_t m) {
  int64_t h = 1;
  while (h < 4096 && m % (2 * h) == 0) h *= 2;
  return {static_cast<int>(m / h), static_cast<int>(h)};
}

// The descriptors of one call: x (and y, dy, dx, z: one shape and dtype), the per-channel f32
// statistics cuDNN derives from it, and the ReLU.
struct Descs {
  cudnnTensorDescriptor_t x = nullptr, stat = nullptr;
  cudnnActivationDescriptor_t relu = nullptr;
  Descs(int64_t m, int64_t c, DType t) {
    const auto [n, h] = split_rows(m);
    ADA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    ADA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, cudnn_data_type(t), n,
                                               static_cast<int>(c), h, 1));
    ADA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&stat));
    ADA_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(stat, x, kMode));
    ADA_CUDNN_CHECK(cudnnCreateActivationDescriptor(&relu));
    ADA_CUDNN_CHECK(
        cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
  ~Descs() {
    if (relu) cudnnDestroyActivationDescriptor(relu);
    if (stat) cudnnDestroyTensorDescriptor(stat);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

// One Descs a (m, c, dtype), built on first use and kept for the process (immutable once built:
// concurrent calls share it), so that a step creates no descriptors. Descriptors belong to no
// device.
const Descs& descs(int64_t m, int64_t c, DType t) {
  using Key = std::tuple<int64_t, int64_t, int>;
  static auto* mu = new std::mutex;
  static auto* cache = new std::map<Key, std::unique_ptr<Descs>>;
  std::lock_guard<std::mutex> lock(*mu);
  std::unique_ptr<Descs>& d = (*cache)[Key{m, c, static_cast<int>(t)}];
  if (!d) d = std::make_unique<Descs>(m, c, t);
  return *d;
}

// The cuDNN form a call asks for, and which (dtype, form) pairs cuDNN has refused (said once in
// the log; each call asks again, as the answer may depend on the shape: a refused query costs
// microseconds of host time).
cudnnBatchNormOps_t form(bool relu, bool residual) {
  return !relu      ? CUDNN_BATCHNORM_OPS_BN
         : residual ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
                    : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
}
std::atomic<bool> g_refused[3][3];  // [dtype f32/f16/bf16][form]
std::atomic<bool>& refused(DType t, cudnnBatchNormOps_t f) {
  return g_refused[static_cast<int>(t)][static_cast<int>(f)];
}
void note_refused(DType t, cudnnBatchNormOps_t f) {
  if (!refused(t, f).exchange(true))
    log_warn(
        "cuDNN batch norm (ADA_CUDA_BN_CUDNN=1): cuDNN does not fuse the {} into batch norm "
        "for {} tensors; its plain batch norm and Adatrain's ReLU kernels run instead",
        f == CUDNN_BATCHNORM_OPS_BN_ACTIVATION ? "ReLU" : "residual add and ReLU", dtype_name(t));
}

// A per-channel f32 [c] tensor on `device` (gamma, beta, statistics).
void check_channel_tensor(const char* op, const Tensor& t, int64_t c, int device, const char* arg) {
  require_on(op, device, {&t});
  ADA_CHECK_ARG(t.dtype() == DType::f32 && t.shape() == Shape{c}, ShapeError)
      << op << ": " << arg << " " << t.str() << " should be f32 [" << c << "]";
}

// -1: as ADA_CUDA_BN_CUDNN says; 0 or 1: as set_cudnn_batch_norm said.
std::atomic<int> g_cudnn_bn_override{-1};

// Whether cuDNN's size queries take the plain batch norm of dtype t, asked once per dtype (with
// the first call's shape) on `dev`: -1 not asked yet, 0 refused (said once in the log), 1 taken.
std::atomic<int> g_takes[3] = {-1, -1, -1};
bool takes_dtype(int64_t m, int64_t c, DType t, int dev) {
  std::atomic<int>& known = g_takes[static_cast<int>(t)];
  const int k = known.load(std::memory_order_relaxed);
  if (k >= 0) return k == 1;
  set_device(dev);
  const Descs& d = descs(m, c, t);
  cudnnHandle_t h = cudnn(dev);
  size_t ws = 0, rs = 0;
  cudnnStatus_t s = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      h, kMode, CUDNN_BATCHNORM_OPS_BN, d.x, nullptr, d.x, d.stat, nullptr, &ws);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, kMode, CUDNN_BATCHNORM_OPS_BN,
                                                             nullptr, d.x, &rs);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        h, kMode, CUDNN_BATCHNORM_OPS_BN, d.x, nullptr, d.x, nullptr, d.x, d.stat, nullptr, &ws);
  const int answer = s == CUDNN_STATUS_SUCCESS ? 1 : 0;
  if (known.exchange(answer) < 0 && !answer)
    log_warn(
        "cuDNN batch norm (ADA_CUDA_BN_CUDNN=1): cuDNN does not take batch norm of {} tensors "
        "({}); Adatrain's batch-norm kernels run for them",
        dtype_name(t), cudnnGetErrorString(s));
  return answer == 1;
}

}  // namespace

bool cudnn_batch_norm_on() {
  const int o = g_cudnn_bn_override.load(std::memory_order_relaxed);
  if (o >= 0) return o == 1;
  static const bool on = env_switch(
      "ADA_CUDA_BN_CUDNN", false,
      "0 (Adatrain's batch-norm kernels, the default) or 1 (cuDNN's for channels-last training)");
  return on;
}

void set_cudnn_batch_norm(bool on) {
  g_cudnn_bn_override.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool cudnn_batch_norm_fits(const Tensor& x, float eps, const Tensor& residual) {
  if (!x.defined() || x.device().is_cpu() || x.dim() != 2) return false;
  if (x.dtype() != DType::f32 && x.dtype() != DType::bf16 && x.dtype() != DType::f16) return false;
  if (residual.defined() && (residual.dtype() != x.dtype() || residual.shape() != x.shape() ||
                             residual.device() != x.device()))
    return false;
  const int64_t m = x.size(0), c = x.size(1);
  return m > 1 && c > 0 && x.numel() <= INT_MAX && split_rows(m)[0] <= kMaxN &&
         eps >= CUDNN_BN_MIN_EPSILON && takes_dtype(m, c, x.dtype(), x.device().index);
}

CudnnBatchNorm cudnn_batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                      Tensor& running_mean, Tensor& running_var, float momentum,
                                      float eps, bool relu, const Tensor& residual) {
  const char* op = "cudnn_batch_norm_train";
  ADA_CHECK_ARG(cudnn_batch_norm_fits(x, eps, residual), ShapeError)
      << op << ": x " << x.str() << (residual.defined() ? ", residual " + residual.str() : "")
      << ", eps " << eps << ": needs a CUDA [M > 1, C] tensor of f32/bf16/f16 under 2^31 elements, "
      << "a residual of its shape and dtype, eps >= " << CUDNN_BN_MIN_EPSILON
      << "; use batch_norm_train";
  const int dev = x.device().index;
  set_device(dev);
  const int64_t m = x.size(0), c = x.size(1);
  check_channel_tensor(op, gamma, c, dev, "gamma");
  check_channel_tensor(op, beta, c, dev, "beta");
  const bool track = running_mean.defined();
  if (track) {
    check_channel_tensor(op, running_mean, c, dev, "running_mean");
    check_channel_tensor(op, running_var, c, dev, "running_var");
  }
  const Descs& d = descs(m, c, x.dtype());
  CudnnBatchNorm r;
  r.relu = relu;
  r.residual = residual.defined();
  r.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  r.save_mean = Tensor::empty({c}, DType::f32, x.device());
  r.save_invstd = Tensor::empty({c}, DType::f32, x.device());
  cudnnHandle_t h = cudnn(dev);
  const float one = 1.f, zero = 0.f;
  cudnnBatchNormOps_t f = form(relu, residual.defined());
  // One attempt in form f: CUDNN_STATUS_NOT_SUPPORTED from any of its three calls is returned,
  // every other failure thrown.
  auto attempt = [&](cudnnBatchNormOps_t fm) -> cudnnStatus_t {
    const bool act = fm != CUDNN_BATCHNORM_OPS_BN,
               add = fm == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    size_t ws = 0, rs = 0;
    cudnnStatus_t s = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        h, kMode, fm, d.x, add ? d.x : nullptr, d.x, d.stat, act ? d.relu : nullptr, &ws);
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, kMode, fm, act ? d.relu : nullptr,
                                                               d.x, &rs);
    if (s == CUDNN_STATUS_NOT_SUPPORTED) return s;
    ADA_CUDNN_CHECK(s);
    const Scratch work(ws, dev);
    r.reserve = Tensor::empty({static_cast<int64_t>((rs + 3) / 4)}, DType::i32, x.device());
    r.reserve_bytes = rs;
    s = cudnnBatchNormalizationForwardTrainingEx(
        h, kMode, fm, &one, &zero, d.x, x.raw_data(), add ? d.x : nullptr,
        add ? residual.raw_data() : nullptr, d.x, r.y.raw_data(), d.stat, gamma.raw_data(),
        beta.raw_data(), momentum, track ? running_mean.raw_data() : nullptr,
        track ? running_var.raw_data() : nullptr, eps, r.save_mean.raw_data(),
        r.save_invstd.raw_data(), act ? d.relu : nullptr, work.get(), ws,
        rs ? r.reserve.raw_data() : nullptr, rs);
    if (s == CUDNN_STATUS_NOT_SUPPORTED) return s;
    ADA_CUDNN_CHECK(s);
    return s;
  };
  if (f != CUDNN_BATCHNORM_OPS_BN && attempt(f) == CUDNN_STATUS_NOT_SUPPORTED) {
    note_refused(x.dtype(), f);
    f = CUDNN_BATCHNORM_OPS_BN;
  }
  if (f == CUDNN_BATCHNORM_OPS_BN) {
    ADA_CHECK_ARG(attempt(f) == CUDNN_STATUS_SUCCESS, ExternalError)
        << op << ": cuDNN does not support batch norm of " << x.str()
        << " (CUDNN_STATUS_NOT_SUPPORTED); unset ADA_CUDA_BN_CUDNN to use Adatrain's kernels";
    if (relu) r.y = residual.defined() ? add_relu(r.y, residual) : cuda::relu(r.y);
  } else {
    r.fused = true;
  }
  return r;
}

CudnnBatchNormGrads cudnn_batch_norm_backward(const Tensor& dy, const Tensor& x,
                                              const Tensor& gamma, const Tensor& beta,
                                              const CudnnBatchNorm& forward, float eps) {
  const char* op = "cudnn_batch_norm_backward";
  ADA_CHECK_ARG(cudnn_batch_norm_fits(x, eps, Tensor()), ShapeError)
      << op << ": x " << x.str() << " is not a tensor cudnn_batch_norm_train takes";
  const int dev = x.device().index;
  set_device(dev);
  const int64_t m = x.size(0), c = x.size(1);
  require_on(op, dev, {&dy, &forward.y, &forward.save_mean, &forward.save_invstd});
  ADA_CHECK_ARG(dy.dtype() == x.dtype() && forward.y.dtype() == x.dtype(), DTypeError)
      << op << ": dy " << dy.str() << ", y " << forward.y.str() << " and x " << x.str()
      << " must have one dtype";
  check_same_shape(dy, x, op);
  check_same_shape(forward.y, x, op);
  check_channel_tensor(op, gamma, c, dev, "gamma");
  check_channel_tensor(op, beta, c, dev, "beta");
  check_channel_tensor(op, forward.save_mean, c, dev, "save_mean");
  check_channel_tensor(op, forward.save_invstd, c, dev, "save_invstd");
  ADA_CHECK_ARG(forward.reserve.defined() &&
                    static_cast<size_t>(forward.reserve.numel()) * 4 >= forward.reserve_bytes,
                ShapeError)
      << op << ": the forward record has no reserve space of " << forward.reserve_bytes
      << " bytes: pass cudnn_batch_norm_train's result as it is";
  const Descs& d = descs(m, c, x.dtype());
  const bool relu = forward.relu, residual = forward.residual;
  const cudnnBatchNormOps_t f = forward.fused ? form(relu, residual) : CUDNN_BATCHNORM_OPS_BN;
  const bool act = f != CUDNN_BATCHNORM_OPS_BN, add = f == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  // Unfused ReLU: its gradient (the residual's too) is dy masked by y, then plain batch norm's.
  const Tensor g = relu && !forward.fused ? relu_backward(dy, forward.y) : dy;
  const Device dv = x.device();
  CudnnBatchNormGrads r{Tensor::empty(x.shape(), x.dtype(), dv), Tensor::empty({c}, DType::f32, dv),
                        Tensor::empty({c}, DType::f32, dv),
                        add ? Tensor::empty(x.shape(), x.dtype(), dv) : Tensor()};
  cudnnHandle_t h = cudnn(dev);
  const float one = 1.f, zero = 0.f;
  size_t ws = 0;
  ADA_CUDNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
      h, kMode, f, d.x, act ? d.x : nullptr, d.x, add ? d.x : nullptr, d.x, d.stat,
      act ? d.relu : nullptr, &ws));
  const Scratch work(ws, dev);
  ADA_CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
      h, kMode, f, &one, &zero, &one, &zero, d.x, x.raw_data(), act ? d.x : nullptr,
      act ? forward.y.raw_data() : nullptr, d.x, g.raw_data(), add ? d.x : nullptr,
      add ? r.dresidual.raw_data() : nullptr, d.x, r.dx.raw_data(), d.stat, gamma.raw_data(),
      act ? beta.raw_data() : nullptr, r.dgamma.raw_data(), r.dbeta.raw_data(), eps,
      forward.save_mean.raw_data(), forward.save_invstd.raw_data(), act ? d.relu : nullptr,
      work.get(), ws, forward.reserve_bytes ? forward.reserve.raw_data() : nullptr,
      forward.reserve_bytes));
  if (relu && residual && !forward.fused) r.dresidual = g;
  return r;
}

}  // namespace ada::cuda

#pragma GCC diagnostic pop
