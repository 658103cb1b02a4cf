// The 8x8 transpose of 32-bit lanes the GEMM packers share (gemm_f32_impl.h,
// gemm_avx512_bf16.cc). Needs AVX, which every kernel translation unit has; included only by
// them (see gemm_kernels.h), everything here has internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ada::cpu::gemm_detail {
namespace {

// t[q] lane r = src[r * lds + q] for r < kRows (lanes kRows.. are zero), q < 8: an 8x8
// transpose of kRows rows of 8 floats (32-bit lanes moved as floats: bit-exact for any
// payload, e.g. packed bf16 pairs).
template <int kRows>
inline void load_transpose_8x8(const float* src, int64_t lds, __m256 t[8]) {
  static_assert(kRows >= 1 && kRows <= 8);
  __m256 r[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    r[i] = i < kRows ? _mm256_loadu_ps(src + i * lds) : _mm256_setzero_ps();
  // Pairs interleaved, then quads, then 128-bit halves exchanged.
  const __m256 u0 = _mm256_unpacklo_ps(r[0], r[1]), u1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 u2 = _mm256_unpacklo_ps(r[2], r[3]), u3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 u4 = _mm256_unpacklo_ps(r[4], r[5]), u5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 u6 = _mm256_unpacklo_ps(r[6], r[7]), u7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(u0, u2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(u0, u2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(u1, u3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(u1, u3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(u4, u6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(u4, u6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(u5, u7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(u5, u7, _MM_SHUFFLE(3, 2, 3, 2));
  t[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  t[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  t[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  t[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  t[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  t[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  t[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  t[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

}  // namespace
}  // namespace ada::cpu::gemm_detail
