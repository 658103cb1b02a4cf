// Reducers under mpiexec at 1, 2, 3, 4, 5, 6 and 8 ranks: closed forms for sum/average; for
// Adasum, on both schedules (distributed and gathered), the pair formula, orthogonal -> sum,
// parallel -> mean, b = -a -> 0, zero/empty/one-element tensors, odd sizes straddling the
// halving points, per-tensor independence, agreement with a sequential tree reference computed
// here, and bit-identical results on every rank.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>

#include "comm/adasum_reducer.h"
#include "comm/bucketer.h"
#include "comm_test_util.h"
#include "core/functional.h"
#include "reducer_test_util.h"

namespace ada::comm {
namespace {
using namespace testing;

TEST(Reducers, SumAndAverageClosedForms) {
  const int p = world().size(), r = world().rank();
  const auto sizes = bucket_sizes(p);
  const int64_t n = total(sizes);
  std::vector<float> mine(n);
  for (int64_t i = 0; i < n; ++i) mine[i] = float(r) + 0.5f * float(i % 17);
  auto s = reduce_with("sum", mine, sizes);
  auto a = reduce_with("average", mine, sizes);
  for (int64_t i = 0; i < n; ++i) {
    const float want = float(p * (p - 1) / 2) + p * 0.5f * float(i % 17);
    ASSERT_FLOAT_EQ(s[i], want) << i;
    ASSERT_NEAR(a[i], want / p, 1e-5f * std::max(1.f, want / p)) << i;
  }
  expect_same_on_every_rank(s, "sum");
  expect_same_on_every_rank(a, "average");
}

// reducer.precision bf16/fp16: every reducer and schedule on a 16-bit wire stays within that
// format's rounding of the f32 result (a few roundings: one per level of the schedule), the wire
// is really used (the result is not the f32 one), and every rank holds the same bits.
TEST(Reducers, SixteenBitWireStaysWithinItsRoundingAndAgreesEverywhere) {
  const int p = world().size(), r = world().rank();
  if (p == 1) {
    GTEST_SUCCEED() << "one rank: nothing travels";
    return;
  }
  const auto sizes = bucket_sizes(p);
  const int64_t n = total(sizes);
  auto mine = random_vec(n, 300 + r);
  for (int64_t i = 0; i < n; ++i) mine[i] += 0.3f;
  std::vector<std::pair<std::string, std::string>> cases = {{"sum", ""},
                                                            {"average", ""},
                                                            {"adasum", "gather_below: 0"},
                                                            {"adasum", "gather_below: 1000000000"}};
  if (p % 2 == 0 && p >= 4)
    cases.push_back({"adasum", "hierarchical: true, local_size: 2, gather_below: 0"});
  const double levels = 2 + std::ceil(std::log2(p));
  for (const auto& [name, opts] : cases)
    for (const char* wire : {"bf16", "fp16"}) {
      const std::string what = name + " {" + opts + "} " + wire;
      const std::string sep = opts.empty() ? "" : ", ";
      auto ref = reduce_with(name, mine, sizes, world(), "{" + opts + "}");
      auto got =
          reduce_with(name, mine, sizes, world(), "{" + opts + sep + "precision: " + wire + "}");
      const double ulp = std::string(wire) == "bf16" ? 1.0 / 256 : 1.0 / 2048;
      int64_t off = 0;
      double moved = 0;
      for (size_t t = 0; t < sizes.size(); ++t) {
        std::vector<float> g(got.begin() + off, got.begin() + off + sizes[t]);
        std::vector<double> w(ref.begin() + off, ref.begin() + off + sizes[t]);
        expect_near_rel(g, w, levels * ulp, what + ", tensor " + std::to_string(t));
        for (int64_t i = off; i < off + sizes[t]; ++i)
          moved = std::max(moved, double(std::fabs(got[i] - ref[i])));
        off += sizes[t];
      }
      EXPECT_GT(moved, 0.0) << what << ": equals the f32 result: the 16-bit wire was not used";
      expect_same_on_every_rank(got, what);
    }
  EXPECT_THROW(make_reducer("average", "{precision: fp8}"), ConfigError);
  try {
    make_reducer("adasum", "{precision: fp64}");
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown precision 'fp64'; known: fp32, bf16, fp16"),
              std::string::npos)
        << e.what();
  }
}

// average on an fp16 wire divides before the wire: values whose sum over the ranks passes fp16's
// 65504 average to a finite mean (they gave inf: the sum travelled as fp16).
TEST(Reducers, AverageOnAnFp16WireDividesBeforeTheWire) {
  const int p = world().size();
  if (p == 1) {
    GTEST_SUCCEED() << "one rank: nothing travels";
    return;
  }
  const std::vector<int64_t> sizes = {5, 3};
  std::vector<float> mine(8, 40000.f);
  auto got = reduce_with("average", mine, sizes, world(), "{precision: fp16}");
  for (float v : got) ASSERT_NEAR(v, 40000.f, 40000.f * 3 / 2048) << "p " << p;
  expect_same_on_every_rank(got, "average fp16");
}

// Every Adasum test runs on both schedules: the distributed one (vector halving) and the
// latency path (gather, then the same tree on every rank).
class Adasum : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Schedules, Adasum,
                         ::testing::Values("{gather_below: 0}", "{gather_below: 1000000000}"),
                         [](const auto& info) {
                           return info.index == 0 ? "Distributed" : "Gathered";
                         });

