// The seam between the GEMM driver (sgemm.cc, built for the baseline ISA) and its kernels, each
// built in its own translation unit for one ISA (gemm_avx2.cc, gemm_avx512.cc,
// gemm_avx512_bf16.cc, gemm_amx_bf16.cc) and chosen at run time by CPUID
// (core/backend/cpu/cpu_isa.h). The kernel files include nothing but this header and <immintrin.h>,
// and keep everything else in anonymous namespaces: an inline function emitted there with AVX-512
// instructions must never be the copy the linker picks for the rest of the program.
#pragma once

#include <cstdint>

namespace ada::cpu::gemm_detail {

// c[m,n] = alpha * op(a) op(b) + beta * c, row-major, as in cpu::sgemm.
struct Problem {
  bool ta, tb;
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float beta;
  float* c;
  int64_t ldc;
  // When set, c[i][j] += bias[j] once the product is complete (a linear layer's bias), strip by
  // strip while the strip is in cache: the additions a separate pass makes, in the same rounding.
  const float* bias = nullptr;
  // When set (trans_a only), row_sums[i] += op(a)[i, p] for every p, in the order of p, in
  // double, as the blocks of op(a) are packed: a linear layer's bias gradient (the column sums of
  // dy) from the reads its weight gradient makes anyway. The caller zeroes the m sums.
  double* row_sums = nullptr;
};

// Cache-block steps the driver picked for one thread's rectangle (multiples of mr / nr).
struct Steps {
  int64_t kc, mc, nc;
};

struct Kernel {
  const char* name;    // e.g. "avx512f 8x32"
  int64_t mr, nr;      // micro-tile
  int64_t kc, mc, nc;  // largest cache blocks
  // Runs the blocked loop nest over C[m0:m1, n0:n1] on the calling thread. pa / pb are 64-byte
  // aligned packing buffers of at least mc * (kc + 32) and nc * (kc + 32) floats (the AMX
  // kernel pads k to whole tiles of 32 values).
  void (*block)(const Problem& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const Steps& s,
                float* pa, float* pb);
};

// fp32 kernels (AVX2+FMA 6x16; AVX-512F 8x32) and the bf16 ones (inputs rounded to bfloat16
// while packing, products summed in fp32): AVX512_BF16 8x32 by vdpbf16ps, AMX 32x32 by
// TDPBF16PS on tiles.
const Kernel& avx2_kernel();
const Kernel& avx512_kernel();
const Kernel& avx512_bf16_kernel();
const Kernel& amx_bf16_kernel();

}  // namespace ada::cpu::gemm_detail
