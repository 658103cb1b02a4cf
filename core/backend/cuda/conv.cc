// CUDA conv2d forward, backward-data and backward-filter of core/ops.h (NCHW, or NHWC with
// Conv2dParams::channels_last; weights [Cout, Cin, kh, kw], given to cuDNN as [Cout, kh, kw, Cin]
// copies for NHWC, and the filter gradient permuted back) on cuDNN's legacy convolution API,
// float data and float compute; under
// 16-bit activations the forward and backward-data passes take and give tensors of
// train.precision's 16-bit type with the weights rounded to it (cuDNN's bf16 / fp16 data with
// float compute on tensor cores), while the filter gradient stays an f32 pass on f32 tensors.
// Argument checks and messages are those of core/backend/cpu/conv.cc. Each (device, direction,
// shapes, parameters, math mode) gets a plan once: descriptors plus the algorithm chosen by
// cuDNN's heuristics (see choose_*), cached for the life of the process.
#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend/cuda/cuda_blas.h"
#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/op_shapes.h"
#include "core/precision.h"

// cuDNN 9 marks the legacy convolution API deprecated (warned about only when
// CUDNN_WARN_DEPRECATED is defined); it is still shipped in libcudnn_cnn and is what we use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace ada::cuda {
namespace {

// Algorithms that need more workspace than this are passed over.
constexpr size_t kMaxWorkspace = size_t{1} << 30;

using backend::ConvGeom;
using backend::make_geom;

// True when some operand is empty: the result is then all zeros (or empty) without cuDNN,
// which rejects zero-sized descriptors.
bool degenerate(const ConvGeom& g) {
  return g.n == 0 || g.c == 0 || g.h == 0 || g.w == 0 || g.k == 0 || g.r == 0 || g.s == 0 ||
         g.p == 0 || g.q == 0;
}

// The legacy API describes tensors with int dimensions and at most 2^31-1 elements each.
void require_int_sizes(const char* op, const ConvGeom& g) {
  const int64_t sizes[] = {g.n * g.c * g.h * g.w, g.k * g.c * g.r * g.s, g.n * g.k * g.p * g.q};
  for (int64_t s : sizes)
    ADA_CHECK_ARG(s <= INT_MAX, ShapeError)
        << op << ": a tensor of " << s << " elements exceeds cuDNN's limit of " << INT_MAX
        << " (input [" << g.n << "," << g.c << "," << g.h << "," << g.w << "], output [" << g.n
        << "," << g.k << "," << g.p << "," << g.q << "]); lower the batch size";
}

enum class Dir { forward = 0, backward_data = 1, backward_filter = 2 };

// Descriptors of one convolution in one direction, and its algorithm. Immutable once built,
// so concurrent calls may share it; conv carries the math type the algorithm was chosen with.
struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t by direction
  size_t workspace = 0;
  int math = 0;          // the cudnnMathType_t set on `conv`
  bool offered = false;  // the heuristic offered a qualifying algorithm (else the fallback)
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

// The math a plan may use: fp32 FMA only; TF32 tensor cores (ADA_CUDA_TF32=1, or bf16 matrix
// products: cuDNN has no bf16 mode for fp32 tensors); or, for fp16 matrix products, tensor cores
// with the fp32 inputs rounded to fp16 (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION).
enum class ConvMath { fma, tf32, fp16 };

ConvMath current_math() {
  if (cuda_matmul_precision() == Precision::fp16) return ConvMath::fp16;
  return allow_tf32() || cuda_matmul_precision() == Precision::bf16 ? ConvMath::tf32
                                                                    : ConvMath::fma;
}

// How an algorithm suits 16-bit tensors, which promise 16-bit inputs and outputs with fp32 sums.
// Measured by apps/conv_survey.cc on an H200 with cuDNN 9.14 (2026-11-27,
// docs/results/gpu_h200/conv_survey_2026-11-27.log: every algorithm and math type of six shapes,
// 3x3/1x1/7x7 kernels, strides 1 and 2, bf16 and fp16, NCHW and NHWC, against a double reference,
// in units of one 16-bit rounding plus an fp32 summation bound):
//   - backward algorithm 0 (data and filter) adds into the 16-bit output with atomics: up to 105x
//     that bound (backward-data in NCHW, backward-filter in both layouts): never used;
//   - backward-data algorithm 1 in fp16 NCHW: 4-5x over on x [4,8,13,13], w [16,8,3,3] and within
//     on the other five shapes: used only when nothing else qualifies;
//   - every forward algorithm, and FFT and Winograd in all three directions, stayed within.
enum class Fit { ok, last_resort, never };

// -1: as ADA_CUDA_DETERMINISTIC says; 0 or 1: as set_deterministic_algorithms said (read here
// for the convolutions' plans and by embedding_backward (misc.cu) and max-pool backward
// (pool.cu) for their ordered kernels).
std::atomic<int> g_deterministic{-1};
struct Tensors {
  bool sixteen_bit = false, fp16_nchw = false;
  bool deterministic = false;  // set_deterministic_algorithms: no atomic algorithms
};
Fit fit(cudnnConvolutionFwdAlgo_t, Tensors) {
  return Fit::ok;
}
Fit fit(cudnnConvolutionBwdDataAlgo_t a, Tensors t) {
  if (!t.sixteen_bit) return Fit::ok;
  if (a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) return Fit::never;
  return t.fp16_nchw && a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 ? Fit::last_resort : Fit::ok;
}
Fit fit(cudnnConvolutionBwdFilterAlgo_t a, Tensors t) {
  return t.sixteen_bit && a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ? Fit::never : Fit::ok;
}

// The first heuristic result that succeeded, fits kMaxWorkspace, uses no more than `math`
// allows (fma: CUDNN_FMA_MATH only, as cuDNN's other math types may use TF32 tensor cores for
// fp32; tf32: anything but the fp16 down-conversion) and suits the tensors (fit), a last resort
// only when no other does. The heuristics' order is kept otherwise: non-deterministic (atomic)
// backward algorithms are not avoided for f32, so backward results may differ between runs by
// fp32 rounding, unless set_deterministic_algorithms(true) (or ADA_CUDA_DETERMINISTIC=1) rules
// them out.
template <class Perf>
bool pick(const std::vector<Perf>& perfs, int got, ConvMath math, Tensors t, Perf& out) {
  for (Fit allowed : {Fit::ok, Fit::last_resort})
    for (int i = 0; i < got && i < static_cast<int>(perfs.size()); ++i) {
      const Perf& p = perfs[static_cast<size_t>(i)];
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace) continue;
      if (t.deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
      const Fit f = fit(p.algo, t);
      if (f == Fit::never || (f == Fit::last_resort && allowed == Fit::ok)) continue;
      if (math == ConvMath::fma && p.mathType != CUDNN_FMA_MATH) continue;
      if (math == ConvMath::tf32 && p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
      out = p;
      return true;
    }
  return false;
}

// The plan's math type set on its descriptor and kept for conv_plans_report.
void set_math(Plan& pl, cudnnMathType_t math) {
  ADA_CUDNN_CHECK(cudnnSetConvolutionMathType(pl.conv, math));
  pl.math = static_cast<int>(math);
}

// Each choose_* sets plan.algo, the conv descriptor's math type and plan.workspace. When no
// heuristic result qualifies, algorithm 0 (implicit GEMM, always supported) in `math` is used,
// or for 16-bit backward directions algorithm 1 (algorithm 0 never suits them; see fit).
void choose_forward(cudnnHandle_t h, Plan& pl, ConvMath allowed, cudnnMathType_t math, Tensors t) {
  int max = 0;
  ADA_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(static_cast<size_t>(std::max(max, 1)));
  int got = 0;
  ADA_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
      h, pl.x, pl.w, pl.conv, pl.y, static_cast<int>(perfs.size()), &got, perfs.data()));
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionFwdAlgoPerf_t best{};
  pl.offered = pick(perfs, got, allowed, t, best);
  if (pl.offered) {
    algo = best.algo;
    math = best.mathType;
  }
  set_math(pl, math);
  ADA_CUDNN_CHECK(
      cudnnGetConvolutionForwardWorkspaceSize(h, pl.x, pl.w, pl.conv, pl.y, algo, &pl.workspace));
  pl.algo = static_cast<int>(algo);
}

