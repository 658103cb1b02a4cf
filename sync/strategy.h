// Strategy: how data-parallel ranks stay in agreement — WHAT is reduced (gradients, model
// deltas, models), WHEN (every step, overlapped with backward or after it, every H steps) and
// AMONG WHOM (the world, rotating groups), combined by a comm::Reducer. The trainer hands it the
// step's events and knows no reducer details. The built-in syncs and how a config picks one:
// sync/registry.h; the design: docs/architecture.md.
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

// Everything a strategy works on. The references must outlive it.
struct StrategyContext {
  std::vector<Param>& params;  // registration order, identical on every rank
  optim::Optimizer& optimizer;
  comm::Communicator& world;
  comm::Reducer& reducer;
};

// What some strategies carry from one step to the next: replicas that differ between world
// synchronisations (local SGD, WAGMA) or an outer optimizer (DiLoCo).
class CarriedState {
 public:
  virtual ~CarriedState() = default;
  // Whether every rank holds the same parameters after the step that just ended. Collectives
  // the trainer adds (loss logging, checksums) go at such steps, so they never add a barrier.
  virtual bool replicas_identical() const = 0;
  // This rank's state for checkpoints (names are the strategy's), and its restore.
  virtual NamedTensors state() const = 0;
  virtual void load_state(const NamedTensors& state) = 0;
  // Runs `fn` with every rank's parameters set to their world average, then restores each
  // rank's own (collective); replicas already identical: just runs `fn`.
  virtual void with_average_model(const std::function<void()>& fn) = 0;
  // Counters for the run's summary (e.g. WAGMA's late group steps), this rank's.
  virtual std::map<std::string, double> stats() const { return {}; }
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  // The step's events. begin_step: before the first forward, gradients zeroed.
  // on_grad_ready: each parameter's final gradient of the last micro-batch, while backward goes
  // on, when overlaps_backward(). end_step: after backward; reduces, steps the optimizer and
  // leaves every rank's parameters as the strategy defines; `local_loss` is this rank's
  // (unscaled) loss; a non-finite loss or gradient on any rank throws (naming the step) unless
  // options say skip, or, with dynamic loss scaling, skips the step as an overflow. Collective.
  virtual void begin_step(int64_t step, float lr) = 0;
  virtual void on_grad_ready(Variable& param) { (void)param; }
  virtual StepResult end_step(double local_loss) = 0;
  // End of training: leaves every rank with the same final parameters (collective).
  virtual void finish() {}
  // What the strategy carries between steps; null when nothing (gradient sync, model deltas).
  virtual CarriedState* carried() { return nullptr; }
  const CarriedState* carried() const { return const_cast<Strategy*>(this)->carried(); }

  // For logs and summaries, e.g. "gradients/adasum".
  const std::string& describe() const { return description_; }
  bool overlaps_backward() const { return overlaps_backward_; }
  // Whether end_step gives the same result when on_grad_ready was never called (the hooks only
  // start work early): a step captured as a CUDA graph calls none (train.cuda_graphs).
  bool hooks_optional() const { return !overlaps_backward_ || hooks_optional_; }
  // True when optimizer state differs between ranks (each rank's own must be checkpointed).
  bool optimizer_state_is_local() const { return local_optimizer_state_; }

  // The optional state, answered for every strategy.
  bool replicas_identical() const { return !carried() || carried()->replicas_identical(); }
  NamedTensors state() const { return carried() ? carried()->state() : NamedTensors{}; }
  void load_state(const NamedTensors& s) {
    if (carried()) carried()->load_state(s);
  }
  void with_average_model(const std::function<void()>& fn) {
    carried() ? carried()->with_average_model(fn) : fn();
  }
  std::map<std::string, double> stats() const {
    return carried() ? carried()->stats() : std::map<std::string, double>{};
  }

 protected:
  std::string description_;
  bool overlaps_backward_ = false;
  bool hooks_optional_ = false;
  bool local_optimizer_state_ = false;
};

// reducer.target when the config leaves it out: the reducer's own default (model_delta for
// adasum), except gradients for adasum with optimizer 'sgd' (measured; see strategy.cc).
comm::ReduceTarget default_target(const comm::Reducer& reducer, const std::string& optimizer);
// reducer.target as `reducer_section` sets it, else default_target().
comm::ReduceTarget read_target(const Config& reducer_section, const comm::Reducer& reducer,
                               const std::string& optimizer);

// Gradient or model-delta sync every step (sync: none).
std::unique_ptr<Strategy> make_strategy(comm::ReduceTarget target, const StrategyContext& context,
                                        const StrategyOptions& options);

}  // namespace ada::sync
