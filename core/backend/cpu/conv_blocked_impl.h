// The batch-blocked kernels (conv_blocked.h), built per ISA after conv_direct_impl.h in the same
// translation unit (they share its vector type, loads and channel blocking). Before including,
// a kernel file defines
//   ADA_BLOCKED_NAME                        the kernels' name
//   ADA_BLOCKED_FWD_KB, ADA_BLOCKED_FWD_TT  forward register tile: output channels x positions
//   ADA_BLOCKED_FLT_KB, ADA_BLOCKED_FLT_RT  filter gradient register tile: output channels x
//                                           kernel rows (x 3 columns)
// Same rules as conv_direct_impl.h: an anonymous namespace and no standard-library templates.
#pragma once

#include "core/backend/cpu/conv_blocked.h"
#include "core/backend/cpu/conv_direct_impl.h"

namespace ada::cpu::conv_detail {
namespace {

typedef unsigned int Vu __attribute__((vector_size(V * 4)));

// v rounded to bf16 (nearest even; NaN stays a quiet NaN), as half::bf16_from_float.
inline Vf round_bf16(Vf v) {
  Vu u;
  __builtin_memcpy(&u, &v, sizeof u);
  const Vu r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  const Vu nan = (u | 0x00400000u) & 0xFFFF0000u;
  const Vu out = (u & 0x7FFFFFFFu) > 0x7F800000u ? nan : r;
  __builtin_memcpy(&v, &out, sizeof v);
  return v;
}

// Transposes the V x V matrix of rows r[0..V) in place: log2(V) rounds of interleaving row i
// with row i + V/2 (the perfect shuffle), each a two-source permutation per row.
inline void transpose(Vf* r) {
  for (int round = 1; round < V; round *= 2) {
    Vf t[V];
    for (int i = 0; i < V / 2; ++i) {
#if ADA_DIRECT_LANES == 16
      t[2 * i] = __builtin_shufflevector(r[i], r[i + 8], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21,
                                         6, 22, 7, 23);
      t[2 * i + 1] = __builtin_shufflevector(r[i], r[i + 8], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28,
                                             13, 29, 14, 30, 15, 31);
#elif ADA_DIRECT_LANES == 8
      t[2 * i] = __builtin_shufflevector(r[i], r[i + 4], 0, 8, 1, 9, 2, 10, 3, 11);
      t[2 * i + 1] = __builtin_shufflevector(r[i], r[i + 4], 4, 12, 5, 13, 6, 14, 7, 15);
#else
#error "conv_blocked_impl.h: 8 or 16 lanes"
#endif
    }
    for (int i = 0; i < V; ++i) r[i] = t[i];
  }
}

// The first cnt (< V) floats at s, zeros after; and their store. Through a local buffer: taking
// the address of a vector in an array (a memcpy into rows[l]) kept the whole array in memory.
inline Vf load_first(const float* s, int64_t cnt) {
  float t[V] = {};
  __builtin_memcpy(t, s, sizeof(float) * cnt);
  return load(t);
}

inline void store_first(float* d, Vf v, int64_t cnt) {
  float t[V];
  store(t, v);
  __builtin_memcpy(d, t, sizeof(float) * cnt);
}

// rows[l] = positions [o0, o0 + cnt) of image l's plane at src + l * image_stride (cnt <= V),
// zeros past cnt and for l >= images.
inline void load_rows(const float* src, int64_t images, int64_t image_stride, int64_t o0,
                      int64_t cnt, Vf* rows) {
#pragma GCC unroll 16
  for (int l = 0; l < V; ++l) {
    const float* sl = src + l * image_stride + o0;
    rows[l] = l >= images ? Vf{} : cnt == V ? load(sl) : load_first(sl, cnt);
  }
}

// Zeros in the padding of a plane of hp x wp vectors around the h x w data at (ph, pw).
inline void zero_padding(float* dp, int64_t h, int64_t w, int64_t ph, int64_t pw) {
  const int64_t wp = w + 2 * pw, hp = h + 2 * ph;
  for (int64_t j = 0; j < ph * wp; ++j) store(dp + j * V, Vf{});  // the top rows
  for (int64_t i = ph; i < ph + h; ++i) {
    float* row = dp + i * wp * V;
    for (int64_t j = 0; j < pw; ++j) {  // the left and right borders
      store(row + j * V, Vf{});
      store(row + (pw + w + j) * V, Vf{});
    }
  }
  for (int64_t j = (ph + h) * wp; j < hp * wp; ++j) store(dp + j * V, Vf{});  // the bottom rows
}

void to_blocked(const float* src, int64_t images, int64_t image_stride, int64_t planes, int64_t h,
                int64_t w, int64_t ph, int64_t pw, bool r16, float* dst) {
  const int64_t n = h * w, wp = w + 2 * pw, hp = h + 2 * ph, plane = hp * wp * V;
  for (int64_t pl = 0; pl < planes; ++pl) {
    float* dp = dst + pl * plane;
    zero_padding(dp, h, w, ph, pw);
    float* d = dp + (ph * wp + pw) * V;
    int64_t i = 0, j = 0;  // the row and column of position o0 + t below
    for (int64_t o0 = 0; o0 < n; o0 += V) {
      const int64_t cnt = n - o0 < V ? n - o0 : V;
      Vf rows[V];
      load_rows(src + pl * n, images, image_stride, o0, cnt, rows);
      if (r16)
        for (int l = 0; l < V; ++l) rows[l] = round_bf16(rows[l]);
      transpose(rows);
#pragma GCC unroll 16
      for (int t = 0; t < V; ++t) {
        if (t == cnt) break;
        store(d + (i * wp + j) * V, rows[t]);
        if (++j == w) j = 0, ++i;
      }
    }
  }
}

void from_blocked(const float* src, int64_t images, int64_t planes, int64_t n, float* dst,
                  int64_t image_stride) {
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t o0 = 0; o0 < n; o0 += V) {
      const int64_t cnt = n - o0 < V ? n - o0 : V;
      Vf rows[V];
#pragma GCC unroll 16
      for (int t = 0; t < V; ++t) rows[t] = t < cnt ? load(src + (pl * n + o0 + t) * V) : Vf{};
      transpose(rows);
#pragma GCC unroll 16
      for (int l = 0; l < V; ++l) {
        if (l == images) break;
        float* dl = dst + l * image_stride + pl * n + o0;
        if (cnt == V)
          store(dl, rows[l]);
        else
          store_first(dl, rows[l], cnt);
      }
    }
}

constexpr int BKB = ADA_BLOCKED_FWD_KB, BTT = ADA_BLOCKED_FWD_TT;

// Output channels [k0, k0 + B) of a channel block come as wb[c][9][B] (B = KB except in the
// remainder blocks of channel_blocks).
void pack(const Blocked& g, const float* w, float* out) {
  channel_blocks<BKB>(g.k, [&]<int B>(int64_t k0) {
    float* o = out + k0 * g.c * 9;
    for (int64_t c = 0; c < g.c; ++c)
      for (int t = 0; t < 9; ++t)
        for (int kb = 0; kb < B; ++kb) o[(c * 9 + t) * B + kb] = w[((k0 + kb) * g.c + c) * 9 + t];
  });
}

// The products of a forward tile, one input channel (In: float) at a time in fp32 multiply-adds.
// The bf16 kernel (conv_blocked_bf16.cc) has its own: channel pairs (In: a 32-bit pair of bf16)
// and vdpbf16ps.
struct Fp32Products {
  using In = float;  // what a weight, and a lane of an input vector, holds
  using X = Vf;      // an input vector
  using W = float;   // a weight as the multiply-add takes it
  static int64_t depth(const Blocked& g) { return g.c; }  // input values of In per position
  static X load_x(const In* p) { return load(p); }
  static W weight(In w) { return w; }
  static Vf madd(Vf acc, X x, W w) { return acc + x * w; }
};

// Output channels [k0, k0 + KB) at the TT output positions o0 + t, whose top-left taps are at
// x + off[t]; wb the weights of the channel block as pack lays them out.
template <class P, int KB, int TT>
void fwd_tile(const Blocked& g, const typename P::In* x, const typename P::In* wb, float* y,
              int64_t k0, int64_t o0, const int64_t* off) {
  Vf acc[KB][TT];
#pragma GCC unroll 16
  for (int kb = 0; kb < KB; ++kb)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) acc[kb][t] = Vf{};
  const int64_t cs = g.hp * g.wp * V, row = g.wp * V;
  for (int64_t c = 0; c < P::depth(g); ++c) {
    const typename P::In* xc = x + c * cs;
    const typename P::In* wc = wb + c * 9 * KB;
#pragma GCC unroll 3
    for (int r = 0; r < 3; ++r)
#pragma GCC unroll 3
      for (int s = 0; s < 3; ++s) {
        typename P::X xv[TT];
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) xv[t] = P::load_x(xc + off[t] + r * row + s * V);
#pragma GCC unroll 16
        for (int kb = 0; kb < KB; ++kb) {
          const typename P::W wv = P::weight(wc[(r * 3 + s) * KB + kb]);
#pragma GCC unroll 16
          for (int t = 0; t < TT; ++t) acc[kb][t] = P::madd(acc[kb][t], xv[t], wv);
        }
      }
  }
  const int64_t pq = g.p * g.q;
  for (int kb = 0; kb < KB; ++kb)
    for (int t = 0; t < TT; ++t) store(y + ((k0 + kb) * pq + o0 + t) * V, acc[kb][t]);
}

