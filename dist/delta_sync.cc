#include "dist/delta_sync.h"

#include <chrono>

#include "core/log.h"
#include "core/ops.h"
#include "core/timeline.h"
#include "dist/step_guard.h"
#include "optim/clip.h"

namespace ada::dist {
namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::vector<Variable> vars_of(const std::vector<Param>& params) {
  std::vector<Variable> v;
  v.reserve(params.size());
  for (const auto& p : params) v.push_back(p.var);
  return v;
}
}  // namespace

DeltaSync::DeltaSync(const StrategyContext& context, const StrategyOptions& options)
    : ctx_(context), options_(options),
      bucketer_(vars_of(context.params), context.world, context.reducer, options.buckets),
      overlapped_(options.clip_grad_norm <= 0 && !options.skip_nonfinite) {
  for (size_t i = 0; i < ctx_.params.size(); ++i) {
    start_.push_back(Tensor::empty(ctx_.params[i].var.value().shape()));
    slots_.push_back(bucketer_.slot(i));
  }
  stepped_.assign(ctx_.params.size(), false);
  if (!overlapped_)
    log_info("model-delta sync runs after backward, not overlapped with it: {} needs every gradient "
             "before the first local step",
             options.clip_grad_norm > 0 ? "train.clip_grad_norm" : "train.on_nonfinite: skip");
}

std::string DeltaSync::describe() const {
  return std::string("model_delta/") + ctx_.reducer.name() + (overlapped_ ? " (overlapped)" : " (after backward)");
}

void DeltaSync::begin_step(int64_t step, float lr) {
  step_ = step;
  lr_ = lr;
  bucketer_.begin_step();
  std::fill(stepped_.begin(), stepped_.end(), false);
}

void DeltaSync::local_step(size_t i) {
  Param& p = ctx_.params[i];
  Tensor& w = p.var.mutable_value();
  start_[i].copy_from(w);
  ctx_.optimizer.step(p, lr_);
  ops::sub_out(w, start_[i], slots_[i]);  // may overwrite the gradient: it is used up
  stepped_[i] = true;
  bucketer_.mark_ready(i);
}

void DeltaSync::on_grad_ready(Variable& param) {
  const size_t i = bucketer_.index_of(param);
  // The gradient must be in the slot's memory or be copied there by the step: the step reads
  // the gradient before the delta overwrites the slot, so both cases are safe.
  local_step(i);
}

StepResult DeltaSync::end_step(double local_loss) {
  StepResult r;
  const auto t0 = Clock::now();
  if (overlapped_) {
    {
      TraceSpan span("optimizer (unreported parameters)", "compute");
      for (size_t i = 0; i < stepped_.size(); ++i)
        if (!stepped_[i]) local_step(i);  // unused by the last backward: stepped with what it has
    }
    const auto tw = Clock::now();
    {
      TraceSpan span("wait for reductions", "comm");
      bucketer_.wait();
    }
    r.exposed_seconds = seconds(tw, Clock::now());
    // The reduced deltas are identical on every rank: a NaN anywhere shows everywhere.
    const auto ta = Clock::now();
    const Agreement a = agree(ctx_.world, local_loss, any_nonfinite(slots_));
    r.comm_seconds = r.exposed_seconds + seconds(ta, Clock::now());
    r.mean_loss = a.mean_loss;
    if (a.nonfinite) on_nonfinite_step(step_, local_loss, /*skip=*/false);  // throws
  } else {
    const Agreement a = agree(ctx_.world, local_loss, any_nonfinite_grad(ctx_.params));
    r.mean_loss = a.mean_loss;
    if (a.nonfinite) {
      on_nonfinite_step(step_, local_loss, options_.skip_nonfinite);
      r.applied = false;
      r.comm_seconds = seconds(t0, Clock::now());
      return r;
    }
    const double agree_s = seconds(t0, Clock::now());
    {
      TraceSpan span("optimizer", "compute");
      if (options_.clip_grad_norm > 0) optim::clip_grad_norm(ctx_.params, options_.clip_grad_norm);
      for (size_t i = 0; i < ctx_.params.size(); ++i) start_[i].copy_from(ctx_.params[i].var.value());
      ctx_.optimizer.step(ctx_.params, lr_);
      for (size_t i = 0; i < ctx_.params.size(); ++i) {
        ops::sub_out(ctx_.params[i].var.value(), start_[i], slots_[i]);
        bucketer_.mark_ready(i);  // buckets go out as they fill
      }
    }
    const auto tw = Clock::now();
    {
      TraceSpan span("wait for reductions", "comm");
      bucketer_.wait();
    }
    r.exposed_seconds = seconds(tw, Clock::now());
    r.comm_seconds = agree_s + r.exposed_seconds;
  }
  TraceSpan span("apply reduced delta", "compute");
  for (size_t i = 0; i < ctx_.params.size(); ++i)
    ops::add_out(start_[i], slots_[i], ctx_.params[i].var.mutable_value());
  return r;
}

}  // namespace ada::dist
