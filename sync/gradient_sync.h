// Gradient sync: every step, each parameter's gradient lands in its bucket (gradients are bucket
// views) and a complete bucket is reduced on the communication thread while backward goes on;
// after backward the optimizer takes one step with the reduced gradients, identically on every
// rank (so optimizer state stays identical too). The DDP/Horovod-allreduce scheme.
// At one rank the reducers return at once; on GPUs the buckets live on the device and several
// ranks reduce them over NCCL or through MPI staging.
#pragma once

#include "sync/strategy.h"

namespace ada::sync {

class GradientSync : public Strategy {
 public:
  GradientSync(const StrategyContext& context, const StrategyOptions& options);
  void begin_step(int64_t step, float lr) override;
  void on_grad_ready(Variable& param) override;
  StepResult end_step(double local_loss) override;

 private:
  StrategyContext ctx_;
  StrategyOptions options_;
  comm::GradBucketer bucketer_;  // on the parameters' device
  int64_t step_ = 0;
  float lr_ = 0;
};

}  // namespace ada::sync
