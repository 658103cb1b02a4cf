// Data-parallel strategies under mpiexec (1..8 ranks): gradient sync equals "reduce gradients,
// then step"; delta sync — overlapped with backward — equals the reference "local step, reduce
// the per-tensor deltas, w = start + reduced delta" bit for bit (for SGD with momentum, Adam and
// LAMB, with every reducer, with micro-batches), equals its own synchronous path bit for bit,
// keeps replicas identical while optimizer state stays local, and stops every rank on NaN; loss
// scaling changes no bit and turns one rank's overflow into a step every rank skips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "comm/mpi_communicator.h"
#include "core/functional.h"
#include "core/ops.h"
#include "dist_test_util.h"
#include "nn/model.h"
#include "optim/optimizer.h"
#include "sync/delta_sync.h"
#include "sync/strategy.h"

namespace ada::sync {
namespace {

using testing::world;

std::unique_ptr<comm::Reducer> reducer(const std::string& name) {
  comm::ReducerRegistry r("reducer");
  comm::register_builtin_reducers(r);
  return r.get(name)(Config::parse("{name: " + name + "}", "test"));
}

std::unique_ptr<optim::Optimizer> optimizer(const std::string& yaml) {
  optim::OptimizerRegistry r("optimizer");
  optim::register_builtin_optimizers(r);
  return optim::make_optimizer(r, Config::parse(yaml, "test"));
}

std::unique_ptr<nn::Model> model(const std::string& name) {
  nn::ModelRegistry r("model");
  nn::register_builtin_models(r);
  return r.get(name)(Config::parse("{name: " + name + "}", "test"), 7);
}

// A batch that differs per rank and per step (images N(0,1), labels in [0,10)).
nn::TensorMap batch(int rank, int step, int micro) {
  Generator g(1000 + 97 * rank + 13 * step + micro, 0);
  Tensor x = Tensor::randn({4, 1, 28, 28}, g);
  std::vector<int64_t> labels;
  for (int i = 0; i < 4; ++i) labels.push_back((rank * 3 + step * 7 + micro + i) % 10);
  return {{"image", x}, {"label", Tensor::from_vector<int64_t>(labels, {4})}};
}

std::vector<float> flat(const std::vector<Param>& ps) {
  std::vector<float> v;
  for (const auto& p : ps) {
    auto x = p.var.value().to_vector<float>();
    v.insert(v.end(), x.begin(), x.end());
  }
  return v;
}

void expect_bits_equal(const std::vector<float>& a, const std::vector<float>& b,
                       const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << a.size() << " values differ, first at "
                     << first << " (" << a[first] << " vs " << b[first] << ")";
}

void expect_same_on_every_rank(const std::vector<float>& v, const std::string& what) {
  auto& c = world();
  Tensor in = Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
  Tensor all = Tensor::empty({static_cast<int64_t>(v.size()) * c.size()});
  c.allgather(in, all);
  auto x = all.to_vector<float>();
  for (int r = 1; r < c.size(); ++r)
    ASSERT_EQ(0, std::memcmp(x.data(), x.data() + r * v.size(), v.size() * sizeof(float)))
        << what << ": rank " << r << " differs from rank 0";
}

// Runs `steps` steps of `model_name` through a strategy; returns the final weights.
std::vector<float> run_strategy(const std::string& model_name, const std::string& opt_yaml,
                                const std::string& red, comm::ReduceTarget target,
                                StrategyOptions so, int steps, int micro,
                                bool* overlapped = nullptr) {
  auto& c = world();
  auto m = model(model_name);
  auto params = m->parameters();
  auto opt = optimizer(opt_yaml);
  auto r = reducer(red);
  so.buckets.bucket_bytes = 20000;  // several buckets even for LeNet
  so.buckets.first_bucket_bytes = 4000;
  auto s = make_strategy(target, {params, *opt, c, *r}, so);
  if (overlapped) *overlapped = s->overlaps_backward();
  for (int step = 0; step < steps; ++step) {
    m->zero_grad();
    s->begin_step(step, 0.05f);
    double loss = 0;
    for (int k = 0; k < micro; ++k) {
      auto out = m->forward(batch(c.rank(), step, k));
      loss += out.loss.value().item();
      Tensor seed;  // loss scaling: backward starts from S, as the trainer does it
      if (so.loss_scale) seed = Tensor::full({}, so.loss_scale->scale());
      if (s->overlaps_backward() && k == micro - 1)
        backward(out.loss, seed, [&](Variable& p) { s->on_grad_ready(p); });
      else
        backward(out.loss, seed);
    }
    StepResult res = s->end_step(loss / micro);
    EXPECT_TRUE(res.applied);
  }
  return flat(params);
}

// The delta mode the trainer had before the strategy layer: clone, step, subtract, reduce the
// deltas through the same buckets, copy back and add.
std::vector<float> run_reference_delta(const std::string& model_name, const std::string& opt_yaml,
                                       const std::string& red, int steps, int micro) {
  auto& c = world();
  auto m = model(model_name);
  auto params = m->parameters();
  auto opt = optimizer(opt_yaml);
  auto r = reducer(red);
  std::vector<Variable> vars;
  for (auto& p : params) vars.push_back(p.var);
  comm::GradBucketer b(vars, c, *r, comm::BucketOptions{20000, 4000});
  for (int step = 0; step < steps; ++step) {
    m->zero_grad();
    for (int k = 0; k < micro; ++k) backward(m->forward(batch(c.rank(), step, k)).loss);
    std::vector<Tensor> before, delta;
    for (auto& p : params) before.push_back(p.var.value().clone());
    opt->step(params, 0.05f);
    for (size_t i = 0; i < params.size(); ++i)
      delta.push_back(ops::sub(params[i].var.value(), before[i]));
    b.reduce(delta);
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor& w = params[i].var.mutable_value();
      w.copy_from(before[i]);
      ops::add_(w, delta[i]);
    }
  }
  return flat(params);
}

// Gradient mode by hand: reduce all gradients through the buckets after backward, then step.
std::vector<float> run_reference_gradients(const std::string& model_name,
                                           const std::string& opt_yaml, const std::string& red,
                                           int steps, int micro) {
  auto& c = world();
  auto m = model(model_name);
  auto params = m->parameters();
  auto opt = optimizer(opt_yaml);
  auto r = reducer(red);
  std::vector<Variable> vars;
  for (auto& p : params) vars.push_back(p.var);
  comm::GradBucketer b(vars, c, *r, comm::BucketOptions{20000, 4000});
  for (int step = 0; step < steps; ++step) {
    m->zero_grad();
    b.begin_step();
    for (int k = 0; k < micro; ++k) backward(m->forward(batch(c.rank(), step, k)).loss);
    b.finish();
    opt->step(params, 0.05f);
  }
  return flat(params);
}

const char* kOptimizers[] = {"{name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0001}",
                             "{name: adam, lr: 0.001}", "{name: lamb, lr: 0.01}"};

TEST(DeltaSync, OverlappedEqualsTheReferenceDeltaModeBitForBit) {
  for (const char* opt : kOptimizers)
    for (const char* red : {"adasum", "average", "sum"}) {
      const std::string what = std::string(opt) + " " + red;
      bool overlapped = false;
      auto got =
          run_strategy("lenet5", opt, red, comm::ReduceTarget::model_delta, {}, 3, 1, &overlapped);
      EXPECT_TRUE(overlapped) << what;
      expect_bits_equal(got, run_reference_delta("lenet5", opt, red, 3, 1), what);
      expect_same_on_every_rank(got, what);
    }
}

TEST(DeltaSync, MicroBatchesAndBatchNormEqualTheReference) {
  const char* opt = kOptimizers[0];
  auto got =
      run_strategy("resnet20_mnist", opt, "adasum", comm::ReduceTarget::model_delta, {}, 2, 2);
  expect_bits_equal(got, run_reference_delta("resnet20_mnist", opt, "adasum", 2, 2),
                    "resnet20 x2 micro");
  expect_same_on_every_rank(got, "resnet20 delta");
}

TEST(DeltaSync, SynchronousPathGivesTheSameBits) {
  // A clipping threshold far above the gradient norm never clips, but forces the path that
  // steps after backward.
  StrategyOptions clip;
  clip.clip_grad_norm = 1e30;
  for (const char* opt : kOptimizers) {
    bool overlapped = true;
    auto sync = run_strategy("lenet5", opt, "adasum", comm::ReduceTarget::model_delta, clip, 3, 1,
                             &overlapped);
    EXPECT_FALSE(overlapped);
    auto over = run_strategy("lenet5", opt, "adasum", comm::ReduceTarget::model_delta, {}, 3, 1);
    expect_bits_equal(sync, over, opt);
  }
}

TEST(DeltaSync, OptimizerStateStaysLocal) {
  auto& c = world();
  if (c.size() == 1) {
    GTEST_SUCCEED() << "one rank: nothing to compare";
    return;
  }
  auto m = model("lenet5");
  auto params = m->parameters();
  auto opt = optimizer(kOptimizers[1]);
  auto r = reducer("adasum");
  auto s = make_strategy(comm::ReduceTarget::model_delta, {params, *opt, c, *r}, {});
  EXPECT_TRUE(s->optimizer_state_is_local());
  m->zero_grad();
  s->begin_step(0, 0.01f);
  backward(m->forward(batch(c.rank(), 0, 0)).loss, {}, [&](Variable& p) { s->on_grad_ready(p); });
  s->end_step(0);
  expect_same_on_every_rank(flat(params), "weights");
  // Adam's first moment is this rank's own gradient: it differs between ranks.
  auto st = opt->state();
  std::vector<float> m1;
  for (auto& [name, t] : st.tensors)
    if (name.find("exp_avg") != std::string::npos && name.find("exp_avg_sq") == std::string::npos) {
      auto v = t.to_vector<float>();
      m1.insert(m1.end(), v.begin(), v.end());
    }
  Tensor in = Tensor::from_vector<float>(m1, {static_cast<int64_t>(m1.size())});
  Tensor all = Tensor::empty({static_cast<int64_t>(m1.size()) * c.size()});
  c.allgather(in, all);
  auto x = all.to_vector<float>();
  EXPECT_NE(0, std::memcmp(x.data(), x.data() + m1.size(), m1.size() * sizeof(float)));
}

TEST(ReduceTarget, AdasumTargetDefaultsToGradientsForSgdAndModelDeltaForAdaptiveOptimizers) {
  auto target = [](const std::string& red, const std::string& opt, const std::string& extra = "") {
    Config root = Config::parse(
        "{optimizer: {name: " + opt + "}, reducer: {name: " + red + extra + "}}", "test");
    return read_target(root.child("reducer"), *reducer(red), opt);
  };
  using comm::ReduceTarget;
  EXPECT_EQ(target("adasum", "sgd"), ReduceTarget::gradients);  // measured: mnist_lenet_scaling
  for (const char* opt : {"adam", "adamw", "lamb"})
    EXPECT_EQ(target("adasum", opt), ReduceTarget::model_delta) << opt;
  EXPECT_EQ(target("adasum", "sgd", ", target: model_delta"),
            ReduceTarget::model_delta);  // asked for
  EXPECT_EQ(target("adasum", "lamb", ", target: gradients"), ReduceTarget::gradients);
  for (const char* red : {"average", "sum"}) {
    EXPECT_EQ(target(red, "sgd"), ReduceTarget::gradients) << red;
    EXPECT_EQ(target(red, "adam"), ReduceTarget::gradients) << red;
  }
}

TEST(GradientSync, EqualsReduceThenStepBitForBit) {
  for (const char* opt : kOptimizers)
    for (const char* red : {"adasum", "average", "sum"}) {
      const std::string what = std::string(opt) + " " + red;
      auto got = run_strategy("lenet5", opt, red, comm::ReduceTarget::gradients, {}, 3, 2);
      expect_bits_equal(got, run_reference_gradients("lenet5", opt, red, 3, 2), what);
      expect_same_on_every_rank(got, what);
    }
}

TEST(Strategies, NonFiniteLossOnOneRankStopsEveryRankOrSkips) {
  auto& c = world();
  for (auto target : {comm::ReduceTarget::gradients, comm::ReduceTarget::model_delta})
    for (bool skip : {false, true}) {
      auto m = model("lenet5");
      auto params = m->parameters();
      auto before = flat(params);
      auto opt = optimizer(kOptimizers[0]);
      auto r = reducer("adasum");
      StrategyOptions so;
      so.skip_nonfinite = skip;
      auto s = make_strategy(target, {params, *opt, c, *r}, so);
      m->zero_grad();
      s->begin_step(5, 0.05f);  // index 5: the messages' step 6 (they count from 1, as the log)
      auto out = m->forward(batch(c.rank(), 0, 0));
      // The last rank's loss (and so its gradients) is NaN.
      Variable loss = c.rank() == c.size() - 1 ? fn::scale(out.loss, std::nanf("")) : out.loss;
      if (s->overlaps_backward())
        backward(loss, {}, [&](Variable& p) { s->on_grad_ready(p); });
      else
        backward(loss);
      const double l = loss.value().item();
      if (skip) {
        StepResult res = s->end_step(l);
        EXPECT_FALSE(res.applied);
        expect_bits_equal(flat(params), before, "skipped step leaves the weights");
      } else {
        try {
          s->end_step(l);
          ADD_FAILURE() << "expected an error on every rank";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("step 6: the loss or a gradient is NaN/Inf"),
                    std::string::npos)
              << e.what();
        }
      }
    }
}

