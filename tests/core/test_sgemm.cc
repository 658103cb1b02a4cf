// cpu::sgemm and cpu::sbgemm against a naive double-accumulating reference, for every kernel
// this CPU can run (generic/Eigen, AVX2, AVX-512 fp32, AVX512_BF16, AMX bf16 tiles;
// cpu::set_isa picks the level): all transpose combinations, edge sizes around the micro-tile (0,
// 1, MR-1, MR, MR+1,
// ...), odd k (the bf16 kernel pairs k values), leading dimensions wider than the matrices (the
// padding must stay untouched), beta == 0 over NaN-filled C, 1-3 threads, shapes that cross the
// KC/MC/NC block boundaries, and calls from inside a parallel region.
// The reference is exact-ish (double) on the operands as the kernel sees them (rounded to
// bfloat16 for the bf16 kernels, whose products are then exact in fp32), and every element is
// held to the bound of tests/util/sum_bound.h: |got - want| <= 16 eps (|alpha| sum_p |a_ip b_pj|
// + |beta c_ij|).
#include <gtest/gtest.h>

#include <Eigen/Core>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/backend/cpu/sgemm.h"
#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "util/sum_bound.h"

namespace ada {
namespace {

// One kernel under test: an ISA level and fp32 (sgemm) or bf16 inputs (sbgemm).
struct Variant {
  cpu::Isa isa;
  bool bf16;
};
Variant g_variant{cpu::Isa::generic, false};

std::string variant_name(const Variant& v) {
  return std::string(cpu::isa_name(v.isa)) + (v.bf16 ? "_bf16" : "_fp32");
}

// The kernels this CPU runs: every fp32 level up to the detected one (amx multiplies fp32 as
// avx512 does), plus the bf16 kernels where they exist (vdpbf16ps at avx512, tiles at amx).
std::vector<Variant> available_variants() {
  std::vector<Variant> out;
  for (cpu::Isa level : {cpu::Isa::generic, cpu::Isa::avx2, cpu::Isa::avx512})
    if (level <= cpu::detected_isa()) out.push_back({level, false});
  const cpu::Isa saved = cpu::isa();
  cpu::set_isa(cpu::detected_isa());
  if (cpu::bf16_available()) {
    out.push_back({cpu::Isa::avx512, true});
    if (cpu::detected_isa() == cpu::Isa::amx) out.push_back({cpu::Isa::amx, true});
  }
  cpu::set_isa(saved);
  return out;
}

// x rounded to bfloat16, nearest even (the operands here are finite and normal).
double round_bf16(float x) {
  if (!g_variant.bf16) return x;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

constexpr float kPad = 12345.f;  // fills the padding columns of every buffer

struct Operands {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  std::vector<float> a, b;
  std::vector<double> prod, mag;  // exact-ish op(a) op(b) and sum |a||b|, m x n
};

// Random operands with leading dimensions wider than the rows by odd amounts.
Operands make_operands(bool ta, bool tb, int64_t m, int64_t n, int64_t k, uint32_t seed) {
  Operands o{ta, tb, m, n, k, 0, 0, 0, {}, {}, {}, {}};
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
  const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
  o.lda = a_cols + 3;
  o.ldb = b_cols + 5;
  o.ldc = n + 7;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  o.a.assign(static_cast<size_t>(a_rows * o.lda), kPad);
  o.b.assign(static_cast<size_t>(b_rows * o.ldb), kPad);
  for (int64_t i = 0; i < a_rows; ++i)
    for (int64_t j = 0; j < a_cols; ++j) o.a[i * o.lda + j] = u(gen);
  for (int64_t i = 0; i < b_rows; ++i)
    for (int64_t j = 0; j < b_cols; ++j) o.b[i * o.ldb + j] = u(gen);
  o.prod.assign(static_cast<size_t>(m * n), 0.0);
  o.mag.assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, g = 0;
      for (int64_t p = 0; p < k; ++p) {
        double x = round_bf16(ta ? o.a[p * o.lda + i] : o.a[i * o.lda + p]);
        double y = round_bf16(tb ? o.b[j * o.ldb + p] : o.b[p * o.ldb + j]);
        s += x * y;
        g += std::fabs(x * y);
      }
      o.prod[i * n + j] = s;
      o.mag[i * n + j] = g;
    }
  return o;
}

// Runs sgemm once with (alpha, beta) on a fresh C and checks every element and the padding.
// Returns the number of bad elements (reporting the first few).
int check_once(const Operands& o, float alpha, float beta, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> c(static_cast<size_t>(std::max<int64_t>(o.m, 1) * o.ldc), kPad);
  std::vector<float> c0(c.size(), 0.f);
  for (int64_t i = 0; i < o.m; ++i)
    for (int64_t j = 0; j < o.n; ++j) {
      c0[i * o.ldc + j] = u(gen);
      c[i * o.ldc + j] = beta == 0.f ? nan : c0[i * o.ldc + j];
    }
  (g_variant.bf16 ? cpu::sbgemm : cpu::sgemm)(o.ta, o.tb, o.m, o.n, o.k, alpha, o.a.data(), o.lda,
                                              o.b.data(), o.ldb, beta, c.data(), o.ldc, nullptr,
                                              nullptr);
  const std::string what = variant_name(g_variant) + " ta=" + std::to_string(o.ta) +
                           " tb=" + std::to_string(o.tb) + " m=" + std::to_string(o.m) +
                           " n=" + std::to_string(o.n) + " k=" + std::to_string(o.k) +
                           " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta) +
                           " threads=" + std::to_string(num_threads());
  std::vector<float> got;
  testing::SumRef want(static_cast<size_t>(o.m * o.n));
  int bad = 0;
  for (int64_t i = 0; i < o.m; ++i)
    for (int64_t j = 0; j < o.ldc; ++j) {
      const float v = c[i * o.ldc + j];
      if (j >= o.n) {
        if (v != kPad && ++bad <= 3)
          ADD_FAILURE() << what << ": padding C[" << i << "," << j << "] was overwritten: " << v;
        continue;
      }
      const double cij = beta == 0.f ? 0.0 : double(c0[i * o.ldc + j]);
      got.push_back(v);
      want.value[i * o.n + j] = double(alpha) * o.prod[i * o.n + j] + double(beta) * cij;
      want.mag[i * o.n + j] = std::fabs(alpha) * o.mag[i * o.n + j] + std::fabs(beta * cij);
    }
  return bad + testing::expect_within_sum_bound(got, want, what);
}

struct AlphaBeta {
  float alpha, beta;
};
const AlphaBeta kAlphaBetas[] = {{1.f, 0.f}, {2.f, 0.5f}, {-1.f, 1.f}};

class ThreadsGuard {
 public:
  ThreadsGuard() : saved_(num_threads()) {}
  ~ThreadsGuard() { set_num_threads(saved_); }

