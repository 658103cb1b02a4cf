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

// c[i] = alpha * op(a[i]) op(b[i]) + beta * c[i] for i < batch, on densely packed row-major
// matrices laid one after another (a[i] is m x k or k x m, b[i] k x n or n x k, c[i] m x n).
void gemm_strided(const char* op, int dev, const float* a, const float* b, float* c,
                  const GemmDims& d, bool ta, bool tb, float alpha, float beta, int64_t batch) {
  if (batch == 0 || d.m == 0 || d.n == 0) return;
  if (d.k == 0) {
    scale_c(dev, c, batch * d.m * d.n, beta);
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
    const DType narrow = precision == Precision::bf16 ? DType::bf16 : DType::f16;
    const cudaDataType_t type = precision == Precision::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    Scratch a16(static_cast<size_t>(batch * sa) * 2, dev),
        b16(static_cast<size_t>(batch * sb) * 2, dev);
    round_f32(a, a16.get(), batch * sa, narrow, dev);
    round_f32(b, b16.get(), batch * sb, narrow, dev);
    ADA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        h, opb, opa, m, n, k, &alpha, b16.get(), type, ldb, sb, a16.get(), type, lda, sa, &beta, c,
        CUDA_R_32F, ldc, sc, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
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
  const int dev = require_f32("gemm", {&a, &b, &c});
  const GemmDims d = backend::checked_gemm("gemm", a, b, &c, ta, tb);
  gemm_strided("gemm", dev, a.data<float>(), b.data<float>(), c.data<float>(), d, ta, tb, alpha,
               beta, 1);
}

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const int dev = require_f32("matmul", {&a, &b});
  const GemmDims d = backend::checked_gemm("matmul", a, b, nullptr, ta, tb);
  Tensor c = Tensor::empty({d.m, d.n}, DType::f32, a.device());
  gemm_strided("matmul", dev, a.data<float>(), b.data<float>(), c.data<float>(), d, ta, tb, 1.f,
               0.f, 1);
  return c;
}

void gemm_batched(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, float alpha,
                  float beta) {
  const int dev = require_f32("gemm_batched", {&a, &b, &c});
  const GemmDims d = backend::checked_gemm_batched("gemm_batched", a, b, c, ta, tb);
  const int64_t batch = a.size(0);
  gemm_strided("gemm_batched", dev, a.data<float>(), b.data<float>(), c.data<float>(), d, ta, tb,
               alpha, beta, batch);
}

Tensor bmm(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  require_f32("bmm", {&a, &b});
  Tensor c = Tensor::empty(backend::bmm_shape("bmm", a, b, ta, tb), DType::f32, a.device());
  gemm_batched(a, b, c, ta, tb, 1.f, 0.f);
  return c;
}

}  // namespace ada::cuda
