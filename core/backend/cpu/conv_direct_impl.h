// The direct convolution kernels (conv_direct.h), written once with GCC vector extensions
// and built per ISA: conv_direct_avx2.cc (8 lanes, 16 registers) and conv_direct_avx512.cc (16
// lanes, 32 registers). Before including, a kernel file defines
//   ADA_DIRECT_NAME                       the kernels' name
//   ADA_DIRECT_LANES                      the vector width
//   ADA_DIRECT_FWD_KB, ADA_DIRECT_FWD_TT  forward register tile: output channels x vectors
//   ADA_DIRECT_FLT_KB, ADA_DIRECT_FLT_KB5 filter gradient register tile: output channels (x 3 or
//                                         5 taps), for 3x3 and 5x5 kernels
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

inline void store(float* p, Vf v) {
  __builtin_memcpy(p, &v, sizeof v);
}

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

// Runs f.template operator()<B>(k0) over output channels [0, k) in blocks of KB, then of 4, 2
// and 1 for the rest (K % KB < KB <= 8 takes at most one of each): a 6-channel layer runs as
// 4 + 2, not six single-channel tiles that load three times as much per multiply-add.
template <int KB, class F>
void channel_blocks(int64_t k, F&& f) {
  int64_t k0 = 0;
  for (; k0 + KB <= k; k0 += KB) f.template operator()<KB>(k0);
  if constexpr (KB > 4) {
    if (k0 + 4 <= k) f.template operator()<4>(k0), k0 += 4;
  }
  if constexpr (KB > 2) {
    if (k0 + 2 <= k) f.template operator()<2>(k0), k0 += 2;
  }
  for (; k0 < k; ++k0) f.template operator()<1>(k0);
}

// Output channels [k0, k0 + KB) at the TT vectors of positions from o0; T x T taps.
template <int T, int KB, int TT>
void fwd_tile(const Plane& g, const float* x, const float* w, float* y, int64_t k0, int64_t o0) {
  Vf acc[KB][TT];
#pragma GCC unroll 16
  for (int kb = 0; kb < KB; ++kb)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) acc[kb][t] = Vf{};
  const int64_t wk = g.c * T * T;
  const float* wb = w + k0 * wk;
  for (int64_t c = 0; c < g.c; ++c) {
    const float* xc = x + c * g.xplane + o0;
    const float* wc = wb + c * T * T;
#pragma GCC unroll 5
    for (int r = 0; r < T; ++r)
#pragma GCC unroll 5
      for (int s = 0; s < T; ++s) {
        Vf xv[TT];
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) xv[t] = load(xc + t * V + r * g.wp + s);
#pragma GCC unroll 16
        for (int kb = 0; kb < KB; ++kb) {
          const float wv = wc[kb * wk + r * T + s];
#pragma GCC unroll 16
          for (int t = 0; t < TT; ++t) acc[kb][t] += xv[t] * wv;
        }
      }
  }
  for (int kb = 0; kb < KB; ++kb)
    for (int t = 0; t < TT; ++t) store(y + (k0 + kb) * g.n + o0 + t * V, acc[kb][t]);
}

// fwd_tile for tt (1..TT) vectors.
template <int T, int KB, int TT>
void fwd_tile_n(int tt, const Plane& g, const float* x, const float* w, float* y, int64_t k0,
                int64_t o0) {
  if constexpr (TT > 1) {
    if (tt < TT) return fwd_tile_n<T, KB, TT - 1>(tt, g, x, w, y, k0, o0);
  }
  fwd_tile<T, KB, TT>(g, x, w, y, k0, o0);
}

template <int T>
void forward_t(const Plane& g, const float* x, const float* w, float* y) {
  constexpr int KB = ADA_DIRECT_FWD_KB, TT = ADA_DIRECT_FWD_TT;
  // The plane's nv vectors in ceil(nv / TT) tiles of as equal sizes as can be (4 vectors with
  // TT = 3: 2 + 2, not 3 + 1, which would run a narrow tile at a fraction of the speed).
  const int64_t nv = g.n / V, tiles = (nv + TT - 1) / TT;
  for (int64_t i = 0; i < tiles; ++i) {
    const int64_t t0 = nv * i / tiles;
    const int tt = static_cast<int>(nv * (i + 1) / tiles - t0);
    channel_blocks<KB>(
        g.k, [&]<int B>(int64_t k0) { fwd_tile_n<T, B, TT>(tt, g, x, w, y, k0, t0 * V); });
  }
}

