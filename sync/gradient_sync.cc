#include "sync/gradient_sync.h"

#include "base/stopwatch.h"
#include "base/timeline.h"
#include "optim/clip.h"
#include "sync/step_guard.h"

namespace ada::sync {

GradientSync::GradientSync(const StrategyContext& context, const StrategyOptions& options)
    : ctx_(context),
      options_(options),
      bucketer_(variables_of(context.params), context.world, context.reducer, options.buckets) {
  description_ = "gradients/" + ctx_.reducer.name();
  overlaps_backward_ = true;
  hooks_optional_ = true;  // finish() reduces the buckets backward did not start
}

void GradientSync::begin_step(int64_t step, float lr) {
  step_ = step;
  lr_ = lr;
  bucketer_.begin_step();
}

void GradientSync::on_grad_ready(Variable& param) {
  bucketer_.on_grad_ready(param);
}

StepResult GradientSync::end_step(double local_loss) {
  StepResult r;
  const Stopwatch comm;
  {
    TraceSpan span("wait for reductions", "comm");
    bucketer_.finish();  // launches what backward did not, waits for every bucket
  }
  r.exposed_seconds = comm.seconds();
  // The reduced gradients are identical on every rank (checked once per bucket); the loss may
  // not be.
  const Agreement a = agree(ctx_.world, local_loss, !bucketer_.all_finite());
  r.comm_seconds = comm.seconds();
  if (!settle_step(step_, local_loss, a.nonfinite, options_, ctx_.params)) {
    r.applied = false;
    return r;
  }
  TraceSpan span("optimizer", "compute");
  if (options_.clip_grad_norm > 0) optim::clip_grad_norm(ctx_.params, options_.clip_grad_norm);
  ctx_.optimizer.step(ctx_.params, lr_);
  return r;
}

}  // namespace ada::sync
