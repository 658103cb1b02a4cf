// Forward results of the op surface against naive reference loops, across thread counts and
// the code paths each kernel chooses (conv image grouping, 1x1 fast path, batched GEMM split),
// plus the errors bad arguments must raise.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "core/backend/cpu/conv_cpu.h"
#include "core/backend/cpu/dropout_blocks.h"
#include "core/cpu_isa.h"
#include "core/functional.h"
#include "core/half.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/philox.h"
#include "core/precision.h"
#include "util/error_of.h"
#include "util/sum_bound.h"

namespace ada {
namespace {

Tensor rnd(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return Tensor::randn(s, g);
}

using testing::error_of;
using testing::SumRef;

// `got` against a reference sum within the bound of tests/util/sum_bound.h.
void expect_sum_close(const Tensor& got, const SumRef& ref, const std::string& what) {
  testing::expect_within_sum_bound(got.to_vector<float>(), ref, what);
}

// op(a) op(b) in double, with the sum of |products| of each element.
SumRef naive_gemm(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  int64_t n = tb ? b.size(0) : b.size(1);
  SumRef c(static_cast<size_t>(m * n));
  const float* A = a.data<float>();
  const float* B = b.data<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l)
        c.add(i * n + j,
              double(ta ? A[l * m + i] : A[i * k + l]) * (tb ? B[j * k + l] : B[l * n + j]));
  return c;
}

TEST(Ops, GemmAllTransposesAlphaBeta) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor a = ta ? rnd({37, 19}, 1) : rnd({19, 37}, 1);
      Tensor b = tb ? rnd({23, 37}, 2) : rnd({37, 23}, 2);
      const SumRef ref = naive_gemm(a, b, ta, tb);
      expect_sum_close(ops::matmul(a, b, ta, tb), ref, "matmul");
      Tensor c = Tensor::ones({19, 23});
      ops::gemm(a, b, c, ta, tb, 2.f, 0.5f);
      SumRef want(ref.value.size());  // 2 ab + 0.5 * 1
      for (size_t i = 0; i < want.value.size(); ++i) {
        want.value[i] = 2 * ref.value[i] + 0.5;
        want.mag[i] = 2 * ref.mag[i] + 0.5;
      }
      expect_sum_close(c, want, "gemm alpha/beta");
    }
}

TEST(Ops, BatchedGemmBothSplits) {
  for (int threads : {1, 2})
    for (int64_t batch : {1, 5}) {
      set_num_threads(threads);
      Tensor a = rnd({batch, 7, 9}, 3), b = rnd({batch, 11, 9}, 4);
      Tensor c = ops::bmm(a, b, false, true);
      for (int64_t i = 0; i < batch; ++i)
        expect_sum_close(c.narrow(i, 1).reshape({7, 11}),
                         naive_gemm(a.narrow(i, 1).reshape({7, 9}), b.narrow(i, 1).reshape({11, 9}),
                                    false, true),
                         "bmm batch " + std::to_string(i));
    }
  set_num_threads(0);
}

// t with every value rounded to bf16.
Tensor round16(const Tensor& t) {
  std::vector<float> v = t.to_vector<float>();
  for (float& e : v) e = half::bf16_to_float(half::bf16_from_float(e));
  return Tensor::from_vector<float>(v, t.shape());
}

// The levels at which this CPU runs the bf16 mode: avx512 with AVX512_BF16 (vdpbf16ps) and amx
// (AMX tiles). Leaves the level as it found it.
std::vector<cpu::Isa> bf16_levels() {
  const cpu::Isa saved = cpu::isa();
  std::vector<cpu::Isa> out;
  for (cpu::Isa level : {cpu::Isa::avx512, cpu::Isa::amx}) {
    if (level > cpu::detected_isa()) continue;
    cpu::set_isa(level);
    if (cpu::bf16_available()) out.push_back(level);
  }
  cpu::set_isa(saved);
  return out;
}

// The three passes of a convolution in double, with the sum of |products| of each element:
// y = conv(x, w), dx = the data gradient of dy, dw = the filter gradient of dy.
struct ConvRef {
  SumRef y, dx, dw;
};
ConvRef naive_conv(const Tensor& x, const Tensor& w, const Tensor& dy, const ops::Conv2dParams& p) {
  const Shape os = ops::conv2d_output_shape(x.shape(), w.shape(), p);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t K = w.size(0), R = w.size(2), S = w.size(3), P = os[2], Q = os[3];
  ConvRef ref{SumRef(static_cast<size_t>(N * K * P * Q)), SumRef(static_cast<size_t>(x.numel())),
              SumRef(static_cast<size_t>(w.numel()))};
  const float *X = x.data<float>(), *Wt = w.data<float>(), *D = dy.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < R; ++r)
          for (int64_t t = 0; t < S; ++t) {
            const int64_t wi = ((k * C + c) * R + r) * S + t;
            for (int64_t i = 0; i < P; ++i) {
              const int64_t h = i * p.stride_h - p.pad_h + r * p.dil_h;
              if (h < 0 || h >= H) continue;
              for (int64_t j = 0; j < Q; ++j) {
                const int64_t v = j * p.stride_w - p.pad_w + t * p.dil_w;
                if (v < 0 || v >= W) continue;
                const int64_t xi = ((n * C + c) * H + h) * W + v,
                              yi = ((n * K + k) * P + i) * Q + j;
                ref.y.add(yi, double(X[xi]) * Wt[wi]);
                ref.dx.add(xi, double(D[yi]) * Wt[wi]);
                ref.dw.add(wi, double(D[yi]) * X[xi]);
              }
            }
          }
  return ref;
}

// The three passes at the current ISA level and thread count against `ref`.
void expect_conv_passes(const Tensor& x, const Tensor& w, const Tensor& dy,
                        const ops::Conv2dParams& p, const ConvRef& ref, const std::string& what,
                        bool data_pass = true) {
  expect_sum_close(ops::conv2d_forward(x, w, p), ref.y, what + " forward");
  if (data_pass)
    expect_sum_close(ops::conv2d_backward_data(dy, w, x.shape(), p), ref.dx,
                     what + " backward-data");
  expect_sum_close(ops::conv2d_backward_filter(dy, x, w.shape(), p), ref.dw,
                   what + " backward-filter");
}

// Channels-last convolutions (Conv2dParams::channels_last: x, y and their gradients [N,H,W,C])
// on the CPU are the NCHW ones on permuted copies: the same bits in every pass, weights and
// their gradient [Cout,Cin,kh,kw] in both. A bad channels-last input is named as such.
TEST(Ops, ChannelsLastConvolutionsAreTheNchwOnesPermuted) {
  struct Case {
    Shape x, w;
    ops::Conv2dParams p;
  };
  const std::vector<Case> cases = {{{2, 3, 9, 7}, {5, 3, 3, 3}, {1, 1, 1, 1, 1, 1, false}},
                                   {{3, 4, 11, 10}, {6, 4, 3, 2}, {2, 1, 1, 0, 2, 1, false}},
                                   {{2, 16, 8, 8}, {32, 16, 1, 1}, {2, 2, 0, 0, 1, 1, false}},
                                   {{1, 1, 13, 13}, {4, 1, 7, 7}, {2, 2, 3, 3, 1, 1, false}}};
  auto nhwc = [](const Tensor& t) { return ops::permute(t, {0, 2, 3, 1}); };
  auto bits = [](const Tensor& t) { return t.to_vector<float>(); };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    const Tensor x = rnd(c.x, 1), w = rnd(c.w, 2);
    const Tensor y = ops::conv2d_forward(x, w, c.p);
    const Tensor dy = rnd(y.shape(), 3);
    ops::Conv2dParams cl = c.p;
    cl.channels_last = true;
    const Shape x_cl = nhwc(x).shape();
    EXPECT_EQ(ops::conv2d_output_shape(x_cl, c.w, cl), nhwc(y).shape());
    const Tensor y_cl = ops::conv2d_forward(nhwc(x), w, cl);
    ASSERT_EQ(y_cl.shape(), nhwc(y).shape());
    EXPECT_EQ(bits(y_cl), bits(nhwc(y))) << "forward";
    const Tensor dx = ops::conv2d_backward_data(dy, w, c.x, c.p);
    const Tensor dx_cl = ops::conv2d_backward_data(nhwc(dy), w, x_cl, cl);
    ASSERT_EQ(dx_cl.shape(), x_cl);
    EXPECT_EQ(bits(dx_cl), bits(nhwc(dx))) << "backward-data";
    const Tensor dw = ops::conv2d_backward_filter(dy, x, c.w, c.p);
    const Tensor dw_cl = ops::conv2d_backward_filter(nhwc(dy), nhwc(x), c.w, cl);
    ASSERT_EQ(dw_cl.shape(), c.w);
    EXPECT_EQ(bits(dw_cl), bits(dw)) << "backward-filter";
  }
  ops::Conv2dParams cl;
  cl.channels_last = true;
  // An NCHW tensor given as channels-last: its last dim (7) is not the weights' 3 channels.
  EXPECT_NE(error_of<ShapeError>([&] {
              ops::conv2d_forward(rnd({2, 3, 9, 7}, 1), rnd({5, 3, 3, 3}, 2), cl);
            }).find("expects 3 input channels, input [2,3,9,7] has 7"),
            std::string::npos);
  EXPECT_NE(error_of<ShapeError>([&] {
              ops::conv2d_forward(rnd({2, 9, 7}, 1), rnd({5, 3, 3, 3}, 2), cl);
            }).find("input must be [N,H,W,C] (channels last)"),
            std::string::npos);
}

