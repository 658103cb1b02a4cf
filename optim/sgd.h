// Momentum-SGD in PyTorch's convention (dampening 0): g' = g + λw (λ only for parameters with
// weight_decay), v = μv + g' (v = g' on a parameter's first update), w −= lr·v; with Nesterov,
// w −= lr·(g' + μv). μ = 0 is plain SGD and keeps no buffer. Config keys (registry name "sgd"):
// lr (required), momentum (0.9), weight_decay (0), nesterov (false).
#pragma once

#include "core/ops.h"
#include "optim/optimizer.h"

namespace ada::optim {

struct SgdOptions {
  double lr = 0.1;
  double momentum = 0.9;      // μ in [0, 1)
  double weight_decay = 0.0;  // λ >= 0, coupled (added to the gradient)
  bool nesterov = false;      // needs μ > 0
  // Reads and checks every key above; ConfigError names the key.
  static SgdOptions from_config(const Config& section);
};

class Sgd : public Optimizer {
 public:
  explicit Sgd(const SgdOptions& options);
  const SgdOptions& options() const { return opt_; }

 protected:
  void update(const Param& p, const Tensor& grad, Slot& slot, float lr) override;
  void update_all(const std::vector<Item>& items, float lr) override;

 private:
  SgdOptions opt_;
  std::vector<ops::SgdEntry> entries_;  // update_all's list, kept across steps
};

}  // namespace ada::optim