void forward(const Plane& g, const float* x, const float* w, float* y) {
  if (g.taps == 5) return forward_t<5>(g, x, w, y);
  forward_t<3>(g, x, w, y);
}

// dw[k0 .. k0 + KB, c, :, :] += the products summed over the images (T x T taps). For each image
// and tap row r, KB x T register accumulators (each output-gradient vector feeds T taps, each
// input vector KB channels) sweep the plane; between sweeps they rest in `keep` (L1), so the
// image's output-gradient planes are read from L1 by the later sweeps, and the horizontal sums
// are taken once at the end.
template <int T, int KB>
void filter_tile(const Plane& g, int64_t images, const float* x, int64_t x_stride, const float* dy,
                 int64_t dy_stride, int64_t k0, int64_t c, float* dw) {
  Vf keep[T][KB][T];
  for (int r = 0; r < T; ++r)
    for (int kb = 0; kb < KB; ++kb)
      for (int s = 0; s < T; ++s) keep[r][kb][s] = Vf{};
  for (int64_t m = 0; m < images; ++m) {
    const float* dm = dy + m * dy_stride + k0 * g.n;
#pragma GCC unroll 1
    for (int r = 0; r < T; ++r) {
      const float* xm = x + m * x_stride + c * g.xplane + r * g.wp;
      Vf acc[KB][T];
#pragma GCC unroll 16
      for (int kb = 0; kb < KB; ++kb)
#pragma GCC unroll 5
        for (int s = 0; s < T; ++s) acc[kb][s] = keep[r][kb][s];
      for (int64_t o = 0; o < g.n; o += V) {
        Vf xv[T];
#pragma GCC unroll 5
        for (int s = 0; s < T; ++s) xv[s] = load(xm + o + s);
#pragma GCC unroll 16
        for (int kb = 0; kb < KB; ++kb) {
          Vf d = load(dm + kb * g.n + o);
          // Keep d in a register: as a memory operand of each of its T FMAs it would be loaded
          // T times, and the loads, not the FMAs, would bound the loop.
          asm("" : "+v"(d));
#pragma GCC unroll 5
          for (int s = 0; s < T; ++s) acc[kb][s] += d * xv[s];
        }
      }
#pragma GCC unroll 16
      for (int kb = 0; kb < KB; ++kb)
#pragma GCC unroll 5
        for (int s = 0; s < T; ++s) keep[r][kb][s] = acc[kb][s];
    }
  }
  for (int r = 0; r < T; ++r)
    for (int kb = 0; kb < KB; ++kb)
      for (int s = 0; s < T; ++s)
        dw[((k0 + kb) * g.c + c) * T * T + r * T + s] += hsum(keep[r][kb][s]);
}

template <int T, int KB>
void filter_t(const Plane& g, int64_t images, const float* x, int64_t x_stride, const float* dy,
              int64_t dy_stride, float* dw) {
  // Input channel outermost: its planes stay in L1 while every output channel passes.
  for (int64_t c = 0; c < g.c; ++c)
    channel_blocks<KB>(g.k, [&]<int B>(int64_t k0) {
      filter_tile<T, B>(g, images, x, x_stride, dy, dy_stride, k0, c, dw);
    });
}

void filter(const Plane& g, int64_t images, const float* x, int64_t x_stride, const float* dy,
            int64_t dy_stride, float* dw) {
  if (g.taps == 5)
    return filter_t<5, ADA_DIRECT_FLT_KB5>(g, images, x, x_stride, dy, dy_stride, dw);
  filter_t<3, ADA_DIRECT_FLT_KB>(g, images, x, x_stride, dy, dy_stride, dw);
}

const DirectKernels kDirect = {ADA_DIRECT_NAME, V, forward, filter};

}  // namespace
}  // namespace ada::cpu::conv_detail
