// dropout_blocks' AVX-512 kernel (-march=x86-64-v4; flags in core/CMakeLists.txt): sixteen
// Philox4x32-10 blocks a vector, one 32-bit lane each, the 32 x 32 -> 64-bit products of a round
// from two vpmuludq (even and odd lanes). The vectoriser's version of the scalar loop keeps the
// 64-bit counter in 64-bit lanes and interleaves the four words through the stores (1.8 ns an
// element on one AMD EPYC Zen 4 core at x86-64-v3, 1.1 at v4). Integer arithmetic and the same
// float conversion and comparison as core/philox.h: the same bits.
#include <immintrin.h>

#include "core/backend/cpu/dropout_blocks.h"
#include "core/philox.h"

// GCC 12 reports _mm512_undefined_epi32() inside its own multiply and shift intrinsics as "may be
// used uninitialized" (a false positive of the header, as in gemm_bf16_pack.h).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace ada::cpu::dropout_detail {
namespace {

// hi and lo 32 bits of the products c * m, lane by lane.
inline void mul_hi_lo(__m512i c, __m512i m, __m512i& hi, __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(c, m);                        // lanes 2i
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m);  // lanes 2i + 1
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

// The uniform in [0, 1) of each word (uint_to_unit: exact in float) compared with p.
inline __m512 multiplier(__m512i word, __m512 p, __m512 scale) {
  const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(word, 8)),
                                 _mm512_set1_ps(1.0f / 16777216.0f));
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(u, p, _CMP_GE_OQ), scale);
}

}  // namespace

void blocks_avx512(uint64_t seed, uint64_t first, uint64_t j0, int64_t blocks, float p, float scale,
                   const float* x, float* y, float* mask) {
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53u), m1 = _mm512_set1_epi64(0xCD9E8D57u);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 vp = _mm512_set1_ps(p), vscale = _mm512_set1_ps(scale);
  const uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  for (int64_t t = 0; t < blocks; t += 16) {
    // Counters first + j0 + t + lane: the low words wrap, the high words take the carry.
    const uint64_t base = first + j0 + static_cast<uint64_t>(t);
    const __m512i base_lo = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(base)));
    __m512i c0 = _mm512_add_epi32(base_lo, iota);
    __m512i c1 = _mm512_mask_add_epi32(
        _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(base >> 32))),
        _mm512_cmplt_epu32_mask(c0, base_lo),
        _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(base >> 32))),
        _mm512_set1_epi32(1));
    __m512i c2 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(kPhiloxUniformTag)));
    __m512i c3 =
        _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(kPhiloxUniformTag >> 32)));
    uint32_t k0 = key0, k1 = key1;
#pragma GCC unroll 10
    for (int round = 0; round < 10; ++round) {
      __m512i hi0, lo0, hi1, lo1;
      mul_hi_lo(c0, m0, hi0, lo0);
      mul_hi_lo(c2, m1, hi1, lo1);
      // 0x96: a ^ b ^ c
      c0 = _mm512_ternarylogic_epi32(hi1, c1, _mm512_set1_epi32(static_cast<int>(k0)), 0x96);
      c2 = _mm512_ternarylogic_epi32(hi0, c3, _mm512_set1_epi32(static_cast<int>(k1)), 0x96);
      c1 = lo1;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    // Lane b of w[k] is word k of block t + b; element 4b + k is its place in memory. A 4 x 4
    // transpose within each 128-bit lane, then of the 128-bit lanes.
    const __m512 w0 = multiplier(c0, vp, vscale), w1 = multiplier(c1, vp, vscale);
    const __m512 w2 = multiplier(c2, vp, vscale), w3 = multiplier(c3, vp, vscale);
    const __m512 t0 = _mm512_unpacklo_ps(w0, w1), t1 = _mm512_unpackhi_ps(w0, w1);
    const __m512 t2 = _mm512_unpacklo_ps(w2, w3), t3 = _mm512_unpackhi_ps(w2, w3);
    auto pd = [](__m512 v) { return _mm512_castps_pd(v); };
    auto ps = [](__m512d v) { return _mm512_castpd_ps(v); };
    const __m512 s0 = ps(_mm512_unpacklo_pd(pd(t0), pd(t2)));  // lane L: block 4L
    const __m512 s1 = ps(_mm512_unpackhi_pd(pd(t0), pd(t2)));  // block 4L + 1
    const __m512 s2 = ps(_mm512_unpacklo_pd(pd(t1), pd(t3)));  // block 4L + 2
    const __m512 s3 = ps(_mm512_unpackhi_pd(pd(t1), pd(t3)));  // block 4L + 3
    const __m512 a0 = _mm512_shuffle_f32x4(s0, s1, 0x44), a1 = _mm512_shuffle_f32x4(s0, s1, 0xEE);
    const __m512 a2 = _mm512_shuffle_f32x4(s2, s3, 0x44), a3 = _mm512_shuffle_f32x4(s2, s3, 0xEE);
    const __m512 out[4] = {_mm512_shuffle_f32x4(a0, a2, 0x88), _mm512_shuffle_f32x4(a0, a2, 0xDD),
                           _mm512_shuffle_f32x4(a1, a3, 0x88), _mm512_shuffle_f32x4(a1, a3, 0xDD)};
    const int64_t e = 4 * t;
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      if (mask) _mm512_storeu_ps(mask + e + 16 * q, out[q]);
      if (x)
        _mm512_storeu_ps(y + e + 16 * q, _mm512_mul_ps(_mm512_loadu_ps(x + e + 16 * q), out[q]));
    }
  }
}

}  // namespace ada::cpu::dropout_detail
