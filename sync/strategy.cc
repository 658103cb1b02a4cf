// The every-step syncs (sync: none): gradient or model-delta sync, by reducer.target.
#include "sync/strategy.h"

#include "sync/delta_sync.h"
#include "sync/gradient_sync.h"

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

comm::ReduceTarget read_target(const Config& red, const comm::Reducer& reducer,
                               const std::string& optimizer) {
  return red.has("target")
             ? comm::target_from_name(red.get<std::string>("target"), red.where("target"))
             : default_target(reducer, optimizer);
}

std::unique_ptr<Strategy> make_strategy(comm::ReduceTarget target, const StrategyContext& context,
                                        const StrategyOptions& options) {
  if (target == comm::ReduceTarget::model_delta)
    return std::make_unique<DeltaSync>(context, options);
  return std::make_unique<GradientSync>(context, options);
}

}  // namespace ada::sync
