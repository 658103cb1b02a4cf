// The packing the bf16 GEMM kernels share (gemm_avx512_bf16.cc: vdpbf16ps; gemm_amx_bf16.cc:
// AMX tiles). Operands are rounded to bfloat16 (round to nearest even, by vcvtne2ps2bf16 /
// vcvtneps2bf16) and paired along k: a 32-bit lane holds bf16 at k = 2q in its low half and at
// k = 2q + 1 in its high half (an odd kc is padded with a zero), the operand layout of vdpbf16ps
// and of the B tile of TDPBF16PS. Needs AVX-512 with AVX512_BF16; included only by the kernel
// translation units (see gemm_kernels.h), everything here has internal linkage.
#pragma once

#include <immintrin.h>

#include "core/backend/cpu/gemm_loop.h"
#include "core/backend/cpu/gemm_transpose.h"

// GCC 12 reports _mm512_undefined_epi32() inside its own zero-extension and shift intrinsics as
// "may be used uninitialized" (a false positive of the header, not of this code).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace ada::cpu::gemm_detail {
namespace {

constexpr int64_t kPairNR = 32;  // columns of a packed B micro-panel, in both kernels

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

// op(B)[p0 : p0+kc, j0 : j0+nc] into kPairNR-column micro-panels of ks pair steps: step q of
// the panel at column jr is dst[jr * ks + q * kPairNR + j]. ks >= ceil(kc/2); the steps from
// ceil(kc/2) on are zero (the AMX kernel multiplies whole tiles of 16 steps).
void pack_b_pairs(const Problem& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int64_t ks,
                  uint32_t* dst) {
  constexpr int64_t kNR = kPairNR;
  const int64_t used = (kc + 1) / 2;
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    const int64_t nr = imin(kNR, nc - jr);
    uint32_t* d = dst + jr * ks;
    if (!g.tb) {
      // Rows of B are contiguous in n: pair row 2q with row 2q+1, column by column.
      const float* s = g.b + p0 * g.ldb + j0 + jr;
      const __mmask16 m0 = mask16(nr), m1 = mask16(nr - 16);
      for (int64_t q = 0; q < used; ++q) {
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
    for (int64_t q = used; q < ks; ++q) {
      _mm512_store_si512(d + q * kNR, _mm512_setzero_si512());
      _mm512_store_si512(d + q * kNR + 16, _mm512_setzero_si512());
    }
  }
}

}  // namespace
}  // namespace ada::cpu::gemm_detail