TEST_P(Adasum, TwoRankClosedFormInEveryPair) {
  Communicator& c = world();
  const int r = c.rank();
  auto pair = c.split(r / 2, r);  // (0,1), (2,3), ...; an odd last rank is alone
  const std::vector<int64_t> sizes = {5, 9};
  auto mine = random_vec(14, 100 + r);
  auto got = reduce_with("adasum", mine, sizes, *pair, GetParam());
  auto both = gather_all(mine);  // collective on the world: every rank takes part
  if (pair->size() == 1) {
    EXPECT_EQ(got, mine);
    return;
  }
  const auto& a = both[r & ~1];
  const auto& b = both[r | 1];
  int64_t off = 0;
  for (int64_t n : sizes) {
    double d = 0, aa = 0, bb = 0;
    for (int64_t i = off; i < off + n; ++i) {
      d += double(a[i]) * b[i];
      aa += double(a[i]) * a[i];
      bb += double(b[i]) * b[i];
    }
    for (int64_t i = off; i < off + n; ++i) {
      const double want = (1 - d / (2 * aa)) * a[i] + (1 - d / (2 * bb)) * b[i];
      EXPECT_NEAR(got[i], want, 1e-6 * std::max(1.0, std::fabs(want))) << i;
    }
    off += n;
  }
}

TEST_P(Adasum, OrthogonalInputsGiveTheSum) {
  const int p = world().size(), r = world().rank();
  const auto sizes = bucket_sizes(p);
  const int64_t n = total(sizes);
  // Disjoint supports: element i belongs to rank i % p, so all inputs are orthogonal per tensor.
  auto v = random_vec(n, 7);
  std::vector<float> mine(n, 0.f);
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) {
    if (i % p == r) mine[i] = v[i];
    want[i] = v[i];
  }
  auto got = reduce_with("adasum", mine, sizes, world(), GetParam());
  expect_near_rel(got, want, 1.2e-5, "orthogonal");  // Horovod's bound: 100 * eps(f32)
  expect_same_on_every_rank(got, "orthogonal");
}

TEST_P(Adasum, ParallelInputsGiveTheMean) {
  const int p = world().size(), r = world().rank();
  const auto sizes = bucket_sizes(p);
  const int64_t n = total(sizes);
  auto a = random_vec(n, 8);
  auto scale = [](int k) { return (k % 3 == 2 ? -0.5f : 1.f) * (1.f + 0.37f * k); };
  double mean_scale = 0;
  for (int k = 0; k < p; ++k) mean_scale += scale(k) / p;
  std::vector<float> mine(n);
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = scale(r) * a[i];
    want[i] = mean_scale * a[i];
  }
  auto got = reduce_with("adasum", mine, sizes, world(), GetParam());
  expect_near_rel(got, want, 1.2e-5, "parallel");
  expect_same_on_every_rank(got, "parallel");
  // Identical inputs come back unchanged.
  auto same = reduce_with("adasum", a, sizes, world(), GetParam());
  std::vector<double> a_d(a.begin(), a.end());
  expect_near_rel(same, a_d, 1.2e-5, "identical");
}

