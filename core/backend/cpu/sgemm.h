// Our own GEMM for the CPU backend: BLIS-style cache blocking, packing of A and B into
// micro-panels and a register-blocked micro-kernel, multi-threaded on the shared OpenMP pool.
// Kernels (core/backend/cpu/gemm_kernels.h) are picked at run time by CPUID (core/cpu_isa.h):
// AVX-512F 8x32, AVX2+FMA 6x16, Eigen on CPUs without AVX2; bf16 inputs on AVX512_BF16
// (vdpbf16ps 8x32, or AMX tiles 32x32 where the CPU has them).
#pragma once

#include <cstdint>

namespace ada::cpu {

// c[m,n] = alpha * op(a) op(b) + beta * c on row-major buffers, op(x) = x or x^T, in fp32.
// op(a) is m x k: a is [m, lda] (lda >= k), or [k, lda] (lda >= m) when trans_a.
// op(b) is k x n: b is [k, ldb] (ldb >= n), or [n, ldb] (ldb >= k) when trans_b.
// c is [m, ldc] with ldc >= n; only its m x n window is touched. beta == 0 never reads c, so c
// may hold garbage (NaN) then. Any of m, n, k may be 0 (k == 0 gives c = beta * c).
// Runs on num_threads() threads, or on the calling thread alone inside an OpenMP parallel
// region (omp_in_parallel()). c must not alias a or b.
// bias (n floats, optional): then c[i,j] += bias[j] after the product, as a separate pass would
// add it (the same bits), but while each strip of c is still in cache.
// row_sums (m floats, optional; trans_a only, else ShapeError): row_sums[i] = the sum over p of
// op(a)[i,p] (= a[p,i]), summed in double in the order of p, as a is read for packing: a linear
// layer's bias gradient from its weight gradient's product, the bits of cpu::bias_grad.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           const float* bias = nullptr, float* row_sums = nullptr);

// The same product with a and b rounded to bfloat16 (round to nearest even) and the products
// summed in fp32. DeviceError when cpu::bf16_available() is false.
void sbgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc, const float* bias = nullptr, float* row_sums = nullptr);

// What the ops call: sgemm, or sbgemm when cpu_matmul_precision() is bf16 (core/precision.h).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
          const float* bias = nullptr, float* row_sums = nullptr);

// The fp32 kernel in use, e.g. "avx512f 8x32"; for logs and benchmarks.
const char* sgemm_kernel_name();
// The bf16 kernel sbgemm would use, e.g. "amx_bf16 32x32", or "none" (bf16_available() false).
const char* sbgemm_kernel_name();

}  // namespace ada::cpu