void choose_backward_data(cudnnHandle_t h, Plan& pl, ConvMath allowed, cudnnMathType_t math,
                          Tensors t) {
  int max = 0;
  ADA_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(static_cast<size_t>(std::max(max, 1)));
  int got = 0;
  ADA_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      h, pl.w, pl.y, pl.conv, pl.x, static_cast<int>(perfs.size()), &got, perfs.data()));
  cudnnConvolutionBwdDataAlgo_t algo = t.sixteen_bit || t.deterministic
                                           ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_1
                                           : CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  cudnnConvolutionBwdDataAlgoPerf_t best{};
  pl.offered = pick(perfs, got, allowed, t, best);
  if (pl.offered) {
    algo = best.algo;
    math = best.mathType;
  }
  set_math(pl, math);
  ADA_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, pl.w, pl.y, pl.conv, pl.x, algo,
                                                               &pl.workspace));
  pl.algo = static_cast<int>(algo);
}

void choose_backward_filter(cudnnHandle_t h, Plan& pl, ConvMath allowed, cudnnMathType_t math,
                            Tensors t) {
  int max = 0;
  ADA_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(static_cast<size_t>(std::max(max, 1)));
  int got = 0;
  ADA_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, pl.x, pl.y, pl.conv, pl.w, static_cast<int>(perfs.size()), &got, perfs.data()));
  cudnnConvolutionBwdFilterAlgo_t algo = t.sixteen_bit || t.deterministic
                                             ? CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1
                                             : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
  cudnnConvolutionBwdFilterAlgoPerf_t best{};
  pl.offered = pick(perfs, got, allowed, t, best);
  if (pl.offered) {
    algo = best.algo;
    math = best.mathType;
  }
  set_math(pl, math);
  ADA_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, pl.x, pl.y, pl.conv, pl.w, algo,
                                                                 &pl.workspace));
  pl.algo = static_cast<int>(algo);
}

