// LAMB (You et al. 2019): the Adam direction u = m̂/(√v̂ + ε) + λw (bias-corrected as in adam.h;
// λw only where Param::weight_decay), per-tensor trust ratio ‖w‖/‖u‖ (1 where a norm is 0),
// w −= lr·ratio·u. Parameters without decay (biases, LayerNorm) also skip the ratio unless
// always_adapt, as Google's BERT LAMB, NVIDIA apex and timm do. Keys (name "lamb"): lr (required),
// beta1 (0.9), beta2 (0.999), eps (1e-6), weight_decay (0.01), always_adapt (false).
#pragma once

#include "optim/optimizer.h"

namespace ada::optim {

struct LambOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;  // each in [0, 1)
  double eps = 1e-6;                  // > 0
  double weight_decay = 0.01;         // λ >= 0
  bool always_adapt = false;          // trust ratio also for weight_decay == false parameters
  static LambOptions from_config(const Config& section);
};

class Lamb : public Optimizer {
 public:
  explicit Lamb(const LambOptions& options);
  const LambOptions& options() const { return opt_; }
  // The trust ratio ‖w‖/‖u‖ of the last update of each parameter (1 where not adapted), for
  // logging and tests.
  const std::map<std::string, double>& last_trust_ratios() const { return ratios_; }

 protected:
  void update(const Param& p, const Tensor& grad, Slot& slot, float lr) override;

 private:
  LambOptions opt_;
  std::map<std::string, double> ratios_;
};

}  // namespace ada::optim
