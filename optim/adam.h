// Adam and AdamW as PyTorch computes them, t counted per parameter: m = β1·m + (1−β1)·g,
// v = β2·v + (1−β2)·g², w −= lr·m̂/(√v̂ + ε) with m̂ = m/(1−β1^t), √v̂ = √v/√(1−β2^t). Adam adds λw
// to g (coupled L2); AdamW decays decoupled, w −= lr·λ·w first; λ only where Param::weight_decay.
// Keys (registry names "adam", "adamw"): lr (required), beta1 (0.9), beta2 (0.999), eps (1e-8),
// weight_decay (adam 0, adamw 0.01).
#pragma once

#include "core/ops.h"
#include "optim/optimizer.h"

namespace ada::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;  // each in [0, 1)
  double eps = 1e-8;                  // > 0
  double weight_decay = 0.0;          // λ >= 0
  bool decoupled = false;             // false: Adam (coupled L2); true: AdamW
  // Reads and checks every key above (decoupled comes from the registry name, not the config).
  static AdamOptions from_config(const Config& section, bool decoupled);
};

class Adam : public Optimizer {
 public:
  explicit Adam(const AdamOptions& options);
  const AdamOptions& options() const { return opt_; }

 protected:
  void update(const Param& p, const Tensor& grad, Slot& slot, float lr) override;
  void update_all(const std::vector<Item>& items, float lr) override;

 private:
  AdamOptions opt_;
  std::vector<ops::AdamEntry> entries_;  // update_all's list, kept across steps
};

}  // namespace ada::optim