// Every pass of the convolution paths the current level picks (im2col image groups, the 1x1 fast
// path, the direct and blocked kernels where they apply) against a naive one in double.
TEST(Ops, Conv2dMatchesNaiveOnEveryPath) {
  struct Case {
    Shape x, w;
    ops::Conv2dParams p;
  } cases[] = {
      {{1, 3, 9, 8}, {4, 3, 3, 3}, {1, 1, 1, 1, 1, 1}},    // single image
      {{6, 3, 9, 8}, {4, 3, 3, 3}, {1, 1, 1, 1, 1, 1}},    // parallel groups
      {{7, 5, 3, 3}, {6, 5, 3, 3}, {2, 2, 1, 1, 1, 1}},    // tiny planes: grouped images
      {{3, 8, 5, 6}, {4, 8, 1, 1}, {}},                    // 1x1 fast path
      {{9, 8, 2, 3}, {4, 8, 1, 1}, {}},                    // 1x1 grouped
      {{2, 3, 5, 7}, {2, 3, 1, 1}, {2, 2, 0, 0, 1, 1}},    // 1x1 stride 2
      {{2, 3, 23, 21}, {4, 3, 7, 7}, {2, 2, 3, 3, 1, 1}},  // 7x7/2 stem
      {{2, 2, 9, 7}, {3, 2, 3, 2}, {2, 1, 1, 0, 2, 2}},    // odd, dilated
  };
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const auto& c : cases) {
      const Tensor x = rnd(c.x, 5), w = rnd(c.w, 6),
                   dy = rnd(ops::conv2d_output_shape(c.x, c.w, c.p), 7);
      expect_conv_passes(
          x, w, dy, c.p, naive_conv(x, w, dy, c.p),
          "conv " + shape_str(c.x) + "*" + shape_str(c.w) + " threads " + std::to_string(threads));
    }
  }
  set_num_threads(0);
}

// The direct 3x3 and 5x5 kernels (conv_direct.h) and im2col + GEMM (the generic ISA's path)
// against a naive convolution in double, for every ISA this CPU has, all three passes: rows shorter
// than, equal to and longer than a vector, channel counts that leave register-tile remainders, one
// input channel, paddings from 0 to the kernel size - 1, batches split over threads.
TEST(Ops, Conv2dDirectKernelsMatchNaiveOnEveryPass) {
  struct Case {
    Shape x, w;
    int pad;
  } cases[] = {
      {{3, 16, 28, 28}, {16, 16, 3, 3}, 1},  // ResNet-20, first stage
      {{2, 32, 14, 14}, {32, 32, 3, 3}, 1},  // second stage
      {{3, 64, 7, 7}, {64, 64, 3, 3}, 1},    // third stage: 8-lane rows
      {{2, 1, 28, 28}, {16, 1, 3, 3}, 1},    // one input channel (the stem)
      {{1, 5, 9, 17}, {13, 5, 3, 3}, 1},     // 17 columns: a one-lane tail; 13 = tile remainders
      {{3, 6, 8, 16}, {7, 6, 3, 3}, 0},      // no padding: 14 columns
      {{2, 3, 5, 8}, {9, 3, 3, 3}, 2},       // padding 2: a 10-column output
      {{1, 2, 3, 1}, {3, 2, 3, 3}, 1},       // a one-column plane
      {{3, 1, 28, 28}, {6, 1, 5, 5}, 2},     // LeNet-5's first convolution
      {{2, 6, 14, 14}, {16, 6, 5, 5}, 0},    // its second
      {{1, 3, 6, 9}, {5, 3, 5, 5}, 4},       // 5x5 with the largest padding
  };
  const cpu::Isa saved = cpu::isa();
  std::vector<cpu::Isa> isas;
  for (cpu::Isa i : {cpu::Isa::avx2, cpu::Isa::avx512})
    if (static_cast<int>(i) <= static_cast<int>(cpu::detected_isa())) isas.push_back(i);
  if (isas.empty()) {  // a build below the x86-64-v3 default on a CPU without AVX2: im2col only
    EXPECT_EQ(cpu::conv_direct_kernels({1, 16, 8, 8}, {16, 16, 3, 3}, {1, 1, 1, 1, 1, 1},
                                       cpu::ConvPass::forward),
              nullptr);
    return;
  }
  for (const auto& c : cases) {
    const ops::Conv2dParams p{1, 1, c.pad, c.pad, 1, 1};
    Tensor x = rnd(c.x, 7), w = rnd(c.w, 8);
    Tensor dy = rnd(ops::conv2d_output_shape(c.x, c.w, p), 9);
    const ConvRef ref = naive_conv(x, w, dy, p);
    cpu::set_isa(cpu::Isa::generic);
    ASSERT_EQ(cpu::conv_direct_kernels(c.x, c.w, p, cpu::ConvPass::forward), nullptr);
    expect_conv_passes(x, w, dy, p, ref, "generic im2col " + shape_str(c.x) + "*" + shape_str(c.w));
    for (cpu::Isa isa : isas)
      for (int threads : {1, 2}) {
        cpu::set_isa(isa);
        set_num_threads(threads);
        const char* kern = cpu::conv_direct_kernels(c.x, c.w, p, cpu::ConvPass::forward);
        for (auto pass :
             {cpu::ConvPass::forward, cpu::ConvPass::backward_data, cpu::ConvPass::backward_filter})
          ASSERT_NE(cpu::conv_direct_kernels(c.x, c.w, p, pass), nullptr)
              << shape_str(c.x) << " should run on the direct kernels in every pass";
        const std::string what = std::string(kern) + " " + shape_str(c.x) + "*" + shape_str(c.w) +
                                 " pad " + std::to_string(c.pad) + " threads " +
                                 std::to_string(threads);
        expect_conv_passes(x, w, dy, p, ref, what);
      }
  }
  // Strided, 7x7, too wide (the filter gradient from 256 channels, the others past 256) or
  // overpadded convolutions stay on im2col + GEMM.
  cpu::set_isa(isas.back());
  const auto fwd = cpu::ConvPass::forward, filt = cpu::ConvPass::backward_filter;
  EXPECT_EQ(cpu::conv_direct_kernels({1, 16, 8, 8}, {16, 16, 3, 3}, {2, 2, 1, 1, 1, 1}, fwd),
            nullptr);
  EXPECT_NE(cpu::conv_direct_kernels({1, 256, 8, 8}, {256, 256, 3, 3}, {1, 1, 1, 1, 1, 1}, fwd),
            nullptr);
  EXPECT_EQ(cpu::conv_direct_kernels({1, 256, 8, 8}, {256, 256, 3, 3}, {1, 1, 1, 1, 1, 1}, filt),
            nullptr);
  EXPECT_EQ(cpu::conv_direct_kernels({1, 512, 8, 8}, {512, 512, 3, 3}, {1, 1, 1, 1, 1, 1}, fwd),
            nullptr);
  EXPECT_EQ(cpu::conv_direct_kernels({1, 16, 8, 8}, {16, 16, 3, 3}, {1, 1, 3, 3, 1, 1}, fwd),
            nullptr);
  EXPECT_EQ(cpu::conv_direct_kernels({1, 16, 8, 8}, {16, 16, 7, 7}, {1, 1, 3, 3, 1, 1}, fwd),
            nullptr);
  // The bf16 mode runs the same kernels on operands rounded to bf16: every pass equals, bit for
  // bit, the fp32 mode on operands rounded beforehand (and differs from it on unrounded ones).
  // At avx512 and at amx (where the bf16 GEMM runs on tiles).
  for (cpu::Isa level : bf16_levels()) {
    cpu::set_isa(level);
    const int64_t most = level == cpu::Isa::amx ? 32 : 64;  // channels the direct kernels keep
    for (const auto& c : cases) {
      if (c.w[0] * c.w[1] > most * most) continue;
      const ops::Conv2dParams p{1, 1, c.pad, c.pad, 1, 1};
      const Tensor x = rnd(c.x, 7), w = rnd(c.w, 8),
                   dy = rnd(ops::conv2d_output_shape(c.x, c.w, p), 9);
      const std::string what = std::string(cpu::isa_name(level)) + " " + shape_str(c.x) + "*" +
                               shape_str(c.w) + " pad " + std::to_string(c.pad);
      set_cpu_matmul_precision(Precision::bf16);
      for (auto pass :
           {cpu::ConvPass::forward, cpu::ConvPass::backward_data, cpu::ConvPass::backward_filter})
        ASSERT_NE(cpu::conv_direct_kernels(c.x, c.w, p, pass), nullptr)
            << what << ": bf16 mode, direct kernels";
      const auto y16 = ops::conv2d_forward(x, w, p).to_vector<float>();
      const auto dx16 = ops::conv2d_backward_data(dy, w, c.x, p).to_vector<float>();
      const auto dw16 = ops::conv2d_backward_filter(dy, x, c.w, p).to_vector<float>();
      set_cpu_matmul_precision(Precision::fp32);
      const Tensor xr = round16(x), wr = round16(w), dyr = round16(dy);
      EXPECT_EQ(y16, ops::conv2d_forward(xr, wr, p).to_vector<float>()) << what << " forward";
      EXPECT_EQ(dx16, ops::conv2d_backward_data(dyr, wr, c.x, p).to_vector<float>())
          << what << " backward-data";
      EXPECT_EQ(dw16, ops::conv2d_backward_filter(dyr, xr, c.w, p).to_vector<float>())
          << what << " backward-filter";
      EXPECT_NE(y16, ops::conv2d_forward(x, w, p).to_vector<float>())
          << what << ": bf16 mode did not round";
    }
    // Past 64 channels (on AMX tiles: 32) the bf16 GEMM on im2col is faster: it keeps them.
    set_cpu_matmul_precision(Precision::bf16);
    EXPECT_NE(
        cpu::conv_direct_kernels({1, most, 8, 8}, {most, most, 3, 3}, {1, 1, 1, 1, 1, 1}, fwd),
        nullptr);
    EXPECT_EQ(cpu::conv_direct_kernels({1, 2 * most, 8, 8}, {2 * most, 2 * most, 3, 3},
                                       {1, 1, 1, 1, 1, 1}, fwd),
              nullptr);
    set_cpu_matmul_precision(Precision::fp32);
  }
  cpu::set_isa(saved);
  set_num_threads(0);
}

