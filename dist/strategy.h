// Strategy: how data-parallel ranks stay in agreement — WHAT is reduced (gradients, model
// deltas), WHEN (every step, overlapped with backward or after it) and AMONG WHOM (the world),
// combined by a comm::Reducer. The trainer runs forward/backward and hands the step to its
// strategy; it knows no reducer details. DESIGN.md §4. Built-in (make_strategy):
//   gradient sync — gradients reduced in buckets while backward runs, then one optimizer step;
//   delta sync    — each rank's local optimizer step, its per-tensor delta reduced (Horovod's
//                   Adasum scheme), overlapped with backward when the step allows it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/bucketer.h"
#include "comm/communicator.h"
#include "comm/reducer.h"
#include "core/config.h"
#include "core/parameter.h"
#include "core/serialize.h"
#include "optim/optimizer.h"

namespace ada::dist {

// What a step's end reports to the trainer.
struct StepResult {
  bool applied = true;        // false: skipped (non-finite loss/gradient, on_nonfinite: skip)
  double mean_loss = 0;       // the loss averaged over ranks
  double comm_seconds = 0;    // time spent in reductions and their waits after backward
  double exposed_seconds = 0; // of which: waiting for reductions launched during backward
};

struct StrategyOptions {
  double clip_grad_norm = 0;    // > 0: global-norm clipping before the optimizer step
  bool skip_nonfinite = false;  // skip a step whose loss or gradients are NaN/Inf on any rank
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
  // strategy defines. `local_loss` is this rank's loss. On a non-finite loss or gradient on any
  // rank it throws (naming the step) unless options say skip. Collective.
  virtual StepResult end_step(double local_loss) = 0;

  // True when optimizer state differs between ranks (each rank's own must be checkpointed).
  virtual bool optimizer_state_is_local() const = 0;
};

// Everything a strategy works on. The references must outlive it.
struct StrategyContext {
  std::vector<Param>& params;  // registration order, identical on every rank
  optim::Optimizer& optimizer;
  comm::Communicator& world;
  comm::Reducer& reducer;
};

// The strategy for `target` (gradients | model_delta) with `options`.
std::unique_ptr<Strategy> make_strategy(comm::ReduceTarget target, const StrategyContext& context,
                                        const StrategyOptions& options);

}  // namespace ada::dist
