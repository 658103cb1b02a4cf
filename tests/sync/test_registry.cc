// A new sync is one file plus one registry line: this file holds a whole one (a Strategy that
// averages the models every `every` steps, and the reader of its section), the test registers
// it with one line and builds it from a config through read_sync, as the trainer does. Also the
// built-in names, and refusals that name the key.
#include <gtest/gtest.h>

#include <cstring>

#include "core/functional.h"
#include "dist_test_util.h"
#include "nn/model.h"
#include "optim/optimizer.h"
#include "sync/model_average.h"
#include "sync/registry.h"

namespace ada::sync {
namespace {

using testing::world;

// ---- the new sync: one class and its reader --------------------------------------------------
class EveryKAverage : public Strategy, public CarriedState {
 public:
  EveryKAverage(const StrategyContext& c, int64_t every) : ctx_(c), every_(every) {
    description_ = "average every " + std::to_string(every) + " steps";
    local_optimizer_state_ = true;
  }
  void begin_step(int64_t step, float lr) override {
    step_ = step;
    lr_ = lr;
  }
  StepResult end_step(double) override {
    ctx_.optimizer.step(ctx_.params, lr_);
    synced_ = (step_ + 1) % every_ == 0;
    if (synced_) average_parameters(ctx_.params, ctx_.world);
    return {};
  }
  CarriedState* carried() override { return this; }
  bool replicas_identical() const override { return synced_; }
  NamedTensors state() const override { return {}; }
  void load_state(const NamedTensors&) override {}
  void with_average_model(const std::function<void()>& fn) override {
    with_world_average(ctx_.params, ctx_.world, fn);
  }

 private:
  StrategyContext ctx_;
  int64_t every_, step_ = 0;
  float lr_ = 0;
  bool synced_ = true;
};

StrategyMaker read_every_k_average(const SyncRequest& r) {
  check_averaging_sync(r, "every_k", {"average"}, "averages models");
  const int64_t every = r.section.get_in_or<int64_t>("every", 2, Range::at_least(1));
  return [every](const StrategyContext& c, const StrategyOptions&) {
    return std::make_unique<EveryKAverage>(c, every);
  };
}
// ------------------------------------------------------------------------------------------------

std::unique_ptr<comm::Reducer> reducer(const Config& section) {
  comm::ReducerRegistry r("reducer");
  comm::register_builtin_reducers(r);
  return r.get(section.get<std::string>("name"))(section);
}

SyncRegistry builtin() {
  SyncRegistry r("sync");
  register_builtin_syncs(r);
  return r;
}

TEST(SyncRegistry, BuiltinNames) {
  EXPECT_EQ(builtin().names(), (std::vector<std::string>{"diloco", "local_sgd", "none", "wagma"}));
}

TEST(SyncRegistry, ANewSyncIsOneFileAndOneLine) {
  SyncRegistry syncs = builtin();
  syncs.add("every_k", read_every_k_average);  // the one line
  Config root = Config::parse(
      "{optimizer: {name: sgd, lr: 0.1}, reducer: {name: average}, sync: {name: every_k, every: "
      "3}}",
      "test.yaml");
  auto red = reducer(root.child("reducer"));
  const StrategyMaker make = read_sync(syncs, root, *red, world().size(), Device::cpu());

  nn::ModelRegistry models("model");
  nn::register_builtin_models(models);
  auto m = models.get("lenet5")(Config::parse("{name: lenet5}", "test"), 7);
  auto params = m->parameters();
  optim::OptimizerRegistry optimizers("optimizer");
  optim::register_builtin_optimizers(optimizers);
  auto opt = optim::make_optimizer(optimizers, root.child("optimizer"));
  root.finish();  // the reader read every key of its section
  auto s = make({params, *opt, world(), *red}, {});
  EXPECT_EQ(s->describe(), "average every 3 steps");
  EXPECT_TRUE(s->optimizer_state_is_local());
  for (int step = 0; step < 3; ++step) {
    m->zero_grad();
    Generator g(100 + 7 * world().rank() + step, 0);  // each rank its own batch
    std::vector<int64_t> labels = {world().rank() % 10, (step + 3) % 10};
    auto out = m->forward({{"image", Tensor::randn({2, 1, 28, 28}, g)},
                           {"label", Tensor::from_vector<int64_t>(labels, {2})}});
    backward(out.loss);
    s->begin_step(step, 0.1f);
    s->end_step(out.loss.value().item());
    EXPECT_EQ(s->replicas_identical(), step == 2) << step;
  }
  // After the third step every rank holds the same (averaged) weights.
  std::vector<float> mine;
  for (const auto& p : params) {
    const auto v = p.var.value().to_vector<float>();
    mine.insert(mine.end(), v.begin(), v.end());
  }
  Tensor in = Tensor::from_vector<float>(mine, {static_cast<int64_t>(mine.size())});
  Tensor all = Tensor::empty({in.numel() * world().size()});
  world().allgather(in, all);
  const auto x = all.to_vector<float>();
  for (int r = 1; r < world().size(); ++r)
    EXPECT_EQ(0, std::memcmp(x.data(), x.data() + r * mine.size(), mine.size() * sizeof(float)))
        << "rank " << r;
}

TEST(SyncRegistry, RefusalsNameTheKey) {
  auto message = [](const std::string& yaml) {
    Config root = Config::parse(yaml, "test.yaml");
    auto red = reducer(root.child("reducer"));
    try {
      read_sync(builtin(), root, *red, 4, Device::cpu());
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  auto expect_has = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << msg << "\nlacks: " << part;
  };
  const std::string unknown = message("{reducer: {name: average}, sync: {name: gossip}}");
  expect_has(unknown, "sync.name (line 1, column ");
  expect_has(unknown, "): unknown sync 'gossip'; known: diloco, local_sgd, none, wagma");
  const std::string group =
      message("{reducer: {name: average}, sync: {name: wagma, group_size: 3}}");
  expect_has(group, "sync.group_size (line 1, column ");
  expect_has(group, "): must be a power of two no larger than the 4 ranks, got 3");
  const std::string red = message("{reducer: {name: sum}, sync: {name: local_sgd, period: 2}}");
  expect_has(red, "reducer.name (line 1, column ");
  expect_has(red, "): sync local_sgd combines");
  const std::string period = message("{reducer: {name: average}, sync: {name: diloco, period: 0}}");
  expect_has(period, "sync.period (line 1, column ");
  expect_has(period, "): must be >= 1, got 0");
}

}  // namespace
}  // namespace ada::sync