// The batch-blocked kernels (conv_blocked.h) and im2col + GEMM against a naive convolution in
// double, for every ISA this CPU has:
// full and partly filled blocks of images, strides 1 and 2 (the backward-data pass: 1 only),
// paddings 0 to 2, odd planes, channel counts that leave register-tile remainders, one input
// channel, blocks split over threads; and the bf16 mode bit for bit against fp32 on rounded
// operands (with AVX512_BF16 the forward and backward-data passes against the naive convolution of
// the rounded operands: vdpbf16ps adds the same products in another order).
TEST(Ops, Conv2dBlockedKernelsMatchNaiveOnEveryPass) {
  struct Case {
    Shape x, w;
    int stride, pad;
  } cases[] = {
      {{32, 16, 28, 28}, {16, 16, 3, 3}, 1, 1},  // ResNet-20, first stage: two blocks
      {{16, 16, 28, 28}, {32, 16, 3, 3}, 2, 1},  // its first strided convolution
      {{30, 64, 7, 7}, {64, 64, 3, 3}, 1, 1},    // third stage, a block with empty lanes
      {{16, 1, 28, 28}, {16, 1, 3, 3}, 1, 1},    // one input channel (the stem)
      {{17, 5, 9, 11}, {13, 5, 3, 3}, 2, 0},     // 8-lane blocks only; 13 = tile remainders
      {{16, 6, 8, 5}, {7, 6, 3, 3}, 1, 0},       // no padding
      {{24, 3, 5, 8}, {9, 3, 3, 3}, 1, 2},       // padding 2
      {{16, 2, 3, 1}, {3, 2, 3, 3}, 2, 2},       // a one-column plane, stride 2
  };
  const cpu::Isa saved = cpu::isa();
  std::vector<cpu::Isa> isas;
  for (cpu::Isa i : {cpu::Isa::avx2, cpu::Isa::avx512})
    if (static_cast<int>(i) <= static_cast<int>(cpu::detected_isa())) isas.push_back(i);
  const auto fwd = cpu::ConvPass::forward, data = cpu::ConvPass::backward_data,
             filt = cpu::ConvPass::backward_filter;
  auto blocked = [](const Shape& x, const Shape& w, const ops::Conv2dParams& p,
                    cpu::ConvPass pass) {
    const char* k = cpu::conv_direct_kernels(x, w, p, pass);
    return k && std::string(k).find("blocked") != std::string::npos;
  };
  int blocked_runs = 0;
  for (const auto& c : cases) {
    const ops::Conv2dParams p{c.stride, c.stride, c.pad, c.pad, 1, 1};
    const Tensor x = rnd(c.x, 7), w = rnd(c.w, 8),
                 dy = rnd(ops::conv2d_output_shape(c.x, c.w, p), 9);
    const ConvRef ref = naive_conv(x, w, dy, p);
    const std::string shapes = shape_str(c.x) + "*" + shape_str(c.w) + " stride " +
                               std::to_string(c.stride) + " pad " + std::to_string(c.pad);
    cpu::set_isa(cpu::Isa::generic);
    expect_conv_passes(x, w, dy, p, ref, "generic im2col " + shapes);
    for (cpu::Isa isa : isas)
      for (int threads : {1, 2}) {
        cpu::set_isa(isa);
        set_num_threads(threads);
        if (!blocked(c.x, c.w, p, fwd)) continue;  // too few images for this ISA's blocks
        ++blocked_runs;
        ASSERT_TRUE(blocked(c.x, c.w, p, filt)) << shape_str(c.x);
        ASSERT_EQ(blocked(c.x, c.w, p, data), c.stride == 1) << shape_str(c.x);
        expect_conv_passes(x, w, dy, p, ref,
                           std::string(cpu::conv_direct_kernels(c.x, c.w, p, fwd)) + " " + shapes +
                               " threads " + std::to_string(threads));
      }
  }
  if (isas.empty()) return;  // a build below x86-64-v3 on a CPU without AVX2: im2col only
  EXPECT_GE(blocked_runs, 2 * 7) << "most cases should have run on the blocked kernels";
  cpu::set_isa(isas.back());
  const int64_t lanes = isas.back() == cpu::Isa::avx512 ? 16 : 8;
  const ops::Conv2dParams s1{1, 1, 1, 1, 1, 1};
  // Fewer images than a block, or a last block more than a quarter empty, planes over 28 x 28,
  // more than 64 x 64 channels, 5x5 kernels or dilation stay on the plane kernels or im2col.
  EXPECT_FALSE(blocked({lanes - 1, 16, 8, 8}, {16, 16, 3, 3}, s1, fwd));
  EXPECT_FALSE(blocked({lanes + lanes / 2, 16, 8, 8}, {16, 16, 3, 3}, s1, fwd));
  EXPECT_TRUE(blocked({2 * lanes - lanes / 4, 16, 8, 8}, {16, 16, 3, 3}, s1, fwd));
  EXPECT_FALSE(blocked({lanes, 16, 29, 28}, {16, 16, 3, 3}, s1, fwd));
  EXPECT_TRUE(blocked({lanes, 64, 8, 8}, {64, 64, 3, 3}, s1, fwd));
  EXPECT_FALSE(blocked({lanes, 64, 8, 8}, {128, 64, 3, 3}, s1, fwd));
  EXPECT_FALSE(blocked({lanes, 16, 8, 8}, {16, 16, 5, 5}, {1, 1, 2, 2, 1, 1}, fwd));
  EXPECT_FALSE(blocked({lanes, 16, 8, 8}, {16, 16, 3, 3}, {1, 1, 2, 2, 2, 2}, fwd));
  // At avx512 (vdpbf16ps forward and backward-data kernels) and at amx (the fp32 kernels on
  // rounded operands: conv.cc, blocked_bf16).
  for (cpu::Isa level : bf16_levels()) {
    cpu::set_isa(level);
    for (const auto& c : cases) {
      const ops::Conv2dParams p{c.stride, c.stride, c.pad, c.pad, 1, 1};
      set_cpu_matmul_precision(Precision::bf16);
      if (!blocked(c.x, c.w, p, fwd)) {
        set_cpu_matmul_precision(Precision::fp32);
        continue;
      }
      const Tensor x = rnd(c.x, 7), w = rnd(c.w, 8),
                   dy = rnd(ops::conv2d_output_shape(c.x, c.w, p), 9);
      const std::string what = std::string(cpu::isa_name(level)) + " " + shape_str(c.x) + "*" +
                               shape_str(c.w) + " stride " + std::to_string(c.stride);
      // At avx512 the forward and backward-data passes run on vdpbf16ps (the filter gradient
      // stays on the fp32 kernels, on rounded operands).
      const bool vdp =
          std::string(cpu::conv_direct_kernels(c.x, c.w, p, fwd)) == "avx512_bf16 blocked";
      EXPECT_EQ(vdp, cpu::isa() == cpu::Isa::avx512) << what;
      EXPECT_EQ(std::string(cpu::conv_direct_kernels(c.x, c.w, p, filt)).find("bf16"),
                std::string::npos)
          << what;
      const auto y16 = ops::conv2d_forward(x, w, p).to_vector<float>();
      const auto dx16 = ops::conv2d_backward_data(dy, w, c.x, p).to_vector<float>();
      const auto dw16 = ops::conv2d_backward_filter(dy, x, c.w, p).to_vector<float>();
      set_cpu_matmul_precision(Precision::fp32);
      const Tensor xr = round16(x), wr = round16(w), dyr = round16(dy);
      // vdpbf16ps: the same products, summed in another order (pairs of channels per instruction).
      const ConvRef ref16 = vdp ? naive_conv(xr, wr, dyr, p) : ConvRef{};
      if (vdp)
        testing::expect_within_sum_bound(y16, ref16.y, what + " forward (vdpbf16ps)");
      else
        EXPECT_EQ(y16, ops::conv2d_forward(xr, wr, p).to_vector<float>()) << what << " forward";
      if (c.stride == 1) {
        if (vdp)
          testing::expect_within_sum_bound(dx16, ref16.dx, what + " backward-data (vdpbf16ps)");
        else
          EXPECT_EQ(dx16, ops::conv2d_backward_data(dyr, wr, c.x, p).to_vector<float>())
              << what << " backward-data";
      }
      EXPECT_EQ(dw16, ops::conv2d_backward_filter(dyr, xr, c.w, p).to_vector<float>())
          << what << " backward-filter";
      EXPECT_NE(y16, ops::conv2d_forward(x, w, p).to_vector<float>())
          << what << ": bf16 mode did not round";
    }
  }
  cpu::set_isa(saved);
  set_num_threads(0);
}

