// The bf16 GEMM kernel on AMX tiles (AMX-TILE, AMX-BF16; flags in core/CMakeLists.txt), for
// CPUs that have them (Intel Sapphire Rapids and later; cpu::Isa::amx). Same arithmetic as the
// vdpbf16ps kernel (gemm_avx512_bf16.cc): operands rounded to bfloat16 (nearest even) while
// packed, products summed in fp32; only the order of the fp32 additions differs.
// One TDPBF16PS multiplies a 16 x 32 bf16 A tile by a 32 x 16 B tile into a 16 x 16 fp32 tile:
// 16K flops in one instruction, where vdpbf16ps does 64. The micro-kernel keeps a 32 x 32 block
// of C in four accumulator tiles and loads two A and two B tiles per 32 values of k (8 tiles,
// all of them).
// Packed layout (gemm_bf16_pack.h pairs k values into 32-bit lanes):
//   A micro-panel: 32 rows, row i = ks pair steps contiguous (a tile row is 16 steps, 64 bytes;
//                  rows at a stride of ks lanes), so A is the tile's row-major M x K;
//   B micro-panel: ks steps of 32 lanes (gemm_bf16_pack.h), i.e. TDPBF16PS's K/2 x 2N layout:
//                  a tile is 16 steps x 16 lanes at a stride of 128 bytes.
// ks = ceil(kc / 2) rounded up to whole tiles of 16 steps, the rest zero.
// Tiles are configured once per call of the loop nest (amx_block) and released after it.
// See gemm_kernels.h for the rules of kernel translation units.
#include <immintrin.h>

#include "core/backend/cpu/gemm_bf16_pack.h"

namespace ada::cpu::gemm_detail {
namespace {

constexpr int64_t kMR = 32, kNR = kPairNR;  // 2 x 2 accumulator tiles of 16 x 16
constexpr int64_t kTileSteps = 16;          // pair steps (32 k values) in a tile row
// MC = MR: one A micro-panel (KC/2 steps x 32 rows, 16 KiB) stays in L1 while the B micro-panels
// of the KC x NC block (2 MiB, L2) stream past it. Against KC 512 / MC 256 (an L2-resident A
// block, the vdpbf16ps kernel's scheme) on an AMX Xeon: GEMM 2048^3 910-970 against 760-800
// GFLOP/s, ResNet-50's convolutions in bf16 (bench_ops --precision bf16 --batch 16) 271-284
// against 238-243 GFLOP/s on one thread, 534 against 458 on two; KC 128 or 1024, MC 64-256 were
// in between.
constexpr int64_t kKC = 256, kMC = 32, kNC = 4096;

int64_t amx_steps(int64_t kc) {
  return ((kc + 1) / 2 + kTileSteps - 1) / kTileSteps * kTileSteps;
}

// op(A)[i0 : i0+mc, p0 : p0+kc] into 32-row micro-panels: row i of the panel at ir is
// dst[ir * ks + i * ks + q], zero past kc and past the last row.
void pack_a(const Problem& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, uint32_t* dst) {
  const int64_t ks = amx_steps(kc);
  for (int64_t ir = 0; ir < mc; ir += kMR) {
    const int64_t mr = imin(kMR, mc - ir);
    uint32_t* d = dst + ir * ks;
    if (!g.ta) {
      // Rows of A are contiguous in k: 32 values become one 16-step tile row.
      for (int64_t i = 0; i < kMR; ++i) {
        uint32_t* di = d + i * ks;
        const float* s = g.a + (i0 + ir + i) * g.lda + p0;
        for (int64_t p = 0; p < 2 * ks; p += 32) {
          __m512i v = _mm512_setzero_si512();
          if (i < mr && p < kc) {
            const __m512 lo = _mm512_maskz_loadu_ps(mask16(kc - p), s + p);
            const __m512 hi = _mm512_maskz_loadu_ps(mask16(kc - p - 16), s + p + 16);
            v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
          }
          _mm512_store_si512(di + p / 2, v);
        }
      }
    } else {
      // A^T: a k value is a contiguous run of rows. Pair two k values lane by lane for 8 rows
      // and 8 steps, then transpose the 8 x 8 lanes into the rows.
      for (int64_t i8 = 0; i8 < kMR; i8 += 8) {
        const int64_t rows = mr - i8;
        const __mmask8 m = static_cast<__mmask8>(rows >= 8   ? 0xFF
                                                 : rows <= 0 ? 0
                                                             : (1u << rows) - 1);
        const float* s = g.a + p0 * g.lda + i0 + ir + i8;
        for (int64_t q0 = 0; q0 < ks; q0 += 8) {
          alignas(32) uint32_t tmp[8 * 8];
#pragma GCC unroll 8
          for (int t = 0; t < 8; ++t) {
            const int64_t k = 2 * (q0 + t);
            const __m256 lo =
                k < kc ? _mm256_maskz_loadu_ps(m, s + k * g.lda) : _mm256_setzero_ps();
            const __m256 hi =
                k + 1 < kc ? _mm256_maskz_loadu_ps(m, s + (k + 1) * g.lda) : _mm256_setzero_ps();
            _mm256_store_si256(reinterpret_cast<__m256i*>(tmp + t * 8), pair_lanes8(lo, hi));
          }
          transpose_8x8(tmp, 8, d + i8 * ks + q0, ks);
        }
      }
    }
  }
}

// c[mr x nr] = alpha * t + beta * c for the 32 x 32 fp32 block t (row stride 32); beta == 0
// does not read c.
inline void store_block(const float* t, float* c, int64_t ldc, int64_t mr, int64_t nr, float alpha,
                        float beta) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const __mmask16 m0 = mask16(nr), m1 = mask16(nr - 16);
  for (int64_t i = 0; i < mr; ++i) {
    float* ci = c + i * ldc;
    __m512 v0 = _mm512_mul_ps(va, _mm512_load_ps(t + i * kNR));
    __m512 v1 = _mm512_mul_ps(va, _mm512_load_ps(t + i * kNR + 16));
    if (beta != 0.f) {
      v0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, ci), v0);
      v1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, ci + 16), v1);
    }
    _mm512_mask_storeu_ps(ci, m0, v0);
    _mm512_mask_storeu_ps(ci + 16, m1, v1);
  }
}

