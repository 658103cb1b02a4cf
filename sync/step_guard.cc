#include "sync/step_guard.h"

#include <cmath>

#include "base/log.h"
#include "core/ops.h"

namespace ada::sync {

Agreement agree(comm::Communicator& world, double local_loss, bool local_nonfinite) {
  const bool bad = local_nonfinite || !std::isfinite(local_loss);
  double v[2] = {bad ? 0.0 : local_loss, bad ? 1.0 : 0.0};
  world.allreduce(v, 2);
  return {v[0] / world.size(), v[1] > 0};
}

namespace {
std::vector<Tensor> grads_of(const std::vector<Param>& params) {
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params) grads.push_back(p.var.grad());  // undefined ones are skipped
  return grads;
}
}  // namespace

bool any_nonfinite_grad(const std::vector<Param>& params) {
  return !ops::all_finite(grads_of(params));
}

bool any_nonfinite(const std::vector<Tensor>& tensors) {
  return !ops::all_finite(tensors);
}

bool settle_step(int64_t step, double local_loss, bool nonfinite, const StrategyOptions& options,
                 const std::vector<Param>& params) {
  optim::LossScaler* scaler = options.loss_scale;
  if (!scaler) {
    if (nonfinite) on_nonfinite_step(step, local_loss, options.skip_nonfinite, params);
    return !nonfinite;
  }
  const double scale = scaler->scale();
  switch (scaler->update(nonfinite)) {
    case optim::LossScaler::Outcome::apply:
      if (scale != 1.0) {
        ops::scale_(grads_of(params), static_cast<float>(1.0 / scale));
      }
      return true;
    case optim::LossScaler::Outcome::overflow:
      log_info("step {}: gradient overflow at loss scale {}: step skipped, loss scale now {}",
               step + 1, scale, scaler->scale());
      return false;
    case optim::LossScaler::Outcome::nonfinite:
      on_nonfinite_step(step, local_loss, options.skip_nonfinite, params);
      return false;
  }
  return false;
}

void on_nonfinite_step(int64_t step, double local_loss, bool skip,
                       const std::vector<Param>& params) {
  ADA_CHECK_ARG(skip, Error)
      << "step " << step + 1
      << ": the loss or a gradient is NaN/Inf on at least one rank (loss here " << local_loss
      << "); lower the learning rate, enable "
      << "train.clip_grad_norm, or set train.on_nonfinite: skip";
  std::vector<Tensor> weights;
  weights.reserve(params.size());
  for (const auto& p : params) weights.push_back(p.var.value());
  ADA_CHECK_ARG(ops::all_finite(weights), Error)
      << "step " << step + 1 << ": the model's weights are NaN/Inf on this rank (an earlier step's "
      << "update made them so), so train.on_nonfinite: skip would skip every step to the end; "
      << "lower the learning rate or enable train.clip_grad_norm, and resume from a checkpoint "
      << "written before the loss became NaN";
  log_warn("step {}: non-finite loss or gradient on at least one rank, step skipped", step + 1);
}

}  // namespace ada::sync
