// The autograd engine: accumulation, reuse, no-grad, the grad-ready hook (once per leaf, in a
// deterministic order, before backward returns), and release of saved activations.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/functional.h"
#include "core/random.h"

namespace ada {
namespace {

Tensor vec(std::vector<float> v) {
  int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_vector<float>(v, {n});
}

TEST(Autograd, ChainRuleAndAccumulation) {
  Variable x(vec({1, 2, 3}), true, "x");
  auto loss = [&] { return fn::sum(fn::mul(x, x), {0}); };  // sum x^2 -> grad 2x
  backward(loss());
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 4, 6}));
  backward(loss());  // gradients accumulate across backward calls
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{4, 8, 12}));
  x.zero_grad();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 0, 0}));
}

// zero_grad keeps the buffer without filling it: the next gradient is copied in (same storage),
// later ones add, a leaf the loss does not use reads as zeros, and a read before backward makes
// backward add onto those zeros.
TEST(Autograd, ZeroGradThenCopyIntoTheSameBuffer) {
  Variable x(vec({1, 2, 3}), true, "x"), unused(vec({7, 7}), true, "unused");
  auto loss = [&] { return fn::sum(fn::mul(x, x), {0}); };
  backward(loss());
  backward(fn::sum(fn::scale(unused, 2.f), {0}));
  const void* storage = x.grad().raw_data();
  x.zero_grad();
  unused.zero_grad();
  backward(loss());
  EXPECT_EQ(x.grad().raw_data(), storage)
      << "zero_grad must keep the buffer (bucket views live in it)";
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 4, 6}));
  backward(loss());  // micro-batches: the second adds
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{4, 8, 12}));
  EXPECT_EQ(unused.grad().to_vector<float>(), (std::vector<float>{0, 0}));
  x.zero_grad();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 0, 0}));  // read before backward
  backward(loss());
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 4, 6}));
}

TEST(Autograd, ReuseAddsBothPaths) {
  Variable x(vec({1, -2}), true);
  Variable y = fn::add(fn::scale(x, 3.f), fn::mul(x, x));  // 3x + x^2 -> 3 + 2x
  backward(fn::sum(y, {0}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{5, -1}));
}

TEST(Autograd, GradientsDoNotAliasAcrossLeaves) {
  // add's backward hands the same tensor to both inputs; the leaves must not share storage.
  Variable a(vec({1, 1}), true), b(vec({2, 2}), true);
  backward(fn::sum(fn::add(a, b), {0}));
  EXPECT_FALSE(a.grad().shares_storage_with(b.grad()));
  backward(fn::sum(fn::scale(a, 2.f), {0}));
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{3, 3}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{1, 1}));
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Variable x(vec({1, 2}), true);
  {
    NoGradGuard ng;
    Variable y = fn::mul(x, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_THROW(backward(fn::sum(y, {0})), Error);
  }
  EXPECT_TRUE(fn::mul(x, x).requires_grad());
  Variable c(vec({1, 2}));  // constant
  EXPECT_FALSE(fn::mul(c, c).requires_grad());
}

TEST(Autograd, NonScalarNeedsSeed) {
  Variable x(vec({1, 2}), true);
  Variable y = fn::scale(x, 2.f);
  EXPECT_THROW(backward(y), ShapeError);
  backward(y, vec({1, 10}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 20}));
}

TEST(Autograd, GraphIsConsumedOnce) {
  Variable x(vec({1, 2}), true);
  Variable loss = fn::sum(fn::mul(x, x), {0});
  backward(loss);
  try {
    backward(loss);
    FAIL() << "expected an error on a second backward";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run the forward again"), std::string::npos) << e.what();
  }
}

TEST(Autograd, SavedActivationsAreFreedDuringBackward) {
  Variable x(vec({1, 2, 3}), true);
  Variable h = fn::tanh(x);  // saves its output
  Tensor saved = h.value();  // we hold one reference; the node holds another
  const long before = saved.storage_use_count();
  Variable loss = fn::sum(fn::mul(h, h), {0});
  h = Variable();
  backward(loss);
  EXPECT_LT(saved.storage_use_count(), before);
  EXPECT_EQ(saved.storage_use_count(), 1);
}