// Power-of-two loss scales are exact: a run whose scale grows from 2^10 takes the same steps, bit
// for bit, as one without scaling — for every reducer (sum, average and Adasum are homogeneous
// in their inputs), both targets, micro-batches and batch-norm; with gradient clipping that
// clips (at 0.01), which must see the unscaled gradients.
TEST(LossScaling, PowerOfTwoScalesChangeNoBit) {
  struct Case {
    const char* model;
    const char* opt;
    const char* red;
    comm::ReduceTarget target;
    int micro;
    double clip = 0;
  };
  const Case cases[] = {
      {"lenet5", kOptimizers[0], "adasum", comm::ReduceTarget::gradients, 1},
      {"lenet5", kOptimizers[1], "average", comm::ReduceTarget::gradients, 2},
      {"lenet5", kOptimizers[2], "sum", comm::ReduceTarget::gradients, 1},
      {"lenet5", kOptimizers[1], "adasum", comm::ReduceTarget::model_delta, 1},
      {"resnet20_mnist", kOptimizers[0], "adasum", comm::ReduceTarget::gradients, 1},
      {"lenet5", kOptimizers[1], "average", comm::ReduceTarget::gradients, 1, 0.01},
      {"lenet5", kOptimizers[0], "adasum", comm::ReduceTarget::model_delta, 1, 0.01}};
  for (const Case& k : cases) {
    const std::string what =
        std::string(k.model) + " " + k.opt + " " + k.red +
        (k.target == comm::ReduceTarget::gradients ? " gradients" : " model_delta") +
        (k.clip > 0 ? " clipped" : "");
    optim::LossScaler scaler({/*dynamic=*/true, /*init=*/1024, /*growth_interval=*/2});
    StrategyOptions so, plain;
    so.loss_scale = &scaler;
    so.clip_grad_norm = plain.clip_grad_norm = k.clip;
    const int steps = k.model == std::string("lenet5") ? 5 : 2;
    bool overlapped = true;
    auto scaled = run_strategy(k.model, k.opt, k.red, k.target, so, steps, k.micro, &overlapped);
    // Gradient sync still overlaps; delta sync agrees on overflows before any local step.
    EXPECT_EQ(overlapped, k.target == comm::ReduceTarget::gradients) << what;
    EXPECT_EQ(scaler.scale(), 1024.0 * (1 << (steps / 2)))
        << what << ": doubles every 2 good steps";
    EXPECT_EQ(scaler.overflows(), 0) << what;
    expect_bits_equal(scaled, run_strategy(k.model, k.opt, k.red, k.target, plain, steps, k.micro),
                      what);
  }
}

