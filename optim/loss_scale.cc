#include "optim/loss_scale.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "base/error.h"

namespace ada::optim {
LossScaler::LossScaler(const LossScaleOptions& options) : options_(options), scale_(options.init) {
  ADA_CHECK_ARG(std::isfinite(options.init) && options.init > 0 && options.init <= kMaxLossScale,
                ConfigError)
      << "loss scale must be a positive number up to 2^64, got " << options.init;
  ADA_CHECK_ARG(options.growth_interval >= 1, ConfigError)
      << "loss scale growth interval must be >= 1 step, got " << options.growth_interval;
}

LossScaler::Outcome LossScaler::update(bool nonfinite) {
  if (!nonfinite) {
    if (options_.dynamic && ++good_steps_ >= options_.growth_interval) {
      scale_ = std::min(kMaxLossScale, scale_ * 2);
      good_steps_ = 0;
    }
    return Outcome::apply;
  }
  good_steps_ = 0;
  if (!options_.dynamic || scale_ <= 1) return Outcome::nonfinite;
  scale_ = std::max(1.0, scale_ / 2);
  ++overflows_;
  return Outcome::overflow;
}

std::string LossScaler::describe() const {
  std::ostringstream s;
  if (options_.dynamic)
    s << "dynamic from " << options_.init << ", x2 after " << options_.growth_interval
      << " good steps, /2 on overflow";
  else
    s << "static " << options_.init;
  return s.str();
}

NamedTensors LossScaler::state() const {
  NamedTensors s;
  s.tensors.emplace_back("scale", Tensor::from_vector<float>({static_cast<float>(scale_)}, {}));
  s.tensors.emplace_back("good_steps", Tensor::from_vector<int64_t>({good_steps_}, {}));
  s.tensors.emplace_back("overflows", Tensor::from_vector<int64_t>({overflows_}, {}));
  return s;
}

void LossScaler::load_state(const NamedTensors& state) {
  if (state.tensors.empty()) return;
  const float scale = state.at("scale").to_vector<float>().at(0);
  ADA_CHECK_ARG(std::isfinite(scale) && scale > 0, IoError)
      << state.source << ": loss scale " << scale
      << " is not a positive number (damaged checkpoint?)";
  // A static scale stays what the config says; a dynamic one goes on from where it was.
  if (options_.dynamic) scale_ = scale;
  good_steps_ = state.at("good_steps").to_vector<int64_t>().at(0);
  overflows_ = state.at("overflows").to_vector<int64_t>().at(0);
}

}  // namespace ada::optim
