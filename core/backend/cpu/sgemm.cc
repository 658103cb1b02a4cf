// GEMM driver: picks the kernel for the CPU (core/cpu_isa.h) and the precision, cuts C into
// one tile-aligned rectangle per thread and hands each to the kernel's loop nest
// (gemm_loop.h) with its own thread_local packing buffers (no barriers, deterministic).
// Built for the baseline ISA; the kernels live in gemm_avx2.cc, gemm_avx512.cc,
// gemm_avx512_bf16.cc and gemm_amx_bf16.cc. CPUs without AVX2+FMA run Eigen's GEMM.
#include "core/backend/cpu/sgemm.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "base/error.h"
#include "core/backend/cpu/gemm_kernels.h"
#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "core/precision.h"

namespace ada {
namespace cpu {
namespace {

using gemm_detail::Kernel;
using gemm_detail::Problem;
using gemm_detail::Steps;

// c[m x n] = beta * c (beta == 0 writes zeros without reading c).
void scale_c(float* c, int64_t m, int64_t n, int64_t ldc, float beta) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.f)
      std::fill(row, row + n, 0.f);
    else if (beta != 1.f)
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
  }
}

// c[i,j] += bias[j] (nothing when bias is null): for the products no kernel runs.
void add_bias_after(float* c, int64_t m, int64_t n, int64_t ldc, const float* bias) {
  if (!bias) return;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += bias[j];
}

// The row sums of op(a) a caller asked for (sgemm's row_sums): double accumulators the loop nest
// adds to as it packs (acc()), or direct() where no kernel runs; written out as floats when done.
class RowSums {
 public:
  RowSums(bool trans_a, int64_t m, int64_t k, const float* a, int64_t lda, float* out)
      : m_(m), k_(k), a_(a), lda_(lda), out_(out) {
    if (!out_) return;
    ADA_CHECK_ARG(trans_a, ShapeError) << "sgemm: row sums of op(a) are summed only for a "
                                          "transposed a (a linear layer's dy^T)";
    acc_.assign(static_cast<size_t>(std::max<int64_t>(m, 0)), 0.0);
  }
  ~RowSums() {
    for (int64_t i = 0; i < (out_ ? m_ : 0); ++i) out_[i] = static_cast<float>(acc_[i]);
  }
  double* acc() { return out_ ? acc_.data() : nullptr; }
  // The same additions, in the same order, without a kernel.
  void direct() {
    if (!out_) return;
    for (int64_t p = 0; p < k_; ++p)
      for (int64_t i = 0; i < m_; ++i) acc_[i] += a_[p * lda_ + i];
  }

 private:
  int64_t m_, k_;
  const float* a_;
  int64_t lda_;
  float* out_;
  std::vector<double> acc_;
};

// Empty products and alpha = 0 leave only c = beta c: done here, true when nothing is left.
bool trivial_product(int64_t m, int64_t n, int64_t k, float alpha, float beta, float* c,
                     int64_t ldc) {
  if (m <= 0 || n <= 0) return true;
  if (k > 0 && alpha != 0.f) return false;
  scale_c(c, m, n, ldc, beta);
  return true;
}

// Eigen's GEMM on strided maps: CPUs without AVX2+FMA (and ADA_CPU_ISA=generic). A non-trivial
// product (trivial_product false).
void eigen_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  static const bool caches_set = [] {  // Eigen reads the caches once; ADA_CPU_CACHES overrides them
    if (const auto c = forced_cache_sizes()) Eigen::setCpuCacheSizes(c->l1, c->l2, c->l3);
    return true;
  }();
  (void)caches_set;
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  Eigen::Map<Mat, 0, Stride> C(c, m, n, Stride(ldc));
  Eigen::Map<const Mat, 0, Stride> A(a, trans_a ? k : m, trans_a ? m : k, Stride(lda));
  Eigen::Map<const Mat, 0, Stride> B(b, trans_b ? n : k, trans_b ? k : n, Stride(ldb));
  auto run = [&](const auto& opa, const auto& opb) {
    if (beta == 0.f) {
      C.noalias() = alpha * (opa * opb);
    } else {
      if (beta != 1.f) C *= beta;
      C.noalias() += alpha * (opa * opb);
    }
  };
  if (!trans_a && !trans_b)
    run(A, B);
  else if (trans_a && !trans_b)
    run(A.transpose(), B);
  else if (!trans_a && trans_b)
    run(A, B.transpose());
  else
    run(A.transpose(), B.transpose());
}

// ---- per-thread packing buffers
// ------------------------------------------------------------------ Grow-only, 64-byte aligned;
// one pair per thread (OpenMP pool threads persist, so steady-state calls allocate nothing).
class PackBuffer {
 public:
  ~PackBuffer() { std::free(p_); }
  float* get(size_t floats) {
    if (floats > cap_) {
      std::free(p_);
      size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
      p_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!p_) {
        cap_ = 0;
        throw std::bad_alloc();
      }
      cap_ = bytes / sizeof(float);
    }
    return p_;
  }

 private:
  float* p_ = nullptr;
  size_t cap_ = 0;
};

struct ThreadBuffers {
  PackBuffer a, b;
};
thread_local ThreadBuffers tls_buffers;

int64_t ceil_div(int64_t x, int64_t y) {
  return (x + y - 1) / y;
}
int64_t round_up(int64_t x, int64_t y) {
  return ceil_div(x, y) * y;
}
// Step that cuts `total` into ceil(total / max_step) near-equal blocks, a multiple of `unit`.
int64_t balanced_step(int64_t total, int64_t max_step, int64_t unit) {
  return round_up(ceil_div(total, ceil_div(total, max_step)), unit);
}