// The diagnostic: the first tree level's per-tensor cosine, summed with its count over ranks.
TEST_P(Adasum, PairCosineIsOneForParallelAndZeroForOrthogonalInputs) {
  const int p = world().size(), r = world().rank();
  const auto sizes = bucket_sizes(p);
  const int64_t n = total(sizes);
  auto reducer = make_reducer("adasum", GetParam());
  ASSERT_EQ(reducer->stat_names(), std::vector<std::string>{"adasum_pair_cos"});
  auto cosine = [&](const std::vector<float>& mine) {
    Tensor buf = Tensor::from_vector<float>(mine, {n});
    reducer->reduce(buf, spans_of(sizes), world());
    const auto st = reducer->take_stats();
    EXPECT_EQ(st.size(), 1u);
    double agg[2] = {st[0].first, st[0].second};
    world().allreduce(agg, 2);
    return std::make_pair(agg[0], agg[1]);
  };
  auto a = random_vec(n, 8);
  std::vector<float> mine(n), ortho(n, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = (1.f + 0.5f * r) * a[i];
    if (i % p == r) ortho[i] = a[i];
  }
  const auto [par_sum, par_count] = cosine(mine);
  if (p == 1) {
    EXPECT_EQ(par_count, 0);  // no tree, no pairs
    return;
  }
  EXPECT_GT(par_count, 0);
  EXPECT_NEAR(par_sum / par_count, 1.0, 1e-6);
  const auto [orth_sum, orth_count] = cosine(ortho);
  EXPECT_GT(orth_count, 0);
  EXPECT_NEAR(orth_sum / orth_count, 0.0, 1e-12);
  EXPECT_EQ(reducer->take_stats()[0].second, 0);  // taking resets
  // Only the first level counts: ranks 2j and 2j + 1 parallel, the pairs orthogonal to each other
  // (disjoint supports), so the first level's cosine is 1 and every later level's 0.
  if (p >= 4 && (p & (p - 1)) == 0) {
    std::vector<float> pairs(n, 0.f);
    for (int64_t i = 0; i < n; ++i)
      if (i % (p / 2) == r / 2) pairs[i] = (1.f + 0.5f * (r % 2)) * a[i];
    const auto [pair_sum, pair_count] = cosine(pairs);
    EXPECT_GT(pair_count, 0);
    EXPECT_NEAR(pair_sum / pair_count, 1.0, 1e-6) << "a later level's cosine was counted";
  }
}

TEST_P(Adasum, OppositePairsCancelAndZerosAreGuarded) {
  Communicator& c = world();
  const int r = c.rank();
  auto pair = c.split(r / 2, r);
  auto a = random_vec(11, 9);
  std::vector<float> mine = a;
  if (pair->size() == 2 && r % 2 == 1)
    for (auto& v : mine) v = -v;
  auto got = reduce_with("adasum", mine, {11}, *pair, GetParam());
  if (pair->size() == 2) {
    for (float v : got) EXPECT_NEAR(v, 0.f, 1e-6f);
  }
  // All-zero tensors stay zero (no NaN); one non-zero rank: adasum(0, b) = b throughout.
  const auto sizes = std::vector<int64_t>{4, 6};
  std::vector<float> zeros(10, 0.f);
  for (float v : reduce_with("adasum", zeros, sizes, world(), GetParam())) EXPECT_EQ(v, 0.f);
  auto b = random_vec(10, 10);
  std::vector<float> only_last = c.rank() == c.size() - 1 ? b : zeros;
  auto got2 = reduce_with("adasum", only_last, sizes, world(), GetParam());
  for (size_t i = 0; i < b.size(); ++i) EXPECT_NEAR(got2[i], b[i], 1e-6f * std::fabs(b[i]) + 1e-7f);
  // Tiny magnitudes (near FLT_MIN) keep their mean: double accumulation, no underflow to NaN.
  std::vector<float> tiny(10, FLT_MIN * 4 * (1 + c.rank()));
  double m = 0;
  for (int k = 0; k < c.size(); ++k) m += FLT_MIN * 4 * (1 + k) / c.size();
  for (float v : reduce_with("adasum", tiny, sizes, world(), GetParam()))
    EXPECT_NEAR(v, m, m * 1e-5);
}

