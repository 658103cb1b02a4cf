// Finite-difference checks of every op with a backward, for inputs and parameters, at odd
// shapes. Tolerances: step 1e-2, |a-n| <= 5e-3 * max(1,|a|,|n|) unless stated (float32 forward,
// double accumulation of the projected loss).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "core/functional.h"
#include "core/parallel.h"
#include "util/grad_check.h"

namespace ada {
namespace {
using testing::check_gradients;
using testing::spaced_values;
using V = std::vector<Variable>;

Tensor rnd(const Shape& s, uint64_t seed, float scale = 1.f) {
  Generator g(seed);
  return Tensor::randn(s, g, 0.f, scale);
}

TEST(GradCheck, Elementwise) {
  Tensor a = rnd({3, 5}, 1), b = rnd({3, 5}, 2);
  check_gradients("add", [](const V& v) { return fn::add(v[0], v[1]); }, {a, b});
  check_gradients("sub", [](const V& v) { return fn::sub(v[0], v[1]); }, {a, b});
  check_gradients("mul", [](const V& v) { return fn::mul(v[0], v[1]); }, {a, b});
  check_gradients("scale", [](const V& v) { return fn::scale(v[0], -2.5f); }, {a});
  check_gradients("mul same input twice", [](const V& v) { return fn::mul(v[0], v[0]); }, {a});
}

TEST(GradCheck, BiasAndShape) {
  check_gradients("add_bias", [](const V& v) { return fn::add_bias(v[0], v[1]); },
                  {rnd({2, 3, 7}, 3), rnd({7}, 4)});
  check_gradients("add_channel_bias", [](const V& v) { return fn::add_channel_bias(v[0], v[1]); },
                  {rnd({2, 3, 4, 5}, 5), rnd({3}, 6)});
  check_gradients("reshape",
                  [](const V& v) {
                    return fn::mul(fn::reshape(v[0], {5, 6}), v[1]);
                  },
                  {rnd({2, 3, 5}, 7), rnd({5, 6}, 8)});
  check_gradients("permute 0213",
                  [](const V& v) {
                    return fn::permute(v[0], {0, 2, 1, 3});
                  },
                  {rnd({2, 3, 4, 5}, 9)});
  check_gradients("permute 201",
                  [](const V& v) {
                    return fn::permute(v[0], {2, 0, 1});
                  },
                  {rnd({3, 4, 5}, 10)});
}

TEST(GradCheck, Activations) {
  check_gradients("relu", [](const V& v) { return fn::relu(v[0]); }, {spaced_values({4, 7}, 11)});
  check_gradients("gelu", [](const V& v) { return fn::gelu(v[0]); }, {rnd({4, 7}, 12, 2.f)});
  check_gradients("tanh", [](const V& v) { return fn::tanh(v[0]); }, {rnd({4, 7}, 13)});
}

TEST(GradCheck, Reductions) {
  Tensor x = rnd({3, 4, 5}, 14);
  check_gradients("sum axis 1", [](const V& v) { return fn::sum(v[0], {1}); }, {x});
  check_gradients("sum axes 0,2 keepdim",
                  [](const V& v) {
                    return fn::sum(v[0], {0, -1}, true);
                  },
                  {x});
  check_gradients("mean axis -1", [](const V& v) { return fn::mean(v[0], {-1}); }, {x});
  check_gradients("mean all", [](const V& v) { return fn::mean(v[0], {0, 1, 2}); }, {x});
}

TEST(GradCheck, MatmulAllTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor a = ta ? rnd({5, 3}, 15) : rnd({3, 5}, 15);
      Tensor b = tb ? rnd({4, 5}, 16) : rnd({5, 4}, 16);
      check_gradients(std::string("matmul ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0"),
                      [ta, tb](const V& v) { return fn::matmul(v[0], v[1], ta, tb); }, {a, b});
      Tensor ba = ta ? rnd({2, 5, 3}, 17) : rnd({2, 3, 5}, 17);
      Tensor bb = tb ? rnd({2, 4, 5}, 18) : rnd({2, 5, 4}, 18);
      check_gradients(std::string("bmm ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0"),
                      [ta, tb](const V& v) { return fn::bmm(v[0], v[1], ta, tb); }, {ba, bb});
    }
}

TEST(GradCheck, Linear) {
  check_gradients("linear with bias", [](const V& v) { return fn::linear(v[0], v[1], v[2]); },
                  {rnd({2, 3, 6}, 19), rnd({4, 6}, 20), rnd({4}, 21)});
  check_gradients("linear no bias", [](const V& v) { return fn::linear(v[0], v[1], Variable()); },
                  {rnd({5, 6}, 22), rnd({3, 6}, 23)});
}

struct ConvCase {
  const char* name;
  Shape x, w;
  ops::Conv2dParams p;
};

TEST(GradCheck, Conv2d) {
  const ConvCase cases[] = {
      {"3x3 s1 p1", {2, 3, 6, 5}, {4, 3, 3, 3}, {1, 1, 1, 1, 1, 1}},
      {"3x3 s2 p1", {2, 2, 7, 7}, {3, 2, 3, 3}, {2, 2, 1, 1, 1, 1}},
      {"1x1 s1", {3, 4, 3, 5}, {2, 4, 1, 1}, {}},
      {"1x1 s2", {2, 3, 5, 5}, {2, 3, 1, 1}, {2, 2, 0, 0, 1, 1}},
      {"7x7 s2 p3", {1, 2, 9, 9}, {2, 2, 7, 7}, {2, 2, 3, 3, 1, 1}},
      {"3x2 s(2,1) p(1,0) dil2", {2, 2, 9, 7}, {3, 2, 3, 2}, {2, 1, 1, 0, 2, 2}},
      {"grouped images, tiny planes", {5, 3, 2, 2}, {4, 3, 2, 2}, {1, 1, 1, 1, 1, 1}},
  };
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const auto& c : cases) {
      ops::Conv2dParams p = c.p;
      check_gradients(std::string("conv2d ") + c.name + " threads=" + std::to_string(threads),
                      [p](const V& v) { return fn::conv2d(v[0], v[1], p); },
                      {rnd(c.x, 24), rnd(c.w, 25, 0.5f)});
    }
  }
  set_num_threads(0);
}

