// The bf16 GEMM kernel (AVX512_BF16; flags in core/CMakeLists.txt): A and B are rounded to
// bfloat16 (round to nearest even, by vcvtne2ps2bf16 / vcvtneps2bf16) while they are packed, and
// the 8x32 micro-kernel sums the products in fp32 with vdpbf16ps, which multiplies a pair of
// consecutive k values per 32-bit lane: c += a[2q] b[2q] + a[2q+1] b[2q+1].
// Packed layout: a k step of the fp32 kernel becomes a pair step q (k = 2q, 2q+1) of 32-bit
// lanes holding (bf16 at k in the low half, bf16 at k+1 in the high half); an odd kc is padded
// with a zero. A micro-panel is ks = ceil(kc/2) steps of MR lanes, a B micro-panel ks steps of
// NR lanes, so the loop nest (gemm_loop.h) is the fp32 one with ks in place of kc.
// See gemm_kernels.h for the rules of kernel translation units.
#include <immintrin.h>

#include "core/backend/cpu/gemm_bf16_pack.h"

namespace ada::cpu::gemm_detail {
namespace {

constexpr int64_t kMR = 8, kNR = kPairNR;  // 16 zmm accumulators, as the fp32 AVX-512 kernel
// In k values: a B micro-panel is KC/2 steps x 32 lanes x 4 bytes = 32 KiB (L1), the A block
// MC x KC x 2 bytes = 192 KiB (L2).
constexpr int64_t kKC = 512, kMC = 192, kNC = 4096;

// op(A)[i0 : i0+mc, p0 : p0+kc] into MR-row micro-panels of ceil(kc/2) pair steps.
void pack_a(const Problem& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, uint32_t* dst) {
  const int64_t ks = (kc + 1) / 2;
  if (g.ta) {
    // A^T: a k value is a contiguous run of the block's rows, two of them one pair step of
    // every panel: a step at a time, all panels, so each run's lines are read together (as the
    // fp32 kernel's pack_a: panel by panel, each step touched a line of another page).
    for (int64_t q = 0; q < ks; ++q) {
      const float* lo_row = g.a + (p0 + 2 * q) * g.lda + i0;
      const bool has_hi = 2 * q + 1 < kc;
      for (int64_t ir = 0; ir < mc; ir += kMR) {
        const int64_t mr = imin(kMR, mc - ir);
        const __mmask8 m = static_cast<__mmask8>(mr >= 8 ? 0xFF : (1u << mr) - 1);
        const __m256 lo = _mm256_maskz_loadu_ps(m, lo_row + ir);
        const __m256 hi =
            has_hi ? _mm256_maskz_loadu_ps(m, lo_row + g.lda + ir) : _mm256_setzero_ps();
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + ir * ks + q * kMR),
                           pair_lanes8(lo, hi));
      }
    }
    return;
  }
  // Rows of A are contiguous in k.
  for (int64_t ir = 0; ir < mc; ir += kMR)
    pack_lines_along_k(g.a + (i0 + ir) * g.lda + p0, g.lda, imin(kMR, mc - ir), kc, dst + ir * ks,
                       kMR);
}

// c[MR x NR] = alpha * a b + beta * c over ks pair steps (beta == 0 does not read c).
__attribute__((always_inline)) inline void micro_kernel(int64_t ks, const uint32_t* __restrict a,
                                                        const uint32_t* __restrict b,
                                                        float* __restrict c, int64_t ldc,
                                                        float alpha, float beta) {
  __m512 acc[kMR][2];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r)
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
#pragma GCC unroll 2
  for (int64_t q = 0; q < ks; ++q) {
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_load_si512(b));
    const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_load_si512(b + 16));
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      const __m512bh ar = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[r])));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
    }
    a += kMR;
    b += kNR;
  }
  const __m512 va = _mm512_set1_ps(alpha);
  if (beta == 0.f) {
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      _mm512_storeu_ps(c + r * ldc, _mm512_mul_ps(va, acc[r][0]));
      _mm512_storeu_ps(c + r * ldc + 16, _mm512_mul_ps(va, acc[r][1]));
    }
  } else {
    const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      float* cp = c + r * ldc;
      _mm512_storeu_ps(cp, _mm512_fmadd_ps(va, acc[r][0], _mm512_mul_ps(vb, _mm512_loadu_ps(cp))));
      _mm512_storeu_ps(cp + 16,
                       _mm512_fmadd_ps(va, acc[r][1], _mm512_mul_ps(vb, _mm512_loadu_ps(cp + 16))));
    }
  }
}

struct Bf16 {
  using Packed = uint32_t;
  static constexpr int64_t kMR = ::ada::cpu::gemm_detail::kMR;
  static constexpr int64_t kNR = ::ada::cpu::gemm_detail::kNR;
  static int64_t k_steps(int64_t kc) { return (kc + 1) / 2; }
  static void pack_a(const Problem& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                     uint32_t* d) {
    ::ada::cpu::gemm_detail::pack_a(g, i0, mc, p0, kc, d);
  }
  static void pack_b(const Problem& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                     uint32_t* d) {
    pack_b_pairs(g, p0, kc, j0, nc, k_steps(kc), d);
  }
  static void micro(int64_t ks, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                    float alpha, float beta) {
    micro_kernel(ks, a, b, c, ldc, alpha, beta);
  }
  // A partial tile: the full tile goes to a buffer, its valid mr x nr part is merged into c.
  static void edge(int64_t ks, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                   int64_t mr, int64_t nr, float alpha, float beta) {
    alignas(64) float t[kMR * kNR];
    micro_kernel(ks, a, b, t, kNR, alpha, 0.f);
    merge_tile(t, kNR, c, ldc, mr, nr, beta);
  }
};

constexpr Kernel kBf16Kernel{"avx512_bf16 8x32", kMR, kNR, kKC, kMC, kNC, &gemm_block<Bf16>};

}  // namespace

const Kernel& avx512_bf16_kernel() {
  return kBf16Kernel;
}

}  // namespace ada::cpu::gemm_detail