// The graph records where an input came from, not its value: an intermediate that its consumer
// did not save (scale's output under relu, which keeps only its own output) is freed as soon as
// the caller drops it, long before backward. Gradients still flow through it.
TEST(Autograd, UnsavedIntermediatesAreFreedAtForward) {
  Variable x(vec({-1, 2, 3}), true);
  Variable a = fn::scale(x, 2.f);
  Tensor a_value = a.value();
  Variable y = fn::relu(a);
  a = Variable();
  EXPECT_EQ(a_value.storage_use_count(), 1) << "the graph kept relu's input alive";
  backward(fn::sum(y, {0}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 2, 2}));
}
// A small two-layer net whose parameters are used in a known order; records hook calls.
struct Net {
  Variable w1{Tensor::full({4, 3}, 0.1), true, "layer1.weight"};
  Variable b1{Tensor::full({4}, 0.0), true, "layer1.bias"};
  Variable w2{Tensor::full({2, 4}, 0.2), true, "layer2.weight"};
  Variable b2{Tensor::full({2}, 0.0), true, "layer2.bias"};
  Variable unused{Tensor::full({5}, 1.0), true, "unused"};
  Variable loss(const Tensor& x) {
    Variable h = fn::tanh(fn::linear(Variable(x), w1, b1));
    Variable y = fn::linear(h, w2, b2);
    return fn::sum(fn::mul(y, y), {0, 1});
  }
};

TEST(Autograd, GradReadyHookFiresOncePerLeafInDeterministicOrder) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, -1, 0, 2}, {2, 3});
  std::vector<std::string> first;
  for (int run = 0; run < 3; ++run) {
    Net net;
    std::vector<std::string> order;
    bool all_defined = true;
    backward(net.loss(x), {}, [&](Variable& leaf) {
      order.push_back(leaf.name());
      all_defined = all_defined && leaf.grad().defined();
    });
    // Each used parameter exactly once; the unused one never (the bucketer zero-fills it).
    std::vector<std::string> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<std::string>{"layer1.bias", "layer1.weight", "layer2.bias",
                                                "layer2.weight"}));
    EXPECT_TRUE(all_defined);
    // Layer 2's gradients are final before layer 1's: they can be sent while backward goes on.
    auto pos = [&](const std::string& n) {
      return std::find(order.begin(), order.end(), n) - order.begin();
    };
    EXPECT_LT(pos("layer2.weight"), pos("layer1.weight"));
    EXPECT_LT(pos("layer2.bias"), pos("layer1.bias"));
    if (run == 0) first = order;
    EXPECT_EQ(order, first) << "hook order must not change between runs";
  }
}