 private:
  int saved_;
};

// Runs each test once per kernel: sets the ISA level and the variant, restores the level.
class Sgemm : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    saved_isa_ = cpu::isa();
    g_variant = GetParam();
    cpu::set_isa(g_variant.isa);
  }
  void TearDown() override { cpu::set_isa(saved_isa_); }

 private:
  cpu::Isa saved_isa_ = cpu::Isa::generic;
};

TEST_P(Sgemm, EdgeSizesAllTransposesAlphaBetaThreads) {
  ThreadsGuard guard;
  const int64_t sizes[] = {0, 1, 2, 5, 6, 7, 15, 16, 17, 31, 33, 64, 100, 257};
  uint32_t seed = 1;
  int failures = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : sizes)
        for (int64_t n : sizes)
          for (int64_t k : sizes) {
            Operands o = make_operands(ta, tb, m, n, k, seed++);
            for (int threads : {1, 2}) {
              set_num_threads(threads);
              for (const auto& ab : kAlphaBetas) failures += check_once(o, ab.alpha, ab.beta, seed);
            }
            ASSERT_LT(failures, 20) << "stopping after many failures";
          }
  EXPECT_EQ(failures, 0);
}

TEST_P(Sgemm, LargeShapesCrossBlockBoundaries) {
  ThreadsGuard guard;
  struct Shape3 {
    int64_t m, n, k;
  };
  // 300x500x700 crosses KC and MC; n = 8300 crosses NC twice; k = 1025 leaves a short k block.
  const Shape3 shapes[] = {{300, 500, 700}, {13, 8300, 9}, {70, 45, 1025}};
  uint32_t seed = 100;
  for (const auto& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Operands o = make_operands(ta, tb, s.m, s.n, s.k, seed++);
        for (int threads : {1, 2, 3}) {
          set_num_threads(threads);
          EXPECT_EQ(check_once(o, 2.f, 0.5f, seed), 0);
          EXPECT_EQ(check_once(o, 1.f, 0.f, seed), 0);
        }
      }
}