// Max pooling keeps the first of equal maxima and propagates the first NaN of a window (its
// index goes to the backward pass), whatever comes after it; -inf windows point at their first
// element.
TEST(Ops, MaxPoolTiesAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  // Four 2x2 windows of a 4x4 plane, row-major: ties | a NaN before the max | two NaNs | all -inf.
  Tensor x = Tensor::from_vector<float>({3, 3, 1, nan,        //
                                         3, 1, 5, 2,          //
                                         nan, 9, -inf, -inf,  //
                                         nan, 1, -inf, -inf},
                                        {1, 1, 4, 4});
  Tensor idx;
  const auto y = ops::max_pool2d_forward(x, {2, 2, 2, 2, 0, 0, true}, idx).to_vector<float>();
  EXPECT_EQ(y[0], 3.f);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], -inf);
  EXPECT_EQ(idx.to_vector<int32_t>(), (std::vector<int32_t>{0, 3, 8, 10}));
}

// Every window shape (the unrolled 2x2 path and the row-at-a-time one: kernels 1-4, strides
// 1-3, every legal padding, odd planes) against a plain loop with the same rule: the first
// maximum or the first NaN in row-major window order, else the first element of the window. The
// values come from a set of five (0, 1, 2, -inf, NaN), so windows are full of ties.
TEST(Ops, MaxPoolMatchesReferenceOnEveryWindowShape) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  const float pick[5] = {0.f, 1.f, 2.f, -inf, nan};
  std::mt19937 gen(17);
  for (int64_t k = 1; k <= 4; ++k)
    for (int64_t s = 1; s <= 3; ++s)
      for (int64_t pad = 0; 2 * pad <= k; ++pad)
        for (int64_t H : {k, k + 4}) {
          const int64_t W = H + 3;
          std::vector<float> v(static_cast<size_t>(2 * H * W));
          for (float& e : v) e = pick[gen() % 5];
          Tensor x = Tensor::from_vector<float>(v, {1, 2, H, W}), idx;
          const int ki = static_cast<int>(k), si = static_cast<int>(s), pi = static_cast<int>(pad);
          const ops::Pool2dParams p{ki, ki, si, si, pi, pi, true};
          const auto y = ops::max_pool2d_forward(x, p, idx);
          const auto yv = y.to_vector<float>();
          const auto iv = idx.to_vector<int32_t>();
          const int64_t P = y.size(2), Q = y.size(3);
          for (int64_t c = 0; c < 2; ++c)
            for (int64_t i = 0; i < P; ++i)
              for (int64_t j = 0; j < Q; ++j) {
                const int64_t h0 = std::max<int64_t>(i * s - pad, 0),
                              w0 = std::max<int64_t>(j * s - pad, 0);
                float best = v[static_cast<size_t>(c * H * W + h0 * W + w0)];
                int64_t arg = h0 * W + w0;
                for (int64_t h = h0; h < std::min(i * s - pad + k, H) && best == best; ++h)
                  for (int64_t w = w0; w < std::min(j * s - pad + k, W); ++w) {
                    const float e = v[static_cast<size_t>(c * H * W + h * W + w)];
                    if (e > best || e != e) {
                      best = e;
                      arg = h * W + w;
                      if (e != e) break;
                    }
                  }
                const size_t o = static_cast<size_t>((c * P + i) * Q + j);
                const std::string at = "kernel " + std::to_string(k) + " stride " +
                                       std::to_string(s) + " pad " + std::to_string(pad) + " H " +
                                       std::to_string(H) + " output (" + std::to_string(c) + "," +
                                       std::to_string(i) + "," + std::to_string(j) + ")";
                ASSERT_EQ(iv[o], arg) << at;
                if (best != best)
                  ASSERT_TRUE(std::isnan(yv[o])) << at;
                else
                  ASSERT_EQ(yv[o], best) << at;
              }
        }
}

// Channels-last max-pool is the NCHW op permuted, bit for bit: values, indices and gradients,
// over kernels 1-4, strides 1-3, every legal padding, and windows full of ties, -inf and NaN.
TEST(Ops, MaxPoolChannelsLastIsTheNchwOpPermuted) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  const float pick[5] = {0.f, 1.f, 2.f, -inf, nan};
  auto bits = [](const Tensor& t) {
    std::vector<uint32_t> v(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), t.raw_data(), v.size() * 4);
    return v;
  };
  // [N, C, P, Q] i32 indices in NHWC order.
  auto nhwc_indices = [](const Tensor& idx) {
    const int64_t n = idx.size(0), c = idx.size(1), hw = idx.size(2) * idx.size(3);
    const std::vector<int32_t> v = idx.to_vector<int32_t>();
    std::vector<int32_t> out(v.size());
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t k = 0; k < hw; ++k)
          out[static_cast<size_t>((b * hw + k) * c + ch)] =
              v[static_cast<size_t>((b * c + ch) * hw + k)];
    return out;
  };
  std::mt19937 gen(19);
  for (int k = 1; k <= 4; ++k)
    for (int s = 1; s <= 3; ++s)
      for (int pad = 0; 2 * pad <= k; ++pad)
        for (int64_t H : {int64_t{k}, int64_t{k} + 4}) {
          const std::string what = "kernel " + std::to_string(k) + " stride " + std::to_string(s) +
                                   " pad " + std::to_string(pad) + " H " + std::to_string(H);
          const int64_t W = H + 3, C = 5, N = 2;
          std::vector<float> v(static_cast<size_t>(N * C * H * W));
          for (float& e : v) e = pick[gen() % 5];
          const Tensor x = Tensor::from_vector<float>(v, {N, C, H, W});
          const ops::Pool2dParams p{k, k, s, s, pad, pad, true};
          Tensor idx, idx_cl;
          const Tensor y = ops::max_pool2d_forward(x, p, idx);
          const Tensor x_cl = ops::permute(x, {0, 2, 3, 1});
          const Tensor y_cl = ops::max_pool2d_nhwc_forward(x_cl, p, idx_cl);
          ASSERT_EQ(y_cl.shape(), (Shape{N, y.size(2), y.size(3), C})) << what;
          EXPECT_EQ(bits(y_cl), bits(ops::permute(y, {0, 2, 3, 1}))) << what;
          EXPECT_EQ(idx_cl.to_vector<int32_t>(), nhwc_indices(idx)) << what;
          const Tensor dy = rnd(y.shape(), 23);
          const Tensor dx = ops::max_pool2d_backward(dy, idx, x.shape());
          const Tensor dx_cl =
              ops::max_pool2d_nhwc_backward(ops::permute(dy, {0, 2, 3, 1}), idx_cl, x_cl.shape());
          EXPECT_EQ(bits(dx_cl), bits(ops::permute(dx, {0, 2, 3, 1}))) << what;
        }
  Tensor idx;
  EXPECT_THROW(
      ops::max_pool2d_nhwc_forward(Tensor::zeros({4, 4, 3}), {2, 2, 2, 2, 0, 0, true}, idx),
      ShapeError);
  EXPECT_THROW(
      ops::max_pool2d_nhwc_forward(Tensor::zeros({1, 1, 1, 3}), {2, 2, 2, 2, 0, 0, true}, idx),
      ShapeError);  // a 2x2 kernel over a 1x1 plane
}

TEST(Ops, PoolingForward) {
  Tensor x = Tensor::arange(0, 16).reshape({1, 1, 4, 4});
  Tensor idx;
  ops::Pool2dParams p{2, 2, 2, 2, 0, 0, true};
  EXPECT_EQ(ops::max_pool2d_forward(x, p, idx).to_vector<float>(),
            (std::vector<float>{5, 7, 13, 15}));
  EXPECT_EQ(idx.to_vector<int32_t>(), (std::vector<int32_t>{5, 7, 13, 15}));
  EXPECT_EQ(ops::avg_pool2d_forward(x, p).to_vector<float>(),
            (std::vector<float>{2.5, 4.5, 10.5, 12.5}));
  ops::Pool2dParams pad{3, 3, 2, 2, 1, 1, true};
  auto inc = ops::avg_pool2d_forward(x, pad).to_vector<float>();
  EXPECT_FLOAT_EQ(inc[0], (0 + 1 + 4 + 5) / 9.f);  // padding counted
  pad.count_include_pad = false;
  EXPECT_FLOAT_EQ(ops::avg_pool2d_forward(x, pad).to_vector<float>()[0], (0 + 1 + 4 + 5) / 4.f);
  EXPECT_EQ(ops::global_avg_pool_forward(x).to_vector<float>(), (std::vector<float>{7.5}));
}

TEST(Ops, NormalisationForward) {
  Tensor x = rnd({4, 3, 2, 2}, 7);
  Tensor g = Tensor::ones({3}), b = Tensor::zeros({3}), rm = Tensor::zeros({3}),
         rv = Tensor::ones({3});
  Tensor mean, invstd;
  Tensor y = ops::batch_norm_train(x, g, b, rm, rv, 0.1f, 1e-5f, mean, invstd);
  // Each channel of y has mean 0 and (biased) variance ~1.
  Tensor ym = ops::mean(y, {0, 2, 3});
  Tensor y2 = ops::mean(ops::mul(y, y), {0, 2, 3});
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(ym.to_vector<float>()[c], 0, 1e-5);
    EXPECT_NEAR(y2.to_vector<float>()[c], 1, 1e-3);
    EXPECT_NEAR(rm.to_vector<float>()[c], 0.1f * mean.to_vector<float>()[c], 1e-6);
  }
  Tensor lm, lr;
  Tensor l =
      ops::layer_norm_forward(rnd({5, 8}, 8), Tensor::ones({8}), Tensor::zeros({8}), 1e-5f, lm, lr);
  Tensor lmean = ops::mean(l, {1});
  for (float v : lmean.to_vector<float>()) EXPECT_NEAR(v, 0, 1e-5);
}

