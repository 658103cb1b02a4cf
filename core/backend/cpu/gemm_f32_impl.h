// The fp32 GEMM kernel: an FMA register-blocked micro-kernel (AVX-512: 8x32 zmm, AVX2+FMA:
// 6x16 ymm) and the packing of A and B into micro-panels. Included once by gemm_avx2.cc
// (ADA_GEMM_AVX512 0) and once by gemm_avx512.cc (1); see gemm_kernels.h for the rules these
// translation units follow. Packing absorbs the transposes and leading dimensions and
// zero-pads partial panels, so the micro-kernel always runs on full tiles; edge tiles go
// through a small buffer and are merged.
#pragma once

#include <immintrin.h>

#include "core/backend/cpu/gemm_loop.h"
#include "core/backend/cpu/gemm_transpose.h"

#ifndef ADA_GEMM_AVX512
#error "define ADA_GEMM_AVX512 (0 or 1) before including gemm_f32_impl.h"
#endif

namespace ada::cpu::gemm_detail {
namespace {

// ---- ISA: vector type and block sizes ---------------------------------------------------------
// KC: a B micro-panel (KC x NR floats) stays in L1 (32-48 KiB) next to the streamed A panel;
//     a larger KC also means fewer passes over C (each k block reads and writes C once).
// MC: the packed A block (MC x KC) takes a quarter or less of L2 (512 KiB - 2 MiB).
// NC: the packed B block (KC x NC) is a few MiB of the shared L3.
// AVX2 sizes were tuned on Zen 3 (2048^3 and the ResNet-50 convolutions: KC 256..512 and MC
// 48..144 are all within ~3%; KC=384 was best). The AVX-512 sizes are chosen for Sapphire Rapids
// (48 KiB L1, 2 MiB L2) from the same reasoning, not measured.
#if ADA_GEMM_AVX512
struct Simd {
  using V = __m512;
  static constexpr int kWidth = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_aligned(const float* p) { return _mm512_load_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store_aligned(float* p, V v) { _mm512_store_ps(p, v); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
};
constexpr int kMR = 8, kNV = 2;                      // 8 x 32: 16 zmm accumulators
constexpr int64_t kKC = 256, kMC = 192, kNC = 4096;  // B micro-panel 32 KiB
constexpr const char* kKernelName = "avx512f 8x32";
#else
struct Simd {
  using V = __m256;
  static constexpr int kWidth = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_aligned(const float* p) { return _mm256_load_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store_aligned(float* p, V v) { _mm256_store_ps(p, v); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
};
constexpr int kMR = 6, kNV = 2;                     // 6 x 16: 12 ymm accumulators
constexpr int64_t kKC = 384, kMC = 96, kNC = 4080;  // B micro-panel 24 KiB, A block 144 KiB
constexpr const char* kKernelName = "avx2+fma 6x16";
#endif
constexpr int kW = Simd::kWidth;
constexpr int kNR = kNV * kW;
static_assert(kMC % kMR == 0 && kNC % kNR == 0);

// ---- micro-kernel -------------------------------------------------------------------------------
// c[MR x NR] (row stride ldc) = alpha * a b + beta * c, where a is an A micro-panel (kc steps of
// MR floats) and b a B micro-panel (kc steps of NR floats), both 64-byte aligned. beta == 0
// does not read c.
__attribute__((always_inline)) inline void micro_kernel(int64_t kc, const float* __restrict a,
                                                        const float* __restrict b,
                                                        float* __restrict c, int64_t ldc,
                                                        float alpha, float beta) {
  using V = Simd::V;
  V acc[kMR][kNV];
#pragma GCC unroll 16
  for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[r][v] = Simd::zero();
  }
#pragma GCC unroll 16
  for (int r = 0; r < kMR; ++r)
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);

#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    V bv[kNV];
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) bv[v] = Simd::load_aligned(b + v * kW);
#pragma GCC unroll 16
    for (int r = 0; r < kMR; ++r) {
      V ar = Simd::set1(a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[r][v] = Simd::fma(ar, bv[v], acc[r][v]);
    }
    a += kMR;
    b += kNR;
  }

  const V va = Simd::set1(alpha);
  if (beta == 0.f) {
#pragma GCC unroll 16
    for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) Simd::store(c + r * ldc + v * kW, Simd::mul(va, acc[r][v]));
    }
  } else if (beta == 1.f) {
#pragma GCC unroll 16
    for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) {
        float* cp = c + r * ldc + v * kW;
        Simd::store(cp, Simd::fma(va, acc[r][v], Simd::load(cp)));
      }
    }
  } else {
    const V vb = Simd::set1(beta);
#pragma GCC unroll 16
    for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) {
        float* cp = c + r * ldc + v * kW;
        Simd::store(cp, Simd::fma(va, acc[r][v], Simd::mul(vb, Simd::load(cp))));
      }
    }
  }
}

