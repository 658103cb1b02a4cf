// Delta sync: each rank takes its own optimizer steps; every `period` steps the per-tensor model
// delta since the last synchronisation is reduced and every rank sets anchor = anchor +
// outer(reduced delta), weights = anchor. Period 1: Horovod's Adasum scheme, overlapped with
// backward; period H: local SGD; with an outer optimizer: DiLoCo. docs/architecture.md, section 4.
#pragma once

#include <vector>

#include "sync/registry.h"
#include "sync/strategy.h"

namespace ada::sync {

struct DeltaSyncOptions {
  int64_t period = 1;     // local steps between reductions (H)
  bool outer = false;     // DiLoCo's outer optimizer on the reduced delta
  double outer_lr = 0.7;  // DiLoCo's defaults
  double outer_momentum = 0.9;
  bool nesterov = true;
  std::string name = "model_delta";  // for describe(): model_delta, local_sgd, diloco
};

class DeltaSync : public Strategy, public CarriedState {
 public:
  DeltaSync(const StrategyContext& context, const StrategyOptions& options,
            const DeltaSyncOptions& delta = {});
  void begin_step(int64_t step, float lr) override;
  void on_grad_ready(Variable& param) override;
  StepResult end_step(double local_loss) override;
  void finish() override;
  // Period 1 without an outer optimizer carries nothing from step to step.
  CarriedState* carried() override { return delta_.period > 1 || delta_.outer ? this : nullptr; }
  bool replicas_identical() const override { return synced_; }
  NamedTensors state() const override;
  void load_state(const NamedTensors& state) override;
  void with_average_model(const std::function<void()>& fn) override;

 private:
  // Parameter i (period 1, overlapped): anchor = w; local step; slot = w - anchor; the slot goes
  // out.
  void local_step(size_t i);
  // Every slot holds its delta: reduce them all, then anchor and weights move (collective).
  double synchronise();
  void apply_reduced();

  StrategyContext ctx_;
  StrategyOptions options_;
  DeltaSyncOptions delta_;
  comm::GradBucketer bucketer_;
  bool overlapped_;
  std::vector<Tensor>
      anchor_;  // weights at the last synchronisation (start of the step if period 1)
  std::vector<Tensor> slots_;  // each parameter's bucket slot (its delta, then the reduced delta)
  std::vector<Tensor> momentum_;  // the outer optimizer's, when there is one
  std::vector<bool> stepped_;
  int64_t step_ = 0;
  float lr_ = 0;
  bool synced_ = true;  // replicas agree after the step that just ended
};

// sync: local_sgd (sync.period H >= 1) and diloco (also outer_lr, outer_momentum, nesterov).
StrategyMaker read_local_sgd(const SyncRequest& request);
StrategyMaker read_diloco(const SyncRequest& request);

}  // namespace ada::sync