// The bias argument (a linear layer's, added strip by strip inside the loop nest) gives the bits
// of the product followed by a separate c[i,j] += bias[j], for every transpose, alpha and beta,
// the edge sizes (k = 0 and alpha = 0 take the path without a kernel), shapes crossing the KC, MC
// and NC blocks, and 1-2 threads; the padding of C stays untouched.
TEST_P(Sgemm, BiasAddedInTheLoopHasTheBitsOfASeparatePass) {
  ThreadsGuard guard;
  struct Shape3 {
    int64_t m, n, k;
  };
  const Shape3 shapes[] = {{1, 1, 1},      {7, 33, 0},    {9, 17, 31},
                           {70, 45, 1025}, {13, 8300, 9}, {300, 500, 700}};
  const AlphaBeta alpha_betas[] = {{1.f, 0.f}, {2.f, 0.5f}, {0.f, 1.f}};
  auto product = g_variant.bf16 ? cpu::sbgemm : cpu::sgemm;
  uint32_t seed = 500;
  int bad = 0;
  for (const auto& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Operands o = make_operands(ta, tb, s.m, s.n, s.k, seed++);
        std::mt19937 gen(seed);
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        std::vector<float> bias(static_cast<size_t>(o.n)), c0(static_cast<size_t>(o.m * o.ldc));
        for (auto& v : bias) v = u(gen);
        for (int64_t i = 0; i < o.m * o.ldc; ++i) c0[i] = i % o.ldc < o.n ? u(gen) : kPad;
        for (int threads : {1, 2})
          for (const auto& ab : alpha_betas) {
            set_num_threads(threads);
            std::vector<float> fused = c0, want = c0;
            product(ta, tb, o.m, o.n, o.k, ab.alpha, o.a.data(), o.lda, o.b.data(), o.ldb, ab.beta,
                    fused.data(), o.ldc, bias.data(), nullptr);
            product(ta, tb, o.m, o.n, o.k, ab.alpha, o.a.data(), o.lda, o.b.data(), o.ldb, ab.beta,
                    want.data(), o.ldc, nullptr, nullptr);
            for (int64_t i = 0; i < o.m; ++i)
              for (int64_t j = 0; j < o.n; ++j) want[i * o.ldc + j] += bias[j];
            if (std::memcmp(fused.data(), want.data(), fused.size() * sizeof(float)) != 0 &&
                ++bad <= 3)
              ADD_FAILURE() << variant_name(g_variant) << " ta=" << ta << " tb=" << tb
                            << " m=" << o.m << " n=" << o.n << " k=" << o.k << " alpha=" << ab.alpha
                            << " beta=" << ab.beta << " threads=" << threads
                            << ": the bias in the GEMM differs from adding it after";
          }
      }
  EXPECT_EQ(bad, 0);
}