// The kernel's loop nest over C[m0:m1, n0:n1] on the calling thread. k blocks are even so the
// bf16 kernel's k pairs never straddle two blocks.
void run_block(const Kernel& kern, const Problem& g, int64_t m0, int64_t m1, int64_t n0,
               int64_t n1) {
  const Steps s{balanced_step(g.k, kern.kc, 2), balanced_step(m1 - m0, kern.mc, kern.mr),
                balanced_step(n1 - n0, kern.nc, kern.nr)};
  float* pa = tls_buffers.a.get(static_cast<size_t>(s.mc * (s.kc + 32)));
  float* pb = tls_buffers.b.get(static_cast<size_t>(s.nc * (s.kc + 32)));
  kern.block(g, m0, m1, n0, n1, s, pa, pb);
}

// Below this many multiply-adds one thread is faster than waking the pool.
constexpr int64_t kMinParallelMacs = int64_t(1) << 20;

void run(const Kernel& kern, const Problem& g) {
  const int64_t m = g.m, n = g.n, k = g.k;
  int threads = omp_in_parallel() ? 1 : num_threads();
  if (m * n * k < kMinParallelMacs) threads = 1;
  const int64_t mr = kern.mr, nr = kern.nr;
  const int64_t tiles_m = ceil_div(m, mr), tiles_n = ceil_div(n, nr);
  // Grid tm x tn minimising the slowest thread's padded tile area plus its packing traffic
  // (a packed float costs roughly 8 multiply-adds).
  int64_t tm = 1, tn = 1;
  if (threads > 1) {
    double best = -1;
    for (int64_t cm = 1; cm <= threads; ++cm) {
      const int64_t um = std::min(cm, tiles_m), un = std::min<int64_t>(threads / cm, tiles_n);
      const double rows = double(ceil_div(tiles_m, um) * mr);
      const double cols = double(ceil_div(tiles_n, un) * nr);
      const double cost =
          rows * cols + 8.0 * (rows * double(ceil_div(int64_t(cols), kern.nc)) + cols);
      if (best < 0 || cost < best) best = cost, tm = um, tn = un;
    }
  }
  if (tm * tn == 1) {
    run_block(kern, g, 0, m, 0, n);
    return;
  }
  parallel_for(0, tm * tn, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t ti = t / tn, tj = t % tn;
      const int64_t m0 = tiles_m * ti / tm * mr, m1 = std::min(m, tiles_m * (ti + 1) / tm * mr);
      const int64_t n0 = tiles_n * tj / tn * nr, n1 = std::min(n, tiles_n * (tj + 1) / tn * nr);
      if (m0 < m1 && n0 < n1) run_block(kern, g, m0, m1, n0, n1);
    }
  });
}

const Kernel* f32_kernel() {
  switch (isa()) {
    case Isa::amx:
    case Isa::avx512:
      return &gemm_detail::avx512_kernel();
    case Isa::avx2:
      return &gemm_detail::avx2_kernel();
    case Isa::generic:
      break;
  }
  return nullptr;
}

// The bf16 kernel for the level in use (bf16_available() checked by the caller).
const Kernel* bf16_kernel() {
  return isa() == Isa::amx ? &gemm_detail::amx_bf16_kernel() : &gemm_detail::avx512_bf16_kernel();
}

std::atomic<Precision> g_precision{Precision::fp32};

}  // namespace

const char* sgemm_kernel_name() {
  const Kernel* kern = f32_kernel();
  return kern ? kern->name : "eigen";
}

const char* sbgemm_kernel_name() {
  return bf16_available() ? bf16_kernel()->name : "none";
}

namespace {
// The product g on `kern` (nullptr: Eigen's GEMM) with sgemm's bias and row_sums.
void product(const Kernel* kern, Problem g, float* row_sums) {
  RowSums sums(g.ta, g.m, g.k, g.a, g.lda, row_sums);
  const bool trivial = trivial_product(g.m, g.n, g.k, g.alpha, g.beta, g.c, g.ldc);
  if (!trivial && kern) {  // the bias and the row sums inside the loop nest
    g.row_sums = sums.acc();
    run(*kern, g);
    return;
  }
  if (!trivial)
    eigen_gemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc);
  add_bias_after(g.c, g.m, g.n, g.ldc, g.bias);
  sums.direct();
}
}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           const float* bias, float* row_sums) {
  product(f32_kernel(),
          Problem{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias}, row_sums);
}

void sbgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc, const float* bias, float* row_sums) {
  if (!bf16_available()) {  // the reason is built only when refusing
    std::string why;
    bf16_available(&why);
    ADA_THROW(DeviceError) << "bf16 matrix products: " << why;
  }
  product(bf16_kernel(),
          Problem{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias}, row_sums);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
          const float* bias, float* row_sums) {
  if (g_precision.load(std::memory_order_relaxed) == Precision::bf16)
    sbgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias, row_sums);
  else
    sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias, row_sums);
}

}  // namespace cpu

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::bf16:
      return "bf16";
    case Precision::fp16:
      return "fp16";
    case Precision::fp32:
      break;
  }
  return "fp32";
}

void set_cpu_matmul_precision(Precision p) {
  ADA_CHECK_ARG(p != Precision::fp16, DeviceError)
      << "fp16 matrix products are not supported on the CPU (it has no fp16 dot products); use "
         "bf16 "
         "on a CPU with AVX512_BF16, or fp32";
  std::string why;
  if (p == Precision::bf16 && !cpu::bf16_available(&why))
    ADA_THROW(DeviceError) << "bf16 matrix products on the CPU: " << why
                           << "; use fp32 on this machine";
  cpu::g_precision.store(p, std::memory_order_relaxed);
}

Precision cpu_matmul_precision() {
  return cpu::g_precision.load(std::memory_order_relaxed);
}

}  // namespace ada
