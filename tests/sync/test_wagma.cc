// WAGMA-SGD, local SGD and DiLoCo under mpiexec: the group schedule against the paper's worked
// example; log_S P consecutive group averages equal the global average; a global step makes the
// replicas bit-identical; a late rank's (sum + own) / (S + 1) rule, made deterministic by letting
// its communication thread run the group average before it arrives; local SGD with H = 1 equals
// averaging gradients for plain SGD; DiLoCo's outer Nesterov step against a hand-computed one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "comm/bucketer.h"
#include "core/ops.h"
#include "dist_test_util.h"
#include "optim/optimizer.h"
#include "sync/delta_sync.h"
#include "sync/wagma_agent.h"
#include "sync/wagma_schedule.h"

namespace ada::sync {
namespace {

using testing::world;

bool pow2(int p) {
  return p >= 1 && (p & (p - 1)) == 0;
}

TEST(WagmaSchedule, MatchesThePapersExampleAndPartitionsTheRanks) {
  WagmaSchedule s(8, 4);
  EXPECT_EQ(s.groups(0), (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(s.groups(1), (std::vector<std::vector<int>>{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(s.describe(1), "{0,1,4,5} {2,3,6,7}");
  EXPECT_EQ(s.set_count(), 3);
  EXPECT_EQ(s.groups(3), s.groups(0));  // the bit sets repeat every k / gcd(k, m) iterations
  for (int p : {1, 2, 4, 8, 16, 64})
    for (int g = 1; g <= p; g *= 2) {
      WagmaSchedule w(p, g);
      for (int64_t t = 0; t < 7; ++t) {
        std::vector<int> seen(static_cast<size_t>(p), 0);
        const auto groups = w.groups(t);
        EXPECT_EQ(static_cast<int>(groups.size()), p / g);
        for (const auto& grp : groups) {
          EXPECT_EQ(static_cast<int>(grp.size()), g);
          for (int r : grp) {
            ++seen[static_cast<size_t>(r)];
            EXPECT_EQ(w.members(r, t), grp);  // membership is symmetric
            EXPECT_EQ(w.color(r, w.set_index(t)), w.color(grp[0], w.set_index(t)));
          }
        }
        for (int c : seen) EXPECT_EQ(c, 1);
      }
    }
  EXPECT_THROW(WagmaSchedule(6, 2), ConfigError);
  EXPECT_THROW(WagmaSchedule(8, 3), ConfigError);
  EXPECT_THROW(WagmaSchedule(8, 16), ConfigError);
  EXPECT_THROW(WagmaSchedule(8, 2, 0), ConfigError);
}

// A rank-distinct vector with integer values (sums are exact in float).
Tensor rank_vector(int rank, int n = 6) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<float>(rank * 8 + i));
  return Tensor::from_vector<float>(v, {n});
}

// WAGMA runs on power-of-two worlds only; on the others (test_sync_np3) the agent tests check
// instead that this world is refused with a ConfigError, as the trainer refuses it.
bool wagma_runs_here(int p, int group = 1) {
  if (pow2(p) && group <= p) return true;
  EXPECT_THROW(WagmaSchedule(p, group), ConfigError) << p << " ranks, groups of " << group;
  return false;
}

TEST(WagmaAgent, LogSPConsecutiveGroupAveragesEqualTheGlobalAverage) {
  auto& c = world();
  const int p = c.size();
  if (!wagma_runs_here(p)) return;
  for (int s = 2; s <= p; s *= 2) {
    WagmaSchedule sched(p, s);
    Tensor x = rank_vector(c.rank());
    WagmaAgent agent(c, sched, x, /*wait_avoiding=*/false);
    int levels = 0;
    for (int q = 1; q < p; q *= s) ++levels;  // ceil(log_S P)
    for (int t = 0; t < levels; ++t) agent.step(t, x);
    // Global mean of rank*8 + i over ranks: 8 (p-1)/2 + i.
    auto v = x.to_vector<float>();
    for (int i = 0; i < 6; ++i)
      EXPECT_FLOAT_EQ(v[i], 4.f * (p - 1) + i) << "S=" << s << " after " << levels << " steps";
  }
}

TEST(WagmaAgent, GlobalStepMakesReplicasBitIdentical) {
  auto& c = world();
  if (!wagma_runs_here(c.size())) return;
  WagmaSchedule sched(c.size(), std::min(2, c.size()), /*global_every=*/3);
  Generator g(11 + c.rank(), 0);
  Tensor x = Tensor::randn({1000}, g);
  for (bool wa : {false, true}) {
    WagmaAgent agent(c, sched, x, wa);
    for (int t = 0; t < 3; ++t) {
      ops::scale_(x, 1.01f);  // a "local step"
      agent.step(t, x);
    }
    agent.finish();
    Tensor all = Tensor::empty({1000 * c.size()});
    c.allgather(x, all);
    auto v = all.to_vector<float>();
    for (int r = 1; r < c.size(); ++r)
      EXPECT_EQ(0, std::memcmp(v.data(), v.data() + 1000 * r, 1000 * sizeof(float)))
          << "rank " << r;
  }
}

TEST(WagmaAgent, ALateRankMixesItsFreshModelIn) {
  auto& c = world();
  const int p = c.size();
  const int s = 2, late = p - 1;
  if (!wagma_runs_here(p, s)) return;  // 1 rank: no group of 2; 3 ranks: not a power of two
  WagmaSchedule sched(p, s);
  Tensor x = rank_vector(c.rank());
  const Tensor initial = x.clone();
  WagmaAgent agent(c, sched, x, /*wait_avoiding=*/true);
  // The late rank's "local step" makes a fresh model; it waits until its communication thread
  // has run the group average (activated by its partner) with its initial model, then arrives.
  Tensor fresh = c.rank() == late ? ops::scale(x, 3.f) : x.clone();
  if (c.rank() == late) agent.wait_executed(0);
  const bool was_late = agent.step(0, fresh);
  const auto group = sched.members(c.rank(), 0);
  const bool in_late_group = std::find(group.begin(), group.end(), late) != group.end();
  // The late rank is late, its partner on time (nobody activates that group before the partner
  // arrives). Another pair's member may be late too when its partner's activation runs before
  // it steps (its communication thread polls while it is descheduled under -j2): its result
  // must then follow the late formula, with its fresh model equal to its initial one.
  if (c.rank() == late || in_late_group) {
    EXPECT_EQ(was_late, c.rank() == late);
  }
  std::vector<float> sum(6, 0.f);
  for (int m : group) {
    auto v = rank_vector(m).to_vector<float>();  // everyone's initial (= published) model
    for (int i = 0; i < 6; ++i) sum[i] += v[i];
  }
  auto got = fresh.to_vector<float>();
  const float own_factor = c.rank() == late ? 3.f : 1.f;  // its fresh model over its initial one
  for (int i = 0; i < 6; ++i) {
    float want;
    if (was_late)
      want =
          (sum[i] + own_factor * initial.to_vector<float>()[i]) / (s + 1);  // (sum + own) / (S + 1)
    else
      want = sum[i] / s;  // on time: sum / S (the late member's stale model is in the sum)
    EXPECT_FLOAT_EQ(got[i], want) << "rank " << c.rank()
                                  << (in_late_group ? " (late rank's group)" : "");
  }
  agent.finish();
  EXPECT_EQ(agent.late_steps(), was_late ? 1 : 0);
}

std::unique_ptr<optim::Optimizer> plain_sgd(double lr) {
  optim::OptimizerRegistry r("optimizer");
  optim::register_builtin_optimizers(r);
  return optim::make_optimizer(
      r, Config::parse("{name: sgd, lr: " + std::to_string(lr) + ", momentum: 0}", "test"));
}

std::unique_ptr<comm::Reducer> reducer(const std::string& name) {
  comm::ReducerRegistry r("reducer");
  comm::register_builtin_reducers(r);
  return r.get(name)(Config::parse("{name: " + name + "}", "test"));
}

// Two parameters whose gradient on rank r is a fixed function of (r, step).
struct TwoParams {
  std::vector<Param> params;
  TwoParams() {
    params.push_back(
        {"a", Variable(Tensor::from_vector<float>({1.f, -2.f, 0.5f}, {3}), true, "a"), true});
    params.push_back(
        {"b", Variable(Tensor::from_vector<float>({0.25f, 4.f}, {2}), true, "b"), true});
  }
  void set_grads(int rank, int step) {
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<float> g;
      for (int k = 0; k < params[i].var.value().numel(); ++k)
        g.push_back(std::sin(1.f + rank + 0.7f * step + 1.3f * k + 2.f * i));
      params[i].var.grad() = Tensor::from_vector<float>(g, params[i].var.value().shape());
    }
  }
};

// Local SGD over `m` with period `period` (the after-backward path: a clipping threshold that
// never clips, no hook in these tests).
std::unique_ptr<DeltaSync> local_sgd(TwoParams& m, optim::Optimizer& opt, comm::Reducer& red,
                                     int period) {
  DeltaSyncOptions d;
  d.period = period;
  d.name = "local_sgd";
  StrategyOptions so;
  so.clip_grad_norm = 1e30;
  return std::make_unique<DeltaSync>(StrategyContext{m.params, opt, world(), red}, so, d);
}

void expect_params_near(const TwoParams& got, const TwoParams& want) {
  for (size_t i = 0; i < 2; ++i) {
    auto x = got.params[i].var.value().to_vector<float>(),
         y = want.params[i].var.value().to_vector<float>();
    for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(x[k], y[k], 1e-6f) << "param " << i;
  }
}

TEST(LocalSgd, PeriodOneWithPlainSgdEqualsGradientAveraging) {
  auto& c = world();
  TwoParams local, ref;
  auto opt = plain_sgd(0.1), opt_ref = plain_sgd(0.1);
  auto avg = reducer("average");
  auto s = local_sgd(local, *opt, *avg, 1);
  for (int step = 0; step < 4; ++step) {
    local.set_grads(c.rank(), step);
    s->begin_step(step, 0.1f);
    s->end_step(1.0);
    ref.set_grads(c.rank(), step);
    for (auto& p : ref.params) {
      Tensor g = p.var.grad().clone();
      c.allreduce(g);
      ops::scale_(g, 1.f / c.size());
      p.var.grad() = g;
    }
    opt_ref->step(ref.params, 0.1f);
  }
  expect_params_near(local, ref);
}

// Local SGD with a period of 2 and Adasum: each round's delta is taken from the last
// synchronisation's model (the anchor moves there), so Adasum combines only that round's local
// changes. (With averaging a stale anchor changes only the rounding; Adasum is not linear.) The
// reference steps each rank by hand and reduces the deltas through the same reducer.
TEST(LocalSgd, AdasumTakesEachRoundsDeltaFromTheLastSynchronisation) {
  auto& c = world();
  TwoParams local, ref;
  auto opt = plain_sgd(0.1), opt_ref = plain_sgd(0.1);
  auto ada = reducer("adasum"), ada_ref = reducer("adasum");
  auto s = local_sgd(local, *opt, *ada, 2);
  std::vector<Variable> vars;
  for (auto& p : ref.params) vars.push_back(p.var);
  comm::GradBucketer b(vars, c, *ada_ref, comm::BucketOptions{});
  std::vector<Tensor> anchor;
  for (auto& p : ref.params) anchor.push_back(p.var.value().clone());
  for (int step = 0; step < 6; ++step) {
    local.set_grads(c.rank(), step);
    s->begin_step(step, 0.1f);
    s->end_step(1.0);
    ref.set_grads(c.rank(), step);
    opt_ref->step(ref.params, 0.1f);
    if (step % 2 == 1) {
      std::vector<Tensor> delta;
      for (size_t i = 0; i < 2; ++i)
        delta.push_back(ops::sub(ref.params[i].var.value(), anchor[i]));
      b.reduce(delta);
      for (size_t i = 0; i < 2; ++i) {
        Tensor& w = ref.params[i].var.mutable_value();
        w.copy_from(anchor[i]);
        ops::add_(w, delta[i]);
        anchor[i].copy_from(w);
      }
    }
  }
  expect_params_near(local, ref);
}

void outer_step_matches_a_hand_computed_one(bool nesterov) {
  auto& c = world();
  TwoParams m;
  auto opt = plain_sgd(0.1);
  auto avg = reducer("average");
  DeltaSyncOptions d;
  d.period = 2;
  d.outer = true;
  d.outer_lr = 0.7;
  d.outer_momentum = 0.9;
  d.nesterov = nesterov;
  d.name = "diloco";
  DeltaSync s(StrategyContext{m.params, *opt, c, *avg}, StrategyOptions{}, d);
  // Reference in double: two outer rounds of two inner plain-SGD steps.
  std::vector<std::vector<double>> anchor(2), mom(2);
  for (size_t i = 0; i < 2; ++i) {
    for (float v : m.params[i].var.value().to_vector<float>()) anchor[i].push_back(v);
    mom[i].assign(anchor[i].size(), 0.0);
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<double>> mean_delta(2);
    for (size_t i = 0; i < 2; ++i) mean_delta[i].assign(anchor[i].size(), 0.0);
    for (int r = 0; r < c.size(); ++r) {
      TwoParams probe;  // rank r's inner steps from the anchor
      std::vector<std::vector<double>> w = anchor;
      for (int k = 0; k < 2; ++k) {
        probe.set_grads(r, 2 * round + k);
        for (size_t i = 0; i < 2; ++i) {
          auto g = probe.params[i].var.grad().to_vector<float>();
          for (size_t e = 0; e < g.size(); ++e) w[i][e] -= 0.1 * g[e];
        }
      }
      for (size_t i = 0; i < 2; ++i)
        for (size_t e = 0; e < w[i].size(); ++e)
          mean_delta[i][e] += (w[i][e] - anchor[i][e]) / c.size();
    }
    for (size_t i = 0; i < 2; ++i)
      for (size_t e = 0; e < anchor[i].size(); ++e) {
        const double g = -mean_delta[i][e];  // outer gradient
        mom[i][e] = 0.9 * mom[i][e] + g;
        anchor[i][e] -= 0.7 * (nesterov ? g + 0.9 * mom[i][e] : mom[i][e]);
      }
    for (int k = 0; k < 2; ++k) {
      m.set_grads(c.rank(), 2 * round + k);
      s.begin_step(2 * round + k, 0.1f);
      s.end_step(1.0);
      EXPECT_EQ(s.replicas_identical(), k == 1);
    }
  }
  for (size_t i = 0; i < 2; ++i) {
    auto x = m.params[i].var.value().to_vector<float>();
    for (size_t e = 0; e < x.size(); ++e)
      EXPECT_NEAR(x[e], anchor[i][e], 2e-5) << "param " << i << "[" << e << "]";
  }
}

// DiLoCo's outer step, SGD with momentum on the outer gradient, Nesterov's form and the plain
// one, against a hand computation in double.
TEST(DiLoCo, OuterMomentumStepMatchesAHandComputedOne) {
  for (const bool nesterov : {true, false}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "plain momentum");
    outer_step_matches_a_hand_computed_one(nesterov);
  }
}

}  // namespace
}  // namespace ada::sync
