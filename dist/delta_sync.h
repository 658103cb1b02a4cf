// Delta sync (Horovod's Adasum scheme for stateful optimizers): each rank takes its own optimizer
// step with its own gradient, and the per-tensor model delta (new - start) is reduced; every rank
// then sets weights = start + reduced delta, so replicas stay identical while optimizer state
// (momentum, Adam moments) stays local to each rank.
//
// Overlapped (the default): when a parameter's gradient is final, its local step runs at once
// and its delta is written straight into its bucket slot (the gradient's own memory: the slot
// is the gradient's bucket view), so buckets go out while backward goes on. Memory: one extra
// copy of the weights (`start`), nothing allocated per step. Global-norm clipping needs every
// gradient before any step, and skipping a non-finite step needs the check before any step: with
// either, the synchronous path runs instead (all local steps after backward, then the deltas go
// out bucket by bucket), and one log line says so. Both paths give the same bits.
#pragma once

#include <vector>

#include "dist/strategy.h"

namespace ada::dist {

class DeltaSync : public Strategy {
 public:
  DeltaSync(const StrategyContext& context, const StrategyOptions& options);
  std::string describe() const override;
  void begin_step(int64_t step, float lr) override;
  bool wants_grad_hook() const override { return overlapped_; }
  void on_grad_ready(Variable& param) override;
  StepResult end_step(double local_loss) override;
  bool optimizer_state_is_local() const override { return true; }
  bool overlapped() const { return overlapped_; }

 private:
  // Parameter i: start = w; local optimizer step; slot = w - start; the slot goes out.
  void local_step(size_t i);

  StrategyContext ctx_;
  StrategyOptions options_;
  comm::GradBucketer bucketer_;
  bool overlapped_;
  std::vector<Tensor> start_;  // the weights at the start of the step, one per parameter
  std::vector<Tensor> slots_;  // each parameter's bucket slot (its delta, then the reduced delta)
  std::vector<bool> stepped_;
  int64_t step_ = 0;
  float lr_ = 0;
};

}  // namespace ada::dist