// The fused batch-norm + ReLU and add + ReLU give the bits of their pairs of ops, forward and
// backward, NaN, zeros and infinities included (ReLU's rule: v > 0 ? v : 0), at 1 and 2 threads.
TEST(Ops, FusedReluOpsEqualTheirPairs) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  auto with_specials = [&](Tensor t) {
    float* p = t.data<float>();
    p[1] = nan, p[5] = 0.f, p[6] = -0.f, p[9] = inf, p[10] = -inf;
    return t;
  };
  auto bits = [](const Tensor& t) {
    std::vector<uint32_t> v(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), t.data<float>(), v.size() * 4);
    return v;
  };
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Shape& s : {Shape{6, 5, 4, 3}, Shape{2, 3, 7, 7}, Shape{9, 4}}) {
      const std::string what = shape_str(s) + " threads " + std::to_string(threads);
      const int64_t c = s[1];
      const Tensor x = rnd(s, 11), gamma = rnd({c}, 12), beta = rnd({c}, 13),
                   dy = with_specials(rnd(s, 14));
      Tensor rm = rnd({c}, 15), rv = Tensor::full({c}, 1.5f), rm2 = rm.clone(), rv2 = rv.clone();
      Tensor mean, invstd, mean2, invstd2;
      const Tensor pair =
          ops::relu(ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1f, 1e-5f, mean, invstd));
      const Tensor fused =
          ops::batch_norm_relu_train(x, gamma, beta, rm2, rv2, 0.1f, 1e-5f, mean2, invstd2);
      EXPECT_EQ(bits(fused), bits(pair)) << what;
      EXPECT_EQ(bits(mean2), bits(mean)) << what;
      EXPECT_EQ(bits(invstd2), bits(invstd)) << what;
      EXPECT_EQ(bits(rm2), bits(rm)) << what;
      EXPECT_EQ(bits(rv2), bits(rv)) << what;
      const auto gp =
          ops::batch_norm_backward(ops::relu_backward(dy, pair), x, gamma, mean, invstd);
      const auto gf = ops::batch_norm_relu_backward(dy, fused, x, gamma, mean2, invstd2);
      EXPECT_EQ(bits(gf.dx), bits(gp.dx)) << what;
      EXPECT_EQ(bits(gf.dgamma), bits(gp.dgamma)) << what;
      EXPECT_EQ(bits(gf.dbeta), bits(gp.dbeta)) << what;
      const Tensor a = with_specials(rnd(s, 16)), b = rnd(s, 17);
      EXPECT_EQ(bits(ops::add_relu(a, b)), bits(ops::relu(ops::add(a, b)))) << what;
      // With a residual: relu(batch_norm + residual) in the normalising pass, the same bits as
      // add_relu after batch_norm_train, and the same statistics.
      Tensor rm3 = rnd({c}, 15), rv3 = Tensor::full({c}, 1.5f), mean3, invstd3;
      const Tensor tail =
          ops::batch_norm_relu_train(x, gamma, beta, rm3, rv3, 0.1f, 1e-5f, mean3, invstd3, b);
      Tensor rm4 = rnd({c}, 15), rv4 = Tensor::full({c}, 1.5f), mean4, invstd4;
      const Tensor tail_pair = ops::add_relu(
          ops::batch_norm_train(x, gamma, beta, rm4, rv4, 0.1f, 1e-5f, mean4, invstd4), b);
      EXPECT_EQ(bits(tail), bits(tail_pair)) << what;
      EXPECT_EQ(bits(mean3), bits(mean4)) << what;
      EXPECT_EQ(bits(invstd3), bits(invstd4)) << what;
      EXPECT_EQ(bits(rm3), bits(rm4)) << what;
      EXPECT_EQ(bits(rv3), bits(rv4)) << what;
    }
  }
  set_num_threads(0);
  Tensor m, v;
  EXPECT_THROW(ops::add_relu(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})), ShapeError);
  EXPECT_THROW(
      ops::batch_norm_relu_train(Tensor::zeros({4, 2}), Tensor::ones({2}), Tensor::zeros({2}), m, v,
                                 0.1f, 1e-5f, m, v, Tensor::zeros({2, 4})),
      ShapeError);
  EXPECT_THROW(ops::batch_norm_relu_backward(Tensor::zeros({4, 2}), Tensor::zeros({4, 3}),
                                             Tensor::zeros({4, 2}), Tensor::ones({2}),
                                             Tensor::zeros({2}), Tensor::ones({2})),
               ShapeError);
}

TEST(Ops, SoftmaxAndCrossEntropyValues) {
  Tensor s = ops::softmax(rnd({3, 5}, 9));
  for (float v : ops::sum(s, {1}).to_vector<float>()) EXPECT_NEAR(v, 1, 1e-6);
  Tensor logits = Tensor::zeros({2, 4});
  Tensor t = Tensor::from_vector<int64_t>({1, 3}, {2});
  Tensor logp;
  EXPECT_NEAR(ops::cross_entropy_forward(logits, t, 0.f, -100, logp).item(), std::log(4.0), 1e-6);
  // Large logits stay finite (max subtraction).
  Tensor big = Tensor::from_vector<float>({1000, 0, -1000, 0}, {2, 2});
  Tensor t2 = Tensor::from_vector<int64_t>({1, 0}, {2});  // both rows 1000 below their max
  EXPECT_NEAR(ops::cross_entropy_forward(big, t2, 0.f, -100, logp).item(), 1000.0, 1e-3);
  // All rows ignored: loss 0 and zero gradient rather than NaN.
  Tensor ign = Tensor::from_vector<int64_t>({-100, -100}, {2});
  EXPECT_EQ(ops::cross_entropy_forward(logits, ign, 0.1f, -100, logp).item(), 0.f);
  for (float v : ops::cross_entropy_backward(1.f, logp, ign, 0.1f, -100).to_vector<float>())
    EXPECT_EQ(v, 0.f);
  // The loss's gradient given as a one-element tensor (what autograd passes) scales the same.
  ops::cross_entropy_forward(big, t2, 0.1f, -100, logp);
  EXPECT_EQ(
      ops::cross_entropy_backward(Tensor::full({}, 2.5), logp, t2, 0.1f, -100).to_vector<float>(),
      ops::cross_entropy_backward(2.5f, logp, t2, 0.1f, -100).to_vector<float>());
  const std::vector<float> unit =
      ops::cross_entropy_backward(1.f, logp, t2, 0.1f, -100).to_vector<float>();
  const std::vector<float> scaled =
      ops::cross_entropy_backward(Tensor::full({1}, 4.0), logp, t2, 0.1f, -100).to_vector<float>();
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_FLOAT_EQ(scaled[i], 4.f * unit[i]);
}

// The first largest value per row, NaNs passed over, a NaN first value giving 0 (the scan that
// count_correct did on the host before the op existed).
TEST(Ops, ArgmaxRows) {
  const float nan = NAN, inf = INFINITY;
  const Tensor x = Tensor::from_vector<float>({1,    3,    3,    2,     // tie: the first
                                               nan,  5,    9,    1,     // NaN first: 0
                                               0,    nan,  -1,   0.5f,  // NaN inside: passed over
                                               -inf, -inf, -inf, -inf, 2, 2, 2, 7},
                                              {5, 4});
  EXPECT_EQ(ops::argmax_rows(x).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 3, 0, 3}));
  EXPECT_EQ(ops::argmax_rows(Tensor::zeros({0, 3})).shape(), (Shape{0}));
  EXPECT_THROW(ops::argmax_rows(Tensor::zeros({2, 0})), ShapeError);
  EXPECT_THROW(ops::argmax_rows(Tensor::zeros({4})), ShapeError);
}

TEST(Ops, ReductionsAndDoubleAccumulation) {
  Tensor x = Tensor::arange(0, 24).reshape({2, 3, 4});
  EXPECT_EQ(ops::sum(x, {1}).shape(), (Shape{2, 4}));
  EXPECT_EQ(ops::sum(x, {1}).to_vector<float>()[0], 0 + 4 + 8);
  EXPECT_EQ(ops::sum(x, {0, 2}, true).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(ops::sum(x, {0, 2}).to_vector<float>(), (std::vector<float>{60, 92, 124}));
  EXPECT_EQ(ops::sum_all(x), 276.0);
  // 1e8 + many small values: float accumulation would lose them, double keeps them.
  std::vector<float> v(100001, 1.f);
  v[0] = 1e8f;
  Tensor big = Tensor::from_vector<float>(v, {100001});
  EXPECT_EQ(ops::norm2_sq(Tensor::from_vector<float>({3, 4}, {2})), 25.0);
  EXPECT_EQ(ops::dot(big, Tensor::ones({100001})), 1e8 + 100000.0);
  EXPECT_TRUE(ops::all_finite(big));
  v[5] = NAN;
  EXPECT_FALSE(ops::all_finite(Tensor::from_vector<float>(v, {100001})));
}

TEST(Ops, AllFiniteAndScaleOverAListSkipUndefinedTensors) {
  Tensor a = Tensor::from_vector<float>({1, -2}, {2}), b = Tensor::full({5}, 3.f);
  EXPECT_TRUE(ops::all_finite(std::vector<Tensor>{}));
  EXPECT_TRUE(ops::all_finite({a, Tensor(), b}));
  ops::scale_({a, Tensor(), b}, 0.5f);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0.5f, -1.f}));
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(5, 1.5f));
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    b.data<float>()[4] = bad;
    EXPECT_FALSE(ops::all_finite({a, Tensor(), b})) << bad;
  }
}

