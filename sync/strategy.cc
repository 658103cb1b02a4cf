// The built-in strategies, and the config that chooses one: `sync` (none | local_sgd | wagma |
// diloco) composed with the `reducer` that combines.
#include "sync/strategy.h"

#include "sync/delta_sync.h"
#include "sync/gradient_sync.h"
#include "sync/wagma_sync.h"

namespace ada::sync {

comm::ReduceTarget default_target(const comm::Reducer& reducer, const std::string& optimizer) {
  // Adasum keeps model deltas (Horovod's scheme, the paper's for Adam and LAMB; not yet measured
  // here) for the adaptive optimizers, whose per-rank state shapes the update. With SGD the
  // gradients win: in docs/results/mnist_lenet_scaling (3 seeds, 4-64 ranks) Adasum of gradients
  // ends 0.5-1.7 points above Adasum of model deltas from 8 to 64 ranks, and one delta seed of
  // three diverged at 4 ranks. Local momentum filters each rank's noise before the combine, so
  // the deltas are more parallel (first-level pair cosine at 16 ranks, steps 30/70/90: deltas
  // 0.68/0.74/0.56, gradients 0.73/0.30/0.14) and Adasum averages them where it should add them.
  if (reducer.default_target() == comm::ReduceTarget::model_delta && optimizer == "sgd")
    return comm::ReduceTarget::gradients;
  return reducer.default_target();
}

StrategySpec read_strategy_spec(const Config& root, const comm::Reducer& reducer, int world_size) {
  StrategySpec spec;
  const Config red = root.child("reducer");
  const std::string rname = reducer.name();
  spec.sync = root.has("sync") ? root.child("sync").get_or<std::string>("name", "none") : "none";
  if (spec.sync == "none") {
    const std::string optimizer = root.has("optimizer")
                                      ? root.child("optimizer").get_or<std::string>("name", "")
                                      : std::string();
    spec.target = red.has("target")
                      ? comm::target_from_name(red.get<std::string>("target"), red.where("target"))
                      : default_target(reducer, optimizer);
    return spec;
  }
  const Config s = root.child("sync");
  ADA_CHECK_ARG(!red.has("target"), ConfigError)
      << red.where("target") << ": applies only with sync.name: none; sync " << spec.sync
      << (spec.sync == "wagma" ? " averages models" : " reduces the model delta of its local steps")
      << "; remove it";
  if (spec.sync == "local_sgd" || spec.sync == "diloco") {
    ADA_CHECK_ARG(rname == "average" || rname == "adasum", ConfigError)
        << red.where("name") << ": sync " << spec.sync
        << " combines the ranks' model deltas with average or adasum, not '" << rname
        << "' (a sum of deltas moves the model world x the mean)";
    ADA_CHECK_ARG(s.has("period"), ConfigError)
        << s.where("period") << ": sync " << spec.sync
        << " needs period (H, the local steps between reductions)";
    spec.period = s.get<int64_t>("period");
    ADA_CHECK_ARG(spec.period >= 1, ConfigError)
        << s.where("period") << ": must be >= 1, got " << spec.period;
    if (spec.sync == "diloco") {
      spec.outer_lr = s.get_or<double>("outer_lr", 0.7);
      spec.outer_momentum = s.get_or<double>("outer_momentum", 0.9);
      spec.nesterov = s.get_or<bool>("nesterov", true);
      ADA_CHECK_ARG(spec.outer_lr > 0, ConfigError)
          << s.where("outer_lr") << ": must be > 0, got " << spec.outer_lr;
      ADA_CHECK_ARG(spec.outer_momentum >= 0 && spec.outer_momentum < 1, ConfigError)
          << s.where("outer_momentum") << ": must be in [0, 1), got " << spec.outer_momentum;
    }
    return spec;
  }
  if (spec.sync == "wagma") {
    ADA_CHECK_ARG(rname == "average", ConfigError)
        << red.where("name")
        << ": sync wagma averages models within groups; set reducer.name: average, not '" << rname
        << "'";
    spec.group_size =
        s.has("group_size") ? s.get<int>("group_size") : default_wagma_group_size(world_size);
    spec.global_every = s.get_or<int64_t>("global_every", 10);
    spec.wait_avoiding = s.get_or<bool>("wait_avoiding", true);
    try {
      WagmaSchedule check(world_size, spec.group_size, spec.global_every);
    } catch (const ConfigError& e) {
      ADA_THROW(ConfigError) << s.where() << ": " << e.what();
    }
    return spec;
  }
  ADA_THROW(ConfigError) << s.where("name") << ": unknown sync '" << spec.sync
                         << "'; known: diloco, local_sgd, none, wagma";
  return spec;
}

std::unique_ptr<Strategy> make_strategy(comm::ReduceTarget target, const StrategyContext& context,
                                        const StrategyOptions& options) {
  if (target == comm::ReduceTarget::model_delta)
    return std::make_unique<DeltaSync>(context, options);
  return std::make_unique<GradientSync>(context, options);
}

std::unique_ptr<Strategy> make_strategy(const StrategySpec& spec, const StrategyContext& context,
                                        const StrategyOptions& options) {
  if (spec.sync == "none") return make_strategy(spec.target, context, options);
  if (spec.sync == "wagma") {
    WagmaOptions w;
    w.group_size = spec.group_size;
    w.global_every = spec.global_every;
    w.wait_avoiding = spec.wait_avoiding;
    return std::make_unique<WagmaSync>(context, options, w);
  }
  DeltaSyncOptions d;
  d.name = spec.sync;
  d.period = spec.period;
  d.outer = spec.sync == "diloco";
  d.outer_lr = spec.outer_lr;
  d.outer_momentum = spec.outer_momentum;
  d.nesterov = spec.nesterov;
  return std::make_unique<DeltaSync>(context, options, d);
}

}  // namespace ada::sync