TEST_P(Adasum, MatchesTheSequentialTreeAndIsPerTensor) {
  const int p = world().size(), r = world().rank();
  const auto sizes = bucket_sizes(p);
  const int64_t n = total(sizes);
  auto mine = random_vec(n, 200 + r);
  for (int64_t i = 0; i < n; ++i) mine[i] += 0.3f;  // correlated across ranks: non-trivial dots
  auto got = reduce_with("adasum", mine, sizes, world(), GetParam());
  auto all = gather_all(mine);
  auto want = tree_reference(all, sizes);
  int64_t off = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {  // per tensor, relative L2 within 1e-6
    std::vector<float> g(got.begin() + off, got.begin() + off + sizes[t]);
    std::vector<double> w(want.begin() + off, want.begin() + off + sizes[t]);
    expect_near_rel(g, w, 1e-6, "tree reference, tensor " + std::to_string(t));
    off += sizes[t];
  }
  expect_same_on_every_rank(got, "tree");
  if (p > 1) {
    // Treating the bucket as one vector gives a different answer: tensors are independent.
    auto fused = reduce_with("adasum", mine, {n}, world(), GetParam());
    double diff = 0;
    for (int64_t i = 0; i < n; ++i) diff = std::max(diff, double(std::fabs(fused[i] - got[i])));
    EXPECT_GT(diff, 1e-3);
  }
}

// A tiny two-layer model: parameters, a per-rank loss, and its backward with a hook.
struct TinyNet {
  std::vector<Variable> params;
  explicit TinyNet(int unused_extra = 0) {
    Generator g(5);  // same initial weights on every rank
    params.emplace_back(Tensor::randn({6, 5}, g, 0.f, 0.5f), true, "l1.weight");
    params.emplace_back(Tensor::randn({6}, g, 0.f, 0.5f), true, "l1.bias");
    params.emplace_back(Tensor::randn({3, 6}, g, 0.f, 0.5f), true, "l2.weight");
    params.emplace_back(Tensor::randn({3}, g, 0.f, 0.5f), true, "l2.bias");
    if (unused_extra) params.emplace_back(Tensor::randn({unused_extra}, g), true, "unused");
  }
  Variable loss(int rank) {
    Generator g(1000 + rank);
    Variable x(Tensor::randn({4, 5}, g));
    Variable h = fn::tanh(fn::linear(x, params[0], params[1]));
    Variable y = fn::linear(h, params[2], params[3]);
    return fn::mean(fn::mul(y, y), {0, 1});
  }
};

TEST(Bucketer, AssignmentIsGreedyWithSmallFirstBucket) {
  BucketOptions o{100, 40};  // bytes: 10 floats first, then 25
  auto b = assign_buckets({4, 4, 4, 20, 30, 1, 0}, o);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0], (std::vector<size_t>{0, 1}));
  EXPECT_EQ(b[1], (std::vector<size_t>{2, 3}));
  EXPECT_EQ(b[2], (std::vector<size_t>{4}));  // larger than the cap: alone
  EXPECT_EQ(b[3], (std::vector<size_t>{5, 6}));
  EXPECT_THROW(assign_buckets({1}, BucketOptions{0, 1}), ConfigError);
}

