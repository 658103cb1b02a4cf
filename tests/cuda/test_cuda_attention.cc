// The CUDA fused attention (core/backend/cuda/attention.cu) against the double-precision
// reference of the composition (tests/util/attention_ref.h, the bound of sum_bound.h): every head
// size it takes, query and key counts across and inside its 64-row tiles (odd key counts take the
// element-wise dropout path), the padding bias, dropout with the CPU's masks; the same bits on a
// second run and from inputs that are not 16-byte aligned (tiles loaded an element at a time); head
// sizes it does not take refused by name; 16-bit tensors on the tensor-core kernels bit for bit the
// f32 path rounded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "core/ops.h"
#include "core/precision.h"
#include "cuda/cuda_test_util.h"
#include "tests/util/attention_ref.h"

namespace ada {
namespace {

using ::ada::testing::attention_reference;
using ::ada::testing::expect_within_sum_bound;
using ::ada::testing::gpu;
using ::ada::testing::rand_cpu;

struct Case {
  int64_t b, heads, sq, sk, d;
  bool bias;
  float dropout;
};

std::vector<float> host(const Tensor& t) {
  return t.to(Device::cpu()).to_vector<float>();
}

// t's values (on the GPU) one element into a device buffer of its dtype: data that is not 16-byte
// aligned, which the kernels load an element at a time instead of 16 bytes at a time.
Tensor misaligned(const Tensor& t) {
  Tensor view =
      Tensor::zeros({t.numel() + 1}, t.dtype(), t.device()).narrow(1, t.numel()).reshape(t.shape());
  view.copy_from(t);
  return view;
}

// "b2 heads 3 q5 k7 d32 bias dropout 0.25", for traces.
std::string describe(const Case& c) {
  std::ostringstream s;
  s << "b" << c.b << " heads " << c.heads << " q" << c.sq << " k" << c.sk << " d" << c.d
    << (c.bias ? " bias" : "") << " dropout " << c.dropout;
  return s.str();
}

// Runs one case on the GPU against the double-precision reference; `factor` scales the sum
// bound (kSumBoundFactor for fp32 kernels). Also checks that a second run gives the same bits.
void check_case(const Case& c, double factor) {
  SCOPED_TRACE(describe(c));
  const int64_t bh = c.b * c.heads, e = c.heads * c.d;
  const Tensor q = rand_cpu({c.b, c.sq, e}, 501), k = rand_cpu({c.b, c.sk, e}, 502),
               v = rand_cpu({c.b, c.sk, e}, 503), dout = rand_cpu({c.b, c.sq, e}, 504);
  // The reference's layout, [B*heads, S, D], from the op's [B, S, heads*D].
  auto split = [&](const Tensor& t) {
    return ops::permute(t.reshape({t.size(0), t.size(1), c.heads, c.d}), {0, 2, 1, 3})
        .reshape({bh, t.size(1), c.d});
  };
  auto host_split = [&](const Tensor& t) { return split(t.to(Device::cpu())).to_vector<float>(); };
  Tensor bias;
  if (c.bias) {
    bias = Tensor::zeros({c.b, c.sk});
    for (int64_t e = 0; e < c.b; ++e)
      for (int64_t j = std::max<int64_t>(1, c.sk - 3 * e); j < c.sk; ++j)
        bias.data<float>()[e * c.sk + j] = -10000.f;
  }
  ops::AttentionArgs a;
  a.heads = c.heads;
  a.scale = 1.f / std::sqrt(static_cast<float>(c.d));
  a.dropout = c.dropout;
  a.seed = 7;
  a.first = 4096 + 2;  // not a multiple of 4: the stream need not start on a block
  Tensor mask = Tensor::ones({bh, c.sq, c.sk});
  if (c.dropout > 0.f) {
    Generator mg(a.seed, a.first);
    ops::dropout_forward(Tensor::ones(mask.shape()), c.dropout, mg, mask);
  }
  const auto ref =
      attention_reference(split(q), split(k), split(v), bias, mask, c.heads, a.scale, split(dout));
  const Tensor gq = q.to(gpu()), gk = k.to(gpu()), gv = v.to(gpu()), gdout = dout.to(gpu()),
               gbias = c.bias ? bias.to(gpu()) : Tensor();
  Tensor lse;
  const Tensor out = ops::fused_attention(gq, gk, gv, gbias, a, lse);
  ASSERT_FALSE(out.device().is_cpu());
  expect_within_sum_bound(host_split(out), ref.out, "out", factor);
  const auto g = ops::fused_attention_backward(gdout, gq, gk, gv, out, lse, gbias, a);
  expect_within_sum_bound(host_split(g.dq), ref.dq, "dq", factor);
  expect_within_sum_bound(host_split(g.dk), ref.dk, "dk", factor);
  expect_within_sum_bound(host_split(g.dv), ref.dv, "dv", factor);
  // Fixed summation orders, no atomics: a second run gives the same bits.
  Tensor lse2;
  const Tensor out2 = ops::fused_attention(gq, gk, gv, gbias, a, lse2);
  const auto g2 = ops::fused_attention_backward(gdout, gq, gk, gv, out2, lse2, gbias, a);
  EXPECT_EQ(host(out2), host(out));
  EXPECT_EQ(host(g2.dq), host(g.dq));
  EXPECT_EQ(host(g2.dk), host(g.dk));
  EXPECT_EQ(host(g2.dv), host(g.dv));
  // Inputs that are not 16-byte aligned: the element-wise tile loads, the same bits.
  const Tensor mq = misaligned(gq), mk = misaligned(gk), mv = misaligned(gv);
  ASSERT_NE(reinterpret_cast<uintptr_t>(mq.raw_data()) % 16, 0u);
  Tensor lse3;
  const Tensor out3 = ops::fused_attention(mq, mk, mv, gbias, a, lse3);
  const auto g3 =
      ops::fused_attention_backward(misaligned(gdout), mq, mk, mv, out3, lse3, gbias, a);
  EXPECT_EQ(host(out3), host(out));
  EXPECT_EQ(host(g3.dq), host(g.dq));
  EXPECT_EQ(host(g3.dk), host(g.dk));
  EXPECT_EQ(host(g3.dv), host(g.dv));
}

const Case kCases[] = {
    {2, 3, 5, 7, 32, true, 0.f},      {2, 3, 5, 7, 64, true, 0.25f},
    {1, 2, 70, 131, 64, true, 0.1f},  {3, 1, 64, 64, 128, false, 0.f},
    {1, 2, 130, 66, 128, true, 0.1f}, {2, 2, 1, 1, 32, true, 0.f},
    {2, 4, 128, 128, 64, true, 0.1f}, {1, 2, 200, 37, 64, false, 0.5f},
};

TEST(CudaAttention, FusedAttentionMatchesTheDoubleReference) {
  ADA_REQUIRE_GPU();
  for (const Case& c : kCases) check_case(c, ::ada::testing::kSumBoundFactor);
}

// Under bf16 / fp16 matrix products the tensor-core kernels run (attention_tc.cu): every rounding
// of the fp32 analysis is at most a 16-bit rounding, so the same derived bound holds with the
// 16-bit type's epsilon (bf16 2^-7, fp16 2^-10) in place of fp32's 2^-23.
TEST(CudaAttention, FusedAttentionOnTensorCoresMatchesTheDoubleReference) {
  ADA_REQUIRE_GPU();
  struct Restore {
    ~Restore() { set_cuda_matmul_precision(Precision::fp32); }
  } restore;
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    SCOPED_TRACE(precision_name(p));
    set_cuda_matmul_precision(p);
    const double eps16 = p == Precision::bf16 ? 0x1p-7 : 0x1p-10;
    for (const Case& c : kCases) check_case(c, ::ada::testing::kSumBoundFactor * eps16 / 0x1p-23);
  }
}

TEST(CudaAttention, FusedAttentionRefusesHeadSizesItDoesNotTake) {
  ADA_REQUIRE_GPU();
  const Tensor q = rand_cpu({2, 4, 96}, 1).to(gpu());
  ops::AttentionArgs a;
  a.heads = 2;  // head size 48
  Tensor lse;
  try {
    ops::fused_attention(q, q, q, Tensor(), a, lse);
    FAIL() << "head size 48 accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("head sizes 32, 64 and 128, got 48"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("model.attention: composed"), std::string::npos)
        << e.what();
  }
}

// Under 16-bit activations the tensor-core kernels read bf16 / fp16 q, k, v, dout and out as they
// are and write out, dq, dk and dv in that type: bit for bit the f32 path on the same values
// widened to f32 (which rounds them to the same 16 bits as it loads them, and reads the stored
// out), its outputs rounded once; the log-normaliser is the same f32 either way. No f32 copies.
TEST(CudaAttention, SixteenBitTensorsOnTensorCoresAreTheF32PathRounded) {
  ADA_REQUIRE_GPU();
  struct Restore {
    ~Restore() { set_cuda_matmul_precision(Precision::fp32); }
  } restore;
  auto bits = [](const Tensor& t) {
    const Tensor h = t.to(Device::cpu());
    const auto* p = static_cast<const unsigned char*>(h.raw_data());
    return std::vector<unsigned char>(p, p + h.nbytes());
  };
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    const DType act = p == Precision::bf16 ? DType::bf16 : DType::f16;
    set_cuda_matmul_precision(p);
    for (const Case& c : kCases) {
      SCOPED_TRACE(std::string(precision_name(p)) + " " + describe(c));
      const int64_t e = c.heads * c.d;
      auto rand16 = [&](Shape s, uint64_t seed) {
        return ops::to_dtype(rand_cpu(std::move(s), seed), act).to(gpu());
      };
      const Tensor q = rand16({c.b, c.sq, e}, 601), k = rand16({c.b, c.sk, e}, 602),
                   v = rand16({c.b, c.sk, e}, 603), dout = rand16({c.b, c.sq, e}, 604);
      Tensor bias;
      if (c.bias) {
        bias = Tensor::zeros({c.b, c.sk});
        bias.data<float>()[c.sk - 1] = -10000.f;
        bias = bias.to(gpu());
      }
      ops::AttentionArgs a;
      a.heads = c.heads;
      a.scale = 1.f / std::sqrt(static_cast<float>(c.d));
      a.dropout = c.dropout;
      a.seed = 11;
      a.first = 4096 + 1;
      auto wide = [](const Tensor& t) { return ops::to_dtype(t, DType::f32); };
      const int64_t copies = ops::sixteen_bit_copies();
      Tensor lse16, lse32;
      const Tensor out = ops::fused_attention(q, k, v, bias, a, lse16);
      const auto g = ops::fused_attention_backward(dout, q, k, v, out, lse16, bias, a);
      EXPECT_EQ(ops::sixteen_bit_copies(), copies) << "an f32 copy of a 16-bit input";
      ASSERT_EQ(out.dtype(), act);
      const Tensor out32 = ops::fused_attention(wide(q), wide(k), wide(v), bias, a, lse32);
      const auto g32 = ops::fused_attention_backward(wide(dout), wide(q), wide(k), wide(v),
                                                     wide(out), lse32, bias, a);
      EXPECT_EQ(bits(out), bits(ops::to_dtype(out32, act)));
      // 16-bit inputs that are not 16-byte aligned: the element-wise tile loads, the same bits.
      Tensor lse_m;
      EXPECT_EQ(
          bits(ops::fused_attention(misaligned(q), misaligned(k), misaligned(v), bias, a, lse_m)),
          bits(out));
      EXPECT_EQ(bits(lse16), bits(lse32));
      for (const auto& [name, got, want] :
           {std::tuple{"dq", g.dq, g32.dq}, std::tuple{"dk", g.dk, g32.dk},
            std::tuple{"dv", g.dv, g32.dv}}) {
        ASSERT_EQ(got.dtype(), act) << name;
        EXPECT_EQ(bits(got), bits(ops::to_dtype(want, act))) << name;
      }
      // The backward on misaligned 16-bit inputs (its 16-bit tile loads' element-wise path).
      const auto gm = ops::fused_attention_backward(misaligned(dout), misaligned(q), misaligned(k),
                                                    misaligned(v), misaligned(out), lse16, bias, a);
      EXPECT_EQ(bits(gm.dq), bits(g.dq)) << "dq, misaligned inputs";
      EXPECT_EQ(bits(gm.dk), bits(g.dk)) << "dk, misaligned inputs";
      EXPECT_EQ(bits(gm.dv), bits(g.dv)) << "dv, misaligned inputs";
    }
  }
}

}  // namespace
}  // namespace ada