// The 32 x 32 product of an A and a B micro-panel of ks steps, into c as store_block.
void micro_kernel(int64_t ks, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                  int64_t mr, int64_t nr, float alpha, float beta) {
  const int64_t lda_bytes = ks * 4, ldb_bytes = kNR * 4;
  const uint32_t* a1 = a + 16 * ks;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t q = 0; q < ks; q += kTileSteps) {
    _tile_loadd(4, a + q, lda_bytes);
    _tile_loadd(5, a1 + q, lda_bytes);
    _tile_loadd(6, b + q * kNR, ldb_bytes);
    _tile_loadd(7, b + q * kNR + 16, ldb_bytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float t[kMR * kNR];
  _tile_stored(0, t, kNR * 4);
  _tile_stored(1, t + 16, kNR * 4);
  _tile_stored(2, t + 16 * kNR, kNR * 4);
  _tile_stored(3, t + 16 * kNR + 16, kNR * 4);
  store_block(t, c, ldc, mr, nr, alpha, beta);
}

struct Amx {
  using Packed = uint32_t;
  static constexpr int64_t kMR = ::ada::cpu::gemm_detail::kMR;
  static constexpr int64_t kNR = ::ada::cpu::gemm_detail::kNR;
  static int64_t k_steps(int64_t kc) { return amx_steps(kc); }
  static void pack_a(const Problem& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                     uint32_t* d) {
    ::ada::cpu::gemm_detail::pack_a(g, i0, mc, p0, kc, d);
  }
  static void pack_b(const Problem& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                     uint32_t* d) {
    pack_b_pairs(g, p0, kc, j0, nc, amx_steps(kc), d);
  }
  static void micro(int64_t ks, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                    float alpha, float beta) {
    micro_kernel(ks, a, b, c, ldc, kMR, kNR, alpha, beta);
  }
  static void edge(int64_t ks, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                   int64_t mr, int64_t nr, float alpha, float beta) {
    micro_kernel(ks, a, b, c, ldc, mr, nr, alpha, beta);
  }
};

// Palette 1: eight tiles of 16 rows x 64 bytes (accumulators 0-3, A 4-5, B 6-7).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(TileConfig) == 64);

// The tile state belongs to the thread: configured here, released before returning so that a
// context switch does not keep saving 8 KiB of tile data.
void amx_block(const Problem& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const Steps& s,
               float* pa, float* pb) {
  static const TileConfig config;
  _tile_loadconfig(&config);
  gemm_block<Amx>(g, m0, m1, n0, n1, s, pa, pb);
  _tile_release();
}

constexpr Kernel kAmxKernel{"amx_bf16 32x32", kMR, kNR, kKC, kMC, kNC, &amx_block};

}  // namespace

const Kernel& amx_bf16_kernel() {
  return kAmxKernel;
}

}  // namespace ada::cpu::gemm_detail