// One rank's overflow (its loss, so its gradients, Inf) skips the step on every rank with
// dynamic scaling — weights untouched, scale halved everywhere, no error even with
// on_nonfinite: stop — and the next step goes ahead. At scale 1, or with a static scale, it is a
// non-finite step like any other.
TEST(LossScaling, OverflowOnOneRankSkipsTheStepEverywhereAndHalvesTheScale) {
  auto& c = world();
  for (auto target : {comm::ReduceTarget::gradients, comm::ReduceTarget::model_delta})
    for (double init : {256.0, 1.0})
      for (bool dynamic : {true, false}) {
        const std::string what =
            std::string(target == comm::ReduceTarget::gradients ? "gradients" : "model_delta") +
            (dynamic ? " dynamic from " : " static ") + std::to_string(init);
        auto m = model("lenet5");
        auto params = m->parameters();
        auto opt = optimizer(kOptimizers[0]);
        auto r = reducer("adasum");
        optim::LossScaler scaler({dynamic, init, 2000});
        StrategyOptions so;
        so.loss_scale = &scaler;
        auto s = make_strategy(target, {params, *opt, c, *r}, so);
        auto step = [&](int n, bool overflow) {
          m->zero_grad();
          s->begin_step(n, 0.05f);
          auto out = m->forward(batch(c.rank(), n, 0));
          Variable loss =
              overflow && c.rank() == c.size() - 1 ? fn::scale(out.loss, INFINITY) : out.loss;
          const Tensor seed = Tensor::full({}, scaler.scale());
          if (s->overlaps_backward())
            backward(loss, seed, [&](Variable& p) { s->on_grad_ready(p); });
          else
            backward(loss, seed);
          return s->end_step(loss.value().item());
        };
        const auto before = flat(params);
        if (dynamic && init > 1) {
          EXPECT_FALSE(step(0, true).applied) << what;
          expect_bits_equal(flat(params), before, what + ": the skipped step leaves the weights");
          EXPECT_EQ(scaler.scale(), init / 2) << what;
          EXPECT_EQ(scaler.overflows(), 1) << what;
          EXPECT_TRUE(step(1, false).applied) << what;
          expect_same_on_every_rank(flat(params), what);
        } else {
          try {
            step(0, true);
            ADD_FAILURE() << what << ": expected the non-finite error on every rank";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("step 1: the loss or a gradient is NaN/Inf"),
                      std::string::npos)
                << what << ": " << e.what();
          }
          EXPECT_EQ(scaler.scale(), init) << what;
        }
      }
}

}  // namespace
}  // namespace ada::sync
