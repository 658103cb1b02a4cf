// LAMB (You et al. 2019): the Adam direction u = m̂/(√v̂ + ε) + λw (bias-corrected as in adam.h;
// λw only where Param::weight_decay), per-tensor trust ratio ‖w‖/‖u‖ (1 where a norm is 0),
// w −= lr·ratio·u. Parameters without decay (biases, LayerNorm) also skip the ratio unless
// always_adapt, as Google's BERT LAMB, NVIDIA apex and timm do. Keys (name "lamb"): lr (required),
// beta1 (0.9), beta2 (0.999), eps (1e-6), weight_decay (0.01), always_adapt (false).
#pragma once

#include "core/ops.h"
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
  // logging and tests; rounded to f32. The ratios stay on the parameters' device until this is
  // called (it waits for the device).
  std::map<std::string, double> last_trust_ratios() const;

 protected:
  void update(const Param& p, const Tensor& grad, Slot& slot, float lr) override;
  void update_all(const std::vector<Item>& items, float lr) override;

 private:
  // The slot in ratios_ of parameter `name` on `device`, growing ratios_ for a new name.
  int64_t ratio_slot(const std::string& name, Device device);
  LambOptions opt_;
  std::map<std::string, int64_t> ratio_slots_;  // parameter name -> index into ratios_
  Tensor ratios_;                               // f32 [names], on the parameters' device
  Tensor scratch_;                              // the CPU path's direction buffer
  std::vector<ops::LambEntry> entries_;         // update_all's list, kept across steps
};

}  // namespace ada::optim