template <int B, int T, class F>
void with_tile_size(int tt, F& tile, int64_t k0, int64_t o0, const int64_t* off) {
  if constexpr (T > 1) {
    if (tt < T) return with_tile_size<B, T - 1>(tt, tile, k0, o0, off);
  }
  tile.template operator()<B, T>(k0, o0, off);
}

// Runs tile.template operator()<B, T>(k0, o0, off) over the output positions in tiles of T <=
// BTT positions o0 .. o0 + T - 1 of as equal sizes as can be (as forward_t), whose top-left taps
// are at off[t] in an input plane, and over the output channels in the blocks k0 .. k0 + B - 1
// of channel_blocks<BKB>: the loop nest of the forward kernels.
template <class F>
void for_tiles(const Blocked& g, F&& tile) {
  const int64_t pq = g.p * g.q, tiles = (pq + BTT - 1) / BTT;
  for (int64_t i = 0; i < tiles; ++i) {
    const int64_t o0 = pq * i / tiles;
    const int tt = static_cast<int>(pq * (i + 1) / tiles - o0);
    int64_t off[BTT];
    for (int t = 0; t < tt; ++t) {
      const int64_t o = o0 + t, r = o / g.q, s = o % g.q;
      off[t] = (r * g.stride * g.wp + s * g.stride) * V;
    }
    channel_blocks<BKB>(g.k,
                        [&]<int B>(int64_t k0) { with_tile_size<B, BTT>(tt, tile, k0, o0, off); });
  }
}