// The fused attention softmax is, bit for bit, the composition it replaces: scale, the key bias
// broadcast over heads and queries, softmax; and its backward softmax_backward then scale.
TEST(Ops, AttentionSoftmaxEqualsTheCompositionBitForBit) {
  Generator g(11);
  const int64_t b = 3, heads = 2, sq = 5, sk = 37;
  const float scale = 0.125f;
  Tensor scores = Tensor::randn({b * heads, sq, sk}, g, 0.f, 3.f);
  Tensor bias = Tensor::zeros({b, sk});
  for (int64_t j = 30; j < sk; ++j) bias.data<float>()[1 * sk + j] = -10000.f;  // padded keys
  Tensor full = Tensor::empty({b * heads, sq, sk});
  for (int64_t r = 0; r < b * heads * sq; ++r)
    for (int64_t j = 0; j < sk; ++j)
      full.data<float>()[r * sk + j] = bias.data<float>()[(r / (heads * sq)) * sk + j];
  auto same = [](const Tensor& x, const Tensor& y) {
    return x.shape() == y.shape() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
  };
  const Tensor y = ops::attention_softmax(scores, bias, heads, scale);
  EXPECT_TRUE(same(y, ops::softmax(ops::add(ops::scale(scores, scale), full))));
  EXPECT_TRUE(same(ops::attention_softmax(scores, Tensor(), heads, scale),
                   ops::softmax(ops::scale(scores, scale))));
  const Tensor dy = Tensor::randn(y.shape(), g);
  EXPECT_TRUE(same(ops::attention_softmax_backward(dy, y, scale),
                   ops::scale(ops::softmax_backward(dy, y), scale)));
  // Padded keys get no probability; a bias of another batch's shape is refused.
  EXPECT_EQ(y.data<float>()[(1 * heads * sq) * sk + 31], 0.f);
  EXPECT_THROW(ops::attention_softmax(scores, Tensor::zeros({b, sk + 1}), heads, scale),
               ShapeError);
  EXPECT_THROW(ops::attention_softmax(scores, bias, 4, scale), ShapeError);
}

// On the CPU an operand stays f32 in every precision (the GEMM rounds while packing): the tensor
// itself, so autograd keeps what it kept before.
TEST(Ops, MatmulOperandOnTheCpuIsTheTensorItself) {
  const Tensor x = Tensor::ones({3, 4});
  EXPECT_EQ(ops::matmul_operand(x).raw_data(), x.raw_data());
  if (cpu::bf16_available()) {
    set_cpu_matmul_precision(Precision::bf16);
    EXPECT_EQ(ops::matmul_operand(x).raw_data(), x.raw_data());
    set_cpu_matmul_precision(Precision::fp32);
  }
}

TEST(Ops, PermuteMatchesIndexing) {
  Tensor x = Tensor::arange(0, 24).reshape({2, 3, 4});
  Tensor y = ops::permute(x, {2, 0, 1});
  ASSERT_EQ(y.shape(), (Shape{4, 2, 3}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(y.data<float>()[(k * 2 + i) * 3 + j], x.data<float>()[(i * 3 + j) * 4 + k]);
}

// Calls f(level, precision) with the CPU kernels at every ISA level this CPU runs and in each
// matrix-product precision it has (bf16 where AVX512_BF16 is), restoring both after.
template <class F>
void for_each_cpu_gemm_mode(F f) {
  const cpu::Isa saved = cpu::isa();
  for (cpu::Isa level : {cpu::Isa::generic, cpu::Isa::avx2, cpu::Isa::avx512}) {
    if (level > cpu::detected_isa()) continue;
    cpu::set_isa(level);
    for (Precision prec : {Precision::fp32, Precision::bf16}) {
      if (prec == Precision::bf16 && !cpu::bf16_available()) continue;
      set_cpu_matmul_precision(prec);
      f(std::string(cpu::isa_name(level)) + " " + precision_name(prec));
      set_cpu_matmul_precision(Precision::fp32);
    }
  }
  cpu::set_isa(saved);
}

// ops::linear on the CPU (the bias added inside the GEMM) gives the bits of matmul then add_bias,
// on every ISA level and in the bf16 matrix-product mode where the CPU has it; a bias that does
// not match the weight is refused.
TEST(Ops, LinearHasTheBitsOfMatmulThenAddBias) {
  Generator g(3);
  for_each_cpu_gemm_mode([&](const std::string& mode) {
    for (auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1}, {37, 30, 129}, {640, 300, 128}}) {
      const Tensor x = Tensor::randn({m, k}, g), w = Tensor::randn({n, k}, g),
                   b = Tensor::randn({n}, g);
      EXPECT_EQ(ops::linear(x, w, b).to_vector<float>(),
                ops::add_bias(ops::matmul(x, w, false, true), b).to_vector<float>())
          << mode << " " << m << "x" << n << "x" << k;
    }
  });
  EXPECT_THROW(ops::linear(Tensor::ones({2, 3}), Tensor::ones({4, 3}), Tensor::ones({3})),
               ShapeError);
}

// ops::linear_weight_grad on the CPU (the bias gradient summed as the weight gradient's GEMM packs
// dy) gives the bits of matmul and bias_grad, on every ISA level, fp32 and bf16 products, 1-2
// threads.
TEST(Ops, LinearWeightGradHasTheBitsOfMatmulAndBiasGrad) {
  const int saved_threads = num_threads();
  Generator g(4);
  for_each_cpu_gemm_mode([&](const std::string& mode) {
    for (int threads : {1, 2})
      for (auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1}, {37, 30, 129}, {640, 300, 128}}) {
        set_num_threads(threads);
        const Tensor dy = Tensor::randn({m, n}, g), x = Tensor::randn({m, k}, g);
        Tensor dw, db;
        ops::linear_weight_grad(dy, x, DType::f32, dw, db);
        const std::string what = mode + " threads " + std::to_string(threads);
        EXPECT_EQ(dw.shape(), (Shape{n, k})) << what;
        EXPECT_EQ(dw.to_vector<float>(), ops::matmul(dy, x, true, false).to_vector<float>())
            << what;
        EXPECT_EQ(db.to_vector<float>(), ops::bias_grad(dy).to_vector<float>()) << what;
      }
  });
  set_num_threads(saved_threads);
}

// dropout_apply is dropout_forward's output without the mask kept, and on a gradient its
// backward, bit for bit; fn::dropout's backward regenerates that mask.
TEST(Ops, DropoutApplyIsTheStoredMasksProduct) {
  Generator g(9, 5);
  const Tensor x = Tensor::randn({3, 1001}, g), dy = Tensor::randn({3, 1001}, g);
  Generator gen(21, 77);
  Tensor mask;
  const Tensor y = ops::dropout_forward(x, 0.3f, gen, mask);
  EXPECT_EQ(ops::dropout_apply(x, 0.3f, 21, 77).to_vector<float>(), y.to_vector<float>());
  const std::vector<float> want = ops::dropout_backward(dy, mask).to_vector<float>();
  EXPECT_EQ(ops::dropout_apply(dy, 0.3f, 21, 77).to_vector<float>(), want);
  Generator fgen(21, 77);
  Variable vx(x, true);
  Variable vy = fn::dropout(vx, 0.3f, true, fgen);
  EXPECT_EQ(vy.value().to_vector<float>(), y.to_vector<float>());
  EXPECT_EQ(fgen.offset(), gen.offset());
  backward(vy, dy);
  EXPECT_EQ(vx.grad().to_vector<float>(), want);
}

// Every dropout multiplier is the Philox stream's (core/philox.h: element i takes word i % 4 of
// block first + i / 4), bit for bit, on every ISA level this CPU runs (the AVX-512 kernel takes
// 16 blocks a vector and carries the counter's low word into its high word itself): counters that
// cross 2^32 and 2^64 inside a vector, starts and lengths off the vector, each of dropout_blocks'
// modes (y and mask, y alone, mask alone: the fused attention's), and x with -1, infinities and
// NaN (y is x * m as written, so -1 * 0 is -0 and NaN stays NaN).
TEST(Ops, DropoutMultipliersAreThePhiloxStreamOnEveryIsa) {
  const cpu::Isa saved = cpu::isa();
  const float p = 0.3f, scale = 1.f / (1.f - p);
  auto bits = [](float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
  };
  const uint64_t firsts[] = {0, 77, (uint64_t(1) << 32) - 21, ~uint64_t(0) - 40};
  const uint64_t seeds[] = {21, 0xFEDCBA9876543210ull};
  const int64_t blocks_list[] = {1, 15, 16, 17, 40, 263};
  for (cpu::Isa level : {cpu::Isa::generic, cpu::Isa::avx2, cpu::Isa::avx512}) {
    if (level > cpu::detected_isa()) continue;
    cpu::set_isa(level);
    for (uint64_t first : firsts)
      for (uint64_t seed : seeds)
        for (uint64_t j0 : {uint64_t(0), uint64_t(5)})
          for (int64_t blocks : blocks_list) {
            const int64_t n = 4 * blocks;
            std::vector<float> x(n), want_m(n), want_y(n);
            for (int64_t i = 0; i < n; ++i) {
              const float specials[] = {-1.f, std::numeric_limits<float>::infinity(),
                                        std::numeric_limits<float>::quiet_NaN()};
              x[i] = i % 7 < 3 ? specials[i % 7] : 0.25f * float(i % 13) - 1.f;
              const uint64_t j = j0 + uint64_t(i / 4);
              const Uniform4 u = philox_uniform4_at(seed, first, j);
              const float w[4] = {u.u0, u.u1, u.u2, u.u3};
              want_m[i] = w[i % 4] >= p ? scale : 0.f;
              want_y[i] = x[i] * want_m[i];
            }
            std::vector<float> y(n, 7.f), m(n, 7.f), y2(n, 7.f), m2(n, 7.f);
            cpu::dropout_blocks(seed, first, j0, blocks, p, scale, x.data(), y.data(), m.data());
            cpu::dropout_blocks(seed, first, j0, blocks, p, scale, x.data(), y2.data(), nullptr);
            cpu::dropout_blocks(seed, first, j0, blocks, p, scale, nullptr, nullptr, m2.data());
            int bad = 0;
            for (int64_t i = 0; i < n && bad < 3; ++i) {
              const bool ok = bits(y[i]) == bits(want_y[i]) && bits(m[i]) == bits(want_m[i]) &&
                              bits(y2[i]) == bits(want_y[i]) && bits(m2[i]) == bits(want_m[i]);
              if (!ok)
                ADD_FAILURE() << cpu::isa_name(level) << " first " << first << " seed " << seed
                              << " j0 " << j0 << " blocks " << blocks << " element " << i << ": y "
                              << y[i] << " / " << y2[i] << " mask " << m[i] << " / " << m2[i]
                              << ", want " << want_y[i] << " and " << want_m[i];
              bad += !ok;
            }
          }
  }
  cpu::set_isa(saved);
}

