// Gradient sync: every step, each parameter's gradient lands in its bucket (gradients are bucket
// views) and a complete bucket is reduced on the communication thread while backward goes on;
// after backward the optimizer takes one step with the reduced gradients, identically on every
// rank (so optimizer state stays identical too). The DDP/Horovod-allreduce scheme.
// Parameters on a GPU at one rank (the only GPU layout until the NCCL communicator lands) have
// nothing to reduce: their gradients stay on the device where backward left them.
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
