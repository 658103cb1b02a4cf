// conv2d forward, backward-data and backward-filter on NCHW, as im2col + GEMM.
// Images are processed in groups: the columns of G images sit side by side in one
// [C*R*S, G*P*Q] matrix, so late layers with small P*Q still give the GEMM wide operands.
// Groups run in parallel (one single-threaded GEMM per thread) when there are at least as many
// groups as threads; otherwise groups run one after another with a multi-threaded GEMM.
// Fast paths: 1x1 stride-1 unpadded convolutions skip im2col entirely; im2col/col2im compute
// each kernel tap's valid output range once, so the inner loops have no bounds tests and
// unit-stride rows are plain copies (3x3 and 7x7/2 stems take these paths).
// The products run on cpu::sgemm, which goes single-threaded inside a parallel region.
// 3x3 and 5x5 stride-1 convolutions of up to 256 channels (the filter gradient: 128) skip
// im2col: they run on the direct kernels of conv_direct.h, images in parallel
// (ADA_CONV_DIRECT=0 turns that off, for comparisons). With at least a block of 16 (AVX2: 8)
// images, 3x3 convolutions of stride 1 or 2 of up to 64 channels onto planes of up to 28 x 28
// run on the batch-blocked kernels of conv_blocked.h instead (ADA_CONV_BLOCKED=0 turns only
// those off).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/backend/cpu/conv_blocked.h"
#include "core/backend/cpu/conv_cpu.h"
#include "core/backend/cpu/conv_direct.h"
#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/backend/cpu/sgemm.h"
#include "core/backend/op_shapes.h"
#include "core/cpu_isa.h"
#include "core/half.h"
#include "core/host_memory.h"
#include "core/ops.h"
#include "core/precision.h"

