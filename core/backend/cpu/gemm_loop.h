// The BLIS-style loop nest shared by every GEMM kernel, over one thread's rectangle of C:
//   jc over n by NC      B block (KC x NC) is packed once per (jc, pc) and lives in L2/L3
//    pc over k by KC     partial products: the first uses the caller's beta, later ones beta=1
//     ic over m by MC    A block (MC x KC) is packed into MR-row micro-panels; stays in L2
//      jr over NR        one B micro-panel (KC x NR) stays in L1 while ...
//       ir over MR       ... the micro-kernel streams A micro-panels and updates an MR x NR tile
// K supplies Packed (the packed element type), kMR, kNR, k_steps(kc) (packed steps per panel
// for kc values of k), pack_a, pack_b, micro and edge (a partial tile). Included only by the
// kernel translation units (see gemm_kernels.h); everything here has internal linkage.
#pragma once

#include "core/backend/cpu/gemm_kernels.h"

namespace ada::cpu::gemm_detail {
namespace {

inline int64_t imin(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// A partial tile: c[mr x nr] = t + beta * c (beta == 0 does not read c), where t is the full
// tile a micro-kernel wrote with alpha applied and row stride ldt.
inline void merge_tile(const float* t, int64_t ldt, float* c, int64_t ldc, int64_t mr, int64_t nr,
                       float beta) {
  for (int64_t i = 0; i < mr; ++i) {
    float* ci = c + i * ldc;
    const float* ti = t + i * ldt;
    if (beta == 0.f)
      for (int64_t j = 0; j < nr; ++j) ci[j] = ti[j];
    else
      for (int64_t j = 0; j < nr; ++j) ci[j] = ti[j] + beta * ci[j];
  }
}

// c[i0 : i0+mc, j0 : j0+nr] += bias[j0 : j0+nr]: a strip the micro-kernels have just finished.
inline void add_bias_strip(const Problem& g, int64_t i0, int64_t mc, int64_t j0, int64_t nr) {
  const float* b = g.bias + j0;
  for (int64_t i = 0; i < mc; ++i) {
    float* ci = g.c + (i0 + i) * g.ldc + j0;
    for (int64_t j = 0; j < nr; ++j) ci[j] += b[j];
  }
}

// row_sums[i0 + i] += op(a)[i0 + i, p0 + p] for the block just packed (op(a) = a^T: k step p is the
// contiguous run a[p0 + p][i0 : i0 + mc], still in cache), p in order.
inline void add_row_sums(const Problem& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc) {
  double* s = g.row_sums + i0;
  for (int64_t p = 0; p < kc; ++p) {
    const float* run = g.a + (p0 + p) * g.lda + i0;
    for (int64_t i = 0; i < mc; ++i) s[i] += run[i];
  }
}

template <class K>
void gemm_block(const Problem& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const Steps& s,
                float* pa_raw, float* pb_raw) {
  using P = typename K::Packed;
  P* pa = reinterpret_cast<P*>(pa_raw);
  P* pb = reinterpret_cast<P*>(pb_raw);
  for (int64_t jc = n0; jc < n1; jc += s.nc) {
    const int64_t nc = imin(s.nc, n1 - jc);
    for (int64_t pc = 0; pc < g.k; pc += s.kc) {
      const int64_t kc = imin(s.kc, g.k - pc);
      const int64_t ks = K::k_steps(kc);
      const float beta = pc == 0 ? g.beta : 1.f;
      K::pack_b(g, pc, kc, jc, nc, pb);
      for (int64_t ic = m0; ic < m1; ic += s.mc) {
        const int64_t mc = imin(s.mc, m1 - ic);
        K::pack_a(g, ic, mc, pc, kc, pa);
        // Once per element: the threads whose rectangles start at column 0, in their first block.
        if (g.row_sums && jc == 0) add_row_sums(g, ic, mc, pc, kc);
        for (int64_t jr = 0; jr < nc; jr += K::kNR) {
          const int64_t nr = imin(K::kNR, nc - jr);
          const P* bp = pb + jr * ks;
          for (int64_t ir = 0; ir < mc; ir += K::kMR) {
            const int64_t mr = imin(K::kMR, mc - ir);
            float* ct = g.c + (ic + ir) * g.ldc + jc + jr;
            if (mr == K::kMR && nr == K::kNR)
              K::micro(ks, pa + ir * ks, bp, ct, g.ldc, g.alpha, beta);
            else
              K::edge(ks, pa + ir * ks, bp, ct, g.ldc, mr, nr, g.alpha, beta);
          }
          if (g.bias && pc + kc == g.k) add_bias_strip(g, ic, mc, jc + jr, nr);
        }
      }
    }
  }
}

}  // namespace
}  // namespace ada::cpu::gemm_detail
