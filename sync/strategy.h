// Strategy: how data-parallel ranks stay in agreement — WHAT is reduced (gradients, model
// deltas), WHEN (every step, overlapped with backward or after it) and AMONG WHOM (the world),
// combined by a comm::Reducer. The trainer runs forward/backward and hands the step to its
// strategy; it knows no reducer details. DESIGN.md §4. Built-in (make_strategy):
//   gradient sync — gradients reduced in buckets while backward runs, then one optimizer step;
//   delta sync    — each rank's local optimizer steps, the per-tensor model delta reduced every
//                   step (Horovod's Adasum scheme, overlapped with backward) or every H steps
//                   (local SGD), optionally followed by an outer optimizer step (DiLoCo);
//   WAGMA         — local steps, models averaged in rotating groups, globally every tau steps,
//                   optionally wait-avoiding.
// Between synchronisations the decentralised ones leave replicas different; replicas_identical()
// says when they agree, and with_average_model() gives evaluation the world-average model.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "comm/bucketer.h"
#include "comm/communicator.h"
#include "comm/reducer.h"
#include "core/parameter.h"
#include "core/serialize.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"

namespace ada::sync {

// What a step's end reports to the trainer.
struct StepResult {
  bool applied = true;         // false: skipped (non-finite loss/gradient, on_nonfinite: skip)
  double comm_seconds = 0;     // time spent in reductions and their waits after backward
  double exposed_seconds = 0;  // of which: waiting for reductions launched during backward
};

struct StrategyOptions {
  double clip_grad_norm = 0;    // > 0: global-norm clipping before the optimizer step
  bool skip_nonfinite = false;  // skip a step whose loss or gradients are NaN/Inf on any rank
  // Loss scaling (null: off). Backward's seed was loss_scale->scale(); the strategy checks,
  // unscales and moves the scale (settle_step in sync/step_guard.h). Not owned.
  optim::LossScaler* loss_scale = nullptr;
  comm::BucketOptions buckets;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // For logs and summaries, e.g. "gradients/adasum".
  virtual std::string describe() const = 0;

  // Starts step `step` at learning rate `lr`, before the first forward. Parameters' gradients
  // have been zeroed.
  virtual void begin_step(int64_t step, float lr) = 0;
  // Whether the last micro-batch's backward should report each parameter's final gradient
  // through on_grad_ready (so work can start while backward goes on).
  virtual bool wants_grad_hook() const = 0;
  virtual void on_grad_ready(Variable& param) { (void)param; }
  // After backward: reduces, steps the optimizer and leaves every rank's parameters as the
  // strategy defines. `local_loss` is this rank's (unscaled) loss. On a non-finite loss or
  // gradient on any rank it throws (naming the step) unless options say skip, or, with dynamic
  // loss scaling, skips the step as an overflow. Collective.
  virtual StepResult end_step(double local_loss) = 0;

  // True when optimizer state differs between ranks (each rank's own must be checkpointed).
  virtual bool optimizer_state_is_local() const = 0;
  // Whether every rank holds the same parameters after the step that just ended (gradient and
  // delta sync: always; local SGD, WAGMA: after their world synchronisations only). Collectives
  // the trainer adds (loss logging, checksums) go at such steps, so they never add a barrier.
  virtual bool replicas_identical() const { return true; }
  // The strategy's own per-rank state for checkpoints (e.g. the anchor of the current period,
  // the outer optimizer's momentum), and its restore; names are the strategy's.
  virtual NamedTensors state() const { return {}; }
  virtual void load_state(const NamedTensors& state) { (void)state; }
  // Runs `fn` with every rank's parameters set to their world average, then restores each
  // rank's own (collective). Replicas already identical: just runs `fn`.
  virtual void with_average_model(const std::function<void()>& fn) { fn(); }
  // End of training: leaves every rank with the same final parameters (collective).
  virtual void finish() {}
  // Counters for the run's summary (e.g. WAGMA's late group steps), this rank's.
  virtual std::map<std::string, double> stats() const { return {}; }
};

// Everything a strategy works on. The references must outlive it.
struct StrategyContext {
  std::vector<Param>& params;  // registration order, identical on every rank
  optim::Optimizer& optimizer;
  comm::Communicator& world;
  comm::Reducer& reducer;
};

// What a run's config asks for, read before anything is built (so Config::finish() sees every
// key read): `sync` (name none | local_sgd | wagma | diloco and its knobs; absent: none) and the
// reducer's target when sync is none.
struct StrategySpec {
  std::string sync = "none";
  comm::ReduceTarget target = comm::ReduceTarget::gradients;  // sync none
  int64_t period = 1;                                         // local_sgd, diloco
  double outer_lr = 0.7, outer_momentum = 0.9;                // diloco
  bool nesterov = true;
  int group_size = 0;  // wagma (0: the default)
  int64_t global_every = 10;
  bool wait_avoiding = true;
};
// reducer.target when the config leaves it out: the reducer's own default (model_delta for adasum),
// except gradients for adasum with optimizer 'sgd' (measured; see strategy.cc).
comm::ReduceTarget default_target(const comm::Reducer& reducer, const std::string& optimizer);
// ConfigError naming the key for impossible values and combinations (e.g. wagma with adasum,
// a non-power-of-two world for wagma, reducer.target with a decentralised sync).
StrategySpec read_strategy_spec(const Config& root, const comm::Reducer& reducer, int world_size);

// Builds the strategy (after rank 0's weights reached every rank: some keep a copy of them).
std::unique_ptr<Strategy> make_strategy(const StrategySpec& spec, const StrategyContext& context,
                                        const StrategyOptions& options);
// Gradient or model-delta sync every step (sync: none).
std::unique_ptr<Strategy> make_strategy(comm::ReduceTarget target, const StrategyContext& context,
                                        const StrategyOptions& options);

}  // namespace ada::sync
