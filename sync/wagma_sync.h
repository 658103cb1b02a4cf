// WAGMA-SGD as a strategy (Li et al., TPDS 2021): each rank steps its optimizer with its own
// gradient; then its model is averaged within its group of the iteration (WagmaSchedule), or,
// every tau-th iteration, over the world (after which all replicas are identical). Gradients and
// optimizer state stay local. Wait-avoiding or synchronous group averages: sync/wagma_agent.h.
#pragma once

#include <memory>

#include "sync/model_average.h"
#include "sync/registry.h"
#include "sync/strategy.h"
#include "sync/wagma_agent.h"

namespace ada::sync {

struct WagmaOptions {
  int group_size = 0;         // S; 0: 2^ceil(log2(P)/2) (sqrt(P) for P = 4^k, as in the paper)
  int64_t global_every = 10;  // tau (the paper: 10 for ResNet-50, 8 for the Transformer)
  bool wait_avoiding = true;
};

class WagmaSync : public Strategy, public CarriedState {
 public:
  WagmaSync(const StrategyContext& context, const StrategyOptions& options,
            const WagmaOptions& wagma);
  void begin_step(int64_t step, float lr) override;
  StepResult end_step(double local_loss) override;
  void finish() override;
  CarriedState* carried() override { return this; }
  bool replicas_identical() const override { return synced_; }
  NamedTensors state() const override;
  void load_state(const NamedTensors& state) override;
  void with_average_model(const std::function<void()>& fn) override;
  std::map<std::string, double> stats() const override {
    return {{"wagma_group_steps", static_cast<double>(agent_->group_steps())},
            {"wagma_late_group_steps", static_cast<double>(agent_->late_steps())}};
  }
  WagmaAgent& agent() { return *agent_; }

 private:
  StrategyContext ctx_;
  StrategyOptions options_;
  WagmaOptions wagma_;
  FlatModel flat_;
  std::unique_ptr<WagmaAgent> agent_;
  int64_t step_ = 0;
  float lr_ = 0;
  bool synced_ = true;
  bool finished_ = false;
  bool started_ = false;
};

// S = 2^ceil(log2(P) / 2).
int default_wagma_group_size(int ranks);

// sync: wagma (group_size, global_every, wait_avoiding).
StrategyMaker read_wagma(const SyncRequest& request);

}  // namespace ada::sync