TEST(Bucketer, OverlappedBucketsEqualOneUnbucketedReduction) {
  Communicator& c = world();
  for (const char* name : {"sum", "average", "adasum"}) {
    auto reducer = make_reducer(name);
    TinyNet a(3), b(3);
    // a: many small buckets launched from the grad-ready hook during backward.
    GradBucketer small(a.params, c, *reducer, BucketOptions{48, 16});
    EXPECT_GT(small.bucket_count(), 2u);
    small.begin_step();
    backward(a.loss(c.rank()), {}, [&](Variable& p) { small.on_grad_ready(p); });
    small.finish();
    // b: one bucket holding everything, reduced after backward.
    GradBucketer one(b.params, c, *reducer, BucketOptions{1 << 30, 1 << 30});
    EXPECT_EQ(one.bucket_count(), 1u);
    one.begin_step();
    backward(b.loss(c.rank()));
    for (auto& p : b.params) one.on_grad_ready(p);
    one.finish();
    for (size_t i = 0; i < a.params.size(); ++i) {
      auto x = a.params[i].grad().to_vector<float>(), y = b.params[i].grad().to_vector<float>();
      for (size_t k = 0; k < x.size(); ++k)
        EXPECT_NEAR(x[k], y[k], 1e-6f * std::max(1.f, std::fabs(y[k]))) << name << " param " << i;
      expect_same_on_every_rank(x, std::string(name) + " bucketed");
    }
    // The unused parameter got a zero gradient rather than a hang.
    for (float v : a.params.back().grad().to_vector<float>()) EXPECT_EQ(v, 0.f);
  }
}

TEST(Bucketer, DeltaModeWithPlainSgdEqualsGradientMode) {
  Communicator& c = world();
  const float lr = 0.1f;
  for (const char* name : {"sum", "average", "adasum"}) {
    auto reducer = make_reducer(name);
    // Gradient mode: reduce gradients, then w -= lr * g.
    TinyNet g;
    GradBucketer gb(g.params, c, *reducer);
    gb.begin_step();
    backward(g.loss(c.rank()), {}, [&](Variable& p) { gb.on_grad_ready(p); });
    gb.finish();
    for (auto& p : g.params) ops::axpby_(-lr, p.grad(), 1.f, p.mutable_value());
    // Delta mode: local step, reduce the deltas, w = w0 + reduced delta.
    TinyNet d;
    std::vector<Tensor> w0, delta;
    backward(d.loss(c.rank()));
    for (auto& p : d.params) {
      w0.push_back(p.value().clone());
      ops::axpby_(-lr, p.grad(), 1.f, p.mutable_value());
      delta.push_back(ops::sub(p.value(), w0.back()));
    }
    GradBucketer db(d.params, c, *reducer);
    db.reduce(delta);
    for (size_t i = 0; i < d.params.size(); ++i) {
      Tensor w = ops::add(w0[i], delta[i]);
      auto x = w.to_vector<float>(), y = g.params[i].value().to_vector<float>();
      for (size_t k = 0; k < x.size(); ++k)
        EXPECT_NEAR(x[k], y[k], 1e-6f * std::max(1.f, std::fabs(y[k]))) << name << " param " << i;
    }
  }
}

TEST(Bucketer, GradsAreBucketViewsAndAccumulatedGradsSurvive) {
  Communicator& c = world();
  auto reducer = make_reducer("sum");
  TinyNet net(2);
  GradBucketer b(net.params, c, *reducer, BucketOptions{64, 32});
  for (auto& p : net.params) ASSERT_TRUE(p.grad().defined()) << p.name();
  // Two micro-batches accumulate; only the second reports readiness. The "unused" parameter
  // got a gradient by hand in the first one and must keep it.
  backward(net.loss(c.rank()));
  ops::fill_(net.params.back().grad(), 0.5f);
  b.begin_step();
  backward(net.loss(c.rank()), {}, [&](Variable& p) { b.on_grad_ready(p); });
  b.finish();
  for (float v : net.params.back().grad().to_vector<float>()) EXPECT_EQ(v, 0.5f * c.size());
  // Same gradients computed without buckets: 2 * sum over ranks of each rank's gradient.
  TinyNet ref(2);
  backward(ref.loss(c.rank()));
  for (size_t i = 0; i + 1 < ref.params.size(); ++i) {
    Tensor g = ops::scale(ref.params[i].grad(), 2.f);
    c.allreduce(g);
    auto x = net.params[i].grad().to_vector<float>(), y = g.to_vector<float>();
    for (size_t k = 0; k < x.size(); ++k)
      EXPECT_NEAR(x[k], y[k], 1e-5f * std::max(1.f, std::fabs(y[k])));
  }
}

TEST(Reducers, RegistryListsKnownNames) {
  try {
    registry().get("adasumm", "config x.yaml: reducer.name (line 5, column 9)");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown reducer 'adasumm'; known: adasum, average, sum"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ada::comm
