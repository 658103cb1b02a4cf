// What every strategy does at the end of a step before it commits an update: agree across ranks
// on the mean loss and on whether any rank saw a non-finite loss or gradient (one small
// allreduce), and turn a non-finite step into the configured outcome (stop with an error
// naming the step, or skip).
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "core/parameter.h"
#include "core/tensor.h"

namespace ada::dist {

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

// For a non-finite step: throws (naming `step` and the way out) unless `skip`; returns so the
// caller skips the update otherwise (and logs a warning).
void on_nonfinite_step(int64_t step, double local_loss, bool skip);

}  // namespace ada::dist