// conv_plans_report()'s lines, one per plan made (never destroyed, as the plan cache).
std::mutex& report_mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<std::string>& report_lines() {
  static auto* lines = new std::vector<std::string>;
  return *lines;
}

std::unique_ptr<Plan> make_plan(int dev, Dir dir, const ConvGeom& g, ConvMath allowed,
                                cudnnDataType_t data) {
  auto pl = std::make_unique<Plan>();
  ADA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&pl->x));
  ADA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&pl->y));
  ADA_CUDNN_CHECK(cudnnCreateFilterDescriptor(&pl->w));
  ADA_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&pl->conv));
  // require_int_sizes has bounded every dimension by INT_MAX.
  auto i = [](int64_t v) { return static_cast<int>(v); };
  const Conv2dParams& p = g.prm;
  // NHWC tensors with NHWC ([Cout, kh, kw, Cin]) filters: cuDNN's channels-last convolutions.
  const cudnnTensorFormat_t fmt = p.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  ADA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(pl->x, fmt, data, i(g.n), i(g.c), i(g.h), i(g.w)));
  ADA_CUDNN_CHECK(cudnnSetFilter4dDescriptor(pl->w, data, fmt, i(g.k), i(g.c), i(g.r), i(g.s)));
  ADA_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(pl->conv, p.pad_h, p.pad_w, p.stride_h,
                                                  p.stride_w, p.dil_h, p.dil_w,
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  const cudnnMathType_t math = allowed == ConvMath::fp16   ? CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
                               : allowed == ConvMath::tf32 ? CUDNN_TENSOR_OP_MATH
                                                           : CUDNN_FMA_MATH;
  ADA_CUDNN_CHECK(cudnnSetConvolutionMathType(pl->conv, math));
  int on = 0, oc = 0, oh = 0, ow = 0;
  ADA_CUDNN_CHECK(
      cudnnGetConvolution2dForwardOutputDim(pl->conv, pl->x, pl->w, &on, &oc, &oh, &ow));
  ADA_CHECK(on == g.n && oc == g.k && oh == g.p && ow == g.q)
      << "cuDNN's conv output [" << on << "," << oc << "," << oh << "," << ow << "] differs from ["
      << g.n << "," << g.k << "," << g.p << "," << g.q << "]";
  ADA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(pl->y, fmt, data, i(g.n), i(g.k), i(g.p), i(g.q)));
  cudnnHandle_t h = cudnn(dev);
  const Tensors t{data != CUDNN_DATA_FLOAT, data == CUDNN_DATA_HALF && !p.channels_last,
                  deterministic_algorithms()};
  switch (dir) {
    case Dir::forward:
      choose_forward(h, *pl, allowed, math, t);
      break;
    case Dir::backward_data:
      choose_backward_data(h, *pl, allowed, math, t);
      break;
    case Dir::backward_filter:
      choose_backward_filter(h, *pl, allowed, math, t);
      break;
  }
  {
    static const char* const kDir[] = {"forward", "backward-data", "backward-filter"};
    static const char* const kAlgoEnum[] = {"Fwd", "BwdData", "BwdFilter"};
    std::ostringstream line;
    line << "[ conv     ] " << kDir[static_cast<int>(dir)] << " x [" << g.n << "," << g.c << ","
         << g.h << "," << g.w << "] w [" << g.k << "," << g.c << "," << g.r << "," << g.s << "] "
         << (p.channels_last ? "NHWC " : "NCHW ")
         << (data == CUDNN_DATA_BFLOAT16 ? "bf16"
             : data == CUDNN_DATA_HALF   ? "f16"
                                         : "f32")
         << ": algorithm " << pl->algo << " (cudnnConvolution" << kAlgoEnum[static_cast<int>(dir)]
         << "Algo_t), math type " << pl->math << ", "
         << (pl->offered ? "offered by the heuristic" : "none offered: the fallback")
         << ", workspace " << pl->workspace << " bytes";
    std::lock_guard<std::mutex> lock(report_mu());
    report_lines().push_back(line.str());
  }
  return pl;
}

