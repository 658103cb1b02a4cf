// What every strategy does at the end of a step before it commits an update: agree across ranks
// on the mean loss and on whether any rank saw a non-finite loss or gradient (one small
// allreduce), and turn a non-finite step into the configured outcome (stop with an error
// naming the step, or skip).
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "core/parameter.h"
#include "core/tensor.h"
#include "sync/strategy.h"

namespace ada::sync {

struct Agreement {
  double mean_loss = 0;
  bool nonfinite = false;  // on at least one rank
};

// Collective: every rank passes its loss and whether it saw a non-finite value.
Agreement agree(comm::Communicator& world, double local_loss, bool local_nonfinite);

// True when any defined gradient of `params` holds NaN/Inf.
bool any_nonfinite_grad(const std::vector<Param>& params);
// True when any of `tensors` holds NaN/Inf.
bool any_nonfinite(const std::vector<Tensor>& tensors);

// `step`: the step's index from 0 (a strategy's); the messages count from 1, as the log does.
// Settles a step once the strategy knows whether it is non-finite (`nonfinite`: agreed across
// ranks or this rank's own, as the strategy defines) and before its optimizer step. Without loss
// scaling: a non-finite step goes to on_nonfinite_step. With it: the scaler records the outcome;
// a finite step has its gradients divided by the scale they were computed at; a dynamic overflow
// is skipped (one log line) with the scale halved; an overflow at scale 1 or with a static scale
// goes to on_nonfinite_step. Returns whether the optimizer step goes ahead.
bool settle_step(int64_t step, double local_loss, bool nonfinite, const StrategyOptions& options,
                 const std::vector<Param>& params);

// For a non-finite step: throws (naming `step` and the way out) unless `skip`; returns so the
// caller skips the update otherwise (and logs a warning). Skipping throws too when the weights in
// `params` are themselves NaN/Inf: every later step would be skipped, to the end of the run.
void on_nonfinite_step(int64_t step, double local_loss, bool skip,
                       const std::vector<Param>& params);

}  // namespace ada::sync
