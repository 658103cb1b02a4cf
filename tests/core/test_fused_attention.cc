// ops::fused_attention (CPU; heads side by side in the rows of q, k, v) against a double-precision
// reference of the composition it replaces (on split heads),
// with the bound of tests/util/attention_ref.h; the same dropout masks and generator counters as
// attention_softmax + dropout_forward; its shape errors; BERT's model.attention switch.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "base/error.h"
#include "core/functional.h"
#include "core/ops.h"
#include "tests/util/attention_ref.h"
#include "tests/util/error_of.h"

namespace ada {
namespace {

using testing::attention_reference;
using testing::expect_within_sum_bound;

struct Case {
  int64_t b, heads, sq, sk, d;
  bool bias;
  float dropout;
  std::string name() const {
    return "b" + std::to_string(b) + " heads " + std::to_string(heads) + " q" + std::to_string(sq) +
           " k" + std::to_string(sk) + " d" + std::to_string(d) + (bias ? " bias" : "") +
           " dropout " + std::to_string(dropout);
  }
};

const Case kCases[] = {
    {2, 3, 5, 7, 8, true, 0.f},       {2, 3, 5, 7, 8, true, 0.25f},
    {1, 2, 70, 131, 16, true, 0.1f},  {3, 1, 64, 64, 32, false, 0.f},
    {1, 2, 130, 66, 64, false, 0.1f}, {2, 2, 1, 1, 4, true, 0.f},
};

// [B, S, heads*D] (the op's layout) -> [B*heads, S, D] (the reference's and the composition's).
Tensor split_heads(const Tensor& t, int64_t heads) {
  const int64_t b = t.size(0), s = t.size(1), d = t.size(2) / heads;
  return ops::permute(t.reshape({b, s, heads, d}), {0, 2, 1, 3}).reshape({b * heads, s, d});
}

// The key bias of BERT's padding mask: example e pads its last e*2 keys.
Tensor padding_bias(int64_t b, int64_t sk) {
  Tensor bias = Tensor::zeros({b, sk});
  for (int64_t e = 0; e < b; ++e)
    for (int64_t j = std::max<int64_t>(1, sk - 2 * e); j < sk; ++j)
      bias.data<float>()[e * sk + j] = -10000.f;
  return bias;
}

TEST(FusedAttention, MatchesTheDoubleReferenceOfTheComposition) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    Generator g(17);
    const int64_t bh = c.b * c.heads, e = c.heads * c.d;
    const Tensor q = Tensor::randn({c.b, c.sq, e}, g), k = Tensor::randn({c.b, c.sk, e}, g),
                 v = Tensor::randn({c.b, c.sk, e}, g), dout = Tensor::randn({c.b, c.sq, e}, g);
    auto split = [&](const Tensor& t) { return split_heads(t, c.heads); };
    const Tensor bias = c.bias ? padding_bias(c.b, c.sk) : Tensor();
    const float scale = 1.f / std::sqrt(static_cast<float>(c.d));
    ops::AttentionArgs a;
    a.heads = c.heads;
    a.scale = scale;
    a.dropout = c.dropout;
    a.seed = 99;
    a.first = 1234;  // a generator part-way through its stream
    // The masks dropout_forward draws for a [bh, sq, sk] tensor from that generator state.
    Tensor mask = Tensor::ones({bh, c.sq, c.sk});
    if (c.dropout > 0.f) {
      Generator mg(a.seed, a.first);
      ops::dropout_forward(Tensor::ones(mask.shape()), c.dropout, mg, mask);
    }
    const auto ref =
        attention_reference(split(q), split(k), split(v), bias, mask, c.heads, scale, split(dout));
    Tensor lse;
    const Tensor out = ops::fused_attention(q, k, v, bias, a, lse);
    EXPECT_EQ(out.shape(), q.shape());
    EXPECT_EQ(lse.shape(), (Shape{bh, c.sq}));
    expect_within_sum_bound(split(out).to_vector<float>(), ref.out, "out");
    const auto grads = ops::fused_attention_backward(dout, q, k, v, out, lse, bias, a);
    expect_within_sum_bound(split(grads.dq).to_vector<float>(), ref.dq, "dq");
    expect_within_sum_bound(split(grads.dk).to_vector<float>(), ref.dk, "dk");
    expect_within_sum_bound(split(grads.dv).to_vector<float>(), ref.dv, "dv");