// The cached plan for this convolution on tensors of dtype t under the current math mode
// (current_math(); 16-bit tensors: tensor cores, as their products are 16-bit already). Plans are
// never evicted or destroyed (the cache outlives static destruction on purpose), so the
// reference stays valid.
const Plan& get_plan(int dev, Dir dir, const ConvGeom& g, DType t = DType::f32) {
  using Key = std::array<int64_t, 19>;
  static std::mutex* mu = new std::mutex;
  static auto* cache = new std::map<Key, std::unique_ptr<Plan>>;
  const ConvMath math = t == DType::f32 ? current_math() : ConvMath::tf32;
  const Conv2dParams& p = g.prm;
  const Key key{dev,
                static_cast<int64_t>(dir),
                g.n,
                g.c,
                g.h,
                g.w,
                g.k,
                g.r,
                g.s,
                p.stride_h,
                p.stride_w,
                p.pad_h,
                p.pad_w,
                p.dil_h,
                p.dil_w,
                static_cast<int64_t>(math),
                static_cast<int64_t>(t),
                p.channels_last ? 1 : 0,
                deterministic_algorithms() ? 1 : 0};
  std::lock_guard<std::mutex> lock(*mu);
  auto it = cache->find(key);
  if (it != cache->end()) return *it->second;
  std::unique_ptr<Plan> plan = make_plan(dev, dir, g, math, cudnn_data_type(t));
  const Plan& ref = *plan;
  cache->emplace(key, std::move(plan));
  return ref;
}