// row_sums (a linear layer's bias gradient, summed as the loop nest packs a transposed A) are the
// double sums over p of op(a)[i, p] in the order of p, to the bit, whatever the blocking and the
// threads' grid (shapes whose N is split between threads, k crossing KC, m crossing MC, k = 0
// and alpha = 0 without a kernel); the product is unchanged; an untransposed A is refused.
TEST_P(Sgemm, RowSumsOfATransposedAHaveTheBitsOfSequentialDoubleSums) {
  ThreadsGuard guard;
  struct Shape3 {
    int64_t m, n, k;
  };
  const Shape3 shapes[] = {{1, 1, 1}, {7, 33, 0}, {9, 600, 31}, {500, 45, 1025}, {13, 8300, 9}};
  auto product = g_variant.bf16 ? cpu::sbgemm : cpu::sgemm;
  uint32_t seed = 700;
  for (const auto& s : shapes)
    for (bool tb : {false, true}) {
      const Operands o = make_operands(true, tb, s.m, s.n, s.k, seed++);
      std::vector<float> want(static_cast<size_t>(o.m));
      for (int64_t i = 0; i < o.m; ++i) {
        double acc = 0;
        for (int64_t p = 0; p < o.k; ++p) acc += o.a[p * o.lda + i];
        want[i] = static_cast<float>(acc);
      }
      for (int threads : {1, 2, 3})
        for (float alpha : {1.f, 0.f}) {
          set_num_threads(threads);
          std::vector<float> c(static_cast<size_t>(o.m * o.ldc), 0.f), plain = c;
          std::vector<float> sums(static_cast<size_t>(o.m), -1.f);
          product(true, tb, o.m, o.n, o.k, alpha, o.a.data(), o.lda, o.b.data(), o.ldb, 0.f,
                  c.data(), o.ldc, nullptr, sums.data());
          product(true, tb, o.m, o.n, o.k, alpha, o.a.data(), o.lda, o.b.data(), o.ldb, 0.f,
                  plain.data(), o.ldc, nullptr, nullptr);
          const std::string what = variant_name(g_variant) + " m=" + std::to_string(o.m) +
                                   " n=" + std::to_string(o.n) + " k=" + std::to_string(o.k) +
                                   " tb=" + std::to_string(tb) + " alpha=" + std::to_string(alpha) +
                                   " threads=" + std::to_string(threads);
          EXPECT_EQ(sums, want) << what;
          EXPECT_EQ(c, plain) << what;
        }
    }
  std::vector<float> c(4), sums(2);
  const std::vector<float> a(4, 1.f);
  EXPECT_THROW(cpu::sgemm(false, false, 2, 2, 2, 1.f, a.data(), 2, a.data(), 2, 0.f, c.data(), 2,
                          nullptr, sums.data()),
               ShapeError);
}

TEST_P(Sgemm, InsideParallelRegionRunsSingleThreadedAndCorrect) {
  ThreadsGuard guard;
  set_num_threads(2);
  std::vector<Operands> ops;
  for (int i = 0; i < 4; ++i)
    ops.push_back(make_operands(i & 1, i & 2, 130 + i, 150, 120, 200 + i));
  std::vector<int> bad(ops.size(), 0);
  parallel_for(0, static_cast<int64_t>(ops.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) bad[i] = check_once(ops[i], -1.f, 1.f, 300 + i);
  });
  for (size_t i = 0; i < ops.size(); ++i) EXPECT_EQ(bad[i], 0) << "product " << i;
}

INSTANTIATE_TEST_SUITE_P(Kernels, Sgemm, ::testing::ValuesIn(available_variants()),
                         [](const ::testing::TestParamInfo<Variant>& info) {
                           return variant_name(info.param);
                         });

class IsaGuard {
 public:
  IsaGuard() : saved_(cpu::isa()) {}
  ~IsaGuard() {
    cpu::set_isa(saved_);
    set_cpu_matmul_precision(Precision::fp32);
  }

 private:
  cpu::Isa saved_;
};

TEST(SgemmDispatch, KernelNameFollowsTheLevel) {
  IsaGuard guard;
  struct Names {
    cpu::Isa level;
    std::string fp32, bf16;  // bf16: where the CPU has AVX512_BF16
  };
  const Names names[] = {{cpu::Isa::generic, "eigen", "none"},
                         {cpu::Isa::avx2, "avx2+fma 6x16", "none"},
                         {cpu::Isa::avx512, "avx512f 8x32", "avx512_bf16 8x32"},
                         {cpu::Isa::amx, "avx512f 8x32", "amx_bf16 32x32"}};
  for (const auto& [level, fp32, bf16] : names) {
    if (level > cpu::detected_isa()) {
      EXPECT_THROW(cpu::set_isa(level), DeviceError) << cpu::isa_name(level);
      continue;
    }
    cpu::set_isa(level);
    EXPECT_EQ(cpu::sgemm_kernel_name(), fp32);
    EXPECT_EQ(cpu::sbgemm_kernel_name(), cpu::bf16_available() ? bf16 : "none")
        << cpu::isa_name(level);
  }
}