    // The composition in fp32 (autograd through the separate ops) meets the same bound: the
    // reference is that composition's, and the bound is not one only the fused op meets.
    Variable vq(split(q), true), vk(split(k), true), vv(split(v), true);
    Generator cg(a.seed, a.first);
    Variable probs =
        fn::dropout(fn::attention_softmax(fn::bmm(vq, vk, false, true), bias, c.heads, scale),
                    c.dropout, true, cg);
    Variable composed = fn::bmm(probs, vv);
    expect_within_sum_bound(composed.value().to_vector<float>(), ref.out, "composition out");
    backward(composed, split(dout));
    expect_within_sum_bound(vq.grad().to_vector<float>(), ref.dq, "composition dq");
    expect_within_sum_bound(vk.grad().to_vector<float>(), ref.dk, "composition dk");
    expect_within_sum_bound(vv.grad().to_vector<float>(), ref.dv, "composition dv");
  }
}

// fn::fused_attention takes the generator counters the composition's dropout takes (so what
// follows draws the same masks), none in eval mode or at p = 0, and its gradients reach q, k, v.
TEST(FusedAttention, TakesTheCompositionsGeneratorCountersAndDifferentiates) {
  Generator g(3);
  const Tensor q = Tensor::randn({2, 6, 8}, g), k = Tensor::randn({2, 9, 8}, g),
               v = Tensor::randn({2, 9, 8}, g);
  Generator fused_gen(5, 40), composed_gen(5, 40);
  Variable vq(q, true), vk(k, true), vv(v, true);
  Variable out = fn::fused_attention(vq, vk, vv, Tensor(), 2, 0.5f, 0.1f, true, fused_gen);
  const Variable sq(split_heads(q, 2)), sk(split_heads(k, 2));
  fn::dropout(fn::attention_softmax(fn::bmm(sq, sk, false, true), Tensor(), 2, 0.5f), 0.1f, true,
              composed_gen);
  EXPECT_EQ(fused_gen.offset(), composed_gen.offset());
  EXPECT_EQ(fused_gen.offset(), 40u + 2 * 2 * 6 * 9);
  EXPECT_EQ(out.shape(), q.shape());
  backward(out, Tensor::ones(out.shape()));
  for (const Variable* x : {&vq, &vk, &vv}) EXPECT_EQ(x->grad().shape(), x->shape());
  Generator eval_gen(5, 40);
  fn::fused_attention(vq, vk, vv, Tensor(), 2, 0.5f, 0.1f, false, eval_gen);
  fn::fused_attention(vq, vk, vv, Tensor(), 2, 0.5f, 0.f, true, eval_gen);
  EXPECT_EQ(eval_gen.offset(), 40u);
}

TEST(FusedAttention, RefusesMismatchedShapesNamingThem) {
  Generator g(1);
  const Tensor q = Tensor::randn({4, 6, 8}, g), k = Tensor::randn({4, 9, 8}, g);
  ops::AttentionArgs a;
  a.heads = 2;
  Tensor lse;
  using testing::error_of;
  EXPECT_NE(error_of<ShapeError>([&] {
              ops::fused_attention(q, k, q, Tensor(), a, lse);
            }).find("k, v [batch, keys, heads*D]"),
            std::string::npos);
  EXPECT_NE(error_of<ShapeError>([&] {
              ops::fused_attention(q, k, k, Tensor::zeros({2, 8}), a, lse);
            }).find("should be [4,9] for keys"),
            std::string::npos);
  a.heads = 3;  // 8 columns are not 3 heads
  EXPECT_THROW(ops::fused_attention(q, k, k, Tensor(), a, lse), ShapeError);
  a.heads = 2;
  a.dropout = 1.f;
  EXPECT_THROW(ops::fused_attention(q, k, k, Tensor(), a, lse), ShapeError);
}

}  // namespace
}  // namespace ada