// A partial tile (mr < MR or nr < NR): the kernel writes a full tile to a buffer, then the
// valid mr x nr part is merged into c.
void edge_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t mr,
                 int64_t nr, float alpha, float beta) {
  alignas(64) float t[kMR * kNR];
  micro_kernel(kc, a, b, t, kNR, alpha, 0.f);
  merge_tile(t, kNR, c, ldc, mr, nr, beta);
}

// ---- packing ------------------------------------------------------------------------------------

// The first kLanes floats at s in the low lanes (the others zero); reads nothing past them.
template <int kLanes>
inline __m256 load_lanes(const float* s) {
  if constexpr (kLanes == 8) {
    return _mm256_loadu_ps(s);
  } else {
    static_assert(kLanes == 6);
    const __m128 lo = _mm_loadu_ps(s);
    const __m128 hi = _mm_loadl_pi(_mm_setzero_ps(), reinterpret_cast<const __m64*>(s + 4));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
  }
}

// Stores the first kLanes lanes of v at d.
template <int kLanes>
inline void store_lanes(float* d, __m256 v) {
  if constexpr (kLanes == 8) {
    _mm256_storeu_ps(d, v);
  } else if constexpr (kLanes == 6) {
    _mm_storeu_ps(d, _mm256_castps256_ps128(v));
    _mm_storel_pi(reinterpret_cast<__m64*>(d + 4), _mm256_extractf128_ps(v, 1));
  } else {
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    for (int i = 0; i < kLanes; ++i) d[i] = t[i];
  }
}

// op(A)[i0 : i0+mc, p0 : p0+kc] into MR-row micro-panels: panel q holds rows q*MR.., laid out
// as kc steps of MR floats; rows past mc are zero.
__attribute__((noinline)) void pack_a(const Problem& g, int64_t i0, int64_t mc, int64_t p0,
                                      int64_t kc, float* dst) {
  if (g.ta) {
    // A^T: k step p of the block is the contiguous run a[p0 + p][i0 : i0 + mc], which holds
    // that step of every panel: one row at a time, all panels, so the run's lines are read
    // together. (Panel by panel, each step touched one line of another page, which the
    // hardware prefetchers do not follow: the MLM decoder's weight gradient, A 640 x 30,522,
    // ran at 73 GFLOP/s on one core, now 93 like the other shapes. Software prefetch of the
    // rows ahead added nothing.)
    const int64_t full = mc / kMR * kMR;
    for (int64_t p = 0; p < kc; ++p) {
      const float* sp = g.a + (p0 + p) * g.lda + i0;
      float* d = dst + p * kMR;
      for (int64_t ir = 0; ir < full; ir += kMR)
        store_lanes<kMR>(d + ir * kc, load_lanes<kMR>(sp + ir));
      if (full < mc) {
        for (int64_t r = 0; r < mc - full; ++r) d[full * kc + r] = sp[full + r];
        for (int64_t r = mc - full; r < kMR; ++r) d[full * kc + r] = 0.f;
      }
    }
    return;
  }
  for (int64_t ir = 0; ir < mc; ir += kMR) {
    const int64_t mr = imin(kMR, mc - ir);
    float* d = dst + ir * kc;
    // Rows of A are contiguous in k: transpose MR rows x 8 k steps at a time.
    const float* s = g.a + (i0 + ir) * g.lda + p0;
    int64_t p = 0;
    if (mr == kMR) {
      for (; p + 8 <= kc; p += 8) {
        __m256 t[8];
        load_transpose_8x8<kMR>(s + p, g.lda, t);
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) store_lanes<kMR>(d + (p + q) * kMR, t[q]);
      }
    }
    for (; p < kc; ++p) {
      for (int64_t r = 0; r < mr; ++r) d[p * kMR + r] = s[r * g.lda + p];
      for (int64_t r = mr; r < kMR; ++r) d[p * kMR + r] = 0.f;
    }
  }
}