TEST(Ops, DropoutIsSeededAndThreadIndependent) {
  Tensor x = Tensor::ones({50000});
  Tensor m1, m2;
  set_num_threads(1);
  Generator g1(5);
  Tensor y1 = ops::dropout_forward(x, 0.25f, g1, m1);
  set_num_threads(2);
  Generator g2(5);
  Tensor y2 = ops::dropout_forward(x, 0.25f, g2, m2);
  set_num_threads(0);
  EXPECT_EQ(y1.to_vector<float>(), y2.to_vector<float>());
  double kept = 0;
  for (float v : y1.to_vector<float>()) {
    ASSERT_TRUE(v == 0.f || std::fabs(v - 1.f / 0.75f) < 1e-6);
    kept += v != 0.f;
  }
  EXPECT_NEAR(kept / 50000, 0.75, 0.01);
  EXPECT_THROW(ops::dropout_forward(x, 1.f, g1, m1), ShapeError);
}

TEST(Ops, EmbeddingGatherAndScatter) {
  Tensor w = Tensor::arange(0, 6).reshape({3, 2});
  Tensor ids = Tensor::from_vector<int32_t>({2, 0, 2}, {3});
  EXPECT_EQ(ops::embedding_forward(w, ids).to_vector<float>(),
            (std::vector<float>{4, 5, 0, 1, 4, 5}));
  Tensor dw = Tensor::zeros({3, 2});
  ops::embedding_backward(Tensor::ones({3, 2}), ids, dw);
  EXPECT_EQ(dw.to_vector<float>(), (std::vector<float>{1, 1, 0, 0, 2, 2}));
  try {
    ops::embedding_forward(w, Tensor::from_vector<int64_t>({3}, {1}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary [0, 3)"), std::string::npos)
        << e.what();
  }
}

// cuDNN's batch norm (the ADA_CUDA_BN_CUDNN=1 A/B, tests/cuda for its values) takes CUDA tensors
// only: on CPU tensors it does not fit, and asked anyway it says which op to use.
TEST(Ops, CudnnBatchNormRefusesCpuTensors) {
  const Tensor x = Tensor::ones({8, 4}), g = Tensor::ones({4}), b = Tensor::zeros({4});
  Tensor rm = Tensor::zeros({4}), rv = Tensor::ones({4});
  EXPECT_FALSE(ops::cudnn_batch_norm_fits(x, 1e-5f));
  EXPECT_NE(error_of<DeviceError>(
                [&] { ops::cudnn_batch_norm_train(x, g, b, rm, rv, 0.1f, 1e-5f, true); })
                .find("cudnn_batch_norm_train: cuDNN's batch norm takes CUDA tensors, got f32[8,4] "
                      "cpu; use batch_norm_train"),
            std::string::npos);
  EXPECT_NE(error_of<DeviceError>([&] {
              ops::cudnn_batch_norm_backward(x, x, g, b, ops::CudnnBatchNorm{}, 1e-5f);
            }).find("use batch_norm_backward"),
            std::string::npos);
}

TEST(Ops, BadArgumentsGiveClearErrors) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2});
  EXPECT_NE(error_of<Error>([&] { ops::add(a, b); }).find("add: shapes differ: [2,3] vs [3,2]"),
            std::string::npos);
  EXPECT_THROW(ops::matmul(a, a), ShapeError);
  EXPECT_NE(error_of<Error>([&] { ops::matmul(a, a); }).find("inner dimensions differ"),
            std::string::npos);
  Tensor i = Tensor::zeros({2, 3}, DType::i32);
  EXPECT_THROW(ops::relu(i), DTypeError);
  EXPECT_NE(error_of<Error>([&] { ops::relu(i); }).find("relu: expected f32, got i32[2,3]"),
            std::string::npos);
  EXPECT_THROW(ops::relu(Tensor()), ShapeError);
  Tensor x = Tensor::zeros({1, 3, 5, 5}), w = Tensor::zeros({4, 2, 3, 3});
  EXPECT_NE(
      error_of<Error>([&] { ops::conv2d_forward(x, w, {}); }).find("expects 2 input channels"),
      std::string::npos);
  EXPECT_THROW(ops::conv2d_forward(Tensor::zeros({3, 5, 5}), w, {}), ShapeError);
  Tensor big_w = Tensor::zeros({1, 3, 7, 7});
  EXPECT_NE(error_of<Error>([&] {
              ops::conv2d_forward(x, big_w, {});
            }).find("larger than the padded input"),
            std::string::npos);
  EXPECT_THROW(ops::cross_entropy_forward(Tensor::zeros({2, 3}), Tensor::zeros({2}), 0.f, -100, a),
               DTypeError);
  // The backward alone with a target outside the classes: refused, nothing written out of bounds.
  EXPECT_THROW(ops::cross_entropy_backward(1.f, Tensor::zeros({2, 3}),
                                           Tensor::from_vector<int64_t>({1, 3}, {2}), 0.f, -100),
               ShapeError);
  // The loss's gradient as a tensor: one f32 value, else refused.
  const Tensor lp23 = Tensor::zeros({2, 3}), t01 = Tensor::from_vector<int64_t>({0, 1}, {2});
  EXPECT_THROW(ops::cross_entropy_backward(Tensor::ones({2}), lp23, t01, 0.f, -100), ShapeError);
  EXPECT_THROW(ops::cross_entropy_backward(Tensor(), lp23, t01, 0.f, -100), ShapeError);
  EXPECT_THROW(ops::cross_entropy_backward(Tensor::ones({}, DType::i32), lp23, t01, 0.f, -100),
               DTypeError);
  // A logit gradient of an integer dtype: refused on every backend.
  EXPECT_THROW(
      ops::cross_entropy_backward(1.f, Tensor::zeros({2, 3}),
                                  Tensor::from_vector<int64_t>({1, 2}, {2}), 0.f, -100, DType::i32),
      DTypeError);
  Tensor bad_t = Tensor::from_vector<int64_t>({0, 7}, {2});
  EXPECT_NE(error_of<Error>([&] {
              Tensor lp;
              ops::cross_entropy_forward(Tensor::zeros({2, 3}), bad_t, 0.f, -100, lp);
            }).find("target 7 at row 1 is outside [0, 3)"),
            std::string::npos);
  Tensor m, v;
  EXPECT_NE(error_of<Error>([&] {
              Tensor rm, rv;
              ops::batch_norm_train(Tensor::zeros({1, 2}), Tensor::ones({2}), Tensor::zeros({2}),
                                    rm, rv, 0.1f, 1e-5f, m, v);
            }).find("more than one value per channel"),
            std::string::npos);
}

TEST(Ops, EmptyTensorsAreHandled) {
  Tensor e = Tensor::zeros({0, 4});
  EXPECT_EQ(ops::relu(e).numel(), 0);
  EXPECT_EQ(ops::add(e, e).numel(), 0);
  EXPECT_EQ(ops::sum(e, {0}).to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(ops::matmul(e, Tensor::zeros({4, 2})).shape(), (Shape{0, 2}));
  EXPECT_EQ(ops::matmul(Tensor::zeros({3, 0}), Tensor::zeros({0, 2})).to_vector<float>(),
            (std::vector<float>(6, 0.f)));
  EXPECT_EQ(
      ops::conv2d_forward(Tensor::zeros({0, 2, 5, 5}), Tensor::zeros({3, 2, 3, 3}), {}).shape(),
      (Shape{0, 3, 3, 3}));
  EXPECT_EQ(ops::softmax(e).numel(), 0);
  EXPECT_EQ(ops::dot(e, e), 0.0);
}

}  // namespace
}  // namespace ada

