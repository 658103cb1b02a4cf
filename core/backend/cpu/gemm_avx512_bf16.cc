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

#include "core/backend/cpu/gemm_loop.h"
#include "core/backend/cpu/gemm_transpose.h"

// GCC 12 reports _mm512_undefined_epi32() inside its own zero-extension and shift intrinsics as
// "may be used uninitialized" (a false positive of the header, not of this code).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ada::cpu::gemm_detail {
namespace {

constexpr int64_t kMR = 8, kNR = 32;  // 16 zmm accumulators, as the fp32 AVX-512 kernel
// In k values: a B micro-panel is KC/2 steps x 32 lanes x 4 bytes = 32 KiB (L1), the A block
// MC x KC x 2 bytes = 192 KiB (L2).
constexpr int64_t kKC = 512, kMC = 192, kNC = 4096;

// Lanes [0, n) of a 16-lane mask (n may be <= 0 or >= 16).
inline __mmask16 mask16(int64_t n) {
  if (n <= 0) return 0;
  if (n >= 16) return 0xFFFF;
  return static_cast<__mmask16>((1u << n) - 1);
}

// Lane j of the result: bf16(lo[j]) | bf16(hi[j]) << 16.
inline __m512i pair_lanes(__m512 lo, __m512 hi) {
  const __m512i l = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(lo)));
  const __m512i h = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(hi)));
  return _mm512_or_si512(l, _mm512_slli_epi32(h, 16));
}
inline __m256i pair_lanes8(__m256 lo, __m256 hi) {
  const __m256i l = _mm256_cvtepu16_epi32(reinterpret_cast<__m128i>(_mm256_cvtneps_pbh(lo)));
  const __m256i h = _mm256_cvtepu16_epi32(reinterpret_cast<__m128i>(_mm256_cvtneps_pbh(hi)));
  return _mm256_or_si256(l, _mm256_slli_epi32(h, 16));
}

// dst[t * ldd + i] = src[i * lds + t] for i, t < 8.
inline void transpose_8x8(const uint32_t* src, int64_t lds, uint32_t* dst, int64_t ldd) {
  __m256 t[8];
  load_transpose_8x8<8>(reinterpret_cast<const float*>(src), lds, t);
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q) _mm256_storeu_ps(reinterpret_cast<float*>(dst + q * ldd), t[q]);
}

// Eight lines contiguous in k (line i at src + i * lds, kc values; lines >= `lines` read as
// zero) into pair steps: dst[q * ldd + i] for q < ceil(kc / 2), i < 8.
void pack_lines_along_k(const float* src, int64_t lds, int64_t lines, int64_t kc, uint32_t* dst,
                        int64_t ldd) {
  alignas(64) uint32_t tmp[8 * 16];
  for (int64_t p = 0; p < kc; p += 32) {
    const int64_t rem = kc - p;
    const __mmask16 m0 = mask16(rem), m1 = mask16(rem - 16);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      __m512i v = _mm512_setzero_si512();
      if (i < lines) {
        const float* s = src + i * lds + p;
        const __m512 lo = _mm512_maskz_loadu_ps(m0, s), hi = _mm512_maskz_loadu_ps(m1, s + 16);
        v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));  // pairs in k order
      }
      _mm512_store_si512(tmp + i * 16, v);
    }
    uint32_t* d = dst + (p / 2) * ldd;
    const int64_t steps = rem >= 32 ? 16 : (rem + 1) / 2;
    if (steps == 16) {
      transpose_8x8(tmp, 16, d, ldd);
      transpose_8x8(tmp + 8, 16, d + 8 * ldd, ldd);
    } else {
      for (int64_t q = 0; q < steps; ++q)
        for (int i = 0; i < 8; ++i) d[q * ldd + i] = tmp[i * 16 + q];
    }
  }
}

// op(A)[i0 : i0+mc, p0 : p0+kc] into MR-row micro-panels of ceil(kc/2) pair steps.
void pack_a(const Problem& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, uint32_t* dst) {
  const int64_t ks = (kc + 1) / 2;
  for (int64_t ir = 0; ir < mc; ir += kMR) {
    const int64_t mr = imin(kMR, mc - ir);
    uint32_t* d = dst + ir * ks;
    if (!g.ta) {
      // Rows of A are contiguous in k.
      pack_lines_along_k(g.a + (i0 + ir) * g.lda + p0, g.lda, mr, kc, d, kMR);
    } else {
      // A^T: a k step is a contiguous run of MR rows; pair two k steps lane by lane.
      const __mmask8 m = static_cast<__mmask8>(mr >= 8 ? 0xFF : (1u << mr) - 1);
      const float* s = g.a + p0 * g.lda + i0 + ir;
      for (int64_t q = 0; q < ks; ++q) {
        const __m256 lo = _mm256_maskz_loadu_ps(m, s + 2 * q * g.lda);
        const __m256 hi = 2 * q + 1 < kc ? _mm256_maskz_loadu_ps(m, s + (2 * q + 1) * g.lda)
                                         : _mm256_setzero_ps();
        _mm256_store_si256(reinterpret_cast<__m256i*>(d + q * kMR), pair_lanes8(lo, hi));
      }
    }
  }
}

// op(B)[p0 : p0+kc, j0 : j0+nc] into NR-column micro-panels of ceil(kc/2) pair steps.
void pack_b(const Problem& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, uint32_t* dst) {
  const int64_t ks = (kc + 1) / 2;
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    const int64_t nr = imin(kNR, nc - jr);
    uint32_t* d = dst + jr * ks;
    if (!g.tb) {
      // Rows of B are contiguous in n: pair row 2q with row 2q+1, column by column.
      const float* s = g.b + p0 * g.ldb + j0 + jr;
      const __mmask16 m0 = mask16(nr), m1 = mask16(nr - 16);
      for (int64_t q = 0; q < ks; ++q) {
        const float* r0 = s + 2 * q * g.ldb;
        const bool has_hi = 2 * q + 1 < kc;
        const float* r1 = r0 + g.ldb;
        const __m512 lo0 = _mm512_maskz_loadu_ps(m0, r0), lo1 = _mm512_maskz_loadu_ps(m1, r0 + 16);
        const __m512 hi0 = has_hi ? _mm512_maskz_loadu_ps(m0, r1) : _mm512_setzero_ps();
        const __m512 hi1 = has_hi ? _mm512_maskz_loadu_ps(m1, r1 + 16) : _mm512_setzero_ps();
        _mm512_store_si512(d + q * kNR, pair_lanes(lo0, hi0));
        _mm512_store_si512(d + q * kNR + 16, pair_lanes(lo1, hi1));
      }
    } else {
      // B^T: column j of op(B) is row j of b, contiguous in k: eight columns at a time.
      const float* s = g.b + (j0 + jr) * g.ldb + p0;
      for (int64_t j = 0; j < kNR; j += 8)
        pack_lines_along_k(s + j * g.ldb, g.ldb, nr - j, kc, d + j, kNR);
    }
  }
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
  for (int r = 0; r < kMR; ++r) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
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
    ::ada::cpu::gemm_detail::pack_b(g, p0, kc, j0, nc, d);
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

const Kernel& avx512_bf16_kernel() { return kBf16Kernel; }

}  // namespace ada::cpu::gemm_detail