namespace ada::cpu {
namespace {

using backend::ConvGeom;
using backend::make_geom;

// Range [lo, hi) of output positions o whose input position o*stride - pad + off is in [0, n).
inline void valid_range(int64_t out, int64_t n, int64_t stride, int64_t off, int64_t& lo,
                        int64_t& hi) {
  // need 0 <= o*stride + off < n  with off = tap*dil - pad
  lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  hi = n - off <= 0 ? 0 : (n - off + stride - 1) / stride;
  lo = std::min(lo, out);
  hi = std::clamp(hi, lo, out);
}

// Writes the columns of one image into col (row stride ld) at column offset 0.
template <bool kUnitStride>
void im2col_impl(const float* x, const ConvGeom& g, float* col, int64_t ld) {
  const auto& pr = g.prm;
  for (int64_t c = 0; c < g.c; ++c) {
    const float* xc = x + c * g.h * g.w;
    for (int64_t r = 0; r < g.r; ++r) {
      int64_t offh = r * pr.dil_h - pr.pad_h, plo, phi;
      valid_range(g.p, g.h, pr.stride_h, offh, plo, phi);
      for (int64_t s = 0; s < g.s; ++s) {
        int64_t offw = s * pr.dil_w - pr.pad_w, qlo, qhi;
        valid_range(g.q, g.w, pr.stride_w, offw, qlo, qhi);
        float* dst = col + ((c * g.r + r) * g.s + s) * ld;
        std::memset(dst, 0, sizeof(float) * plo * g.q);
        for (int64_t p = plo; p < phi; ++p) {
          float* d = dst + p * g.q;
          const float* src = xc + (p * pr.stride_h + offh) * g.w + offw;
          std::fill(d, d + qlo, 0.f);
          if constexpr (kUnitStride) {
            std::memcpy(d + qlo, src + qlo, sizeof(float) * (qhi - qlo));
          } else {
            for (int64_t q = qlo; q < qhi; ++q) d[q] = src[q * pr.stride_w];
          }
          std::fill(d + qhi, d + g.q, 0.f);
        }
        std::memset(dst + phi * g.q, 0, sizeof(float) * (g.p - phi) * g.q);
      }
    }
  }
}

void im2col(const float* x, const ConvGeom& g, float* col, int64_t ld) {
  if (g.prm.stride_w == 1)
    im2col_impl<true>(x, g, col, ld);
  else
    im2col_impl<false>(x, g, col, ld);
}

// Adds the columns (row stride ld) back into one image dx (which the caller zeroed).
void col2im(const float* col, const ConvGeom& g, int64_t ld, float* dx) {
  const auto& pr = g.prm;
  for (int64_t c = 0; c < g.c; ++c) {
    float* xc = dx + c * g.h * g.w;
    for (int64_t r = 0; r < g.r; ++r) {
      int64_t offh = r * pr.dil_h - pr.pad_h, plo, phi;
      valid_range(g.p, g.h, pr.stride_h, offh, plo, phi);
      for (int64_t s = 0; s < g.s; ++s) {
        int64_t offw = s * pr.dil_w - pr.pad_w, qlo, qhi;
        valid_range(g.q, g.w, pr.stride_w, offw, qlo, qhi);
        const float* src = col + ((c * g.r + r) * g.s + s) * ld;
        for (int64_t p = plo; p < phi; ++p) {
          const float* sp = src + p * g.q;
          float* d = xc + (p * pr.stride_h + offh) * g.w + offw;
          if (pr.stride_w == 1) {
            for (int64_t q = qlo; q < qhi; ++q) d[q] += sp[q];
          } else {
            for (int64_t q = qlo; q < qhi; ++q) d[q * pr.stride_w] += sp[q];
          }
        }
      }
    }
  }
}

// ---- The direct path (conv_direct.h) ----

using conv_detail::DirectKernels;
using conv_detail::Plane;

// Up to these many output x input channel pairs the direct kernels beat im2col + GEMM (one
// thread, AVX-512, batch 32-64, measured with bench_ops and per-pass timings): the forward and
// backward-data kernels up to ResNet-50's 256-channel 3x3 layers (1.15-1.4x), the filter
// gradient up to 128 channels (its horizontal sums and short planes lose to the GEMM beyond).
// In the bf16 mode the GEMM's bf16 products run at twice its fp32 rate, so the fp32 direct
// kernels (on rounded operands) win only up to 64 channels: with them up to 256 channels the
// ResNet-50 bf16 step was 1.30x our fp32 one, with im2col for all 1.40x, with the limit 1.39x;
// ResNet-20 (16-64 channels) 0.88x on im2col, 0.95-0.99x direct (bench_step --precision bf16).
// On AMX tiles (cpu::Isa::amx) the bf16 GEMM runs at 5-6x the fp32 one (886 against 156 GFLOP/s,
// 2048^3, one thread of an AMX Xeon), and im2col beats the plane kernels from 64 channels on:
// ResNet-50's 3x3 64->64 on 56x56 151 against 125 GFLOP/s (bench_ops --precision bf16
// --verbose, batch 16); the batch-blocked kernels still win on ResNet-20's small planes (their
// limits below are their own).
constexpr int64_t kDirectMaxKC = 256 * 256, kDirectFilterMaxKC = 128 * 128,
                  kDirectBf16MaxKC = 64 * 64, kDirectAmxMaxKC = 32 * 32;

bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "0";
}

bool direct_allowed() {
  static const bool on = !env_off("ADA_CONV_DIRECT");
  return on;
}

bool blocked_allowed() {
  static const bool on = direct_allowed() && !env_off("ADA_CONV_BLOCKED");
  return on;
}

// Whether the direct kernels' operands are rounded to bf16 (the bf16 mode, see direct_for).
bool direct_bf16() {
  return cpu_matmul_precision() == Precision::bf16;
}

float round_bf16(float v) {
  return half::bf16_to_float(half::bf16_from_float(v));
}

// n floats from src to dst, rounded to bf16 (nearest even, as the bf16 GEMM packs) when r16.
void copy_floats(float* dst, const float* src, int64_t n, bool r16) {
  if (!r16) {
    std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = round_bf16(src[i]);
}

// The direct kernels for pass `pass` of `g`, or null: 3x3 or 5x5, stride 1, no dilation, padding
// below the kernel size (so that the backward-data pass is the same kernel run on the padded
// gradient), at most kDirectMaxKC (kDirectFilterMaxKC; kDirectBf16MaxKC in the bf16 mode)
// channel pairs and a CPU with AVX2 or AVX-512 in use. In the bf16 mode both operands are rounded
// to bf16 as they are copied for the kernels: the products of two bf16 values are exact in fp32,
// so the fp32 kernels then compute what a bf16 dot product with fp32 accumulation does.
const DirectKernels* direct_for(const ConvGeom& g, ConvPass pass) {
  const auto& pr = g.prm;
  const int64_t max_kc = direct_bf16() ? (isa() == Isa::amx ? kDirectAmxMaxKC : kDirectBf16MaxKC)
                         : pass == ConvPass::backward_filter ? kDirectFilterMaxKC
                                                             : kDirectMaxKC;
  if ((g.r != 3 && g.r != 5) || g.s != g.r || pr.stride_h != 1 || pr.stride_w != 1 ||
      pr.dil_h != 1 || pr.dil_w != 1 || pr.pad_h >= g.r || pr.pad_w >= g.r || g.k * g.c > max_kc ||
      !direct_allowed())
    return nullptr;
  switch (isa()) {
    case Isa::amx:
    case Isa::avx512:
      return &conv_detail::avx512_direct();
    case Isa::avx2:
      return &conv_detail::avx2_direct();
    default:
      return nullptr;
  }
}

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

using conv_detail::Blocked;
using conv_detail::BlockedBf16Kernels;
using conv_detail::BlockedKernels;

// The batch-blocked kernels (conv_blocked.h) for pass `pass` of `g`, or null: 3x3, stride 1 or
// 2 (the backward-data pass: 1), no dilation, padding at most 2, at least one block of images
// with at most a quarter of the lanes of the last block left empty, planes of at most
// kBlockedMaxPlane output positions, at most kBlockedMaxKC channel pairs, and a CPU with AVX2 or
// AVX-512 in use. They take precedence over the plane kernels where both apply. The channel
// limit keeps them to where they win clearly (ResNet-20's 16-64 channels: 1.1-1.4x the plane
// kernels, 2-2.5x im2col for stride 2): on ResNet-50's 128-256 channels they were within the
// noise of the plane kernels, and their scratch, a block of images at a time, added 140 MB (5%)
// to its peak memory.
constexpr int64_t kBlockedMaxPlane = 28 * 28, kBlockedMaxKC = 64 * 64;

const BlockedKernels* blocked_for(const ConvGeom& g, ConvPass pass) {
  const auto& pr = g.prm;
  const int64_t stride_max = pass == ConvPass::backward_data ? 1 : 2;
  if (g.r != 3 || g.s != 3 || pr.stride_h != pr.stride_w || pr.stride_h > stride_max ||
      pr.dil_h != 1 || pr.dil_w != 1 || pr.pad_h > 2 || pr.pad_w > 2 || g.k * g.c > kBlockedMaxKC ||
      g.pq() > kBlockedMaxPlane || !blocked_allowed())
    return nullptr;
  const BlockedKernels* kern = nullptr;
  switch (isa()) {
    case Isa::amx:
    case Isa::avx512:
      kern = &conv_detail::avx512_blocked();
      break;
    case Isa::avx2:
      kern = &conv_detail::avx2_blocked();
      break;
    default:
      return nullptr;
  }
  return g.n >= kern->lanes && round_up(g.n, kern->lanes) * 4 <= g.n * 5 ? kern : nullptr;
}

// The kernels' view of a taps x taps convolution of c planes of h x w, padded by (ph, pw), into
// k planes of p rows (of w + 2 pw - taps + 1 columns).
Plane direct_plane(const DirectKernels& kern, int64_t taps, int64_t c, int64_t w, int64_t pw,
                   int64_t k, int64_t p) {
  const int64_t wp = w + 2 * pw, n = round_up(p * wp, kern.lanes);
  return {taps, c, k, wp, n, round_up(n + (taps - 1) * (wp + 1), kern.lanes)};
}

// A scratch buffer of at least n floats from a 64-byte boundary, holding whatever its last use
// left: the kernels' copies of their operands. Up to 1 MiB it is the calling thread's own buffer
// `slot` (0 or 1), kept from call to call: fresh buffers from 128 KiB up come from mmap and cost
// a page fault per 4 KiB at every call (a quarter of a forward pass on ResNet-20's planes), and
// below 64 KiB host tensors would come from malloc at every step (the steady-state test in
// test_block_cache.cc counts those). Larger ones (ResNet-50's) come from the caching host
// allocator (core/host_memory.h), which reuses freed blocks without page faults and counts them
// with the tensors: kept by the threads they raised ResNet-50's peak memory by 5%.
class Scratch {
 public:
  Scratch(int slot, int64_t n) {
    if (n <= kThreadFloats) {
      thread_local std::vector<float> bufs[2];
      std::vector<float>& v = bufs[slot];
      if (static_cast<int64_t>(v.size()) < n + 16) v.resize(static_cast<size_t>(n + 16));
      p = v.data() + (16 - reinterpret_cast<uintptr_t>(v.data()) / sizeof(float) % 16) % 16;
    } else {
      bytes_ = static_cast<size_t>(n) * sizeof(float);
      block_ = host::alloc(bytes_);  // 64-byte aligned
      p = static_cast<float*>(block_);
    }
  }
  ~Scratch() {
    if (block_) host::free(block_, bytes_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* p;

 private:
  static constexpr int64_t kThreadFloats = int64_t(1) << 18;
  void* block_ = nullptr;
  size_t bytes_ = 0;
};

// Runs part(b, e, acc) over [0, slots) in parallel, each chunk [b, e) with its own zeroed
// accumulator of n floats, then adds the accumulators into out in slot order.
template <class F>
void sum_over_slots(int64_t slots, int64_t n, float* out, F part) {
  std::vector<float> acc(static_cast<size_t>(slots * n), 0.f);
  parallel_for(0, slots, 1, [&](int64_t b, int64_t e) { part(b, e, acc.data() + b * n); });
  for (int64_t sl = 0; sl < slots; ++sl)
    for (int64_t i = 0; i < n; ++i) out[i] += acc[sl * n + i];
}

// One image's planes of h x w into out (pl.c planes of pl.xplane floats, rows of pl.wp) at
// offset (ph, pw), rounded to bf16 when r16; zeros everywhere else.
void pad_planes(const float* x, const Plane& pl, int64_t h, int64_t w, int64_t ph, int64_t pw,
                float* out, bool r16) {
  for (int64_t c = 0; c < pl.c; ++c) {
    float* o = out + c * pl.xplane;
    std::fill(o, o + ph * pl.wp + pw, 0.f);  // top rows, and the left border of the first row
    for (int64_t i = 0; i < h; ++i) {
      float* row = o + (i + ph) * pl.wp + pw;
      copy_floats(row, x + (c * h + i) * w, w, r16);
      std::fill(row + w, row + pl.wp, 0.f);  // its right border and the next row's left one
    }
    std::fill(o + (h + ph) * pl.wp + pw, o + pl.xplane, 0.f);  // bottom rows and the slack
  }
}

// y (n images of k planes of p x q) = the direct convolution of x (n images of c planes of
// h x w, padded by (ph, pw)) with wt [k, c, taps, taps] (already rounded in bf16 mode); images
// in parallel.
void direct_forward(const DirectKernels& kern, int64_t taps, int64_t n, const float* x, int64_t c,
                    int64_t h, int64_t w, int64_t ph, int64_t pw, const float* wt, int64_t k,
                    int64_t p, int64_t q, float* y) {
  const Plane pl = direct_plane(kern, taps, c, w, pw, k, p);
  const bool r16 = direct_bf16();
  parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
    Scratch xs(0, pl.c * pl.xplane), ys(1, pl.k * pl.n);
    float *xb = xs.p, *yb = ys.p;
    for (int64_t m = b; m < e; ++m) {
      pad_planes(x + m * c * h * w, pl, h, w, ph, pw, xb, r16);
      kern.forward(pl, xb, wt, yb);
      for (int64_t kk = 0; kk < k; ++kk)  // drop the discarded positions
        for (int64_t i = 0; i < p; ++i)
          std::memcpy(y + ((m * k + kk) * p + i) * q, yb + kk * pl.n + i * pl.wp,
                      sizeof(float) * q);
    }
  });
}

// dw (zeroed) += the filter gradient over the batch: each thread sums its images into its own
// accumulator, in groups of images small enough for L2 (sum_over_slots).
void direct_filter(const DirectKernels& kern, const ConvGeom& g, const float* x, const float* dy,
                   float* dw) {
  const Plane pl = direct_plane(kern, g.r, g.c, g.w, g.prm.pad_w, g.k, g.p);
  const int64_t xs = pl.c * pl.xplane, ds = pl.k * pl.n;
  const int64_t group = std::clamp<int64_t>((int64_t(1) << 17) / (xs + ds), 1, g.n);
  const int64_t slots = std::min<int64_t>(num_threads(), g.n);
  const bool r16 = direct_bf16();
  sum_over_slots(slots, g.k * g.c * g.r * g.s, dw, [&](int64_t b, int64_t e, float* acc) {
    // The output gradient in the kernels' layout: rows of wp, zeros at the discarded positions
    // (set here once; the rows are rewritten for each group).
    Scratch xsc(0, group * xs), dsc(1, group * ds);
    float *xb = xsc.p, *db = dsc.p;
    std::fill(db, db + group * ds, 0.f);
    for (int64_t m = g.n * b / slots; m < g.n * e / slots; m += group) {
      const int64_t gm = std::min(group, g.n * e / slots - m);
      for (int64_t j = 0; j < gm; ++j) {
        pad_planes(x + (m + j) * g.c * g.h * g.w, pl, g.h, g.w, g.prm.pad_h, g.prm.pad_w,
                   xb + j * xs, r16);
        for (int64_t k = 0; k < g.k; ++k)
          for (int64_t i = 0; i < g.p; ++i)
            copy_floats(db + j * ds + k * pl.n + i * pl.wp,
                        dy + (((m + j) * g.k + k) * g.p + i) * g.q, g.q, r16);
      }
      kern.filter(pl, gm, xb, xs, db, ds, acc);
    }
  });
}

// y (n images of k planes of p x q) = x (n images of c planes of h x w, padded by (ph, pw))
// convolved at `stride` with wt [k, c, 3, 3] (already rounded in bf16 mode), one block of
// kern.lanes images at a time, blocks in parallel.
// The vdpbf16ps kernels that the bf16 mode runs instead of `kern`'s forward (AVX-512 with
// AVX512_BF16), or null: then `kern` runs on operands rounded to bf16. Not at the amx level:
// on the AMX Xeon we measured, vdpbf16ps does not beat two fp32 FMAs (it does on AMD Zen 5, 1.2x
// the ResNet-20 step), and the ResNet-20 bf16 step ran at 0.80x our fp32 step with these
// kernels, 0.97x with the fp32 ones on rounded operands (bench_step --model resnet20_mnist
// --batch 64 --threads 1 --precision bf16; ResNet-20 convolutions 102 against 137 GFLOP/s).
const BlockedBf16Kernels* blocked_bf16(const BlockedKernels& kern) {
  return direct_bf16() && kern.lanes == 16 && isa() == Isa::avx512 && bf16_available()
             ? &conv_detail::avx512_bf16_blocked()
             : nullptr;
}

void blocked_forward(const BlockedKernels& kern, int64_t n, const float* x, int64_t c, int64_t h,
                     int64_t w, int64_t ph, int64_t pw, int64_t stride, const float* wt, int64_t k,
                     int64_t p, int64_t q, float* y) {
  const Blocked bg{stride, c, k, h + 2 * ph, w + 2 * pw, p, q};
  const bool r16 = direct_bf16();
  const BlockedBf16Kernels* b16 = blocked_bf16(kern);
  const int64_t cx = b16 ? (c + 1) / 2 * 2 : c;  // floats per input position (channel pairs)
  std::vector<float> wpk(static_cast<size_t>(k * cx * 9));
  if (b16)
    b16->pack(bg, wt, reinterpret_cast<uint32_t*>(wpk.data()));
  else
    kern.pack(bg, wt, wpk.data());
  const int64_t lanes = kern.lanes, blocks = (n + lanes - 1) / lanes;
  parallel_for(0, blocks, 1, [&](int64_t b, int64_t e) {
    Scratch xs(0, cx * bg.hp * bg.wp * lanes), ys(1, k * p * q * lanes);
    float *xb = xs.p, *yb = ys.p;
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t m0 = blk * lanes, images = std::min(lanes, n - m0);
      if (b16) {
        auto* xp = reinterpret_cast<uint32_t*>(xb);
        b16->to_blocked(x + m0 * c * h * w, images, c * h * w, c, h, w, ph, pw, xp);
        b16->forward(bg, xp, reinterpret_cast<const uint32_t*>(wpk.data()), yb);
      } else {
        kern.to_blocked(x + m0 * c * h * w, images, c * h * w, c, h, w, ph, pw, r16, xb);
        kern.forward(bg, xb, wpk.data(), yb);
      }
      kern.from_blocked(yb, images, k, p * q, y + m0 * k * p * q, k * p * q);
    }
  });
}

// dw (zeroed) += the filter gradient over the batch on the blocked kernels, blocks in parallel
// (sum_over_slots).
void blocked_filter(const BlockedKernels& kern, const ConvGeom& g, const float* x, const float* dy,
                    float* dw) {
  const auto& pr = g.prm;
  const Blocked bg{pr.stride_h, g.c, g.k, g.h + 2 * pr.pad_h, g.w + 2 * pr.pad_w, g.p, g.q};
  const bool r16 = direct_bf16();
  const int64_t lanes = kern.lanes, blocks = (g.n + lanes - 1) / lanes;
  const int64_t slots = std::min<int64_t>(num_threads(), blocks);
  sum_over_slots(slots, g.k * g.c * 9, dw, [&](int64_t b, int64_t e, float* acc) {
    Scratch xs(0, g.c * bg.hp * bg.wp * lanes), ds(1, g.k * g.pq() * lanes);
    float *xb = xs.p, *db = ds.p;
    for (int64_t blk = blocks * b / slots; blk < blocks * e / slots; ++blk) {
      const int64_t m0 = blk * lanes, images = std::min(lanes, g.n - m0);
      kern.to_blocked(x + m0 * g.c * g.h * g.w, images, g.c * g.h * g.w, g.c, g.h, g.w, pr.pad_h,
                      pr.pad_w, r16, xb);
      kern.to_blocked(dy + m0 * g.k * g.pq(), images, g.k * g.pq(), g.k, g.p, g.q, 0, 0, r16, db);
      kern.filter(bg, xb, db, acc);
    }
  });
}

// How images are grouped and whether groups run in parallel.
struct Plan {
  int64_t group;  // images per group
  int64_t groups;
  bool parallel;  // groups in parallel, single-threaded GEMMs
};

Plan make_plan(const ConvGeom& g) {
  const int64_t threads = num_threads();
  int64_t group = std::clamp<int64_t>((512 + g.pq() - 1) / std::max<int64_t>(g.pq(), 1), 1, g.n);
  // Keep at least `threads` groups when the batch allows it, so every thread has work.
  if (g.n >= threads) group = std::min(group, std::max<int64_t>(1, g.n / threads));
  int64_t groups = (g.n + group - 1) / group;
  return {group, groups, groups >= threads && threads > 1};
}

// Runs body(group_index, thread_slot) over all groups, in parallel or in sequence per plan.
template <class F>
void run_groups(const Plan& plan, F body) {
  if (plan.parallel) {
    parallel_for(0, plan.groups, 1, [&](int64_t b, int64_t e) {
      for (int64_t gi = b; gi < e; ++gi) body(gi);
    });
  } else {
    for (int64_t gi = 0; gi < plan.groups; ++gi) body(gi);
  }
}

// This backend's kernels are NCHW: ops:: gives them NCHW copies of channels-last tensors.
ConvGeom nchw_geom(const char* op, const Shape& x, const Shape& w, const Conv2dParams& prm) {
  ADA_CHECK(!prm.channels_last) << op << ": channels-last reached the CPU backend (ops:: runs it "
                                << "on NCHW copies)";
  return make_geom(op, x, w, prm);
}

}  // namespace

