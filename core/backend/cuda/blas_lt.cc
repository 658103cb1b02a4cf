// A linear layer's bias inside its GEMMs (issue 33 item 5: fewer launches and passes), on
// cuBLASLt: the forward adds the bias in the GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS, the f32 sums
// plus the f32 bias rounded once to the output type; for a 16-bit output where cuBLASLt takes no
// f32 bias, plus the bias rounded to that type), the weight gradient's GEMM also writes the
// bias gradient, the column sums of dy (CUBLASLT_EPILOGUE_BGRADB). Each saves a launch and a pass
// over the [rows, out] activation or gradient. GELU stays a kernel of its own: cuBLASLt's GELU
// epilogues compute the tanh approximation, BERT's is the exact erf form.
//
// cuBLASLt offers these epilogues for some shapes, types and alignments only. Its heuristic is
// asked once per (device, shape, transposes, types, TF32 mode, pointer alignments); where it
// offers no algorithm the functions return "not done" and ops:: composes the unfused kernels
// (matmul + add_bias, matmul + bias_grad). lt_epilogue_counts() says how often each happened;
// ADA_CUDA_LT_EPILOGUES=0 turns the fused path off (for A/B timing and debugging).
#include <cublasLt.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/backend/cuda/cuda_blas.h"
#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/op_shapes.h"
#include "core/precision.h"

namespace ada::cuda {
namespace {

std::atomic<int64_t> g_fused{0}, g_unfused{0};

bool lt_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("ADA_CUDA_LT_EPILOGUES");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

cublasLtHandle_t lt_handle(int dev) {
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(dev);
  if (it != handles.end()) return it->second;
  set_device(dev);
  cublasLtHandle_t h = nullptr;
  ADA_CUBLAS_CHECK(cublasLtCreate(&h));
  handles.emplace(dev, h);
  return h;
}

// The largest power of two up to 256 that divides the address: what cuBLASLt's heuristic is told
// each pointer guarantees.
int alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && a % static_cast<uintptr_t>(al) != 0) al /= 2;
  return al;
}

// What cuBLASLt may use as scratch; its heuristic reports what the chosen algorithm needs.
constexpr size_t kMaxWorkspace = size_t{32} << 20;

// A cuBLASLt object destroyed at scope exit.
template <class T, cublasStatus_t (*Destroy)(T)>
struct Owned {
  T h = nullptr;
  ~Owned() {
    if (h) Destroy(h);
  }
};
using Desc = Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using Layout = Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Pref = Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

