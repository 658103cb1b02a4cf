// The bf16 mode's batch-blocked forward kernel (conv_blocked.h), built for AVX512_BF16 (flags in
// core/CMakeLists.txt). It reuses the AVX-512 blocked kernels' helpers (vector type, transpose,
// channel blocking) by including their implementation in this translation unit too; what is
// defined here, like all of it, stays in an anonymous namespace (conv_direct_impl.h says why).
#include "core/backend/cpu/conv_avx512_params.h"
#include "core/backend/cpu/conv_blocked_impl.h"

// GCC 12 reports _mm512_undefined_epi32() inside its own conversion intrinsics as "may be used
// uninitialized" (a false positive of the header, not of this code).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ada::cpu::conv_detail {
namespace {

// Lane j: bf16(lo[j]) | bf16(hi[j]) << 16 (round to nearest even, as the bf16 GEMM packs).
inline __m512i pair_lanes(Vf lo, Vf hi) {
  __m512 l, h;
  __builtin_memcpy(&l, &lo, sizeof l);
  __builtin_memcpy(&h, &hi, sizeof h);
  const __m512i a = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(l)));
  const __m512i b = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(h)));
  return _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
}

void to_pairs(const float* src, int64_t images, int64_t image_stride, int64_t planes, int64_t h,
              int64_t w, int64_t ph, int64_t pw, uint32_t* dst) {
  const int64_t n = h * w, wp = w + 2 * pw, plane = (h + 2 * ph) * wp * V;
  for (int64_t pr = 0; pr < (planes + 1) / 2; ++pr) {
    uint32_t* dp = dst + pr * plane;
    zero_padding(reinterpret_cast<float*>(dp), h, w, ph, pw);
    uint32_t* d = dp + (ph * wp + pw) * V;
    const bool second = 2 * pr + 1 < planes;
    int64_t i = 0, j = 0;
    for (int64_t o0 = 0; o0 < n; o0 += V) {
      const int64_t cnt = n - o0 < V ? n - o0 : V;
      Vf lo[V], hi[V];
      load_rows(src + 2 * pr * n, images, image_stride, o0, cnt, lo);
      load_rows(src + (2 * pr + 1) * n, second ? images : 0, image_stride, o0, cnt, hi);
      transpose(lo);
      transpose(hi);
      for (int64_t t = 0; t < cnt; ++t) {
        _mm512_storeu_si512(d + (i * wp + j) * V, pair_lanes(lo[t], hi[t]));
        if (++j == w) j = 0, ++i;
      }
    }
  }
}

inline uint32_t bf16_bits(float f) {  // as half::bf16_from_float, kept in this unit
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 0x0040u;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

void pack_pairs(const Blocked& g, const float* w, uint32_t* out) {
  const int64_t pairs = (g.c + 1) / 2;
  channel_blocks<BKB>(g.k, [&]<int B>(int64_t k0) {
    uint32_t* o = out + k0 * pairs * 9;
    for (int64_t pr = 0; pr < pairs; ++pr)
      for (int t = 0; t < 9; ++t)
        for (int kb = 0; kb < B; ++kb) {
          const float* wk = w + (k0 + kb) * g.c * 9;
          const uint32_t lo = bf16_bits(wk[2 * pr * 9 + t]);
          const uint32_t hi = 2 * pr + 1 < g.c ? bf16_bits(wk[(2 * pr + 1) * 9 + t]) : 0;
          o[(pr * 9 + t) * B + kb] = lo | hi << 16;
        }
  });
}

// fwd_tile's products on channel pairs: vdpbf16ps adds both products of a pair.
struct PairProducts {
  using In = uint32_t;
  using X = __m512bh;
  using W = __m512bh;
  static int64_t depth(const Blocked& g) { return (g.c + 1) / 2; }
  static X load_x(const In* p) { return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p)); }
  static W weight(In w) {
    return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(w)));
  }
  static Vf madd(Vf acc, X x, W w) {
    __m512 a;
    __builtin_memcpy(&a, &acc, sizeof a);
    a = _mm512_dpbf16_ps(a, x, w);
    __builtin_memcpy(&acc, &a, sizeof a);
    return acc;
  }
};

void pforward(const Blocked& g, const uint32_t* x, const uint32_t* wpk, float* y) {
  const int64_t pairs = (g.c + 1) / 2;
  for_tiles(g, [&]<int B, int T>(int64_t k0, int64_t o0, const int64_t* off) {
    fwd_tile<PairProducts, B, T>(g, x, wpk + k0 * pairs * 9, y, k0, o0, off);
  });
}

const BlockedBf16Kernels kBlockedBf16 = {"avx512_bf16 blocked", pack_pairs, pforward, to_pairs};

}  // namespace

const BlockedBf16Kernels& avx512_bf16_blocked() {
  return kBlockedBf16;
}

}  // namespace ada::cpu::conv_detail
