// Our own fp32 GEMM for the CPU backend: BLIS-style cache blocking, packing of A and B into
// micro-panels and an FMA register-blocked micro-kernel (AVX-512: 8x32 zmm, AVX2+FMA: 6x16 ymm),
// multi-threaded on the shared OpenMP pool. Builds without AVX2+FMA fall back to Eigen.
#pragma once

#include <cstdint>

namespace ada::cpu {

// c[m,n] = alpha * op(a) op(b) + beta * c on row-major buffers, op(x) = x or x^T.
// op(a) is m x k: a is [m, lda] (lda >= k), or [k, lda] (lda >= m) when trans_a.
// op(b) is k x n: b is [k, ldb] (ldb >= n), or [n, ldb] (ldb >= k) when trans_b.
// c is [m, ldc] with ldc >= n; only its m x n window is touched. beta == 0 never reads c, so c
// may hold garbage (NaN) then. Any of m, n, k may be 0 (k == 0 gives c = beta * c).
// Runs on num_threads() threads, or on the calling thread alone inside an OpenMP parallel
// region (omp_in_parallel()). c must not alias a or b.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc);

// Which kernel this build uses, e.g. "avx2+fma 6x16"; for logs and benchmarks.
const char* sgemm_kernel_name();

}  // namespace ada::cpu