TEST(GradCheck, Pooling) {
  ops::Pool2dParams mp{3, 3, 2, 2, 1, 1, true};
  check_gradients("max_pool2d 3x3 s2 p1", [mp](const V& v) { return fn::max_pool2d(v[0], mp); },
                  {spaced_values({2, 3, 7, 6}, 26)});
  ops::Pool2dParams mp2{2, 2, 2, 2, 0, 0, true};
  check_gradients("max_pool2d 2x2", [mp2](const V& v) { return fn::max_pool2d(v[0], mp2); },
                  {spaced_values({2, 2, 6, 4}, 27)});
  ops::Pool2dParams ap{3, 3, 2, 2, 1, 1, true};
  check_gradients("avg_pool2d include pad", [ap](const V& v) { return fn::avg_pool2d(v[0], ap); },
                  {rnd({2, 3, 7, 6}, 28)});
  ops::Pool2dParams ap2{3, 2, 1, 2, 1, 1, false};
  check_gradients("avg_pool2d exclude pad", [ap2](const V& v) { return fn::avg_pool2d(v[0], ap2); },
                  {rnd({1, 2, 5, 6}, 29)});
  check_gradients("global_avg_pool", [](const V& v) { return fn::global_avg_pool(v[0]); },
                  {rnd({2, 3, 4, 5}, 30)});
}

TEST(GradCheck, BatchNorm) {
  for (bool training : {true, false}) {
    for (const Shape& s : {Shape{4, 3, 3, 5}, Shape{6, 5}}) {
      const int64_t c = s[1];
      check_gradients(std::string("batch_norm training=") + (training ? "1 " : "0 ") + shape_str(s),
                      [training, c](const V& v) {
                        Tensor rm = Tensor::full({c}, 0.1), rv = Tensor::full({c}, 1.5);
                        return fn::batch_norm(v[0], v[1], v[2], rm, rv, training, 0.1f, 1e-5f);
                      },
                      {rnd(s, 31, 2.f), rnd({c}, 32), rnd({c}, 33)});
    }
  }
}

// The fused fn::batch_norm_relu (also with a residual) and fn::add_relu against their pairs of
// ops through autograd:
// the same output and the same gradient in every input, bit for bit (the pairs are checked
// against finite differences above; the fused ops' kinks make them poor subjects for it).
TEST(GradCheck, FusedReluOpsMatchTheirPairs) {
  auto grads = [](const std::function<Variable(const V&)>& f, const std::vector<Tensor>& in) {
    V vars;
    for (const Tensor& t : in) vars.emplace_back(t.clone(), true);
    Variable out = f(vars);
    Generator gen(5);
    backward(fn::sum(fn::mul(out, Variable(Tensor::uniform(out.shape(), gen, -1.f, 1.f))),
                     {0, 1, 2, 3}));
    std::vector<std::vector<float>> r{out.value().to_vector<float>()};
    for (const Variable& v : vars) r.push_back(v.grad().to_vector<float>());
    return r;
  };
  const Shape s{4, 3, 5, 5};
  for (bool training : {true, false}) {
    const std::vector<Tensor> in{rnd(s, 41, 2.f), rnd({3}, 42), rnd({3}, 43)};
    auto bn = [training](bool fused) {
      return [training, fused](const V& v) {
        Tensor rm = Tensor::full({3}, 0.1), rv = Tensor::full({3}, 1.5);
        return fused ? fn::batch_norm_relu(v[0], v[1], v[2], rm, rv, training, 0.1f, 1e-5f)
                     : fn::relu(fn::batch_norm(v[0], v[1], v[2], rm, rv, training, 0.1f, 1e-5f));
      };
    };
    EXPECT_EQ(grads(bn(true), in), grads(bn(false), in)) << "batch_norm_relu training=" << training;
    // relu(batch_norm(x) + residual): the residual gets the masked gradient too.
    const std::vector<Tensor> in4{rnd(s, 41, 2.f), rnd({3}, 42), rnd({3}, 43), rnd(s, 46)};
    auto tail = [training](bool fused) {
      return [training, fused](const V& v) {
        Tensor rm = Tensor::full({3}, 0.1), rv = Tensor::full({3}, 1.5);
        return fused ? fn::batch_norm_relu(v[0], v[1], v[2], rm, rv, training, 0.1f, 1e-5f, v[3])
                     : fn::add_relu(fn::batch_norm(v[0], v[1], v[2], rm, rv, training, 0.1f, 1e-5f),
                                    v[3]);
      };
    };
    EXPECT_EQ(grads(tail(true), in4), grads(tail(false), in4))
        << "batch_norm_relu with a residual, training=" << training;
  }
  const std::vector<Tensor> in{rnd(s, 44), rnd(s, 45)};
  EXPECT_EQ(grads([](const V& v) { return fn::add_relu(v[0], v[1]); }, in),
            grads([](const V& v) { return fn::relu(fn::add(v[0], v[1])); }, in))
      << "add_relu";
}