const char* conv_direct_kernels(const Shape& x, const Shape& w, const ops::Conv2dParams& p,
                                ConvPass pass) {
  const backend::ConvGeom g = backend::make_geom("conv_direct_kernels", x, w, p);
  if (const conv_detail::BlockedKernels* kern = blocked_for(g, pass)) {
    const conv_detail::BlockedBf16Kernels* b16 = blocked_bf16(*kern);
    return b16 && pass != ConvPass::backward_filter ? b16->name : kern->name;
  }
  const conv_detail::DirectKernels* kern = direct_for(g, pass);
  return kern ? kern->name : nullptr;
}

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Conv2dParams& prm) {
  require_cpu_f32("conv2d_forward", {&x, &w});
  ConvGeom g = nchw_geom("conv2d_forward", x.shape(), w.shape(), prm);
  Tensor y = Tensor::empty({g.n, g.k, g.p, g.q});
  if (y.numel() == 0) return y;
  if (g.crs() == 0) {
    ops::fill_(y, 0.f);
    return y;
  }
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  float* yp = y.data<float>();
  const BlockedKernels* blocked = blocked_for(g, ConvPass::forward);
  const DirectKernels* kern = blocked ? nullptr : direct_for(g, ConvPass::forward);
  if (blocked || kern) {
    std::vector<float> w16;
    if (direct_bf16()) {
      w16.resize(static_cast<size_t>(w.numel()));
      copy_floats(w16.data(), wp, w.numel(), true);
    }
    const float* wt = w16.empty() ? wp : w16.data();
    if (blocked)
      blocked_forward(*blocked, g.n, xp, g.c, g.h, g.w, g.prm.pad_h, g.prm.pad_w, g.prm.stride_h,
                      wt, g.k, g.p, g.q, yp);
    else
      direct_forward(*kern, g.r, g.n, xp, g.c, g.h, g.w, g.prm.pad_h, g.prm.pad_w, wt, g.k, g.p,
                     g.q, yp);
    return y;
  }
  const Plan plan = make_plan(g);
  const int64_t chw = g.c * g.h * g.w, kpq = g.k * g.pq();
  // y[k, cols] = W[k, crs] * col[crs, cols], row-major with leading dimension cols.
  auto w_times = [&](const float* col, int64_t cols, float* out) {
    gemm(false, false, g.k, cols, g.crs(), 1.f, wp, g.crs(), col, cols, 0.f, out, cols);
  };
  run_groups(plan, [&](int64_t gi) {
    const int64_t n0 = gi * plan.group, gn = std::min(plan.group, g.n - n0);
    if (gn == 1 && g.pointwise()) {
      w_times(xp + n0 * chw, g.pq(), yp + n0 * kpq);
      return;
    }
    const int64_t ld = gn * g.pq();
    std::vector<float> col(static_cast<size_t>(g.crs() * ld));
    for (int64_t j = 0; j < gn; ++j) {
      if (g.pointwise()) {
        for (int64_t c = 0; c < g.c; ++c)
          std::memcpy(col.data() + c * ld + j * g.pq(), xp + (n0 + j) * chw + c * g.pq(),
                      sizeof(float) * g.pq());
      } else {
        // im2col writes rows of length pq at stride ld, starting at column j*pq.
        im2col(xp + (n0 + j) * chw, g, col.data() + j * g.pq(), ld);
      }
    }
    if (gn == 1) {
      w_times(col.data(), ld, yp + n0 * kpq);
      return;
    }
    std::vector<float> tmp(static_cast<size_t>(g.k * ld));
    w_times(col.data(), ld, tmp.data());
    for (int64_t j = 0; j < gn; ++j)
      for (int64_t k = 0; k < g.k; ++k)
        std::memcpy(yp + (n0 + j) * kpq + k * g.pq(), tmp.data() + k * ld + j * g.pq(),
                    sizeof(float) * g.pq());
  });
  return y;
}

Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2dParams& prm) {
  require_cpu_f32("conv2d_backward_data", {&dy, &w});
  ConvGeom g = nchw_geom("conv2d_backward_data", x_shape, w.shape(), prm);
  ADA_CHECK_ARG(dy.shape() == Shape({g.n, g.k, g.p, g.q}), ShapeError)
      << "conv2d_backward_data: gradient " << dy.str() << " should be "
      << shape_str({g.n, g.k, g.p, g.q});
  const BlockedKernels* blocked = blocked_for(g, ConvPass::backward_data);
  const DirectKernels* kern = blocked ? nullptr : direct_for(g, ConvPass::backward_data);
  const bool direct = blocked || kern;
  Tensor dx = direct ? Tensor::empty(x_shape) : Tensor::zeros(x_shape);  // col2im adds into zeros
  if (dx.numel() == 0) return dx;
  if (dy.numel() == 0) return direct ? Tensor::zeros(x_shape) : dx;
  const float* gp = dy.data<float>();
  const float* wp = w.data<float>();
  float* dxp = dx.data<float>();
  if (direct) {
    // dx is the convolution of dy, padded by taps - 1 - pad, with w transposed and flipped:
    // wf[c, k, r, s] = w[k, c, taps - 1 - r, taps - 1 - s].
    const int64_t taps = g.r, tt = taps * taps;
    // (Rounded to bf16 in the bf16 mode, like every operand of the kernels.)
    const bool r16 = direct_bf16();
    std::vector<float> wf(static_cast<size_t>(g.k * g.c * tt));
    for (int64_t k = 0; k < g.k; ++k)
      for (int64_t c = 0; c < g.c; ++c)
        for (int64_t t = 0; t < tt; ++t) {
          const float v = wp[(k * g.c + c) * tt + tt - 1 - t];
          wf[(c * g.k + k) * tt + t] = r16 ? round_bf16(v) : v;
        }
    if (blocked)
      blocked_forward(*blocked, g.n, gp, g.k, g.p, g.q, taps - 1 - g.prm.pad_h,
                      taps - 1 - g.prm.pad_w, 1, wf.data(), g.c, g.h, g.w, dxp);
    else
      direct_forward(*kern, taps, g.n, gp, g.k, g.p, g.q, taps - 1 - g.prm.pad_h,
                     taps - 1 - g.prm.pad_w, wf.data(), g.c, g.h, g.w, dxp);
    return dx;
  }
  const Plan plan = make_plan(g);
  const int64_t chw = g.c * g.h * g.w, kpq = g.k * g.pq();
  // col[crs, cols] = W^T * dy[k, cols], row-major with leading dimension cols.
  auto wt_times = [&](const float* dyc, int64_t cols, float* out) {
    gemm(true, false, g.crs(), cols, g.k, 1.f, wp, g.crs(), dyc, cols, 0.f, out, cols);
  };
  run_groups(plan, [&](int64_t gi) {
    const int64_t n0 = gi * plan.group, gn = std::min(plan.group, g.n - n0);
    if (gn == 1 && g.pointwise()) {
      wt_times(gp + n0 * kpq, g.pq(), dxp + n0 * chw);
      return;
    }
    const int64_t ld = gn * g.pq();
    std::vector<float> dyg(static_cast<size_t>(g.k * ld));
    for (int64_t j = 0; j < gn; ++j)
      for (int64_t k = 0; k < g.k; ++k)
        std::memcpy(dyg.data() + k * ld + j * g.pq(), gp + (n0 + j) * kpq + k * g.pq(),
                    sizeof(float) * g.pq());
    std::vector<float> col(static_cast<size_t>(g.crs() * ld));
    wt_times(dyg.data(), ld, col.data());
    for (int64_t j = 0; j < gn; ++j) {
      float* dxj = dxp + (n0 + j) * chw;
      if (g.pointwise()) {
        for (int64_t c = 0; c < g.c; ++c)
          std::memcpy(dxj + c * g.pq(), col.data() + c * ld + j * g.pq(), sizeof(float) * g.pq());
      } else {
        col2im(col.data() + j * g.pq(), g, ld, dxj);
      }
    }
  });
  return dx;
}