struct Plan {
  bool ok = false;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

using PlanKey = std::tuple<int, int64_t, int64_t, int64_t, int, int, int, int, int, int, int, int,
                           int, int, int>;

// One column-major GEMM D (m x n, ld m) = op(A) op(B) with the epilogue `epi` on `bias`, on the
// device's stream; A and B of type `ab`, D of type `dt`. False (nothing launched) when cuBLASLt
// offers no algorithm for it.
bool lt_gemm(int dev, cublasOperation_t opa, cublasOperation_t opb, int m, int n, int k,
             const void* a, int lda, const void* b, int ldb, cudaDataType_t ab, void* d,
             cudaDataType_t dt, cublasLtEpilogue_t epi, void* bias, bool f32_bias_attr) {
  const cublasComputeType_t compute =
      ab == CUDA_R_32F && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const int al_a = alignment(a), al_b = alignment(b), al_d = alignment(d),
            al_bias = alignment(bias);
  const PlanKey key{dev,  m,    n,    k,       opa,
                    opb,  ab,   dt,   epi,     compute,
                    al_a, al_b, al_d, al_bias, f32_bias_attr ? 1 : 0};
  static std::mutex mu;
  static std::map<PlanKey, Plan> plans;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = plans.find(key);
    if (it != plans.end() && !it->second.ok) return false;  // refused before: no descriptors
  }
  Desc desc;
  if (cublasLtMatmulDescCreate(&desc.h, compute, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return false;
  const int32_t bias_type = CUDA_R_32F;
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t size) {
    return cublasLtMatmulDescSetAttribute(desc.h, attr, v, size) == CUBLAS_STATUS_SUCCESS;
  };
  if (!set(CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)) ||
      !set(CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)) ||
      !set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)) ||
      !set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)) ||
      (f32_bias_attr && !set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type))))
    return false;
  Layout la, lb, ld;
  if (cublasLtMatrixLayoutCreate(&la.h, ab, opa == CUBLAS_OP_N ? m : k, opa == CUBLAS_OP_N ? k : m,
                                 lda) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&lb.h, ab, opb == CUBLAS_OP_N ? k : n, opb == CUBLAS_OP_N ? n : k,
                                 ldb) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&ld.h, dt, m, n, m) != CUBLAS_STATUS_SUCCESS)
    return false;

  Plan plan;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = plans.find(key);
    if (it != plans.end()) {
      plan = it->second;
    } else {
      Pref pref;
      const uint64_t max_ws = kMaxWorkspace;
      const uint32_t ua = al_a, ub = al_b, ud = al_d;
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      if (cublasLtMatmulPreferenceCreate(&pref.h) == CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &max_ws, sizeof(max_ws)) == CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                               &ua, sizeof(ua)) == CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                               &ub, sizeof(ub)) == CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                               &ud, sizeof(ud)) == CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                               &ud, sizeof(ud)) == CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulAlgoGetHeuristic(lt_handle(dev), desc.h, la.h, lb.h, ld.h, ld.h, pref.h, 1,
                                         &result, &found) == CUBLAS_STATUS_SUCCESS &&
          found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
        plan.ok = true;
        plan.algo = result.algo;
        plan.workspace = result.workspaceSize;
      }
      plans.emplace(key, plan);
    }
  }
  if (!plan.ok) return false;
  Scratch ws(plan.workspace, dev);
  const float alpha = 1.f, beta = 0.f;
  const cublasStatus_t st =
      cublasLtMatmul(lt_handle(dev), desc.h, &alpha, a, la.h, b, lb.h, &beta, d, ld.h, d, ld.h,
                     &plan.algo, ws.get(), plan.workspace, stream(dev));
  // The heuristic's yes does not promise the launch ("will fail if e.g. buffers are not correctly
  // aligned", cublasLt.h): a refusal launches nothing, so the case falls back, now and later.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ||
      st == CUBLAS_STATUS_ARCH_MISMATCH) {
    std::lock_guard<std::mutex> lock(mu);
    plans[key].ok = false;
    return false;
  }
  ADA_CUBLAS_CHECK(st);
  return true;
}

// Whether the product is not empty (an empty one is left to the unfused path, which handles it)
// and every size is below 65535 x 32: PyTorch's limit for its cuBLASLt bias epilogue, past which
// a bias epilogue failed to execute on an A100 (pytorch/pytorch#73455).
bool lt_sizes(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kLimit = int64_t{65535} * 32;
  return m > 0 && n > 0 && k > 0 && m < kLimit && n < kLimit && k < kLimit;
}

cudaDataType_t cuda_type(DType t) {
  return t == DType::bf16 ? CUDA_R_16BF : t == DType::f16 ? CUDA_R_16F : CUDA_R_32F;
}

bool counted(bool fused) {
  (fused ? g_fused : g_unfused).fetch_add(1, std::memory_order_relaxed);
  return fused;
}

}  // namespace