// The weights as a conv on `act` tensors reads them: w itself (f32, or already of act's 16-bit
// type), or f32 w rounded to act's type in `scratch`.
const void* weights_as(const Tensor& w, DType act, Scratch& scratch, int dev) {
  if (w.dtype() == act) return w.raw_data();
  round_f32(w.data<float>(), scratch.get(), w.numel(), act, dev);
  return scratch.get();
}

// The weights in the filter layout of the plan: w ([Cout, Cin, kh, kw]) for NCHW, a
// [Cout, kh, kw, Cin] copy for NHWC (alive until the caller's call is queued: the allocator
// reuses it only behind it on the stream). A 1x1 filter has the same bytes in both layouts.
Tensor filter_layout(const Tensor& w, const Conv2dParams& prm) {
  if (!prm.channels_last) return w;
  if (w.size(2) == 1 && w.size(3) == 1) return w.reshape({w.size(0), 1, 1, w.size(1)});
  return permute(w, {0, 2, 3, 1});
}

// The shapes of a conv's activations in its layout.
Shape out_shape(const ConvGeom& g) {
  return g.prm.channels_last ? Shape{g.n, g.p, g.q, g.k} : Shape{g.n, g.k, g.p, g.q};
}

// x (or dy) f32, or of train.precision's 16-bit type (16-bit activations); w f32 or of x's type.
int require_conv_operands(const char* op, const Tensor& x, const Tensor& w) {
  const int dev = require_f32(op, {&x, &w}, precision_dtype(cuda_matmul_precision()));
  ADA_CHECK_ARG(w.dtype() == DType::f32 || w.dtype() == x.dtype(), DTypeError)
      << op << ": the weights " << w.str() << " must be f32 or of the input's type "
      << dtype_name(x.dtype());
  return dev;
}

}  // namespace

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Conv2dParams& prm) {
  const int dev = require_conv_operands("conv2d_forward", x, w);
  ConvGeom g = make_geom("conv2d_forward", x.shape(), w.shape(), prm);
  Tensor y = Tensor::empty(out_shape(g), x.dtype(), x.device());
  if (y.numel() == 0) return y;
  if (degenerate(g)) {  // no input channels, an empty kernel or image: every output is 0
    zero(y.raw_data(), y.nbytes(), dev);
    return y;
  }
  require_int_sizes("conv2d_forward", g);
  const Plan& pl = get_plan(dev, Dir::forward, g, x.dtype());
  const Tensor wl = filter_layout(w, prm);
  Scratch ws(pl.workspace, dev), w16(wl.dtype() == x.dtype() ? 0 : wl.numel() * 2, dev);
  const void* wp = weights_as(wl, x.dtype(), w16, dev);
  const float one = 1.f, zero_f = 0.f;  // beta = 0: y is not read
  ADA_CUDNN_CHECK(cudnnConvolutionForward(cudnn(dev), &one, pl.x, x.raw_data(), pl.w, wp, pl.conv,
                                          static_cast<cudnnConvolutionFwdAlgo_t>(pl.algo), ws.get(),
                                          pl.workspace, &zero_f, pl.y, y.raw_data()));
  return y;
}

Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2dParams& prm) {
  const int dev = require_conv_operands("conv2d_backward_data", dy, w);
  ConvGeom g = make_geom("conv2d_backward_data", x_shape, w.shape(), prm);
  ADA_CHECK_ARG(dy.shape() == out_shape(g), ShapeError)
      << "conv2d_backward_data: gradient " << dy.str() << " should be " << shape_str(out_shape(g));
  if (degenerate(g)) return Tensor::zeros(x_shape, dy.dtype(), dy.device());
  require_int_sizes("conv2d_backward_data", g);
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  const Plan& pl = get_plan(dev, Dir::backward_data, g, dy.dtype());
  const Tensor wl = filter_layout(w, prm);
  Scratch ws(pl.workspace, dev), w16(wl.dtype() == dy.dtype() ? 0 : wl.numel() * 2, dev);
  const void* wp = weights_as(wl, dy.dtype(), w16, dev);
  const float one = 1.f, zero_f = 0.f;  // beta = 0: dx is not read
  ADA_CUDNN_CHECK(
      cudnnConvolutionBackwardData(cudnn(dev), &one, pl.w, wp, pl.y, dy.raw_data(), pl.conv,
                                   static_cast<cudnnConvolutionBwdDataAlgo_t>(pl.algo), ws.get(),
                                   pl.workspace, &zero_f, pl.x, dx.raw_data()));
  return dx;
}