// Below avx512 (or on a CPU without AVX512_BF16) bf16 products are refused with the reason,
// never silently run in fp32.
TEST(SgemmDispatch, Bf16RefusedWithReasonWhereItCannotRun) {
  IsaGuard guard;
  cpu::set_isa(cpu::Isa::avx2);
  std::string why;
  EXPECT_FALSE(cpu::bf16_available(&why));
  EXPECT_FALSE(why.empty());
  float a = 1, b = 1, c = 0;
  EXPECT_THROW(cpu::sbgemm(false, false, 1, 1, 1, 1.f, &a, 1, &b, 1, 0.f, &c, 1), DeviceError);
  EXPECT_THROW(set_cpu_matmul_precision(Precision::bf16), DeviceError);
  EXPECT_EQ(cpu_matmul_precision(), Precision::fp32);
}

// cpu::gemm (what the ops call) follows the process-wide precision: with bf16 the result equals
// sbgemm's bit for bit and differs from sgemm's on operands that bf16 cannot hold.
TEST(SgemmDispatch, GemmFollowsMatmulPrecision) {
  if (!cpu::bf16_available()) {
    EXPECT_THROW(set_cpu_matmul_precision(Precision::bf16), DeviceError);
    return;
  }
  IsaGuard guard;
  std::vector<float> a(64 * 48), b(48 * 40);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 1.f + 1e-3f * float(i % 97);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5f - 1e-3f * float(i % 89);
  std::vector<float> c32(64 * 40), cbf(64 * 40), cgemm(64 * 40);
  cpu::sgemm(false, false, 64, 40, 48, 1.f, a.data(), 48, b.data(), 40, 0.f, c32.data(), 40);
  cpu::sbgemm(false, false, 64, 40, 48, 1.f, a.data(), 48, b.data(), 40, 0.f, cbf.data(), 40);
  set_cpu_matmul_precision(Precision::bf16);
  cpu::gemm(false, false, 64, 40, 48, 1.f, a.data(), 48, b.data(), 40, 0.f, cgemm.data(), 40);
  EXPECT_EQ(cgemm, cbf);
  EXPECT_NE(cbf, c32);
  set_cpu_matmul_precision(Precision::fp32);
  cpu::gemm(false, false, 64, 40, 48, 1.f, a.data(), 48, b.data(), 40, 0.f, cgemm.data(), 40);
  EXPECT_EQ(cgemm, c32);
}

// ADA_CPU_CACHES: what it accepts and refuses, and (where the tests set it: tests/CMakeLists.txt)
// that Eigen's GEMM, the generic level, blocks by the forced sizes.
TEST(SgemmDispatch, ForcedCacheSizes) {
  const cpu::CacheSizes c = cpu::parse_cache_sizes("16K,128K,3M", "test");
  EXPECT_EQ(c.l1, 16 << 10);
  EXPECT_EQ(c.l2, 128 << 10);
  EXPECT_EQ(c.l3, 3 << 20);
  EXPECT_EQ(cpu::parse_cache_sizes("32768,1048576,8M", "test").l2, 1 << 20);
  for (const char* bad : {"", "16K", "16K,128K", "16K,128K,3M,4M", "16K,,3M", "0,1K,1K",
                          "-1K,1K,1K", "16k,1K,1K", "1.5K,1K,1K", "16K,128K,3G"}) {
    try {
      cpu::parse_cache_sizes(bad, std::string("ADA_CPU_CACHES=") + bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("ADA_CPU_CACHES=") + bad +
                                           ": expected three positive sizes"),
                std::string::npos)
          << e.what();
    }
  }
  IsaGuard guard;
  cpu::set_isa(cpu::Isa::generic);
  float a = 1, b = 2, out = 0;
  cpu::sgemm(false, false, 1, 1, 1, 1.f, &a, 1, &b, 1, 0.f, &out, 1);
  EXPECT_EQ(out, 2.f);
  const auto forced = cpu::forced_cache_sizes();
  EXPECT_EQ(forced.has_value(), cpu::isa_description().find("caches forced") != std::string::npos);
  if (forced) {
    EXPECT_EQ(Eigen::l1CacheSize(), forced->l1);
    EXPECT_EQ(Eigen::l2CacheSize(), forced->l2);
    EXPECT_EQ(Eigen::l3CacheSize(), forced->l3);
  }
}

}  // namespace
}  // namespace ada