// op(B)[p0 : p0+kc, j0 : j0+nc] into NR-column micro-panels: panel q holds columns q*NR..,
// laid out as kc steps of NR floats; columns past nc are zero.
__attribute__((noinline)) void pack_b(const Problem& g, int64_t p0, int64_t kc, int64_t j0,
                                      int64_t nc, float* dst) {
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    const int64_t nr = imin(kNR, nc - jr);
    float* d = dst + jr * kc;
    if (!g.tb) {
      const float* s = g.b + p0 * g.ldb + j0 + jr;
      if (nr == kNR) {
        for (int64_t p = 0; p < kc; ++p) {
          const float* sp = s + p * g.ldb;
#pragma GCC unroll 4
          for (int v = 0; v < kNV; ++v)
            Simd::store_aligned(d + p * kNR + v * kW, Simd::load(sp + v * kW));
        }
      } else {
        for (int64_t p = 0; p < kc; ++p) {
          const float* sp = s + p * g.ldb;
          for (int64_t j = 0; j < nr; ++j) d[p * kNR + j] = sp[j];
          for (int64_t j = nr; j < kNR; ++j) d[p * kNR + j] = 0.f;
        }
      }
    } else {
      // B^T: column j of op(B) is row j of b, contiguous in k: transpose 8 columns x 8 k steps
      // at a time.
      const float* s = g.b + (j0 + jr) * g.ldb + p0;
      int64_t p = 0;
      if (nr == kNR) {
        for (; p + 8 <= kc; p += 8) {
#pragma GCC unroll 4
          for (int j = 0; j < kNR; j += 8) {
            __m256 t[8];
            load_transpose_8x8<8>(s + j * g.ldb + p, g.ldb, t);
#pragma GCC unroll 8
            for (int q = 0; q < 8; ++q) _mm256_store_ps(d + (p + q) * kNR + j, t[q]);
          }
        }
      }
      for (; p < kc; ++p) {
        for (int64_t j = 0; j < nr; ++j) d[p * kNR + j] = s[j * g.ldb + p];
        for (int64_t j = nr; j < kNR; ++j) d[p * kNR + j] = 0.f;
      }
    }
  }
}

struct F32 {
  using Packed = float;
  static constexpr int64_t kMR = ::ada::cpu::gemm_detail::kMR;
  static constexpr int64_t kNR = ::ada::cpu::gemm_detail::kNR;
  static int64_t k_steps(int64_t kc) { return kc; }
  static void pack_a(const Problem& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* d) {
    ::ada::cpu::gemm_detail::pack_a(g, i0, mc, p0, kc, d);
  }
  static void pack_b(const Problem& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* d) {
    ::ada::cpu::gemm_detail::pack_b(g, p0, kc, j0, nc, d);
  }
  static void micro(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                    float beta) {
    micro_kernel(kc, a, b, c, ldc, alpha, beta);
  }
  static void edge(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t mr,
                   int64_t nr, float alpha, float beta) {
    edge_kernel(kc, a, b, c, ldc, mr, nr, alpha, beta);
  }
};

constexpr Kernel kF32Kernel{kKernelName, kMR, kNR, kKC, kMC, kNC, &gemm_block<F32>};

}  // namespace
}  // namespace ada::cpu::gemm_detail