Tensor linear_bias_lt(const Tensor& x, const Tensor& w, const Tensor& b, DType out) {
  const DType narrow = precision_dtype(cuda_matmul_precision());
  const int dev = require_f32("linear", {&x, &w}, narrow);
  require_on("linear", dev, {&b});
  const backend::GemmDims dims = backend::checked_gemm("linear", x, w, nullptr, false, true);
  ADA_CHECK_ARG(b.dim() == 1 && b.size(0) == dims.n, ShapeError)
      << "linear: bias " << b.str() << " should be [" << dims.n << "]";
  ADA_CHECK_ARG(out == DType::f32 || out == narrow, DTypeError)
      << "linear: a " << dtype_name(out) << " result needs train.precision "
      << (out == DType::bf16 ? "bf16" : "fp16");
  if (!lt_enabled() || !lt_sizes(dims.m, dims.n, dims.k) || b.dtype() != DType::f32) {
    counted(false);
    return Tensor();
  }
  Tensor y = Tensor::empty({dims.m, dims.n}, out, x.device());
  GemmOperand xa(x, narrow, dev), wa(w, narrow, dev);
  // Column-major: Y^T (n x m, ld n) = W (op T of the stored [n,k]) * X^T; the bias runs down D's
  // n rows.
  const int m = static_cast<int>(dims.n), n = static_cast<int>(dims.m),
            k = static_cast<int>(dims.k);
  auto gemm = [&](const Tensor& bias, bool f32_bias_attr) {
    return lt_gemm(dev, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, wa.p, k, xa.p, k, cuda_type(narrow),
                   y.raw_data(), cuda_type(out), CUBLASLT_EPILOGUE_BIAS,
                   const_cast<void*>(bias.raw_data()), f32_bias_attr);
  };
  // A 16-bit result with the f32 bias, else (cuBLASLt on an H200 refused that for bf16, its
  // documented bias type being the result's) with the bias rounded to the result's type, as
  // autocast's linear does: one more rounding, of the bias alone (a vector of n values).
  bool done = gemm(b, out != DType::f32);
  if (!done && out != DType::f32) done = gemm(matmul_operand(b), false);
  if (!counted(done)) return Tensor();
  return y;
}

bool linear_weight_grad_lt(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db) {
  const DType narrow = precision_dtype(cuda_matmul_precision());
  const int dev = require_f32("linear_weight_grad", {&dy, &x}, narrow);
  const backend::GemmDims dims =
      backend::checked_gemm("linear_weight_grad", dy, x, nullptr, true, false);
  // The epilogue sums dy as the GEMM reads it: rounded to the 16-bit type (only a dy already of
  // that type, 16-bit activations, gives bias_grad's values) or, with TF32 on, perhaps to TF32.
  if (!lt_enabled() || !lt_sizes(dims.m, dims.n, dims.k) ||
      (narrow != DType::f32 && dy.dtype() != narrow) || (narrow == DType::f32 && allow_tf32()))
    return counted(false);
  Tensor w_grad = Tensor::empty({dims.m, dims.n}, DType::f32, x.device());
  Tensor b_grad = Tensor::empty({dims.m}, DType::f32, x.device());
  GemmOperand ga(dy, narrow, dev), xa(x, narrow, dev);
  // Column-major: dW^T (n x m, ld n) = X^T (x's stored [rows, n] is n x rows) * op T(dY^T); the
  // bias gradient sums B = dY over the GEMM's k (the rows), one value per column of D.
  const int m = static_cast<int>(dims.n), n = static_cast<int>(dims.m),
            k = static_cast<int>(dims.k);
  if (!counted(lt_gemm(dev, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, xa.p, m, ga.p, n, cuda_type(narrow),
                       w_grad.raw_data(), CUDA_R_32F, CUBLASLT_EPILOGUE_BGRADB, b_grad.raw_data(),
                       false)))
    return false;
  dw = w_grad;
  db = b_grad;
  return true;
}

LtEpilogueCounts lt_epilogue_counts() {
  return {g_fused.load(std::memory_order_relaxed), g_unfused.load(std::memory_order_relaxed)};
}

std::string epilogue_report() {
  const LtEpilogueCounts c = lt_epilogue_counts();
  return "cuBLASLt bias epilogues: " + std::to_string(c.fused) + " GEMMs fused, " +
         std::to_string(c.unfused) + " unfused" +
         (lt_enabled() ? "" : " (turned off: ADA_CUDA_LT_EPILOGUES=0)");
}

}  // namespace ada::cuda