namespace ada {
namespace {

// Adasum's segment ops against plain loops: the triples in double (another summation order, so
// within 1e-12 of the sum of |terms|), the combine as ca*a + cb*b rounded once to f32.
TEST(Ops, SegmentPartialSumsAndCombine) {
  const Tensor a = rnd({1000}, 71), b = rnd({1000}, 72);
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  // Out of order slots, an empty segment, a one-element segment, and two pieces of slot 0.
  const std::vector<ops::Segment> segs = {
      {0, 300, 2}, {300, 0, 1}, {300, 1, 3}, {301, 400, 0}, {701, 299, 0}};
  std::vector<double> sums(12, 0.5);  // accumulated onto what is there
  ops::segment_partial_sums(a, b, segs, sums.data());
  std::vector<double> want(12, 0.5), l1(12, 0.0);
  for (const auto& s : segs)
    for (int64_t i = s.off; i < s.off + s.n; ++i) {
      const double x = av[i], y = bv[i];
      want[3 * s.slot] += x * y;
      want[3 * s.slot + 1] += x * x;
      want[3 * s.slot + 2] += y * y;
      l1[3 * s.slot] += std::fabs(x * y);
    }
  for (int k = 0; k < 12; ++k) EXPECT_NEAR(sums[k], want[k], 1e-12 * (1 + l1[k] + want[k])) << k;
  EXPECT_EQ(sums[3], 0.5) << "the empty segment adds nothing";

  const std::vector<double> coef = {0.25, -1.5, 9.0, 9.0,
                                    1.0,  0.5,  3.0, 0.0};  // slot 3: b not read
  Tensor out = Tensor::full({1000}, 42.0);
  ops::segment_combine(a, b, out, segs, coef.data());
  const std::vector<float> got = out.to_vector<float>();
  for (const auto& s : segs)
    for (int64_t i = s.off; i < s.off + s.n; ++i) {
      const double w = coef[2 * s.slot] * av[i] + coef[2 * s.slot + 1] * bv[i];
      EXPECT_NEAR(got[i], static_cast<float>(w), 2e-7 * std::fabs(w)) << i;
    }
  EXPECT_EQ(got[999], static_cast<float>(0.25 * av[999] - 1.5 * bv[999]));
  // In place into a, and a segment with cb = 0 ignores a non-finite b.
  Tensor x = a.clone();
  Tensor inf = Tensor::full({1000}, INFINITY);
  ops::segment_combine(x, inf, x, {{300, 1, 3}}, coef.data());
  EXPECT_EQ(x.to_vector<float>()[300], static_cast<float>(3.0 * av[300]));
  EXPECT_EQ(x.to_vector<float>()[0], av[0]) << "outside every segment: untouched";

  EXPECT_THROW(ops::segment_partial_sums(a, b, {{990, 11, 0}}, sums.data()), ShapeError);
  EXPECT_THROW(ops::segment_partial_sums(a, rnd({999}, 1), {}, sums.data()), ShapeError);
  EXPECT_THROW(ops::segment_combine(a, b, out, {{0, 1, -1}}, coef.data()), ShapeError);
  Tensor two_d = Tensor::zeros({10, 100});
  EXPECT_THROW(ops::segment_combine(a, b, two_d, {}, coef.data()), ShapeError);
}

}  // namespace
}  // namespace ada

namespace ada {
namespace {

uint16_t half_bits(const Tensor& t, int64_t i) {
  return t.dtype() == DType::bf16 ? t.data<BFloat16>()[i].bits : t.data<Half>()[i].bits;
}

// cast_out: round to nearest even, ties to even, the ranges' edges, NaN/Inf, exact widening.
TEST(Ops, CastRoundsToNearestEvenAndWidensExactly) {
  const float one_ulp_bf16 = std::ldexp(1.f, -7), one_ulp_f16 = std::ldexp(1.f, -10);
  const std::vector<float> x = {1.f,
                                1.f + one_ulp_bf16 / 2,      // tie: down to even (bf16)
                                1.f + 3 * one_ulp_bf16 / 2,  // tie: up to even (bf16)
                                1.f + one_ulp_f16 / 2,       // tie (f16): down
                                1.f + 3 * one_ulp_f16 / 2,   // tie (f16): up
                                -2.5f,
                                65504.f,               // f16's largest
                                65520.f,               // rounds past it: +Inf in f16
                                std::ldexp(1.f, -24),  // f16's smallest subnormal
                                1e30f,                 // bf16 has the range
                                INFINITY,
                                NAN};
  const int64_t n = static_cast<int64_t>(x.size());
  const Tensor src = Tensor::from_vector<float>(x, {n});
  Tensor b = Tensor::empty({n}, DType::bf16), h = Tensor::empty({n}, DType::f16);
  ops::cast_out(src, b);
  ops::cast_out(src, h);
  EXPECT_EQ(half_bits(b, 0), 0x3F80);
  EXPECT_EQ(half_bits(b, 1), 0x3F80);
  EXPECT_EQ(half_bits(b, 2), 0x3F82);
  EXPECT_EQ(half_bits(h, 0), 0x3C00);
  EXPECT_EQ(half_bits(h, 3), 0x3C00);
  EXPECT_EQ(half_bits(h, 4), 0x3C02);
  EXPECT_EQ(half_bits(h, 5), 0xC100);
  EXPECT_EQ(half_bits(h, 6), 0x7BFF);
  EXPECT_EQ(half_bits(h, 7), 0x7C00);
  EXPECT_EQ(half_bits(h, 8), 0x0001);
  EXPECT_EQ(half_bits(h, 9), 0x7C00);
  Tensor back_b = Tensor::empty({n}), back_h = Tensor::empty({n});
  ops::cast_out(b, back_b);
  ops::cast_out(h, back_h);
  const auto vb = back_b.to_vector<float>(), vh = back_h.to_vector<float>();
  EXPECT_EQ(vb[5], -2.5f);
  EXPECT_EQ(vh[5], -2.5f);
  EXPECT_EQ(vh[6], 65504.f);
  EXPECT_EQ(vh[8], std::ldexp(1.f, -24));
  EXPECT_NEAR(vb[9], 1e30f, 1e30f * one_ulp_bf16);
  EXPECT_TRUE(std::isinf(vb[10]) && std::isinf(vh[10]));
  EXPECT_TRUE(std::isnan(vb[11]) && std::isnan(vh[11]));
  // Random values: within half an ulp, and a second round trip changes nothing.
  Generator g(5);
  const Tensor r = Tensor::randn({10007}, g);
  for (DType t : {DType::bf16, DType::f16}) {
    Tensor narrow = Tensor::empty({10007}, t), wide = Tensor::empty({10007}),
           again = Tensor::empty({10007}, t);
    ops::cast_out(r, narrow);
    ops::cast_out(narrow, wide);
    ops::cast_out(wide, again);
    const auto rv = r.to_vector<float>(), wv = wide.to_vector<float>();
    const double ulp = t == DType::bf16 ? one_ulp_bf16 : one_ulp_f16;
    for (size_t i = 0; i < rv.size(); ++i)
      ASSERT_LE(std::fabs(wv[i] - rv[i]), 0.5 * ulp * std::fabs(rv[i]) + 1e-7)
          << dtype_name(t) << " at " << i;
    for (int64_t i = 0; i < 10007; ++i)
      ASSERT_EQ(half_bits(narrow, i), half_bits(again, i)) << dtype_name(t);
  }
  Tensor copy = Tensor::empty({n});
  ops::cast_out(src, copy);
  EXPECT_EQ(copy.to_vector<float>()[2], x[2]);
}

// The software f16 conversion (builds whose compiler lacks _Float16, e.g. the fuzzing build's
// clang) gives the hardware's bits: every f16 widened, and f32 bit patterns around every f16
// value, tie and range edge, plus random ones, narrowed.
TEST(Ops, SoftwareF16ConversionMatchesTheCompilers) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = half::f16_to_float_soft(static_cast<uint16_t>(h)),
                b = half::f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      ASSERT_TRUE(std::isnan(a)) << h;
      continue;
    }
    ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << "f16 " << h;
  }
  auto narrow_same = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    const uint16_t a = half::f16_from_float_soft(f), b = half::f16_from_float(f);
    if (std::isnan(f))
      return (a & 0x7C00u) == 0x7C00u && (a & 0x3FFu) != 0 && (b & 0x7C00u) == 0x7C00u;
    return a == b;
  };
  for (uint32_t h = 0; h < 65536; ++h) {  // each f16 value, its ties and neighbours, as f32
    const float v = half::f16_to_float_soft(static_cast<uint16_t>(h));
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    for (int64_t d : {-4097, -4096, -4095, -1, 0, 1, 4095, 4096, 4097})
      ASSERT_TRUE(narrow_same(static_cast<uint32_t>(static_cast<int64_t>(bits) + d)))
          << "near f16 " << h << " d " << d;
  }
  uint64_t s = 88172645463325252ull;
  for (int i = 0; i < 2000000; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    ASSERT_TRUE(narrow_same(static_cast<uint32_t>(s))) << std::hex << static_cast<uint32_t>(s);
  }
}

TEST(Ops, CastRejectsOtherTypesAndCounts) {
  const Tensor f = Tensor::zeros({4});
  Tensor i = Tensor::zeros({4}, DType::i64), h3 = Tensor::empty({3}, DType::f16),
         h4 = Tensor::empty({4}, DType::f16);
  EXPECT_THROW(ops::cast_out(f, i), DTypeError);
  EXPECT_THROW(ops::cast_out(f, h3), ShapeError);
  Tensor b4 = Tensor::empty({4}, DType::bf16);
  EXPECT_THROW(ops::cast_out(h4, b4), DTypeError);  // half to half: not a conversion we make
}

}  // namespace
}  // namespace ada
