// The direct 3x3 convolution kernels (conv_direct.h), written once with GCC vector extensions
// and built per ISA: conv_direct_avx2.cc (8 lanes, 16 registers) and conv_direct_avx512.cc (16
// lanes, 32 registers). Before including, a kernel file defines
//   ADA_DIRECT_NAME                       the kernels' name
//   ADA_DIRECT_LANES                      the vector width
//   ADA_DIRECT_FWD_KB, ADA_DIRECT_FWD_TT  forward register tile: output channels x vectors
//   ADA_DIRECT_FLT_KB                     filter gradient register tile: output channels (x 3 taps)
// Everything here sits in an anonymous namespace and no standard-library template is used
// (gemm_kernels.h says why: an inline function emitted here with this ISA's instructions must
// never be the copy the linker picks for the rest of the program).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/backend/cpu/conv_direct.h"

namespace ada::cpu::conv_detail {
namespace {

constexpr int V = ADA_DIRECT_LANES;
typedef float Vf __attribute__((vector_size(V * 4)));

inline Vf load(const float* p) {
  Vf v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

inline void store(float* p, Vf v) { __builtin_memcpy(p, &v, sizeof v); }

inline float hsum(Vf v) {
  __m256 a;
  __builtin_memcpy(&a, &v, sizeof a);
  if constexpr (V == 16) {  // add the upper half
    __m256 b;
    __builtin_memcpy(&b, reinterpret_cast<const char*>(&v) + sizeof b, sizeof b);
    a = _mm256_add_ps(a, b);
  }
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Output channels [k0, k0 + KB) at the TT vectors of positions from o0.
template <int KB, int TT>
void fwd_tile(const Plane& g, const float* x, const float* w, float* y, int64_t k0, int64_t o0) {
  Vf acc[KB][TT];
#pragma GCC unroll 16
  for (int kb = 0; kb < KB; ++kb)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) acc[kb][t] = Vf{};
  const int64_t wk = g.c * 9;
  const float* wb = w + k0 * wk;
  for (int64_t c = 0; c < g.c; ++c) {
    const float* xc = x + c * g.xplane + o0;
    const float* wc = wb + c * 9;
#pragma GCC unroll 3
    for (int r = 0; r < 3; ++r)
#pragma GCC unroll 3
      for (int s = 0; s < 3; ++s) {
        Vf xv[TT];
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) xv[t] = load(xc + t * V + r * g.wp + s);
#pragma GCC unroll 16
        for (int kb = 0; kb < KB; ++kb) {
          const float wv = wc[kb * wk + r * 3 + s];
#pragma GCC unroll 16
          for (int t = 0; t < TT; ++t) acc[kb][t] += xv[t] * wv;
        }
      }
  }
  for (int kb = 0; kb < KB; ++kb)
    for (int t = 0; t < TT; ++t) store(y + (k0 + kb) * g.n + o0 + t * V, acc[kb][t]);
}

// fwd_tile for tt (1..TT) vectors.
template <int KB, int TT>
void fwd_tile_n(int tt, const Plane& g, const float* x, const float* w, float* y, int64_t k0, int64_t o0) {
  if constexpr (TT > 1) {
    if (tt < TT) return fwd_tile_n<KB, TT - 1>(tt, g, x, w, y, k0, o0);
  }
  fwd_tile<KB, TT>(g, x, w, y, k0, o0);
}

void forward(const Plane& g, const float* x, const float* w, float* y) {
  constexpr int KB = ADA_DIRECT_FWD_KB, TT = ADA_DIRECT_FWD_TT;
  // The plane's nv vectors in ceil(nv / TT) tiles of as equal sizes as can be (4 vectors with
  // TT = 3: 2 + 2, not 3 + 1, which would run a narrow tile at a fraction of the speed).
  const int64_t nv = g.n / V, tiles = (nv + TT - 1) / TT;
  for (int64_t i = 0; i < tiles; ++i) {
    const int64_t t0 = nv * i / tiles;
    const int tt = static_cast<int>(nv * (i + 1) / tiles - t0);
    int64_t k0 = 0;
    for (; k0 + KB <= g.k; k0 += KB) fwd_tile_n<KB, TT>(tt, g, x, w, y, k0, t0 * V);
    for (; k0 < g.k; ++k0) fwd_tile_n<1, TT>(tt, g, x, w, y, k0, t0 * V);
  }
}

// dw[k0 .. k0 + KB, c, :, :] += the products summed over the images. For each image and tap row
// r, KB x 3 register accumulators (each output-gradient vector feeds three taps, each input
// vector KB channels) sweep the plane; between sweeps they rest in `keep` (L1), so the image's
// output-gradient planes are read from L1 by the second and third sweeps, and the horizontal
// sums are taken once at the end.
template <int KB>
void filter_tile(const Plane& g, int64_t images, const float* x, int64_t x_stride, const float* dy,
                 int64_t dy_stride, int64_t k0, int64_t c, float* dw) {
  Vf keep[3][KB][3];
  for (int r = 0; r < 3; ++r)
    for (int kb = 0; kb < KB; ++kb)
      for (int s = 0; s < 3; ++s) keep[r][kb][s] = Vf{};
  for (int64_t m = 0; m < images; ++m) {
    const float* dm = dy + m * dy_stride + k0 * g.n;
#pragma GCC unroll 1
    for (int r = 0; r < 3; ++r) {
      const float* xm = x + m * x_stride + c * g.xplane + r * g.wp;
      Vf acc[KB][3];
#pragma GCC unroll 16
      for (int kb = 0; kb < KB; ++kb)
#pragma GCC unroll 3
        for (int s = 0; s < 3; ++s) acc[kb][s] = keep[r][kb][s];
      for (int64_t o = 0; o < g.n; o += V) {
        Vf xv[3];
#pragma GCC unroll 3
        for (int s = 0; s < 3; ++s) xv[s] = load(xm + o + s);
#pragma GCC unroll 16
        for (int kb = 0; kb < KB; ++kb) {
          Vf d = load(dm + kb * g.n + o);
          // Keep d in a register: as a memory operand of each of its three FMAs it would be
          // loaded three times, and the loads, not the FMAs, would bound the loop.
          asm("" : "+v"(d));
#pragma GCC unroll 3
          for (int s = 0; s < 3; ++s) acc[kb][s] += d * xv[s];
        }
      }
#pragma GCC unroll 16
      for (int kb = 0; kb < KB; ++kb)
#pragma GCC unroll 3
        for (int s = 0; s < 3; ++s) keep[r][kb][s] = acc[kb][s];
    }
  }
  for (int r = 0; r < 3; ++r)
    for (int kb = 0; kb < KB; ++kb)
      for (int s = 0; s < 3; ++s) dw[((k0 + kb) * g.c + c) * 9 + r * 3 + s] += hsum(keep[r][kb][s]);
}

void filter(const Plane& g, int64_t images, const float* x, int64_t x_stride, const float* dy,
            int64_t dy_stride, float* dw) {
  constexpr int KB = ADA_DIRECT_FLT_KB;
  // Input channel outermost: its planes stay in L1 while every output channel passes.
  for (int64_t c = 0; c < g.c; ++c) {
    int64_t k0 = 0;
    for (; k0 + KB <= g.k; k0 += KB)
      filter_tile<KB>(g, images, x, x_stride, dy, dy_stride, k0, c, dw);
    for (; k0 < g.k; ++k0) filter_tile<1>(g, images, x, x_stride, dy, dy_stride, k0, c, dw);
  }
}

const DirectKernels kDirect = {ADA_DIRECT_NAME, V, forward, filter};

}  // namespace
}  // namespace ada::cpu::conv_detail
