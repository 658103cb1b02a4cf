// CUDA GEMM of core/ops.h (gemm, matmul, gemm_batched, bmm) on cuBLAS, and the process-wide
// TF32 switch of cuda_blas.h. Row-major operands go to column-major cuBLAS as their transposes:
// C^T = op(B)^T op(A)^T, so every call passes B first. Empty products (K = 0) only scale c by
// beta without touching cuBLAS's GEMM; beta = 0 never reads c, so NaN in c cannot leak through.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <string>

#include "core/backend/cuda/cuda_blas.h"
#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/op_shapes.h"
#include "core/precision.h"

namespace ada::cuda {
namespace {

// -1: not yet read from ADA_CUDA_TF32; 0: off; 1: on.
std::atomic<int> g_tf32{-1};

using backend::GemmDims;

// cuBLAS's 32-bit interface: sizes, leading dimensions and batch counts must fit an int.
int to_int(const char* op, const char* what, int64_t v) {
  ADA_CHECK_ARG(v <= INT_MAX, ShapeError)
      << op << ": " << what << " " << v << " exceeds cuBLAS's 32-bit limit (" << INT_MAX << ")";
  return static_cast<int>(v);
}

// c[0, count) *= beta on the device's stream; beta = 0 writes zeros without reading c.
void scale_c(int dev, float* c, int64_t count, float beta) {
  if (count == 0 || beta == 1.f) return;
  if (beta == 0.f) {
    zero(c, static_cast<size_t>(count) * sizeof(float), dev);
    return;
  }
  cublasHandle_t h = cublas(dev);
  constexpr int64_t kChunk = int64_t{1} << 30;
  for (int64_t off = 0; off < count; off += kChunk) {
    const int len = static_cast<int>(std::min(kChunk, count - off));
    ADA_CUBLAS_CHECK(cublasSscal(h, len, &beta, c + off, 1));
  }
}

// The 16-bit type the current precision multiplies in (f32 when it is fp32).
DType narrow_type() {
  return precision_dtype(cuda_matmul_precision());
}

// a and b f32, or already of the 16-bit type the current precision multiplies in
// (ops::matmul_operand); c (if given) f32; all on one device, made current. Returns it.
int require_operands(const char* op, const Tensor& a, const Tensor& b, const Tensor* c) {
  const DType narrow = narrow_type();
  if (narrow == DType::f32) {  // 16-bit operands under fp32: say what would allow them
    for (const Tensor* t : {&a, &b}) {
      ADA_CHECK_ARG(!t->defined() || (t->dtype() != DType::bf16 && t->dtype() != DType::f16),
                    DTypeError)
          << op << ": 16-bit operands (" << a.str() << ", " << b.str()
          << ") need a bf16/fp16 train.precision; it is fp32 now";
    }
  }
  const int dev = c ? require_f32(op, {&a, &b, c}, narrow) : require_f32(op, {&a, &b}, narrow);
  ADA_CHECK_ARG(!c || c->dtype() == DType::f32, DTypeError)
      << op << ": the result " << c->str() << " must be f32";
  return dev;
}

// c[i] = alpha * op(a[i]) op(b[i]) + beta * c[i] for i < batch, on densely packed row-major
// matrices laid one after another (a[i] is m x k or k x m, b[i] k x n or n x k, c[i] m x n).
// a and b are f32, or (under a 16-bit precision) already rounded to its type; c is f32, or
// (under a 16-bit precision, with beta 0) of its 16-bit type: cuBLAS rounds the f32 sums once.
void gemm_strided(const char* op, int dev, const Tensor& at, const Tensor& bt, void* c, DType ct,
                  const GemmDims& d, bool ta, bool tb, float alpha, float beta, int64_t batch) {
  ADA_CHECK_ARG(ct == DType::f32 || (ct == narrow_type() && beta == 0.f), DTypeError)
      << op << ": a " << dtype_name(ct) << " result needs train.precision "
      << (ct == DType::bf16 ? "bf16" : "fp16") << " (it is "
      << precision_name(cuda_matmul_precision()) << ")";
  if (batch == 0 || d.m == 0 || d.n == 0) return;
  if (d.k == 0) {
    if (ct == DType::f32)
      scale_c(dev, static_cast<float*>(c), batch * d.m * d.n, beta);
    else
      zero(c, static_cast<size_t>(batch * d.m * d.n) * dtype_size(ct), dev);
    return;
  }
  // Column-major view: C^T (n x m, ld n) = op(B)^T (n x k) * op(A)^T (k x m).
  const int m = to_int(op, "N", d.n), n = to_int(op, "M", d.m), k = to_int(op, "K", d.k);
  const int ldb = tb ? k : m;  // B stored [K,N] (row length N) or, transposed, [N,K]
  const int lda = ta ? n : k;  // A stored [M,K] (row length K) or, transposed, [K,M]
  const int ldc = m;
  const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasHandle_t h = cublas(dev);
  const Precision precision = cuda_matmul_precision();
  const long long sa = d.m * d.k, sb = d.k * d.n, sc = d.m * d.n;
  const int count = to_int(op, "batch", batch);
  if (precision == Precision::bf16 || precision == Precision::fp16) {
    // train.precision bf16 / fp16: both operands rounded to the 16-bit type (nearest even, like
    // the CPU's bf16 mode), products summed in fp32. cuBLAS's FAST_16BF compute type on fp32
    // operands does not promise that rounding (on an H200 it gave neither the rounded nor the
    // fp32 product), so the operands are cast here, as autocast does.
    // An operand that ops::matmul_operand already rounded is used as it is.
    const DType narrow = precision_dtype(precision);
    const cudaDataType_t type = precision == Precision::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const GemmOperand a16(at, narrow, dev), b16(bt, narrow, dev);
    const void *a = a16.p, *b = b16.p;
    const cudaDataType_t c_type = ct == DType::f32 ? CUDA_R_32F : type;
    ADA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, opb, opa, m, n, k, &alpha, b, type, ldb, sb, a,
                                                type, lda, sa, &beta, c, c_type, ldc, sc, count,
                                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  const float *a = at.data<float>(), *b = bt.data<float>();
  const cublasComputeType_t compute =
      allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  if (batch == 1) {
    ADA_CUBLAS_CHECK(cublasGemmEx(h, opb, opa, m, n, k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F,
                                  lda, &beta, c, CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT));
    return;
  }
  ADA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, opb, opa, m, n, k, &alpha, b, CUDA_R_32F, ldb, sb,
                                              a, CUDA_R_32F, lda, sa, &beta, c, CUDA_R_32F, ldc, sc,
                                              count, compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

bool allow_tf32() {
  int v = g_tf32.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("ADA_CUDA_TF32");
    int expected = -1;
    // A set_allow_tf32 that raced ahead of this first read wins.
    g_tf32.compare_exchange_strong(expected, env && std::string(env) == "1" ? 1 : 0);
    v = g_tf32.load();
  }
  return v == 1;
}

void set_allow_tf32(bool on) {
  g_tf32.store(on ? 1 : 0);
}

}  // namespace ada::cuda

namespace ada {
namespace {
std::atomic<Precision> g_cuda_precision{Precision::fp32};
}
void set_cuda_matmul_precision(Precision p) {
  g_cuda_precision.store(p, std::memory_order_relaxed);
}
Precision cuda_matmul_precision() {
  return g_cuda_precision.load(std::memory_order_relaxed);
}
}  // namespace ada

namespace ada::cuda {

void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, float alpha, float beta) {
  const int dev = require_operands("gemm", a, b, &c);
  const GemmDims d = backend::checked_gemm("gemm", a, b, &c, ta, tb);
  gemm_strided("gemm", dev, a, b, c.data<float>(), DType::f32, d, ta, tb, alpha, beta, 1);
}

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, DType out) {
  const int dev = require_operands("matmul", a, b, nullptr);
  const GemmDims d = backend::checked_gemm("matmul", a, b, nullptr, ta, tb);
  Tensor c = Tensor::empty({d.m, d.n}, out, a.device());
  gemm_strided("matmul", dev, a, b, c.raw_data(), out, d, ta, tb, 1.f, 0.f, 1);
  return c;
}

void gemm_batched(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, float alpha,
                  float beta) {
  const int dev = require_operands("gemm_batched", a, b, &c);
  const GemmDims d = backend::checked_gemm_batched("gemm_batched", a, b, c, ta, tb);
  const int64_t batch = a.size(0);
  gemm_strided("gemm_batched", dev, a, b, c.data<float>(), DType::f32, d, ta, tb, alpha, beta,
               batch);
}

Tensor matmul_operand(const Tensor& x) {
  const DType narrow = narrow_type();
  if (narrow == DType::f32 || x.dtype() != DType::f32) return x;
  const int dev = require_f32("matmul_operand", {&x});
  Tensor y = Tensor::empty(x.shape(), narrow, x.device());
  round_f32(x.data<float>(), y.raw_data(), x.numel(), narrow, dev);
  return y;
}

Tensor bmm(const Tensor& a, const Tensor& b, bool ta, bool tb, DType out) {
  const int dev = require_operands("bmm", a, b, nullptr);
  Tensor c = Tensor::empty(backend::bmm_shape("bmm", a, b, ta, tb), out, a.device());
  const GemmDims d = backend::checked_gemm_batched("bmm", a, b, c, ta, tb);
  gemm_strided("bmm", dev, a, b, c.raw_data(), out, d, ta, tb, 1.f, 0.f, a.size(0));
  return c;
}

}  // namespace ada::cuda