void bforward(const Blocked& g, const float* x, const float* wpk, float* y) {
  for_tiles(g, [&]<int B, int T>(int64_t k0, int64_t o0, const int64_t* off) {
    fwd_tile<Fp32Products, B, T>(g, x, wpk + k0 * g.c * 9, y, k0, o0, off);
  });
}

// dw[k0 .. k0 + KB, c, r0 .. r0 + RT, :] += the products over the block's positions and lanes:
// KB x RT x 3 accumulators, each input vector feeding KB of them and each gradient vector 3 RT.
template <int KB, int RT>
void bfilter_tile(const Blocked& g, const float* x, const float* dy, float* dw, int64_t k0,
                  int64_t c, int r0) {
  Vf acc[KB][RT][3];
#pragma GCC unroll 16
  for (int kb = 0; kb < KB; ++kb)
#pragma GCC unroll 3
    for (int rr = 0; rr < RT; ++rr)
#pragma GCC unroll 3
      for (int s = 0; s < 3; ++s) acc[kb][rr][s] = Vf{};
  const int64_t pq = g.p * g.q, row = g.wp * V;
  const float* xc = x + c * g.hp * row + r0 * row;
  const float* d = dy + k0 * pq * V;
  for (int64_t i = 0; i < g.p; ++i) {
    const float* xr = xc + i * g.stride * row;
    const float* dr = d + i * g.q * V;
    for (int64_t j = 0; j < g.q; ++j) {
      const float* xo = xr + j * g.stride * V;
      Vf xv[RT][3];
#pragma GCC unroll 3
      for (int rr = 0; rr < RT; ++rr)
#pragma GCC unroll 3
        for (int s = 0; s < 3; ++s) xv[rr][s] = load(xo + rr * row + s * V);
#pragma GCC unroll 16
      for (int kb = 0; kb < KB; ++kb) {
        Vf dv = load(dr + (kb * pq + j) * V);
        asm("" : "+v"(dv));  // one load, not one per FMA (see filter_tile)
#pragma GCC unroll 3
        for (int rr = 0; rr < RT; ++rr)
#pragma GCC unroll 3
          for (int s = 0; s < 3; ++s) acc[kb][rr][s] += dv * xv[rr][s];
      }
    }
  }
  for (int kb = 0; kb < KB; ++kb)
    for (int rr = 0; rr < RT; ++rr)
      for (int s = 0; s < 3; ++s)
        dw[((k0 + kb) * g.c + c) * 9 + (r0 + rr) * 3 + s] += hsum(acc[kb][rr][s]);
}

void bfilter(const Blocked& g, const float* x, const float* dy, float* dw) {
  constexpr int KB = ADA_BLOCKED_FLT_KB, RT = ADA_BLOCKED_FLT_RT;
  // Input channel outermost: its plane stays in cache while every output channel passes.
  for (int64_t c = 0; c < g.c; ++c)
    channel_blocks<KB>(g.k, [&]<int B>(int64_t k0) {
      for (int r0 = 0; r0 < 3; r0 += RT) bfilter_tile<B, RT>(g, x, dy, dw, k0, c, r0);
    });
}

const BlockedKernels kBlocked = {ADA_BLOCKED_NAME, V,          pack,        bforward,
                                 bfilter,          to_blocked, from_blocked};

}  // namespace
}  // namespace ada::cpu::conv_detail