TEST(GradCheck, LayerNorm) {
  check_gradients("layer_norm", [](const V& v) { return fn::layer_norm(v[0], v[1], v[2], 1e-5f); },
                  {rnd({2, 3, 9}, 34, 2.f), rnd({9}, 35), rnd({9}, 36)});
}

TEST(GradCheck, SoftmaxFamily) {
  check_gradients("softmax", [](const V& v) { return fn::softmax(v[0]); }, {rnd({3, 7}, 37, 2.f)});
  check_gradients("log_softmax", [](const V& v) { return fn::log_softmax(v[0]); },
                  {rnd({2, 3, 6}, 38, 2.f)});
  // 2 examples x 2 heads, 3 queries, 5 keys; example 1 has two padded keys.
  const Tensor key_bias =
      Tensor::from_vector<float>({0, 0, 0, 0, 0, 0, 0, 0, -10000, -10000}, {2, 5});
  for (const Tensor& bias : {Tensor(), key_bias})
    check_gradients(bias.defined() ? "attention_softmax masked" : "attention_softmax",
                    [&](const V& v) { return fn::attention_softmax(v[0], bias, 2, 0.35f); },
                    {rnd({4, 3, 5}, 39, 2.f)});
  Tensor targets = Tensor::from_vector<int64_t>({2, -100, 0, 4, 4}, {5});
  for (float smoothing : {0.f, 0.1f}) {
    check_gradients("cross_entropy smoothing=" + std::to_string(smoothing),
                    [&](const V& v) { return fn::cross_entropy(v[0], targets, smoothing, -100); },
                    {rnd({5, 6}, 39, 2.f)});
  }
  Tensor t32 = Tensor::from_vector<int32_t>({1, 0, 2}, {3});
  check_gradients("cross_entropy i32 targets",
                  [&](const V& v) { return fn::cross_entropy(v[0], t32); }, {rnd({3, 4}, 40)});
}

TEST(GradCheck, DropoutAndEmbedding) {
  check_gradients("dropout",
                  [](const V& v) {
                    Generator g(99);  // same mask at every evaluation
                    return fn::dropout(v[0], 0.3f, true, g);
                  },
                  {rnd({4, 9}, 41)});
  Tensor ids = Tensor::from_vector<int64_t>({3, 1, 3, 0, 3, 2}, {2, 3});
  check_gradients("embedding (repeated ids)", [&](const V& v) { return fn::embedding(v[0], ids); },
                  {rnd({5, 4}, 42)});
}

TEST(GradCheck, SharedParameterAccumulates) {
  // y = relu(x W^T) W: W used twice (weight tying); both paths must add up.
  check_gradients(
      "tied weight",
      [](const V& v) { return fn::matmul(fn::tanh(fn::matmul(v[0], v[1], false, true)), v[1]); },
      {rnd({3, 4}, 43), rnd({5, 4}, 44)});
}

TEST(GradCheck, CheckerCatchesAWrongBackward) {
  // An op whose backward is off by 10%: the checker must report it.
  auto bad_square = [](const V& v) {
    Tensor x = v[0].value();
    return make_result(ops::mul(x, x), "bad_square", {v[0]}, [x](const Tensor& g) {
      return std::vector<Tensor>{ops::scale(ops::mul(g, x), 2.2f)};
    });
  };
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter capture(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    check_gradients("bad_square", bad_square, {rnd({3, 4}, 45)});
  }
  ASSERT_GT(failures.size(), 0);
  EXPECT_NE(std::string(failures.GetTestPartResult(0).message()).find("analytic"),
            std::string::npos);
}

}  // namespace
}  // namespace ada