Tensor conv2d_backward_filter(const Tensor& dy, const Tensor& x, const Shape& w_shape,
                              const Conv2dParams& prm) {
  // f32, or both of train.precision's 16-bit type (16-bit activations).
  const int dev =
      require_f32("conv2d_backward_filter", {&dy, &x}, precision_dtype(cuda_matmul_precision()));
  ADA_CHECK_ARG(dy.dtype() == x.dtype(), DTypeError)
      << "conv2d_backward_filter: gradient " << dy.str() << " and input " << x.str()
      << " must be of one dtype";
  const DType t = dy.dtype();
  ConvGeom g = make_geom("conv2d_backward_filter", x.shape(), w_shape, prm);
  ADA_CHECK_ARG(dy.shape() == out_shape(g), ShapeError)
      << "conv2d_backward_filter: gradient " << dy.str() << " should be "
      << shape_str(out_shape(g));
  if (degenerate(g)) return Tensor::zeros(w_shape, DType::f32, dy.device());
  require_int_sizes("conv2d_backward_filter", g);
  const Plan& pl = get_plan(dev, Dir::backward_filter, g, t);
  if (t != DType::f32 && !pl.offered) return Tensor();  // the caller takes f32 copies
  // NHWC: cuDNN writes the [Cout, kh, kw, Cin] filter's gradient, permuted back below. From
  // 16-bit tensors it is written in their type (fp32 sums rounded once, as autocast's filter
  // gradient) and widened to f32 here: a filter-sized cast instead of two activation-sized ones.
  Tensor dw =
      Tensor::empty(prm.channels_last ? Shape{g.k, g.r, g.s, g.c} : w_shape, t, dy.device());
  Scratch ws(pl.workspace, dev);
  const float one = 1.f, zero_f = 0.f;  // beta = 0: dw is not read
  ADA_CUDNN_CHECK(
      cudnnConvolutionBackwardFilter(cudnn(dev), &one, pl.x, x.raw_data(), pl.y, dy.raw_data(),
                                     pl.conv, static_cast<cudnnConvolutionBwdFilterAlgo_t>(pl.algo),
                                     ws.get(), pl.workspace, &zero_f, pl.w, dw.raw_data()));
  if (t != DType::f32) {
    Tensor wide = Tensor::empty(dw.shape(), DType::f32, dw.device());
    cast_out(dw, wide);
    dw = wide;
  }
  if (!prm.channels_last) return dw;
  return g.r == 1 && g.s == 1 ? dw.reshape(w_shape) : permute(dw, {0, 3, 1, 2});
}

void set_deterministic_algorithms(bool on) {
  g_deterministic.store(on ? 1 : 0);
}

bool deterministic_algorithms() {
  const int set = g_deterministic.load();
  if (set >= 0) return set == 1;
  static const bool env = [] {
    const char* v = std::getenv("ADA_CUDA_DETERMINISTIC");
    return v && std::string(v) == "1";
  }();
  return env;
}

std::string conv_plans_report() {
  std::lock_guard<std::mutex> lock(report_mu());
  std::string out;
  for (const std::string& line : report_lines()) out += line + "\n";
  return out;
}

}  // namespace ada::cuda

#pragma GCC diagnostic pop