Tensor conv2d_backward_filter(const Tensor& dy, const Tensor& x, const Shape& w_shape,
                              const Conv2dParams& prm) {
  require_cpu_f32("conv2d_backward_filter", {&dy, &x});
  ConvGeom g = nchw_geom("conv2d_backward_filter", x.shape(), w_shape, prm);
  ADA_CHECK_ARG(dy.shape() == Shape({g.n, g.k, g.p, g.q}), ShapeError)
      << "conv2d_backward_filter: gradient " << dy.str() << " should be "
      << shape_str({g.n, g.k, g.p, g.q});
  Tensor dw = Tensor::zeros(w_shape);
  if (dw.numel() == 0 || dy.numel() == 0) return dw;
  const float* gp = dy.data<float>();
  const float* xp = x.data<float>();
  if (const BlockedKernels* blocked = blocked_for(g, ConvPass::backward_filter)) {
    blocked_filter(*blocked, g, xp, gp, dw.data<float>());
    return dw;
  }
  if (const DirectKernels* kern = direct_for(g, ConvPass::backward_filter)) {
    direct_filter(*kern, g, xp, gp, dw.data<float>());
    return dw;
  }
  const Plan plan = make_plan(g);
  const int64_t chw = g.c * g.h * g.w, kpq = g.k * g.pq();
  // One accumulator per parallel slot (chunk of groups), summed in slot order at the end.
  const int64_t slots = plan.parallel ? std::min<int64_t>(num_threads(), plan.groups) : 1;
  std::vector<std::vector<float>> acc(static_cast<size_t>(slots));
  auto body = [&](int64_t gi, std::vector<float>& a) {
    if (a.empty()) a.assign(static_cast<size_t>(g.k * g.crs()), 0.f);
    // a[k, crs] += dy[k, cols] * col[crs, cols]^T, both with leading dimension cols.
    auto accumulate = [&](const float* dyc, const float* col, int64_t cols) {
      gemm(false, true, g.k, g.crs(), cols, 1.f, dyc, cols, col, cols, 1.f, a.data(), g.crs());
    };
    const int64_t n0 = gi * plan.group, gn = std::min(plan.group, g.n - n0);
    if (gn == 1 && g.pointwise()) {
      accumulate(gp + n0 * kpq, xp + n0 * chw, g.pq());
      return;
    }
    const int64_t ld = gn * g.pq();
    std::vector<float> col(static_cast<size_t>(g.crs() * ld));
    std::vector<float> dyg(static_cast<size_t>(g.k * ld));
    for (int64_t j = 0; j < gn; ++j) {
      for (int64_t k = 0; k < g.k; ++k)
        std::memcpy(dyg.data() + k * ld + j * g.pq(), gp + (n0 + j) * kpq + k * g.pq(),
                    sizeof(float) * g.pq());
      if (g.pointwise()) {
        for (int64_t c = 0; c < g.c; ++c)
          std::memcpy(col.data() + c * ld + j * g.pq(), xp + (n0 + j) * chw + c * g.pq(),
                      sizeof(float) * g.pq());
      } else {
        im2col(xp + (n0 + j) * chw, g, col.data() + j * g.pq(), ld);
      }
    }
    accumulate(dyg.data(), col.data(), ld);
  };
  if (plan.parallel) {
    parallel_for(0, slots, 1, [&](int64_t b, int64_t e) {
      for (int64_t sl = b; sl < e; ++sl) {
        int64_t g0 = plan.groups * sl / slots, g1 = plan.groups * (sl + 1) / slots;
        for (int64_t gi = g0; gi < g1; ++gi) body(gi, acc[sl]);
      }
    });
  } else {
    for (int64_t gi = 0; gi < plan.groups; ++gi) body(gi, acc[0]);
  }
  float* dwp = dw.data<float>();
  for (const auto& a : acc)
    if (!a.empty())
      for (int64_t i = 0; i < dw.numel(); ++i) dwp[i] += a[i];
  return dw;
}

}  // namespace ada::cpu