TEST(Autograd, HookSeesFinalGradientOfSharedLeaf) {
  // w feeds two branches; the hook must fire only after both contributions arrived.
  Variable w(vec({1, 2}), true, "w");
  Variable a = fn::scale(w, 3.f);
  Variable b = fn::tanh(fn::scale(w, 0.f));  // second path, d/dw = 0 * ... but still a use
  Variable c = fn::mul(w, w);
  Variable loss = fn::sum(fn::add(fn::add(a, b), c), {0});
  int calls = 0;
  std::vector<float> seen;
  backward(loss, {}, [&](Variable& leaf) {
    ++calls;
    seen = leaf.grad().to_vector<float>();
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, (std::vector<float>{5, 7}));  // 3 + 0 + 2w
}

// fn::linear with a bias is one node (ops::linear, whose CUDA backend adds the bias in the GEMM's
// epilogue); on the CPU it must give the bits of matmul then add_bias, forward and every
// gradient, whichever of x, w and b take gradients.
TEST(Autograd, LinearWithBiasIsMatmulThenAddBiasBitForBit) {
  Generator g(7);
  const Tensor x0 = Tensor::randn({5, 3, 37}, g), w0 = Tensor::randn({19, 37}, g),
               b0 = Tensor::randn({19}, g), seed = Tensor::randn({5, 3, 19}, g);
  for (int mask = 1; mask < 8; ++mask) {
    SCOPED_TRACE("requires_grad x/w/b mask " + std::to_string(mask));
    Variable x1(x0, (mask & 1) != 0), w1(w0, (mask & 2) != 0), b1(b0, (mask & 4) != 0);
    Variable x2(x0, (mask & 1) != 0), w2(w0, (mask & 2) != 0), b2(b0, (mask & 4) != 0);
    Variable fused = fn::linear(x1, w1, b1);
    Variable composed = fn::reshape(
        fn::add_bias(fn::matmul(fn::reshape(x2, {-1, 37}), w2, false, true), b2), {5, 3, 19});
    ASSERT_EQ(fused.value().to_vector<float>(), composed.value().to_vector<float>());
    backward(fused, seed);
    backward(composed, seed);
    for (auto [a, b] : {std::pair{&x1, &x2}, std::pair{&w1, &w2}, std::pair{&b1, &b2}}) {
      ASSERT_EQ(a->grad().defined(), b->grad().defined());
      if (a->grad().defined()) {
        EXPECT_EQ(a->grad().to_vector<float>(), b->grad().to_vector<float>());
      }
    }
  }
}

// fn::gelu_linear and fn::dropout_bmm compute again in backward what the compositions keep (the
// GELU output; the dropped operand, from the same generator counters): the same output and every
// gradient bit for bit, whichever inputs take gradients, with and without a bias.
TEST(Autograd, RecomputingOpsAreTheirCompositionsBitForBit) {
  Generator g(11);
  const Tensor h0 = Tensor::randn({4, 3, 29}, g), w0 = Tensor::randn({17, 29}, g),
               b0 = Tensor::randn({17}, g), seed = Tensor::randn({4, 3, 17}, g);
  auto same_grads = [](const std::vector<std::pair<Variable*, Variable*>>& pairs) {
    for (auto [a, b] : pairs) {
      if (!a->defined()) continue;  // no bias
      ASSERT_EQ(a->grad().defined(), b->grad().defined());
      if (a->grad().defined()) {
        EXPECT_EQ(a->grad().to_vector<float>(), b->grad().to_vector<float>());
      }
    }
  };
  for (int mask = 1; mask < 16; ++mask) {
    const bool with_bias = (mask & 8) != 0;
    SCOPED_TRACE("gelu_linear, requires_grad h/w/b mask " + std::to_string(mask));
    Variable h1(h0, (mask & 1) != 0), w1(w0, (mask & 2) != 0), b1(b0, (mask & 4) != 0);
    Variable h2(h0, (mask & 1) != 0), w2(w0, (mask & 2) != 0), b2(b0, (mask & 4) != 0);
    if (!with_bias) b1 = b2 = Variable();
    Variable re = fn::gelu_linear(h1, w1, b1), composed = fn::linear(fn::gelu(h2), w2, b2);
    ASSERT_EQ(re.value().to_vector<float>(), composed.value().to_vector<float>());
    if (!re.requires_grad()) continue;
    backward(re, seed);
    backward(composed, seed);
    same_grads({{&h1, &h2}, {&w1, &w2}, {&b1, &b2}});
  }
  const Tensor a0 = Tensor::randn({6, 9, 9}, g), v0 = Tensor::randn({6, 9, 5}, g),
               seed2 = Tensor::randn({6, 9, 5}, g);
  for (int mask = 1; mask < 4; ++mask) {
    SCOPED_TRACE("dropout_bmm, requires_grad a/v mask " + std::to_string(mask));
    Variable a1(a0, (mask & 1) != 0), v1(v0, (mask & 2) != 0);
    Variable a2(a0, (mask & 1) != 0), v2(v0, (mask & 2) != 0);
    Generator g1(3), g2(3);
    Variable re = fn::dropout_bmm(a1, v1, 0.4f, true, g1);
    Variable composed = fn::bmm(fn::dropout(a2, 0.4f, true, g2), v2);
    ASSERT_EQ(re.value().to_vector<float>(), composed.value().to_vector<float>());
    EXPECT_EQ(g1.take(1), g2.take(1));  // the same counters consumed
    backward(re, seed2);
    backward(composed, seed2);
    same_grads({{&a1, &a2}, {&v1, &v2}});
  }
}

}  // namespace
}  // namespace ada
